/*
 * The local tier's verbs (see local.h), coordinating the files (objects.c)
 * and the index (index.c): open and close a cache directory, get (read and
 * verify an object, count and remove a bad one) and put (write, rename and
 * index an object, then evict to the size limit), and the helpers that keep
 * a row and its object file together (remove an entry, evict, drop a bad
 * object, re-index a hit), which maintain.c uses too.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"

int fi_local_open(fi_local **out, const char *dir, unsigned flags, int64_t max_bytes)
{
    int rc = 0, dfd = -1;
    int ro = (flags & FI_STORE_READ_ONLY) != 0;
    const char *ro_why = NULL; /* why a writable open became read-only */
    fi_local *st = NULL;
    struct stat sb;
    char path[PATH_MAX_LEN];
    static const char *const subdirs[] = {"objects", "locks", "tmp"};

    if (!out || !dir || !*dir) return fi__error(FI_EINVALID, "no cache directory given");
    *out = NULL;
    if (!(st = fi__calloc(1, sizeof *st))) FI_FAIL(FI_ENOMEM, "out of memory opening the cache");
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->held_mu, NULL);
    st->flags = flags;
    st->max_bytes = max_bytes;
    st->lock_timeout_ms = FI_STORE_LOCK_TIMEOUT_MS;
    if (!(st->dir = fi__strdup(dir))) FI_FAIL(FI_ENOMEM, "out of memory opening the cache");
    /* Trailing slashes would double up in every path. */
    for (size_t n = strlen(st->dir); n > 1 && st->dir[n - 1] == '/'; n--) st->dir[n - 1] = '\0';

    if (!ro) FI_TRY(fi__local_make_dirs(st->dir));
    /* The cache dir itself may be a symlink (~/.cache on another disk); check
     * what it points to. Everything below it is checked without following. */
    dfd = fi__open(st->dir, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        if (errno == ENOENT) FI_FAIL(FI_ENOTFOUND, "cache directory %s does not exist", st->dir);
        FI_FAIL(FI_EIO, "cannot open cache directory %s: %s", st->dir, strerror(errno));
    }
    if (fi__fstat(dfd, &sb) < 0)
        FI_FAIL(FI_EIO, "cannot stat cache directory %s: %s", st->dir, strerror(errno));
    FI_TRY(fi__local_check_owner_mode(st->dir, &sb, flags));
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
        FI_TRY(fi__join_path(path, st->dir, subdirs[i]));
        rc = fi__local_ensure_subdir(path, st->flags, !ro);
        if (rc == FI_ENOTFOUND && ro) { /* nothing to read there, nothing to write */
            fi__error_clear();
            rc = 0;
        }
        if (rc < 0) goto out;
    }
    FI_TRY(fi__local_resolve_index_path(st));
    FI_TRY(fi__local_db_open(st));
    if (ro_why) fi__local_say_read_only(st, ro_why);
    if (!(st->flags & FI_STORE_READ_ONLY)) fi__local_maybe_clean_temps(st);
    *out = st;
    st = NULL;
out:
    if (dfd >= 0) fi__close(dfd);
    fi_local_close(st);
    return rc;
}

void fi_local_close(fi_local *st)
{
    if (!st) return;
    fi__local_db_close(st);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->held_mu);
    fi__free(st->dir);
    fi__free(st);
}

const char *fi_local_dir(const fi_local *st) { return st ? st->dir : NULL; }

int fi_local_read_only(const fi_local *st)
{
    return st && (st->flags & FI_STORE_READ_ONLY) != 0;
}

/* ---- get / put ---------------------------------------------------------------- */

