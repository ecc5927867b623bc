/*
 * The tier front (see store.h): get walks the local tier, then the remotes
 * (verifying what they return and writing it back); put stores locally,
 * then pushes to the remotes best effort; locks, statistics and maintenance
 * are the local tier's. With no remote (today) every call is the local
 * tier's own.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"
#include "store/object.h"
#include "store/remote/remote.h"
#include "store/store.h"

/* Each remote, and whether it failed: a remote that answered with an error or
 * a timeout is skipped for the rest of the store's life. */
typedef struct remote_slot {
    fi_remote *remote;
    atomic_int failed;
} remote_slot;

struct fi_store {
    fi_local *local;
    remote_slot *remotes; /* asked in order after the local tier */
    size_t remote_count;
};

int fi_store_open(fi_store **out, const char *dir, unsigned flags, int64_t max_bytes)
{
    int rc = 0;
    fi_store *st = NULL;
    if (!out || !dir || !*dir) return fi__error(FI_EINVALID, "fi_store_open: no cache directory");
    *out = NULL;
    if (!(st = fi__calloc(1, sizeof *st))) FI_FAIL(FI_ENOMEM, "out of memory opening the cache");
    FI_TRY(fi_local_open(&st->local, dir, flags, max_bytes));
    *out = st;
    st = NULL;
out:
    fi_store_close(st);
    return rc;
}

void fi_store_close(fi_store *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->remote_count; i++)
        st->remotes[i].remote->ops->close(st->remotes[i].remote);
    fi__free(st->remotes);
    fi_local_close(st->local);
    fi__free(st);
}

int fi_store_add_remote(fi_store *st, fi_remote *remote)
{
    remote_slot *grown;
    if (!remote) return fi__error(FI_EINVALID, "fi_store_add_remote: NULL argument");
    if (!st) {
        remote->ops->close(remote);
        return fi__error(FI_EINVALID, "fi_store_add_remote: NULL argument");
    }
    if (!(grown = fi__realloc(st->remotes, (st->remote_count + 1) * sizeof *grown))) {
        remote->ops->close(remote);
        return fi__error(FI_ENOMEM, "out of memory adding a remote cache");
    }
    st->remotes = grown;
    memset(&grown[st->remote_count], 0, sizeof *grown);
    grown[st->remote_count++].remote = remote;
    return 0;
}

const char *fi_store_dir(const fi_store *st) { return st ? fi_local_dir(st->local) : NULL; }

int fi_store_read_only(const fi_store *st) { return st && fi_local_read_only(st->local); }

/* A remote answered with an error or a timeout: said once, skipped from now on. */
static void remote_failed(remote_slot *slot, fi_remote_result res, const char *verb)
{
    const char *words = fi_last_error(); /* the backend's, cleared before the call */
    if (atomic_exchange(&slot->failed, 1)) return;
    fi__log(FI_LOG_WARN, "remote cache %s (%s): %s %s; not using it again in this process%s%s",
            slot->remote->url ? slot->remote->url : "?", slot->remote->ops->name, verb,
            res == FI_REMOTE_TIMEOUT ? "timed out" : "failed", *words ? ": " : "", words);
}

/* Ask one remote for `key`: 0 with the verified payload, FI_ENOTFOUND when
 * it has no good entry, or FI_ENOMEM. */
static int remote_get(remote_slot *slot, const uint8_t key[16], void **out, size_t *out_size,
                      fi_object_meta *meta)
{
    int rc = FI_ENOTFOUND;
    fi_remote *r = slot->remote;
    void *entry = NULL;
    size_t size = 0;
    const void *payload;
    fi_object_header hdr;
    char why[256], hex[33];
    fi__error_clear();
    fi_remote_result res = r->ops->get(r, key, &entry, &size);
    if (res == FI_REMOTE_NOT_FOUND) goto out;
    if (res != FI_REMOTE_OK) {
        remote_failed(slot, res, "get");
        goto out;
    }
    if (fi_object_decode(entry, size, key, &hdr, &payload, why, sizeof why) != FI_OBJECT_OK) {
        /* Not executed, not written back; removed so that it is replaced. */
        fi_key_hex(hex, key);
        fi__log(FI_LOG_WARN, "remote cache %s: entry %s %s; ignored it and removed it",
                r->url ? r->url : "?", hex, why);
        fi__error_clear();
        res = r->ops->remove(r, key);
        if (res != FI_REMOTE_OK && res != FI_REMOTE_NOT_FOUND) remote_failed(slot, res, "remove");
        goto out;
    }
    if (!(*out = fi__malloc((size_t)hdr.payload_size))) {
        rc = fi__error(FI_ENOMEM, "out of memory reading a remote cache entry");
        goto out;
    }
    memcpy(*out, payload, (size_t)hdr.payload_size);
    *out_size = (size_t)hdr.payload_size;
    if (meta) *meta = hdr.meta;
    rc = 0;
out:
    fi__free(entry);
    return rc;
}

