/*
 * The Redis remote tier (remote.h), through hiredis (opened at run time,
 * hiredis_api.h). Values live under
 *   PREFIX:obj:<32 hex>     an entry (sealed when the fleet has a secret)
 *   PREFIX:lease:<32 hex>   a build lease: a random token, with an expiry
 * so several fleets can share one server under different prefixes.
 * Eviction is the server's (maxmemory and an LRU policy; see docs/fleet.md).
 *
 * Threads: connections are kept in a small pool; a call takes one (or
 * makes one, bounded by the connect timeout), uses it alone, and gives it
 * back when it is still sound. Every read and write on a connection is
 * bounded by the operation timeout, so a stopped server costs one timeout.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/remote/hiredis_api.h"
#include "store/remote/remote.h"
#include "store/remote/sigpipe.h"

/* Idle connections kept for the next call; more threads than this at once
 * still work, their extra connections are closed after the call. */
#define POOL_MAX 8
#define KEY_MAX 128

typedef struct redis_remote {
    fi_remote base;
    pthread_mutex_t mu; /* guards idle */
    redisContext *idle[POOL_MAX];
    int idle_count;
} redis_remote;

/* Take the lease, or extend it when this token holds it: 1 taken, 0 held
 * by another. A live holder's lease is a 16-byte token that expires within
 * the lease time (ARGV[2], ms), as its holder renews it; anything else
 * under the name (no expiry, a longer one, another type or size) would
 * stall every host until its wait ran out, so it is taken over. */
static const char LEASE_SCRIPT[] =
    "local k = KEYS[1] "
    "if redis.call('TYPE', k).ok == 'string' then "
    "  local v = redis.call('GET', k) "
    "  if v == ARGV[1] then redis.call('PEXPIRE', k, ARGV[2]) return 1 end "
    "  local ttl = redis.call('PTTL', k) "
    "  if string.len(v) == 16 and ttl > 0 and ttl <= tonumber(ARGV[2]) then return 0 end "
    "end "
    "redis.call('DEL', k) "
    "redis.call('SET', k, ARGV[1], 'PX', ARGV[2]) return 1";
/* Delete the lease only if this token still holds it (it may have expired
 * and been taken by another host meanwhile). */
static const char RELEASE_SCRIPT[] =
    "if redis.call('TYPE', KEYS[1]).ok == 'string' and "
    "redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";

