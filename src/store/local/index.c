/*
 * The local tier's index (see local.h), a leaf that touches no object file:
 * its SQL statements, the helpers that run them, opening, checking and
 * rebuilding index.sqlite, the rows that describe objects, the choice of the
 * least recently used entry to evict, statistics and listing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/embedded.h"
#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"

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

/* Counters by their row name in `stats`: every counter of fi_jit_stats.
 * `entries` and `bytes` are never rows (a context never counts them; they
 * are read from `entries`, after the rows). */
static const struct {
    const char *name;
    size_t offset;
} stat_fields[] = {
#define STAT_FIELD(name, unit, label) {#name, offsetof(fi_jit_stats, name)},
    FI_JIT_STATS_COUNTERS(STAT_FIELD)
#undef STAT_FIELD
};
#define STAT_FIELD_COUNT (sizeof stat_fields / sizeof stat_fields[0])

/* ---- SQLite helpers --------------------------------------------------------- */

/* Wall-clock time of a row's last use, in nanoseconds. */
static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}


/* Whether a failed SQLite call ran out of space. SQLite reports a full disk
 * as SQLITE_FULL only for its own files' writes; growing index.sqlite-shm
 * fails as a plain "disk I/O error", so ask the filesystem too. */
static int disk_full(const fi_local *st, int src)
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
static int index_broken(fi_local *st, int src)
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

static int sql_error(fi_local *st, int src, const char *what)
{
    int code = index_broken(st, src) ? FI_ECORRUPT : FI_EIO;
    const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(src);
    if ((src & 0xff) == SQLITE_BUSY)
        msg = "the index stayed locked by another process for longer than the busy timeout";
    st->last_sql_error = src & 0xff;
    return fi__error(code, "cache index %s: %s: %s%s", st->index_path, what, msg,
                     code == FI_EIO && disk_full(st, src) ? " (the disk is full)" : "");
}

static int db_init(fi_local *st);

/* The index was closed by a failure to open or rebuild it (another process
 * rebuilding it, a transient I/O error): open it again, rebuilding it if it
 * is broken, so that one failure does not stop a long run storing. Said
 * when it works, so that the log explains the failures before it. */
static int db_reopen(fi_local *st)
{
    char first[1024];
    int rc = db_init(st);
    if (rc == FI_ECORRUPT && !(st->flags & FI_STORE_READ_ONLY)) rc = fi__local_db_rebuild(st);
    if (rc < 0) {
        snprintf(first, sizeof first, "%s", fi_last_error());
        return fi__error(rc, "cache index %s is closed after an earlier failure, and opening it "
                         "again failed: %s", st->index_path, first);
    }
    fi__log(FI_LOG_INFO, "cache index %s opened again after an earlier failure", st->index_path);
    return 0;
}

/* A cached, reset statement ready for binding. */
int fi__local_sql_prep(fi_local *st, enum stmt_id id, sqlite3_stmt **out)
{
    int rc;
    if (!st->db && (rc = db_reopen(st)) < 0) return rc;
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
int fi__local_sql_step(fi_local *st, sqlite3_stmt *s, const char *what)
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
int fi__local_sql_run(fi_local *st, sqlite3_stmt *s, const char *what)
{
    int rc;
    while ((rc = fi__local_sql_step(st, s, what)) == 1) {
    }
    sqlite3_reset(s);
    return rc;
}

int fi__local_sql_exec_id(fi_local *st, enum stmt_id id, const char *what)
{
    int rc;
    sqlite3_stmt *s;
    if ((rc = fi__local_sql_prep(st, id, &s)) < 0) return rc;
    return fi__local_sql_run(st, s, what);
}

int fi__local_tx_begin(fi_local *st) { return fi__local_sql_exec_id(st, S_BEGIN, "starting a write transaction"); }
int fi__local_tx_commit(fi_local *st) { return fi__local_sql_exec_id(st, S_COMMIT, "committing"); }
void fi__local_tx_rollback(fi_local *st)
{
    /* Not through the fault seam: cleanup must not fail. */
    if (!st->db || sqlite3_get_autocommit(st->db)) return;
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

int fi__local_bind_text(fi_local *st, sqlite3_stmt *s, int i, const char *text)
{
    int src = sqlite3_bind_text(s, i, text, -1, SQLITE_TRANSIENT);
    return src == SQLITE_OK ? 0 : sql_error(st, src, "binding a value");
}

int fi__local_bind_i64(fi_local *st, sqlite3_stmt *s, int i, int64_t v)
{
    int src = sqlite3_bind_int64(s, i, v);
    return src == SQLITE_OK ? 0 : sql_error(st, src, "binding a value");
}

int fi__local_stat_add1(fi_local *st, const char *name, int64_t value)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_STAT_ADD, &s));
    FI_TRY(fi__local_bind_text(st, s, 1, name));
    FI_TRY(fi__local_bind_i64(st, s, 2, value));
    FI_TRY(fi__local_sql_run(st, s, "updating statistics"));
