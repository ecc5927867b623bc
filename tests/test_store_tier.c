/* Tests of the tier front (src/store/store.c) with an in-memory fake remote
 * (src/store/remote/remote.h): a remote hit is verified by the entry codec
 * and written back to the local tier, a corrupt remote entry is rejected and
 * removed, a remote error or timeout is a miss (and the remote is skipped
 * for its back-off, then asked again), a put pushes to the remote, the
 * fleet lease is taken, waited for and given back, a read-only remote is
 * never written, a secret seals pushes and refuses unsealed entries, and
 * the codec round-trips. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "check.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/remote/remote.h"
#include "store/seal.h"
#include "store/store.h"

/* ---- a fake remote: one slot per key, and a scripted failure --------------- */

#define FAKE_SLOTS 8

typedef struct fake_remote {
    fi_remote base;
    struct {
        uint8_t key[16];
        void *entry;
        size_t size;
    } slots[FAKE_SLOTS];
    int count;
    fi_remote_result fail_with; /* FI_REMOTE_OK: answer normally */
    int gets, puts, removes, leases, releases;
    uint8_t lease_key[16], lease_token[16]; /* one lease at a time */
    int leased;
    int *closed; /* set to 1 by close */
} fake_remote;

static int fake_find(fake_remote *f, const uint8_t key[16])
{
    for (int i = 0; i < f->count; i++)
        if (memcmp(f->slots[i].key, key, 16) == 0) return i;
    return -1;
}

static fi_remote_result fake_get(fi_remote *r, const uint8_t key[16], void **out, size_t *out_size)
{
    fake_remote *f = (fake_remote *)r;
    f->gets++;
    if (f->fail_with != FI_REMOTE_OK) return f->fail_with;
    int i = fake_find(f, key);
    if (i < 0) return FI_REMOTE_NOT_FOUND;
    if (!(*out = fi__malloc(f->slots[i].size))) return FI_REMOTE_ERROR;
    memcpy(*out, f->slots[i].entry, f->slots[i].size);
    *out_size = f->slots[i].size;
    return FI_REMOTE_OK;
}

static fi_remote_result fake_put(fi_remote *r, const uint8_t key[16], const void *entry, size_t size)
{
    fake_remote *f = (fake_remote *)r;
    f->puts++;
    if (f->fail_with != FI_REMOTE_OK) return f->fail_with;
    int i = fake_find(f, key);
    if (i < 0) {
        if (f->count == FAKE_SLOTS) return FI_REMOTE_ERROR;
        i = f->count++;
        memcpy(f->slots[i].key, key, 16);
    } else {
        free(f->slots[i].entry);
    }
    f->slots[i].entry = malloc(size);
    memcpy(f->slots[i].entry, entry, size);
    f->slots[i].size = size;
    return FI_REMOTE_OK;
}

static fi_remote_result fake_remove(fi_remote *r, const uint8_t key[16])
{
    fake_remote *f = (fake_remote *)r;
    f->removes++;
    if (f->fail_with != FI_REMOTE_OK) return f->fail_with;
    int i = fake_find(f, key);
    if (i < 0) return FI_REMOTE_NOT_FOUND;
    free(f->slots[i].entry);
    f->slots[i] = f->slots[--f->count];
    return FI_REMOTE_OK;
}

static fi_remote_result fake_has(fi_remote *r, const uint8_t key[16])
{
    fake_remote *f = (fake_remote *)r;
    if (f->fail_with != FI_REMOTE_OK) return f->fail_with;
    return fake_find(f, key) < 0 ? FI_REMOTE_NOT_FOUND : FI_REMOTE_OK;
}

static fi_remote_result fake_lease(fi_remote *r, const uint8_t key[16], const uint8_t token[16],
                                   int ttl_ms)
{
    fake_remote *f = (fake_remote *)r;
    (void)ttl_ms; /* the fake's leases never expire; a test frees them */
    f->leases++;
    if (f->fail_with != FI_REMOTE_OK) return f->fail_with;
    if (f->leased && memcmp(f->lease_token, token, 16) != 0) return FI_REMOTE_HELD;
    f->leased = 1;
    memcpy(f->lease_key, key, 16);
    memcpy(f->lease_token, token, 16);
    return FI_REMOTE_OK;
}

