/*
 * The tier front (see store.h): get walks the local tier, then the remotes
 * (unsealing and verifying what they return, writing it back); put stores
 * locally, then pushes to the writable remotes best effort; the build lock
 * is the local tier's flock plus the fleet's lease in a remote; statistics
 * and maintenance are the local tier's. This file holds the policy for a
 * sick remote (back-off, one message per period) and counts the remote_*
 * statistics.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"
#include "store/object.h"
#include "store/remote/remote.h"
#include "store/seal.h"
#include "store/store.h"

/* The remote_* statistics, counted here until the caller saves them. */
typedef struct remote_counts {
    atomic_llong hits, misses, errors, corrupt, bytes_in, bytes_out;
} remote_counts;

/* Each remote, its back-off (after a failure it is skipped until
 * skip_until_ns, a period that doubles with each failure in a row) and its
 * own counts (the store's count every remote). */
typedef struct remote_slot {
    fi_remote *remote;
    atomic_llong skip_until_ns; /* 0: in use */
    atomic_int failures;        /* in a row */
    remote_counts counts;
} remote_slot;

/* Count `n` of `field` for the remote in `slot` and in the store's total. */
#define COUNT(st, slot, field, n)                                                          \
    (atomic_fetch_add(&(st)->counts.field, (n)), atomic_fetch_add(&(slot)->counts.field, (n)))

struct fi_store {
    fi_local *local;
    remote_slot *remotes; /* asked in order after the local tier */
    size_t remote_count;
    int sealed; /* a fleet secret is set: seal holds its MAC key */
    fi_seal_key seal;
    remote_counts counts;
};

int fi_store_open(fi_store **out, const char *dir, unsigned flags, int64_t max_bytes)
{
    int rc = 0;
    fi_store *st = NULL;
    if (!out || !dir || !*dir) return fi__error(FI_EINVALID, "no cache directory given");
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

int fi_store_set_secret(fi_store *st, const char *secret)
{
    if (!st || !secret) return fi__error(FI_EINVALID, "fi_store_set_secret: NULL argument");
    int rc = fi_seal_key_derive(&st->seal, secret);
    if (rc == 0) st->sealed = 1;
    return rc;
}

const char *fi_store_dir(const fi_store *st) { return st ? fi_local_dir(st->local) : NULL; }

int fi_store_read_only(const fi_store *st) { return st && fi_local_read_only(st->local); }

int fi_store_has_local(fi_store *st, const uint8_t key[16])
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_has_local: NULL argument");
    return fi_local_has(st->local, key);
}

/* ---- a remote's health ------------------------------------------------------ */

static int remote_usable(remote_slot *slot)
{
    int64_t until = atomic_load(&slot->skip_until_ns);
    return until == 0 || fi__now_ns() >= until;
}

static int remote_writable(remote_slot *slot)
{
    return !slot->remote->config.read_only && remote_usable(slot);
}

/* A remote answered: a back-off, if any, is over. */
static void remote_answered(remote_slot *slot)
{
    if (atomic_load(&slot->failures) == 0) return;
    atomic_store(&slot->failures, 0);
    if (atomic_exchange(&slot->skip_until_ns, 0) != 0)
        fi__log(FI_LOG_INFO, "remote cache %s answers again", slot->remote->config.url);
}

/* A remote failed: counted, skipped for its back-off period, and said once
 * per period (a failure seen while another thread's back-off is already
 * running says nothing). */
