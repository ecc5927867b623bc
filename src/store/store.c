/*
 * The on-disk cache (see store.h): directory checks, the SQLite index, object
 * files with a verified header, per-key flock build locks, statistics,
 * eviction, verify/repair and cleanup of leftover temp files.
 *
 * Concurrency model
 *  - Threads: one fi_store is shared by the threads of a process; a mutex
 *    guards the SQLite connection and its cached statements.
 *  - Processes: the index is in WAL mode with a busy timeout. Anything that
 *    changes which object file sits at a path (put's rename, eviction, gc,
 *    clear, removal of a bad object) happens inside a BEGIN IMMEDIATE
 *    transaction, so the write lock orders those changes with the rows that
 *    describe them. Readers take no lock: an object file is only ever
 *    replaced whole by rename, so a reader sees either the old or new file.
 *
 * Statistics: the store itself counts `corrupt` (bad objects and a rebuilt
 * index) and `bytes_written` (in put); every other counter is added by the
 * caller through fi_store_stats_add.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stddef.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/embedded.h"
#include "common/error.h"
#include "store/store.h"
#include "common/sys.h"

/* Must equal the PRAGMA user_version set at the end of cache/schema.sql. */
#define FI_SCHEMA_VERSION 1

#define BUSY_TIMEOUT_MS 10000
/* Temp files older than this belong to a writer that died. */
#define TEMP_MAX_AGE_S 3600
/* A temp file whose writer (the pid in its name) no longer exists on this
 * host is removed once it is this old: a writer needs milliseconds, and the
 * grace covers a pid seen from another host sharing the directory. */
#define TEMP_DEAD_WRITER_AGE_S 60
/* Upper bound on an object's payload; a cubin is well under this. */
#define OBJ_MAX_PAYLOAD ((uint64_t)1 << 30)

#define PATH_MAX_LEN 4096

enum stmt_id {
    S_BEGIN,
    S_COMMIT,
    S_ROLLBACK,
    S_TOUCH,
    S_INSERT,
    S_DELETE,
    S_EXISTS,
    S_STAT_ADD,
    S_TOTAL,
    S_OLDEST,
    S_OLDER,
    S_CLAMP,
    S_STATS,
    S_STATS_ZERO,
    S_LIST,
    S_KEYS,
    S_CLEAR,
    S_COUNT
};

/* Every statement that carries a value binds it; none is built by printf. */
static const char *const stmt_sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    /* used_ns is the LRU order: the clock's reading, but always past every
     * other entry's, so that a clock that was set ahead and put back cannot
     * make the entry used last look like the oldest (see schema.sql). */
    [S_TOUCH] = "UPDATE entries SET last_used = ?1, hits = hits + 1, used_ns = "
                "max(?2, (SELECT max(used_ns) FROM entries) + 1) WHERE key = ?3",
    [S_INSERT] = "INSERT OR REPLACE INTO entries (key, spec, arch, size, checksum, created, "
                 "last_used, used_ns, hits, registers, spill_bytes, compile_ns) "
                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, "
                 "max(?7, coalesce((SELECT max(used_ns) FROM entries), 0) + 1), "
                 "?8, ?9, ?10, ?11)",
    [S_DELETE] = "DELETE FROM entries WHERE key = ?1",
    [S_EXISTS] = "SELECT size FROM entries WHERE key = ?1",
    [S_STAT_ADD] = "INSERT INTO stats (name, value) VALUES (?1, ?2) "
                   "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    [S_TOTAL] = "SELECT count(*), coalesce(sum(size), 0) FROM entries",
    [S_OLDEST] = "SELECT key, size FROM entries WHERE key <> ?1 ORDER BY used_ns LIMIT 1",
    [S_OLDER] = "SELECT key, size FROM entries WHERE last_used < ?1 ORDER BY used_ns LIMIT 1",
    /* A use stamped in the future (a clock set ahead) counts as now, so that
     * the entry ages from here instead of never. */
    [S_CLAMP] = "UPDATE entries SET last_used = ?1 WHERE last_used > ?1",
    [S_STATS] = "SELECT name, value FROM stats",
    [S_STATS_ZERO] = "DELETE FROM stats",
    [S_LIST] = "SELECT key, spec, arch, size, created, last_used, hits, registers, "
               "spill_bytes, compile_ns FROM entries ORDER BY spec, arch, key",
    [S_KEYS] = "SELECT key, size FROM entries ORDER BY key",
    [S_CLEAR] = "DELETE FROM entries",
};

/* Persisted counters, by their row name in `stats`. */
static const struct {
    const char *name;
    size_t offset;
} stat_fields[] = {
    {"memory_hits", offsetof(fi_jit_stats, memory_hits)},
    {"disk_hits", offsetof(fi_jit_stats, disk_hits)},
    {"misses", offsetof(fi_jit_stats, misses)},
    {"compiles", offsetof(fi_jit_stats, compiles)},
    {"compile_failures", offsetof(fi_jit_stats, compile_failures)},
    {"compile_ns", offsetof(fi_jit_stats, compile_ns)},
    {"bytes_written", offsetof(fi_jit_stats, bytes_written)},
    {"corrupt", offsetof(fi_jit_stats, corrupt)},
};
#define STAT_FIELD_COUNT (sizeof stat_fields / sizeof stat_fields[0])

struct fi_store {
    char *dir;
    char index_path[PATH_MAX_LEN];
    unsigned flags;
    int64_t max_bytes;
    pthread_mutex_t mu; /* guards db and stmts */
    sqlite3 *db;
    sqlite3_stmt *stmts[S_COUNT];
    atomic_int lock_warned; /* "building without a lock" was logged */
    int last_sql_error;             /* primary SQLite code of the last failure */
    int64_t lock_timeout_ms;        /* wait for another builder's lock; < 0: forever */
    atomic_int lock_timeout_warned; /* "gave up waiting for a lock" was logged */
};

struct fi_store_lock {
    int fd;
};

/* ---- small helpers -------------------------------------------------------- */

void fi_key_hex(char out[33], const uint8_t key[16])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[key[i] >> 4];
        out[2 * i + 1] = digits[key[i] & 15];
    }
    out[32] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Parse exactly 32 lower-case hex digits (the form fi_key_hex writes). */