out:
    return rc;
}

/* Size of the entry's row, 0 when it has none (negative: error). */
int fi__local_row_exists(fi_local *st, const char *hex, int64_t *size)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_EXISTS, &s));
    FI_TRY(fi__local_bind_text(st, s, 1, hex));
    FI_TRY(fi__local_sql_step(st, s, "looking up an entry"));
    if (rc == 1 && size) *size = sqlite3_column_int64(s, 0);
out:
    if (rc >= 0) sqlite3_reset(s);
    return rc;
}

/* ---- opening the index ----------------------------------------------------- */

void fi__local_db_close(fi_local *st)
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
static int pragma_int(fi_local *st, const char *sql, int64_t *out)
{
    int rc = 0;
    sqlite3_stmt *s = NULL;
    int src = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (src != SQLITE_OK) {
        rc = sql_error(st, src, sql);
        goto out;
    }
    FI_TRY(fi__local_sql_step(st, s, sql));
    *out = rc == 1 ? sqlite3_column_int64(s, 0) : -1;
    rc = 0;
out:
    sqlite3_finalize(s);
    return rc;
}

/* Switch the index to WAL. The switch needs an exclusive lock, and SQLite
 * answers SQLITE_BUSY at once, without its busy handler, when another
 * process is doing the same on a fresh index; so retry up to the timeout. */
static int set_wal(fi_local *st)
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
static int db_schema(fi_local *st)
{
    int rc = 0, in_tx = 0;
    int64_t version = 0;
    char *err = NULL;
    FI_TRY(fi__local_tx_begin(st));
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
                    "internal: src/store/local/schema.sql sets user_version %" PRId64 " but src/store/local/index.c expects %d",
                    version, FI_SCHEMA_VERSION);
    }
    FI_TRY(fi__local_tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) fi__local_tx_rollback(st);
    sqlite3_free(err);
    return rc;
}

/* How db_init_as opens the index. */
enum { DB_WRITE, DB_READ, DB_IMMUTABLE };

/* The index as a "file:" URI with `query`; '%', '?' and '#' in the path are
 * escaped, the rest is taken as it is. */
static int index_uri(const fi_local *st, const char *query, char *out, size_t size)
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
static int db_init_as(fi_local *st, int how)
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
        /* A shared cache's index gets its modes (SQLite gives its -wal and
         * -shm the index's): made here, empty, since SQLite would make it 0644. */
        if (fi__cache_umask() >= 0)
            fi__close(fi__open(st->index_path, O_RDONLY | O_CREAT | O_NOFOLLOW, 0600));
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
    if (rc < 0) fi__local_db_close(st);
    return rc;
}

/* Read-only, a WAL index needs index.sqlite-shm, which a read-only directory
 * or a full disk cannot provide unless it is there already. Then the index
 * is opened immutable=1: no locks and no -shm, and changes still in
 * index.sqlite-wal are not seen. The last writer to close a cache
 * checkpoints them into index.sqlite and removes the -wal, so a cache copied
 * (into an image) after its writers closed has none; and objects are read
 * by key, without the index, so hits never depend on it. */