static fi_remote_result fake_release(fi_remote *r, const uint8_t key[16], const uint8_t token[16])
{
    fake_remote *f = (fake_remote *)r;
    f->releases++;
    if (f->fail_with != FI_REMOTE_OK) return f->fail_with;
    if (!f->leased || memcmp(f->lease_key, key, 16) || memcmp(f->lease_token, token, 16))
        return FI_REMOTE_NOT_FOUND;
    f->leased = 0;
    return FI_REMOTE_OK;
}

static void fake_close(fi_remote *r)
{
    fake_remote *f = (fake_remote *)r;
    for (int i = 0; i < f->count; i++) free(f->slots[i].entry);
    if (f->closed) *f->closed = 1;
    free(f);
}

static const fi_remote_ops fake_ops = {
    .name = "fake",
    .get = fake_get,
    .has = fake_has,
    .put = fake_put,
    .remove = fake_remove,
    .lease = fake_lease,
    .release = fake_release,
    .close = fake_close,
};

static fake_remote *fake_new(int *closed)
{
    fake_remote *f = calloc(1, sizeof *f);
    f->base.ops = &fake_ops;
    snprintf(f->base.config.url, sizeof f->base.config.url, "fake://test");
    f->base.config.backoff_ms = 60000;
    f->base.config.lease_ms = 60000; /* no renewal during a test */
    f->base.config.wait_ms = 100;
    f->closed = closed;
    return f;
}

/* ---- fixtures ---------------------------------------------------------------- */

static const uint8_t key1[16] = {0x11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const uint8_t key2[16] = {0x22, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const char payload[] = "a cubin, as far as the store can tell";

static void meta_of(fi_object_meta *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->spec, sizeof m->spec, "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0");
    snprintf(m->arch, sizeof m->arch, "sm_90a");
    m->registers = 96;
    m->spill_bytes = 0;
    m->compile_ns = 123456789;
}

/* Put a valid entry for `key` straight into the fake. */
static void fake_seed(fake_remote *f, const uint8_t key[16])
{
    fi_object_meta m;
    void *entry;
    size_t size;
    meta_of(&m);
    if (fi_object_encode(&entry, &size, key, &m, payload, sizeof payload) < 0) abort();
    fake_put(&f->base, key, entry, size);
    f->puts = 0;
    fi__free(entry);
}

static int open_with(fi_store **st, fake_remote *f)
{
    int rc = fi_store_open(st, check_tmpdir, 0, 0);
    if (rc < 0) return rc;
    return fi_store_add_remote(*st, &f->base);
}

/* ---- the codec ------------------------------------------------------------- */

TEST(object_codec_round_trips_and_rejects_damage)
{
    fi_object_meta m;
    fi_object_header h;
    const void *p;
    void *entry;
    size_t size;
    char why[256];
    meta_of(&m);
    CHECK_OK(fi_object_encode(&entry, &size, key1, &m, payload, sizeof payload));
    CHECK(fi_object_decode(entry, size, key1, &h, &p, why, sizeof why) == FI_OBJECT_OK);
    CHECK(h.payload_size == sizeof payload && memcmp(p, payload, sizeof payload) == 0);
    CHECK(strcmp(h.meta.spec, m.spec) == 0 && strcmp(h.meta.arch, "sm_90a") == 0);
    CHECK(h.meta.registers == 96 && h.meta.compile_ns == 123456789);
    /* Another key, a short buffer, one flipped bit anywhere: all bad. */
    CHECK(fi_object_decode(entry, size, key2, &h, &p, why, sizeof why) == FI_OBJECT_BAD);
    CHECK(strstr(why, "holds key") != NULL);
    CHECK(fi_object_decode(entry, size - 1, key1, &h, &p, why, sizeof why) == FI_OBJECT_BAD);
    for (size_t bit = 0; bit < size * 8; bit += 7) {
        ((uint8_t *)entry)[bit / 8] ^= (uint8_t)(1u << bit % 8);
        int res = fi_object_decode(entry, size, key1, &h, &p, why, sizeof why);
        ((uint8_t *)entry)[bit / 8] ^= (uint8_t)(1u << bit % 8);
        CHECK_MSG(res == FI_OBJECT_BAD, "bit %zu flipped was accepted", bit);
    }
    fi__free(entry);
}

/* ---- the front --------------------------------------------------------------- */

TEST(tier_remote_hit_is_verified_and_written_back)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    void *out = NULL;
    size_t size = 0;
    fi_object_meta m;
    fake_seed(f, key1);
    CHECK_OK(open_with(&st, f));
    CHECK_OK(fi_store_get(st, key1, &out, &size, &m));
    CHECK(size == sizeof payload && memcmp(out, payload, size) == 0);
    CHECK(strcmp(m.arch, "sm_90a") == 0 && m.registers == 96);
    CHECK(f->gets == 1);
    fi__free(out);
    out = NULL;
    fi_store_close(st);
    /* Written back: a store without the remote serves it from disk. */
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(fi_store_get(st, key1, &out, &size, &m));
    CHECK(size == sizeof payload && memcmp(out, payload, size) == 0);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.entries == 1 && s.corrupt == 0);
    fi__free(out);
    fi_store_close(st);
}