static struct timeval timeval_ms(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* hiredis writes with write(2): SIGPIPE is held off each call (sigpipe.h). */

/* What a failed connection means for the caller, with the words set. */
static fi_remote_result connection_failed(redis_remote *r, const redisContext *c, int err,
                                          const char *what)
{
    int timed_out = c && c->err == REDIS_ERR_IO &&
                    (err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT || err == EINPROGRESS);
    (void)r;
    fi__error(FI_EIO, "%s%s", what, c ? c->errstr : "out of memory");
    return timed_out ? FI_REMOTE_TIMEOUT : FI_REMOTE_ERROR;
}

/* A reply that must be an OK status (AUTH, SELECT). */
static int reply_ok(redisReply *reply)
{
    return reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
}

static fi_remote_result connect_new(redis_remote *r, redisContext **out)
{
    const fi_remote_config *cfg = &r->base.config;
    struct timeval connect_tv = timeval_ms(cfg->connect_timeout_ms);
    fi_remote_result res = FI_REMOTE_OK;
    redisReply *reply = NULL;
    const fi_hiredis_api *hr = fi__hiredis();
    redisContext *c = cfg->unix_socket ? hr->ConnectUnixWithTimeout(cfg->path, connect_tv)
                                       : hr->ConnectWithTimeout(cfg->host, cfg->port, connect_tv);
    int err = errno;
    *out = NULL;
    if (!c || c->err) {
        res = connection_failed(r, c, err, "cannot connect: ");
        goto out;
    }
    if (hr->SetTimeout(c, timeval_ms(cfg->timeout_ms)) != REDIS_OK) {
        res = connection_failed(r, c, errno, "cannot set the timeout: ");
        goto out;
    }
    if (cfg->password[0]) {
        const char *argv[3] = {"AUTH", cfg->user, cfg->password};
        int first = cfg->user[0] ? 0 : 1;
        argv[first] = "AUTH";
        reply = hr->CommandArgv(c, 3 - first, argv + first, NULL);
        if (!reply) {
            res = connection_failed(r, c, errno, "AUTH: ");
            goto out;
        }
        if (!reply_ok(reply)) {
            /* Never echo what was sent: the server's words only. */
            fi__error(FI_EIO, "the server refused the password (%.200s)",
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            res = FI_REMOTE_ERROR;
            goto out;
        }
        hr->FreeReplyObject(reply);
        reply = NULL;
    }
    if (cfg->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", cfg->db);
        const char *argv[2] = {"SELECT", db};
        reply = hr->CommandArgv(c, 2, argv, NULL);
        if (!reply) {
            res = connection_failed(r, c, errno, "SELECT: ");
            goto out;
        }
        if (!reply_ok(reply)) {
            fi__error(FI_EIO, "cannot select database %d (%.200s)", cfg->db,
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
            res = FI_REMOTE_ERROR;
            goto out;
        }
    }
    *out = c;
    c = NULL;
out:
    if (reply) hr->FreeReplyObject(reply);
    if (c) hr->Free(c);
    return res;
}

/* A connection for one call: an idle one, or a new one (*reused says which). */
static fi_remote_result take(redis_remote *r, redisContext **out, int *reused)
{
    pthread_mutex_lock(&r->mu);
    *out = r->idle_count ? r->idle[--r->idle_count] : NULL;
    pthread_mutex_unlock(&r->mu);
    *reused = *out != NULL;
    return *out ? FI_REMOTE_OK : connect_new(r, out);
}

static void give_back(redis_remote *r, redisContext *c)
{
    pthread_mutex_lock(&r->mu);
    if (r->idle_count < POOL_MAX) {
        r->idle[r->idle_count++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    if (c) fi__hiredis()->Free(c);
}

/* The server went away or stalled: the idle connections are as stale as
 * the one that failed. */
static void drop_idle(redis_remote *r)
{
    redisContext *stale[POOL_MAX];
    pthread_mutex_lock(&r->mu);
    int n = r->idle_count;
    memcpy(stale, r->idle, (size_t)n * sizeof *stale);
    r->idle_count = 0;
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < n; i++) fi__hiredis()->Free(stale[i]);
}

/* Run one command; `*out` is its reply (never an error reply: that is
 * FI_REMOTE_ERROR with the server's words, or FI_REMOTE_BAD for WRONGTYPE:
 * the key holds a value fijit never writes). A pooled connection that turns
 * out closed (a restarted server) is replaced once; a timeout is not
 * retried, so one call costs at most one timeout. */
static fi_remote_result command(redis_remote *r, redisReply **out, int argc, const char **argv,
                                const size_t *lens)
{
    fi_remote_result res;
    fi_sigpipe_guard guard;
    redisContext *c = NULL;
    int reused = 0;
    *out = NULL;
    if (fi__fault(FI_FAULT_REMOTE)) {
        fi__error(FI_EIO, "%s: injected fault", argv[0]);
        return FI_REMOTE_ERROR;
    }
    fi__sigpipe_block(&guard);
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((res = take(r, &c, &reused)) != FI_REMOTE_OK) break;
        redisReply *reply = fi__hiredis()->CommandArgv(c, argc, argv, lens);
        int err = errno;
        if (reply) {
            give_back(r, c);
            if (reply->type == REDIS_REPLY_ERROR) {
                fi__error(FI_EIO, "%s: %.300s", argv[0], reply->str);
                res = strncmp(reply->str, "WRONGTYPE", 9) == 0 ? FI_REMOTE_BAD : FI_REMOTE_ERROR;
                fi__hiredis()->FreeReplyObject(reply);
            } else {
                *out = reply;
            }
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "%s: ", argv[0]);
        res = connection_failed(r, c, err, what);
        fi__hiredis()->Free(c);
        drop_idle(r);
        if (!reused || res == FI_REMOTE_TIMEOUT) break;
    }
    fi__sigpipe_restore(&guard);
    return res;
}

static void key_name(char out[KEY_MAX], const redis_remote *r, const char *kind,
                     const uint8_t key[16])
{
    char hex[33];
    fi_key_hex(hex, key);
    snprintf(out, KEY_MAX, "%s:%s:%s", r->base.config.prefix, kind, hex);
}

static fi_remote_result unexpected(redis_remote *r, redisReply *reply, const char *verb)
{
    (void)r;
    fi__error(FI_EIO, "%s: unexpected reply type %d", verb, reply->type);
    fi__hiredis()->FreeReplyObject(reply);
    return FI_REMOTE_ERROR;
}

static fi_remote_result read_only(redis_remote *r, const char *verb)
{
    (void)r;
    fi__error(FI_EINVALID, "%s: the remote is read-only", verb);
    return FI_REMOTE_ERROR;
}

/* A command whose reply is an integer: `*value` receives it. */
static fi_remote_result integer_command(redis_remote *r, long long *value, int argc,
                                        const char **argv, const size_t *lens)
{
    redisReply *reply;
    fi_remote_result res = command(r, &reply, argc, argv, lens);
    if (res != FI_REMOTE_OK) return res;
    if (reply->type != REDIS_REPLY_INTEGER) return unexpected(r, reply, argv[0]);
    *value = reply->integer;
    fi__hiredis()->FreeReplyObject(reply);
    return FI_REMOTE_OK;
}

/* `size` bytes, or at least that many when `at_least`. */
static fi_remote_result too_large(long long size, int at_least)
{
    fi__error(FI_EIO, "is %s%lld bytes, more than a remote value may be (%zu)",
              at_least ? "at least " : "", size, FI_REMOTE_VALUE_MAX);
    return FI_REMOTE_BAD;
}

/* The size first, so that a value too large to be an entry is refused
 * before a byte of it is read (and one of another type answers WRONGTYPE);
 * then at most FI_REMOTE_VALUE_MAX + 1 bytes, should it have grown since.
 * An empty value is no entry either way: a miss, which a put replaces. */
static fi_remote_result redis_get(fi_remote *base, const uint8_t key[16], void **out,
                                  size_t *out_size)
{
    redis_remote *r = (redis_remote *)base;
    char name[KEY_MAX], last[24];
    redisReply *reply;
    long long size = 0;
    key_name(name, r, "obj", key);
    const char *size_argv[2] = {"STRLEN", name};
    fi_remote_result res = integer_command(r, &size, 2, size_argv, NULL);
    if (res == FI_REMOTE_BAD) fi__error(FI_EIO, "holds a Redis value of another type (WRONGTYPE)");
    if (res != FI_REMOTE_OK) return res;
    if (size <= 0) return FI_REMOTE_NOT_FOUND;
    if ((unsigned long long)size > FI_REMOTE_VALUE_MAX) return too_large(size, 0);
    snprintf(last, sizeof last, "%zu", FI_REMOTE_VALUE_MAX);
    const char *argv[4] = {"GETRANGE", name, "0", last};
    if ((res = command(r, &reply, 4, argv, NULL)) != FI_REMOTE_OK) return res;
    if (reply->type != REDIS_REPLY_STRING) return unexpected(r, reply, "GETRANGE");
    if (reply->len == 0) {
        fi__hiredis()->FreeReplyObject(reply);
        return FI_REMOTE_NOT_FOUND;
    }
    if (reply->len > FI_REMOTE_VALUE_MAX) {
        fi__hiredis()->FreeReplyObject(reply);
        return too_large((long long)FI_REMOTE_VALUE_MAX + 1, 1); /* it grew meanwhile */
    }
    if (!(*out = fi__malloc(reply->len))) {
        fi__error(FI_ENOMEM, "out of memory reading %zu bytes", reply->len);
        fi__hiredis()->FreeReplyObject(reply);
        return FI_REMOTE_ERROR;
    }
    memcpy(*out, reply->str, reply->len);
    *out_size = reply->len;
    fi__hiredis()->FreeReplyObject(reply);
    return FI_REMOTE_OK;
}

/* EXISTS or DEL on the value of `key`: OK when there was one, else NOT_FOUND. */
static fi_remote_result value_command(redis_remote *r, const char *verb, const uint8_t key[16])
{
    char name[KEY_MAX];
    long long n = 0;
    key_name(name, r, "obj", key);
    const char *argv[2] = {verb, name};
    fi_remote_result res = integer_command(r, &n, 2, argv, NULL);
    if (res != FI_REMOTE_OK) return res;
    return n > 0 ? FI_REMOTE_OK : FI_REMOTE_NOT_FOUND;
}

static fi_remote_result redis_has(fi_remote *base, const uint8_t key[16])
{
    return value_command((redis_remote *)base, "EXISTS", key);
}

static fi_remote_result redis_put(fi_remote *base, const uint8_t key[16], const void *value,
                                  size_t size)
{
    redis_remote *r = (redis_remote *)base;
    char name[KEY_MAX], ttl[24];
    redisReply *reply;
    if (r->base.config.read_only) return read_only(r, "put");
    if (size > FI_REMOTE_VALUE_MAX) return too_large((long long)size, 0);
    key_name(name, r, "obj", key);
    snprintf(ttl, sizeof ttl, "%lld", (long long)r->base.config.ttl_s);
    const char *argv[5] = {"SET", name, value, "EX", ttl};
    const size_t lens[5] = {3, strlen(name), size, 2, strlen(ttl)};
    fi_remote_result res = command(r, &reply, r->base.config.ttl_s ? 5 : 3, argv, lens);
    if (res != FI_REMOTE_OK) return res;
    if (!reply_ok(reply)) return unexpected(r, reply, "SET");
    fi__hiredis()->FreeReplyObject(reply);
    return FI_REMOTE_OK;
}

static fi_remote_result redis_remove(fi_remote *base, const uint8_t key[16])
{
    redis_remote *r = (redis_remote *)base;
    if (r->base.config.read_only) return read_only(r, "remove");
    return value_command(r, "DEL", key);
}

static fi_remote_result redis_lease(fi_remote *base, const uint8_t key[16],
                                    const uint8_t token[16], int ttl_ms)
{
    redis_remote *r = (redis_remote *)base;
    char name[KEY_MAX], ttl[16];
    long long taken = 0;
    if (r->base.config.read_only) return read_only(r, "lease");
    key_name(name, r, "lease", key);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *argv[6] = {"EVAL", LEASE_SCRIPT, "1", name, (const char *)token, ttl};
    const size_t lens[6] = {4, sizeof LEASE_SCRIPT - 1, 1, strlen(name), 16, strlen(ttl)};
    fi_remote_result res = integer_command(r, &taken, 6, argv, lens);
    if (res != FI_REMOTE_OK) return res;
    return taken ? FI_REMOTE_OK : FI_REMOTE_HELD;
}

static fi_remote_result redis_release(fi_remote *base, const uint8_t key[16],
                                      const uint8_t token[16])
{
    redis_remote *r = (redis_remote *)base;
    char name[KEY_MAX];
    long long n = 0;
    if (r->base.config.read_only) return read_only(r, "release");
    key_name(name, r, "lease", key);
    const char *argv[5] = {"EVAL", RELEASE_SCRIPT, "1", name, (const char *)token};
    const size_t lens[5] = {4, sizeof RELEASE_SCRIPT - 1, 1, strlen(name), 16};
    fi_remote_result res = integer_command(r, &n, 5, argv, lens);
    if (res != FI_REMOTE_OK) return res;
    return n > 0 ? FI_REMOTE_OK : FI_REMOTE_NOT_FOUND;
}

static fi_remote_result redis_ping(fi_remote *base)
{
    redis_remote *r = (redis_remote *)base;
    redisReply *reply;
    const char *argv[1] = {"PING"};
    fi_remote_result res = command(r, &reply, 1, argv, NULL);
    if (res != FI_REMOTE_OK) return res;
    if (reply->type != REDIS_REPLY_STATUS) return unexpected(r, reply, "PING");
    fi__hiredis()->FreeReplyObject(reply);
    return FI_REMOTE_OK;
}

/* The INFO fields an operator of a cache needs: what the server is, how
 * full, how it evicts, and how often it is asked in vain. */
static const char *const INFO_FIELDS[] = {
    "redis_version", "used_memory_human", "maxmemory_human", "maxmemory_policy",
    "evicted_keys",  "expired_keys",      "keyspace_hits",   "keyspace_misses",
};

static fi_remote_result redis_describe(fi_remote *base,
                                       void (*line)(void *user, const char *name,
                                                    const char *value),
                                       void *user)
{
    redis_remote *r = (redis_remote *)base;
    redisReply *reply;
    const char *argv[2] = {"INFO", "everything"};
    fi_remote_result res = command(r, &reply, 2, argv, NULL);
    if (res != FI_REMOTE_OK) return res;
    if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_STATUS)
        return unexpected(r, reply, "INFO");
    for (size_t f = 0; f < sizeof INFO_FIELDS / sizeof *INFO_FIELDS; f++) {
        char pattern[64], value[128] = "?";
        snprintf(pattern, sizeof pattern, "\n%s:", INFO_FIELDS[f]);
        const char *at = strstr(reply->str, pattern);
        if (at) {
            at += strlen(pattern);
            size_t n = strcspn(at, "\r\n");
            snprintf(value, sizeof value, "%.*s", (int)(n < 127 ? n : 127), at);
        }
        line(user, INFO_FIELDS[f], value);
    }
    fi__hiredis()->FreeReplyObject(reply);
    return FI_REMOTE_OK;
}

/* One batch of SCAN's keys: their first bytes and sizes, pipelined on one
 * connection. */
static fi_remote_result scan_batch(redis_remote *r, redisReply *keys, size_t head_size,
                                   int (*fn)(void *user, const fi_remote_item *item), void *user,
                                   int *stop)
{
    fi_remote_result res = FI_REMOTE_OK;
    redisContext *c = NULL;
    int reused;
    char last[24];
    size_t prefix_len = strlen(r->base.config.prefix) + 5; /* "PREFIX:obj:" */
    snprintf(last, sizeof last, "%zu", head_size ? head_size - 1 : 0);
    if ((res = take(r, &c, &reused)) != FI_REMOTE_OK) return res;
    for (size_t i = 0; i < keys->elements; i++) {
        const char *name = keys->element[i]->str;
        const char *range[4] = {"GETRANGE", name, "0", last};
        const char *len[2] = {"STRLEN", name};
        fi__hiredis()->AppendCommandArgv(c, 4, range, NULL);
        fi__hiredis()->AppendCommandArgv(c, 2, len, NULL);
    }
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *head = NULL, *size = NULL;
        if (fi__hiredis()->GetReply(c, (void **)&head) != REDIS_OK ||
            fi__hiredis()->GetReply(c, (void **)&size) != REDIS_OK) {
            res = connection_failed(r, c, errno, "SCAN: ");
            if (head) fi__hiredis()->FreeReplyObject(head);
            fi__hiredis()->Free(c);
            return res;
        }
        fi_remote_item item = {{0}, NULL, 0, 0};
        const char *hex = keys->element[i]->str + prefix_len;
        if (!*stop && keys->element[i]->len == prefix_len + 32 && fi_key_from_hex(hex, item.key) == 0 &&
            head->type == REDIS_REPLY_STRING && size->type == REDIS_REPLY_INTEGER) {
            item.head = (const uint8_t *)head->str;
            item.head_size = head->len;
            item.size = size->integer;
            if (item.size > 0) *stop = fn(user, &item);
        }
        fi__hiredis()->FreeReplyObject(head);
        fi__hiredis()->FreeReplyObject(size);
    }
    give_back(r, c);
    return res;
}

static fi_remote_result redis_scan(fi_remote *base, size_t head_size,
                                   int (*fn)(void *user, const fi_remote_item *item), void *user)
{
    redis_remote *r = (redis_remote *)base;
    char pattern[KEY_MAX], cursor[32] = "0";
    int stop = 0;
    fi_remote_result res;
    snprintf(pattern, sizeof pattern, "%s:obj:*", r->base.config.prefix);
    do {
        redisReply *reply;
        const char *argv[6] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "256"};
        if ((res = command(r, &reply, 6, argv, NULL)) != FI_REMOTE_OK) return res;
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
            reply->element[0]->type != REDIS_REPLY_STRING ||
            reply->element[1]->type != REDIS_REPLY_ARRAY)
            return unexpected(r, reply, "SCAN");
        snprintf(cursor, sizeof cursor, "%s", reply->element[0]->str);
        fi_sigpipe_guard guard;
        fi__sigpipe_block(&guard);
        res = scan_batch(r, reply->element[1], head_size, fn, user, &stop);
        fi__sigpipe_restore(&guard);
        fi__hiredis()->FreeReplyObject(reply);
        if (res != FI_REMOTE_OK) return res;
    } while (strcmp(cursor, "0") != 0 && !stop);
    return FI_REMOTE_OK;
}

static void redis_close(fi_remote *base)
{
    redis_remote *r = (redis_remote *)base;
    if (!r) return;
    drop_idle(r);
    pthread_mutex_destroy(&r->mu);
    fi__free(r);
}

static const fi_remote_ops redis_ops = {
    .name = "redis",
    .get = redis_get,
    .has = redis_has,
    .put = redis_put,
    .remove = redis_remove,
    .lease = redis_lease,
    .release = redis_release,
    .ping = redis_ping,
    .describe = redis_describe,
    .scan = redis_scan,
    .close = redis_close,
};

int fi_redis_open(fi_remote **out, const fi_remote_config *config)
{
    redis_remote *r;
    if (!out || !config) return fi__error(FI_EINVALID, "fi_redis_open: NULL argument");
    *out = NULL;
    int rc = fi__hiredis_load(); /* every other function here runs after it */
    if (rc < 0) return rc;
    if (!(r = fi__calloc(1, sizeof *r))) return fi__error(FI_ENOMEM, "out of memory");
    r->base.ops = &redis_ops;
    r->base.config = *config;
    pthread_mutex_init(&r->mu, NULL);
    *out = &r->base;
    return 0;
}
