/*
 * The Redis remote tier against a real redis-server, started by each test on
 * a private unix socket in its temp dir and stopped afterwards:
 *   - URLs: parsing, every bad part named; the password in no message, masked
 *     form or log line, whatever the URL's shape; socket paths sun_path holds;
 *   - two hosts (separate processes and cache dirs): B gets A's compiles as
 *     remote hits and compiles nothing;
 *   - fleet single flight: 8 processes on 4 cache dirs, 2 threads each, on
 *     one cold set: compiles across the fleet == distinct keys;
 *   - faults: the server killed mid-run, paused past the timeouts (extra
 *     latency measured and printed), restarted empty; corrupted, truncated
 *     and foreign values under a valid key; poisoning without the secret; a
 *     read-only remote; a wrong password; values too large or of another
 *     type; leases no live holder can have made;
 *   - statistics: each remote miss and bad value counted once.
 * Most tests work at the store level on small synthetic entries; the three
 * that go through fi_jit_prewarm compile two small decode kernels each.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "check.h"
#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/remote/remote.h"
#include "store/seal.h"
#include "store/store.h"

static const char secret[] = "0123456789abcdef-fleet";

/* Start this test's server; skip the test (loudly, in check.c) when
 * redis-server is missing. */
#define START_REDIS(r, password, options)                                      \
    do {                                                                       \
        int started__ = check_redis_start((r), check_tmpdir, (password), (options)); \
        if (started__ == 1) return;                                            \
        CHECK_MSG(started__ == 0, "redis-server did not start (see %s/redis.log)", check_tmpdir); \
    } while (0)

static const char payload[] = "the bytes of a cubin, for the store's purposes";

/* A direct connection, for what a test does behind the tier's back. */
static redisContext *redis_direct(const check_redis *r)
{
    redisContext *c = redisConnectUnix(r->socket);
    if (c && r->password[0]) freeReplyObject(redisCommand(c, "AUTH %s", r->password));
    return c;
}

static void value_name(char out[128], const uint8_t key[16])
{
    char hex[33];
    fi_key_hex(hex, key);
    snprintf(out, 128, "fijit:obj:%s", hex);
}

static long long redis_exists(redisContext *c, const uint8_t key[16])
{
    char name[128];
    value_name(name, key);
    redisReply *reply = redisCommand(c, "EXISTS %s", name);
    long long n = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    if (reply) freeReplyObject(reply);
    return n;
}

static void redis_set(redisContext *c, const uint8_t key[16], const void *value, size_t size)
{
    char name[128];
    value_name(name, key);
    freeReplyObject(redisCommand(c, "SET %s %b", name, value, size));
}

/* The value Redis holds for `key` (caller frees), or NULL. */
static void *redis_value(redisContext *c, const uint8_t key[16], size_t *size)
{
    char name[128];
    value_name(name, key);
    redisReply *reply = redisCommand(c, "GET %s", name);
    void *copy = NULL;
    if (reply && reply->type == REDIS_REPLY_STRING && (copy = malloc(reply->len))) {
        memcpy(copy, reply->str, reply->len);
        *size = reply->len;
    }
    if (reply) freeReplyObject(reply);
    return copy;
}

/* ---- URLs ---------------------------------------------------------------------- */