TEST(tier_local_hit_does_not_ask_the_remote)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    fi_object_meta m;
    void *out = NULL;
    size_t size = 0;
    meta_of(&m);
    CHECK_OK(open_with(&st, f));
    CHECK_OK(fi_store_put(st, key1, payload, sizeof payload, &m));
    CHECK_OK(fi_store_get(st, key1, &out, &size, NULL));
    CHECK(f->gets == 0);
    fi__free(out);
    fi_store_close(st);
}

TEST(tier_corrupt_remote_entry_is_rejected_and_removed)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    void *out = NULL;
    size_t size = 0;
    fake_seed(f, key1);
    ((uint8_t *)f->slots[0].entry)[f->slots[0].size - 1] ^= 0x40; /* payload damaged */
    CHECK_OK(open_with(&st, f));
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(out == NULL && f->removes == 1 && f->count == 0);
    /* An entry of another key under this one is rejected the same way. */
    fake_seed(f, key2);
    memcpy(f->slots[0].key, key1, 16);
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->removes == 2);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.entries == 0); /* nothing written back */
    fi_store_close(st);
}

/* An entry as a foreign writer could make it: the codec's own header
 * layout and seal, around meta texts the codec's writer would refuse. */
static size_t forge_entry(uint8_t *out, const uint8_t key[16], const char *spec, const char *arch)
{
    fi_object_meta m;
    meta_of(&m);
    snprintf(m.spec, sizeof m.spec, "%s", spec);
    snprintf(m.arch, sizeof m.arch, "%s", arch);
    size_t h = fi_object_header_build(out, key, &m, sizeof payload, XXH3_64bits(payload, sizeof payload));
    memcpy(out + h, payload, sizeof payload);
    return h + sizeof payload;
}

/* Listings on every host print the header's spec and arch: terminal escapes,
 * a fake line or a spec that is not canonical never get past the codec. */
