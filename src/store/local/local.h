/*
 * The local tier: a cache directory with an SQLite index (src/store/local/schema.sql)
 * plus one object file per key, in the entry format of store/object.h.
 * Objects are written to a temp file, fsynced and renamed before their index
 * row commits; every read verifies the object's header and checksum, and a
 * bad object is counted, removed and reported as missing so the caller
 * rebuilds it. Cross-process single flight uses one lock file per key
 * (flock), which the kernel releases when a builder dies.
 *
 * Layout of a cache directory (created 0700):
 *   index.sqlite          the index (WAL mode)
 *   objects/ab/<32 hex>.fo  object files (first two hex digits as a subfolder)
 *   locks/<32 hex>.lock   per-key build locks
 *   tmp/                  temp files of writers; leftovers are cleaned
 *
 * Layering (an arrow is "calls"; nothing calls upwards, and of two files
 * at most one calls the other, so the tier has no call circle):
 *
 *     maintain.c ──▶ local.c                 coordinators: each calls all
 *                                             three files below
 *     objects.c     index.c ──▶ lock.c       leaves
 *
 *  - objects.c, the files: paths, directory safety, temp files, reading an
 *    object file. No SQL.
 *  - index.c, the index: SQL only, over index.sqlite (and the files SQLite
 *    keeps beside it); statistics, listing; eviction picks keys and deletes
 *    no object file. It takes locks/index.lock through lock.c to rebuild.
 *  - lock.c: per-key build locks and the index lock (flock). Calls no other
 *    file of the tier.
 *  - local.c: open, get, put, and what joins a row to its object file
 *    (removing an entry, eviction, dropping a bad object, re-indexing a
 *    hit). maintain.c: verify/repair, clear and gc, over the leaves and
 *    local.c's entry helpers. Neither runs SQL of its own: they call the
 *    index's functions, inside transactions they open with it.
 * Path joining and the removal of whatever sits at a path are common/sys.h's.
 *
 * Concurrency model
 *  - Threads: one fi_local is shared by the threads of a process; a mutex
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
 * caller through fi_local_stats_add.
 *
 * The fi_local_* functions do what the fi_store_* functions of store.h of
 * the same name say (the tier front forwards to them); fi__local_* are
 * shared between the files of this folder only.
 */
#ifndef FI_STORE_LOCAL_H
#define FI_STORE_LOCAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/sys.h"
#include "fijit.h"
#include "store/object.h"
#include "store/store.h"

/* Must equal the PRAGMA user_version set at the end of src/store/local/schema.sql. */
#define FI_SCHEMA_VERSION 1

#define BUSY_TIMEOUT_MS 10000
/* Temp files older than this belong to a writer that died. */
#define TEMP_MAX_AGE_S 3600
/* A temp file whose writer (the pid in its name) no longer exists on this
 * host is removed once it is this old: a writer needs milliseconds, and the
 * grace covers a pid seen from another host sharing the directory. */
#define TEMP_DEAD_WRITER_AGE_S 60

#define PATH_MAX_LEN FI_PATH_LEN

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

typedef struct fi_local fi_local;

struct fi_local {
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
    pthread_mutex_t held_mu;        /* guards held */
    struct fi_local_lock *held;     /* build locks this store holds (lock.c) */
};

/* What reading an object file found (besides its payload). */
typedef struct obj_info {
    uint8_t key[16];
    uint64_t checksum;
    int64_t file_size;
    fi_object_meta meta;
    dev_t dev; /* identity of the file that was read, so that a bad file is */
    ino_t ino; /* removed only if it is still the one at the path */
} obj_info;

/* OBJ_BAD equals FI_OBJECT_BAD of the codec. */
enum { OBJ_OK = FI_OBJECT_OK, OBJ_MISSING = 1, OBJ_BAD = FI_OBJECT_BAD };

/* The tier's verbs: see the fi_store_* function of the same name. */
int fi_local_open(fi_local **out, const char *dir, unsigned flags, int64_t max_bytes);
void fi_local_close(fi_local *st);
const char *fi_local_dir(const fi_local *st);
int fi_local_read_only(const fi_local *st);
int fi_local_get(fi_local *st, const uint8_t key[16], void **out, size_t *out_size,
                 fi_object_meta *meta);
/* `out_added` (may be NULL): see fi_store_put_counted. */
int fi_local_put(fi_local *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta, int *out_added);
/* The per-key build lock (lock.c); the front's fi_store_lock wraps it. */
typedef struct fi_local_lock fi_local_lock;
int fi_local_lock_key(fi_local *st, const uint8_t key[16], fi_local_lock **out);
void fi_local_set_lock_timeout(fi_local *st, int64_t timeout_ms);
void fi_local_unlock(fi_local_lock *lock);
/* 1 when the index lists `key`, 0 when not, or an error code. */
int fi_local_has(fi_local *st, const uint8_t key[16]);
/* One remote's own counters (the remote_* fields of `counts`), kept as rows
 * "<counter>@<remote>" beside the totals, which count every remote. */
