/* Tests of the local cache through the tier front (src/store/): round trips, every kind of damaged
 * object, a broken or outdated index, directory permissions, verify/repair,
 * eviction, statistics, per-key locks across processes and threads, and
 * injected faults. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "store/store.h"
#include "common/sys.h"

/* ---- fixtures ---------------------------------------------------------------- */

/* Distinct keys for distinct n (n < 2^24), spread over subfolders. */
static void make_key(uint8_t key[16], int n)
{
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)(n * 37 + i * 11 + 1);
    key[13] = (uint8_t)(n >> 16), key[14] = (uint8_t)(n >> 8), key[15] = (uint8_t)n;
}

static void make_meta(fi_object_meta *m, int n)
{
    memset(m, 0, sizeof *m);
    snprintf(m->spec, sizeof m->spec,
             "decode q=fp16 kv=fp16 o=fp16 hd=%d mask=none pos=none softcap=0", 64 << (n % 3));
    snprintf(m->arch, sizeof m->arch, "sm_%d", 80 + n % 11);
    m->registers = 40 + n;
    m->spill_bytes = n;
    m->compile_ns = 1000000 + n;
}

/* Deterministic, key-specific payload of `size` bytes. */
static unsigned char *make_payload(int n, size_t size)
{
    unsigned char *p = malloc(size);
    for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(i * 31 + (size_t)n * 7);
    return p;
}

static void object_file(char *out, size_t size, const uint8_t key[16])
{
    char hex[33];
    fi_key_hex(hex, key);
    snprintf(out, size, "%s/objects/%.2s/%s.fo", check_tmpdir, hex, hex);
}

static int put_n(fi_store *st, int n, size_t size)
{
    uint8_t key[16];
    fi_object_meta m;
    make_key(key, n);
    make_meta(&m, n);
    unsigned char *p = make_payload(n, size);
    int rc = fi_store_put(st, key, p, size, &m);
    free(p);
    return rc;
}

/* 1 if the store serves object n with the right bytes, 0 if not found,
 * WRONG_BYTES if it serves something else, or the negative error code. */
#define WRONG_BYTES 99
static int has_n(fi_store *st, int n, size_t size)
{
    uint8_t key[16];
    void *data = NULL;
    size_t got = 0;
    make_key(key, n);
    int rc = fi_store_get(st, key, &data, &got, NULL);
    if (rc == FI_ENOTFOUND) return 0;
    if (rc != 0) return rc;
    unsigned char *want = make_payload(n, size);
    int ok = got == size && memcmp(data, want, size) == 0;
    free(want);
    fi__free(data);
    return ok ? 1 : WRONG_BYTES;
}

static fi_jit_stats stats_of(fi_store *st)
{
    fi_jit_stats s;
    memset(&s, 0x55, sizeof s);
    if (fi_store_stats_get(st, &s) != 0) memset(&s, 0xff, sizeof s);
    return s;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Write a small file at `path`, last modified `age_s` seconds ago. */
static int write_aged(const char *path, int age_s)
{
    FILE *f = fopen(path, "w");
    struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
    if (!f) return -1;
    fputs("partial", f);
    fclose(f);
    return utimensat(AT_FDCWD, path, t, 0);
}

static int64_t object_size(int n)
{
    uint8_t key[16];
    char path[4096];
    struct stat sb;
    make_key(key, n);
    object_file(path, sizeof path, key);
    return lstat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* Run one SQL statement on the index behind the store's back. */
static int raw_sql(const char *sql)
{
    char path[4096];
    sqlite3 *db = NULL;
    snprintf(path, sizeof path, "%s/index.sqlite", check_tmpdir);
    int rc = sqlite3_open(path, &db);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    }
    sqlite3_close(db);
    return rc;
}

typedef struct reports {
    int count;
    char text[2048];
} reports;

static void collect(void *user, const char *problem)
{
    reports *r = user;
    r->count++;
    size_t used = strlen(r->text);
    snprintf(r->text + used, sizeof r->text - used, "%s\n", problem);
}

typedef struct listing {
    int count;
    char specs[8][256];
    int64_t hits[8];
} listing;

static int list_row(void *user, const fi_store_row *row)
{
    listing *l = user;
    if (l->count < 8) {
        snprintf(l->specs[l->count], 256, "%s", row->spec);
        l->hits[l->count] = row->hits;
    }
    l->count++;
    return 0;
}

/* ---- round trip ----------------------------------------------------------------- */

TEST(store_put_then_get_round_trip)
{
    fi_store *st = NULL;
    uint8_t key[16];
    fi_object_meta m, got_meta;
    void *data = NULL;
    size_t size = 0;
    struct stat sb;
    char path[4096];
    make_key(key, 1);
    make_meta(&m, 1);
    unsigned char *payload = make_payload(1, 5000);

    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(strcmp(fi_store_dir(st), check_tmpdir) == 0);
    CHECK_OK(fi_store_put(st, key, payload, 5000, &m));
    CHECK_OK(fi_store_get(st, key, &data, &size, &got_meta));
    CHECK(size == 5000 && memcmp(data, payload, size) == 0);
    CHECK(strcmp(got_meta.spec, m.spec) == 0 && strcmp(got_meta.arch, m.arch) == 0);
    CHECK(got_meta.registers == m.registers && got_meta.spill_bytes == m.spill_bytes &&
          got_meta.compile_ns == m.compile_ns);
    fi__free(data);
    free(payload);

    object_file(path, sizeof path, key);
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    fi_jit_stats s = stats_of(st);
    CHECK(s.entries == 1 && s.bytes == (int64_t)sb.st_size && s.bytes > 5000);
    CHECK(s.bytes_written == s.bytes && s.corrupt == 0);

    /* The get counted a hit in the row. */
    listing l = {0};
    CHECK_OK(fi_store_foreach(st, list_row, &l));
    CHECK(l.count == 1 && l.hits[0] == 1 && strcmp(l.specs[0], m.spec) == 0);
    fi_store_close(st);

    /* A second open of the same dir serves the object (a disk hit in a new "process"). */
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(has_n(st, 1, 5000) == 1);
    fi_store_close(st);
}

TEST(store_put_replaces_an_entry)
{
    fi_store *st = NULL;
    uint8_t key[16];
    fi_object_meta m;
    void *data = NULL;
    size_t size = 0;
    make_key(key, 3);
    make_meta(&m, 3);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(fi_store_put(st, key, "first version", 13, &m));
    CHECK_OK(fi_store_put(st, key, "second", 6, &m));
    CHECK_OK(fi_store_get(st, key, &data, &size, NULL));
    CHECK(size == 6 && memcmp(data, "second", 6) == 0);
    fi__free(data);
    CHECK(stats_of(st).entries == 1);
    fi_store_close(st);
}

TEST(store_get_missing_key_is_not_found)
{
    fi_store *st = NULL;
    uint8_t key[16];
    void *data = (void *)1;
    size_t size = 7;
    make_key(key, 9);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_RC(fi_store_get(st, key, &data, &size, NULL), FI_ENOTFOUND);
    CHECK(data == NULL && size == 0);
    CHECK(strstr(fi_last_error(), "no cache entry") != NULL);
    CHECK(stats_of(st).corrupt == 0);
    fi_store_close(st);
}

TEST(store_rejects_bad_arguments)
{
    fi_store *st = NULL;
    uint8_t key[16] = {0};
    fi_object_meta m;
    make_meta(&m, 0);
    CHECK_RC(fi_store_open(&st, "", 0, 0), FI_EINVALID);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_RC(fi_store_put(st, key, "x", 0, &m), FI_EINVALID);
    memset(m.arch, 'a', sizeof m.arch); /* no NUL */
    CHECK_RC(fi_store_put(st, key, "x", 1, &m), FI_EINVALID);
    fi_store_close(st);
    fi_store_close(NULL);
    fi_store_unlock(NULL);
}

/* ---- damaged objects ------------------------------------------------------------ */

typedef void (*damage_fn)(const char *path);

static void damage_truncate(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) == 0 && truncate(path, sb.st_size - 10) != 0) perror("truncate");
}
static void damage_flip_payload(const char *path)
{
    int fd = open(path, O_RDWR);
    struct stat sb;
    unsigned char c;
    fstat(fd, &sb);
    if (pread(fd, &c, 1, sb.st_size - 100) == 1) {
        c ^= 0x10;
        if (pwrite(fd, &c, 1, sb.st_size - 100) != 1) perror("pwrite");
    }
    close(fd);
}
static void damage_flip_header_spec(const char *path)
{
    int fd = open(path, O_RDWR);
    unsigned char c;
    if (pread(fd, &c, 1, 85) == 1) {
        c ^= 0x01;
        if (pwrite(fd, &c, 1, 85) != 1) perror("pwrite");
    }
    close(fd);
}
static void damage_zero_length(const char *path)
{
    if (truncate(path, 0) != 0) perror("truncate");
}
static void damage_delete(const char *path) { unlink(path); }
static void damage_symlink(const char *path)
{
    unlink(path);
    if (symlink("/etc/passwd", path) != 0) perror("symlink");
}