static int db_init(fi_local *st)
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
int fi__local_index_damaged(fi_local *st, char *why, size_t why_size)
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
int fi__local_db_rebuild(fi_local *st)
{
    int rc = 0, fd = -1;
    char lock_path[PATH_MAX_LEN], aside[PATH_MAX_LEN + 16], side[PATH_MAX_LEN + 16], why[256];
    fi__local_db_close(st);
    FI_TRY(fi__join_path(lock_path, st->dir, "locks/index.lock"));
    FI_TRY(fi__local_lock_file_wait(lock_path, st->lock_timeout_ms, &fd));
    if (rc == 1)
        FI_FAIL(FI_EIO, "cache index %s is broken and another process has held %s for over %"
                PRId64 " ms while rebuilding it", st->index_path, lock_path, st->lock_timeout_ms);
    if ((rc = db_init(st)) != FI_ECORRUPT) {
        /* Opens: another process fixed it already, unless the whole file
         * still fails a full check (a damaged page that opening skips). */
        if (rc < 0 || (rc = fi__local_index_damaged(st, why, sizeof why)) <= 0) goto out;
        fi__local_db_close(st);
    }
    snprintf(aside, sizeof aside, "%s.corrupt", st->index_path);
    if (fi__rename(st->index_path, aside) < 0 && errno != ENOENT) {
        /* An older copy in the way (a folder cannot replace a file, nor a
         * file a folder): the newer one is the one worth keeping. */
        if (fi__remove_any(aside) < 0 || (fi__rename(st->index_path, aside) < 0 && errno != ENOENT))
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
    FI_TRY(fi__local_stat_add1(st, "corrupt", 1));
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
static int check_sidecars(fi_local *st, int fix)
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
void fi__local_say_read_only(const fi_local *st, const char *why)
{
    fi__log(FI_LOG_WARN, "cache %s opened read-only (%s): serving the kernels it holds, storing "
            "none", st->dir, why);
}

int fi__local_db_open(fi_local *st)
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
        if (rc == FI_ECORRUPT) rc = fi__local_db_rebuild(st);
        if (rc != FI_EIO || !(st->flags & FI_STORE_READ_ONLY_FALLBACK)) return rc;
        /* Not writable after all (a full disk, a -shm we may not write):
         * reading may still work. */
        snprintf(why, sizeof why, "%s", fi_last_error());
        st->flags |= FI_STORE_READ_ONLY;
        if ((rc = db_init(st)) < 0) {
            st->flags &= ~(unsigned)FI_STORE_READ_ONLY;
            return fi__error(FI_EIO, "%s", why);
        }
        fi__local_say_read_only(st, why);
        return 0;
    }
    return (rc = check_sidecars(st, 0)) < 0 ? rc : db_init(st);
}

/* ---- the index's path -------------------------------------------------------- */

/* SQLite's NOFOLLOW refuses a link in any component of the index's path, and
 * links above the cache are fine (~/.cache on another disk); so the index is
 * named through the resolved dir, and NOFOLLOW then refuses only a link at
 * index.sqlite itself (later swapped in). SQLite's unix VFS also caps a path
 * at mxPathname bytes (512), the longest suffix it adds ("-journal")
 * included, and fails deep inside with "unable to open database file":
 * check that here (a dir of 491 bytes is the longest that works). */
int fi__local_resolve_index_path(fi_local *st)
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
    return fi__join_path(st->index_path, real, "index.sqlite");
}

/* ---- rows ------------------------------------------------------------------- */

/* Delete an entry's row (inside the caller's transaction). */
int fi__local_delete_row(fi_local *st, const char *hex, const char *what)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_DELETE, &s));
    FI_TRY(fi__local_bind_text(st, s, 1, hex));
    FI_TRY(fi__local_sql_run(st, s, what));
out:
    return rc;
}

/* Insert the row for an object from its header (put, and re-indexing). */
int fi__local_index_insert(fi_local *st, const char *hex, const fi_object_meta *meta,
                        int64_t file_size, uint64_t checksum, int64_t hits)
{
    int rc = 0;
    sqlite3_stmt *s;
    int64_t ns = wall_ns();
    FI_TRY(fi__local_sql_prep(st, S_INSERT, &s));
    FI_TRY(fi__local_bind_text(st, s, 1, hex));
    FI_TRY(fi__local_bind_text(st, s, 2, meta->spec));
    FI_TRY(fi__local_bind_text(st, s, 3, meta->arch));
    FI_TRY(fi__local_bind_i64(st, s, 4, file_size));
    /* SQLite integers are signed 64-bit; the checksum is stored bit for bit. */
    FI_TRY(fi__local_bind_i64(st, s, 5, (int64_t)checksum));
    FI_TRY(fi__local_bind_i64(st, s, 6, ns / 1000000000));
    FI_TRY(fi__local_bind_i64(st, s, 7, ns));
    FI_TRY(fi__local_bind_i64(st, s, 8, hits));
    FI_TRY(fi__local_bind_i64(st, s, 9, meta->registers));
    FI_TRY(fi__local_bind_i64(st, s, 10, meta->spill_bytes));
    FI_TRY(fi__local_bind_i64(st, s, 11, meta->compile_ns));
    FI_TRY(fi__local_sql_run(st, s, "recording an entry"));
out:
    return rc;
}

