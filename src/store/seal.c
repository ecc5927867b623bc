/*
 * Seals over entries with the fleet secret (see seal.h): libsodium's keyed
 * BLAKE2b, a constant-time compare, and the sealed value's framing.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/seal.h"

/* Separate the uses of BLAKE2b here from any other use of the same secret. */
static const char KEY_DOMAIN[] = "fijit fleet secret v1";
static const char MAC_DOMAIN[] = "fijit entry mac v1";

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ready;

static void sodium_start(void) { sodium_ready = sodium_init() >= 0; }

int fi_seal_key_derive(fi_seal_key *out, const char *secret)
{
    crypto_generichash_state state;
    if (!out || !secret) return fi__error(FI_EINVALID, "fi_seal_key_derive: NULL argument");
    size_t n = strlen(secret);
    if (n < FI_SEAL_SECRET_MIN)
        return fi__error(FI_EINVALID, "the fleet secret is %zu characters; it must be at least %d "
                         "(e.g. 32 random hex digits)", n, FI_SEAL_SECRET_MIN);
    pthread_once(&sodium_once, sodium_start);
    if (!sodium_ready) return fi__error(FI_EIO, "libsodium could not start (sodium_init failed)");
    crypto_generichash_init(&state, NULL, 0, sizeof out->bytes);
    crypto_generichash_update(&state, (const uint8_t *)KEY_DOMAIN, sizeof KEY_DOMAIN);
    crypto_generichash_update(&state, (const uint8_t *)secret, n);
    crypto_generichash_final(&state, out->bytes, sizeof out->bytes);
    sodium_memzero(&state, sizeof state);
    return 0;
}

void fi_seal_mac(uint8_t out[FI_SEAL_MAC_BYTES], const fi_seal_key *k, const uint8_t key[16],
                 const void *entry, size_t size)
{
    crypto_generichash_state state;
    crypto_generichash_init(&state, k->bytes, sizeof k->bytes, FI_SEAL_MAC_BYTES);
    crypto_generichash_update(&state, (const uint8_t *)MAC_DOMAIN, sizeof MAC_DOMAIN);
    crypto_generichash_update(&state, key, 16);
    crypto_generichash_update(&state, entry, size);
    crypto_generichash_final(&state, out, FI_SEAL_MAC_BYTES);
}

int fi_seal_mac_ok(const uint8_t mac[FI_SEAL_MAC_BYTES], const fi_seal_key *k,
                   const uint8_t key[16], const void *entry, size_t size)
{
    uint8_t want[FI_SEAL_MAC_BYTES];
    fi_seal_mac(want, k, key, entry, size);
    return crypto_verify_32(want, mac) == 0;
}

int fi_seal_wrap(void **out, size_t *out_size, const fi_seal_key *k, const uint8_t key[16],
                 const void *entry, size_t size)
{
    size_t head = k ? FI_SEAL_OVERHEAD : 0;
    uint8_t *value = fi__malloc(head + size);
    *out = NULL;
    *out_size = 0;
    if (!value) return fi__error(FI_ENOMEM, "out of memory sealing a cache entry");
    if (k) {
        memcpy(value, FI_SEAL_MAGIC, 8);
        fi_seal_mac(value + 8, k, key, entry, size);
    }
    memcpy(value + head, entry, size);
    *out = value;
    *out_size = head + size;
    return 0;
}

int fi_seal_unwrap(const void **entry, size_t *entry_size, const fi_seal_key *k,
                   const uint8_t key[16], const void *value, size_t size, char *why,
                   size_t why_size)
{
    const uint8_t *v = value;
    int sealed = size >= FI_SEAL_OVERHEAD && memcmp(v, FI_SEAL_MAGIC, 8) == 0;
    *entry = value;
    *entry_size = size;
    if (!sealed) {
        if (!k) return FI_OBJECT_OK;
        snprintf(why, why_size, "carries no MAC, and this host holds the fleet secret");
        return FI_OBJECT_BAD;
    }
    if (k && !fi_seal_mac_ok(v + 8, k, key, v + FI_SEAL_OVERHEAD, size - FI_SEAL_OVERHEAD)) {
        snprintf(why, why_size, "has a MAC that the fleet secret does not make "
                 "(forged, damaged, or sealed with another secret)");
        return FI_OBJECT_BAD;
    }
    *entry = v + FI_SEAL_OVERHEAD;
    *entry_size = size - FI_SEAL_OVERHEAD;
    return FI_OBJECT_OK;
}