static void remote_failed(fi_store *st, remote_slot *slot, fi_remote_result res, const char *verb)
{
    const fi_remote_config *cfg = &slot->remote->config;
    const char *words = fi_last_error(); /* the backend's, cleared before the call */
    COUNT(st, slot, errors, 1);
    int in_row = atomic_fetch_add(&slot->failures, 1);
    int64_t period_ms = cfg->backoff_ms;
    for (int i = 0; i < in_row && period_ms < FI_REMOTE_BACKOFF_MAX_MS; i++) period_ms *= 2;
    if (period_ms > FI_REMOTE_BACKOFF_MAX_MS) period_ms = FI_REMOTE_BACKOFF_MAX_MS;
    int64_t now = fi__now_ns(), until = now + period_ms * 1000000;
    int64_t before = atomic_exchange(&slot->skip_until_ns, until);
    if (before != 0 && before > now) return;
    fi__log(FI_LOG_WARN, "remote cache %s (%s): %s %s%s%s; serving from the local cache and "
            "compiles, trying it again in %lld ms", cfg->url, slot->remote->ops->name, verb,
            res == FI_REMOTE_TIMEOUT ? "timed out" : "failed", *words ? ": " : "", words,
            (long long)period_ms);
}

/* ---- get ---------------------------------------------------------------------- */

/* A value from a remote that must not be used: counted, said, never loaded,
 * and removed (when the remote is writable) so that a good one replaces it. */
static void remote_bad(fi_store *st, remote_slot *slot, const uint8_t key[16], const char *why)
{
    fi_remote *r = slot->remote;
    char hex[33];
    fi_key_hex(hex, key);
    COUNT(st, slot, corrupt, 1);
    fi__log(FI_LOG_WARN, "remote cache %s: entry %s %s; not used%s", r->config.url, hex, why,
            r->config.read_only ? " (read-only remote: left in place)" : ", removed");
    if (r->config.read_only) return;
    fi__error_clear();
    fi_remote_result res = r->ops->remove(r, key);
    if (res != FI_REMOTE_OK && res != FI_REMOTE_NOT_FOUND) remote_failed(st, slot, res, "remove");
}

/* Ask one remote for `key`: 0 with the verified payload, FI_ENOTFOUND when
 * it has no good entry, or FI_ENOMEM. `again`: the second look of one miss,
 * whose first look counted the remote's miss. */
static int remote_get(fi_store *st, remote_slot *slot, const uint8_t key[16], void **out,
                      size_t *out_size, fi_object_meta *meta, int again)
{
    int rc = FI_ENOTFOUND;
    fi_remote *r = slot->remote;
    void *value = NULL;
    size_t size = 0, entry_size = 0;
    const void *payload, *entry;
    fi_object_header hdr;
    char why[256];
    fi__error_clear();
    fi_remote_result res = r->ops->get(r, key, &value, &size);
    if (res == FI_REMOTE_NOT_FOUND) {
        remote_answered(slot);
        if (!again) COUNT(st, slot, misses, 1);
        goto out;
    }
    if (res == FI_REMOTE_BAD) { /* a value that is no entry: the server is sound */
        remote_answered(slot);
        snprintf(why, sizeof why, "%s", fi_last_error());
        remote_bad(st, slot, key, why);
        goto out;
    }
    if (res != FI_REMOTE_OK) {
        remote_failed(st, slot, res, "get");
        goto out;
    }
    remote_answered(slot);
    COUNT(st, slot, bytes_in, (long long)size);
    if (fi_seal_unwrap(&entry, &entry_size, st->sealed ? &st->seal : NULL, key, value, size, why,
                       sizeof why) != FI_OBJECT_OK ||
        fi_object_decode(entry, entry_size, key, &hdr, &payload, why, sizeof why) != FI_OBJECT_OK) {
        remote_bad(st, slot, key, why);
        goto out;
    }
    if (!(*out = fi__malloc((size_t)hdr.payload_size))) {
        rc = fi__error(FI_ENOMEM, "out of memory reading a remote cache entry");
        goto out;
    }
    memcpy(*out, payload, (size_t)hdr.payload_size);
    *out_size = (size_t)hdr.payload_size;
    if (meta) *meta = hdr.meta;
    COUNT(st, slot, hits, 1);
    rc = 0;
out:
    fi__free(value);
    return rc;
}