static void damage_fifo(const char *path)
{
    unlink(path);
    if (mkfifo(path, 0600) != 0) perror("mkfifo");
}
static void damage_folder(const char *path)
{
    char inner[4200];
    unlink(path);
    snprintf(inner, sizeof inner, "%s/inner", path);
    if (mkdir(path, 0700) != 0 || mkdir(inner, 0700) != 0) perror("mkdir");
}

/* After `damage`, the object reads as not found, is counted corrupt once
 * (a missing object is not counted: it is what an interrupted gc leaves),
 * and neither its row nor its file remains; a fresh put works again. */
static void check_damage(damage_fn damage, const char *what_in_message)
{
    int64_t counted = damage == damage_delete ? 0 : 1;
    fi_store *st = NULL;
    uint8_t key[16];
    char path[4096];
    void *data = NULL;
    size_t size = 0;
    make_key(key, 2);
    object_file(path, sizeof path, key);

    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 2, 4096));
    CHECK_OK(put_n(st, 4, 4096)); /* a neighbour that must survive */
    damage(path);
    CHECK_RC(fi_store_get(st, key, &data, &size, NULL), FI_ENOTFOUND);
    CHECK(data == NULL);
    CHECK_MSG(strstr(fi_last_error(), what_in_message) != NULL, "message: %s", fi_last_error());
    fi_jit_stats s = stats_of(st);
    CHECK_MSG(s.corrupt == counted && s.entries == 1, "corrupt %lld entries %lld",
              (long long)s.corrupt, (long long)s.entries);
    CHECK(!file_exists(path));
    /* Asking again is a plain miss: nothing more is counted. */
    CHECK_RC(fi_store_get(st, key, &data, &size, NULL), FI_ENOTFOUND);
    CHECK(stats_of(st).corrupt == counted);
    CHECK(has_n(st, 4, 4096) == 1);
    CHECK_OK(put_n(st, 2, 4096));
    CHECK(has_n(st, 2, 4096) == 1);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

TEST(store_truncated_object_is_removed) { check_damage(damage_truncate, "truncated"); }
TEST(store_bit_flipped_payload_is_removed) { check_damage(damage_flip_payload, "checksum"); }
TEST(store_damaged_header_is_removed) { check_damage(damage_flip_header_spec, "header"); }
TEST(store_zero_length_object_is_removed) { check_damage(damage_zero_length, "truncated"); }
TEST(store_deleted_object_row_is_removed) { check_damage(damage_delete, "missing"); }
TEST(store_symlinked_object_is_not_followed) { check_damage(damage_symlink, "symbolic link"); }
/* A folder where an object belongs (with something in it) is removed whole. */
TEST(store_folder_at_an_object_path_is_removed) { check_damage(damage_folder, "not a regular file"); }

/* Run `body` in a child under a watchdog: an open that waits on a FIFO ends
 * in SIGALRM and fails the test instead of blocking the suite. */
