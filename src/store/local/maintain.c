/*
 * The local tier's maintenance (see local.h): verify and repair the index
 * and every object file, clear, and gc (age and size limits, then leftover
 * temps and idle lock files).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"

/* ---- verify ------------------------------------------------------------------- */

typedef struct verify_ctx {
    fi_local *st;
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
    fi_local *st = v->st;
    char (*keys)[33] = NULL;
    int64_t *sizes = NULL;
    size_t count = 0;
    char path[PATH_MAX_LEN], why[256];
    FI_TRY(fi__local_index_keys(st, &keys, &sizes, &count));
    for (size_t i = 0; i < count; i++) {
        uint8_t key[16];
        obj_info info;
        if (fi_key_from_hex(keys[i], key) < 0) {
            vreport(v, "index row with malformed key \"%s\"", keys[i]);
            if (v->repair) FI_TRY(fi__local_delete_row(st, keys[i], "removing a malformed row"));
            continue;
        }
        FI_TRY(fi__local_object_path(st, path, keys[i]));
        if (!fi__local_subdir_plain(path)) {
            /* Serving refuses to read through it, so verify does too; the
             * folder itself is removed by verify_objects, in the same run. */
            vreport(v, "entry %s: the folder of %s is a symbolic link or not a directory", keys[i],
                    path);
            if (v->repair) FI_TRY(fi__local_delete_row(st, keys[i], "removing an unreadable entry"));
            continue;
        }
        FI_TRY(fi__local_obj_read(path, key, NULL, NULL, &info, why, sizeof why));
        if (rc == OBJ_MISSING) {
            /* The index and the objects disagree, as they do about an
             * orphan object: the statistics count it, so it is a problem. */
            vreport(v, "entry %s: object file %s is missing (as an interrupted gc leaves it)%s",
                    keys[i], path, v->repair ? "; removed the row" : "");
            if (v->repair) FI_TRY(fi__local_drop_bad(st, keys[i], NULL));
        } else if (rc == OBJ_BAD) {
            vreport(v, "entry %s: object file %s %s", keys[i], path, why);
            if (v->repair) FI_TRY(fi__local_drop_bad(st, keys[i], &info));
        } else if (info.file_size != sizes[i]) {
            vreport(v, "entry %s: index says %" PRId64 " bytes, object has %" PRId64, keys[i],
                    sizes[i], info.file_size);
            if (v->repair)
                FI_TRY(fi__local_index_insert(st, keys[i], &info.meta, info.file_size, info.checksum, 0));
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
    fi_local *st = v->st;
    struct stat sb;
    char hex[33], why[256];
    uint8_t key[16];
    obj_info info;
    size_t len = strlen(name);
    if (fi__lstat(path, &sb) < 0) return 0; /* gone meanwhile */
    if (fi__local_is_temp_name(name) && !S_ISDIR(sb.st_mode)) {
        if (sb.st_mtime >= time(NULL) - TEMP_MAX_AGE_S &&
            (sb.st_mtime >= time(NULL) - TEMP_DEAD_WRITER_AGE_S || !fi__local_temp_writer_dead(name)))
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
        named = fi_key_from_hex(hex, key) == 0 && memcmp(hex, sub, 2) == 0;
        if (named) FI_TRY(fi__local_row_exists(st, hex, NULL));
        if (rc == 1) return 0; /* checked with the rows */
    }
    if (S_ISDIR(sb.st_mode) || len != 35 || strcmp(name + 32, ".fo") != 0) {
        vreport(v, "unexpected %s %s in the objects folder", S_ISDIR(sb.st_mode) ? "folder" : "file",
                path);
        if (v->repair) (void)fi__remove_any(path);
        return 0;
    }
    if (!named) {
        vreport(v, "misnamed object file %s", path);
        if (v->repair) (void)fi__unlink(path);
        return 0;
    }
    FI_TRY(fi__local_obj_read(path, key, NULL, NULL, &info, why, sizeof why));
    if (rc == OBJ_MISSING) return 0;
    if (rc == OBJ_BAD) {
        vreport(v, "unindexed object file %s %s", path, why);
        if (v->repair) {
            (void)fi__unlink(path);
            FI_TRY(fi__local_stat_add1(st, "corrupt", 1));
        }
        return 0;
    }
    vreport(v, "object file %s is not in the index", path);
    if (v->repair) FI_TRY(fi__local_index_insert(st, hex, &info.meta, info.file_size, info.checksum, 0));
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
    FI_TRY(fi__join_path(objects, v->st->dir, "objects"));
    if (!(d = opendir(objects)))
        FI_FAIL(FI_EIO, "cannot list %s: %s", objects, strerror(errno));
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        FI_TRY(fi__join_path(sub, objects, e->d_name));
        struct stat sb;
        if (lstat(sub, &sb) < 0) continue;
        if (strlen(e->d_name) != 2 || fi_hex_digit(e->d_name[0]) < 0 || fi_hex_digit(e->d_name[1]) < 0 ||
            !S_ISDIR(sb.st_mode)) {
            vreport(v, "unexpected entry %s in the objects folder", sub);
            if (v->repair) (void)fi__remove_any(sub);
            continue;
        }
        if (!(sd = opendir(sub))) continue;
        while ((f = readdir(sd))) {
            if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
            FI_TRY(fi__join_path(path, sub, f->d_name));
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

int fi_local_verify(fi_local *st, int repair, void (*report)(void *user, const char *problem),
                    void *user)
{
    int rc = 0;
    verify_ctx v = {st, repair, 0, report, user};
    char damage[1024];
    if (!st) return fi__error(FI_EINVALID, "fi_store_verify: NULL argument");
    if (repair) FI_TRY(fi__local_check_writable(st, "fi_store_verify --repair"));
    /* Verify is a maintenance command: it holds the mutex throughout, and the
     * report callback must not call back into this store. */
    pthread_mutex_lock(&st->mu);
    for (int pass = 0;; pass++) {
        if (!st->db) { /* an earlier rebuild failed */
            if (!repair) {
                rc = fi__error(FI_EIO, "cache index %s is not open", st->index_path);
                break;
            }
            if ((rc = fi__local_db_rebuild(st)) < 0) break;
        }
        if ((rc = fi__local_index_damaged(st, damage, sizeof damage)) < 0) break;
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
        if ((rc = fi__local_db_rebuild(st)) < 0) break;
    }
    if (rc >= 0) rc = v.problems;
    pthread_mutex_unlock(&st->mu);
out:
    return rc;
}

/* ---- clear / gc ----------------------------------------------------------------- */

int fi_local_clear(fi_local *st)
{
    int rc = 0, in_tx = 0, first_err = 0;
    char objects[PATH_MAX_LEN], sub[PATH_MAX_LEN], path[PATH_MAX_LEN];
    DIR *d = NULL, *sd = NULL;
    struct dirent *e, *f;
    if (!st) return fi__error(FI_EINVALID, "fi_store_clear: NULL argument");
    FI_TRY(fi__local_check_writable(st, "fi_store_clear"));
    FI_TRY(fi__join_path(objects, st->dir, "objects"));
    pthread_mutex_lock(&st->mu);
    if ((rc = fi__local_tx_begin(st)) < 0) goto unlock;
    in_tx = 1;
    /* Every object file goes, indexed or not; temps of running writers stay. */
    if ((d = opendir(objects))) {
        while ((e = readdir(d))) {
            if (strlen(e->d_name) != 2 || fi__join_path(sub, objects, e->d_name) < 0) continue;
            if (!(sd = opendir(sub))) continue;
            while ((f = readdir(sd))) {
                size_t n = strlen(f->d_name);
                if (n < 4 || strcmp(f->d_name + n - 3, ".fo") != 0) continue;
                if (fi__join_path(path, sub, f->d_name) < 0) continue;
                if (fi__unlink(path) < 0 && errno != ENOENT && !first_err)
                    first_err = fi__error(FI_EIO, "cannot remove %s: %s", path, strerror(errno));
            }
            closedir(sd);
            sd = NULL;
        }
        closedir(d);
        d = NULL;
    }
    if ((rc = fi__local_index_clear(st)) < 0) goto unlock;
    if ((rc = fi__local_tx_commit(st)) < 0) goto unlock;
    in_tx = 0;
    rc = first_err;
unlock:
    if (in_tx) fi__local_tx_rollback(st);
    pthread_mutex_unlock(&st->mu);
out:
    return rc;
}

/* Drop the rows whose object file is gone (what an interrupted gc or a
 * hand-deleted object leaves), so that the statistics count only objects
 * that exist. Inside the caller's write transaction. Not counted as
 * removed by gc: the entries were gone already. */
static int prune_rows_without_objects(fi_local *st)
{
    int rc = 0;
    char (*keys)[33] = NULL, path[PATH_MAX_LEN];
    int64_t *sizes = NULL;
    size_t count = 0;
    struct stat sb;
    FI_TRY(fi__local_index_keys(st, &keys, &sizes, &count));
    for (size_t i = 0; i < count; i++) {
        if (fi__local_object_path(st, path, keys[i]) < 0) continue;
        if (fi__lstat(path, &sb) < 0 && errno == ENOENT)
            FI_TRY(fi__local_delete_row(st, keys[i], "removing a row whose object is gone"));
    }
out:
    fi__free(keys);
    fi__free(sizes);
    return rc;
}

int fi_local_gc(fi_local *st, int64_t max_bytes, int64_t older_than)
{
    int rc = 0, in_tx = 0, removed = 0;
    char hex[33];
    if (!st) return fi__error(FI_EINVALID, "fi_store_gc: NULL argument");
    FI_TRY(fi__local_check_writable(st, "fi_store_gc"));
    pthread_mutex_lock(&st->mu);
    if ((rc = fi__local_tx_begin(st)) < 0) goto unlock;
    in_tx = 1;
    if (older_than > 0 && (rc = fi__local_index_clamp_used(st, (int64_t)time(NULL))) < 0)
        goto unlock;
    while (older_than > 0) {
        if ((rc = fi__local_index_older(st, older_than, hex)) < 0) goto unlock;
        if (rc == 0) break;
        if ((rc = fi__local_remove_entry(st, hex)) < 0) goto unlock;
        removed++;
    }
    if (max_bytes >= 0 && (rc = fi__local_evict_to(st, max_bytes, NULL, &removed)) < 0) goto unlock;
    if ((rc = prune_rows_without_objects(st)) < 0) goto unlock;
    if ((rc = fi__local_tx_commit(st)) < 0) goto unlock;
    in_tx = 0;
    rc = removed;
unlock:
    if (in_tx) {
        /* The rollback brings back the rows of objects already unlinked:
         * drop those, so that a failed gc leaves the statistics matching
         * the objects (best effort; a kill leaves them to the next gc). */
        char first[1024];
        snprintf(first, sizeof first, "%s", fi_last_error());
        fi__local_tx_rollback(st);
        if (fi__local_tx_begin(st) == 0) {
            if (prune_rows_without_objects(st) == 0 && fi__local_tx_commit(st) == 0) in_tx = 0;
            if (in_tx) fi__local_tx_rollback(st);
        }
        fi__error(rc, "%s", first);
    }
    pthread_mutex_unlock(&st->mu);
    if (rc >= 0) {
        fi__local_clean_temps(st, TEMP_MAX_AGE_S);
        fi__local_clean_locks(st);
    }
out:
    return rc;
}