/* Record a hit on `hex`'s row. 1 when it was updated, 0 when there is no
 * row (the caller re-indexes the object), or an error code. */
int fi__local_index_touch(fi_local *st, const char *hex)
{
    int rc = 0;
    sqlite3_stmt *s;
    int64_t ns = wall_ns();
    FI_TRY(fi__local_sql_prep(st, S_TOUCH, &s));
    FI_TRY(fi__local_bind_i64(st, s, 1, ns / 1000000000));
    FI_TRY(fi__local_bind_i64(st, s, 2, ns));
    FI_TRY(fi__local_bind_text(st, s, 3, hex));
    FI_TRY(fi__local_sql_run(st, s, "recording a hit"));
    rc = sqlite3_changes(st->db) != 0;
out:
    return rc;
}

/* The total size of the entries, in `bytes`. */
int fi__local_index_total(fi_local *st, int64_t *bytes)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_TOTAL, &s));
    FI_TRY(fi__local_sql_step(st, s, "summing entry sizes"));
    *bytes = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    rc = 0;
out:
    return rc;
}

/* The least recently used entry other than `keep` (NULL: none), for
 * eviction: 1 with its key in `hex` and its size in `size`, 0 when only
 * `keep` is left. The caller deletes the entry; this deletes nothing. */
int fi__local_index_oldest(fi_local *st, const char *keep, char hex[33], int64_t *size)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_OLDEST, &s));
    FI_TRY(fi__local_bind_text(st, s, 1, keep ? keep : ""));
    FI_TRY(fi__local_sql_step(st, s, "finding the least recently used entry"));
    if (rc == 0) goto out;
    const unsigned char *k = sqlite3_column_text(s, 0);
    snprintf(hex, 33, "%s", k ? (const char *)k : "");
    *size = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
out:
    return rc;
}

/* Every row's key and size, copied out so that rows can be changed while
 * walking them. Under the mutex; `*keys` and `*sizes` freed by the caller. */
int fi__local_index_keys(fi_local *st, char (**keys)[33], int64_t **sizes, size_t *count)
{
    int rc = 0;
    sqlite3_stmt *s;
    size_t cap = 0;
    *keys = NULL;
    *sizes = NULL;
    *count = 0;
    FI_TRY(fi__local_sql_prep(st, S_KEYS, &s));
    while ((rc = fi__local_sql_step(st, s, "listing entries")) == 1) {
        if (*count == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char(*k2)[33] = fi__realloc(*keys, ncap * sizeof **keys);
            if (k2) *keys = k2;
            int64_t *s2 = k2 ? fi__realloc(*sizes, ncap * sizeof **sizes) : NULL;
            if (s2) *sizes = s2;
            if (!k2 || !s2) {
                sqlite3_reset(s);
                FI_FAIL(FI_ENOMEM, "out of memory listing the cache's entries");
            }
            cap = ncap;
        }
        const char *k = (const char *)sqlite3_column_text(s, 0);
        snprintf((*keys)[*count], 33, "%s", k ? k : "");
        (*sizes)[(*count)++] = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
out:
    return rc < 0 ? rc : 0;
}

/* Delete every row (clear; inside the caller's transaction). */
int fi__local_index_clear(fi_local *st)
{
    return fi__local_sql_exec_id(st, S_CLEAR, "removing all entries");
}

/* Bring use times later than `now` back to `now`, so that a clock set back
 * does not keep entries from gc's age limit. */
int fi__local_index_clamp_used(fi_local *st, int64_t now)
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_CLAMP, &s));
    FI_TRY(fi__local_bind_i64(st, s, 1, now));
    FI_TRY(fi__local_sql_run(st, s, "clamping future use times"));
out:
    return rc;
}

/* An entry last used before `older_than`, for gc: 1 with its key in `hex`,
 * 0 when there is none. The caller deletes it; this deletes nothing. */
int fi__local_index_older(fi_local *st, int64_t older_than, char hex[33])
{
    int rc = 0;
    sqlite3_stmt *s;
    FI_TRY(fi__local_sql_prep(st, S_OLDER, &s));
    FI_TRY(fi__local_bind_i64(st, s, 1, older_than));
    FI_TRY(fi__local_sql_step(st, s, "finding old entries"));
    if (rc == 0) goto out;
    const char *k = (const char *)sqlite3_column_text(s, 0);
    snprintf(hex, 33, "%s", k ? k : "");
    sqlite3_reset(s);
out:
    return rc;
}