static void check_in_child_with_alarm(void (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        body();
        _exit(check_current_failed ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %s",
              WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? "hung (SIGALRM)" : "failed");
}

static void fifo_object_body(void) { check_damage(damage_fifo, "not a regular file"); }

static void fifo_unindexed_body(void)
{
    fi_store *st = NULL;
    char sub[4096], fifo[4200];
    reports r = {0};
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    snprintf(sub, sizeof sub, "%s/objects/ab", check_tmpdir);
    snprintf(fifo, sizeof fifo, "%s/ab0123456789abcdef0123456789abcd.fo", sub);
    CHECK(mkdir(sub, 0700) == 0 && mkfifo(fifo, 0600) == 0);
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 1 && strstr(r.text, "not a regular file"),
              "%s", r.text);
    CHECK(fi_store_verify(st, 1, NULL, NULL) == 1 && !file_exists(fifo));
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

static void fifo_marker_body(void)
{
    fi_store *st = NULL;
    char marker[4096];
    struct stat sb;
    struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    snprintf(marker, sizeof marker, "%s/tmp/last-clean", check_tmpdir);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    fi_store_close(st);
    CHECK(unlink(marker) == 0 && mkfifo(marker, 0600) == 0);
    CHECK(utimensat(AT_FDCWD, marker, old, AT_SYMLINK_NOFOLLOW) == 0); /* due a sweep */
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(lstat(marker, &sb) == 0 && S_ISREG(sb.st_mode)); /* replaced by a plain marker */
    fi_store_close(st);
}

/* A FIFO at an object path, an unindexed .fo or the sweep marker: opened
 * without O_NONBLOCK it would wait for a writer forever. */
TEST(store_fifo_at_an_object_path_never_hangs) { check_in_child_with_alarm(fifo_object_body); }
TEST(store_fifo_unindexed_object_never_hangs_verify) { check_in_child_with_alarm(fifo_unindexed_body); }
TEST(store_fifo_sweep_marker_never_hangs_open) { check_in_child_with_alarm(fifo_marker_body); }

TEST(store_object_under_the_wrong_key_is_removed)
{
    fi_store *st = NULL;
    uint8_t k5[16], k6[16];
    char p5[4096], p6[4096];
    void *data = NULL;
    size_t size = 0;
    make_key(k5, 5);
    make_key(k6, 6);
    object_file(p5, sizeof p5, k5);
    object_file(p6, sizeof p6, k6);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 5, 1000));
    CHECK_OK(put_n(st, 6, 1000));
    CHECK(rename(p5, p6) == 0); /* k6's path now holds k5's object */
    CHECK_RC(fi_store_get(st, k6, &data, &size, NULL), FI_ENOTFOUND);
    CHECK(strstr(fi_last_error(), "holds key") != NULL);
    CHECK(stats_of(st).corrupt == 1);
    fi_store_close(st);
}

/* ---- the index ------------------------------------------------------------------- */

TEST(store_garbage_index_is_rebuilt)
{
    fi_store *st = NULL;
    char path[4096], side[4200];
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 3000));
    fi_store_close(st);
    st = NULL;

    snprintf(path, sizeof path, "%s/index.sqlite", check_tmpdir);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int i = 0; i < 8192; i++) fputc((i * 7919) & 0xff, f);
    fclose(f);

    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    fi_jit_stats s = stats_of(st);
    CHECK_MSG(s.corrupt == 1 && s.entries == 0, "corrupt %lld entries %lld", (long long)s.corrupt,
              (long long)s.entries);
    snprintf(side, sizeof side, "%s.corrupt", path);
    CHECK(file_exists(side));
    /* The object itself was fine: a read re-indexes it from its header. */
    CHECK(has_n(st, 1, 3000) == 1);
    CHECK(stats_of(st).entries == 1);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

TEST(store_truncated_index_is_rebuilt)
{
    fi_store *st = NULL;
    char path[4096], side[4200];
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 0; i < 40; i++) CHECK_OK(put_n(st, i, 100));
    fi_store_close(st);
    st = NULL;
    snprintf(path, sizeof path, "%s/index.sqlite", check_tmpdir);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    CHECK(truncate(path, 100) == 0); /* not even a full header page */
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(stats_of(st).corrupt == 1);
    CHECK(has_n(st, 7, 100) == 1);
    fi_store_close(st);
}

TEST(store_index_of_another_schema_version_is_rebuilt)
{
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 2000));
    fi_store_close(st);
    st = NULL;
    CHECK_OK(raw_sql("DROP TABLE entries; CREATE TABLE entries (old_layout INTEGER);"
                     "INSERT INTO entries VALUES (1); PRAGMA user_version = 99;"));
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(stats_of(st).entries == 0);
    CHECK(has_n(st, 1, 2000) == 1); /* re-indexed from the object header */
    CHECK(stats_of(st).entries == 1);
    fi_store_close(st);
}

TEST(store_index_is_in_wal_mode)
{
    fi_store *st = NULL;
    char path[4096];
    sqlite3 *db;
    sqlite3_stmt *q;
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    snprintf(path, sizeof path, "%s/index.sqlite", check_tmpdir);
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(q) == SQLITE_ROW);
    int wal = strcmp((const char *)sqlite3_column_text(q, 0), "wal") == 0;
    sqlite3_finalize(q);
    sqlite3_close(db);
    fi_store_close(st);
    CHECK(wal);
}

/* ---- directories ------------------------------------------------------------------ */

TEST(store_creates_private_directories)
{
    fi_store *st = NULL;
    char dir[4096], sub[4200];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s/a/b/cache", check_tmpdir);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    const char *subs[] = {"objects", "locks", "tmp"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, subs[i]);
        CHECK(lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0700);
    }
    CHECK_OK(put_n(st, 1, 100));
    fi_store_close(st);
}

TEST(store_refuses_a_world_writable_dir)
{
    fi_store *st = NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/shared", check_tmpdir);
    CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0);
    CHECK_RC(fi_store_open(&st, dir, 0, 0), FI_EPERM);
    CHECK(st == NULL);
    CHECK(strstr(fi_last_error(), "writable by group or others") != NULL);
    CHECK(chmod(dir, 0775) == 0); /* group write alone is refused too */
    CHECK_RC(fi_store_open(&st, dir, 0, 0), FI_EPERM);
    CHECK_OK(fi_store_open(&st, dir, FI_STORE_ALLOW_UNSAFE_DIR, 0));
    CHECK_OK(put_n(st, 1, 100));
    CHECK(has_n(st, 1, 100) == 1);
    fi_store_close(st);
}

TEST(store_refuses_symlinked_subfolders)
{
    fi_store *st = NULL;
    char dir[4096], sub[4200], target[4200];
    snprintf(dir, sizeof dir, "%s/c", check_tmpdir);
    snprintf(target, sizeof target, "%s/elsewhere", check_tmpdir);
    snprintf(sub, sizeof sub, "%s/objects", dir);
    CHECK(mkdir(dir, 0700) == 0 && mkdir(target, 0700) == 0);
    CHECK(symlink(target, sub) == 0);
    CHECK_RC(fi_store_open(&st, dir, 0, 0), FI_EPERM);
}

