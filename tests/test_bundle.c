/*
 * Bundles (src/store/bundle.c through fi_cache_export / fi_cache_import):
 * a round trip; import into a cache that has some of the entries; a byte
 * flipped anywhere in the file (whatever is imported is byte for byte what
 * was exported, and the cache verifies clean); a truncated file (refused,
 * or its lost entries refused and counted); a file of
 * another bundle schema, and one that is no bundle; MACs with a secret.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/store.h"

#define ENTRIES 3
static const char secret[] = "0123456789abcdef-fleet";

static void key_of(uint8_t key[16], int i)
{
    memset(key, 0, 16);
    key[0] = 0xb0;
    key[15] = (uint8_t)i;
}

/* Entry i's payload: 3000 bytes that differ per entry, so entries span pages. */
static void payload_of(uint8_t *p, size_t n, int i)
{
    for (size_t j = 0; j < n; j++) p[j] = (uint8_t)(j * 31 + (size_t)i * 7);
}

static void path_of(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", check_tmpdir, name);
}

/* A cache `name` holding entries [first, last). */
static int fill_cache(const char *name, int first, int last)
{
    char dir[4200];
    fi_store *st = NULL;
    uint8_t payload[3000], key[16];
    path_of(dir, sizeof dir, name);
    int rc = fi_store_open(&st, dir, 0, 0);
    for (int i = first; rc == 0 && i < last; i++) {
        fi_object_meta m;
        memset(&m, 0, sizeof m);
        snprintf(m.spec, sizeof m.spec, "decode q=fp16 hd=%d", 64 + i);
        snprintf(m.arch, sizeof m.arch, i == 2 ? "sm_80" : "sm_90a");
        key_of(key, i);
        payload_of(payload, sizeof payload, i);
        rc = fi_store_put(st, key, payload, sizeof payload, &m);
    }
    fi_store_close(st);
    return rc;
}

/* Export cache `name` to `bundle`, or import `bundle` into cache `name`. */
static int bundle_op(int export, const char *name, const char *bundle, const char *with_secret,
                     fi_bundle_counts *counts)
{
    char dir[4200], path[4200];
    fi_cache *cache = NULL;
    path_of(dir, sizeof dir, name);
    path_of(path, sizeof path, bundle);
    int rc = fi_cache_open(&cache, dir, 0);
    if (rc == 0)
        rc = export ? fi_cache_export(counts, cache, path, NULL, NULL, with_secret)
                    : fi_cache_import(counts, cache, path, with_secret, NULL, NULL);
    fi_cache_close(cache);
    return rc;
}

#define export_from(name, bundle, secret, counts) bundle_op(1, name, bundle, secret, counts)
#define import_into(name, bundle, secret, counts) bundle_op(0, name, bundle, secret, counts)

static void count_problem(void *user, const char *problem)
{
    (void)problem;
    ++*(int *)user;
}

/* Every entry of cache `name` is one that was exported, byte for byte, and
 * the cache verifies clean. Returns the number of entries, or -1. */
static int cache_holds_only_originals(const char *name)
{
    char dir[4200];
    fi_store *st = NULL;
    int found = 0, problems = 0;
    path_of(dir, sizeof dir, name);
    if (fi_store_open(&st, dir, 0, 0) < 0) return -1;
    for (int i = 0; i < ENTRIES; i++) {
        uint8_t key[16], want[3000];
        void *got = NULL;
        size_t size = 0;
        key_of(key, i);
        payload_of(want, sizeof want, i);
        int rc = fi_store_get(st, key, &got, &size, NULL);
        if (rc == 0 && (size != sizeof want || memcmp(got, want, size) != 0)) problems++;
        found += rc == 0;
        fi__free(got);
    }
    fi_jit_stats s;
    if (fi_store_verify(st, 0, count_problem, &problems) != 0 ||
        fi_store_stats_get(st, &s) < 0 || s.entries != found)
        problems++;
    fi_store_close(st);
    return problems ? -1 : found;
}