int fi_store_get(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                 fi_object_meta *meta)
{
    char local_miss[1024];
    fi_object_meta got;
    if (!st) return fi__error(FI_EINVALID, "fi_store_get: NULL argument");
    int rc = fi_local_get(st->local, key, out, out_size, meta);
    if (rc != FI_ENOTFOUND || st->remote_count == 0) return rc;
    snprintf(local_miss, sizeof local_miss, "%s", fi_last_error());
    for (size_t i = 0; i < st->remote_count; i++) {
        if (atomic_load(&st->remotes[i].failed)) continue;
        rc = remote_get(&st->remotes[i], key, out, out_size, &got);
        if (rc == FI_ENOTFOUND) continue;
        if (rc < 0) return rc;
        /* Write-back: the next process finds it locally. Best effort. */
        if (!fi_local_read_only(st->local) &&
            fi_local_put(st->local, key, *out, *out_size, &got) < 0)
            fi__log(FI_LOG_WARN, "cannot write a remote cache hit to %s: %s",
                    fi_local_dir(st->local), fi_last_error());
        if (meta) *meta = got;
        fi__error_clear();
        return 0;
    }
    return fi__error(FI_ENOTFOUND, "%s", local_miss);
}

int fi_store_put(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta)
{
    char local_err[1024];
    void *entry = NULL;
    size_t entry_size = 0;
    if (!st) return fi__error(FI_EINVALID, "fi_store_put: NULL argument");
    int rc = fi_local_put(st->local, key, data, size, meta);
    if (st->remote_count == 0) return rc;
    /* The remotes hear of it whatever the local tier said; the caller hears
     * only the local tier's answer, and its words. */
    snprintf(local_err, sizeof local_err, "%s", rc < 0 ? fi_last_error() : "");
    fi_object_meta empty = {0};
    if (fi_object_encode(&entry, &entry_size, key, meta ? meta : &empty, data, size) < 0) {
        fi__log(FI_LOG_WARN, "cannot push a cache entry to the remote caches: %s", fi_last_error());
    } else {
        for (size_t i = 0; i < st->remote_count; i++) {
            remote_slot *slot = &st->remotes[i];
            if (atomic_load(&slot->failed)) continue;
            fi__error_clear();
            fi_remote_result res = slot->remote->ops->put(slot->remote, key, entry, entry_size);
            if (res != FI_REMOTE_OK) remote_failed(slot, res, "put");
        }
    }
    fi__free(entry);
    if (rc < 0) return fi__error(rc, "%s", local_err);
    fi__error_clear();
    return 0;
}

int fi_store_lock_key(fi_store *st, const uint8_t key[16], fi_store_lock **out)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_lock_key: NULL argument");
    return fi_local_lock_key(st->local, key, out);
}

void fi_store_set_lock_timeout(fi_store *st, int64_t timeout_ms)
{
    if (st) fi_local_set_lock_timeout(st->local, timeout_ms);
}

void fi_store_unlock(fi_store_lock *lock) { fi_local_unlock(lock); }

int fi_store_stats_add(fi_store *st, const fi_jit_stats *delta)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_stats_add: NULL argument");
    return fi_local_stats_add(st->local, delta);
}

int fi_store_stats_get(fi_store *st, fi_jit_stats *out)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_stats_get: NULL argument");
    return fi_local_stats_get(st->local, out);
}

int fi_store_stats_zero(fi_store *st)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_stats_zero: NULL argument");
    return fi_local_stats_zero(st->local);
}

int fi_store_foreach(fi_store *st, int (*fn)(void *user, const fi_store_row *row), void *user)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_foreach: NULL argument");
    return fi_local_foreach(st->local, fn, user);
}

int fi_store_verify(fi_store *st, int repair, void (*report)(void *user, const char *problem),
                    void *user)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_verify: NULL argument");
    return fi_local_verify(st->local, repair, report, user);
}

int fi_store_clear(fi_store *st)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_clear: NULL argument");
    return fi_local_clear(st->local);
}

int fi_store_gc(fi_store *st, int64_t max_bytes, int64_t older_than)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_gc: NULL argument");
    return fi_local_gc(st->local, max_bytes, older_than);
}
