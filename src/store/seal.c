/*
 * Seals over entries with the fleet secret (see seal.h): libsodium's keyed
 * BLAKE2b, a constant-time compare, and the sealed value's framing.
 * libsodium is opened at run time (common/dynlib.h) when a secret is first
 * given, so that hosts without one need no libsodium.
 */
#include <pthread.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/dynlib.h"
#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/seal.h"

/* Separate the uses of BLAKE2b here from any other use of the same secret. */
static const char KEY_DOMAIN[] = "fijit fleet secret v1";
static const char MAC_DOMAIN[] = "fijit entry mac v1";

/* The libsodium functions used here: X(return type, name, symbol, parameters). */
#define SODIUM_API(X)                                                                      \
    X(int, init, "sodium_init", (void))                                                    \
    X(size_t, statebytes, "crypto_generichash_statebytes", (void))                         \
    X(int, hash_init, "crypto_generichash_init",                                           \
      (crypto_generichash_state *, const unsigned char *, size_t, size_t))                 \
    X(int, hash_update, "crypto_generichash_update",                                       \
      (crypto_generichash_state *, const unsigned char *, unsigned long long))             \
    X(int, hash_final, "crypto_generichash_final",                                         \
      (crypto_generichash_state *, unsigned char *, size_t))                               \
    X(int, verify_32, "crypto_verify_32", (const unsigned char *, const unsigned char *))  \
    X(void, memzero, "sodium_memzero", (void *const, const size_t))

static struct sodium_api {
#define FIELD(ret, name, symbol, params) ret(*name) params;
    SODIUM_API(FIELD)
#undef FIELD
} sodium;
static int sodium_ok;
static char sodium_error[512];
static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

static void sodium_start(void)
{
#define ROW(ret, name, symbol, params) {symbol, offsetof(struct sodium_api, name), 1},
    static const fi_dynlib_sym syms[] = {SODIUM_API(ROW)};
#undef ROW
    static const char *const names[] = {"libsodium.so.23", "libsodium.so", NULL};
    char why[320];
    if (fi__dynlib_load(&sodium, syms, sizeof syms / sizeof syms[0], names, why, sizeof why) < 0)
        snprintf(sodium_error, sizeof sodium_error, "a fleet secret needs libsodium "
                 "(libsodium.so.23), which cannot be opened: %s (Debian: apt-get install "
                 "libsodium23)", why);
    else if (sodium.statebytes() > sizeof(crypto_generichash_state))
        /* This build's state is too small for that library's BLAKE2b. */
        snprintf(sodium_error, sizeof sodium_error, "the libsodium found needs %zu bytes of "
                 "hash state, this build has %zu (rebuild fijit against it)",
                 sodium.statebytes(), sizeof(crypto_generichash_state));
    else if (sodium.init() < 0)
        snprintf(sodium_error, sizeof sodium_error, "libsodium could not start (sodium_init failed)");
    else
        sodium_ok = 1;
}

int fi_seal_key_derive(fi_seal_key *out, const char *secret)
{
    crypto_generichash_state state;
    if (!out || !secret) return fi__error(FI_EINVALID, "fi_seal_key_derive: NULL argument");
    size_t n = strlen(secret);
    if (n < FI_SEAL_SECRET_MIN)
        return fi__error(FI_EINVALID, "the fleet secret is %zu characters; it must be at least %d "
                         "(e.g. 32 random hex digits)", n, FI_SEAL_SECRET_MIN);
    pthread_once(&sodium_once, sodium_start);
    if (!sodium_ok) return fi__error(FI_EUNSUPPORTED, "%s", sodium_error);
    sodium.hash_init(&state, NULL, 0, sizeof out->bytes);
    sodium.hash_update(&state, (const uint8_t *)KEY_DOMAIN, sizeof KEY_DOMAIN);
    sodium.hash_update(&state, (const uint8_t *)secret, n);
    sodium.hash_final(&state, out->bytes, sizeof out->bytes);
    sodium.memzero(&state, sizeof state);
    return 0;
}

void fi_seal_mac(uint8_t out[FI_SEAL_MAC_BYTES], const fi_seal_key *k, const uint8_t key[16],
                 const void *entry, size_t size)
{
    crypto_generichash_state state; /* a key exists: fi_seal_key_derive opened libsodium */
    sodium.hash_init(&state, k->bytes, sizeof k->bytes, FI_SEAL_MAC_BYTES);
    sodium.hash_update(&state, (const uint8_t *)MAC_DOMAIN, sizeof MAC_DOMAIN);
    sodium.hash_update(&state, key, 16);
    sodium.hash_update(&state, entry, size);
    sodium.hash_final(&state, out, FI_SEAL_MAC_BYTES);
}

int fi_seal_mac_ok(const uint8_t mac[FI_SEAL_MAC_BYTES], const fi_seal_key *k,
                   const uint8_t key[16], const void *entry, size_t size)
{
    uint8_t want[FI_SEAL_MAC_BYTES];
    fi_seal_mac(want, k, key, entry, size);
    return sodium.verify_32(want, mac) == 0;
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