TEST(entry_with_spec_text_that_is_not_canonical_is_refused_everywhere)
{
    static const char *const specs[] = {
        "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0\x1b[2J",
        "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0\nsm_90a  1 KiB  ok",
        "decode q=fp16 hd=128", /* valid, but not the canonical form */
        "decode q=fp16 kv=fp16 o=fp16 hd=65 mask=none pos=none softcap=0",
    };
    uint8_t entry[FI_OBJECT_MAX_HEADER + sizeof payload];
    fi_object_header h;
    fi_object_meta m;
    const void *p;
    char why[256];
    for (size_t i = 0; i <= sizeof specs / sizeof *specs; i++) {
        int arch_case = i == sizeof specs / sizeof *specs;
        size_t size = arch_case ? forge_entry(entry, key1, "", "sm_90\x1b[m")
                                : forge_entry(entry, key1, specs[i], "sm_90a");
        CHECK_MSG(fi_object_decode(entry, size, key1, &h, &p, why, sizeof why) == FI_OBJECT_BAD,
                  "case %zu accepted", i);
        CHECK(strstr(why, arch_case ? "arch" : "spec text") != NULL);
        /* Nor does the codec's writer make one. */
        meta_of(&m);
        if (arch_case)
            snprintf(m.arch, sizeof m.arch, "sm_90\x1b[m");
        else
            snprintf(m.spec, sizeof m.spec, "%s", specs[i]);
        void *made = NULL;
        size_t made_size = 0;
        CHECK_RC(fi_object_encode(&made, &made_size, key1, &m, payload, sizeof payload), FI_EINVALID);
    }
    /* An entry without meta (empty texts) is fine. */
    CHECK(forge_entry(entry, key1, "", "") > 0);
    CHECK(fi_object_decode(entry, forge_entry(entry, key1, "", ""), key1, &h, &p, why,
                           sizeof why) == FI_OBJECT_OK);

    /* The tiers: a remote's forged entry is refused, counted and removed; a
     * put with such meta is refused and stores nothing; a forged object
     * file in the local tier is refused, counted and removed. */
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    void *out = NULL;
    size_t out_size = 0;
    fi_jit_stats s;
    size_t size = forge_entry(entry, key1, specs[1], "sm_90a");
    fake_put(&f->base, key1, entry, size);
    f->puts = 0;
    CHECK_OK(open_with(&st, f));
    CHECK_RC(fi_store_get(st, key1, &out, &out_size, NULL), FI_ENOTFOUND);
    CHECK(out == NULL && f->removes == 1 && f->count == 0);
    meta_of(&m);
    snprintf(m.spec, sizeof m.spec, "%s", specs[0]);
    CHECK_RC(fi_store_put(st, key2, payload, sizeof payload, &m), FI_EINVALID);
    CHECK(f->puts == 0);
    char hex[33], path[4400];
    fi_key_hex(hex, key2);
    snprintf(path, sizeof path, "%s/objects/%.2s", check_tmpdir, hex);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/objects/%.2s/%s.fo", check_tmpdir, hex, hex);
    FILE *file = fopen(path, "wb");
    CHECK(file != NULL);
    size = forge_entry(entry, key2, specs[0], "sm_90a");
    CHECK(fwrite(entry, 1, size, file) == size);
    fclose(file);
    CHECK_RC(fi_store_get(st, key2, &out, &out_size, NULL), FI_ENOTFOUND);
    CHECK(access(path, F_OK) != 0);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.entries == 0 && s.corrupt == 1 && s.remote_corrupt == 1);
    fi_store_close(st);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void check_failing_remote(fi_remote_result how)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    fi_object_meta m;
    void *out = NULL;
    size_t size = 0;
    fi_jit_stats s;
    meta_of(&m);
    fake_seed(f, key1);
    f->fail_with = how;
    f->base.config.backoff_ms = 200;
    CHECK_OK(open_with(&st, f));
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->gets == 1);
    /* Skipped during its back-off: neither get nor put asks it. */
    CHECK_RC(fi_store_get(st, key2, &out, &size, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_put(st, key2, payload, sizeof payload, &m));
    CHECK(f->gets == 1 && f->puts == 0);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors == 1 && s.remote_hits == 0);
    /* The local tier still works. */
    CHECK_OK(fi_store_get(st, key2, &out, &size, NULL));
    fi__free(out);
    out = NULL;
    /* After the back-off it is asked again, and serves once it answers. */
    sleep_ms(250);
    f->fail_with = FI_REMOTE_OK;
    CHECK_OK(fi_store_get(st, key1, &out, &size, NULL));
    CHECK(f->gets == 2 && size == sizeof payload);
    fi__free(out);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors == 1 && s.remote_hits == 1 && s.remote_bytes_in > 0);
    fi_store_close(st);
}

TEST(tier_remote_error_is_a_miss_then_retried_after_back_off) { check_failing_remote(FI_REMOTE_ERROR); }
TEST(tier_remote_timeout_is_a_miss_then_retried_after_back_off) { check_failing_remote(FI_REMOTE_TIMEOUT); }

TEST(tier_back_off_doubles_with_failures_in_a_row)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    void *out = NULL;
    size_t size = 0;
    f->fail_with = FI_REMOTE_ERROR;
    f->base.config.backoff_ms = 100;
    CHECK_OK(open_with(&st, f));
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    sleep_ms(130); /* past the first period (100 ms): asked again, fails again */
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->gets == 2);
    sleep_ms(130); /* within the second period (200 ms): not asked */
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->gets == 2);
    fi_store_close(st);
}

/* ---- the fleet lease ------------------------------------------------------------ */

TEST(tier_lock_takes_the_fleet_lease_and_unlock_gives_it_back)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    fake_remote *f = fake_new(NULL);
    CHECK_OK(open_with(&st, f));
    CHECK_OK(fi_store_lock_key(st, key1, &lock));
    CHECK(f->leased == 1 && memcmp(f->lease_key, key1, 16) == 0);
    fi_store_unlock(lock);
    CHECK(f->leased == 0 && f->releases == 1);
    fi_store_close(st);
}

