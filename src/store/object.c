/*
 * The entry codec (see object.h for the format): builds and checks entry
 * headers over memory, for every tier and for the fuzzer alike. No I/O.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/arch.h"
#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void fi_key_hex(char out[33], const uint8_t key[16])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[key[i] >> 4];
        out[2 * i + 1] = digits[key[i] & 15];
    }
    out[32] = '\0';
}

int fi_hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int fi_key_from_hex(const char *hex, uint8_t key[16])
{
    for (int i = 0; i < 16; i++) {
        int hi = fi_hex_digit(hex[2 * i]), lo = hi < 0 ? -1 : fi_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return hex[32] == '\0' ? 0 : -1;
}

int fi_object_spec_ok(const char *spec)
{
    fi_jit_spec parsed;
    char variant[64], canonical[sizeof ((fi_object_meta *)0)->spec];
    if (!*spec) return 1;
    return fi_jit_spec_parse(&parsed, variant, sizeof variant, spec) == 0 &&
           fi_jit_spec_format(canonical, sizeof canonical, &parsed) >= 0 &&
           strcmp(canonical, spec) == 0;
}

int fi_object_arch_ok(const char *arch) { return !*arch || fi__arch_check(arch) == 0; }

int fi_object_meta_ok(const fi_object_meta *meta)
{
    return strnlen(meta->spec, sizeof meta->spec) < sizeof meta->spec &&
           strnlen(meta->arch, sizeof meta->arch) < sizeof meta->arch &&
           fi_object_spec_ok(meta->spec) && fi_object_arch_ok(meta->arch);
}

size_t fi_object_header_build(uint8_t *h, const uint8_t key[16], const fi_object_meta *meta,
                              uint64_t payload_size, uint64_t checksum)
{
    size_t n = strnlen(meta->spec, sizeof meta->spec);
    size_t arch_n = strnlen(meta->arch, sizeof meta->arch);
    uint32_t hsize = (uint32_t)(FI_OBJECT_FIXED + n + 8);
    memset(h, 0, FI_OBJECT_MAX_HEADER);
    memcpy(h, FI_OBJECT_MAGIC, 8);
    put_u32(h + 8, FI_OBJECT_VERSION);
    put_u32(h + 12, hsize);
    memcpy(h + 16, key, 16);
    put_u64(h + 32, payload_size);
    put_u64(h + 40, checksum);
    put_u32(h + 48, (uint32_t)meta->registers);
    put_u32(h + 52, (uint32_t)meta->spill_bytes);
    put_u64(h + 56, (uint64_t)meta->compile_ns);
    memcpy(h + 64, meta->arch, arch_n);
    put_u16(h + 80, (uint16_t)n);
    memcpy(h + 82, meta->spec, n);
    put_u64(h + hsize - 8, XXH3_64bits(h, hsize - 8));
    return hsize;
}

int fi_object_encode(void **out, size_t *out_size, const uint8_t key[16], const fi_object_meta *meta,
                     const void *payload, size_t payload_size)
{
    uint8_t h[FI_OBJECT_MAX_HEADER];
    uint8_t *buf;
    size_t hsize;
    if (!out || !out_size || !key || !meta || !payload)
        return fi__error(FI_EINVALID, "fi_object_encode: NULL argument");
    *out = NULL;
    *out_size = 0;
    if (payload_size == 0 || (uint64_t)payload_size > FI_OBJECT_MAX_PAYLOAD)
        return fi__error(FI_EINVALID, "cache entry: object size %zu is out of range", payload_size);
    if (!fi_object_meta_ok(meta))
        return fi__error(FI_EINVALID, "cache entry: %s", FI_OBJECT_META_BAD);
    hsize = fi_object_header_build(h, key, meta, payload_size, XXH3_64bits(payload, payload_size));
    if (!(buf = fi__malloc(hsize + payload_size)))
        return fi__error(FI_ENOMEM, "out of memory encoding a cache entry (%zu bytes)",
                         hsize + payload_size);
    memcpy(buf, h, hsize);
    memcpy(buf + hsize, payload, payload_size);
    *out = buf;
    *out_size = hsize + payload_size;
    return 0;
}

#define BAD(...)                                                               \
    do {                                                                       \
        snprintf(why, why_size, __VA_ARGS__);                                  \
        return FI_OBJECT_BAD;                                                  \
    } while (0)

int fi_object_check_fixed(const uint8_t *h, uint64_t total_size, fi_object_header *out, char *why,
                          size_t why_size)
{
    uint32_t hsize, n;
    uint64_t psize;
    memset(out, 0, sizeof *out);
    /* Only the size is looked at when the entry is shorter than any header. */
    if (total_size < FI_OBJECT_FIXED + 8)
        BAD("is truncated (%lld bytes, shorter than a header)", (long long)total_size);
    if (memcmp(h, FI_OBJECT_MAGIC, 8) != 0) BAD("has a bad magic number");
    if (get_u32(h + 8) != FI_OBJECT_VERSION)
        BAD("has format version %u, expected %u", get_u32(h + 8), FI_OBJECT_VERSION);
    hsize = get_u32(h + 12);
    n = get_u16(h + 80);
    psize = get_u64(h + 32);
    if (n > 255 || hsize != FI_OBJECT_FIXED + n + 8) BAD("has a bad header size (%u)", hsize);
    if (psize == 0 || psize > FI_OBJECT_MAX_PAYLOAD || total_size != hsize + psize)
        BAD("is %lld bytes but its header says %" PRIu64 " (truncated or overwritten)",
            (long long)total_size, (uint64_t)hsize + psize);
    out->header_size = hsize;
    out->payload_size = psize;
    return FI_OBJECT_OK;
}