static int lookup(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                  fi_object_meta *meta, fi_store_tier *tier, int again)
{
    char local_miss[1024];
    fi_object_meta got;
    if (!st) return fi__error(FI_EINVALID, "fi_store_get: NULL argument");
    if (tier) *tier = FI_STORE_TIER_LOCAL;
    int rc = fi_local_get(st->local, key, out, out_size, meta);
    if (rc != FI_ENOTFOUND || st->remote_count == 0) return rc;
    snprintf(local_miss, sizeof local_miss, "%s", fi_last_error());
    for (size_t i = 0; i < st->remote_count; i++) {
        if (!remote_usable(&st->remotes[i])) continue;
        /* A read-only remote is not asked again: this host waited for no
         * build there, and a bad value in it was counted and left in place. */
        if (again && st->remotes[i].remote->config.read_only) continue;
        rc = remote_get(st, &st->remotes[i], key, out, out_size, &got, again);
        if (rc == FI_ENOTFOUND) continue;
        if (rc < 0) return rc;
        /* Write-back: the next process finds it locally. Best effort. */
        if (!fi_local_read_only(st->local) &&
            fi_local_put(st->local, key, *out, *out_size, &got, NULL) < 0)
            fi__log(FI_LOG_WARN, "cannot write a remote cache hit to %s: %s",
                    fi_local_dir(st->local), fi_last_error());
        if (meta) *meta = got;
        if (tier) *tier = FI_STORE_TIER_REMOTE;
        fi__error_clear();
        return 0;
    }
    return fi__error(FI_ENOTFOUND, "%s", local_miss);
}

int fi_store_lookup(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                    fi_object_meta *meta, fi_store_tier *tier)
{
    return lookup(st, key, out, out_size, meta, tier, 0);
}

int fi_store_lookup_again(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                          fi_object_meta *meta, fi_store_tier *tier)
{
    return lookup(st, key, out, out_size, meta, tier, 1);
}

int fi_store_get(fi_store *st, const uint8_t key[16], void **out, size_t *out_size,
                 fi_object_meta *meta)
{
    return fi_store_lookup(st, key, out, out_size, meta, NULL);
}

/* ---- put ---------------------------------------------------------------------- */

/* The value remotes hold for this entry (sealed when there is a secret). */
static int remote_value(fi_store *st, void **out, size_t *out_size, const uint8_t key[16],
                        const void *data, size_t size, const fi_object_meta *meta)
{
    void *entry = NULL;
    size_t entry_size = 0;
    fi_object_meta empty = {0};
    int rc = fi_object_encode(&entry, &entry_size, key, meta ? meta : &empty, data, size);
    if (rc == 0)
        rc = fi_seal_wrap(out, out_size, st->sealed ? &st->seal : NULL, key, entry, entry_size);
    fi__free(entry);
    return rc;
}

static void remote_put(fi_store *st, remote_slot *slot, const uint8_t key[16], const void *value,
                       size_t size)
{
    fi__error_clear();
    fi_remote_result res = slot->remote->ops->put(slot->remote, key, value, size);
    if (res == FI_REMOTE_BAD) { /* too large for a remote: the local tier keeps it */
        char hex[33];
        fi_key_hex(hex, key);
        fi__log(FI_LOG_INFO, "remote cache %s: entry %s %s; kept in the local cache only",
                slot->remote->config.url, hex, fi_last_error());
        return;
    }
    if (res != FI_REMOTE_OK) {
        remote_failed(st, slot, res, "put");
        return;
    }
    remote_answered(slot);
    COUNT(st, slot, bytes_out, (long long)size);
}

