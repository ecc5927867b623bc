/* Cache-key computation and its "explain" listing (see key.h). */
#define XXH_STATIC_LINKING_ONLY
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/error.h"
#include "core/key.h"
#include "store/store.h"

typedef struct key_hasher {
    XXH3_state_t state;
    void (*explain)(void *user, const char *text);
    void *user;
} key_hasher;

static void hash_field(key_hasher *h, const char *tag, const void *data, size_t size)
{
    uint8_t length[8];
    for (int i = 0; i < 8; i++) length[i] = (uint8_t)((uint64_t)size >> (8 * i));
    XXH3_128bits_update(&h->state, tag, strlen(tag) + 1);
    XXH3_128bits_update(&h->state, length, sizeof length);
    XXH3_128bits_update(&h->state, data, size);
    if (!h->explain) return;
    char line[512];
    int printable = size <= 64;
    for (size_t i = 0; printable && i < size; i++)
        printable = ((const char *)data)[i] >= 32 && ((const char *)data)[i] < 127;
    if (printable)
        snprintf(line, sizeof line, "%-28s %6zu bytes  \"%.*s\"\n", tag, size, (int)size,
                 (const char *)data);
    else
        snprintf(line, sizeof line, "%-28s %6zu bytes  xxh3-64 %016llx\n", tag, size,
                 (unsigned long long)XXH3_64bits(data, size));
    h->explain(h->user, line);
}

static void hash_string(key_hasher *h, const char *tag, const char *text)
{
    hash_field(h, tag, text ? text : "", text ? strlen(text) : 0);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int fi__key_compute(uint8_t out[16], const fi_key_input *in,
                    void (*explain)(void *user, const char *text), void *user)
{
    const char *options[64];
    char tag[128];
    key_hasher h;
    if (in->option_count > 64) return fi__error(FI_EINVALID, "too many compile options");
    h.explain = explain;
    h.user = user;
    XXH3_128bits_reset(&h.state);

    hash_string(&h, "schema", FI_KEY_SCHEMA);
    hash_string(&h, "arch", in->arch);
    snprintf(tag, sizeof tag, "%d.%d", in->nvrtc_major, in->nvrtc_minor);
    hash_string(&h, "nvrtc-version", tag);
    memcpy(options, in->options, sizeof(char *) * (size_t)in->option_count);
    qsort(options, (size_t)in->option_count, sizeof options[0], compare_strings);
    for (int i = 0; i < in->option_count; i++) hash_string(&h, "option", options[i]);
    for (int i = 0; i < in->entry_count; i++) hash_string(&h, "entry", in->entries[i]);
    hash_string(&h, "source", in->tu->text);
    for (int i = 0; i < in->tu->header_count; i++) {
        snprintf(tag, sizeof tag, "header:%s", in->tu->header_names[i]);
        hash_string(&h, tag, in->tu->header_texts[i]);
    }

    XXH128_hash_t digest = XXH3_128bits_digest(&h.state);
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, digest);
    memcpy(out, canonical.digest, 16);
    if (explain) {
        char hex[33], line[64];
        fi_key_hex(hex, out);
        snprintf(line, sizeof line, "key %s\n", hex);
        explain(user, line);
    }
    return 0;
}