int fi_object_check_header(const uint8_t *h, const uint8_t *want, fi_object_header *out, char *why,
                           size_t why_size)
{
    uint32_t hsize = out->header_size, n = get_u16(h + 80);
    if (get_u64(h + hsize - 8) != XXH3_64bits(h, hsize - 8)) BAD("has a damaged header");
    memcpy(out->key, h + 16, 16);
    if (want && memcmp(out->key, want, 16) != 0) {
        char a[33], b[33];
        fi_key_hex(a, out->key);
        fi_key_hex(b, want);
        BAD("holds key %s, not %s", a, b);
    }
    if (h[64 + 15] != 0) BAD("has a bad arch field");
    out->checksum = get_u64(h + 40);
    memcpy(out->meta.arch, h + 64, 16);
    memcpy(out->meta.spec, h + 82, n);
    out->meta.spec[n] = '\0';
    /* Listings on every host print these texts: a NUL inside, control
     * bytes or a fake line must never get that far. */
    if (memchr(h + 82, 0, n) || !fi_object_spec_ok(out->meta.spec))
        BAD("has spec text that is not a canonical spec");
    if (!fi_object_arch_ok(out->meta.arch)) BAD("has a bad arch field");
    out->meta.registers = (int)get_u32(h + 48);
    out->meta.spill_bytes = (int)get_u32(h + 52);
    out->meta.compile_ns = (int64_t)get_u64(h + 56);
    return FI_OBJECT_OK;
}

int fi_object_check_payload(const fi_object_header *hdr, const void *payload, char *why,
                            size_t why_size)
{
    if (XXH3_64bits(payload, (size_t)hdr->payload_size) != hdr->checksum)
        BAD("fails its checksum (payload damaged)");
    return FI_OBJECT_OK;
}

#undef BAD

int fi_object_decode(const void *data, size_t size, const uint8_t *want, fi_object_header *out,
                     const void **payload, char *why, size_t why_size)
{
    const uint8_t *p = data;
    int rc;
    *payload = NULL;
    if ((rc = fi_object_check_fixed(p, size, out, why, why_size)) != FI_OBJECT_OK) return rc;
    if ((rc = fi_object_check_header(p, want, out, why, why_size)) != FI_OBJECT_OK) return rc;
    if ((rc = fi_object_check_payload(out, p + out->header_size, why, why_size)) != FI_OBJECT_OK)
        return rc;
    *payload = p + out->header_size;
    return FI_OBJECT_OK;
}
