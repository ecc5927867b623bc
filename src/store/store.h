/*
 * The tier front: the one cache jit.c talks to. It walks the tiers in
 * order, each behind a small interface, and knows nothing of SQLite or
 * sockets (ccache's storage.cpp is the model):
 *   get   the local tier (store/local/), then each remote (store/remote/);
 *         a value a remote returns is unsealed (store/seal.h: its MAC
 *         checked when the fleet has a secret) and verified with the entry
 *         codec (store/object.h), then written back to the local tier
 *   put   the local tier, then every writable remote, best effort
 *   lock  the local tier's per-key build lock, then the fleet's build lease
 *         in the first writable remote (or a bounded wait for the entry
 *         another host is building)
 * A remote that fails is skipped for a back-off period (remote.h).
 * Statistics and maintenance (list, verify, clear, gc) are the local tier's;
 * the remote_* counters are counted here and saved with the caller's.
 *
 * The local tier is a cache directory (created 0700):
 *   index.sqlite          the index (WAL mode)
 *   objects/ab/<32 hex>.fo  object files (first two hex digits as a subfolder)
 *   locks/<32 hex>.lock   per-key build locks
 *   tmp/                  temp files of writers; leftovers are cleaned
 * Objects are written to a temp file, fsynced and renamed before their
 * index row commits; every read verifies the object's header and checksum,
 * and a bad object is counted, removed and reported as missing so the
 * caller rebuilds it. Cross-process single flight uses one lock file per
 * key (flock), which the kernel releases when a builder dies.
 */
#ifndef FI_STORE_H
#define FI_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "fijit.h"
#include "fijit_cache.h"

typedef struct fi_store fi_store;

/* What the index records beside the object itself. */
typedef struct fi_object_meta {
    char spec[256];      /* canonical spec text */
    char arch[16];       /* "sm_90a" */
    int registers;
    int spill_bytes;
    int64_t compile_ns;
} fi_object_meta;

/* A row of `fijit list`: the public fi_cache_entry (fijit_cache.h). */
typedef fi_cache_entry fi_store_row;

typedef enum fi_store_flags {
    FI_STORE_ALLOW_UNSAFE_DIR = 1u << 0, /* accept a dir writable by group/others */
    FI_STORE_READ_ONLY = 1u << 1,
    /* When the cache cannot be written (read-only mount or image layer, no
     * write permission, a full disk), open it read-only instead of failing:
     * hits are served, nothing is stored. Said once, at open. */
    FI_STORE_READ_ONLY_FALLBACK = 1u << 2,
} fi_store_flags;

/* Open (creating if needed) the cache at `dir`. Refuses (FI_EPERM) a dir
 * owned by another user (root excepted) or writable by group/others unless
 * allowed, and a symlinked index; symlinks in the path above `dir` are fine.
 * FI_EINVALID when the resolved path is too long for SQLite. */
int fi_store_open(fi_store **out, const char *dir, unsigned flags, int64_t max_bytes);
void fi_store_close(fi_store *st);
const char *fi_store_dir(const fi_store *st);
/* 1 when the store was opened read-only (asked for, or fallen back to). */
int fi_store_read_only(const fi_store *st);

/* Add a remote tier behind the local one (and behind remotes added
 * before). The store takes `remote` over, also when this fails, and closes
 * it with itself. Not thread-safe: add remotes before the store is shared. */
typedef struct fi_remote fi_remote;
int fi_store_add_remote(fi_store *st, fi_remote *remote);
/* Seal what is pushed to the remotes with the fleet secret, and accept only
 * what carries its MAC (store/seal.h). FI_EINVALID for a short secret. */
int fi_store_set_secret(fi_store *st, const char *secret);

/* Which tier served a get. */
typedef enum fi_store_tier { FI_STORE_TIER_LOCAL = 0, FI_STORE_TIER_REMOTE = 1 } fi_store_tier;

/* Read and verify the object for `key`. FI_ENOTFOUND when absent (also
 * when the index cannot be read: a damaged index must not stop the caller
 * compiling); when the object is bad it is removed, `corrupt` is counted,
 * and FI_ENOTFOUND is returned (a row whose object is gone is dropped, not
 * counted). `*out` is freed with fi__free. `meta` may be NULL.
 * On a local miss each remote is asked in turn; a remote's entry is used
 * only when the codec accepts it for `key` (a bad one is removed from that
 * remote), and is then written back to the local tier (when writable). A
 * remote's error or timeout is a miss there, and the remote is skipped
 * from then on. */
int fi_store_get(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                 fi_object_meta *meta);
/* fi_store_get, saying in `*tier` (may be NULL) which tier served it. */
int fi_store_lookup(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                    fi_object_meta *meta, fi_store_tier *tier);
/* The second look of a miss, under the build lock (fi_store_lock_key): as
 * fi_store_lookup, but each event is counted once over both looks: a remote
 * that still lacks the key is not counted as a miss again, and a read-only
 * remote is not asked again (no lease was waited for there, and a bad value
 * it holds was counted and left in place by the first look). */