int fi_local_get(fi_local *st, const uint8_t key[16], void **out, size_t *out_size,
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
    FI_TRY(fi__local_object_path(st, path, hex));
    if (!fi__local_subdir_plain(path)) {
        fi__log(FI_LOG_WARN, "cache folder of %s is not a plain directory; not reading it", path);
        FI_FAIL(FI_ENOTFOUND, "cache folder of %s is a symbolic link or not a directory; "
                "run 'fijit verify --repair'", path);
    }

    for (int attempt = 0;; attempt++) {
        rc = fi__local_obj_read(path, key, &payload, &psize, &info, why, sizeof why);
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
            int has = fi__local_row_exists(st, hex, NULL);
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
        rc = fi__local_drop_bad(st, hex, bad == OBJ_BAD ? &info : NULL);
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
        pthread_mutex_lock(&st->mu);
        locked = 1;
        if (fi__local_index_touch(st, hex) == 0) (void)fi__local_reindex_hit(st, hex, path, &info);
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

int fi_local_has(fi_local *st, const uint8_t key[16])
{
    char hex[33];
    if (!st || !key) return fi__error(FI_EINVALID, "fi_store_has: NULL argument");
    fi_key_hex(hex, key);
    pthread_mutex_lock(&st->mu);
    int rc = fi__local_row_exists(st, hex, NULL);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static int store_put_once(fi_local *st, const uint8_t key[16], const void *data, size_t size,
                          const fi_object_meta *meta, int *out_added);

/* A put that finds the index damaged under it (a table dropped, a page
 * gone bad since the open) rebuilds it from the objects and tries once
 * more: prewarm's job is to store. */
int fi_local_put(fi_local *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta, int *out_added)
{
    int rc = store_put_once(st, key, data, size, meta, out_added);
    if (rc != FI_ECORRUPT) return rc;
    pthread_mutex_lock(&st->mu);
    rc = fi__local_db_rebuild(st);
    pthread_mutex_unlock(&st->mu);
    return rc < 0 ? rc : store_put_once(st, key, data, size, meta, out_added);
}

static int store_put_once(fi_local *st, const uint8_t key[16], const void *data, size_t size,
                          const fi_object_meta *meta, int *out_added)
{
    int rc = 0, begun = 0, locked = 0, in_tx = 0, removed = 0, renamed = 0;
    char hex[33], path[PATH_MAX_LEN], sub[PATH_MAX_LEN];
    uint8_t header[FI_OBJECT_MAX_HEADER];
    fi_object_meta empty = {0};
    fi_atomic_file f;
    size_t hsize;
    uint64_t checksum;

    if (!st || !key || !data) return fi__error(FI_EINVALID, "fi_store_put: NULL argument");
    FI_TRY(fi__local_check_writable(st, "fi_store_put"));
    if (size == 0 || (uint64_t)size > FI_OBJECT_MAX_PAYLOAD)
        FI_FAIL(FI_EINVALID, "cache entry: object size %zu is out of range", size);
    if (!meta) meta = &empty;
    if (!fi_object_meta_ok(meta)) FI_FAIL(FI_EINVALID, "cache entry: %s", FI_OBJECT_META_BAD);
    fi_key_hex(hex, key);
    FI_TRY(fi__local_object_path(st, path, hex));
    if (fi__local_lock_lost(st, hex)) {
        /* Stopped while building, this process had its lock taken over;
         * the new holder's entry stands, and is not written a second time. */
        pthread_mutex_lock(&st->mu);
        int has = fi__local_row_exists(st, hex, NULL);
        pthread_mutex_unlock(&st->mu);
        if (has == 1) {
            fi__log(FI_LOG_INFO, "another process took over the build lock of %s while this one "
                    "was stopped, and stored it; not storing it again", hex);
            if (out_added) *out_added = 0;
            return 0;
        }
    }
    if (snprintf(sub, sizeof sub, "%s/objects/%.2s", st->dir, hex) >= (int)sizeof sub)
        FI_FAIL(FI_EINVALID, "cache path too long under %s", st->dir);
    FI_TRY(fi__local_ensure_subdir(sub, st->flags, 1));

    checksum = XXH3_64bits(data, size);
    hsize = fi_object_header_build(header, key, meta, size, checksum);
    FI_TRY(fi__atomic_begin(&f, path));
    begun = 1;
    fi__atomic_write(&f, header, hsize);
    fi__atomic_write(&f, data, size);

    pthread_mutex_lock(&st->mu);
    locked = 1;
    /* The rename happens under the index's write lock so that gc, clear and
     * bad-object removal in other processes never unlink a fresh object. */
    FI_TRY(fi__local_tx_begin(st));
    in_tx = 1;
    begun = 0;
    /* Whether the key is new is decided under the write lock, so that of
     * two writers of one key exactly one is told it added the entry. */
    if (out_added) {
        FI_TRY(fi__local_row_exists(st, hex, NULL));
        *out_added = rc == 0;
    }
    FI_TRY(fi__atomic_commit(&f));
    renamed = 1;
    FI_TRY(fi__local_index_insert(st, hex, meta, (int64_t)(hsize + size), checksum, 0));
    FI_TRY(fi__local_stat_add1(st, "bytes_written", (int64_t)(hsize + size)));
    if (st->max_bytes > 0) FI_TRY(fi__local_evict_to(st, st->max_bytes, hex, &removed));
    FI_TRY(fi__local_tx_commit(st));
    in_tx = 0;
    if (removed)
        fi__log(FI_LOG_INFO, "evicted %d cache entries to stay under %" PRId64 " bytes",
                removed, st->max_bytes);
out:
    if (in_tx) fi__local_tx_rollback(st);
    /* No row for the object after all: remove it rather than leave an orphan
     * (not through the fault seam: cleanup must not fail). */
    if (rc < 0 && renamed) unlink(path);
    if (locked) pthread_mutex_unlock(&st->mu);
    if (begun) fi__atomic_abort(&f);
    return rc;
}

/* ---- entries: an index row with its object file ------------------------------- */

/* Delete an entry's row, then its object (inside the caller's transaction).
 * A missing object is fine: the goal is that neither exists. The row goes
 * first so that a failing delete leaves the object alone; an interrupted
 * transaction can still bring back rows whose objects are gone, which get
 * and verify treat as a plain miss. A folder at the path goes too: it
 * would block every rebuild. */
int fi__local_remove_entry(fi_local *st, const char *hex)
{
    int rc = 0;
    char path[PATH_MAX_LEN];
    FI_TRY(fi__local_object_path(st, path, hex));
    FI_TRY(fi__local_delete_row(st, hex, "removing an entry"));
    if (fi__remove_any(path) < 0)
        FI_FAIL(FI_EIO, "cannot remove cache object %s: %s", path, strerror(errno));
out:
    return rc;
}

/* Evict least-recently-used entries (other than `keep`) until the total size
 * is at most max_bytes: the index picks each one, and it goes with its
 * object. Inside the caller's transaction. */
int fi__local_evict_to(fi_local *st, int64_t max_bytes, const char *keep, int *removed)
{
    int rc = 0;
    int64_t bytes, size;
    char hex[33];
    FI_TRY(fi__local_index_total(st, &bytes));
    while (bytes > max_bytes) {
        FI_TRY(fi__local_index_oldest(st, keep, hex, &size));
        if (rc == 0) break; /* only `keep` is left */
        bytes -= size;
        FI_TRY(fi__local_remove_entry(st, hex));
        (*removed)++;
    }
    rc = 0;
out:
    return rc;
}

/* A bad or missing object was found for a key: under the write lock, remove
 * the object (only if it is still the file we read: a concurrent put may
 * have replaced it) and the row, and count a bad one (a missing object is
 * what an interrupted gc leaves, not damage). Returns 1 when the path now
 * holds a different file, so the caller should read again. */
int fi__local_drop_bad(fi_local *st, const char *hex, const obj_info *seen)
{
    int rc = 0, in_tx = 0, raced = 0;
    char path[PATH_MAX_LEN];
    struct stat sb;
    FI_TRY(fi__local_object_path(st, path, hex));
    FI_TRY(fi__local_tx_begin(st));
    in_tx = 1;
    if (fi__lstat(path, &sb) < 0) {
        if (errno != ENOENT)
            FI_FAIL(FI_EIO, "cannot stat cache object %s: %s", path, strerror(errno));
    } else {
        if (!seen || sb.st_dev != seen->dev || sb.st_ino != seen->ino) {
            raced = 1;
            goto out;
        }
        if (fi__remove_any(path) < 0)
            FI_FAIL(FI_EIO, "cannot remove bad cache object %s: %s", path, strerror(errno));
    }
    FI_TRY(fi__local_delete_row(st, hex, "removing a bad entry"));
    if (seen) FI_TRY(fi__local_stat_add1(st, "corrupt", 1));
    FI_TRY(fi__local_tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) fi__local_tx_rollback(st);
    return rc < 0 ? rc : raced;
}

/* A hit whose row is gone: the index was rebuilt or lost, or an eviction
 * removed the entry after we read it. Re-index from the header only if the
 * file we read is still at the path, checked under the write lock (which
 * eviction holds while it unlinks), so that a removed entry never comes
 * back as a row without an object. */
int fi__local_reindex_hit(fi_local *st, const char *hex, const char *path, const obj_info *info)
{
    int rc = 0, in_tx = 0;
    struct stat sb;
    FI_TRY(fi__local_tx_begin(st));
    in_tx = 1;
    if (fi__lstat(path, &sb) == 0 && sb.st_dev == info->dev && sb.st_ino == info->ino &&
        (rc = fi__local_row_exists(st, hex, NULL)) == 0)
        FI_TRY(fi__local_index_insert(st, hex, &info->meta, info->file_size, info->checksum, 1));
    FI_TRY(rc);
    FI_TRY(fi__local_tx_commit(st));
    in_tx = 0;
out:
    if (in_tx) fi__local_tx_rollback(st);
    return rc;
}