TEST(remote_url_parses_and_names_what_is_wrong)
{
    fi_remote_config c;
    char masked[512];
    CHECK_OK(fi_remote_config_parse(&c, "redis://:s%40cret@cache.example:6380/2?prefix=prod&ttl=86400"
                                        "&readonly&timeout=250&connect_timeout=20"));
    CHECK(!c.unix_socket && strcmp(c.host, "cache.example") == 0 && c.port == 6380 && c.db == 2);
    CHECK(strcmp(c.password, "s@cret") == 0 && c.user[0] == '\0');
    CHECK(strcmp(c.prefix, "prod") == 0 && c.ttl_s == 86400 && c.read_only);
    CHECK(c.timeout_ms == 250 && c.connect_timeout_ms == 20);
    CHECK(strstr(c.url, "s%40cret") == NULL && strstr(c.url, "redis://***@cache.example") != NULL);
    CHECK_OK(fi_remote_config_parse(&c, "redis://localhost"));
    CHECK(c.port == 6379 && c.db == 0 && !c.read_only && strcmp(c.prefix, "fijit") == 0);
    CHECK(c.timeout_ms == FI_REMOTE_OPERATION_TIMEOUT_MS &&
          c.connect_timeout_ms == FI_REMOTE_CONNECT_TIMEOUT_MS);
    CHECK_OK(fi_remote_config_parse(&c, "unix:///run/redis/redis.sock?db=3"));
    CHECK(c.unix_socket && strcmp(c.path, "/run/redis/redis.sock") == 0 && c.db == 3);
    CHECK_OK(fi_remote_config_parse(&c, "redis://app:pw@[::1]:7000"));
    CHECK(strcmp(c.host, "::1") == 0 && c.port == 7000 && strcmp(c.user, "app") == 0);
    static const struct {
        const char *url, *words;
    } bad[] = {
        {"ftp://x", "expected redis://"},
        {"redis://", "no host"},
        {"redis://h:0", "port"},
        {"redis://h:99999", "port"},
        {"redis://h/abc", "database number"},
        {"redis://pw@h", "credentials"},
        {"redis://h?ttl=-1", "ttl="},
        {"redis://h?timeout=0", "timeout="},
        {"redis://h?prefix=a:b", "prefix="},
        {"redis://h?colour=red", "unknown option"},
        {"unix://relative.sock", "unix:///absolute"},
        {"unix://:pw/relative.sock", "unix:///absolute"},
        {"redis://h x", "space"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_RC(fi_remote_config_parse(&c, bad[i].url), FI_EINVALID);
        CHECK_MSG(strstr(fi_last_error(), bad[i].words) != NULL, "%s: '%s'", bad[i].url,
                  fi_last_error());
    }
    CHECK_OK(fi_remote_url_masked(masked, sizeof masked, "redis://u:topsecret@h:1/0?readonly"));
    CHECK(strcmp(masked, "redis://***@h:1/0?readonly") == 0);
    CHECK_OK(fi_remote_url_masked(masked, sizeof masked, "unix:///s.sock"));
    CHECK(strcmp(masked, "unix:///s.sock") == 0);
    CHECK_OK(fi_remote_url_masked(masked, sizeof masked, "redis://[::1]:7000/3?ttl=60&x=1&wait=a/b"));
    CHECK(strcmp(masked, "redis://[::1]:7000/3?ttl=60&***&wait=***") == 0);
}

/* A password the masked form must never show, in every shape a URL may
 * take, good or bad: whatever the parser makes of it, neither its words
 * nor the masked URL (messages, show-config, logs) hold any of it. */
#define PW "SEKRIT"
static const char *const password_shapes[] = {
    "redis://:" PW "@h",
    "redis://user:" PW "@h:6379/0",
    "redis://:pa/" PW "@127.0.0.1:6379",
    "redis://:pa?" PW "@127.0.0.1:6379",
    "redis://:" PW "?x@h/0?readonly",
    "redis://:p@" PW "@h",
    "redis://:" PW ":colon@h",
    "redis://" PW "@h",
    "redis://" PW "@h?readonly",
    "redis://:" PW "@",
    "redis://:" PW "",
    "redis://h:" PW,
    "redis://h:6379/" PW,
    "redis://:" PW "@h:99999",
    "redis://:" PW "@h/abc",
    "redis://:SEK%zzRIT@h",
    "redis://:SEK%52IT@h",
    "redis://:" PW "@h?colour=red",
    "redis://:" PW "@h?prefix=a:b",
    "redis://h?password=" PW,
    "redis://h?" PW,
    "redis://h?" PW "=1",
    "redis://h?ttl=" PW,
    "redis://h?readonly&timeout=" PW "&prefix=ok",
    "redis://:" PW "@[::1",
    "redis://[::1:" PW "]:1",
    "redis://@:" PW "@h",
    "redis://:" PW "@h#frag",
    "redis:/:" PW "@h",
    "redis//:" PW "@h",
    "redis:" PW "@h",
    "http://:" PW "@h",
    ":" PW "@h",
    PW,
    "unix://:" PW "@/tmp/redis.sock",
    "unix://user:" PW "@/tmp/redis.sock?db=2",
    "unix://:pa/" PW "@/tmp/redis.sock",
    "unix://:" PW "@relative.sock",
    "unix://:" PW,
    "unix:///tmp/redis.sock?password=" PW,
    "unix:///tmp/redis.sock?" PW,
    "unix://" PW "@/tmp/redis.sock",
};

static int shows_password(const char *text)
{
    return strstr(text, "SEK") != NULL || strstr(text, "RIT") != NULL;
}

TEST(remote_url_never_shows_a_password_whatever_its_shape)
{
    char long_url[1500];
    snprintf(long_url, sizeof long_url, "redis://:" PW "@%0900d", 0); /* a host too long */
    for (size_t i = 0; i <= sizeof password_shapes / sizeof *password_shapes; i++) {
        const char *url = i < sizeof password_shapes / sizeof *password_shapes ? password_shapes[i]
                                                                               : long_url;
        fi_remote_config c;
        char masked[512], checked[512], tiny[24];
        int rc = fi_remote_config_parse(&c, url);
        CHECK_MSG(rc == 0 ? !shows_password(c.url) : !shows_password(fi_last_error()),
                  "%s: %s", url, rc == 0 ? c.url : fi_last_error());
        CHECK_OK(fi_remote_url_masked(masked, sizeof masked, url));
        CHECK_MSG(!shows_password(masked), "%s masked as %s", url, masked);
        CHECK_OK(fi_remote_url_masked(tiny, sizeof tiny, url));
        CHECK_MSG(!shows_password(tiny) && strlen(tiny) < sizeof tiny, "%s cut to %s", url, tiny);
        CHECK_RC(fi_cache_remote_url_check(checked, sizeof checked, url), rc);
        CHECK_MSG(strcmp(checked, masked) == 0 && !shows_password(fi_last_error()), "%s: %s",
                  url, fi_last_error());
    }
    /* The ones that are good URLs mean what they say. */
    fi_remote_config c;
    CHECK_OK(fi_remote_config_parse(&c, "redis://:pa/" PW "@127.0.0.1:6379"));
    CHECK(strcmp(c.password, "pa/" PW) == 0 && strcmp(c.host, "127.0.0.1") == 0);
    CHECK(strcmp(c.url, "redis://***@127.0.0.1:6379") == 0);
    CHECK_OK(fi_remote_config_parse(&c, "redis://:" PW "?x@h/0?readonly"));
    CHECK(strcmp(c.password, PW "?x") == 0 && c.read_only && c.db == 0);
    CHECK_OK(fi_remote_config_parse(&c, "unix://user:" PW "@/tmp/redis.sock?db=2"));
    CHECK(c.unix_socket && strcmp(c.path, "/tmp/redis.sock") == 0 && c.db == 2);
    CHECK(strcmp(c.user, "user") == 0 && strcmp(c.password, PW) == 0);
    CHECK(strcmp(c.url, "unix://***@/tmp/redis.sock?db=2") == 0);
    CHECK_OK(fi_remote_config_parse(&c, "unix:///tmp/a@b.sock"));
    CHECK(strcmp(c.path, "/tmp/a@b.sock") == 0 && !c.password[0]);
    CHECK_RC(fi_remote_config_parse(&c, "unix:///tmp/redis.sock?password=" PW), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "credentials go before") != NULL, "%s", fi_last_error());
}

