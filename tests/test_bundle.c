/*
 * Bundles (src/store/bundle.c through fi_cache_export / fi_cache_import):
 * a round trip; import into a cache that has some of the entries; a byte
 * flipped anywhere in the file (whatever is imported is byte for byte what
 * was exported, and the cache verifies clean); a truncated file (its whole
 * entries imported, the lost ones refused and counted); a link, a FIFO, a
 * directory or a device as the bundle; two imports at once; a file of
 * another bundle schema, and one that is no bundle; MACs with a secret.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
        snprintf(m.spec, sizeof m.spec,
                 "decode q=fp16 kv=fp16 o=fp16 hd=%d mask=none pos=none softcap=0", 64 << i % 3);
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

/* Every entry of cache `name` is one of entries [0, n) as exported, byte
 * for byte, and the cache verifies clean. Returns the number of entries, or -1. */
static int cache_holds_only_originals_of(const char *name, int n)
{
    char dir[4200];
    fi_store *st = NULL;
    int found = 0, problems = 0;
    path_of(dir, sizeof dir, name);
    if (fi_store_open(&st, dir, 0, 0) < 0) return -1;
    for (int i = 0; i < n; i++) {
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

static int cache_holds_only_originals(const char *name)
{
    return cache_holds_only_originals_of(name, ENTRIES);
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

/* A truncated bundle imports every entry it still holds whole and refuses
 * (and counts) the rest; SQLite alone refuses the whole file. With many
 * entries the share imported follows the share kept (a bundle's first rows
 * sit in a leaf page written after the third row, so a few entries lose
 * more). */
TEST(bundle_truncated_imports_the_entries_it_still_holds)
{
    enum { MANY = 24 };
    char from[4200], to[4200];
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, MANY));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    CHECK(c.entries == MANY);
    path_of(from, sizeof from, "all.bundle");
    path_of(to, sizeof to, "short.bundle");
    struct stat st;
    CHECK(stat(from, &st) == 0);
    static const int percents[] = {0, 10, 50, 90, 99};
    int problems = 0;
    for (size_t i = 0; i < sizeof percents / sizeof *percents; i++) {
        char name[32];
        int pct = percents[i];
        snprintf(name, sizeof name, "short-%d", pct);
        CHECK(copy_file(from, to, (long)(st.st_size * pct / 100), -1) >= 0);
        char dir[4200], path[4200];
        fi_cache *cache = NULL;
        path_of(dir, sizeof dir, name);
        path_of(path, sizeof path, "short.bundle");
        int rc = fi_cache_open(&cache, dir, 0);
        if (rc == 0) rc = fi_cache_import(&c, cache, path, NULL, count_problem, &problems);
        fi_cache_close(cache);
        if (pct < 10) { /* not even its header is left */
            CHECK_MSG(rc == FI_EINVALID || rc == FI_ECORRUPT, "cut at %d%%: rc %d", pct, rc);
            continue;
        }
        CHECK_MSG(rc == 0, "cut at %d%%: rc %d (%s)", pct, rc, fi_last_error());
        CHECK(c.entries == MANY && c.added + c.refused == MANY && c.refused > 0);
        /* At least the share kept, less the rows of the first leaf and
         * the pages a row shares with the next. */
        int least = MANY * pct / 100 - 4;
        CHECK_MSG(c.added >= least, "cut at %d%%: %lld of %d imported, want at least %d", pct,
                  (long long)c.added, MANY, least);
        CHECK(cache_holds_only_originals_of(name, MANY) == c.added);
        printf("  cut at %d%%: %lld of %d entries imported\n", pct, (long long)c.added, MANY);
    }
    CHECK(problems > 0);
}

/* Export entries [0, ENTRIES) to a new all.bundle, then run `sql` on it. */
static int exported_then_changed(const char *sql)
{
    char path[4200];
    fi_bundle_counts c;
    sqlite3 *db = NULL;
    path_of(path, sizeof path, "all.bundle");
    unlink(path);
    int rc = fill_cache("from", 0, ENTRIES);
    if (rc == 0) rc = export_from("from", "all.bundle", NULL, &c);
    if (rc == 0 && sqlite3_open(path, &db) == SQLITE_OK)
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    sqlite3_close(db);
    return rc;
}

static void keep_problem(void *user, const char *problem)
{
    char *text = user;
    size_t n = strlen(text);
    snprintf(text + n, 1024 - n, "%s\n", problem);
}

/* A bundle's own texts (its format name, a row's key) are never echoed
 * with terminal escapes in them. */
TEST(bundle_texts_in_messages_carry_no_control_bytes)
{
    fi_bundle_counts c;
    char problems[1024] = "";
    CHECK_OK(exported_then_changed("UPDATE bundle SET value = 'x' || char(27) || '[2J' "
                                   "WHERE name = 'format'"));
    CHECK_RC(import_into("to", "all.bundle", NULL, &c), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "format 'x?[2J'") && !strchr(fi_last_error(), 27), "%s",
              fi_last_error());
    CHECK_OK(exported_then_changed("UPDATE entries SET key = char(27) || '[2J' || substr(key, 5) "
                                   "WHERE rowid = 1"));
    char dir[4200], path[4200];
    fi_cache *cache = NULL;
    path_of(dir, sizeof dir, "keys");
    path_of(path, sizeof path, "all.bundle");
    CHECK_OK(fi_cache_open(&cache, dir, 0));
    int rc = fi_cache_import(&c, cache, path, NULL, keep_problem, problems);
    fi_cache_close(cache);
    CHECK_OK(rc);
    CHECK(c.refused == 1 && c.added == ENTRIES - 1);
    CHECK_MSG(strstr(problems, "entry 1 has a malformed key") && !strchr(problems, 27), "%s",
              problems);
}