TEST(tier_lock_waits_bounded_for_another_hosts_lease)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    fake_remote *f = fake_new(NULL);
    static const uint8_t other[16] = {0xee};
    CHECK_OK(open_with(&st, f));
    /* Another host holds key1's lease and never finishes: the wait ends at
     * wait_ms (100 ms) and the caller builds without the lease. */
    CHECK(fake_lease(&f->base, key1, other, 1000) == FI_REMOTE_OK);
    int64_t start = fi__now_ns();
    CHECK_OK(fi_store_lock_key(st, key1, &lock));
    int64_t waited_ms = (fi__now_ns() - start) / 1000000;
    /* At least the wait; the upper bound only says "no hang" on a loaded machine. */
    CHECK_MSG(waited_ms >= 100 && waited_ms < 30000, "waited %lld ms", (long long)waited_ms);
    CHECK(f->leased == 1 && memcmp(f->lease_token, other, 16) == 0);
    fi_store_unlock(lock);
    CHECK(f->leased == 1); /* not ours to release */
    /* The other host's entry appears: the wait ends at once, without taking
     * the lease (still the other host's) and with the entry there to load. */
    fake_seed(f, key1);
    CHECK_OK(fi_store_lock_key(st, key1, &lock));
    CHECK(f->leased == 1 && memcmp(f->lease_token, other, 16) == 0 && fake_find(f, key1) >= 0);
    fi_store_unlock(lock);
    fi_store_close(st);
}

TEST(tier_read_only_remote_is_never_written_nor_leased)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    fake_remote *f = fake_new(NULL);
    fi_object_meta m;
    void *out = NULL;
    size_t size = 0;
    meta_of(&m);
    f->base.config.read_only = 1;
    fake_seed(f, key1);
    ((uint8_t *)f->slots[0].entry)[f->slots[0].size - 1] ^= 1; /* bad, but not ours to remove */
    CHECK_OK(open_with(&st, f));
    CHECK_OK(fi_store_put(st, key2, payload, sizeof payload, &m));
    CHECK_OK(fi_store_lock_key(st, key2, &lock));
    fi_store_unlock(lock);
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->puts == 0 && f->leases == 0 && f->removes == 0 && f->count == 1);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_corrupt == 1);
    fi_store_close(st);
}

TEST(tier_secret_seals_pushes_and_refuses_unsealed_entries)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    fi_object_meta m;
    void *out = NULL;
    size_t size = 0;
    meta_of(&m);
    CHECK_OK(open_with(&st, f));
    CHECK_RC(fi_store_set_secret(st, "short"), FI_EINVALID);
    CHECK_OK(fi_store_set_secret(st, "a fleet secret of some length"));
    CHECK_OK(fi_store_put(st, key1, payload, sizeof payload, &m));
    CHECK(f->count == 1 && memcmp(f->slots[0].entry, FI_SEAL_MAGIC, 8) == 0);
    /* A poisoner without the secret writes a valid but unsealed entry. */
    fake_seed(f, key2);
    CHECK_RC(fi_store_get(st, key2, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->removes == 1 && fake_find(f, key2) < 0);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_corrupt == 1 && s.remote_bytes_out > (int64_t)sizeof payload);
    fi_store_close(st);
}

TEST(tier_put_pushes_a_valid_entry_to_the_remote)
{
    fi_store *st = NULL;
    int closed = 0;
    fake_remote *f = fake_new(&closed);
    fi_object_meta m;
    fi_object_header h;
    const void *p;
    char why[256];
    meta_of(&m);
    CHECK_OK(open_with(&st, f));
    CHECK_OK(fi_store_put(st, key1, payload, sizeof payload, &m));
    CHECK(f->puts == 1 && f->count == 1);
    CHECK(fi_object_decode(f->slots[0].entry, f->slots[0].size, key1, &h, &p, why, sizeof why) ==
          FI_OBJECT_OK);
    CHECK(h.payload_size == sizeof payload && memcmp(p, payload, sizeof payload) == 0);
    CHECK(strcmp(h.meta.spec, m.spec) == 0);
    fi_store_close(st);
    CHECK(closed == 1);
}

TEST(tier_put_fails_as_the_local_tier_says_even_when_the_remote_took_it)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    void *out = NULL;
    size_t size = 0;
    fi_object_meta m;
    meta_of(&m);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0)); /* create it */
    fi_store_close(st);
    fake_seed(f, key2);
    CHECK_OK(fi_store_open(&st, check_tmpdir, FI_STORE_READ_ONLY, 0));
    CHECK_OK(fi_store_add_remote(st, &f->base));
    CHECK_RC(fi_store_put(st, key1, payload, sizeof payload, &m), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "read-only") != NULL);
    CHECK(f->puts == 1);
    /* A read-only local tier serves remote hits without writing them back. */
    CHECK_OK(fi_store_get(st, key2, &out, &size, NULL));
    CHECK(size == sizeof payload && memcmp(out, payload, size) == 0);
    fi__free(out);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.entries == 0);
    fi_store_close(st);
}