static int copy_file(const char *from, const char *to, long keep_bytes, long flip_at)
{
    void *data = NULL;
    size_t size = 0;
    if (fi__read_file(from, &data, &size, 1 << 26) < 0) return -1;
    if (keep_bytes >= 0 && (size_t)keep_bytes < size) size = (size_t)keep_bytes;
    if (flip_at >= 0 && (size_t)flip_at < size) ((uint8_t *)data)[flip_at] ^= 0x5a;
    FILE *f = fopen(to, "wb");
    int ok = f && fwrite(data, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = 0;
    fi__free(data);
    return ok ? (int)size : -1;
}

TEST(bundle_round_trip_and_import_into_a_cache_with_some)
{
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    CHECK(c.entries == ENTRIES);
    CHECK_RC(export_from("from", "all.bundle", NULL, &c), FI_EINVALID); /* exists */
    CHECK_OK(import_into("fresh", "all.bundle", NULL, &c));
    CHECK(c.entries == ENTRIES && c.added == ENTRIES && c.present == 0 && c.refused == 0);
    CHECK(cache_holds_only_originals("fresh") == ENTRIES);
    CHECK_OK(fill_cache("some", 0, 1));
    CHECK_OK(import_into("some", "all.bundle", NULL, &c));
    CHECK(c.added == ENTRIES - 1 && c.present == 1 && c.refused == 0);
    CHECK(cache_holds_only_originals("some") == ENTRIES);
}

/* fi_cache_export's filter: the CLI picks specs and arches with it. */
static int only_sm80(void *user, const fi_cache_entry *e)
{
    (void)user;
    return strcmp(e->arch, "sm_80") == 0;
}

TEST(bundle_export_takes_what_the_filter_wants)
{
    char dir[4200], path[4200];
    fi_cache *cache = NULL;
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    path_of(dir, sizeof dir, "from");
    path_of(path, sizeof path, "sm80.bundle");
    CHECK_OK(fi_cache_open(&cache, dir, 0));
    int rc = fi_cache_export(&c, cache, path, only_sm80, NULL, NULL);
    fi_cache_close(cache);
    CHECK_OK(rc);
    CHECK(c.entries == 1);
}

TEST(bundle_with_a_flipped_byte_never_imports_a_bad_entry)
{
    char from[4200], to[4200], name[64];
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    path_of(from, sizeof from, "all.bundle");
    struct stat st;
    CHECK(stat(from, &st) == 0);
    int refused = 0, failed = 0, clean = 0, points = 0;
    const long stride = check_quick() ? 211 : 97;
    for (long at = 0; at < st.st_size; at += stride, points++) {
        snprintf(name, sizeof name, "flip-%ld", at);
        path_of(to, sizeof to, "flipped.bundle");
        CHECK(copy_file(from, to, -1, at) > 0);
        int rc = import_into(name, "flipped.bundle", NULL, &c);
        CHECK_MSG(rc == 0 || rc == FI_ECORRUPT || rc == FI_EINVALID,
                  "byte %ld: rc %d (%s)", at, rc, fi_last_error());
        int held = cache_holds_only_originals(name);
        CHECK_MSG(held >= 0, "byte %ld flipped: the cache holds an entry that was not exported", at);
        CHECK(rc < 0 || held == c.added);
        failed += rc < 0;
        refused += rc == 0 && c.refused > 0;
        clean += rc == 0 && c.refused == 0;
    }
    printf("  %d flips: %d refused some entries, %d failed the whole file, %d changed nothing "
           "checked (free space)\n", points, refused, failed, clean);
    CHECK(refused > 0); /* the entries' bytes were hit and caught */
}

TEST(bundle_truncated_is_refused_and_adds_nothing_bad)
{
    char from[4200], to[4200];
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    path_of(from, sizeof from, "all.bundle");
    path_of(to, sizeof to, "short.bundle");
    struct stat st;
    CHECK(stat(from, &st) == 0);
    static const double fractions[] = {0.0, 0.1, 0.5, 0.9};
    for (size_t i = 0; i < sizeof fractions / sizeof *fractions; i++) {
        char name[32];
        snprintf(name, sizeof name, "short-%zu", i);
        CHECK(copy_file(from, to, (long)(st.st_size * fractions[i]), -1) >= 0);
        int rc = import_into(name, "short.bundle", NULL, &c);
        /* SQLite reads a page past the end as zeros: the entries there
         * are refused by the codec, the others imported, all counted. */
        CHECK_MSG(rc == FI_EINVALID || rc == FI_ECORRUPT ||
                      (rc == 0 && c.added + c.refused == ENTRIES && c.refused > 0),
                  "cut at %.0f%%: rc %d (%s)", fractions[i] * 100, rc, fi_last_error());
        CHECK(cache_holds_only_originals(name) >= 0);
    }
}

TEST(bundle_of_another_schema_or_none_is_refused_clearly)
{
    char path[4200];
    fi_bundle_counts c;
    sqlite3 *db = NULL;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    path_of(path, sizeof path, "all.bundle");
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "PRAGMA user_version = 2", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK_RC(import_into("to", "all.bundle", NULL, &c), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "has schema 2") && strstr(fi_last_error(), "reads schema 1"),
              "%s", fi_last_error());
    path_of(path, sizeof path, "other.sqlite");
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "CREATE TABLE t (x)", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK_RC(import_into("to", "other.sqlite", NULL, &c), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "is not a fijit bundle") != NULL);
    CHECK(cache_holds_only_originals("to") == 0);
}

TEST(bundle_macs_with_a_secret)
{
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    CHECK_OK(export_from("from", "plain.bundle", NULL, &c));
    CHECK_OK(export_from("from", "sealed.bundle", secret, &c));
    CHECK_RC(import_into("a", "plain.bundle", secret, &c), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "carries no MACs") != NULL);
    CHECK_OK(import_into("a", "sealed.bundle", "a different secret, long enough", &c));
    CHECK(c.refused == ENTRIES && c.added == 0);
    CHECK_OK(import_into("a", "sealed.bundle", secret, &c));
    CHECK(c.added == ENTRIES && c.refused == 0);
    CHECK_OK(import_into("b", "sealed.bundle", NULL, &c)); /* codec checks only */
    CHECK(c.added == ENTRIES);
    CHECK(cache_holds_only_originals("a") == ENTRIES);
}