int fi_store_lookup_again(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                          fi_object_meta *meta, fi_store_tier *tier);
/* 1 when the local tier's index lists `key`, 0 when not, or an error code. */
int fi_store_has_local(fi_store *st, const uint8_t key[16]);
/* Push an entry the local tier served to every writable remote that lacks
 * it (prewarm fills a remote from a warm local cache). Best effort. */
void fi_store_publish(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                      const fi_object_meta *meta);

/* Store an object atomically; replaces an existing entry for the key. Runs
 * eviction if a size limit is set. Then pushes the entry to every remote,
 * best effort: their failures are logged, never returned. */
int fi_store_put(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta);
/* fi_store_put that also says, in `*out_added` (may be NULL), whether the
 * local tier had no entry for the key (1) or one was there, put by another
 * writer meanwhile (0): decided under the index's write lock, so that
 * concurrent importers of one entry count it as added once. */
int fi_store_put_counted(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                         const fi_object_meta *meta, int *out_added);

/* Cross-process build lock for one key (flock on locks/<key>.lock). A
 * holder on this host seen stopped (SIGSTOP, a debugger) for 2 s is taken
 * over (store/local/lock.c); woken, it stores nothing over the entry of the
 * process that took its lock. Otherwise waits at most the store's lock
 * timeout for another holder (which may be hung), then returns a lock that
 * holds nothing, so the caller builds without it (puts are atomic, so a
 * late second writer of the key is harmless). Also holds nothing on a
 * read-only store.
 * Then, with a writable remote, the fleet-wide lease on the key: taken (and
 * renewed by a thread while the caller builds, so that it expires soon
 * after a holder dies), or, while another host holds it, waited for until
 * that host's entry appears in the remote, the lease is freed, or the
 * remote's wait bound passes; the caller then looks the key up again and
 * builds only on a miss. A sick remote only ends the wait. */
typedef struct fi_store_lock fi_store_lock;
int fi_store_lock_key(fi_store *st, const uint8_t key[16], fi_store_lock **out);
/* Default wait for another process's build lock; FIJIT_LOCK_TIMEOUT_MS
 * overrides it in fi_jit_ctx_new. */
#define FI_STORE_LOCK_TIMEOUT_MS 60000
/* Set the wait in milliseconds: 0 does not wait, < 0 waits forever. */
void fi_store_set_lock_timeout(fi_store *st, int64_t timeout_ms);
void fi_store_unlock(fi_store_lock *lock); /* accepts NULL; before the store is closed */

/* Add this process's counters to the persisted statistics (one transaction). */
int fi_store_stats_add(fi_store *st, const fi_jit_stats *delta);
/* Persisted counters plus current entries and bytes. */
int fi_store_stats_get(fi_store *st, fi_jit_stats *out);
int fi_store_stats_zero(fi_store *st);
/* Each remote's saved counters (the remote_* fields of `counts`), by the
 * masked URL it had, in the order of those names; `fn` returns nonzero to
 * stop. The totals of fi_store_stats_get count every remote. */
int fi_store_remote_stats_foreach(fi_store *st,
                                  int (*fn)(void *user, const char *remote,
                                            const fi_jit_stats *counts),
                                  void *user);

/* Call `fn` for each index row (ordered by spec); stop early if it returns nonzero. */
int fi_store_foreach(fi_store *st, int (*fn)(void *user, const fi_store_row *row), void *user);

/* Check the index (PRAGMA integrity_check, its tables) and every entry:
 * object present, header and checksum good, no orphan objects. `report` is
 * called with a description of each problem. The rule: where the index and
 * the objects disagree (a row whose object is gone, as an interrupted gc
 * leaves it, or an object without a row) or an object is bad, it is a
 * problem, counted, because what is served or what the statistics say
 * depends on it; a killed writer's temp file changes neither and is passed
 * to `report` as text starting "note: ", not counted. With `repair`, one
 * run fixes every problem and note: a damaged index is rebuilt and every
 * object re-indexed, bad entries and rows without objects are removed,
 * orphans re-indexed or deleted, leftover temps removed. Returns the number
 * of problems found (>= 0) or an error code. */
int fi_store_verify(fi_store *st, int repair, void (*report)(void *user, const char *problem),
                    void *user);

/* Remove every entry and object (statistics are kept unless zeroed). */
int fi_store_clear(fi_store *st);

/* Evict least-recently-used entries until the cache holds at most max_bytes
 * (< 0: no size limit) and nothing last used before `older_than` (unix
 * seconds, 0: no age limit); drop the rows whose object is gone, so that
 * the statistics match the objects. Returns the number of entries evicted. */
int fi_store_gc(fi_store *st, int64_t max_bytes, int64_t older_than);

/* Hex form of a key (33 bytes with NUL). */
void fi_key_hex(char out[33], const uint8_t key[16]);

#endif
