/*
 * The entry codec: the header that wraps every cached object, over memory.
 * Every tier stores the same bytes (the local store as a file, a remote
 * tier as a value), and every reader checks them with these functions
 * before anything is loaded: a tier never trusts what it hands back.
 *
 * Entry format (all integers little-endian, offsets in bytes):
 *
 *    0   8  magic "FIJITOB1"
 *    8   4  u32 format version (FI_OBJECT_VERSION)
 *   12   4  u32 header size H: bytes before the payload (= 82 + n + 8)
 *   16  16  key (XXH3-128 of the inputs, as in the file name)
 *   32   8  u64 payload size P
 *   40   8  u64 XXH3-64 of the payload
 *   48   4  i32 registers per thread
 *   52   4  i32 spill bytes per thread
 *   56   8  i64 compile time in ns
 *   64  16  arch, NUL-padded ("sm_90a"), at most 15 characters
 *   80   2  u16 n: length of the spec text (<= 255)
 *   82   n  canonical spec text (fi_jit_spec_format's form), no NUL; or
 *           none (n = 0). Anything else is refused (fi_object_meta_ok)
 * 82+n   8  u64 XXH3-64 of header bytes [0, H-8): guards the meta, which the
 *           payload checksum does not cover
 *    H   P  payload (the cubin)
 *
 * The entry's size must be exactly H + P. The header carries everything the
 * index row holds, so an object can be re-indexed after the index is lost.
 *
 * A reader that streams (the local store reads a file in three steps)
 * calls fi_object_check_fixed on the first FI_OBJECT_FIXED bytes, then
 * fi_object_check_header on the whole header, then fi_object_check_payload;
 * fi_object_decode does all three over an entry held in memory.
 */
#ifndef FI_STORE_OBJECT_H
#define FI_STORE_OBJECT_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define FI_OBJECT_MAGIC "FIJITOB1"
#define FI_OBJECT_VERSION 1u
#define FI_OBJECT_FIXED 82u
#define FI_OBJECT_MAX_HEADER (FI_OBJECT_FIXED + 255u + 8u)
/* Upper bound on an object's payload; a cubin is well under this. */
#define FI_OBJECT_MAX_PAYLOAD ((uint64_t)1 << 30)

/* Results of the checks: the entry is good, or bad (why in words). */
enum { FI_OBJECT_OK = 0, FI_OBJECT_BAD = 2 };

/* What a header says. */
typedef struct fi_object_header {
    uint8_t key[16];
    uint32_t header_size;  /* H */
    uint64_t payload_size; /* P */
    uint64_t checksum;     /* XXH3-64 of the payload */
    fi_object_meta meta;
} fi_object_header;

/* Write the header for a payload of `payload_size` bytes whose checksum is
 * `checksum` into `h` (FI_OBJECT_MAX_HEADER bytes); returns its size H.
 * `meta`'s texts must be NUL-terminated (fi_object_meta_ok). */
size_t fi_object_header_build(uint8_t *h, const uint8_t key[16], const fi_object_meta *meta,
                              uint64_t payload_size, uint64_t checksum);

/* 1 when meta's spec and arch texts are NUL-terminated within their fields
 * and each is empty (an entry stored without meta) or valid: the spec in
 * its canonical form (fi_jit_spec_format's), the arch as fi_arch_check
 * wants it. Readers on other hosts print these texts, so the codec refuses
 * anything else on both sides. */
int fi_object_meta_ok(const fi_object_meta *meta);
int fi_object_spec_ok(const char *spec);
int fi_object_arch_ok(const char *arch);
/* What fi_object_meta_ok refuses, in words. */
#define FI_OBJECT_META_BAD "spec or arch text is not canonical (or not NUL-terminated)"

/* A whole entry in one fresh buffer (freed with fi__free): header, then
 * payload. FI_EINVALID for a size out of range or bad meta texts. */
int fi_object_encode(void **out, size_t *out_size, const uint8_t key[16], const fi_object_meta *meta,
                     const void *payload, size_t payload_size);

/* Check the first FI_OBJECT_FIXED bytes of an entry of `total_size` bytes:
 * magic, version, header and payload sizes (filled into `out`). */
int fi_object_check_fixed(const uint8_t *h, uint64_t total_size, fi_object_header *out, char *why,
                          size_t why_size);
/* Check the whole header (out->header_size bytes, after check_fixed): its
 * checksum, the key (== `want` unless NULL), the arch field; fills the key,
 * checksum and meta of `out`. */
int fi_object_check_header(const uint8_t *h, const uint8_t *want, fi_object_header *out, char *why,
                           size_t why_size);
/* Check the payload against the header's checksum. */
int fi_object_check_payload(const fi_object_header *hdr, const void *payload, char *why,
                            size_t why_size);

/* All three checks over an entry in memory. On FI_OBJECT_OK, `*payload`
 * points into `data` (borrowed). */
int fi_object_decode(const void *data, size_t size, const uint8_t *want, fi_object_header *out,
                     const void **payload, char *why, size_t why_size);

/* Parse exactly 32 lower-case hex digits (the form fi_key_hex writes). 0 or -1. */
int fi_key_from_hex(const char *hex, uint8_t key[16]);
/* Value of a lower-case hex digit, -1 for anything else. */
int fi_hex_digit(char c);

#endif