TEST(remote_url_refuses_a_socket_path_the_kernel_would_cut)
{
    fi_remote_config c;
    char url[300], path[200];
    /* sun_path holds 107 bytes and a NUL: 107 is taken, 108 is refused. */
    memset(path, 'a', sizeof path);
    path[0] = '/';
    path[107] = '\0';
    snprintf(url, sizeof url, "unix://%s", path);
    CHECK_OK(fi_remote_config_parse(&c, url));
    CHECK(strlen(c.path) == 107);
    path[107] = 'a';
    path[108] = '\0';
    snprintf(url, sizeof url, "unix://:pw@%s?db=1", path);
    CHECK_RC(fi_remote_config_parse(&c, url), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "socket path is 108 bytes") != NULL, "%s", fi_last_error());
}

/* ---- two hosts, and the fleet ------------------------------------------------- */

static const char *const fleet_specs[] = {"decode q=fp16 hd=64", "decode q=bf16 hd=64"};
#define FLEET_SPECS 2

/* Host `name` prewarms the fleet specs from `threads` threads. */
static pid_t host_start(const char *name, const char *url, int threads)
{
    return check_host_start(name, url, threads, fleet_specs, FLEET_SPECS);
}

typedef struct key_list {
    uint8_t keys[8][16];
    int count;
} key_list;

static int collect_key(void *user, const fi_store_row *row)
{
    key_list *list = user;
    if (list->count < 8) memcpy(list->keys[list->count++], row->key, 16);
    return 0;
}

TEST(redis_host_b_gets_host_a_compiles_as_remote_hits)
{
    check_redis r;
    fi_jit_stats a, b;
    START_REDIS(&r, NULL, NULL);
    int a_rc = check_host_wait(host_start("host-a", r.url, 1));
    int b_rc = check_host_wait(host_start("host-b", r.url, 1));
    check_redis_stop(&r);
    CHECK(a_rc == 0 && b_rc == 0);
    CHECK_OK(check_host_stats(&a, "host-a"));
    CHECK_OK(check_host_stats(&b, "host-b"));
    CHECK_MSG(a.compiles == FLEET_SPECS && a.remote_misses >= FLEET_SPECS &&
                  a.remote_bytes_out > 0 && a.remote_errors == 0,
              "host A: %lld compiles, %lld remote misses", (long long)a.compiles,
              (long long)a.remote_misses);
    CHECK_MSG(b.compiles == 0 && b.remote_hits == FLEET_SPECS && b.disk_hits == 0 &&
                  b.entries == FLEET_SPECS && b.remote_corrupt == 0,
              "host B: %lld compiles, %lld remote hits, %lld entries", (long long)b.compiles,
              (long long)b.remote_hits, (long long)b.entries);
    CHECK(b.remote_bytes_in >= a.remote_bytes_out / 2);
    /* B holds A's bytes: the same cubins, written back to its disk. */
    fi_store *sa = NULL, *sb = NULL;
    key_list keys = {0};
    CHECK_OK(check_open_store(&sa, "host-a", NULL, NULL));
    CHECK_OK(check_open_store(&sb, "host-b", NULL, NULL));
    CHECK_OK(fi_store_foreach(sb, collect_key, &keys));
    int same = 0;
    for (int i = 0; i < keys.count; i++) {
        void *pa = NULL, *pb = NULL;
        size_t na = 0, nb = 0;
        if (fi_store_get(sa, keys.keys[i], &pa, &na, NULL) == 0 &&
            fi_store_get(sb, keys.keys[i], &pb, &nb, NULL) == 0 && na == nb &&
            memcmp(pa, pb, na) == 0)
            same++;
        fi__free(pa);
        fi__free(pb);
    }
    fi_store_close(sa);
    fi_store_close(sb);
    CHECK_MSG(keys.count == FLEET_SPECS && same == FLEET_SPECS, "%d of %d entries identical",
              same, keys.count);
}

TEST(redis_fleet_single_flight_compiles_each_key_once)
{
    enum { PROCESSES = 8, DIRS = 4, THREADS = 2 };
    check_redis r;
    pid_t pids[PROCESSES];
    START_REDIS(&r, NULL, NULL);
    int64_t start = fi__now_ns();
    for (int p = 0; p < PROCESSES; p++) {
        char name[32];
        snprintf(name, sizeof name, "host-%d", p % DIRS);
        pids[p] = host_start(name, r.url, THREADS);
    }
    int failed = 0;
    for (int p = 0; p < PROCESSES; p++) failed += check_host_wait(pids[p]) != 0;
    int64_t wall_ms = check_ms_since(start);
    check_redis_stop(&r);
    CHECK_MSG(failed == 0, "%d of %d hosts failed", failed, PROCESSES);
    long long compiles = 0, remote_hits = 0, entries = 0;
    for (int d = 0; d < DIRS; d++) {
        char name[32];
        fi_jit_stats s;
        snprintf(name, sizeof name, "host-%d", d);
        CHECK_OK(check_host_stats(&s, name));
        compiles += s.compiles;
        remote_hits += s.remote_hits;
        entries += s.entries;
    }
    printf("  fleet: %d processes x %d threads on %d cache dirs, %d keys: %lld compiles, "
           "%lld remote hits, %lld ms\n", PROCESSES, THREADS, DIRS, FLEET_SPECS, compiles,
           remote_hits, (long long)wall_ms);
    CHECK_MSG(compiles == FLEET_SPECS, "%lld compiles across the fleet for %d keys", compiles,
              FLEET_SPECS);
    CHECK(entries == DIRS * FLEET_SPECS && remote_hits == (DIRS - 1) * FLEET_SPECS);
}