/* Push to every writable remote; `only_missing` asks each first. */
static void push(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta, int only_missing)
{
    void *value = NULL;
    size_t value_size = 0;
    for (size_t i = 0; i < st->remote_count; i++) {
        remote_slot *slot = &st->remotes[i];
        if (!remote_writable(slot)) continue;
        if (only_missing) {
            fi__error_clear();
            fi_remote_result res = slot->remote->ops->has(slot->remote, key);
            if (res == FI_REMOTE_OK) continue;
            if (res != FI_REMOTE_NOT_FOUND) {
                remote_failed(st, slot, res, "has");
                continue;
            }
        }
        if (!value && remote_value(st, &value, &value_size, key, data, size, meta) < 0) {
            fi__log(FI_LOG_WARN, "cannot push a cache entry to the remote caches: %s",
                    fi_last_error());
            return;
        }
        remote_put(st, slot, key, value, value_size);
    }
    fi__free(value);
}

int fi_store_put(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                 const fi_object_meta *meta)
{
    return fi_store_put_counted(st, key, data, size, meta, NULL);
}

int fi_store_put_counted(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                         const fi_object_meta *meta, int *out_added)
{
    char local_err[1024];
    if (!st) return fi__error(FI_EINVALID, "fi_store_put: NULL argument");
    int rc = fi_local_put(st->local, key, data, size, meta, out_added);
    if (st->remote_count == 0) return rc;
    /* The remotes hear of it whatever the local tier said; the caller hears
     * only the local tier's answer, and its words. */
    snprintf(local_err, sizeof local_err, "%s", rc < 0 ? fi_last_error() : "");
    push(st, key, data, size, meta, 0);
    if (rc < 0) return fi__error(rc, "%s", local_err);
    fi__error_clear();
    return 0;
}

void fi_store_publish(fi_store *st, const uint8_t key[16], const void *data, size_t size,
                      const fi_object_meta *meta)
{
    if (st && st->remote_count) push(st, key, data, size, meta, 1);
}

/* ---- the build lock: local flock, then the fleet's lease ---------------------- */

struct fi_store_lock {
    fi_local_lock *local;
    /* The fleet lease, when one is held: a thread renews it every third of
     * its life until the lock is released. */
    fi_store *st;
    remote_slot *slot;
    uint8_t key[16], token[16];
    pthread_t renewer;
    int renewing;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int stop; /* guarded by mu */
};

static void *renew_lease(void *arg)
{
    fi_store_lock *lock = arg;
    fi_remote *r = lock->slot->remote;
    int ttl = r->config.lease_ms;
    pthread_mutex_lock(&lock->mu);
    while (!lock->stop) {
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        int64_t ns = at.tv_nsec + (int64_t)ttl / 3 * 1000000;
        at.tv_sec += ns / 1000000000;
        at.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&lock->wake, &lock->mu, &at);
        if (lock->stop) break;
        pthread_mutex_unlock(&lock->mu);
        /* A lost or failed renewal only lets another host build the key too. */
        fi__error_clear();
        fi_remote_result res = r->ops->lease(r, lock->key, lock->token, ttl);
        if (res != FI_REMOTE_OK && res != FI_REMOTE_HELD)
            remote_failed(lock->st, lock->slot, res, "lease renewal");
        pthread_mutex_lock(&lock->mu);
    }
    pthread_mutex_unlock(&lock->mu);
    return NULL;
}

/* A token no other holder has: 16 random bytes from the kernel, else the
 * pid, the clock and an address (unique enough for a lease). */
static void lease_token(uint8_t token[16])
{
    static atomic_llong serial;
    int fd = fi__open("/dev/urandom", 0, 0);
    if (fd >= 0 && fi__read_full(fd, token, 16) == 0) {
        fi__close(fd);
        return;
    }
    if (fd >= 0) fi__close(fd);
    int64_t words[2] = {fi__now_ns() ^ ((int64_t)getpid() << 40), atomic_fetch_add(&serial, 1)};
    memcpy(token, words, 16);
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0) {}
}

/* Take the fleet lease for `lock->key` in `slot`'s remote, or wait (see
 * fi_store_lock_key). Returns with the lease held (and renewed) or not. */