static int hex_to_key(const char *hex, uint8_t key[16])
{
    for (int i = 0; i < 16; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hi < 0 ? -1 : hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return hex[32] == '\0' ? 0 : -1;
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int join_path(char *out, const char *a, const char *b)
{
    if (snprintf(out, PATH_MAX_LEN, "%s/%s", a, b) >= PATH_MAX_LEN)
        return fi__error(FI_EINVALID, "cache path too long: %s/%s", a, b);
    return 0;
}

static int object_path(const fi_store *st, char *out, const char *hex)
{
    if (snprintf(out, PATH_MAX_LEN, "%s/objects/%.2s/%s.fo", st->dir, hex, hex) >= PATH_MAX_LEN)
        return fi__error(FI_EINVALID, "cache path too long under %s", st->dir);
    return 0;
}

static int is_temp_name(const char *name) { return strstr(name, ".tmp.") != NULL; }

static int remove_tree_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    return (type == FTW_DP ? rmdir(path) : fi__unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

/* Remove whatever sits at `path` (a file, link, FIFO, or a whole folder,
 * never following a link): something planted where a cache file belongs
 * must not block every later write. 0 when nothing is left. */
static int remove_any(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return fi__unlink(path) < 0 && errno != ENOENT ? -1 : 0;
    return nftw(path, remove_tree_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

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

/* ---- directories ------------------------------------------------------------ */

/* A cache dir must be ours and not writable by anyone else: objects in it
 * become code that runs on the GPU. */
static int check_owner_mode(const char *path, const struct stat *sb, unsigned flags)
{
    if (!S_ISDIR(sb->st_mode)) return fi__error(FI_EPERM, "cache path %s is not a directory", path);
    if (flags & FI_STORE_ALLOW_UNSAFE_DIR) return 0;
    /* Root can replace anything anyway, so a root-owned cache (baked into an
     * image, read by a service user) is as safe as one's own. */
    if (sb->st_uid != geteuid() && sb->st_uid != 0)
        return fi__error(FI_EPERM,
                         "cache directory %s belongs to uid %u, not to this user (uid %u) or "
                         "root; use a directory of your own or allow an unsafe directory",
                         path, (unsigned)sb->st_uid, (unsigned)geteuid());
    if (sb->st_mode & (S_IWGRP | S_IWOTH))
        return fi__error(FI_EPERM,
                         "cache directory %s is writable by group or others (mode %03o); "
                         "run chmod 700 on it or allow an unsafe directory",
                         path, (unsigned)(sb->st_mode & 0777));
    return 0;
}

/* mkdir -p with mode 0700. Failures on the parents are left for the final
 * check to report, since a parent may exist without our being able to
 * create it (EACCES on "/home"). */
static int make_dirs(const char *path)
{
    int rc = 0;
    char *copy = fi__strdup(path);
    if (!copy) FI_FAIL(FI_ENOMEM, "out of memory creating %s", path);
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)fi__mkdir(copy, 0700);
        *p = '/';
    }
    if (fi__mkdir(copy, 0700) < 0 && errno != EEXIST)
        FI_FAIL(FI_EIO, "cannot create cache directory %s: %s", path, strerror(errno));
out:
    fi__free(copy);
    return rc;
}

/* Create (if asked) and check a subfolder of the cache. Never a symlink. */
static int ensure_subdir(const char *path, unsigned flags, int create)
{
    struct stat sb;
    if (create && fi__mkdir(path, 0700) < 0 && errno != EEXIST)
        return fi__error(FI_EIO, "cannot create %s: %s", path, strerror(errno));
    if (fi__lstat(path, &sb) < 0) {
        if (errno == ENOENT) return fi__error(FI_ENOTFOUND, "%s does not exist", path);
        return fi__error(FI_EIO, "cannot stat %s: %s", path, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) return fi__error(FI_EPERM, "%s is a symbolic link; refusing it", path);
    return check_owner_mode(path, &sb, flags);
}

/* ---- per-file locks ------------------------------------------------------------ */

/* Open and flock a lock file. After the lock is ours, the path must still
 * name the same inode: gc may unlink an idle lock file, and a waiter that
 * locked the unlinked inode must start over on the new one. */
static int lock_file(const char *path, int nonblock, int *out_fd)
{
    for (;;) {
        struct stat a, b;
        int fd = fi__open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
        if (fd < 0) return fi__error(FI_EIO, "cannot open lock file %s: %s", path, strerror(errno));
        int r;
        do r = flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0));
        while (r < 0 && errno == EINTR);
        if (r < 0) {
            int err = errno;
            fi__close(fd);
            if (err == EWOULDBLOCK) return 1; /* held by someone else */
            return fi__error(FI_EIO, "cannot lock %s: %s", path, strerror(err));
        }
        if (fi__fstat(fd, &a) < 0) {
            int err = errno;
            fi__close(fd);
            return fi__error(FI_EIO, "cannot stat lock file %s: %s", path, strerror(err));
        }
        if (lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            *out_fd = fd;
            return 0;
        }
        fi__close(fd); /* replaced while we waited: retry on the current file */
    }
}

/* lock_file with a bounded wait: poll (a blocking flock cannot time out
 * without signals, which belong to the host) with a growing pause. Returns 1
 * when the lock is still held by someone else after `timeout_ms`. */
static int lock_file_wait(const char *path, int64_t timeout_ms, int *out_fd)
{
    if (timeout_ms < 0) return lock_file(path, 0, out_fd);
    int64_t deadline = fi__now_ns() + timeout_ms * 1000000;
    long pause_ns = 1000000;
    for (;;) {
        int rc = lock_file(path, 1, out_fd);
        if (rc != 1) return rc;
        int64_t left = deadline - fi__now_ns();
        if (left <= 0) return 1;
        struct timespec pause = {0, pause_ns < left ? pause_ns : (long)left};
        nanosleep(&pause, NULL);
        if (pause_ns < 20000000) pause_ns *= 2; /* at most 20 ms late after a release */
    }
}

void fi_store_set_lock_timeout(fi_store *st, int64_t timeout_ms)
{
    if (st) st->lock_timeout_ms = timeout_ms;
}

int fi_store_lock_key(fi_store *st, const uint8_t key[16], fi_store_lock **out)
{
    int rc = 0, fd = -1;
    char hex[33], path[PATH_MAX_LEN];
    fi_store_lock *lock = NULL;
    if (!st || !key || !out) return fi__error(FI_EINVALID, "fi_store_lock_key: NULL argument");
    *out = NULL;
    fi_key_hex(hex, key);
    if (snprintf(path, sizeof path, "%s/locks/%s.lock", st->dir, hex) >= (int)sizeof path)
        FI_FAIL(FI_EINVALID, "cache path too long under %s", st->dir);
    if (!(lock = fi__malloc(sizeof *lock))) FI_FAIL(FI_ENOMEM, "out of memory for a build lock");
    if (st->flags & FI_STORE_READ_ONLY) {
        fd = -1; /* nothing will be stored, so there is nothing to serialise */
    } else if ((rc = lock_file_wait(path, st->lock_timeout_ms, &fd)) == 1) {
        /* The holder may be stopped (SIGSTOP, a debugger) or hung in NVRTC:
         * build here too. Publishing is rename + insert, so whichever of
         * the two writers of the key comes last just replaces an equal entry. */
        if (!atomic_exchange(&st->lock_timeout_warned, 1))
            fi__log(FI_LOG_WARN, "another process held the build lock %s for over %" PRId64
                    " ms; building without it (FIJIT_LOCK_TIMEOUT_MS sets the wait)",
                    path, st->lock_timeout_ms);
        fd = -1;
        rc = 0;
    } else if (rc < 0) {
        /* A full disk, a read-only locks/ or a planted symlink: the lock only
         * saves duplicate compiles, so build without it (puts stay atomic)
         * rather than fail the kernel. Said once per store. */
        if (!atomic_exchange(&st->lock_warned, 1))
            fi__log(FI_LOG_WARN, "building without a cross-process lock: %s", fi_last_error());
        fi__error_clear();
        fd = -1;
        rc = 0;
    }
    lock->fd = fd;
    *out = lock;
    lock = NULL;
out:
    fi__free(lock);
    return rc;
}

void fi_store_unlock(fi_store_lock *lock)
{
    if (!lock) return;
    if (lock->fd >= 0) flock(lock->fd, LOCK_UN); /* closing would release it too; be explicit */
    fi__close(lock->fd);
    fi__free(lock);
}

/* ---- SQLite helpers --------------------------------------------------------- */

/* Whether a failed SQLite call ran out of space. SQLite reports a full disk
 * as SQLITE_FULL only for its own files' writes; growing index.sqlite-shm
 * fails as a plain "disk I/O error", so ask the filesystem too. */
static int disk_full(const fi_store *st, int src)
{
    struct statvfs vfs;
    int sys = st->db ? sqlite3_system_errno(st->db) : 0;
    if ((src & 0xff) == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT) return 1;
    if (fi__statvfs(st->dir, &vfs) < 0) return 0;
    return (geteuid() == 0 ? vfs.f_bfree : vfs.f_bavail) == 0;
}

/* 1 when a failed statement says the index itself is damaged, so that it
 * is rebuilt from the objects rather than failing every call: a malformed
 * file, a table or column gone, or a link, folder, FIFO or other non-file
 * where index.sqlite belongs (SQLite cannot open those). */
static int index_broken(fi_store *st, int src)
{
    struct stat sb;
    const char *msg = st->db ? sqlite3_errmsg(st->db) : "";
    switch (src & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return 1;
    case SQLITE_ERROR:
        return strncmp(msg, "no such table", 13) == 0 || strncmp(msg, "no such column", 14) == 0;
    default: /* CANTOPEN, or IOERR for a FIFO */
        return lstat(st->index_path, &sb) == 0 && !S_ISREG(sb.st_mode);
    }
}

static int sql_error(fi_store *st, int src, const char *what)
{
    int code = index_broken(st, src) ? FI_ECORRUPT : FI_EIO;
    const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(src);
    if ((src & 0xff) == SQLITE_BUSY)
        msg = "the index stayed locked by another process for longer than the busy timeout";
    st->last_sql_error = src & 0xff;
    return fi__error(code, "cache index %s: %s: %s%s", st->index_path, what, msg,
                     code == FI_EIO && disk_full(st, src) ? " (the disk is full)" : "");
}

/* A cached, reset statement ready for binding. */
static int sql_prep(fi_store *st, enum stmt_id id, sqlite3_stmt **out)
{
    if (!st->db)
        return fi__error(FI_EIO, "cache index %s is closed after an earlier failure",
                         st->index_path);
    if (fi__fault(FI_FAULT_SQL))
        return fi__error(FI_EIO, "cache index %s: preparing \"%s\": injected fault",
                         st->index_path, stmt_sql[id]);
    if (!st->stmts[id]) {
        int src = sqlite3_prepare_v2(st->db, stmt_sql[id], -1, &st->stmts[id], NULL);
        if (src != SQLITE_OK) {
            st->stmts[id] = NULL;
            return sql_error(st, src, "preparing a statement");
        }
    }
    sqlite3_reset(st->stmts[id]);
    sqlite3_clear_bindings(st->stmts[id]);
    *out = st->stmts[id];
    return 0;
}

/* One step; SQLITE_ROW or SQLITE_DONE become 1 and 0, anything else an error. */
static int sql_step(fi_store *st, sqlite3_stmt *s, const char *what)
{
    if (fi__fault(FI_FAULT_SQL))
        return fi__error(FI_EIO, "cache index %s: %s: injected fault", st->index_path, what);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) return 1;
    if (src == SQLITE_DONE) return 0;
    sqlite3_reset(s);
    return sql_error(st, src, what);
}

/* Run a statement to completion (for writes). */
static int sql_run(fi_store *st, sqlite3_stmt *s, const char *what)
{
    int rc;
    while ((rc = sql_step(st, s, what)) == 1) {
    }
    sqlite3_reset(s);
    return rc;
}

static int sql_exec_id(fi_store *st, enum stmt_id id, const char *what)
{
    int rc;
    sqlite3_stmt *s;
    if ((rc = sql_prep(st, id, &s)) < 0) return rc;
    return sql_run(st, s, what);
}

static int tx_begin(fi_store *st) { return sql_exec_id(st, S_BEGIN, "starting a write transaction"); }
static int tx_commit(fi_store *st) { return sql_exec_id(st, S_COMMIT, "committing"); }
static void tx_rollback(fi_store *st)
{
    /* Not through the fault seam: cleanup must not fail. */
    if (!st->db || sqlite3_get_autocommit(st->db)) return;
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

static int bind_text(fi_store *st, sqlite3_stmt *s, int i, const char *text)
{
    int src = sqlite3_bind_text(s, i, text, -1, SQLITE_TRANSIENT);
    return src == SQLITE_OK ? 0 : sql_error(st, src, "binding a value");
}

static int bind_i64(fi_store *st, sqlite3_stmt *s, int i, int64_t v)
{
    int src = sqlite3_bind_int64(s, i, v);
    return src == SQLITE_OK ? 0 : sql_error(st, src, "binding a value");
}

static int stat_add1(fi_store *st, const char *name, int64_t value)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(sql_prep(st, S_STAT_ADD, &s));
    FI_TRY(bind_text(st, s, 1, name));
    FI_TRY(bind_i64(st, s, 2, value));
    FI_TRY(sql_run(st, s, "updating statistics"));
out:
    return rc;
}

/* Size of the entry's row, 0 when it has none (negative: error). */
static int row_exists(fi_store *st, const char *hex, int64_t *size)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(sql_prep(st, S_EXISTS, &s));
    FI_TRY(bind_text(st, s, 1, hex));
    FI_TRY(sql_step(st, s, "looking up an entry"));
    if (rc == 1 && size) *size = sqlite3_column_int64(s, 0);
out:
    if (rc >= 0) sqlite3_reset(s);
    return rc;
}

/* ---- opening the index ----------------------------------------------------- */

static void db_close(fi_store *st)
{
    for (int i = 0; i < S_COUNT; i++) {
        sqlite3_finalize(st->stmts[i]);
        st->stmts[i] = NULL;
    }
    sqlite3_close(st->db);
    st->db = NULL;
}

/* Run a static PRAGMA and return its first column as an integer (or -1 when
 * it returns no row). */
static int pragma_int(fi_store *st, const char *sql, int64_t *out)
{
    int rc = 0;
    sqlite3_stmt *s = NULL;
    int src = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (src != SQLITE_OK) {
        rc = sql_error(st, src, sql);
        goto out;
    }
    FI_TRY(sql_step(st, s, sql));
    *out = rc == 1 ? sqlite3_column_int64(s, 0) : -1;
    rc = 0;
out:
    sqlite3_finalize(s);
    return rc;
}

/* Switch the index to WAL. The switch needs an exclusive lock, and SQLite
 * answers SQLITE_BUSY at once, without its busy handler, when another
 * process is doing the same on a fresh index; so retry up to the timeout. */