/* Bundles written before entries became a rowid table (WITHOUT ROWID)
 * still import, by key. */
TEST(bundle_of_the_earlier_layout_still_imports)
{
    fi_bundle_counts c;
    CHECK_OK(exported_then_changed(
        "CREATE TABLE old (key TEXT PRIMARY KEY NOT NULL, spec TEXT NOT NULL, arch TEXT NOT NULL, "
        "size INTEGER NOT NULL, checksum INTEGER NOT NULL, mac BLOB, entry BLOB NOT NULL) "
        "WITHOUT ROWID; INSERT INTO old SELECT key, spec, arch, size, checksum, mac, entry "
        "FROM entries; DROP TABLE entries; ALTER TABLE old RENAME TO entries;"));
    CHECK_OK(import_into("to", "all.bundle", NULL, &c));
    CHECK(c.entries == ENTRIES && c.added == ENTRIES && c.refused == 0);
    CHECK(cache_holds_only_originals("to") == ENTRIES);
}

/* A link to a bundle is the bundle; a directory, FIFO or device is refused
 * as not a regular file, at once (a FIFO never blocks the import). */
TEST(bundle_path_is_followed_to_a_regular_file_only)
{
    char path[4200], target[4200];
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, ENTRIES));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    path_of(target, sizeof target, "all.bundle");
    path_of(path, sizeof path, "link.bundle");
    CHECK(symlink(target, path) == 0);
    CHECK_OK(import_into("linked", "link.bundle", NULL, &c));
    CHECK(c.added == ENTRIES && cache_holds_only_originals("linked") == ENTRIES);
    path_of(path, sizeof path, "fifo.bundle");
    CHECK(mkfifo(path, 0600) == 0);
    path_of(path, sizeof path, "dir.bundle");
    CHECK(mkdir(path, 0700) == 0);
    static const char *const others[] = {"fifo.bundle", "dir.bundle", "/dev/zero"};
    alarm(60); /* a blocked open ends the test program, never hangs it */
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char dir[4200];
        fi_cache *cache = NULL;
        path_of(dir, sizeof dir, "other");
        if (others[i][0] == '/')
            snprintf(path, sizeof path, "%s", others[i]);
        else
            path_of(path, sizeof path, others[i]);
        CHECK_OK(fi_cache_open(&cache, dir, 0));
        int rc = fi_cache_import(&c, cache, path, NULL, NULL, NULL);
        fi_cache_close(cache);
        CHECK_MSG(rc == FI_EINVALID && strstr(fi_last_error(), "not a regular file"),
                  "%s: rc %d: %s", others[i], rc, fi_last_error());
    }
    alarm(0);
    path_of(path, sizeof path, "none.bundle");
    CHECK_RC(import_into("other", "none.bundle", NULL, &c), FI_ENOTFOUND);
    CHECK(strstr(fi_last_error(), "no such file") != NULL);
}

