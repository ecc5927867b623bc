/* Tests of the tier front (src/store/store.c) with an in-memory fake remote
 * (src/store/remote/remote.h): a remote hit is verified by the entry codec
 * and written back to the local tier, a corrupt remote entry is rejected and
 * removed, a remote error or timeout is a miss (and the remote is skipped
 * from then on), a put pushes to the remote, and the codec round-trips. */
#include <string.h>

#include "check.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/remote/remote.h"
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
    int gets, puts, removes;
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

static void fake_close(fi_remote *r)
{
    fake_remote *f = (fake_remote *)r;
    for (int i = 0; i < f->count; i++) free(f->slots[i].entry);
    if (f->closed) *f->closed = 1;
    free(f);
}

static const fi_remote_ops fake_ops = {"fake", fake_get, fake_put, fake_remove, fake_close};

static fake_remote *fake_new(int *closed)
{
    fake_remote *f = calloc(1, sizeof *f);
    f->base.ops = &fake_ops;
    f->base.url = "fake://test";
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
    snprintf(m->spec, sizeof m->spec, "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none");
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

static void check_failing_remote(fi_remote_result how)
{
    fi_store *st = NULL;
    fake_remote *f = fake_new(NULL);
    fi_object_meta m;
    void *out = NULL;
    size_t size = 0;
    meta_of(&m);
    fake_seed(f, key1);
    f->fail_with = how;
    CHECK_OK(open_with(&st, f));
    CHECK_RC(fi_store_get(st, key1, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(f->gets == 1);
    /* Skipped from then on: neither get nor put asks it again. */
    CHECK_RC(fi_store_get(st, key2, &out, &size, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_put(st, key2, payload, sizeof payload, &m));
    CHECK(f->gets == 1 && f->puts == 0);
    /* The local tier still works. */
    CHECK_OK(fi_store_get(st, key2, &out, &size, NULL));
    fi__free(out);
    fi_store_close(st);
}

TEST(tier_remote_error_is_a_miss) { check_failing_remote(FI_REMOTE_ERROR); }
TEST(tier_remote_timeout_is_a_miss) { check_failing_remote(FI_REMOTE_TIMEOUT); }

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