/* ---- faults --------------------------------------------------------------------- */

TEST(redis_killed_mid_run_then_restarted_empty)
{
    check_redis r;
    fi_store *st = NULL, *other = NULL;
    fi_object_meta m;
    uint8_t key[16];
    void *out = NULL;
    size_t size;
    fi_jit_stats s;
    START_REDIS(&r, NULL, "?backoff=100");
    CHECK_OK(check_open_store(&st, "host", r.url, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK(check_timed_miss(st, 2) >= 0); /* the connection is pooled now */
    check_redis_signal(&r, SIGKILL);
    int64_t first = check_timed_miss(st, 3);
    CHECK_OK(fi_store_stats_get(st, &s));
    const long long errors_after_first = s.remote_errors;
    int64_t during = check_timed_miss(st, 4);
    printf("  redis killed: first miss %lld ms, then %lld ms during the back-off\n",
           (long long)first, (long long)during);
    /* Outcomes, not speed: both misses return, and the second, inside the
     * back-off, does not try the dead server (no new error). The time bound
     * only says "no hang" (the connect timeout is 50 ms). */
    CHECK(first >= 0 && first < 10000 && during >= 0);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK_MSG(errors_after_first >= 1 && s.remote_errors == errors_after_first,
              "remote errors %lld, then %lld", errors_after_first, (long long)s.remote_errors);
    /* Local work goes on. */
    check_key_of(key, 5);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK_OK(fi_store_get(st, key, &out, &size, NULL));
    fi__free(out);
    out = NULL;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors >= 1);
    /* Restarted empty: after the back-off the tier misses, then fills again. */
    CHECK(check_redis_restart(&r) == 0);
    usleep(250 * 1000);
    check_key_of(key, 6);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK_OK(check_open_store(&other, "other", r.url, NULL));
    CHECK_OK(fi_store_get(other, key, &out, &size, NULL));
    CHECK(size == sizeof payload && memcmp(out, payload, size) == 0);
    fi__free(out);
    out = NULL;
    check_key_of(key, 1); /* pushed before the restart: gone */
    CHECK_RC(fi_store_get(other, key, &out, &size, NULL), FI_ENOTFOUND);
    fi_store_close(other);
    fi_store_close(st);
    check_redis_stop(&r);
}

TEST(redis_paused_past_the_timeouts_costs_one_timeout_per_back_off)
{
    check_redis r;
    fi_store *st = NULL;
    fi_jit_stats s;
    START_REDIS(&r, NULL, NULL); /* default timeouts: 50 ms connect, 500 ms per call */
    CHECK_OK(check_open_store(&st, "host", r.url, NULL));
    int64_t healthy = check_timed_miss(st, 1);
    check_redis_signal(&r, SIGSTOP);
    int64_t first = check_timed_miss(st, 2);
    int64_t worst_after = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t = check_timed_miss(st, 10 + i);
        if (t > worst_after) worst_after = t;
    }
    check_redis_signal(&r, SIGCONT);
    printf("  redis paused: healthy miss %lld ms; first miss while paused %lld ms (the 500 ms "
           "operation timeout); next 20 misses at most %lld ms each (skipped for the back-off)\n",
           (long long)healthy, (long long)first, (long long)worst_after);
    /* The first miss waits out the operation timeout (a lower bound holds on
     * any machine; the upper one only says "no hang"); the next 20 are
     * skipped for the back-off, which the single error counted shows. */
    CHECK(healthy >= 0 && worst_after >= 0);
    CHECK_MSG(first >= 400 && first < 20000, "first miss %lld ms", (long long)first);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors == 1);
    /* Resumed: after the back-off (1 s) it answers again. */
    usleep(1100 * 1000);
    uint8_t key[16];
    fi_object_meta m;
    check_key_of(key, 40);
    check_meta_of(&m, 40);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    redisContext *c = redis_direct(&r);
    CHECK(redis_exists(c, key) == 1);
    redisFree(c);
    fi_store_close(st);
    check_redis_stop(&r);
}

/* Replace the value of `key` in Redis by `bad` and check that a reader
 * refuses it, counts it and removes it. */