/* Two imports of one bundle into one cache at once: each entry is counted
 * added by exactly one of them. */
TEST(bundle_imported_twice_at_once_counts_each_entry_added_once)
{
    enum { MANY = 10, ROUNDS = 4 };
    fi_bundle_counts c;
    CHECK_OK(fill_cache("from", 0, MANY));
    CHECK_OK(export_from("from", "all.bundle", NULL, &c));
    for (int round = 0; round < ROUNDS; round++) {
        char name[32];
        int fds[2];
        pid_t pids[2];
        snprintf(name, sizeof name, "both-%d", round);
        CHECK(pipe(fds) == 0);
        for (int k = 0; k < 2; k++)
            if ((pids[k] = fork()) == 0) {
                fi_bundle_counts mine;
                int rc = import_into(name, "all.bundle", NULL, &mine);
                int64_t words[3] = {rc, mine.added, mine.present};
                _exit(write(fds[1], words, sizeof words) == sizeof words ? 0 : 1);
            }
        close(fds[1]);
        int64_t added = 0, present = 0, words[3];
        for (int k = 0; k < 2; k++) {
            int status = 0;
            waitpid(pids[k], &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            CHECK(read(fds[0], words, sizeof words) == sizeof words);
            CHECK_MSG(words[0] == 0, "an import failed: %lld", (long long)words[0]);
            added += words[1];
            present += words[2];
        }
        close(fds[0]);
        CHECK_MSG(added == MANY && present == MANY, "round %d: %lld added, %lld present", round,
                  (long long)added, (long long)present);
        CHECK(cache_holds_only_originals_of(name, MANY) == MANY);
    }
}

/* The mechanism under that: of two writers of a key that both found it
 * missing, the put tells the second that it was there already. */
TEST(put_counted_tells_the_second_writer_of_a_key)
{
    char dir[4200];
    fi_store *a = NULL, *b = NULL;
    uint8_t key[16], payload[3000];
    int added_a = -1, added_b = -1;
    path_of(dir, sizeof dir, "cache");
    key_of(key, 1);
    payload_of(payload, sizeof payload, 1);
    CHECK_OK(fi_store_open(&a, dir, 0, 0));
    int rc = fi_store_open(&b, dir, 0, 0);
    if (rc == 0 && fi_store_has_local(a, key) == 0 && fi_store_has_local(b, key) == 0) {
        rc = fi_store_put_counted(a, key, payload, sizeof payload, NULL, &added_a);
        if (rc == 0) rc = fi_store_put_counted(b, key, payload, sizeof payload, NULL, &added_b);
    }
    fi_store_close(a);
    fi_store_close(b);
    CHECK_OK(rc);
    CHECK(added_a == 1 && added_b == 0);
}

TEST(bundle_of_another_schema_or_none_is_refused_clearly)
{
    char path[4200];
    fi_bundle_counts c;
    sqlite3 *db = NULL;
    CHECK_OK(exported_then_changed("PRAGMA user_version = 2"));
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