/* ---- statistics ---------------------------------------------------------------- */

static int stats_add_once(fi_local *st, const fi_jit_stats *delta,
                          const fi_local_remote_stats *remotes, size_t remote_count);

/* On a full disk SQLite's log cannot grow, but once checkpointed it is
 * written again from its start, in blocks it has: so a save that fails for
 * want of space checkpoints and tries once more, and counts made after the
 * disk filled are kept (the caller keeps them for later only in memory). */
int fi_local_stats_add(fi_local *st, const fi_jit_stats *delta,
                       const fi_local_remote_stats *remotes, size_t remote_count)
{
    int rc = 0;
    if (!st || !delta || (remote_count && !remotes))
        return fi__error(FI_EINVALID, "fi_store_stats_add: NULL argument");
    if ((rc = fi__local_check_writable(st, "fi_store_stats_add")) < 0) return rc;
    pthread_mutex_lock(&st->mu);
    rc = stats_add_once(st, delta, remotes, remote_count);
    if (rc == FI_EIO && st->db && disk_full(st, st->last_sql_error)) {
        char first[1024];
        snprintf(first, sizeof first, "%s", fi_last_error());
        sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_RESTART, NULL, NULL);
        if ((rc = stats_add_once(st, delta, remotes, remote_count)) < 0)
            rc = fi__error(rc, "%s", first);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static int is_remote_counter(const char *name) { return strncmp(name, "remote_", 7) == 0; }

/* The counters of `delta` (with `remote`: its remote_* ones only, under
 * "<counter>@<remote>"). Inside a transaction. */
static int stats_add_rows(fi_local *st, const fi_jit_stats *delta, const char *remote)
{
    int rc = 0;
    char name[640];
    for (size_t i = 0; i < STAT_FIELD_COUNT; i++) {
        int64_t v = *(const int64_t *)((const char *)delta + stat_fields[i].offset);
        if (!v || (remote && !is_remote_counter(stat_fields[i].name))) continue;
        if (remote) snprintf(name, sizeof name, "%s@%s", stat_fields[i].name, remote);
        FI_TRY(fi__local_stat_add1(st, remote ? name : stat_fields[i].name, v));
    }
out:
    return rc;
}

/* One transaction adding `delta` and each remote's counts. Under the mutex. */
static int stats_add_once(fi_local *st, const fi_jit_stats *delta,
                          const fi_local_remote_stats *remotes, size_t remote_count)
{
    int rc = 0, in_tx = 0;
    FI_TRY(fi__local_tx_begin(st));
    in_tx = 1;
    FI_TRY(stats_add_rows(st, delta, NULL));
    for (size_t r = 0; r < remote_count; r++)
        FI_TRY(stats_add_rows(st, &remotes[r].counts, remotes[r].remote));
    FI_TRY(fi__local_tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) fi__local_tx_rollback(st);
    return rc;
}

int fi_local_stats_get(fi_local *st, fi_jit_stats *out)
{
    int rc = 0;
    sqlite3_stmt *s;
    if (!st || !out) return fi__error(FI_EINVALID, "fi_store_stats_get: NULL argument");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->mu);
    FI_TRY(fi__local_sql_prep(st, S_STATS, &s));
    while ((rc = fi__local_sql_step(st, s, "reading statistics")) == 1) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        for (size_t i = 0; name && i < STAT_FIELD_COUNT; i++)
            if (strcmp(name, stat_fields[i].name) == 0)
                *(int64_t *)((char *)out + stat_fields[i].offset) = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
    if (rc < 0) goto out;
    FI_TRY(fi__local_sql_prep(st, S_TOTAL, &s));
    FI_TRY(fi__local_sql_step(st, s, "summing entry sizes"));
    out->entries = sqlite3_column_int64(s, 0);
    out->bytes = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    rc = 0;
out:
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* The remote named by a row "<counter>@<remote>" in `list` (found or
 * added); NULL when out of memory. */
typedef struct remote_rows {
    fi_local_remote_stats *rows;
    size_t count, cap;
} remote_rows;

static fi_local_remote_stats *remote_row(remote_rows *list, const char *remote)
{
    for (size_t i = 0; i < list->count; i++)
        if (strcmp(list->rows[i].remote, remote) == 0) return &list->rows[i];
    if (list->count == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 8;
        fi_local_remote_stats *grown = fi__realloc(list->rows, cap * sizeof *grown);
        if (!grown) return NULL;
        list->rows = grown;
        list->cap = cap;
    }
    fi_local_remote_stats *row = &list->rows[list->count++];
    memset(row, 0, sizeof *row);
    snprintf(row->remote, sizeof row->remote, "%s", remote);
    return row;
}

static int by_remote(const void *a, const void *b)
{
    return strcmp(((const fi_local_remote_stats *)a)->remote,
                  ((const fi_local_remote_stats *)b)->remote);
}

int fi_local_remote_stats_foreach(fi_local *st,
                                  int (*fn)(void *user, const fi_local_remote_stats *r),
                                  void *user)
{
    int rc = 0;
    sqlite3_stmt *s;
    remote_rows list = {0};
    if (!st || !fn) return fi__error(FI_EINVALID, "fi_store_remote_stats_foreach: NULL argument");
    /* Rows are gathered first so that `fn` runs without the store's mutex. */
    pthread_mutex_lock(&st->mu);
    if ((rc = fi__local_sql_prep(st, S_STATS, &s)) < 0) {
        pthread_mutex_unlock(&st->mu);
        goto out;
    }
    while ((rc = fi__local_sql_step(st, s, "reading statistics")) == 1) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        const char *at = name ? strchr(name, '@') : NULL;
        if (!at || !is_remote_counter(name)) continue;
        for (size_t i = 0; i < STAT_FIELD_COUNT; i++) {
            if (strlen(stat_fields[i].name) != (size_t)(at - name) ||
                strncmp(name, stat_fields[i].name, (size_t)(at - name)) != 0)
                continue;
            fi_local_remote_stats *row = remote_row(&list, at + 1);
            if (!row) {
                rc = fi__error(FI_ENOMEM, "out of memory reading statistics");
                break;
            }
            *(int64_t *)((char *)&row->counts + stat_fields[i].offset) = sqlite3_column_int64(s, 1);
        }
        if (rc < 0) break;
    }
    sqlite3_reset(s);
    pthread_mutex_unlock(&st->mu);
    if (rc < 0) goto out;
    rc = 0;
    if (list.count > 1) /* qsort's pointer must not be NULL, even for no rows */
        qsort(list.rows, list.count, sizeof *list.rows, by_remote);
    for (size_t i = 0; i < list.count; i++)
        if (fn(user, &list.rows[i])) break; /* the caller has seen enough */
out:
    fi__free(list.rows);
    return rc;
}