static void check_refused(check_redis *r, fi_store *reader, const uint8_t key[16],
                          const void *bad, size_t bad_size, long long corrupt_before)
{
    redisContext *c = redis_direct(r);
    void *out = NULL;
    size_t size;
    fi_jit_stats s;
    redis_set(c, key, bad, bad_size);
    CHECK_RC(fi_store_get(reader, key, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(out == NULL);
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK_MSG(s.remote_corrupt == corrupt_before + 1, "remote_corrupt %lld",
              (long long)s.remote_corrupt);
    CHECK(redis_exists(c, key) == 0);
    redisFree(c);
}

TEST(redis_corrupt_truncated_and_foreign_values_are_refused_and_removed)
{
    check_redis r;
    fi_store *writer = NULL, *reader = NULL;
    fi_object_meta m;
    uint8_t key[16], other[16];
    START_REDIS(&r, NULL, NULL);
    CHECK_OK(check_open_store(&writer, "writer", r.url, NULL));
    CHECK_OK(check_open_store(&reader, "reader", r.url, NULL));
    check_key_of(key, 1);
    check_key_of(other, 2);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(writer, key, payload, sizeof payload, &m));
    CHECK_OK(fi_store_put(writer, other, payload, sizeof payload, &m));
    redisContext *c = redis_direct(&r);
    size_t size = 0, other_size = 0;
    uint8_t *good = redis_value(c, key, &size), *foreign = redis_value(c, other, &other_size);
    redisFree(c);
    CHECK(good && foreign);
    good[size - 3] ^= 0x10; /* a flipped payload byte */
    check_refused(&r, reader, key, good, size, 0);
    check_refused(&r, reader, key, good, size / 2, 1);      /* truncated */
    check_refused(&r, reader, key, foreign, other_size, 2); /* another key's entry */
    check_refused(&r, reader, key, "FIJITOB1 nonsense", 17, 3);
    free(good);
    free(foreign);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK(s.entries == 0); /* nothing bad was written back */
    fi_store_close(reader);
    fi_store_close(writer);
    check_redis_stop(&r);
}

TEST(redis_poisoning_without_the_secret_is_refused)
{
    check_redis r;
    fi_store *honest = NULL, *poisoner = NULL, *reader = NULL, *plain = NULL;
    fi_object_meta m;
    uint8_t key[16];
    void *out = NULL;
    size_t size;
    static const char evil[] = "a cubin the attacker wants every host to load";
    START_REDIS(&r, NULL, NULL);
    CHECK_OK(check_open_store(&honest, "honest", r.url, secret));
    CHECK_OK(check_open_store(&poisoner, "poisoner", r.url, NULL));
    CHECK_OK(check_open_store(&reader, "reader", r.url, secret));
    CHECK_OK(check_open_store(&plain, "plain", r.url, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(honest, key, payload, sizeof payload, &m));
    /* A host without the secret reads sealed values (the codec checks them). */
    CHECK_OK(fi_store_get(plain, key, &out, &size, NULL));
    CHECK(size == sizeof payload);
    fi__free(out);
    out = NULL;
    /* The poisoner overwrites it with a well-formed entry of its own... */
    CHECK_OK(fi_store_put(poisoner, key, evil, sizeof evil, &m));
    CHECK_RC(fi_store_get(reader, key, &out, &size, NULL), FI_ENOTFOUND);
    /* ...and with a sealed-looking one whose MAC it had to guess. */
    redisContext *c = redis_direct(&r);
    void *entry = NULL, *forged = NULL;
    size_t entry_size, forged_size;
    fi_seal_key wrong;
    CHECK_OK(fi_object_encode(&entry, &entry_size, key, &m, evil, sizeof evil));
    CHECK_OK(fi_seal_key_derive(&wrong, "not the fleet's secret at all"));
    CHECK_OK(fi_seal_wrap(&forged, &forged_size, &wrong, key, entry, entry_size));
    redisFree(c);
    check_refused(&r, reader, key, forged, forged_size, 1);
    fi__free(entry);
    fi__free(forged);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK(s.remote_hits == 0 && s.entries == 0);
    fi_store_close(plain);
    fi_store_close(reader);
    fi_store_close(poisoner);
    fi_store_close(honest);
    check_redis_stop(&r);
}

TEST(redis_read_only_remote_serves_and_never_writes)
{
    check_redis r;
    fi_store *writer = NULL, *consumer = NULL;
    fi_store_lock *lock = NULL;
    fi_object_meta m;
    uint8_t key[16], mine[16];
    void *out = NULL;
    size_t size;
    char url[4500];
    START_REDIS(&r, NULL, NULL);
    snprintf(url, sizeof url, "%s?readonly", r.url);
    CHECK_OK(check_open_store(&writer, "writer", r.url, NULL));
    CHECK_OK(check_open_store(&consumer, "consumer", url, NULL));
    check_key_of(key, 1);
    check_key_of(mine, 2);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(writer, key, payload, sizeof payload, &m));
    CHECK_OK(fi_store_get(consumer, key, &out, &size, NULL));
    fi__free(out);
    CHECK_OK(fi_store_lock_key(consumer, mine, &lock));
    CHECK_OK(fi_store_put(consumer, mine, payload, sizeof payload, &m));
    fi_store_unlock(lock);
    redisContext *c = redis_direct(&r);
    CHECK(redis_exists(c, mine) == 0);
    redisReply *leases = redisCommand(c, "KEYS fijit:lease:*");
    CHECK(leases && leases->type == REDIS_REPLY_ARRAY && leases->elements == 0);
    freeReplyObject(leases);
    redisFree(c);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(consumer, &s));
    CHECK(s.remote_hits == 1 && s.remote_bytes_out == 0 && s.remote_errors == 0);
    fi_store_close(consumer);
    fi_store_close(writer);
    check_redis_stop(&r);
}