static int set_wal(fi_store *st)
{
    int rc = 0;
    int64_t deadline = fi__now_ns() + (int64_t)BUSY_TIMEOUT_MS * 1000000;
    for (;;) {
        sqlite3_stmt *s = NULL;
        if (fi__fault(FI_FAULT_SQL))
            return fi__error(FI_EIO, "cache index %s: setting WAL mode: injected fault",
                             st->index_path);
        int src = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode=WAL", -1, &s, NULL);
        if (src == SQLITE_OK) src = sqlite3_step(s);
        if (src == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(s, 0);
            if (!mode || strcmp(mode, "wal") != 0) /* e.g. a filesystem without shared memory */
                fi__log(FI_LOG_WARN, "cache index %s stays in journal mode %s, not WAL",
                        st->index_path, mode ? mode : "?");
            sqlite3_finalize(s);
            return 0;
        }
        sqlite3_finalize(s);
        if (((src & 0xff) == SQLITE_BUSY || (src & 0xff) == SQLITE_LOCKED) &&
            fi__now_ns() < deadline) {
            struct timespec pause = {0, 2000000};
            nanosleep(&pause, NULL);
            continue;
        }
        rc = sql_error(st, src, "setting WAL mode");
        break;
    }
    return rc;
}

/* Create the tables, or rebuild them when the index has another schema
 * version. Under BEGIN IMMEDIATE so concurrent openers do it once. */
static int db_schema(fi_store *st)
{
    int rc = 0, in_tx = 0;
    int64_t version = 0;
    char *err = NULL;
    FI_TRY(tx_begin(st));
    in_tx = 1;
    FI_TRY(pragma_int(st, "PRAGMA user_version", &version));
    if (version != FI_SCHEMA_VERSION) {
        if (version != 0)
            fi__log(FI_LOG_WARN, "cache index %s has schema version %" PRId64
                    ", this library uses %d: rebuilding it (objects are re-indexed on use)",
                    st->index_path, version, FI_SCHEMA_VERSION);
        if (fi__fault(FI_FAULT_SQL)) FI_FAIL(FI_EIO, "cache index %s: creating tables: injected fault", st->index_path);
        /* Static SQL: the schema text is ours, compiled into the library. */
        if (sqlite3_exec(st->db, "DROP TABLE IF EXISTS entries; DROP TABLE IF EXISTS stats;", NULL,
                         NULL, &err) != SQLITE_OK ||
            sqlite3_exec(st->db, fi__schema_sql, NULL, NULL, &err) != SQLITE_OK)
            FI_FAIL(sqlite3_errcode(st->db) == SQLITE_CORRUPT ||
                            sqlite3_errcode(st->db) == SQLITE_NOTADB
                        ? FI_ECORRUPT
                        : FI_EIO,
                    "cache index %s: creating tables: %s", st->index_path,
                    err ? err : "unknown error");
        FI_TRY(pragma_int(st, "PRAGMA user_version", &version));
        if (version != FI_SCHEMA_VERSION)
            FI_FAIL(FI_EINVALID,
                    "internal: cache/schema.sql sets user_version %" PRId64 " but store.c expects %d",
                    version, FI_SCHEMA_VERSION);
    }
    FI_TRY(tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) tx_rollback(st);
    sqlite3_free(err);
    return rc;
}

/* How db_init_as opens the index. */
enum { DB_WRITE, DB_READ, DB_IMMUTABLE };

/* The index as a "file:" URI with `query`; '%', '?' and '#' in the path are
 * escaped, the rest is taken as it is. */
static int index_uri(const fi_store *st, const char *query, char *out, size_t size)
{
    size_t n = (size_t)snprintf(out, size, "file:");
    for (const char *p = st->index_path; *p; p++) {
        if (n + 4 >= size) return fi__error(FI_EINVALID, "cache path too long: %s", st->index_path);
        if (*p == '%' || *p == '?' || *p == '#')
            n += (size_t)snprintf(out + n, size - n, "%%%02X", (unsigned)(unsigned char)*p);
        else
            out[n++] = *p;
    }
    if ((size_t)snprintf(out + n, size - n, "?%s", query) >= size - n)
        return fi__error(FI_EINVALID, "cache path too long: %s", st->index_path);
    return 0;
}

/* Open the connection and bring the schema up to date. FI_ECORRUPT means
 * the file is not a usable database (the caller then rebuilds it). */
static int db_init_as(fi_store *st, int how)
{
    int rc = 0, src;
    int ro = how != DB_WRITE;
    int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
    const char *name = st->index_path;
    char uri[3 * PATH_MAX_LEN + 32];
    int64_t version = 0, dummy;
    if (fi__fault(FI_FAULT_SQL)) FI_FAIL(FI_EIO, "cannot open cache index %s: injected fault", st->index_path);
    if (ro) {
        FI_TRY(index_uri(st, how == DB_READ ? "mode=ro" : "immutable=1", uri, sizeof uri));
        name = uri;
        flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    } else {
        flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    }
    src = sqlite3_open_v2(name, &st->db, flags, NULL);
    if (!st->db) FI_FAIL(FI_ENOMEM, "out of memory opening cache index %s", st->index_path);
    if (src != SQLITE_OK) {
        if (ro && (src & 0xff) == SQLITE_CANTOPEN)
            FI_FAIL(FI_ENOTFOUND, "cache index %s does not exist", st->index_path);
        rc = sql_error(st, src, "opening");
        goto out;
    }
    sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
    if (!ro) {
        /* WAL: readers never block the writer; NORMAL sync is durable enough for a
         * cache (a lost last transaction only costs a recompile). */
        FI_TRY(set_wal(st));
        FI_TRY(pragma_int(st, "PRAGMA synchronous=NORMAL", &dummy));
    }
    FI_TRY(pragma_int(st, "PRAGMA user_version", &version));
    if (version != FI_SCHEMA_VERSION) {
        if (ro)
            FI_FAIL(FI_ECORRUPT,
                    "cache index %s has schema version %" PRId64 ", this library uses %d; "
                    "open it writable once to rebuild it",
                    st->index_path, version, FI_SCHEMA_VERSION);
        FI_TRY(db_schema(st));
    }
    /* Touch the tables' pages so that a truncated file shows up now. */
    FI_TRY(pragma_int(st, "SELECT count(*) FROM stats", &dummy));
    FI_TRY(pragma_int(st, "SELECT count(*) FROM entries", &dummy));
out:
    if (rc < 0) db_close(st);
    return rc;
}

/* Read-only, a WAL index needs index.sqlite-shm, which a read-only directory
 * or a full disk cannot provide unless it is there already. Then the index
 * is opened immutable=1: no locks and no -shm, and changes still in
 * index.sqlite-wal are not seen. The last writer to close a cache
 * checkpoints them into index.sqlite and removes the -wal, so a cache copied
 * (into an image) after its writers closed has none; and objects are read
 * by key, without the index, so hits never depend on it. */
static int db_init(fi_store *st)
{
    int rc;
    char first[1024], wal[PATH_MAX_LEN + 8];
    struct stat sb;
    if (!(st->flags & FI_STORE_READ_ONLY)) return db_init_as(st, DB_WRITE);
    if ((rc = db_init_as(st, DB_READ)) != FI_EIO || st->last_sql_error == SQLITE_BUSY) return rc;
    snprintf(first, sizeof first, "%s", fi_last_error());
    if ((rc = db_init_as(st, DB_IMMUTABLE)) == 0) {
        fi__log(FI_LOG_INFO, "cache index %s opened as immutable (%s)", st->index_path, first);
        return 0;
    }
    snprintf(wal, sizeof wal, "%s-wal", st->index_path);
    if (lstat(wal, &sb) == 0 && sb.st_size > 0)
        return fi__error(FI_EIO, "%s; its latest changes are in %s, which cannot be read here: "
                         "open the cache once where it is writable (e.g. 'fijit stats') so "
                         "that they are moved into the index", first, wal);
    return fi__error(FI_EIO, "%s", first);
}

/* 1 (reason in `why`) when the open index is damaged: PRAGMA
 * integrity_check finds fault, or a table is gone; 0 when sound; negative
 * for a failure that says nothing about the file (busy, I/O). Outside the
 * fault seam, like the other checks of a file already open. */
static int index_damaged(fi_store *st, char *why, size_t why_size)
{
    static const char *const probes[] = {"SELECT count(*) FROM entries",
                                         "SELECT count(*) FROM stats"};
    sqlite3_stmt *s = NULL;
    const char *res = NULL;
    int src = sqlite3_prepare_v2(st->db, "PRAGMA integrity_check", -1, &s, NULL);
    if (src == SQLITE_OK && (src = sqlite3_step(s)) == SQLITE_ROW)
        res = (const char *)sqlite3_column_text(s, 0);
    if (!res && !index_broken(st, src)) {
        int rc = sql_error(st, src, "checking its integrity");
        sqlite3_finalize(s);
        return rc < 0 ? rc : FI_EIO;
    }
    int bad = !res || strcmp(res, "ok") != 0;
    snprintf(why, why_size, "%s", res ? res : sqlite3_errmsg(st->db));
    sqlite3_finalize(s);
    if (bad) return 1;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        int64_t n;
        int rc = pragma_int(st, probes[i], &n);
        if (rc == FI_ECORRUPT) {
            snprintf(why, why_size, "%s", fi_last_error());
            return 1;
        }
        if (rc < 0) return rc;
    }
    return 0;
}

/* Move a broken index aside (keeping one copy for a post-mortem) and start a
 * new one. Runs under locks/index.lock so that two processes which both saw
 * the broken file do not each replace the other's fresh index. */
static int db_rebuild(fi_store *st)
{
    int rc = 0, fd = -1;
    char lock_path[PATH_MAX_LEN], aside[PATH_MAX_LEN + 16], side[PATH_MAX_LEN + 16], why[256];
    db_close(st);
    FI_TRY(join_path(lock_path, st->dir, "locks/index.lock"));
    FI_TRY(lock_file_wait(lock_path, st->lock_timeout_ms, &fd));
    if (rc == 1)
        FI_FAIL(FI_EIO, "cache index %s is broken and another process has held %s for over %"
                PRId64 " ms while rebuilding it", st->index_path, lock_path, st->lock_timeout_ms);
    if ((rc = db_init(st)) != FI_ECORRUPT) {
        /* Opens: another process fixed it already, unless the whole file
         * still fails a full check (a damaged page that opening skips). */
        if (rc < 0 || (rc = index_damaged(st, why, sizeof why)) <= 0) goto out;
        db_close(st);
    }
    snprintf(aside, sizeof aside, "%s.corrupt", st->index_path);
    if (fi__rename(st->index_path, aside) < 0 && errno != ENOENT) {
        /* An older copy in the way (a folder cannot replace a file, nor a
         * file a folder): the newer one is the one worth keeping. */
        if (remove_any(aside) < 0 || (fi__rename(st->index_path, aside) < 0 && errno != ENOENT))
            FI_FAIL(FI_EIO, "cannot move the broken cache index %s aside: %s", st->index_path,
                    strerror(errno));
    }
    snprintf(side, sizeof side, "%s-wal", st->index_path);
    (void)unlink(side);
    snprintf(side, sizeof side, "%s-shm", st->index_path);
    (void)unlink(side);
    FI_TRY(db_init(st));
    fi__log(FI_LOG_WARN, "cache index %s was not a valid database; moved it to %s and "
            "started a new one", st->index_path, aside);
    FI_TRY(stat_add1(st, "corrupt", 1));
out:
    if (fd >= 0) fi__close(fd);
    return rc;
}