TEST(store_read_only_open)
{
    fi_store *st = NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ro", check_tmpdir);
    CHECK_RC(fi_store_open(&st, dir, FI_STORE_READ_ONLY, 0), FI_ENOTFOUND);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK_OK(put_n(st, 1, 100));
    fi_store_close(st);
    CHECK_OK(fi_store_open(&st, dir, FI_STORE_READ_ONLY, 0));
    CHECK(has_n(st, 1, 100) == 1);
    CHECK_RC(put_n(st, 2, 100), FI_EINVALID);
    CHECK_RC(fi_store_gc(st, 0, 0), FI_EINVALID);
    CHECK(stats_of(st).entries == 1);
    fi_store_close(st);
}

/* ---- verify ----------------------------------------------------------------------- */

TEST(store_verify_reports_and_repairs)
{
    fi_store *st = NULL;
    uint8_t k1[16], k3[16];
    char p1[4096], hex3[33], sql[200], temp[4200];
    reports r = {0};
    make_key(k1, 1);
    make_key(k3, 3);
    object_file(p1, sizeof p1, k1);
    fi_key_hex(hex3, k3);

    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 1; i <= 4; i++) CHECK_OK(put_n(st, i, 2048));
    CHECK(fi_store_verify(st, 0, collect, &r) == 0 && r.count == 0);

    damage_flip_payload(p1);                                    /* bad entry */
    snprintf(sql, sizeof sql, "DELETE FROM entries WHERE key = '%s'", hex3);
    CHECK_OK(raw_sql(sql));                                     /* orphan object */
    snprintf(temp, sizeof temp, "%s.tmp.1.1", p1);              /* old leftover temp */
    CHECK(write_aged(temp, 7200) == 0);

    /* The dead writer's temp is said, as a note, but is no problem. */
    int found = fi_store_verify(st, 0, collect, &r);
    CHECK_MSG(found == 2 && r.count == 3, "found %d: %.900s", found, r.text);
    CHECK(strstr(r.text, "checksum") && strstr(r.text, hex3) && strstr(r.text, "note: leftover temp"));
    CHECK(file_exists(p1) && file_exists(temp)); /* without repair nothing changes */

    memset(&r, 0, sizeof r);
    CHECK(fi_store_verify(st, 1, collect, &r) == 2);
    CHECK(!file_exists(p1) && !file_exists(temp));
    memset(&r, 0, sizeof r);
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0, "%.900s", r.text);
    fi_jit_stats s = stats_of(st);
    CHECK(s.entries == 3 && s.corrupt == 1); /* the orphan was re-indexed */
    CHECK(has_n(st, 1, 2048) == 0 && has_n(st, 3, 2048) == 1);
    fi_store_close(st);
}

/* The serving path refuses to read through a linked objects/<xx> folder;
 * verify must judge it the same way, so that one repair run fixes all. */
TEST(store_symlinked_object_folder_is_repaired_in_one_run)
{
    fi_store *st = NULL;
    uint8_t k1[16];
    char hex[33], sub[4096], away[4096], moved[4200];
    make_key(k1, 1);
    fi_key_hex(hex, k1);
    snprintf(sub, sizeof sub, "%s/objects/%.2s", check_tmpdir, hex);
    snprintf(away, sizeof away, "%s/elsewhere", check_tmpdir);
    snprintf(moved, sizeof moved, "%s/%s.fo", away, hex);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    CHECK_OK(put_n(st, 2, 1000));
    CHECK(rename(sub, away) == 0 && symlink(away, sub) == 0);
    CHECK(has_n(st, 1, 1000) == 0); /* serving refuses it */
    CHECK(fi_store_verify(st, 0, NULL, NULL) > 0);
    CHECK(fi_store_verify(st, 1, NULL, NULL) > 0);
    reports r = {0};
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0, "after one repair: %s", r.text);
    CHECK(file_exists(moved)); /* nothing removed through the link */
    CHECK(stats_of(st).entries == 1 && has_n(st, 2, 1000) == 1);
    CHECK_OK(put_n(st, 1, 1000));
    CHECK(has_n(st, 1, 1000) == 1);
    fi_store_close(st);
}

/* A folder at an indexed object's path and one at an unindexed .fo name:
 * one repair removes both (unlink cannot, and the entry could never be
 * written again). */
TEST(store_verify_repairs_folders_at_object_paths)
{
    fi_store *st = NULL;
    uint8_t k1[16];
    char p1[4096], sub[4096], stray[4200];
    make_key(k1, 1);
    object_file(p1, sizeof p1, k1);
    snprintf(sub, sizeof sub, "%s/objects/ab", check_tmpdir);
    snprintf(stray, sizeof stray, "%s/ab0123456789abcdef0123456789abcd.fo", sub);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    CHECK_OK(put_n(st, 2, 1000));
    damage_folder(p1);
    CHECK(mkdir(sub, 0700) == 0);
    damage_folder(stray);
    reports r0 = {0};
    int found = fi_store_verify(st, 0, collect, &r0);
    CHECK_MSG(found == 2, "found %d: %s", found, r0.text);
    CHECK(fi_store_verify(st, 1, NULL, NULL) == 2);
    reports r = {0};
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0, "after one repair: %s", r.text);
    CHECK(!file_exists(p1) && !file_exists(stray));
    CHECK_OK(put_n(st, 1, 1000));
    CHECK(has_n(st, 1, 1000) == 1 && has_n(st, 2, 1000) == 1);
    fi_store_close(st);
}

/* A temp file whose writer was killed is no damage: noted, exit status
 * clean, removed by repair. */
TEST(store_verify_notes_a_dead_writers_temp_without_failing)
{
    fi_store *st = NULL;
    char sub[4096], temp[4200];
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    CHECK(dead > 0 && waitpid(dead, NULL, 0) == dead);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    snprintf(sub, sizeof sub, "%s/objects/ab", check_tmpdir);
    snprintf(temp, sizeof temp, "%s/ab0123456789abcdef0123456789abcd.fo.tmp.%d.0", sub, (int)dead);
    CHECK(mkdir(sub, 0700) == 0 && write_aged(temp, 120) == 0);
    reports r = {0};
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0 && strstr(r.text, "note: leftover temp"),
              "%s", r.text);
    CHECK(fi_store_verify(st, 1, NULL, NULL) == 0 && !file_exists(temp));
    fi_store_close(st);
}

/* ---- a damaged index ------------------------------------------------------------- */

/* A dropped table leaves a file SQLite opens happily: rebuilt at open. */
static void check_dropped_table(const char *sql)
{
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    fi_store_close(st);
    CHECK_OK(raw_sql(sql));
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(has_n(st, 1, 1000) == 1); /* re-indexed from its header */
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0 && stats_of(st).entries == 1);
    fi_store_close(st);
}
TEST(store_index_without_entries_table_is_rebuilt) { check_dropped_table("DROP TABLE entries"); }
TEST(store_index_without_stats_table_is_rebuilt) { check_dropped_table("DROP TABLE stats"); }