typedef struct fi_local_remote_stats {
    char remote[512]; /* the remote's masked URL (fi_remote_config.url) */
    fi_jit_stats counts;
} fi_local_remote_stats;
/* Add `delta` to the totals and each of remotes[0..remote_count) to its
 * remote's rows, in one transaction. */
int fi_local_stats_add(fi_local *st, const fi_jit_stats *delta,
                       const fi_local_remote_stats *remotes, size_t remote_count);
int fi_local_stats_get(fi_local *st, fi_jit_stats *out);
/* Each remote with saved counters, in the order of their names. */
int fi_local_remote_stats_foreach(fi_local *st,
                                  int (*fn)(void *user, const fi_local_remote_stats *r),
                                  void *user);
int fi_local_stats_zero(fi_local *st);
int fi_local_foreach(fi_local *st, int (*fn)(void *user, const fi_store_row *row), void *user);
int fi_local_verify(fi_local *st, int repair, void (*report)(void *user, const char *problem),
                    void *user);
int fi_local_clear(fi_local *st);
int fi_local_gc(fi_local *st, int64_t max_bytes, int64_t older_than);

/* Refuse a change to a cache opened read-only, naming the call. */
static inline int fi__local_check_writable(const fi_local *st, const char *what)
{
    if (st->flags & FI_STORE_READ_ONLY)
        return fi__error(FI_EINVALID, "%s: cache %s was opened read-only", what, st->dir);
    return 0;
}

/* index.c: the SQLite index (statements, transactions, open and rebuild, rows,
 * the choice of what to evict); no object file */
int fi__local_sql_prep(fi_local *st, enum stmt_id id, sqlite3_stmt **out);
int fi__local_sql_step(fi_local *st, sqlite3_stmt *s, const char *what);
int fi__local_sql_run(fi_local *st, sqlite3_stmt *s, const char *what);
int fi__local_sql_exec_id(fi_local *st, enum stmt_id id, const char *what);
int fi__local_tx_begin(fi_local *st);
int fi__local_tx_commit(fi_local *st);
void fi__local_tx_rollback(fi_local *st);
int fi__local_bind_text(fi_local *st, sqlite3_stmt *s, int i, const char *text);
int fi__local_bind_i64(fi_local *st, sqlite3_stmt *s, int i, int64_t v);
int fi__local_stat_add1(fi_local *st, const char *name, int64_t value);
int fi__local_row_exists(fi_local *st, const char *hex, int64_t *size);
void fi__local_db_close(fi_local *st);
int fi__local_index_damaged(fi_local *st, char *why, size_t why_size);
int fi__local_db_rebuild(fi_local *st);
void fi__local_say_read_only(const fi_local *st, const char *why);
int fi__local_db_open(fi_local *st);
int fi__local_resolve_index_path(fi_local *st);
int fi__local_delete_row(fi_local *st, const char *hex, const char *what);
int fi__local_index_insert(fi_local *st, const char *hex, const fi_object_meta *meta,
                           int64_t file_size, uint64_t checksum, int64_t hits);
int fi__local_index_touch(fi_local *st, const char *hex);
int fi__local_index_total(fi_local *st, int64_t *bytes);
int fi__local_index_oldest(fi_local *st, const char *keep, char hex[33], int64_t *size);
int fi__local_index_keys(fi_local *st, char (**keys)[33], int64_t **sizes, size_t *count);
int fi__local_index_clear(fi_local *st);
int fi__local_index_clamp_used(fi_local *st, int64_t now);
int fi__local_index_older(fi_local *st, int64_t older_than, char hex[33]);

/* lock.c: per-key build locks */
int fi__local_lock_file_wait(const char *path, int64_t timeout_ms, int *out_fd);
int fi__local_lock_lost(fi_local *st, const char *hex);
void fi__local_clean_locks(fi_local *st);

/* objects.c: paths, directory safety, object files, temp files; no SQL */
int fi__local_object_path(const fi_local *st, char *out, const char *hex);
int fi__local_is_temp_name(const char *name);
int fi__local_check_owner_mode(const char *path, const struct stat *sb, unsigned flags);
int fi__local_make_dirs(const char *path);
int fi__local_ensure_subdir(const char *path, unsigned flags, int create);
int fi__local_temp_writer_dead(const char *name);
void fi__local_clean_temps(fi_local *st, int64_t max_age_s);
void fi__local_maybe_clean_temps(fi_local *st);
int fi__local_obj_read(const char *path, const uint8_t *want, void **payload_out,
                       size_t *payload_size_out, obj_info *info, char *why, size_t why_size);
int fi__local_subdir_plain(const char *path);

/* local.c: an index row together with its object file (under the caller's
 * transaction or taking one), for local.c and maintain.c */
int fi__local_remove_entry(fi_local *st, const char *hex);
int fi__local_evict_to(fi_local *st, int64_t max_bytes, const char *keep, int *removed);
int fi__local_drop_bad(fi_local *st, const char *hex, const obj_info *seen);
int fi__local_reindex_hit(fi_local *st, const char *hex, const char *path, const obj_info *info);

#endif