/* index.sqlite-wal and -shm as SQLite will find them: never links (SQLite
 * would write through them), and writable by us. A -shm left 0400 or owned
 * by another user (a crashed run under another uid, a restored backup)
 * would make every write fail. Ours are made writable again; another
 * user's -shm is removed when no process has it open (SQLite holds a read
 * lock on its DMS byte while it does; the -shm is rebuilt from the -wal),
 * otherwise the message names the file. A -wal is never removed: it may
 * hold committed changes. Read-only (`fix` 0), only links are refused. */
static int check_sidecars(fi_store *st, int fix)
{
    int rc = 0;
    char path[PATH_MAX_LEN + 8];
    static const char *const suffixes[] = {"-wal", "-shm"};
    struct stat sb;
    for (size_t i = 0; i < 2; i++) {
        int fd = -1;
        snprintf(path, sizeof path, "%s%s", st->index_path, suffixes[i]);
        if (fi__lstat(path, &sb) < 0) {
            if (errno == ENOENT) continue;
            FI_FAIL(FI_EIO, "cannot stat %s: %s", path, strerror(errno));
        }
        if (!S_ISREG(sb.st_mode))
            FI_FAIL(FI_EPERM, "%s is a symbolic link or not a regular file; refusing it (remove "
                    "it to use the cache)", path);
        if (!fix || fi__access(path, R_OK | W_OK) == 0) continue;
        if (sb.st_uid == geteuid()) {
            if ((fd = fi__open(path, O_RDONLY | O_NOFOLLOW, 0)) >= 0 && fchmod(fd, 0600) == 0) {
                fi__log(FI_LOG_WARN, "%s was not writable (mode %03o); made it 0600", path,
                        (unsigned)(sb.st_mode & 0777));
                fi__close(fd);
                continue;
            }
            fi__close(fd);
        } else if (i == 1 && (fd = fi__open(path, O_RDONLY | O_NOFOLLOW, 0)) >= 0) {
            /* SQLite's dead-man-switch byte in the -shm (os_unix.c UNIX_SHM_DMS). */
            struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 128,
                                  .l_len = 1};
            int idle = fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type == F_UNLCK;
            fi__close(fd);
            if (idle && fi__unlink(path) == 0) {
                fi__log(FI_LOG_WARN, "removed %s: it belonged to uid %u and was not writable, "
                        "and no process had it open", path, (unsigned)sb.st_uid);
                continue;
            }
        }
        if (i == 1)
            FI_FAIL(FI_EIO, "%s is not writable by this user (uid %u; the file belongs to uid "
                    "%u, mode %03o): stop the processes using the cache, then remove it", path,
                    (unsigned)geteuid(), (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 0777));
        FI_FAIL(FI_EIO, "%s is not writable by this user (uid %u; the file belongs to uid %u, "
                "mode %03o): have uid %u open the cache once (it moves the changes into the "
                "index and removes the file) or chown the file", path, (unsigned)geteuid(),
                (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 0777), (unsigned)sb.st_uid);
    }
out:
    return rc;
}

/* Said once per store: a read-only cache is a normal way to ship kernels. */
static void say_read_only(const fi_store *st, const char *why)
{
    fi__log(FI_LOG_WARN, "cache %s opened read-only (%s): serving the kernels it holds, storing "
            "none", st->dir, why);
}

static int db_open(fi_store *st)
{
    int rc = 0;
    char why[1024];
    struct stat sb;
    /* SQLite's NOFOLLOW says only "unable to open database file". A planted
     * link is never followed: read-only, it is refused; writable, it is
     * moved aside (the link itself) and the index rebuilt from the objects. */
    const int linked = fi__lstat(st->index_path, &sb) == 0 && S_ISLNK(sb.st_mode);
    if (linked && (st->flags & FI_STORE_READ_ONLY))
        return fi__error(FI_EPERM, "cache index %s is a symbolic link; refusing it",
                         st->index_path);
    if (!(st->flags & FI_STORE_READ_ONLY)) {
        rc = check_sidecars(st, 1);
        if (rc == 0) rc = linked ? FI_ECORRUPT : db_init(st);
        if (rc == FI_ECORRUPT) rc = db_rebuild(st);
        if (rc != FI_EIO || !(st->flags & FI_STORE_READ_ONLY_FALLBACK)) return rc;
        /* Not writable after all (a full disk, a -shm we may not write):
         * reading may still work. */
        snprintf(why, sizeof why, "%s", fi_last_error());
        st->flags |= FI_STORE_READ_ONLY;
        if ((rc = db_init(st)) < 0) {
            st->flags &= ~(unsigned)FI_STORE_READ_ONLY;
            return fi__error(FI_EIO, "%s", why);
        }
        say_read_only(st, why);
        return 0;
    }
    return (rc = check_sidecars(st, 0)) < 0 ? rc : db_init(st);
}

/* ---- temp files ---------------------------------------------------------------- */

/* Writers' temp files sit next to their final path (fi__atomic_begin names
 * them `<final>.tmp.<pid>.<n>`), so they share the objects' filesystem and
 * the rename is atomic; tmp/ holds only the sweep marker. Remove those older
 * than the cutoff in `dir`. */
/* 1 if the temp file `name` (`<final>.tmp.<pid>.<n>`) was written by a
 * process that no longer exists on this host. */
static int temp_writer_dead(const char *name)
{
    const char *p = strstr(name, ".tmp.");
    char *end = NULL;
    if (!p) return 0;
    long pid = strtol(p + 5, &end, 10);
    if (pid <= 0 || end == p + 5 || *end != '.') return 0;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static void clean_temps_in(const char *dir, time_t cutoff)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX_LEN];
    struct stat sb;
    time_t dead_cutoff = time(NULL) - TEMP_DEAD_WRITER_AGE_S;
    if (!d) return;
    while ((e = readdir(d))) {
        if (!is_temp_name(e->d_name)) continue;
        if (join_path(path, dir, e->d_name) < 0) continue;
        if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode) &&
            (sb.st_mtime < cutoff ||
             (sb.st_mtime < dead_cutoff && temp_writer_dead(e->d_name))))
            (void)fi__unlink(path);
    }
    closedir(d);
}

static void clean_temps(fi_store *st, int64_t max_age_s)
{
    char objects[PATH_MAX_LEN], sub[PATH_MAX_LEN];
    time_t cutoff = time(NULL) - (time_t)max_age_s;
    DIR *d;
    struct dirent *e;
    if (join_path(objects, st->dir, "objects") < 0) return;
    if (join_path(sub, st->dir, "tmp") == 0) clean_temps_in(sub, cutoff);
    if (!(d = opendir(objects))) return;
    while ((e = readdir(d))) {
        if (strlen(e->d_name) != 2 || hex_digit(e->d_name[0]) < 0 || hex_digit(e->d_name[1]) < 0)
            continue;
        if (join_path(sub, objects, e->d_name) == 0) clean_temps_in(sub, cutoff);
    }
    closedir(d);
}

/* Sweep temps at most once an hour per cache, marked by tmp/last-clean, so
 * that opening a cache stays a few syscalls. */
static void maybe_clean_temps(fi_store *st)
{
    char marker[PATH_MAX_LEN];
    struct stat sb;
    if (join_path(marker, st->dir, "tmp/last-clean") < 0) return;
    int found = lstat(marker, &sb) == 0;
    if (found && S_ISREG(sb.st_mode) && sb.st_mtime > time(NULL) - TEMP_MAX_AGE_S) return;
    clean_temps(st, TEMP_MAX_AGE_S);
    /* Anything but a plain file there (a FIFO would block the open below
     * without O_NONBLOCK; a folder would never be stamped) is replaced. */
    if (found && !S_ISREG(sb.st_mode)) (void)remove_any(marker);
    int fd = fi__open(marker, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd >= 0) {
        if (fi__fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) futimens(fd, NULL);
        fi__close(fd);
    }
}

/* ---- open / close ------------------------------------------------------------ */

/* SQLite's NOFOLLOW refuses a link in any component of the index's path, and
 * links above the cache are fine (~/.cache on another disk); so the index is
 * named through the resolved dir, and NOFOLLOW then refuses only a link at
 * index.sqlite itself (later swapped in). SQLite's unix VFS also caps a path
 * at mxPathname bytes (512), the longest suffix it adds ("-journal")
 * included, and fails deep inside with "unable to open database file":
 * check that here (a dir of 491 bytes is the longest that works). */
static int resolve_index_path(fi_store *st)
{
    char real[PATH_MAX];
    const char *const name = "/index.sqlite-journal";
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    size_t max = vfs ? (size_t)vfs->mxPathname : 512;
    if (fi__realpath(st->dir, real) < 0)
        return fi__error(FI_EIO, "cannot resolve cache directory %s: %s", st->dir, strerror(errno));
    if (strlen(real) + strlen(name) > max)
        return fi__error(FI_EINVALID,
                         "cache directory %s is %zu bytes long%s; SQLite limits the index "
                         "path to %zu bytes, so use a cache directory of at most %zu bytes",
                         st->dir, strlen(real),
                         strcmp(real, st->dir) != 0 ? " once links are resolved" : "", max,
                         max - strlen(name));
    return join_path(st->index_path, real, "index.sqlite");
}

