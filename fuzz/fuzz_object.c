/* libFuzzer target: the entry codec (src/store/object.c) and the local
 * tier's object reader built on it. The input becomes the object file of one
 * key; fi_object_decode checks it in memory and fi_store_get reads it from
 * disk. Neither may crash, both must agree, and they may accept it only when
 * the header is whole, names the key and the payload's checksum matches.
 * Byte 0 picks how the file is made:
 *   0: the rest of the input, raw;
 *   1: a header written by the codec (fi_object_header_build) from the
 *      input's fields (spec text, payload) with flags that break one check
 *      or none (the header is resealed, so only that check fails); when
 *      nothing is broken and the spec text is canonical, the read must
 *      succeed;
 *   2: a valid object with one bit flipped at an input-chosen place; the
 *      read must fail. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/sys.h"
#include "store/object.h"
#include "store/store.h"

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "violated: %s\n", #c); abort(); } } while (0)

static fi_store *st;
static char path[4096];
static const uint8_t key[16] = {0xc0, 0xff, 0xee, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char dir[] = "/tmp/fijit-fuzz-object-XXXXXX", hex[33], sub[4200];
    if (!mkdtemp(dir)) abort();
    if (fi_store_open(&st, dir, 0, 0) < 0) {
        fprintf(stderr, "%s\n", fi_last_error());
        abort();
    }
    fi_key_hex(hex, key);
    snprintf(sub, sizeof sub, "%s/objects/%.2s", dir, hex);
    mkdir(sub, 0700);
    snprintf(path, sizeof path, "%s/%s.fo", sub, hex);
    return 0;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Build an object with the codec; `breaks` (bit set) damages one part. Returns its size. */
static size_t build(uint8_t *out, const uint8_t *in, size_t in_size, unsigned breaks, int *valid)
{
    size_t n = in_size ? in[0] % 64 : 0; /* spec text length */
    if (n > in_size) n = in_size;
    const uint8_t *spec = in, *payload = in + n;
    size_t psize = in_size - n;
    fi_object_meta meta;
    memset(&meta, 0, sizeof meta);
    memcpy(meta.spec, spec, n); /* may hold a NUL: the text is cut there */
    /* The codec takes only canonical spec text, which random bytes rarely
     * are: bit 6 of the length byte swaps one in, so valid entries are common. */
    if (in_size && (in[0] & 64))
        snprintf(meta.spec, sizeof meta.spec, "decode q=bf16 kv=bf16 o=bf16 hd=64 mask=none pos=none softcap=0");
    memcpy(meta.arch, "sm_90a", 6);
    uint32_t hsize = (uint32_t)fi_object_header_build(out, key, &meta, psize,
                                                      XXH3_64bits(payload, psize));
    if (breaks & 1) put_le(out + 8, 2, 4);
    if (breaks & 2) put_le(out + 12, hsize + 1, 4);
    if (breaks & 4) out[20] ^= 1;
    if (breaks & 8) put_le(out + 32, psize + 1, 8);
    if (breaks & 16) out[40] ^= 1;
    if (breaks & 32) memset(out + 64, 'x', 16);
    /* Reseal the header over the change, unless the seal is what breaks. */
    put_le(out + hsize - 8, XXH3_64bits(out, hsize - 8) ^ ((breaks & 64) ? 1 : 0), 8);
    memcpy(out + hsize, payload, psize);
    *valid = !(breaks & 127) && psize > 0 && fi_object_spec_ok(meta.spec);
    return hsize + psize;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > (1 << 16)) return 0;
    uint8_t *file = malloc(size + 512);
    size_t file_size;
    int mode = data[0] % 3, valid = 0;
    if (mode == 0) {
        file_size = size - 1;
        memcpy(file, data + 1, file_size);
    } else if (mode == 1) {
        unsigned breaks = data[1] & 0x80 ? (1u << (data[1] % 7)) : 0;
        file_size = build(file, data + 2, size - 2, breaks, &valid);
    } else {
        file_size = build(file, data + 2, size - 2, 0, &valid);
        if (!valid) {
            free(file);
            return 0;
        }
        size_t bit = ((size_t)data[1] * 2654435761u + size) % (file_size * 8);
        file[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        valid = 0;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0 && write(fd, file, file_size) == (ssize_t)file_size);
    close(fd);
    void *out = NULL;
    size_t out_size = 0;
    fi_object_meta meta;
    int rc = fi_store_get(st, key, &out, &out_size, &meta);
    REQUIRE(rc == 0 || rc == FI_ENOTFOUND);
    /* The codec over memory agrees with the reader over the file. */
    fi_object_header hdr;
    const void *payload = NULL;
    char why[256];
    int res = fi_object_decode(file, file_size, key, &hdr, &payload, why, sizeof why);
    REQUIRE(res == (rc == 0 ? FI_OBJECT_OK : FI_OBJECT_BAD));
    if (rc == 0)
        REQUIRE(hdr.payload_size == out_size && memcmp(payload, out, out_size) == 0 &&
                memcmp(&hdr.meta, &meta, sizeof meta) == 0);
    if (rc == 0) {
        /* Served: the header is whole and the payload is exactly what it vouches for. */
        uint32_t hsize = (uint32_t)file[12] | (uint32_t)file[13] << 8 | (uint32_t)file[14] << 16 |
                         (uint32_t)file[15] << 24;
        uint64_t sum = 0;
        for (int i = 7; i >= 0; i--) sum = sum << 8 | file[40 + i];
        REQUIRE(file_size >= 90 && memcmp(file, "FIJITOB1", 8) == 0 && memcmp(file + 16, key, 16) == 0);
        REQUIRE(hsize < file_size && out_size == file_size - hsize);
        REQUIRE(memcmp(out, file + hsize, out_size) == 0 && XXH3_64bits(out, out_size) == sum);
        REQUIRE(meta.arch[15] == '\0' && strlen(meta.spec) < sizeof meta.spec);
        REQUIRE(fi_object_spec_ok(meta.spec) && fi_object_arch_ok(meta.arch));
    }
    if (mode == 2) REQUIRE(rc == FI_ENOTFOUND);
    if (valid) REQUIRE(rc == 0);
    fi__free(out);
    free(file);
    return 0;
}
