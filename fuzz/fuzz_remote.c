/* libFuzzer target: what the remote tier parses. The first byte picks:
 *   even  the rest is a remote URL: it parses or fails with a message; a
 *         URL that parses masks to its text with the credentials as "***";
 *         read as a list of URLs, each one that parses shows in the list's
 *         masked text as it shows alone;
 *   odd   the rest is a value a remote returned for a fixed key: unwrapping
 *         (with and without a fleet secret) and decoding it must never
 *         read out of bounds, and an entry it accepts with the secret must
 *         carry the MAC that secret makes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/object.h"
#include "store/remote/remote.h"
#include "store/seal.h"

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "violated: %s\n", #c); abort(); } } while (0)

static void check_list(const char *list)
{
    static char masked[16384]; /* each URL's masked form is at most 3 bytes longer, plus a space */
    char one[4096];
    fi_remote_config config;
    int rc;
    REQUIRE(fi_remote_url_masked(masked, sizeof masked, list) == 0);
    for (const char *cursor = list; (rc = fi_remote_list_next(one, sizeof one, &cursor)) != 0;)
        if (rc > 0 && fi_remote_config_parse(&config, one) == 0)
            REQUIRE(strstr(masked, config.url) != NULL);
    (void)fi_remote_list_check(list);
}

static void check_url(const uint8_t *data, size_t size)
{
    char url[4096], masked[512];
    fi_remote_config config;
    if (size >= sizeof url) size = sizeof url - 1;
    memcpy(url, data, size);
    url[size] = '\0';
    check_list(url);
    if (fi_remote_config_parse(&config, url) < 0) {
        REQUIRE(fi_last_error()[0] != '\0');
        return;
    }
    REQUIRE(fi_remote_url_masked(masked, sizeof masked, url) == 0);
    REQUIRE(strcmp(masked, config.url) == 0);
    /* The mask keeps the host and what it knows is not secret; the
     * credentials (user and password) become "***". (Whether the password's
     * text shows elsewhere, say in a host of the same digits, is for the
     * tests of chosen URLs: test_remote_redis.) */
    if (config.password[0]) REQUIRE(strstr(masked, "***@") != NULL);
    REQUIRE(strlen(masked) <= strlen(url) + 3);
}

static void check_value(const uint8_t *data, size_t size)
{
    static const uint8_t key[16] = {0x42, 1, 2, 3};
    static fi_seal_key seal;
    static int ready;
    const void *entry, *payload;
    size_t entry_size;
    fi_object_header hdr;
    char why[256];
    if (!ready) ready = fi_seal_key_derive(&seal, "fuzzing secret, long enough") == 0;
    REQUIRE(ready);
    uint8_t *copy = malloc(size ? size : 1); /* exact size: ASan sees over-reads */
    memcpy(copy, data, size);
    if (fi_seal_unwrap(&entry, &entry_size, NULL, key, copy, size, why, sizeof why) == FI_OBJECT_OK)
        (void)fi_object_decode(entry, entry_size, key, &hdr, &payload, why, sizeof why);
    if (fi_seal_unwrap(&entry, &entry_size, &seal, key, copy, size, why, sizeof why) == FI_OBJECT_OK)
        REQUIRE(size >= FI_SEAL_OVERHEAD &&
                fi_seal_mac_ok(copy + 8, &seal, key, entry, entry_size));
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    if (data[0] % 2 == 0) check_url(data + 1, size - 1);
    else check_value(data + 1, size - 1);
    return 0;
}