int fi_store_open(fi_store **out, const char *dir, unsigned flags, int64_t max_bytes)
{
    int rc = 0, dfd = -1;
    int ro = (flags & FI_STORE_READ_ONLY) != 0;
    const char *ro_why = NULL; /* why a writable open became read-only */
    fi_store *st = NULL;
    struct stat sb;
    char path[PATH_MAX_LEN];
    static const char *const subdirs[] = {"objects", "locks", "tmp"};

    if (!out || !dir || !*dir) return fi__error(FI_EINVALID, "fi_store_open: no cache directory");
    *out = NULL;
    if (!(st = fi__calloc(1, sizeof *st))) FI_FAIL(FI_ENOMEM, "out of memory opening the cache");
    pthread_mutex_init(&st->mu, NULL);
    st->flags = flags;
    st->max_bytes = max_bytes;
    st->lock_timeout_ms = FI_STORE_LOCK_TIMEOUT_MS;
    if (!(st->dir = fi__strdup(dir))) FI_FAIL(FI_ENOMEM, "out of memory opening the cache");
    /* Trailing slashes would double up in every path. */
    for (size_t n = strlen(st->dir); n > 1 && st->dir[n - 1] == '/'; n--) st->dir[n - 1] = '\0';

    if (!ro) FI_TRY(make_dirs(st->dir));
    /* The cache dir itself may be a symlink (~/.cache on another disk); check
     * what it points to. Everything below it is checked without following. */
    dfd = fi__open(st->dir, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        if (errno == ENOENT) FI_FAIL(FI_ENOTFOUND, "cache directory %s does not exist", st->dir);
        FI_FAIL(FI_EIO, "cannot open cache directory %s: %s", st->dir, strerror(errno));
    }
    if (fi__fstat(dfd, &sb) < 0)
        FI_FAIL(FI_EIO, "cannot stat cache directory %s: %s", st->dir, strerror(errno));
    FI_TRY(check_owner_mode(st->dir, &sb, flags));
    if (!ro && fi__access(st->dir, W_OK) < 0) {
        /* A read-only mount or image layer (EROFS, root included), or a
         * cache of another user or chmod a-w (EACCES). */
        if (!(flags & FI_STORE_READ_ONLY_FALLBACK))
            FI_FAIL(FI_EIO, "cache directory %s is not writable: %s", st->dir, strerror(errno));
        ro_why = errno == EROFS ? "it is on a read-only file system" : "it is not writable";
        st->flags |= FI_STORE_READ_ONLY;
        ro = 1;
    }
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        FI_TRY(join_path(path, st->dir, subdirs[i]));
        rc = ensure_subdir(path, st->flags, !ro);
        if (rc == FI_ENOTFOUND && ro) { /* nothing to read there, nothing to write */
            fi__error_clear();
            rc = 0;
        }
        if (rc < 0) goto out;
    }
    FI_TRY(resolve_index_path(st));
    FI_TRY(db_open(st));
    if (ro_why) say_read_only(st, ro_why);
    if (!(st->flags & FI_STORE_READ_ONLY)) maybe_clean_temps(st);
    *out = st;
    st = NULL;
out:
    if (dfd >= 0) fi__close(dfd);
    fi_store_close(st);
    return rc;
}

void fi_store_close(fi_store *st)
{
    if (!st) return;
    db_close(st);
    pthread_mutex_destroy(&st->mu);
    fi__free(st->dir);
    fi__free(st);
}

const char *fi_store_dir(const fi_store *st) { return st ? st->dir : NULL; }

int fi_store_read_only(const fi_store *st)
{
    return st && (st->flags & FI_STORE_READ_ONLY) != 0;
}

static int check_writable(const fi_store *st, const char *what)
{
    if (st->flags & FI_STORE_READ_ONLY)
        return fi__error(FI_EINVALID, "%s: cache %s was opened read-only", what, st->dir);
    return 0;
}

/* ---- object files -------------------------------------------------------------
 *
 * Object file format (all integers little-endian, offsets in bytes):
 *
 *    0   8  magic "FIJITOB1"
 *    8   4  u32 format version (OBJ_VERSION)
 *   12   4  u32 header size H: bytes before the payload (= 82 + n + 8)
 *   16  16  key (XXH3-128 of the inputs, as in the file name)
 *   32   8  u64 payload size P
 *   40   8  u64 XXH3-64 of the payload
 *   48   4  i32 registers per thread
 *   52   4  i32 spill bytes per thread
 *   56   8  i64 compile time in ns
 *   64  16  arch, NUL-padded ("sm_90a"), at most 15 characters
 *   80   2  u16 n: length of the spec text (<= 255)
 *   82   n  canonical spec text, no NUL
 * 82+n   8  u64 XXH3-64 of header bytes [0, H-8): guards the meta, which the
 *           payload checksum does not cover
 *    H   P  payload (the cubin)
 *
 * The file size must be exactly H + P. The header carries everything the
 * index row holds, so an object can be re-indexed after the index is lost.
 */
#define OBJ_MAGIC "FIJITOB1"
#define OBJ_VERSION 1u
#define OBJ_FIXED 82u
#define OBJ_MAX_HEADER (OBJ_FIXED + 255u + 8u)

typedef struct obj_info {
    uint8_t key[16];
    uint64_t checksum;
    int64_t file_size;
    fi_object_meta meta;
    dev_t dev; /* identity of the file that was read, so that a bad file is */
    ino_t ino; /* removed only if it is still the one at the path */
} obj_info;

enum { OBJ_OK = 0, OBJ_MISSING = 1, OBJ_BAD = 2 };

static size_t obj_header_build(uint8_t *h, const uint8_t key[16], const fi_object_meta *meta,
                               uint64_t payload_size, uint64_t checksum)
{
    size_t n = strnlen(meta->spec, sizeof meta->spec);
    size_t arch_n = strnlen(meta->arch, sizeof meta->arch);
    uint32_t hsize = (uint32_t)(OBJ_FIXED + n + 8);
    memset(h, 0, OBJ_MAX_HEADER);
    memcpy(h, OBJ_MAGIC, 8);
    put_u32(h + 8, OBJ_VERSION);
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

/* Read and check the object at `path`. Returns OBJ_OK, OBJ_MISSING, OBJ_BAD
 * (reason in `why`) or a negative fi_error for a failure that says nothing
 * about the object (I/O error, out of memory). With `want` the key in the
 * header must match it. With `payload_out` the payload is handed over. */
static int obj_read(const char *path, const uint8_t *want, void **payload_out,
                    size_t *payload_size_out, obj_info *info, char *why, size_t why_size)
{
    int rc = 0, fd = -1;
    uint8_t h[OBJ_MAX_HEADER];
    uint8_t *payload = NULL;
    struct stat sb;
    uint32_t hsize, n;
    uint64_t psize;

    memset(info, 0, sizeof *info);
    /* O_NONBLOCK: a FIFO planted at the path must not hang the reader (it
     * has no effect on the regular file that is checked for below). */
    fd = fi__open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) {
        int err = errno;
        struct stat lsb;
        if (err == ENOENT) return OBJ_MISSING;
        /* A link (ELOOP) or a socket (ENXIO): bad, and removable by its
         * identity; anything else is an I/O failure. */
        if (lstat(path, &lsb) == 0 && !S_ISREG(lsb.st_mode)) {
            info->dev = lsb.st_dev;
            info->ino = lsb.st_ino;
            snprintf(why, why_size, S_ISLNK(lsb.st_mode) ? "is a symbolic link"
                                                          : "is not a regular file");
            return OBJ_BAD;
        }
        return fi__error(FI_EIO, "cannot open cache object %s: %s", path, strerror(err));
    }
    if (fi__fstat(fd, &sb) < 0)
        FI_FAIL(FI_EIO, "cannot stat cache object %s: %s", path, strerror(errno));
    info->dev = sb.st_dev;
    info->ino = sb.st_ino;
    info->file_size = (int64_t)sb.st_size;
#define BAD(...)                                                               \
    do {                                                                       \
        snprintf(why, why_size, __VA_ARGS__);                                  \
        rc = OBJ_BAD;                                                          \
        goto out;                                                              \
    } while (0)
    if (!S_ISREG(sb.st_mode)) BAD("is not a regular file");
    if ((uint64_t)sb.st_size < OBJ_FIXED + 8)
        BAD("is truncated (%lld bytes, shorter than a header)", (long long)sb.st_size);
    if (fi__read_full(fd, h, OBJ_FIXED) < 0)
        FI_FAIL(FI_EIO, "cannot read cache object %s: %s", path, strerror(errno));
    if (memcmp(h, OBJ_MAGIC, 8) != 0) BAD("has a bad magic number");
    if (get_u32(h + 8) != OBJ_VERSION)
        BAD("has format version %u, expected %u", get_u32(h + 8), OBJ_VERSION);
    hsize = get_u32(h + 12);
    n = get_u16(h + 80);
    psize = get_u64(h + 32);
    if (n > 255 || hsize != OBJ_FIXED + n + 8) BAD("has a bad header size (%u)", hsize);
    if (psize == 0 || psize > OBJ_MAX_PAYLOAD || (uint64_t)sb.st_size != hsize + psize)
        BAD("is %lld bytes but its header says %" PRIu64 " (truncated or overwritten)",
            (long long)sb.st_size, (uint64_t)hsize + psize);
    if (fi__read_full(fd, h + OBJ_FIXED, hsize - OBJ_FIXED) < 0)
        FI_FAIL(FI_EIO, "cannot read cache object %s: %s", path, strerror(errno));
    if (get_u64(h + hsize - 8) != XXH3_64bits(h, hsize - 8)) BAD("has a damaged header");
    memcpy(info->key, h + 16, 16);
    if (want && memcmp(info->key, want, 16) != 0) {
        char a[33], b[33];
        fi_key_hex(a, info->key);
        fi_key_hex(b, want);
        BAD("holds key %s, not %s", a, b);
    }
    if (h[64 + 15] != 0) BAD("has a bad arch field");
    info->checksum = get_u64(h + 40);
    memcpy(info->meta.arch, h + 64, 16);
    memcpy(info->meta.spec, h + 82, n);
    info->meta.spec[n] = '\0';
    info->meta.registers = (int)get_u32(h + 48);
    info->meta.spill_bytes = (int)get_u32(h + 52);
    info->meta.compile_ns = (int64_t)get_u64(h + 56);
    if (!(payload = fi__malloc((size_t)psize)))
        FI_FAIL(FI_ENOMEM, "out of memory reading cache object %s (%" PRIu64 " bytes)", path, psize);
    if (fi__read_full(fd, payload, (size_t)psize) < 0)
        FI_FAIL(FI_EIO, "cannot read cache object %s: %s", path, strerror(errno));
    if (XXH3_64bits(payload, (size_t)psize) != info->checksum)
        BAD("fails its checksum (payload damaged)");
#undef BAD
    if (payload_out) {
        *payload_out = payload;
        *payload_size_out = (size_t)psize;
        payload = NULL;
    }
out:
    fi__free(payload);
    fi__close(fd);
    return rc;
}