/* Damaged under a running store: misses still miss (so the caller compiles),
 * hits still hit, verify says so and one repair rebuilds it from the objects. */
TEST(store_index_damaged_while_open_still_serves_and_is_repaired)
{
    fi_store *st = NULL;
    uint8_t k2[16];
    void *data = NULL;
    size_t size = 0;
    make_key(k2, 2);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    CHECK_OK(raw_sql("DROP TABLE entries"));
    CHECK_RC(fi_store_get(st, k2, &data, &size, NULL), FI_ENOTFOUND);
    CHECK(has_n(st, 1, 1000) == 1);
    reports r = {0};
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 1 && strstr(r.text, "damaged"), "%s", r.text);
    CHECK(fi_store_verify(st, 1, NULL, NULL) > 0);
    memset(&r, 0, sizeof r);
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0, "after one repair: %s", r.text);
    CHECK(stats_of(st).entries == 1 && has_n(st, 1, 1000) == 1);
    fi_store_close(st);
}

/* index.sqlite as a folder (1), a FIFO (2) or a link (0): SQLite cannot
 * open it; it is moved aside (the link itself, never its target) and a new
 * index started. */
static void check_index_replaced(int as_folder)
{
    fi_store *st = NULL;
    char index[4096], inner[4200], target[4096];
    struct stat sb;
    snprintf(index, sizeof index, "%s/index.sqlite", check_tmpdir);
    snprintf(target, sizeof target, "%s/target", check_tmpdir);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    fi_store_close(st);
    CHECK(rename(index, target) == 0);
    if (as_folder == 1) {
        snprintf(inner, sizeof inner, "%s/inner", index);
        CHECK(mkdir(index, 0700) == 0 && mkdir(inner, 0700) == 0);
    } else if (as_folder == 2) {
        CHECK(mkfifo(index, 0600) == 0);
    } else {
        CHECK(symlink(target, index) == 0);
    }
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(lstat(index, &sb) == 0 && S_ISREG(sb.st_mode));
    CHECK(has_n(st, 1, 1000) == 1);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
    CHECK(lstat(target, &sb) == 0 && S_ISREG(sb.st_mode)); /* the link's target is untouched */
}
TEST(store_index_that_is_a_folder_is_rebuilt) { check_index_replaced(1); }
TEST(store_index_that_is_a_symlink_is_rebuilt) { check_index_replaced(0); }
static void index_fifo_body(void) { check_index_replaced(2); }
TEST(store_index_that_is_a_fifo_is_rebuilt) { check_in_child_with_alarm(index_fifo_body); }

/* A damaged page that opening does not read: integrity_check finds it, and
 * one repair rebuilds the index and re-indexes every object. */
TEST(store_index_with_a_damaged_page_is_repaired_in_one_run)
{
    fi_store *st = NULL;
    char index[4096];
    enum { N = 60 };
    snprintf(index, sizeof index, "%s/index.sqlite", check_tmpdir);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 0; i < N; i++) CHECK_OK(put_n(st, i, 300));
    fi_store_close(st);
    CHECK_OK(raw_sql("PRAGMA wal_checkpoint(TRUNCATE)"));
    /* The last page holds the entries_lru index (created last): garble its cells. */
    int fd = open(index, O_RDWR);
    struct stat sb;
    CHECK(fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size >= 3 * 4096);
    unsigned char junk[2048];
    memset(junk, 0xA5, sizeof junk);
    CHECK(pwrite(fd, junk, sizeof junk, sb.st_size - 2048) == (ssize_t)sizeof junk);
    close(fd);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    reports r = {0};
    int found = fi_store_verify(st, 0, collect, &r);
    CHECK_MSG(found > 0, "found %d: %s", found, r.text);
    CHECK(fi_store_verify(st, 1, NULL, NULL) > 0);
    memset(&r, 0, sizeof r);
    CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0, "after one repair: %s", r.text);
    CHECK(stats_of(st).entries == N);
    for (int i = 0; i < N; i++) CHECK(has_n(st, i, 300) == 1);
    fi_store_close(st);
}

/* ---- eviction ------------------------------------------------------------------------ */

TEST(store_gc_evicts_least_recently_used_first)
{
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 1; i <= 4; i++) CHECK_OK(put_n(st, i, 1000));
    int64_t total = stats_of(st).bytes;
    int64_t keep = total - object_size(2) - object_size(4);
    CHECK(has_n(st, 1, 1000) == 1); /* 1 becomes the most recently used */
    CHECK(has_n(st, 3, 1000) == 1);
    CHECK(fi_store_gc(st, keep, 0) == 2); /* 2 and 4 were used least recently */
    CHECK(has_n(st, 2, 1000) == 0 && has_n(st, 4, 1000) == 0);
    CHECK(has_n(st, 1, 1000) == 1 && has_n(st, 3, 1000) == 1);
    CHECK(stats_of(st).bytes == keep);
    CHECK(fi_store_gc(st, -1, 0) == 0); /* no limit: nothing goes */
    CHECK(fi_store_gc(st, 0, 0) == 2);
    CHECK(stats_of(st).entries == 0);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

TEST(store_gc_by_age)
{
    fi_store *st = NULL;
    uint8_t k2[16];
    char hex[33], sql[200];
    make_key(k2, 2);
    fi_key_hex(hex, k2);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 1; i <= 3; i++) CHECK_OK(put_n(st, i, 500));
    snprintf(sql, sizeof sql, "UPDATE entries SET last_used = 1000 WHERE key = '%s'", hex);
    CHECK_OK(raw_sql(sql));
    CHECK(fi_store_gc(st, -1, (int64_t)time(NULL) - 60) == 1);
    CHECK(has_n(st, 2, 500) == 0 && has_n(st, 1, 500) == 1 && has_n(st, 3, 500) == 1);
    fi_store_close(st);
}

/* A clock set 30 days ahead and put back: entries stamped in the future
 * must not outrank the one used last, and must still age out. */