TEST(redis_wrong_password_is_an_error_that_names_no_password)
{
    check_redis r;
    fi_store *st = NULL;
    fi_remote *remote = NULL;
    fi_object_meta m;
    uint8_t key[16];
    void *out = NULL;
    size_t size;
    char url[4500];
    START_REDIS(&r, "right-password", NULL);
    snprintf(url, sizeof url, "unix://%s", r.socket);
    CHECK_OK(fi_remote_open(&remote, url));
    CHECK(remote->ops->ping(remote) == FI_REMOTE_ERROR);
    CHECK_MSG(strstr(fi_last_error(), "NOAUTH") != NULL, "%s", fi_last_error());
    remote->ops->close(remote);
    char with_password[4600];
    snprintf(with_password, sizeof with_password, "unix://:wrong-password@%s", r.socket);
    CHECK_OK(fi_remote_open(&remote, with_password));
    CHECK(remote->ops->ping(remote) == FI_REMOTE_ERROR);
    CHECK_MSG(strstr(fi_last_error(), "refused the password") != NULL &&
                  strstr(fi_last_error(), "wrong-password") == NULL, "%s", fi_last_error());
    remote->ops->close(remote);
    /* A password-protected server on a socket: unix://[user]:password@/path. */
    snprintf(with_password, sizeof with_password, "unix://:right-password@%s", r.socket);
    CHECK_OK(fi_remote_open(&remote, with_password));
    CHECK_MSG(remote->ops->ping(remote) == FI_REMOTE_OK, "%s", fi_last_error());
    remote->ops->close(remote);
    /* Through the store: a miss, counted, and the local tier serves. */
    CHECK_OK(check_open_store(&st, "host", url, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_RC(fi_store_get(st, key, &out, &size, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK_OK(fi_store_get(st, key, &out, &size, NULL));
    fi__free(out);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors == 1 && s.remote_hits == 0);
    fi_store_close(st);
    check_redis_stop(&r);
}

TEST(redis_lease_expires_when_its_holder_dies)
{
    check_redis r;
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    START_REDIS(&r, NULL, "?lease=300");
    check_key_of(key, 1);
    /* A holder that dies mid-build (no release, no renewal). */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fi_store *mine = NULL;
        fi_store_lock *held = NULL;
        if (check_open_store(&mine, "dead", r.url, NULL) < 0 || fi_store_lock_key(mine, key, &held) < 0)
            _exit(1);
        kill(getpid(), SIGKILL);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    CHECK_OK(check_open_store(&st, "alive", r.url, NULL));
    int64_t start = fi__now_ns();
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    int64_t waited = check_ms_since(start);
    printf("  lease holder killed: the next builder waited %lld ms (lease 300 ms)\n",
           (long long)waited);
    CHECK(waited < 20000); /* taken over, not waited out: the default wait is 120 s */
    redisContext *c = redis_direct(&r);
    redisReply *leases = redisCommand(c, "KEYS fijit:lease:*");
    CHECK(leases && leases->elements == 1); /* ours now */
    freeReplyObject(leases);
    fi_store_unlock(lock);
    leases = redisCommand(c, "KEYS fijit:lease:*");
    CHECK(leases && leases->elements == 0);
    freeReplyObject(leases);
    redisFree(c);
    fi_store_close(st);
    check_redis_stop(&r);
}

/* ---- threads on one remote (also run under TSan) ------------------------------ */

typedef struct thread_run {
    fi_store *st;
    atomic_int builds, failures;
} thread_run;

#define THREAD_KEYS 16

/* What jit.c does per key: look up; on a miss lock (flock + fleet lease),
 * look again, build, put, unlock. */
static void *hammer_remote(void *arg)
{
    thread_run *run = arg;
    for (int k = 0; k < THREAD_KEYS; k++) {
        uint8_t key[16];
        void *out = NULL;
        size_t size;
        fi_store_lock *lock = NULL;
        check_key_of(key, k);
        if (fi_store_get(run->st, key, &out, &size, NULL) == 0) {
            fi__free(out);
            continue;
        }
        if (fi_store_lock_key(run->st, key, &lock) < 0) {
            atomic_fetch_add(&run->failures, 1);
            continue;
        }
        if (fi_store_get(run->st, key, &out, &size, NULL) == 0) {
            fi__free(out);
        } else {
            fi_object_meta m;
            check_meta_of(&m, k);
            usleep(30 * 1000); /* a "compile", long enough for lease renewals */
            atomic_fetch_add(&run->builds, 1);
            if (fi_store_put(run->st, key, payload, sizeof payload, &m) < 0)
                atomic_fetch_add(&run->failures, 1);
        }
        fi_store_unlock(lock);
    }
    return NULL;
}

TEST(redis_threads_share_one_remote_and_build_each_key_once)
{
    enum { THREADS = 8 };
    check_redis r;
    static thread_run run;
    pthread_t threads[THREADS];
    START_REDIS(&r, NULL, "?lease=60"); /* renewed every 20 ms while a thread builds */
    CHECK_OK(check_open_store(&run.st, "host", r.url, secret));
    atomic_store(&run.builds, 0);
    atomic_store(&run.failures, 0);
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, hammer_remote, &run);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(run.st, &s));
    fi_store_close(run.st);
    check_redis_stop(&r);
    CHECK(atomic_load(&run.failures) == 0);
    CHECK_MSG(atomic_load(&run.builds) == THREAD_KEYS, "%d builds for %d keys",
              atomic_load(&run.builds), THREAD_KEYS);
    CHECK(s.remote_errors == 0 && s.remote_bytes_out > 0);
}

/* ---- values and leases no fijit host writes ---------------------------------- */

/* The name of `key`'s lease in Redis. */
static void lease_name(char out[128], const uint8_t key[16])
{
    char hex[33];
    fi_key_hex(hex, key);
    snprintf(out, 128, "fijit:lease:%s", hex);
}

TEST(redis_value_of_another_type_is_a_bad_entry_not_a_sick_server)
{
    check_redis r;
    fi_store *reader = NULL;
    fi_object_meta m;
    uint8_t key[16], next[16];
    char name[128];
    void *out = NULL;
    size_t size;
    fi_jit_stats s;
    /* A back-off longer than any test: a remote skipped after the list
     * would not take the put below. */
    START_REDIS(&r, NULL, "?backoff=600000");
    CHECK_OK(check_open_store(&reader, "reader", r.url, NULL));
    check_key_of(key, 1);
    check_key_of(next, 2);
    value_name(name, key);
    redisContext *c = redis_direct(&r);
    freeReplyObject(redisCommand(c, "RPUSH %s a b c", name));
    CHECK_RC(fi_store_get(reader, key, &out, &size, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK_MSG(s.remote_corrupt == 1 && s.remote_errors == 0, "remote_corrupt %lld, errors %lld",
              (long long)s.remote_corrupt, (long long)s.remote_errors);
    CHECK(redis_exists(c, key) == 0); /* removed: the next build's put replaces it */
    check_meta_of(&m, 2);
    CHECK_OK(fi_store_put(reader, next, payload, sizeof payload, &m));
    CHECK(redis_exists(c, next) == 1); /* no back-off started */
    redisFree(c);
    fi_store_close(reader);
    check_redis_stop(&r);
}

TEST(redis_value_larger_than_any_entry_is_refused_unread)
{
    check_redis r;
    fi_store *reader = NULL, *ro = NULL, *writer = NULL;
    fi_object_meta m;
    uint8_t key[16], big_key[16];
    void *out = NULL;
    size_t size;
    fi_jit_stats s;
    char url[4500];
    START_REDIS(&r, NULL, "?backoff=600000");
    snprintf(url, sizeof url, "%s&readonly", r.url);
    CHECK_OK(check_open_store(&reader, "reader", r.url, NULL));
    CHECK_OK(check_open_store(&ro, "read-only", url, NULL));
    check_key_of(key, 1);
    size_t huge_size = FI_REMOTE_VALUE_MAX + 1;
    char *huge = malloc(huge_size);
    CHECK(huge != NULL);
    memset(huge, 'x', huge_size);
    memcpy(huge, FI_OBJECT_MAGIC, 8);
    redisContext *c = redis_direct(&r);
    redis_set(c, key, huge, huge_size);
    /* Read-only: refused, counted once, left in place; nothing downloaded. */
    CHECK_RC(fi_store_get(ro, key, &out, &size, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_stats_get(ro, &s));
    CHECK_MSG(s.remote_corrupt == 1 && s.remote_errors == 0 && s.remote_bytes_in == 0,
              "corrupt %lld, errors %lld, bytes in %lld", (long long)s.remote_corrupt,
              (long long)s.remote_errors, (long long)s.remote_bytes_in);
    CHECK(redis_exists(c, key) == 1);
    /* Writable: refused unread and removed. */
    CHECK_RC(fi_store_get(reader, key, &out, &size, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK(s.remote_corrupt == 1 && s.remote_errors == 0 && s.remote_bytes_in == 0);
    CHECK(redis_exists(c, key) == 0);
    /* An entry too large for a remote stays local, and the remote stays in use. */
    CHECK_OK(check_open_store(&writer, "writer", r.url, NULL));
    check_key_of(big_key, 2);
    check_meta_of(&m, 2);
    CHECK_OK(fi_store_put(writer, big_key, huge, huge_size, &m));
    CHECK(redis_exists(c, big_key) == 0);
    CHECK_OK(fi_store_put(writer, key, payload, sizeof payload, &m));
    CHECK(redis_exists(c, key) == 1);
    CHECK_OK(fi_store_stats_get(writer, &s));
    CHECK(s.remote_errors == 0 && s.entries == 2);
    free(huge);
    redisFree(c);
    fi_store_close(writer);
    fi_store_close(ro);
    fi_store_close(reader);
    check_redis_stop(&r);
}

/* The lease value a test plants: 16 bytes, like a holder's token. */
static const char planted_token[] = "0123456789abcdef";

/* Plant `how` under `key`'s lease, then take the lock: the lease must end
 * up ours (a token with an expiry within the lease time), not the planted
 * one. `wait=2000`: an old build that waited for the planted lease gives up
 * after that and holds no lease. */
static void check_taken_over(check_redis *r, const char *how)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    char name[128], url[4500];
    snprintf(url, sizeof url, "%s?lease=3000&wait=2000", r->url);
    check_key_of(key, 1);
    lease_name(name, key);
    redisContext *c = redis_direct(r);
    freeReplyObject(redisCommand(c, "DEL %s", name));
    if (strcmp(how, "list") == 0)
        freeReplyObject(redisCommand(c, "RPUSH %s a", name));
    else if (strcmp(how, "no expiry") == 0)
        freeReplyObject(redisCommand(c, "SET %s %s", name, planted_token));
    else if (strcmp(how, "an hour") == 0)
        freeReplyObject(redisCommand(c, "SET %s %s PX 3600000", name, planted_token));
    else
        freeReplyObject(redisCommand(c, "SET %s %s PX 2000", name, "not a token"));
    int rc = check_open_store(&st, how, url, NULL);
    if (rc == 0) rc = fi_store_lock_key(st, key, &lock);
    redisReply *value = redisCommand(c, "GET %s", name);
    redisReply *ttl = redisCommand(c, "PTTL %s", name);
    int ours = value && value->type == REDIS_REPLY_STRING && value->len == 16 &&
               memcmp(value->str, planted_token, 16) != 0 && ttl &&
               ttl->type == REDIS_REPLY_INTEGER && ttl->integer > 0 && ttl->integer <= 3000;
    if (value) freeReplyObject(value);
    if (ttl) freeReplyObject(ttl);
    fi_store_unlock(lock);
    fi_jit_stats s = {0};
    if (rc == 0) rc = fi_store_stats_get(st, &s);
    fi_store_close(st);
    redisFree(c);
    CHECK_OK(rc);
    CHECK_MSG(ours, "a lease of %s was not taken over", how);
    CHECK(s.remote_errors == 0);
}

TEST(redis_lease_no_live_holder_can_have_made_is_taken_over)
{
    check_redis r;
    START_REDIS(&r, NULL, NULL);
    check_taken_over(&r, "no expiry");
    check_taken_over(&r, "an hour");
    check_taken_over(&r, "list");
    check_taken_over(&r, "not a token");
    /* A live holder's lease is not: the other host waits (here: not at all). */
    fi_store *holder = NULL, *other = NULL;
    fi_store_lock *held = NULL, *lock = NULL;
    uint8_t key[16];
    char name[128], url[4500];
    snprintf(url, sizeof url, "%s?lease=3000&wait=0", r.url);
    check_key_of(key, 2);
    lease_name(name, key);
    CHECK_OK(check_open_store(&holder, "holder", url, NULL));
    CHECK_OK(check_open_store(&other, "other", url, NULL));
    CHECK_OK(fi_store_lock_key(holder, key, &held));
    redisContext *c = redis_direct(&r);
    redisReply *before = redisCommand(c, "GET %s", name);
    CHECK_OK(fi_store_lock_key(other, key, &lock));
    redisReply *after = redisCommand(c, "GET %s", name);
    CHECK(before && after && before->len == 16 && after->len == 16 &&
          memcmp(before->str, after->str, 16) == 0);
    freeReplyObject(before);
    freeReplyObject(after);
    fi_store_unlock(lock);
    fi_store_unlock(held);
    redisFree(c);
    fi_store_close(other);
    fi_store_close(holder);
    check_redis_stop(&r);
}

/* ---- statistics: each event counted once ------------------------------------- */

TEST(redis_each_remote_event_is_counted_once)
{
    check_redis r;
    fi_jit_stats a, ro;
    char url[4500];
    START_REDIS(&r, NULL, NULL);
    /* Host A: each cold key is one remote miss (the look under the build
     * lock does not count it again). */
    CHECK(check_host_wait(host_start("host-a", r.url, 1)) == 0);
    CHECK_OK(check_host_stats(&a, "host-a"));
    CHECK_MSG(a.compiles == FLEET_SPECS && a.remote_misses == FLEET_SPECS,
              "host A: %lld compiles, %lld remote misses for %d keys", (long long)a.compiles,
              (long long)a.remote_misses, FLEET_SPECS);
    /* Damage every value; a read-only host counts each bad one once. */
    redisContext *c = redis_direct(&r);
    redisReply *keys = redisCommand(c, "KEYS fijit:obj:*");
    CHECK(keys && keys->type == REDIS_REPLY_ARRAY && keys->elements == FLEET_SPECS);
    for (size_t i = 0; i < keys->elements; i++)
        freeReplyObject(redisCommand(c, "SETRANGE %s 100 %s", keys->element[i]->str, "damage"));
    freeReplyObject(keys);
    redisFree(c);
    snprintf(url, sizeof url, "%s?readonly", r.url);
    CHECK(check_host_wait(host_start("read-only", url, 1)) == 0);
    CHECK_OK(check_host_stats(&ro, "read-only"));
    check_redis_stop(&r);
    CHECK_MSG(ro.compiles == FLEET_SPECS && ro.remote_corrupt == FLEET_SPECS &&
                  ro.remote_misses == 0 && ro.remote_hits == 0,
              "read-only host: %lld compiles, %lld corrupt, %lld misses for %d bad values",
              (long long)ro.compiles, (long long)ro.remote_corrupt, (long long)ro.remote_misses,
              FLEET_SPECS);
}

/* ---- no message holds the password --------------------------------------------- */

TEST(redis_messages_and_log_lines_never_show_the_password)
{
    check_redis r;
    fi_store *st = NULL, *wrong = NULL;
    fi_object_meta m;
    uint8_t key[16];
    void *out = NULL;
    size_t size;
    char url[4600], wrong_url[4600], log_path[4300], said[8192];
    /* A password with the characters that once escaped the mask. */
    START_REDIS(&r, "pa/SEKRIT?x", NULL);
    snprintf(url, sizeof url, "unix://:pa/SEKRIT?x@%s?backoff=1", r.socket);
    snprintf(wrong_url, sizeof wrong_url, "unix://user:pa/SEKRIT-wrong@%s", r.socket);
    snprintf(log_path, sizeof log_path, "%s/stderr.txt", check_tmpdir);
    fi__log_set_level(FI_LOG_INFO);
    check_stderr_begin(log_path);
    CHECK_OK(check_open_store(&st, "host", url, NULL));
    CHECK_OK(check_open_store(&wrong, "wrong", wrong_url, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    int put_rc = fi_store_put(st, key, payload, sizeof payload, &m);
    int wrong_rc = fi_store_get(wrong, key, &out, &size, NULL); /* refused password: logged */
    check_redis_signal(&r, SIGKILL);
    check_key_of(key, 2);
    int dead_rc = fi_store_get(st, key, &out, &size, NULL); /* the server gone: logged */
    check_stderr_end(said, sizeof said);
    fi__log_set_level(FI_LOG_WARN);
    CHECK(put_rc == 0 && wrong_rc == FI_ENOTFOUND && dead_rc == FI_ENOTFOUND);
    CHECK_MSG(strstr(said, "remote cache unix://***@") != NULL &&
                  strstr(said, "refused the password") != NULL,
              "the log lines expected are missing: %.2000s", said);
    CHECK_MSG(!shows_password(said), "a log line shows the password: %.2000s", said);
    fi_store_close(wrong);
    fi_store_close(st);
    check_redis_stop(&r);
}