/* Delete an entry's row (inside the caller's transaction). */
static int delete_row(fi_store *st, const char *hex, const char *what)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(sql_prep(st, S_DELETE, &s));
    FI_TRY(bind_text(st, s, 1, hex));
    FI_TRY(sql_run(st, s, what));
out:
    return rc;
}

/* Delete an entry's row, then its object (inside the caller's transaction).
 * A missing object is fine: the goal is that neither exists. The row goes
 * first so that a failing delete leaves the object alone; an interrupted
 * transaction can still bring back rows whose objects are gone, which get
 * and verify treat as a plain miss. A folder at the path goes too: it
 * would block every rebuild. */
static int remove_entry(fi_store *st, const char *hex)
{
    int rc = 0;
    char path[PATH_MAX_LEN];
    FI_TRY(object_path(st, path, hex));
    FI_TRY(delete_row(st, hex, "removing an entry"));
    if (remove_any(path) < 0)
        FI_FAIL(FI_EIO, "cannot remove cache object %s: %s", path, strerror(errno));
out:
    return rc;
}

/* Insert the row for an object from its header (put, and re-indexing). */
static int index_insert(fi_store *st, const char *hex, const fi_object_meta *meta,
                        int64_t file_size, uint64_t checksum, int64_t hits)
{
    int rc = 0;
    sqlite3_stmt *s;
    int64_t ns = wall_ns();
    FI_TRY(sql_prep(st, S_INSERT, &s));
    FI_TRY(bind_text(st, s, 1, hex));
    FI_TRY(bind_text(st, s, 2, meta->spec));
    FI_TRY(bind_text(st, s, 3, meta->arch));
    FI_TRY(bind_i64(st, s, 4, file_size));
    /* SQLite integers are signed 64-bit; the checksum is stored bit for bit. */
    FI_TRY(bind_i64(st, s, 5, (int64_t)checksum));
    FI_TRY(bind_i64(st, s, 6, ns / 1000000000));
    FI_TRY(bind_i64(st, s, 7, ns));
    FI_TRY(bind_i64(st, s, 8, hits));
    FI_TRY(bind_i64(st, s, 9, meta->registers));
    FI_TRY(bind_i64(st, s, 10, meta->spill_bytes));
    FI_TRY(bind_i64(st, s, 11, meta->compile_ns));
    FI_TRY(sql_run(st, s, "recording an entry"));
out:
    return rc;
}

/* A bad or missing object was found for a key: under the write lock, remove
 * the object (only if it is still the file we read: a concurrent put may
 * have replaced it) and the row, and count a bad one (a missing object is
 * what an interrupted gc leaves, not damage). Returns 1 when the path now
 * holds a different file, so the caller should read again. */
static int drop_bad(fi_store *st, const char *hex, const obj_info *seen)
{
    int rc = 0, in_tx = 0, raced = 0;
    char path[PATH_MAX_LEN];
    struct stat sb;
    FI_TRY(object_path(st, path, hex));
    FI_TRY(tx_begin(st));
    in_tx = 1;
    if (fi__lstat(path, &sb) < 0) {
        if (errno != ENOENT)
            FI_FAIL(FI_EIO, "cannot stat cache object %s: %s", path, strerror(errno));
    } else {
        if (!seen || sb.st_dev != seen->dev || sb.st_ino != seen->ino) {
            raced = 1;
            goto out;
        }
        if (remove_any(path) < 0)
            FI_FAIL(FI_EIO, "cannot remove bad cache object %s: %s", path, strerror(errno));
    }
    FI_TRY(delete_row(st, hex, "removing a bad entry"));
    if (seen) FI_TRY(stat_add1(st, "corrupt", 1));
    FI_TRY(tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) tx_rollback(st);
    return rc < 0 ? rc : raced;
}

/* 0 when the objects/<xx> folder of object `path` is a link or not a
 * folder: O_NOFOLLOW guards only the last component, and put refuses to
 * create one. Serving and verify both judge a folder by this. */
static int subdir_plain(const char *path)
{
    struct stat sb;
    char sub[PATH_MAX_LEN];
    snprintf(sub, sizeof sub, "%.*s", (int)(strlen(path) - 36), path);
    return !(lstat(sub, &sb) == 0 && !S_ISDIR(sb.st_mode));
}

/* A hit whose row is gone: the index was rebuilt or lost, or an eviction
 * removed the entry after we read it. Re-index from the header only if the
 * file we read is still at the path, checked under the write lock (which
 * eviction holds while it unlinks), so that a removed entry never comes
 * back as a row without an object. */
static int reindex_hit(fi_store *st, const char *hex, const char *path, const obj_info *info)
{
    int rc = 0, in_tx = 0;
    struct stat sb;
    FI_TRY(tx_begin(st));
    in_tx = 1;
    if (fi__lstat(path, &sb) == 0 && sb.st_dev == info->dev && sb.st_ino == info->ino &&
        (rc = row_exists(st, hex, NULL)) == 0)
        FI_TRY(index_insert(st, hex, &info->meta, info->file_size, info->checksum, 1));
    FI_TRY(rc);
    FI_TRY(tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) tx_rollback(st);
    return rc;
}

/* ---- get / put ---------------------------------------------------------------- */

int fi_store_get(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                 fi_object_meta *meta)
{
    int rc = 0, locked = 0;
    char hex[33], path[PATH_MAX_LEN], why[256] = "";
    obj_info info;
    void *payload = NULL;
    size_t psize = 0;
    if (!st || !key || !out || !out_size) return fi__error(FI_EINVALID, "fi_store_get: NULL argument");
    *out = NULL;
    *out_size = 0;
    fi_key_hex(hex, key);
    FI_TRY(object_path(st, path, hex));
    if (!subdir_plain(path)) {
        fi__log(FI_LOG_WARN, "cache folder of %s is not a plain directory; not reading it", path);
        FI_FAIL(FI_ENOTFOUND, "cache folder of %s is a symbolic link or not a directory; "
                "run 'fijit verify --repair'", path);
    }

    for (int attempt = 0;; attempt++) {
        rc = obj_read(path, key, &payload, &psize, &info, why, sizeof why);
        if (rc < 0) goto out;
        if (rc == OBJ_OK) break;
        if (st->flags & FI_STORE_READ_ONLY) {
            if (rc == OBJ_MISSING) FI_FAIL(FI_ENOTFOUND, "no cache entry %s", hex);
            FI_FAIL(FI_ENOTFOUND, "cache object %s %s (read-only cache: left in place)", path, why);
        }
        pthread_mutex_lock(&st->mu);
        locked = 1;
        if (rc == OBJ_MISSING) {
            /* The common miss takes no write lock: only a row without its
             * object is damage worth repairing. */
            int has = row_exists(st, hex, NULL);
            if (has < 0) {
                /* A damaged index must never stop a kernel being served:
                 * the object is not there either way, so this is a miss. */
                fi__log(FI_LOG_WARN, "%s", fi_last_error());
                FI_FAIL(FI_ENOTFOUND, "no cache entry %s (the index could not be read)", hex);
            }
            if (!has) FI_FAIL(FI_ENOTFOUND, "no cache entry %s", hex);
            snprintf(why, sizeof why, "is missing but the index lists it");
        }
        int bad = rc;
        rc = drop_bad(st, hex, bad == OBJ_BAD ? &info : NULL);
        pthread_mutex_unlock(&st->mu);
        locked = 0;
        if (rc < 0) {
            fi__log(FI_LOG_WARN, "could not remove bad cache entry %s: %s", hex,
                    fi_last_error());
        } else if (rc == 1 && attempt == 0) {
            continue; /* replaced meanwhile: read the new file */
        } else if (rc == 0) {
            fi__log(FI_LOG_WARN, "cache object %s %s; removed it", path, why);
        }
        FI_FAIL(FI_ENOTFOUND, "cache object %s %s; removed it so it is rebuilt", path, why);
    }

    if (!(st->flags & FI_STORE_READ_ONLY)) {
        /* Bookkeeping of a good hit is best effort: failing it must not turn a
         * valid object into a recompile. The UPDATE never creates a row. */
        sqlite3_stmt *s;
        int64_t ns = wall_ns();
        pthread_mutex_lock(&st->mu);
        locked = 1;
        if (sql_prep(st, S_TOUCH, &s) == 0 && bind_i64(st, s, 1, ns / 1000000000) == 0 &&
            bind_i64(st, s, 2, ns) == 0 && bind_text(st, s, 3, hex) == 0 &&
            sql_run(st, s, "recording a hit") == 0 && sqlite3_changes(st->db) == 0)
            (void)reindex_hit(st, hex, path, &info);
        pthread_mutex_unlock(&st->mu);
        locked = 0;
    }
    if (meta) *meta = info.meta;
    *out = payload;
    *out_size = psize;
    payload = NULL;
    rc = 0;
out:
    if (locked) pthread_mutex_unlock(&st->mu);
    fi__free(payload);
    return rc;
}

/* Evict least-recently-used entries (other than `keep`) until the total size
 * is at most max_bytes. Inside the caller's transaction. */
static int evict_to(fi_store *st, int64_t max_bytes, const char *keep, int *removed)
{
    int rc = 0;
    sqlite3_stmt *s;
    int64_t bytes;
    char hex[33];
    FI_TRY(sql_prep(st, S_TOTAL, &s));
    FI_TRY(sql_step(st, s, "summing entry sizes"));
    bytes = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    while (bytes > max_bytes) {
        FI_TRY(sql_prep(st, S_OLDEST, &s));
        FI_TRY(bind_text(st, s, 1, keep ? keep : ""));
        FI_TRY(sql_step(st, s, "finding the least recently used entry"));
        if (rc == 0) break; /* only `keep` is left */
        const unsigned char *k = sqlite3_column_text(s, 0);
        snprintf(hex, sizeof hex, "%s", k ? (const char *)k : "");
        bytes -= sqlite3_column_int64(s, 1);
        sqlite3_reset(s);
        FI_TRY(remove_entry(st, hex));
        (*removed)++;
    }
    rc = 0;
out:
    return rc;
}

static int store_put_once(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                          const fi_object_meta *meta);

/* A put that finds the index damaged under it (a table dropped, a page
 * gone bad since the open) rebuilds it from the objects and tries once
 * more: prewarm's job is to store. */
int fi_store_put(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta)
{
    int rc = store_put_once(st, key, data, size, meta);
    if (rc != FI_ECORRUPT) return rc;
    pthread_mutex_lock(&st->mu);
    rc = db_rebuild(st);
    pthread_mutex_unlock(&st->mu);
    return rc < 0 ? rc : store_put_once(st, key, data, size, meta);
}