TEST(store_lru_order_survives_a_clock_set_back)
{
    fi_store *st = NULL;
    const char *ahead = "UPDATE entries SET used_ns = used_ns + 2592000000000000, "
                        "last_used = last_used + 2592000";
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 1; i <= 4; i++) CHECK_OK(put_n(st, i, 1000));
    CHECK_OK(raw_sql(ahead));
    CHECK(has_n(st, 3, 1000) == 1); /* used now, with the right clock */
    CHECK(fi_store_gc(st, object_size(3), 0) == 3);
    CHECK(has_n(st, 3, 1000) == 1 && stats_of(st).entries == 1);
    /* A put after the clock went back also ranks as the most recent. */
    for (int i = 1; i <= 2; i++) CHECK_OK(put_n(st, i, 1000));
    CHECK_OK(raw_sql(ahead));
    CHECK_OK(put_n(st, 4, 1000));
    CHECK(fi_store_gc(st, object_size(4), 0) == 3);
    CHECK(has_n(st, 4, 1000) == 1);
    /* Stamped in the future, it still ages out (counted from now). */
    CHECK_OK(raw_sql(ahead));
    CHECK(fi_store_gc(st, -1, (int64_t)time(NULL) + 1) == 1);
    CHECK(stats_of(st).entries == 0);
    fi_store_close(st);
}

typedef struct touch_arg {
    fi_store *st;
    int rc;
} touch_arg;

static void *get_one(void *p)
{
    touch_arg *a = p;
    a->rc = has_n(a->st, 1, 1000);
    return NULL;
}

/* Another process evicts the entry between a hit's read and its bookkeeping:
 * the hit is served, but no row comes back for the object that is gone. */
TEST(store_hit_racing_an_eviction_leaves_no_phantom_row)
{
    fi_store *st = NULL;
    sqlite3 *db = NULL;
    uint8_t k1[16];
    char p1[4096], index[4096], hex[33], sql[200];
    pthread_t tid;
    touch_arg a = {NULL, -1};
    make_key(k1, 1);
    fi_key_hex(hex, k1);
    object_file(p1, sizeof p1, k1);
    snprintf(index, sizeof index, "%s/index.sqlite", check_tmpdir);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(put_n(st, 1, 1000));
    CHECK(sqlite3_open(index, &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    CHECK(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
    a.st = st;
    pthread_create(&tid, NULL, get_one, &a);
    struct timespec pause = {0, 300000000};
    nanosleep(&pause, NULL); /* the hit has read the object and waits for the write lock */
    snprintf(sql, sizeof sql, "DELETE FROM entries WHERE key = '%s'; COMMIT", hex);
    CHECK(unlink(p1) == 0);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    pthread_join(tid, NULL);
    sqlite3_close(db);
    CHECK_MSG(a.rc == 1, "the hit was not served (%d)", a.rc);
    CHECK_MSG(stats_of(st).entries == 0, "a row came back for the evicted object");
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

/* gc stopped half way (here by a failing statement; a kill is the same: the
 * transaction rolls back after some objects were unlinked). What is left is
 * a plain miss: verify passes, nothing good is lost. */
TEST(store_interrupted_gc_leaves_verify_clean)
{
    int rolled_back = 0;
    for (long nth = 1; nth < 60; nth++) {
        fi_store *st = NULL;
        CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
        CHECK_OK(fi_store_clear(st));
        for (int i = 1; i <= 5; i++) CHECK_OK(put_n(st, i, 1000));
        fi__fault_arm(FI_FAULT_SQL, nth, 0);
        int rc = fi_store_gc(st, 0, 0);
        fi__fault_arm(0, 0, 0);
        int gone = 0;
        for (int i = 1; i <= 5; i++) gone += object_size(i) < 0;
        if (rc < 0 && gone > 0) rolled_back++;
        reports r = {0};
        CHECK_MSG(fi_store_verify(st, 0, collect, &r) == 0, "fault %ld: %s", nth, r.text);
        for (int i = 1; i <= 5; i++) CHECK(has_n(st, i, 1000) == (object_size(i) > 0));
        CHECK(fi_store_verify(st, 1, NULL, NULL) == 0 && fi_store_verify(st, 0, NULL, NULL) == 0);
        fi_store_close(st);
        if (rc >= 0) break;
    }
    CHECK_MSG(rolled_back > 0, "no fault left rows without objects: the test did not test");
}

TEST(store_put_evicts_beyond_the_size_limit)
{
    fi_store *st = NULL, *probe = NULL;
    CHECK_OK(fi_store_open(&probe, check_tmpdir, 0, 0));
    CHECK_OK(put_n(probe, 100, 1000));
    int64_t one = stats_of(probe).bytes;
    CHECK(fi_store_gc(probe, 0, 0) == 1);
    fi_store_close(probe);

    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 3 * one));
    for (int i = 1; i <= 3; i++) CHECK_OK(put_n(st, i, 1000));
    CHECK(has_n(st, 1, 1000) == 1); /* 2 is now the least recently used */
    CHECK_OK(put_n(st, 4, 1000));
    CHECK(stats_of(st).entries == 3);
    CHECK(has_n(st, 2, 1000) == 0 && has_n(st, 1, 1000) == 1 && has_n(st, 4, 1000) == 1);
    /* An object bigger than the whole limit is still kept: never the one just written. */
    CHECK_OK(put_n(st, 5, 10000));
    CHECK(has_n(st, 5, 10000) == 1);
    CHECK(stats_of(st).entries == 1);
    fi_store_close(st);
}

TEST(store_gc_removes_old_temp_files_only)
{
    fi_store *st = NULL;
    char sub[4096], old_tmp[4200], new_tmp[4200];
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    snprintf(sub, sizeof sub, "%s/objects/ab", check_tmpdir);
    CHECK(mkdir(sub, 0700) == 0);
    snprintf(old_tmp, sizeof old_tmp, "%s/%s.fo.tmp.123.4", sub, "ab00");
    snprintf(new_tmp, sizeof new_tmp, "%s/%s.fo.tmp.123.5", sub, "ab01");
    fclose(fopen(old_tmp, "w"));
    fclose(fopen(new_tmp, "w"));
    struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    CHECK(utimensat(AT_FDCWD, old_tmp, old, 0) == 0);
    CHECK(fi_store_gc(st, -1, 0) == 0);
    CHECK(!file_exists(old_tmp) && file_exists(new_tmp));
    fi_store_close(st);
}

TEST(store_clear_removes_everything_but_statistics)
{
    fi_store *st = NULL;
    char p[4096];
    uint8_t k[16];
    make_key(k, 2);
    object_file(p, sizeof p, k);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 1; i <= 3; i++) CHECK_OK(put_n(st, i, 300));
    int64_t written = stats_of(st).bytes_written;
    CHECK_OK(fi_store_clear(st));
    fi_jit_stats s = stats_of(st);
    CHECK(s.entries == 0 && s.bytes == 0 && s.bytes_written == written);
    CHECK(!file_exists(p) && has_n(st, 2, 300) == 0);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

/* ---- statistics and listing -------------------------------------------------------------- */

TEST(store_stats_add_get_zero)
{
    fi_store *st = NULL;
    fi_jit_stats d = {0};
    d.memory_hits = 5, d.disk_hits = 3, d.misses = 2, d.compiles = 2, d.compile_failures = 1;
    d.compile_ns = 123456789, d.bytes_written = 10, d.corrupt = 1;
    d.entries = 99, d.bytes = 99; /* not counters: ignored */
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(fi_store_stats_add(st, &d));
    CHECK_OK(fi_store_stats_add(st, &d));
    fi_jit_stats s = stats_of(st);
    CHECK(s.memory_hits == 10 && s.disk_hits == 6 && s.misses == 4 && s.compiles == 4);
    CHECK(s.compile_failures == 2 && s.compile_ns == 246913578 && s.bytes_written == 20);
    CHECK(s.corrupt == 2 && s.entries == 0 && s.bytes == 0);
    fi_store_close(st);
    /* Persisted: another open sees them. */
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(stats_of(st).disk_hits == 6);
    CHECK_OK(put_n(st, 1, 100));
    CHECK_OK(fi_store_stats_zero(st));
    s = stats_of(st);
    CHECK(s.memory_hits == 0 && s.bytes_written == 0 && s.corrupt == 0 && s.entries == 1);
    fi_store_close(st);
}

static int stop_at_first(void *user, const fi_store_row *row)
{
    (void)row;
    ++*(int *)user;
    return 1;
}

TEST(store_foreach_lists_rows_in_spec_order)
{
    fi_store *st = NULL;
    listing l = {0};
    int seen = 0;
    uint8_t k[16];
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 0; i < 3; i++) CHECK_OK(put_n(st, i, 100)); /* hd=64,128,256 */
    CHECK(has_n(st, 1, 100) == 1);
    CHECK_OK(fi_store_foreach(st, list_row, &l));
    CHECK(l.count == 3);
    CHECK(strcmp(l.specs[0], l.specs[1]) <= 0 && strcmp(l.specs[1], l.specs[2]) <= 0);
    make_key(k, 1);
    int with_hit = 0;
    for (int i = 0; i < 3; i++) with_hit += l.hits[i] == 1;
    CHECK(with_hit == 1);
    CHECK_OK(fi_store_foreach(st, stop_at_first, &seen));
    CHECK(seen == 1);
    fi_store_close(st);
}

TEST(store_key_hex)
{
    uint8_t key[16];
    char hex[33];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)(i * 17);
    fi_key_hex(hex, key);
    CHECK(strcmp(hex, "00112233445566778899aabbccddeeff") == 0);
}