static void fleet_lease(fi_store *st, remote_slot *slot, fi_store_lock *lock)
{
    fi_remote *r = slot->remote;
    const fi_remote_config *cfg = &r->config;
    int64_t start = fi__now_ns(), poll_ms = 10;
    char hex[33];
    lease_token(lock->token);
    for (int waited = 0;; waited = 1) {
        fi__error_clear();
        fi_remote_result res = r->ops->lease(r, lock->key, lock->token, cfg->lease_ms);
        if (res == FI_REMOTE_OK) {
            remote_answered(slot);
            lock->st = st;
            lock->slot = slot;
            pthread_condattr_t attr; /* renew_lease's waits are on the monotonic clock */
            pthread_condattr_init(&attr);
            pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
            pthread_mutex_init(&lock->mu, NULL);
            pthread_cond_init(&lock->wake, &attr);
            pthread_condattr_destroy(&attr);
            lock->renewing = pthread_create(&lock->renewer, NULL, renew_lease, lock) == 0;
            if (!lock->renewing) { /* the lease then lives its ttl: still one build */
                pthread_cond_destroy(&lock->wake);
                pthread_mutex_destroy(&lock->mu);
            }
            return;
        }
        if (res != FI_REMOTE_HELD) {
            remote_failed(st, slot, res, "lease");
            return;
        }
        /* Another host builds it: done when its entry is there. */
        fi__error_clear();
        res = r->ops->has(r, lock->key);
        if (res == FI_REMOTE_OK) return;
        if (res != FI_REMOTE_NOT_FOUND) {
            remote_failed(st, slot, res, "has");
            return;
        }
        int64_t waited_ms = (fi__now_ns() - start) / 1000000;
        if (waited_ms >= cfg->wait_ms) {
            fi_key_hex(hex, lock->key);
            fi__log(FI_LOG_WARN, "remote cache %s: waited %lld ms for another host's build of "
                    "%s; building it here", cfg->url, (long long)waited_ms, hex);
            return;
        }
        if (!waited) {
            fi_key_hex(hex, lock->key);
            fi__log(FI_LOG_INFO, "remote cache %s: another host is building %s; waiting for it",
                    cfg->url, hex);
        }
        sleep_ms(poll_ms);
        if (poll_ms < 100) poll_ms *= 2;
    }
}

int fi_store_lock_key(fi_store *st, const uint8_t key[16], fi_store_lock **out)
{
    int rc = 0;
    fi_store_lock *lock = NULL;
    if (!st || !key || !out) return fi__error(FI_EINVALID, "fi_store_lock_key: NULL argument");
    *out = NULL;
    if (!(lock = fi__calloc(1, sizeof *lock))) return fi__error(FI_ENOMEM, "out of memory");
    FI_TRY(fi_local_lock_key(st->local, key, &lock->local));
    memcpy(lock->key, key, 16);
    if (!fi_local_read_only(st->local))
        for (size_t i = 0; i < st->remote_count; i++) {
            remote_slot *slot = &st->remotes[i];
            if (!slot->remote->ops->lease || !remote_writable(slot)) continue;
            fleet_lease(st, slot, lock);
            break; /* one remote holds the fleet's leases */
        }
    fi__error_clear();
    *out = lock;
    lock = NULL;
out:
    fi_store_unlock(lock);
    return rc;
}

void fi_store_set_lock_timeout(fi_store *st, int64_t timeout_ms)
{
    if (st) fi_local_set_lock_timeout(st->local, timeout_ms);
}