static int store_put_once(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                          const fi_object_meta *meta)
{
    int rc = 0, begun = 0, locked = 0, in_tx = 0, removed = 0, renamed = 0;
    char hex[33], path[PATH_MAX_LEN], sub[PATH_MAX_LEN];
    uint8_t header[OBJ_MAX_HEADER];
    fi_object_meta empty = {0};
    fi_atomic_file f;
    size_t hsize;
    uint64_t checksum;

    if (!st || !key || !data) return fi__error(FI_EINVALID, "fi_store_put: NULL argument");
    FI_TRY(check_writable(st, "fi_store_put"));
    if (size == 0 || (uint64_t)size > OBJ_MAX_PAYLOAD)
        FI_FAIL(FI_EINVALID, "fi_store_put: object size %zu out of range", size);
    if (!meta) meta = &empty;
    if (strnlen(meta->spec, sizeof meta->spec) == sizeof meta->spec ||
        strnlen(meta->arch, sizeof meta->arch) == sizeof meta->arch)
        FI_FAIL(FI_EINVALID, "fi_store_put: spec or arch text is not NUL-terminated");
    fi_key_hex(hex, key);
    FI_TRY(object_path(st, path, hex));
    if (snprintf(sub, sizeof sub, "%s/objects/%.2s", st->dir, hex) >= (int)sizeof sub)
        FI_FAIL(FI_EINVALID, "cache path too long under %s", st->dir);
    FI_TRY(ensure_subdir(sub, st->flags, 1));

    checksum = XXH3_64bits(data, size);
    hsize = obj_header_build(header, key, meta, size, checksum);
    FI_TRY(fi__atomic_begin(&f, path));
    begun = 1;
    fi__atomic_write(&f, header, hsize);
    fi__atomic_write(&f, data, size);

    pthread_mutex_lock(&st->mu);
    locked = 1;
    /* The rename happens under the index's write lock so that gc, clear and
     * bad-object removal in other processes never unlink a fresh object. */
    FI_TRY(tx_begin(st));
    in_tx = 1;
    begun = 0;
    FI_TRY(fi__atomic_commit(&f));
    renamed = 1;
    FI_TRY(index_insert(st, hex, meta, (int64_t)(hsize + size), checksum, 0));
    FI_TRY(stat_add1(st, "bytes_written", (int64_t)(hsize + size)));
    if (st->max_bytes > 0) FI_TRY(evict_to(st, st->max_bytes, hex, &removed));
    FI_TRY(tx_commit(st));
    in_tx = 0;
    if (removed)
        fi__log(FI_LOG_INFO, "evicted %d cache entries to stay under %" PRId64 " bytes",
                removed, st->max_bytes);
out:
    if (in_tx) tx_rollback(st);
    /* No row for the object after all: remove it rather than leave an orphan
     * (not through the fault seam: cleanup must not fail). */
    if (rc < 0 && renamed) unlink(path);
    if (locked) pthread_mutex_unlock(&st->mu);
    if (begun) fi__atomic_abort(&f);
    return rc;
}

/* ---- statistics ---------------------------------------------------------------- */

int fi_store_stats_add(fi_store *st, const fi_jit_stats *delta)
{
    int rc = 0, in_tx = 0;
    if (!st || !delta) return fi__error(FI_EINVALID, "fi_store_stats_add: NULL argument");
    if ((rc = check_writable(st, "fi_store_stats_add")) < 0) return rc;
    pthread_mutex_lock(&st->mu);
    FI_TRY(tx_begin(st));
    in_tx = 1;
    for (size_t i = 0; i < STAT_FIELD_COUNT; i++) {
        int64_t v = *(const int64_t *)((const char *)delta + stat_fields[i].offset);
        if (v) FI_TRY(stat_add1(st, stat_fields[i].name, v));
    }
    FI_TRY(tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) tx_rollback(st);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int fi_store_stats_get(fi_store *st, fi_jit_stats *out)
{
    int rc = 0;
    sqlite3_stmt *s;
    if (!st || !out) return fi__error(FI_EINVALID, "fi_store_stats_get: NULL argument");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->mu);
    FI_TRY(sql_prep(st, S_STATS, &s));
    while ((rc = sql_step(st, s, "reading statistics")) == 1) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        for (size_t i = 0; name && i < STAT_FIELD_COUNT; i++)
            if (strcmp(name, stat_fields[i].name) == 0)
                *(int64_t *)((char *)out + stat_fields[i].offset) = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
    if (rc < 0) goto out;
    FI_TRY(sql_prep(st, S_TOTAL, &s));
    FI_TRY(sql_step(st, s, "summing entry sizes"));
    out->entries = sqlite3_column_int64(s, 0);
    out->bytes = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    rc = 0;
out:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int fi_store_stats_zero(fi_store *st)
{
    int rc = 0;
    if (!st) return fi__error(FI_EINVALID, "fi_store_stats_zero: NULL argument");
    if ((rc = check_writable(st, "fi_store_stats_zero")) < 0) return rc;
    pthread_mutex_lock(&st->mu);
    rc = sql_exec_id(st, S_STATS_ZERO, "zeroing statistics");
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* ---- listing ------------------------------------------------------------------- */

int fi_store_foreach(fi_store *st, int (*fn)(void *user, const fi_store_row *row), void *user)
{
    int rc = 0;
    sqlite3_stmt *s;
    fi_store_row *rows = NULL;
    size_t count = 0, cap = 0;
    if (!st || !fn) return fi__error(FI_EINVALID, "fi_store_foreach: NULL argument");
    /* Rows are copied out first so that `fn` runs without the store's mutex
     * and may call back into the store. */
    pthread_mutex_lock(&st->mu);
    if ((rc = sql_prep(st, S_LIST, &s)) < 0) {
        pthread_mutex_unlock(&st->mu);
        goto out;
    }
    while ((rc = sql_step(st, s, "listing entries")) == 1) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            fi_store_row *grown = fi__realloc(rows, ncap * sizeof *rows);
            if (!grown) {
                rc = fi__error(FI_ENOMEM, "out of memory listing the cache");
                break;
            }
            rows = grown;
            cap = ncap;
        }
        fi_store_row *r = &rows[count++];
        memset(r, 0, sizeof *r);
        const char *k = (const char *)sqlite3_column_text(s, 0);
        if (!k || hex_to_key(k, r->key) < 0) memset(r->key, 0, sizeof r->key);
        const char *spec = (const char *)sqlite3_column_text(s, 1);
        const char *arch = (const char *)sqlite3_column_text(s, 2);
        snprintf(r->meta.spec, sizeof r->meta.spec, "%s", spec ? spec : "");
        snprintf(r->meta.arch, sizeof r->meta.arch, "%s", arch ? arch : "");
        r->size = sqlite3_column_int64(s, 3);
        r->created = sqlite3_column_int64(s, 4);
        r->last_used = sqlite3_column_int64(s, 5);
        r->hits = sqlite3_column_int64(s, 6);
        r->meta.registers = sqlite3_column_int(s, 7);
        r->meta.spill_bytes = sqlite3_column_int(s, 8);
        r->meta.compile_ns = sqlite3_column_int64(s, 9);
    }
    sqlite3_reset(s);
    pthread_mutex_unlock(&st->mu);
    if (rc < 0) goto out;
    rc = 0;
    for (size_t i = 0; i < count; i++)
        if (fn(user, &rows[i])) break;
out:
    fi__free(rows);
    return rc;
}

/* ---- verify ------------------------------------------------------------------- */

typedef struct verify_ctx {
    fi_store *st;
    int repair;
    int problems;
    void (*report)(void *user, const char *problem);
    void *user;
} verify_ctx;

static void vsay(verify_ctx *v, int problem, const char *fmt, va_list ap)
{
    char msg[1024];
    int n = problem ? 0 : snprintf(msg, sizeof msg, "note: ");
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    v->problems += problem;
    if (v->report) v->report(v->user, msg);
}