/* ---- locks ----------------------------------------------------------------------------- */

/* Wait up to `ms` for one byte on fd; returns it, or -1 on timeout. */
static int read_byte(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, ms) != 1 || read(fd, &c, 1) != 1) return -1;
    return c;
}

TEST(store_lock_key_excludes_another_process)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    int fds[2];
    make_key(key, 1);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fi_store_lock *mine = NULL;
        close(fds[0]);
        if (write(fds[1], "a", 1) != 1) _exit(2);
        if (fi_store_lock_key(st, key, &mine) != 0) _exit(3);
        if (write(fds[1], "b", 1) != 1) _exit(4);
        fi_store_unlock(mine);
        _exit(0);
    }
    close(fds[1]);
    int first = read_byte(fds[0], 5000);
    int early = read_byte(fds[0], 300); /* the child must still be blocked */
    fi_store_unlock(lock);
    int late = read_byte(fds[0], 5000);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    CHECK(first == 'a');
    CHECK_MSG(early == -1, "the child took the lock while the parent held it");
    CHECK(late == 'b');
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Other keys are not blocked. */
    uint8_t other[16];
    make_key(other, 2);
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    fi_store_lock *lock2 = NULL;
    CHECK_OK(fi_store_lock_key(st, other, &lock2));
    fi_store_unlock(lock2);
    fi_store_unlock(lock);
    fi_store_close(st);
}

TEST(store_lock_is_released_when_the_holder_dies)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    int fds[2];
    make_key(key, 1);
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fi_store_lock *mine = NULL;
        if (fi_store_lock_key(st, key, &mine) != 0) _exit(3);
        if (write(fds[1], "l", 1) != 1) _exit(4);
        _exit(0); /* dies holding it */
    }
    close(fds[1]);
    CHECK(read_byte(fds[0], 5000) == 'l');
    close(fds[0]);
    waitpid(pid, NULL, 0);
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    fi_store_unlock(lock);
    fi_store_close(st);
}

typedef struct lock_thread_arg {
    fi_store *st;
    uint8_t key[16];
    int wfd;
} lock_thread_arg;

static void *lock_in_thread(void *p)
{
    lock_thread_arg *a = p;
    fi_store_lock *l = NULL;
    if (fi_store_lock_key(a->st, a->key, &l) == 0) {
        if (write(a->wfd, "t", 1) != 1) {
        }
        fi_store_unlock(l);
    }
    return NULL;
}

TEST(store_lock_key_excludes_another_thread)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    lock_thread_arg a;
    int fds[2];
    pthread_t t;
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    make_key(a.key, 1);
    a.st = st;
    CHECK(pipe(fds) == 0);
    a.wfd = fds[1];
    CHECK_OK(fi_store_lock_key(st, a.key, &lock));
    CHECK(pthread_create(&t, NULL, lock_in_thread, &a) == 0);
    int early = read_byte(fds[0], 300);
    fi_store_unlock(lock);
    int late = read_byte(fds[0], 5000);
    pthread_join(t, NULL);
    close(fds[0]);
    close(fds[1]);
    CHECK(early == -1 && late == 't');
    /* gc removes idle lock files; locking afterwards still works. */
    CHECK(fi_store_gc(st, -1, 0) == 0);
    CHECK_OK(fi_store_lock_key(st, a.key, &lock));
    fi_store_unlock(lock);
    fi_store_close(st);
}

/* ---- concurrency ------------------------------------------------------------------------ */

