/*
 * Seals: a keyed MAC over an entry and its key, made with the fleet's
 * secret, so that a host that can write to the shared store but does not
 * hold the secret cannot get an entry of its own loaded anywhere. XXH3 (the
 * codec's checksum) only finds damage; this finds forgery. The MAC is keyed
 * BLAKE2b-256 from libsodium (crypto_generichash) over a domain tag, the
 * 16-byte cache key and the entry's bytes; the MAC key is BLAKE2b-256 of a
 * domain tag and the secret text.
 *
 * A sealed remote value (what a remote holds when the fleet has a secret):
 *    0   8  magic "FIJITMC1"
 *    8  32  the MAC
 *   40   E  the entry (store/object.h)
 * An unsealed value is the entry alone (it starts with "FIJITOB1"). A
 * bundle keeps the MAC in a column of its own (store/bundle.c).
 */
#ifndef FI_STORE_SEAL_H
#define FI_STORE_SEAL_H

#include <stddef.h>
#include <stdint.h>

#define FI_SEAL_MAGIC "FIJITMC1"
#define FI_SEAL_MAC_BYTES 32
#define FI_SEAL_OVERHEAD (8 + FI_SEAL_MAC_BYTES)
/* A secret shorter than this is refused: it could be guessed offline from
 * any one sealed value. */
#define FI_SEAL_SECRET_MIN 16

typedef struct fi_seal_key {
    uint8_t bytes[32];
} fi_seal_key;

/* The MAC key of `secret` (FI_EINVALID when it is shorter than
 * FI_SEAL_SECRET_MIN; FI_EUNSUPPORTED when libsodium cannot be opened or
 * started). */
int fi_seal_key_derive(fi_seal_key *out, const char *secret);

/* The MAC of `entry` stored under `key`. */
void fi_seal_mac(uint8_t out[FI_SEAL_MAC_BYTES], const fi_seal_key *k, const uint8_t key[16],
                 const void *entry, size_t size);
/* 1 when `mac` is the MAC of `entry` under `key` (compared in constant time). */
int fi_seal_mac_ok(const uint8_t mac[FI_SEAL_MAC_BYTES], const fi_seal_key *k,
                   const uint8_t key[16], const void *entry, size_t size);

/* The remote value for `entry`: sealed when `k` is not NULL, else a copy.
 * `*out` is freed with fi__free. */
int fi_seal_wrap(void **out, size_t *out_size, const fi_seal_key *k, const uint8_t key[16],
                 const void *entry, size_t size);
/* The entry inside a remote value, borrowed from it. With `k`, only a
 * sealed value whose MAC is right is accepted; without, a sealed value's
 * entry is taken as it stands (the codec still checks it). FI_OBJECT_OK, or
 * FI_OBJECT_BAD with why in words. */
int fi_seal_unwrap(const void **entry, size_t *entry_size, const fi_seal_key *k,
                   const uint8_t key[16], const void *value, size_t size, char *why,
                   size_t why_size);

#endif