/* A problem: counted, so verify fails until it is repaired. */
static void vreport(verify_ctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vreport(verify_ctx *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(v, 1, fmt, ap);
    va_end(ap);
}

/* What normal interruptions leave behind and every path already copes with
 * (a killed writer's temp, a row whose object an interrupted gc removed):
 * said, not counted. */
static void vnote(verify_ctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vnote(verify_ctx *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(v, 0, fmt, ap);
    va_end(ap);
}

/* Check every row's object. Under the mutex. */
static int verify_rows(verify_ctx *v)
{
    int rc = 0;
    fi_store *st = v->st;
    sqlite3_stmt *s;
    char (*keys)[33] = NULL;
    int64_t *sizes = NULL;
    size_t count = 0, cap = 0;
    char path[PATH_MAX_LEN], why[256];
    FI_TRY(sql_prep(st, S_KEYS, &s));
    while ((rc = sql_step(st, s, "listing entries")) == 1) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char(*k2)[33] = fi__realloc(keys, ncap * sizeof *keys);
            if (k2) keys = k2;
            int64_t *s2 = k2 ? fi__realloc(sizes, ncap * sizeof *sizes) : NULL;
            if (s2) sizes = s2;
            if (!k2 || !s2) {
                sqlite3_reset(s);
                FI_FAIL(FI_ENOMEM, "out of memory verifying the cache");
            }
            cap = ncap;
        }
        const char *k = (const char *)sqlite3_column_text(s, 0);
        snprintf(keys[count], 33, "%s", k ? k : "");
        sizes[count++] = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
    if (rc < 0) goto out;
    for (size_t i = 0; i < count; i++) {
        uint8_t key[16];
        obj_info info;
        if (hex_to_key(keys[i], key) < 0) {
            vreport(v, "index row with malformed key \"%s\"", keys[i]);
            if (v->repair) FI_TRY(delete_row(st, keys[i], "removing a malformed row"));
            continue;
        }
        FI_TRY(object_path(st, path, keys[i]));
        if (!subdir_plain(path)) {
            /* Serving refuses to read through it, so verify does too; the
             * folder itself is removed by verify_objects, in the same run. */
            vreport(v, "entry %s: the folder of %s is a symbolic link or not a directory", keys[i],
                    path);
            if (v->repair) FI_TRY(delete_row(st, keys[i], "removing an unreadable entry"));
            continue;
        }
        FI_TRY(obj_read(path, key, NULL, NULL, &info, why, sizeof why));
        if (rc == OBJ_MISSING) {
            vnote(v, "entry %s: object file %s is missing (as an interrupted gc leaves it); %s",
                  keys[i], path, v->repair ? "removed the row" : "its row goes on its next use");
            if (v->repair) FI_TRY(drop_bad(st, keys[i], NULL));
        } else if (rc == OBJ_BAD) {
            vreport(v, "entry %s: object file %s %s", keys[i], path, why);
            if (v->repair) FI_TRY(drop_bad(st, keys[i], &info));
        } else if (info.file_size != sizes[i]) {
            vreport(v, "entry %s: index says %" PRId64 " bytes, object has %" PRId64, keys[i],
                    sizes[i], info.file_size);
            if (v->repair)
                FI_TRY(index_insert(st, keys[i], &info.meta, info.file_size, info.checksum, 0));
        }
    }
    rc = 0;
out:
    fi__free(keys);
    fi__free(sizes);
    return rc;
}

/* Check one file found under objects/<sub>/. */
static int verify_file(verify_ctx *v, const char *sub, const char *name, const char *path)
{
    int rc = 0;
    fi_store *st = v->st;
    struct stat sb;
    char hex[33], why[256];
    uint8_t key[16];
    obj_info info;
    size_t len = strlen(name);
    if (fi__lstat(path, &sb) < 0) return 0; /* gone meanwhile */
    if (is_temp_name(name) && !S_ISDIR(sb.st_mode)) {
        if (sb.st_mtime >= time(NULL) - TEMP_MAX_AGE_S &&
            (sb.st_mtime >= time(NULL) - TEMP_DEAD_WRITER_AGE_S || !temp_writer_dead(name)))
            return 0; /* a writer at work */
        /* A killed writer's leftover: never renamed into place, so no harm
         * done; the sweeps of gc and open remove it too. */
        if (v->repair && fi__unlink(path) < 0 && errno != ENOENT)
            vreport(v, "cannot remove leftover temp file %s: %s", path, strerror(errno));
        else
            vnote(v, "leftover temp file %s of a writer that is gone%s", path,
                  v->repair ? ": removed" : "");
        return 0;
    }
    int named = len == 35 && strcmp(name + 32, ".fo") == 0;
    if (named) {
        memcpy(hex, name, 32);
        hex[32] = '\0';
        named = hex_to_key(hex, key) == 0 && memcmp(hex, sub, 2) == 0;
        if (named) FI_TRY(row_exists(st, hex, NULL));
        if (rc == 1) return 0; /* checked with the rows */
    }
    if (S_ISDIR(sb.st_mode) || len != 35 || strcmp(name + 32, ".fo") != 0) {
        vreport(v, "unexpected %s %s in the objects folder", S_ISDIR(sb.st_mode) ? "folder" : "file",
                path);
        if (v->repair) (void)remove_any(path);
        return 0;
    }
    if (!named) {
        vreport(v, "misnamed object file %s", path);
        if (v->repair) (void)fi__unlink(path);
        return 0;
    }
    FI_TRY(obj_read(path, key, NULL, NULL, &info, why, sizeof why));
    if (rc == OBJ_MISSING) return 0;
    if (rc == OBJ_BAD) {
        vreport(v, "unindexed object file %s %s", path, why);
        if (v->repair) {
            (void)fi__unlink(path);
            FI_TRY(stat_add1(st, "corrupt", 1));
        }
        return 0;
    }
    vreport(v, "object file %s is not in the index", path);
    if (v->repair) FI_TRY(index_insert(st, hex, &info.meta, info.file_size, info.checksum, 0));
    rc = 0;
out:
    return rc;
}

static int verify_objects(verify_ctx *v)
{
    int rc = 0;
    char objects[PATH_MAX_LEN], sub[PATH_MAX_LEN], path[PATH_MAX_LEN];
    DIR *d = NULL, *sd = NULL;
    struct dirent *e, *f;
    FI_TRY(join_path(objects, v->st->dir, "objects"));
    if (!(d = opendir(objects)))
        FI_FAIL(FI_EIO, "cannot list %s: %s", objects, strerror(errno));
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        FI_TRY(join_path(sub, objects, e->d_name));
        struct stat sb;
        if (lstat(sub, &sb) < 0) continue;
        if (strlen(e->d_name) != 2 || hex_digit(e->d_name[0]) < 0 || hex_digit(e->d_name[1]) < 0 ||
            !S_ISDIR(sb.st_mode)) {
            vreport(v, "unexpected entry %s in the objects folder", sub);
            if (v->repair) (void)remove_any(sub);
            continue;
        }
        if (!(sd = opendir(sub))) continue;
        while ((f = readdir(sd))) {
            if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
            FI_TRY(join_path(path, sub, f->d_name));
            FI_TRY(verify_file(v, e->d_name, f->d_name, path));
        }
        closedir(sd);
        sd = NULL;
    }
out:
    if (sd) closedir(sd);
    if (d) closedir(d);
    return rc;
}

int fi_store_verify(fi_store *st, int repair, void (*report)(void *user, const char *problem),
                    void *user)
{
    int rc = 0;
    verify_ctx v = {st, repair, 0, report, user};
    char damage[1024];
    if (!st) return fi__error(FI_EINVALID, "fi_store_verify: NULL argument");
    if (repair) FI_TRY(check_writable(st, "fi_store_verify --repair"));
    /* Verify is a maintenance command: it holds the mutex throughout, and the
     * report callback must not call back into this store. */
    pthread_mutex_lock(&st->mu);
    for (int pass = 0;; pass++) {
        if (!st->db) { /* an earlier rebuild failed */
            if (!repair) {
                rc = fi__error(FI_EIO, "cache index %s is not open", st->index_path);
                break;
            }
            if ((rc = db_rebuild(st)) < 0) break;
        }
        if ((rc = index_damaged(st, damage, sizeof damage)) < 0) break;
        if (rc == 0) {
            if ((rc = verify_rows(&v)) >= 0) rc = verify_objects(&v);
            if (rc != FI_ECORRUPT) break;
            /* A statement found damage that the check missed. */
            snprintf(damage, sizeof damage, "%s", fi_last_error());
        }
        vreport(&v, "index %s is damaged: %s", st->index_path, damage);
        rc = 0;
        if (!repair || pass > 0) break; /* rows cannot be trusted; stop here */
        /* Rebuild, then re-index every object from its header. */
        if ((rc = db_rebuild(st)) < 0) break;
    }
    if (rc >= 0) rc = v.problems;
    pthread_mutex_unlock(&st->mu);
out:
    return rc;
}

/* ---- clear / gc ----------------------------------------------------------------- */

int fi_store_clear(fi_store *st)
{
    int rc = 0, in_tx = 0, first_err = 0;
    char objects[PATH_MAX_LEN], sub[PATH_MAX_LEN], path[PATH_MAX_LEN];
    DIR *d = NULL, *sd = NULL;
    struct dirent *e, *f;
    if (!st) return fi__error(FI_EINVALID, "fi_store_clear: NULL argument");
    FI_TRY(check_writable(st, "fi_store_clear"));
    FI_TRY(join_path(objects, st->dir, "objects"));
    pthread_mutex_lock(&st->mu);
    if ((rc = tx_begin(st)) < 0) goto unlock;
    in_tx = 1;
    /* Every object file goes, indexed or not; temps of running writers stay. */
    if ((d = opendir(objects))) {
        while ((e = readdir(d))) {
            if (strlen(e->d_name) != 2 || join_path(sub, objects, e->d_name) < 0) continue;
            if (!(sd = opendir(sub))) continue;
            while ((f = readdir(sd))) {
                size_t n = strlen(f->d_name);
                if (n < 4 || strcmp(f->d_name + n - 3, ".fo") != 0) continue;
                if (join_path(path, sub, f->d_name) < 0) continue;
                if (fi__unlink(path) < 0 && errno != ENOENT && !first_err)
                    first_err = fi__error(FI_EIO, "cannot remove %s: %s", path, strerror(errno));
            }
            closedir(sd);
            sd = NULL;
        }
        closedir(d);
        d = NULL;
    }
    if ((rc = sql_exec_id(st, S_CLEAR, "removing all entries")) < 0) goto unlock;
    if ((rc = tx_commit(st)) < 0) goto unlock;
    in_tx = 0;
    rc = first_err;
unlock:
    if (in_tx) tx_rollback(st);
    pthread_mutex_unlock(&st->mu);
out:
    return rc;
}

/* Remove lock files nobody holds, following lock_file's protocol (lock, then
 * unlink while holding it) so a waiter on the old inode retries. */
static void clean_locks(fi_store *st)
{
    char locks[PATH_MAX_LEN], path[PATH_MAX_LEN];
    DIR *d;
    struct dirent *e;
    if (join_path(locks, st->dir, "locks") < 0 || !(d = opendir(locks))) return;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        int fd = -1;
        if (n < 6 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
        if (join_path(path, locks, e->d_name) < 0) continue;
        if (lock_file(path, 1, &fd) == 0) {
            (void)fi__unlink(path);
            fi__close(fd);
        }
    }
    closedir(d);
}

int fi_store_gc(fi_store *st, int64_t max_bytes, int64_t older_than)
{
    int rc = 0, in_tx = 0, removed = 0;
    char hex[33];
    sqlite3_stmt *s;
    if (!st) return fi__error(FI_EINVALID, "fi_store_gc: NULL argument");
    FI_TRY(check_writable(st, "fi_store_gc"));
    pthread_mutex_lock(&st->mu);
    if ((rc = tx_begin(st)) < 0) goto unlock;
    in_tx = 1;
    if (older_than > 0 &&
        ((rc = sql_prep(st, S_CLAMP, &s)) < 0 || (rc = bind_i64(st, s, 1, (int64_t)time(NULL))) < 0 ||
         (rc = sql_run(st, s, "clamping future use times")) < 0))
        goto unlock;
    while (older_than > 0) {
        if ((rc = sql_prep(st, S_OLDER, &s)) < 0 || (rc = bind_i64(st, s, 1, older_than)) < 0 ||
            (rc = sql_step(st, s, "finding old entries")) < 0)
            goto unlock;
        if (rc == 0) break;
        const char *k = (const char *)sqlite3_column_text(s, 0);
        snprintf(hex, sizeof hex, "%s", k ? k : "");
        sqlite3_reset(s);
        if ((rc = remove_entry(st, hex)) < 0) goto unlock;
        removed++;
    }
    if (max_bytes >= 0 && (rc = evict_to(st, max_bytes, NULL, &removed)) < 0) goto unlock;
    if ((rc = tx_commit(st)) < 0) goto unlock;
    in_tx = 0;
    rc = removed;
unlock:
    if (in_tx) tx_rollback(st);
    pthread_mutex_unlock(&st->mu);
    if (rc >= 0) {
        clean_temps(st, TEMP_MAX_AGE_S);
        clean_locks(st);
    }
out:
    return rc;
}