TEST(store_concurrent_processes_share_one_cache)
{
    enum { PROCS = 4, EACH = 15 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        CHECK(pids[p] >= 0);
        if (pids[p] == 0) {
            fi_store *st = NULL;
            if (fi_store_open(&st, check_tmpdir, 0, 0) != 0) {
                fprintf(stderr, "child open: %s\n", fi_last_error());
                _exit(10);
            }
            for (int i = 0; i < EACH; i++) {
                int n = p * 100 + i;
                if (put_n(st, n, 700) != 0) _exit(11);
                if (has_n(st, n, 700) != 1) _exit(12);
                int h = has_n(st, i, 700); /* a key all children write */
                if (h != 0 && h != 1) _exit(13);
                if (put_n(st, i, 700) != 0) _exit(14);
            }
            fi_store_close(st);
            _exit(0);
        }
    }
    int bad = 0;
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        waitpid(pids[p], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad = WEXITSTATUS(status) + 1000;
    }
    CHECK_MSG(bad == 0, "a child failed with %d", bad - 1000);
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    fi_jit_stats s = stats_of(st);
    /* The shared keys 0..EACH-1 are also the first child's own. */
    CHECK_MSG(s.entries == PROCS * EACH, "entries %lld", (long long)s.entries);
    CHECK(s.corrupt == 0);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

typedef struct thread_arg {
    fi_store *st;
    int base;
    int failures;
} thread_arg;

static void *put_get_thread(void *p)
{
    thread_arg *a = p;
    for (int i = 0; i < 20; i++) {
        if (put_n(a->st, a->base + i, 900) != 0) a->failures++;
        if (has_n(a->st, a->base + i, 900) != 1) a->failures++;
        fi_jit_stats d = {0};
        d.disk_hits = 1;
        if (fi_store_stats_add(a->st, &d) != 0) a->failures++;
    }
    return NULL;
}

TEST(store_threads_share_one_store)
{
    fi_store *st = NULL;
    pthread_t t[4];
    thread_arg a[4];
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int i = 0; i < 4; i++) {
        a[i] = (thread_arg){st, 1000 * (i + 1), 0};
        CHECK(pthread_create(&t[i], NULL, put_get_thread, &a[i]) == 0);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        failures += a[i].failures;
    }
    CHECK(failures == 0);
    fi_jit_stats s = stats_of(st);
    CHECK(s.entries == 80 && s.disk_hits == 80);
    fi_store_close(st);
}

/* ---- injected faults ------------------------------------------------------------------- */

/* Fail the Nth file, allocation or SQL call (once, then persistently) during
 * open + put + get + stats + gc: every call returns OK or an expected code,
 * nothing leaks (under ASan), and after a repair the cache verifies clean. */
TEST(store_survives_injected_faults)
{
    for (int persistent = 0; persistent <= 1; persistent++) {
        for (long n = 1; n < 400; n++) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/f%d_%ld", check_tmpdir, persistent, n);
            fi_store *st = NULL;
            fi__fault_arm(FI_FAULT_FILE | FI_FAULT_ALLOC | FI_FAULT_SQL, n, persistent);
            int rc = fi_store_open(&st, dir, 0, 0);
            int rc2 = 0, rc3 = 0, rc4 = 0;
            if (rc == 0) {
                rc2 = put_n(st, 1, 512);
                rc3 = has_n(st, 1, 512);
                fi_jit_stats d = {0};
                d.misses = 1;
                rc4 = fi_store_stats_add(st, &d);
                (void)fi_store_gc(st, -1, 0);
                fi_store_close(st);
            }
            long fired = fi__fault_count();
            fi__fault_arm(0, 0, 0);
            CHECK_MSG(rc == 0 || rc == FI_EIO || rc == FI_ENOMEM || rc == FI_ECORRUPT,
                      "open at fault %ld: %d %s", n, rc, fi_last_error());
            CHECK_MSG(rc2 == 0 || rc2 == FI_EIO || rc2 == FI_ENOMEM, "put at fault %ld: %d", n, rc2);
            CHECK_MSG(rc3 != WRONG_BYTES, "get served wrong bytes at fault %ld", n);
            CHECK_MSG(rc4 == 0 || rc4 == FI_EIO, "stats at fault %ld: %d", n, rc4);
            /* Afterwards the cache opens, repairs to a clean state, and serves
             * exactly what it holds. */
            CHECK_OK(fi_store_open(&st, dir, 0, 0));
            CHECK_MSG(fi_store_verify(st, 1, NULL, NULL) >= 0, "verify after fault %ld", n);
            CHECK_MSG(fi_store_verify(st, 0, NULL, NULL) == 0, "unclean after fault %ld", n);
            int has = has_n(st, 1, 512);
            CHECK_MSG(has == 0 || has == 1, "wrong bytes after fault %ld", n);
            CHECK_OK(put_n(st, 1, 512));
            CHECK(has_n(st, 1, 512) == 1);
            fi_store_close(st);
            if (fired == 0) break; /* past the last call: every point was covered */
        }
    }
}

/* One rule for verify: a row whose object is gone (an interrupted gc) is a
 * problem like an orphan object, since the statistics count it; repair
 * removes it, and so does gc, so that the statistics match the objects. */
static void collect_problem(void *user, const char *problem)
{
    char *text = user;
    size_t n = strlen(text);
    snprintf(text + n, 2048 - n, "%s\n", problem);
}

TEST(verify_counts_a_row_without_its_object_and_repair_and_gc_remove_it)
{
    fi_store *st = NULL;
    uint8_t key[16];
    char path[4096], said[2048] = "";
    CHECK_OK(fi_store_open(&st, check_tmpdir, 0, 0));
    for (int n = 1; n <= 3; n++) CHECK_OK(put_n(st, n, 1000));
    make_key(key, 1);
    object_file(path, sizeof path, key);
    CHECK(unlink(path) == 0);
    CHECK(stats_of(st).entries == 3); /* what the index says, until verified */
    CHECK(fi_store_verify(st, 0, collect_problem, said) == 1);
    CHECK_MSG(strstr(said, "is missing") && strncmp(said, "note: ", 6) != 0, "%s", said);
    CHECK(fi_store_verify(st, 1, NULL, NULL) == 1);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    CHECK(stats_of(st).entries == 2);
    /* gc, with no limit that evicts anything, drops such a row too. */
    make_key(key, 2);
    object_file(path, sizeof path, key);
    CHECK(unlink(path) == 0);
    CHECK(fi_store_gc(st, -1, 0) == 0);
    CHECK(stats_of(st).entries == 1);
    CHECK(fi_store_verify(st, 0, NULL, NULL) == 0);
    CHECK(has_n(st, 3, 1000) == 1);
    fi_store_close(st);
}