int fi_local_stats_zero(fi_local *st)
{
    int rc = 0;
    if (!st) return fi__error(FI_EINVALID, "fi_store_stats_zero: NULL argument");
    if ((rc = fi__local_check_writable(st, "fi_store_stats_zero")) < 0) return rc;
    pthread_mutex_lock(&st->mu);
    rc = fi__local_sql_exec_id(st, S_STATS_ZERO, "zeroing statistics");
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* ---- listing ------------------------------------------------------------------- */

int fi_local_foreach(fi_local *st, int (*fn)(void *user, const fi_store_row *row), void *user)
{
    int rc = 0;
    sqlite3_stmt *s;
    fi_store_row *rows = NULL;
    size_t count = 0, cap = 0;
    if (!st || !fn) return fi__error(FI_EINVALID, "fi_store_foreach: NULL argument");
    /* Rows are copied out first so that `fn` runs without the store's mutex
     * and may call back into the store. */
    pthread_mutex_lock(&st->mu);
    if ((rc = fi__local_sql_prep(st, S_LIST, &s)) < 0) {
        pthread_mutex_unlock(&st->mu);
        goto out;
    }
    while ((rc = fi__local_sql_step(st, s, "listing entries")) == 1) {
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
        if (!k || fi_key_from_hex(k, r->key) < 0) memset(r->key, 0, sizeof r->key);
        const char *spec = (const char *)sqlite3_column_text(s, 1);
        const char *arch = (const char *)sqlite3_column_text(s, 2);
        snprintf(r->spec, sizeof r->spec, "%s", spec ? spec : "");
        snprintf(r->arch, sizeof r->arch, "%s", arch ? arch : "");
        r->size = sqlite3_column_int64(s, 3);
        r->created = sqlite3_column_int64(s, 4);
        r->last_used = sqlite3_column_int64(s, 5);
        r->hits = sqlite3_column_int64(s, 6);
        r->registers = sqlite3_column_int(s, 7);
        r->spill_bytes = sqlite3_column_int(s, 8);
        r->compile_ns = sqlite3_column_int64(s, 9);
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