void fi_store_unlock(fi_store_lock *lock)
{
    if (!lock) return;
    if (lock->slot) {
        if (lock->renewing) {
            pthread_mutex_lock(&lock->mu);
            lock->stop = 1;
            pthread_cond_signal(&lock->wake);
            pthread_mutex_unlock(&lock->mu);
            pthread_join(lock->renewer, NULL);
            pthread_cond_destroy(&lock->wake);
            pthread_mutex_destroy(&lock->mu);
        }
        fi_remote *r = lock->slot->remote;
        fi__error_clear();
        fi_remote_result res = r->ops->release(r, lock->key, lock->token);
        if (res != FI_REMOTE_OK && res != FI_REMOTE_NOT_FOUND)
            remote_failed(lock->st, lock->slot, res, "release");
    }
    fi_local_unlock(lock->local);
    fi__free(lock);
}

/* ---- statistics and maintenance: the local tier's ------------------------------ */

/* Move (take) or copy counts `c` into `s`'s remote_* fields. */
static void remote_counts_into(remote_counts *c, fi_jit_stats *s, int take)
{
#define MOVE(field)                                                                        \
    s->remote_##field += take ? atomic_exchange(&c->field, 0) : atomic_load(&c->field);
    MOVE(hits) MOVE(misses) MOVE(errors) MOVE(corrupt) MOVE(bytes_in) MOVE(bytes_out)
#undef MOVE
}

/* Give back to `c` what remote_counts_into took into `s`, less what `s`
 * held before (`before`; NULL: nothing). */
static void remote_counts_back(remote_counts *c, const fi_jit_stats *s, const fi_jit_stats *before)
{
#define BACK(field)                                                                        \
    atomic_fetch_add(&c->field, s->remote_##field - (before ? before->remote_##field : 0));
    BACK(hits) BACK(misses) BACK(errors) BACK(corrupt) BACK(bytes_in) BACK(bytes_out)
#undef BACK
}

int fi_store_stats_add(fi_store *st, const fi_jit_stats *delta)
{
    if (!st || !delta) return fi__error(FI_EINVALID, "fi_store_stats_add: NULL argument");
    fi_jit_stats all = *delta;
    fi_local_remote_stats *each = NULL;
    size_t each_count = 0;
    remote_counts_into(&st->counts, &all, 1);
    /* Each remote's own counts go with the totals; without memory for them
     * they wait in their slots for the next save. */
    if (st->remote_count && (each = fi__calloc(st->remote_count, sizeof *each))) {
        each_count = st->remote_count;
        for (size_t i = 0; i < each_count; i++) {
            snprintf(each[i].remote, sizeof each[i].remote, "%s", st->remotes[i].remote->config.url);
            remote_counts_into(&st->remotes[i].counts, &each[i].counts, 1);
        }
    }
    int rc = fi_local_stats_add(st->local, &all, each, each_count);
    if (rc < 0) { /* kept for the next save */
        remote_counts_back(&st->counts, &all, delta);
        for (size_t i = 0; i < each_count; i++)
            remote_counts_back(&st->remotes[i].counts, &each[i].counts, NULL);
    }
    fi__free(each);
    return rc;
}

typedef struct remote_stats_call {
    int (*fn)(void *user, const char *remote, const fi_jit_stats *counts);
    void *user;
} remote_stats_call;

static int remote_stats_row(void *user, const fi_local_remote_stats *r)
{
    remote_stats_call *call = user;
    return call->fn(call->user, r->remote, &r->counts);
}

int fi_store_remote_stats_foreach(fi_store *st,
                                  int (*fn)(void *user, const char *remote,
                                            const fi_jit_stats *counts),
                                  void *user)
{
    if (!st || !fn) return fi__error(FI_EINVALID, "fi_store_remote_stats_foreach: NULL argument");
    remote_stats_call call = {fn, user};
    return fi_local_remote_stats_foreach(st->local, remote_stats_row, &call);
}

int fi_store_stats_get(fi_store *st, fi_jit_stats *out)
{
    if (!st) return fi__error(FI_EINVALID, "fi_store_stats_get: NULL argument");
    int rc = fi_local_stats_get(st->local, out);
    if (rc == 0) remote_counts_into(&st->counts, out, 0); /* not yet saved */
    return rc;
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
