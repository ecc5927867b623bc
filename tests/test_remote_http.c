/*
 * The HTTP(S) remote tier against a real nginx with its WebDAV module,
 * started by each test in its temp dir on a free loopback port (its own
 * config, prefix and logs; one process, so SIGSTOP freezes all of it):
 *   - URLs: http(s) parsing, options only Redis takes refused, cafile,
 *     lists of remotes; no password in any masked form;
 *   - two hosts (separate processes and cache dirs): B gets A's compiles as
 *     remote hits and compiles nothing;
 *   - faults: the server killed, frozen (SIGSTOP) past the timeouts, slow
 *     (limit_rate) past the timeout; wrong credentials (basic and bearer);
 *     TLS with a throwaway CA (verified; another CA's certificate refused);
 *     truncated, oversized and poisoned objects refused with a secret and
 *     counted; a read-only remote; a server whose disk refuses writes
 *     (RLIMIT_FSIZE): PUT fails, counted, serving goes on;
 *   - 12 threads on one remote; 8 processes on overlapping key sets; two
 *     remotes in a list, asked in order and both written, each counted on
 *     its own; beside Redis, which holds the fleet's build leases.
 * Tests work at the store level on small synthetic entries, except the two
 * hosts, which compile two small decode kernels.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
static const char payload[] = "the bytes of a cubin, for the store's purposes";

/* ---- a private nginx ----------------------------------------------------------- */

enum {
    NGINX_TLS = 1 << 0,        /* https, with a certificate of the test's CA */
    NGINX_BASIC = 1 << 1,      /* basic auth: user "fleet", password "opensesame" */
    NGINX_BEARER = 1 << 2,     /* "Authorization: Bearer tok-123" or 401 */
    NGINX_SLOW = 1 << 3,       /* limit_rate 4k */
    NGINX_WRITES_FAIL = 1 << 4 /* every file write past 16 bytes fails (RLIMIT_FSIZE) */
};

typedef struct nginx {
    pid_t pid;
    int port;
    unsigned flags;
    char dir[4200];  /* prefix, config, logs */
    char www[4300];  /* the objects: www/fijit/<hex> */
    char url[4400];  /* http(s)://127.0.0.1:PORT (no options) */
    char ca[4300];   /* the CA's certificate (TLS) */
} nginx;

static int run_quiet(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A throwaway CA named `name` and, with `server`, a certificate for
 * 127.0.0.1 and localhost signed by it. */
static int make_ca(const char *dir, const char *name, int server)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-days 2 -subj '/CN=%s' -keyout %s.key -out %s.crt >/dev/null 2>&1",
             dir, name, name, name);
    if (run_quiet(cmd) != 0) return -1;
    if (!server) return 0;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=127.0.0.1' "
             "-keyout server.key -out server.csr >/dev/null 2>&1 && "
             "openssl x509 -req -in server.csr -CA %s.crt -CAkey %s.key -CAcreateserial -days 2 "
             "-extfile san.ext -out server.crt >/dev/null 2>&1",
             dir, name, name);
    return run_quiet(cmd) == 0 ? 0 : -1;
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static int port_answers(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

static int write_config(const nginx *n)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/nginx.conf", n->dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "daemon off;\nmaster_process off;\npid %s/nginx.pid;\nerror_log %s/error.log warn;\n"
            "events { worker_connections 256; }\n"
            "http {\n  access_log off;\n  client_max_body_size 64m;\n"
            "  client_body_temp_path %s/body;\n  proxy_temp_path %s/proxy;\n"
            "  fastcgi_temp_path %s/fastcgi;\n  uwsgi_temp_path %s/uwsgi;\n"
            "  scgi_temp_path %s/scgi;\n"
            "  server {\n    listen 127.0.0.1:%d%s;\n    root %s;\n",
            n->dir, n->dir, n->dir, n->dir, n->dir, n->dir, n->dir, n->port,
            n->flags & NGINX_TLS ? " ssl" : "", n->www);
    if (n->flags & NGINX_TLS)
        fprintf(f, "    ssl_certificate %s/server.crt;\n    ssl_certificate_key %s/server.key;\n",
                n->dir, n->dir);
    fprintf(f, "    location / {\n      dav_methods PUT DELETE;\n      create_full_put_path on;\n"
               "      dav_access user:rw;\n");
    if (n->flags & NGINX_SLOW) fprintf(f, "      limit_rate 4k;\n");
    if (n->flags & NGINX_BASIC)
        fprintf(f, "      auth_basic fijit;\n      auth_basic_user_file %s/htpasswd;\n", n->dir);
    if (n->flags & NGINX_BEARER)
        fprintf(f, "      if ($http_authorization != \"Bearer tok-123\") { return 401; }\n");
    fprintf(f, "    }\n  }\n}\n");
    return fclose(f) == 0 ? 0 : -1;
}

static int nginx_spawn(nginx *n)
{
    char conf[4400];
    snprintf(conf, sizeof conf, "%s/nginx.conf", n->dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        if (n->flags & NGINX_WRITES_FAIL) {
            /* A disk that takes no more: every write past 16 bytes fails
             * (EFBIG; SIGXFSZ ignored so that it is an error, not a death). */
            struct rlimit tiny = {16, 16};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &tiny);
        }
        execl("/usr/sbin/nginx", "nginx", "-p", n->dir, "-c", conf, (char *)NULL);
        _exit(127);
    }
    n->pid = pid;
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            n->pid = 0;
            return WIFEXITED(status) && WEXITSTATUS(status) == 127 ? 1 : -1;
        }
        if (port_answers(n->port)) return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void nginx_signal(nginx *n, int sig)
{
    if (n->pid <= 0) return;
    kill(n->pid, sig);
    if (sig == SIGKILL) {
        while (waitpid(n->pid, NULL, 0) < 0) {}
        n->pid = 0;
    }
}

static void nginx_stop(nginx *n)
{
    if (n->pid <= 0) return;
    kill(n->pid, SIGCONT); /* a frozen server cannot exit */
    nginx_signal(n, SIGKILL);
}

/* A server in check_tmpdir/<name>: 0 started, 1 nginx is not installed,
 * -1 failed. */
static int nginx_start(nginx *n, const char *name, unsigned flags)
{
    char path[4400];
    memset(n, 0, sizeof *n);
    n->flags = flags;
    snprintf(n->dir, sizeof n->dir, "%s/%s", check_tmpdir, name);
    snprintf(n->www, sizeof n->www, "%s/www", n->dir);
    if (access("/usr/sbin/nginx", X_OK) != 0) {
        printf("  SKIPPED: nginx is not installed, so the HTTP tier is not tested here "
               "(run 'make deps')\n");
        return 1;
    }
    if (mkdir(n->dir, 0700) < 0 || mkdir(n->www, 0700) < 0) return -1;
    if (flags & NGINX_TLS) {
        if (make_ca(n->dir, "ca", 1) < 0) return -1;
        snprintf(n->ca, sizeof n->ca, "%s/ca.crt", n->dir);
    }
    if (flags & NGINX_BASIC) {
        snprintf(path, sizeof path, "%s/htpasswd", n->dir);
        FILE *f = fopen(path, "w");
        if (!f || fputs("fleet:{PLAIN}opensesame\n", f) < 0 || fclose(f) != 0) return -1;
    }
    /* Another program may take the port between its probe and nginx's
     * bind: then a fresh port, a few times. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if ((n->port = free_port()) < 0 || write_config(n) < 0) return -1;
        snprintf(n->url, sizeof n->url, "%s://127.0.0.1:%d", flags & NGINX_TLS ? "https" : "http",
                 n->port);
        int rc = nginx_spawn(n);
        if (rc >= 0) return rc;
    }
    return -1;
}

#define START_NGINX(n, flags)                                                  \
    do {                                                                       \
        int started__ = nginx_start((n), "nginx", (flags));                             \
        if (started__ == 1) return;                                            \
        CHECK_MSG(started__ == 0, "nginx did not start (see %s/nginx/error.log)", check_tmpdir); \
    } while (0)

/* The object nginx holds for `key`, as a path. */
static void object_path(char *out, size_t size, const nginx *n, const uint8_t key[16])
{
    char hex[33];
    fi_key_hex(hex, key);
    snprintf(out, size, "%s/fijit/%s", n->www, hex);
}

static int object_exists(const nginx *n, const uint8_t key[16])
{
    char path[4400];
    object_path(path, sizeof path, n, key);
    return access(path, F_OK) == 0;
}

/* Replace the object of `key` behind the tier's back. */
static int object_write(const nginx *n, const uint8_t key[16], const void *data, size_t size)
{
    char path[4400], dir[4400];
    snprintf(dir, sizeof dir, "%s/fijit", n->www);
    mkdir(dir, 0700);
    object_path(path, sizeof path, n, key);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, size, f);
    return fclose(f) == 0 && w == size ? 0 : -1;
}

/* The object of `key` (caller frees), or NULL. */
static void *object_read(const nginx *n, const uint8_t key[16], size_t *size)
{
    char path[4400];
    object_path(path, sizeof path, n, key);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *data = malloc(1 << 20);
    *size = data ? fread(data, 1, 1 << 20, f) : 0;
    fclose(f);
    return data;
}

/* ---- helpers ---------------------------------------------------------------------- */

static int get_matches(fi_store *st, const uint8_t key[16], const void *want, size_t want_size)
{
    void *out = NULL;
    size_t size = 0;
    int ok = fi_store_get(st, key, &out, &size, NULL) == 0 && size == want_size &&
             memcmp(out, want, size) == 0;
    fi__free(out);
    return ok;
}

/* ---- URLs ------------------------------------------------------------------------- */

TEST(http_url_parses_and_names_what_is_wrong)
{
    fi_remote_config c;
    char masked[1024];
    CHECK_OK(fi_remote_config_parse(&c, "https://fleet:s%40cret@cache.example:8443/ci/cache/"
                                        "?prefix=prod&readonly&timeout=900&cafile=/etc/ca.pem"));
    CHECK(c.http && c.tls && strcmp(c.host, "cache.example") == 0 && c.port == 8443);
    CHECK(strcmp(c.path, "/ci/cache") == 0 && strcmp(c.prefix, "prod") == 0 && c.read_only);
    CHECK(strcmp(c.user, "fleet") == 0 && strcmp(c.password, "s@cret") == 0);
    CHECK(strcmp(c.cafile, "/etc/ca.pem") == 0 && c.timeout_ms == 900);
    CHECK(strcmp(c.url, "https://***@cache.example:8443/ci/cache/?prefix=prod&readonly&"
                        "timeout=900&cafile=/etc/ca.pem") == 0);
    CHECK_OK(fi_remote_config_parse(&c, "http://127.0.0.1"));
    CHECK(c.http && !c.tls && c.port == 80 && c.path[0] == '\0' && !c.password[0]);
    CHECK(c.connect_timeout_ms == FI_REMOTE_HTTP_CONNECT_TIMEOUT_MS &&
          c.timeout_ms == FI_REMOTE_HTTP_OPERATION_TIMEOUT_MS);
    CHECK_OK(fi_remote_config_parse(&c, "https://[::1]/"));
    CHECK(strcmp(c.host, "::1") == 0 && c.port == 443 && c.path[0] == '\0');
    static const struct {
        const char *url, *words;
    } bad[] = {
        {"ftp://x", "http[s]://"},
        {"http://", "no host"},
        {"http://h:0", "port"},
        {"http://h/a b", "space"},
        {"http://h/a%20b", "the path"},
        {"http://h/../etc", "no segment starting with '.'"},
        {"http://h?db=1", "option of a Redis remote"},
        {"http://h?ttl=60", "option of a Redis remote"},
        {"http://h?lease=100", "option of a Redis remote"},
        {"http://h?cafile=/ca.pem", "for https://"},
        {"https://h?cafile=ca.pem", "absolute path"},
        {"https://h?colour=red", "unknown option"},
        {"http://pw@h", "credentials"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_RC(fi_remote_config_parse(&c, bad[i].url), FI_EINVALID);
        CHECK_MSG(strstr(fi_last_error(), bad[i].words) != NULL, "%s: '%s'", bad[i].url,
                  fi_last_error());
    }
    /* Lists: separated by spaces, each URL checked and masked on its own. */
    CHECK_RC(fi_remote_list_check(" http://a:1  redis://:pw@b:2/0\tunix:///s.sock "), 3);
    CHECK_RC(fi_remote_list_check(""), 0);
    CHECK_RC(fi_remote_list_check("http://a redis://b?colour=red"), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "unknown option") != NULL);
    CHECK_RC(fi_remote_list_check("http://a http://a http://a http://a http://a http://a "
                                  "http://a http://a http://a"), FI_EINVALID);
    CHECK_OK(fi_remote_url_masked(masked, sizeof masked,
                                  "https://u:SEKRIT@h/c?prefix=p redis://:SEKRIT@r:1/0"));
    CHECK_MSG(strcmp(masked, "https://***@h/c?prefix=p redis://***@r:1/0") == 0, "%s", masked);
    static const char *const shapes[] = {
        "http://:SEKRIT@h", "https://u:SEKRIT@h:1/p", "http://h/SEK%52IT", "http://h:SEKRIT",
        "https://h?cafile=/a/SEKRIT%", "http://SEKRIT@h", "http://u:pa/SEKRIT@h/x",
        "http://u:pa?SEKRIT@h", "http://h SEKRIT", "http://a:1 http://:SEKRIT@b",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        CHECK_OK(fi_remote_url_masked(masked, sizeof masked, shapes[i]));
        CHECK_MSG(strstr(masked, "SEKRIT") == NULL, "%s masked as %s", shapes[i], masked);
        if (fi_remote_list_check(shapes[i]) < 0)
            CHECK_MSG(strstr(fi_last_error(), "SEKRIT") == NULL, "%s: %s", shapes[i],
                      fi_last_error());
    }
}

/* ---- two hosts ------------------------------------------------------------------------ */

static const char *const fleet_specs[] = {"decode q=fp16 hd=64", "decode q=bf16 hd=64"};
#define FLEET_SPECS 2

TEST(http_host_b_gets_host_a_compiles_as_remote_hits)
{
    nginx n;
    fi_jit_stats a, b;
    char url[4600];
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s/fleet?connect_timeout=5000&timeout=20000", n.url);
    int a_rc = check_host_wait(check_host_start("host-a", url, 1, fleet_specs, FLEET_SPECS));
    int b_rc = check_host_wait(check_host_start("host-b", url, 1, fleet_specs, FLEET_SPECS));
    nginx_stop(&n);
    CHECK(a_rc == 0 && b_rc == 0);
    CHECK_OK(check_host_stats(&a, "host-a"));
    CHECK_OK(check_host_stats(&b, "host-b"));
    CHECK_MSG(a.compiles == FLEET_SPECS && a.remote_misses >= FLEET_SPECS &&
                  a.remote_bytes_out > 0 && a.remote_errors == 0,
              "host A: %lld compiles, %lld remote misses, %lld errors", (long long)a.compiles,
              (long long)a.remote_misses, (long long)a.remote_errors);
    CHECK_MSG(b.compiles == 0 && b.remote_hits == FLEET_SPECS && b.entries == FLEET_SPECS &&
                  b.remote_corrupt == 0 && b.remote_errors == 0,
              "host B: %lld compiles, %lld remote hits, %lld entries", (long long)b.compiles,
              (long long)b.remote_hits, (long long)b.entries);
    CHECK(b.remote_bytes_in == a.remote_bytes_out);
}

/* ---- faults ---------------------------------------------------------------------------- */

TEST(http_server_killed_costs_one_call_then_the_back_off)
{
    nginx n;
    fi_store *st = NULL;
    fi_object_meta m;
    fi_jit_stats s;
    uint8_t key[16];
    char url[4600];
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s?backoff=60000&timeout=10000", n.url);
    CHECK_OK(check_open_store(&st, "host", url, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK(object_exists(&n, key));
    nginx_signal(&n, SIGKILL);
    int64_t first = check_timed_miss(st, 2);
    CHECK_OK(fi_store_stats_get(st, &s));
    const long long errors_after_first = s.remote_errors;
    int64_t during = check_timed_miss(st, 3);
    printf("  nginx killed: first miss %lld ms, then %lld ms during the back-off\n",
           (long long)first, (long long)during);
    CHECK(first >= 0 && during >= 0);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK_MSG(errors_after_first == 1 && s.remote_errors == 1, "remote errors %lld, then %lld",
              errors_after_first, (long long)s.remote_errors);
    /* Local work goes on. */
    check_key_of(key, 4);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK(get_matches(st, key, payload, sizeof payload));
    fi_store_close(st);
}

TEST(http_server_frozen_costs_one_timeout_per_back_off)
{
    nginx n;
    fi_store *st = NULL;
    fi_jit_stats s;
    char url[4600];
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=400&backoff=60000", n.url);
    CHECK_OK(check_open_store(&st, "host", url, NULL));
    /* No healthy call first: it would have to finish within the 400 ms too.
     * A frozen nginx's kernel still takes the connection; the GET times out. */
    nginx_signal(&n, SIGSTOP);
    int64_t first = check_timed_miss(st, 2);
    int64_t worst_after = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t = check_timed_miss(st, 10 + i);
        if (t > worst_after) worst_after = t;
    }
    nginx_stop(&n);
    printf("  nginx frozen: first miss %lld ms (the 400 ms timeout); next 20 misses at most "
           "%lld ms each (skipped for the back-off)\n", (long long)first, (long long)worst_after);
    /* The first miss waits out the timeout (a lower bound holds on any
     * machine; the upper one only says "no hang"); the next 20 are skipped,
     * which the single error counted shows. */
    CHECK(worst_after >= 0);
    CHECK_MSG(first >= 350 && first < 60000, "first miss %lld ms", (long long)first);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK_MSG(s.remote_errors == 1 && s.remote_misses == 0, "errors %lld, misses %lld",
              (long long)s.remote_errors, (long long)s.remote_misses);
    fi_store_close(st);
}

TEST(http_slow_server_past_the_timeout_is_a_timeout_not_a_hang)
{
    nginx n;
    fi_store *writer = NULL, *reader = NULL;
    fi_object_meta m;
    fi_jit_stats s;
    uint8_t key[16];
    char url[4600];
    /* 256 KiB at 4 KiB/s takes a minute; the reader's timeout is 1 s (the
     * writer's, far above what a PUT takes: limit_rate slows what nginx
     * sends, not what it takes). */
    size_t big_size = 256 << 10;
    uint8_t *big = malloc(big_size);
    CHECK(big != NULL);
    for (size_t i = 0; i < big_size; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);
    START_NGINX(&n, NGINX_SLOW);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=60000", n.url);
    CHECK_OK(check_open_store(&writer, "writer", url, NULL));
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=1000&backoff=60000", n.url);
    CHECK_OK(check_open_store(&reader, "reader", url, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(writer, key, big, big_size, &m));
    CHECK(object_exists(&n, key));
    void *out = NULL;
    size_t size;
    int64_t start = fi__now_ns();
    CHECK_RC(fi_store_get(reader, key, &out, &size, NULL), FI_ENOTFOUND);
    int64_t took = check_ms_since(start);
    printf("  nginx at 4 KiB/s: a 256 KiB entry gave up after %lld ms (timeout 1000 ms)\n",
           (long long)took);
    CHECK_MSG(took >= 900 && took < 60000, "%lld ms", (long long)took);
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK(s.remote_errors == 1 && s.remote_corrupt == 0 && s.entries == 0);
    nginx_stop(&n);
    fi_store_close(reader);
    fi_store_close(writer);
    free(big);
}

TEST(http_wrong_credentials_are_an_error_that_names_no_secret)
{
    nginx n;
    fi_store *st = NULL;
    fi_object_meta m;
    fi_jit_stats s;
    uint8_t key[16];
    char url[4600];
    START_NGINX(&n, NGINX_BASIC);
    check_meta_of(&m, 1);
    check_key_of(key, 1);
    /* Right credentials: stored. */
    snprintf(url, sizeof url, "http://fleet:opensesame@127.0.0.1:%d?connect_timeout=5000&"
             "timeout=10000", n.port);
    CHECK_OK(check_open_store(&st, "right", url, NULL));
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK(object_exists(&n, key));
    fi_store_close(st);
    /* Wrong ones: an error, counted, whose words name neither password. */
    fi_remote *remote = NULL;
    snprintf(url, sizeof url, "http://fleet:WRONGPASS@127.0.0.1:%d?connect_timeout=5000&"
             "timeout=10000", n.port);
    CHECK_OK(fi_remote_open(&remote, url));
    CHECK(remote->ops->has(remote, key) == FI_REMOTE_ERROR);
    CHECK_MSG(strstr(fi_last_error(), "HTTP 401") && strstr(fi_last_error(), "credentials") &&
                  !strstr(fi_last_error(), "WRONGPASS") && !strstr(fi_last_error(), "opensesame"),
              "%s", fi_last_error());
    CHECK(strstr(remote->config.url, "WRONGPASS") == NULL);
    remote->ops->close(remote);
    CHECK_OK(check_open_store(&st, "wrong", url, NULL));
    CHECK_RC(fi_store_get(st, key, &(void *){NULL}, &(size_t){0}, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors == 1 && s.remote_hits == 0);
    fi_store_close(st);
    nginx_stop(&n);

    /* A bearer token from FIJIT_REMOTE_TOKEN: refused when wrong, taken when right. */
    CHECK(nginx_start(&n, "bearer", NGINX_BEARER) == 0);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=10000", n.url);
    setenv("FIJIT_REMOTE_TOKEN", "tok-WRONG", 1);
    CHECK_OK(fi_remote_open(&remote, url));
    CHECK(remote->ops->put(remote, key, payload, sizeof payload) == FI_REMOTE_ERROR);
    CHECK(strstr(fi_last_error(), "HTTP 401") && !strstr(fi_last_error(), "tok-"));
    remote->ops->close(remote);
    setenv("FIJIT_REMOTE_TOKEN", "tok-123\r\nX-Evil: 1", 1);
    CHECK_RC(fi_remote_open(&remote, url), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "FIJIT_REMOTE_TOKEN") && !strstr(fi_last_error(), "tok-"));
    setenv("FIJIT_REMOTE_TOKEN", "tok-123", 1);
    CHECK_OK(fi_remote_open(&remote, url));
    CHECK(remote->ops->put(remote, key, payload, sizeof payload) == FI_REMOTE_OK);
    CHECK(remote->ops->has(remote, key) == FI_REMOTE_OK);
    remote->ops->close(remote);
    unsetenv("FIJIT_REMOTE_TOKEN");
    nginx_stop(&n);
}

TEST(http_tls_verifies_the_server_and_refuses_another_ca)
{
    nginx n;
    fi_remote *remote = NULL;
    uint8_t key[16];
    char url[16384];
    START_NGINX(&n, NGINX_TLS);
    check_key_of(key, 1);
    /* The CA that signed it: verified, stored, read back. */
    snprintf(url, sizeof url, "%s?cafile=%s&connect_timeout=5000&timeout=10000", n.url, n.ca);
    CHECK_OK(fi_remote_open(&remote, url));
    CHECK(remote->ops->put(remote, key, payload, sizeof payload) == FI_REMOTE_OK);
    void *out = NULL;
    size_t size = 0;
    CHECK(remote->ops->get(remote, key, &out, &size) == FI_REMOTE_OK);
    CHECK(size == sizeof payload && memcmp(out, payload, size) == 0);
    fi__free(out);
    remote->ops->close(remote);
    /* The system's CAs, and another CA: refused, nothing sent or taken. */
    CHECK(make_ca(n.dir, "other", 0) == 0);
    const char *cafiles[] = {NULL, "other.crt"};
    for (int i = 0; i < 2; i++) {
        if (cafiles[i])
            snprintf(url, sizeof url, "%s?cafile=%s/%s&connect_timeout=5000&timeout=10000", n.url,
                     n.dir, cafiles[i]);
        else snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=10000", n.url);
        CHECK_OK(fi_remote_open(&remote, url));
        out = NULL;
        CHECK(remote->ops->get(remote, key, &out, &size) == FI_REMOTE_ERROR && out == NULL);
        CHECK_MSG(strstr(fi_last_error(), "certificate") != NULL, "%s", fi_last_error());
        remote->ops->close(remote);
    }
    nginx_stop(&n);
}

/* `bad` under `key` on the server: the reader refuses it, counts it and
 * removes it, and writes nothing of it. */
static void check_refused(const nginx *n, fi_store *reader, const uint8_t key[16],
                          const void *bad, size_t bad_size, long long corrupt_before)
{
    void *out = NULL;
    size_t size;
    fi_jit_stats s;
    CHECK(object_write(n, key, bad, bad_size) == 0);
    CHECK_RC(fi_store_get(reader, key, &out, &size, NULL), FI_ENOTFOUND);
    CHECK(out == NULL);
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK_MSG(s.remote_corrupt == corrupt_before + 1 && s.entries == 0 && s.remote_hits == 0,
              "remote_corrupt %lld, entries %lld", (long long)s.remote_corrupt,
              (long long)s.entries);
    CHECK(!object_exists(n, key));
}

TEST(http_truncated_oversized_and_poisoned_objects_are_refused_and_counted)
{
    nginx n;
    fi_store *honest = NULL, *poisoner = NULL, *reader = NULL;
    fi_object_meta m;
    uint8_t key[16];
    char url[4600], path[4400];
    static const char evil[] = "a cubin the attacker wants every host to load";
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=10000", n.url);
    CHECK_OK(check_open_store(&honest, "honest", url, secret));
    CHECK_OK(check_open_store(&poisoner, "poisoner", url, NULL));
    CHECK_OK(check_open_store(&reader, "reader", url, secret));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(honest, key, payload, sizeof payload, &m));
    size_t good_size = 0;
    uint8_t *good = object_read(&n, key, &good_size);
    CHECK(good && good_size > sizeof payload);
    check_refused(&n, reader, key, good, good_size / 2, 0); /* truncated */
    good[good_size - 3] ^= 0x10;                            /* a flipped byte */
    check_refused(&n, reader, key, good, good_size, 1);
    free(good);
    /* Poisoned: a well-formed entry without the fleet's MAC... */
    CHECK_OK(fi_store_put(poisoner, key, evil, sizeof evil, &m));
    CHECK(object_exists(&n, key));
    CHECK_RC(fi_store_get(reader, key, &(void *){NULL}, &(size_t){0}, NULL), FI_ENOTFOUND);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK(s.remote_corrupt == 3 && s.entries == 0);
    /* ...and one sealed with a guessed key. */
    void *entry = NULL, *forged = NULL;
    size_t entry_size, forged_size;
    fi_seal_key wrong;
    CHECK_OK(fi_object_encode(&entry, &entry_size, key, &m, evil, sizeof evil));
    CHECK_OK(fi_seal_key_derive(&wrong, "not the fleet's secret at all"));
    CHECK_OK(fi_seal_wrap(&forged, &forged_size, &wrong, key, entry, entry_size));
    check_refused(&n, reader, key, forged, forged_size, 3);
    fi__free(entry);
    fi__free(forged);
    /* Oversized: refused from its declared length, before a byte is read. */
    CHECK(object_write(&n, key, "x", 1) == 0);
    object_path(path, sizeof path, &n, key);
    CHECK(truncate(path, (off_t)FI_REMOTE_VALUE_MAX + 1) == 0);
    CHECK_RC(fi_store_get(reader, key, &(void *){NULL}, &(size_t){0}, NULL), FI_ENOTFOUND);
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK_MSG(s.remote_corrupt == 5 && s.remote_bytes_in < 4096 && s.entries == 0,
              "corrupt %lld, bytes in %lld", (long long)s.remote_corrupt,
              (long long)s.remote_bytes_in);
    CHECK(!object_exists(&n, key));
    /* The honest entry, pushed again, is served. */
    CHECK_OK(fi_store_put(honest, key, payload, sizeof payload, &m));
    CHECK(get_matches(reader, key, payload, sizeof payload));
    fi_store_close(reader);
    fi_store_close(poisoner);
    fi_store_close(honest);
    nginx_stop(&n);
}

TEST(http_read_only_remote_serves_and_never_writes)
{
    nginx n;
    fi_store *writer = NULL, *consumer = NULL;
    fi_object_meta m;
    uint8_t key[16], mine[16];
    char url[4600];
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=10000", n.url);
    CHECK_OK(check_open_store(&writer, "writer", url, NULL));
    snprintf(url, sizeof url, "%s?readonly&connect_timeout=5000&timeout=10000", n.url);
    CHECK_OK(check_open_store(&consumer, "consumer", url, NULL));
    check_key_of(key, 1);
    check_key_of(mine, 2);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(writer, key, payload, sizeof payload, &m));
    CHECK(get_matches(consumer, key, payload, sizeof payload));
    CHECK_OK(fi_store_put(consumer, mine, payload, sizeof payload, &m));
    CHECK(!object_exists(&n, mine));
    /* A bad object stays where it is (a read-only remote removes nothing). */
    uint8_t bad_key[16];
    check_key_of(bad_key, 3);
    CHECK(object_write(&n, bad_key, "FIJITOB1 nonsense", 17) == 0);
    CHECK_RC(fi_store_get(consumer, bad_key, &(void *){NULL}, &(size_t){0}, NULL), FI_ENOTFOUND);
    CHECK(object_exists(&n, bad_key));
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(consumer, &s));
    CHECK(s.remote_errors == 0 && s.remote_bytes_out == 0 && s.remote_corrupt == 1);
    fi_store_close(consumer);
    fi_store_close(writer);
    nginx_stop(&n);
}

TEST(http_server_whose_disk_refuses_writes_counts_the_put_and_serves_on)
{
    nginx n;
    fi_store *st = NULL;
    fi_object_meta m;
    uint8_t key[16], served[16];
    char url[4600];
    START_NGINX(&n, NGINX_WRITES_FAIL);
    /* An entry the server held before its disk filled. */
    check_key_of(served, 1);
    check_meta_of(&m, 1);
    void *entry = NULL;
    size_t entry_size = 0;
    CHECK_OK(fi_object_encode(&entry, &entry_size, served, &m, payload, sizeof payload));
    CHECK(object_write(&n, served, entry, entry_size) == 0);
    fi__free(entry);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=10000&backoff=1", n.url);
    CHECK_OK(check_open_store(&st, "host", url, NULL));
    check_key_of(key, 2);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m)); /* local: stored */
    CHECK(!object_exists(&n, key));
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK_MSG(s.remote_errors == 1 && s.remote_bytes_out == 0, "errors %lld, bytes out %lld",
              (long long)s.remote_errors, (long long)s.remote_bytes_out);
    CHECK(get_matches(st, key, payload, sizeof payload));
    usleep(20 * 1000); /* past the 1 ms back-off */
    CHECK(get_matches(st, served, payload, sizeof payload));
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_hits == 1 && s.entries == 2);
    fi_store_close(st);
    nginx_stop(&n);
}

/* ---- many processes, several remotes ---------------------------------------------------- */

/* Process `p` walks keys p*4 .. p*4+15 (each overlaps its neighbours'):
 * a miss everywhere is "built" and put. Exits with the count of keys it
 * could not get back afterwards. */
static pid_t walker_start(int p, const char *url)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    char name[32];
    fi_store *st = NULL;
    fi_object_meta m;
    snprintf(name, sizeof name, "walker-%d", p);
    if (check_open_store(&st, name, url, secret) < 0) _exit(100);
    int lost = 0;
    for (int i = p * 4; i < p * 4 + 16; i++) {
        uint8_t key[16];
        check_key_of(key, i);
        check_meta_of(&m, i);
        if (!get_matches(st, key, payload, sizeof payload) &&
            fi_store_put(st, key, payload, sizeof payload, &m) < 0)
            lost++;
    }
    for (int i = p * 4; i < p * 4 + 16; i++) {
        uint8_t key[16];
        check_key_of(key, i);
        lost += !get_matches(st, key, payload, sizeof payload);
    }
    fi_store_close(st);
    _exit(lost);
}

TEST(http_eight_processes_on_overlapping_keys_leave_every_entry_whole)
{
    enum { PROCESSES = 8, KEYS = (PROCESSES - 1) * 4 + 16 };
    nginx n;
    pid_t pids[PROCESSES];
    char url[4600];
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s/fleet?connect_timeout=5000&timeout=20000", n.url);
    for (int p = 0; p < PROCESSES; p++) pids[p] = walker_start(p, url);
    int failed = 0;
    for (int p = 0; p < PROCESSES; p++) failed += check_host_wait(pids[p]) != 0;
    CHECK_MSG(failed == 0, "%d of %d processes lost entries", failed, PROCESSES);
    /* Every key is on the server, whole: a fresh host gets each one. */
    fi_store *fresh = NULL;
    fi_jit_stats s;
    CHECK_OK(check_open_store(&fresh, "fresh", url, secret));
    int whole = 0;
    for (int i = 0; i < KEYS; i++) {
        uint8_t key[16];
        check_key_of(key, i);
        whole += get_matches(fresh, key, payload, sizeof payload);
    }
    CHECK_OK(fi_store_stats_get(fresh, &s));
    CHECK_MSG(whole == KEYS && s.remote_hits == KEYS && s.remote_corrupt == 0,
              "%d of %d whole, %lld remote hits", whole, KEYS, (long long)s.remote_hits);
    fi_store_close(fresh);
    nginx_stop(&n);
}

typedef struct thread_run {
    fi_store *st;
    int first;
    atomic_int lost;
} thread_run;

/* Keys first .. first+15 (a thread's 16): put, then read back through the
 * shared remote's pool of handles. */
static void *hammer_remote(void *arg)
{
    thread_run *run = arg;
    fi_object_meta m;
    for (int i = run->first; i < run->first + 16; i++) {
        uint8_t key[16];
        check_key_of(key, i);
        check_meta_of(&m, i);
        if (fi_store_put(run->st, key, payload, sizeof payload, &m) < 0)
            atomic_fetch_add(&run->lost, 1);
    }
    return NULL;
}

TEST(http_threads_share_one_remote)
{
    enum { THREADS = 12 }; /* more than the pool keeps: extra handles are closed */
    nginx n;
    fi_store *st = NULL, *reader = NULL;
    pthread_t t[THREADS];
    thread_run runs[THREADS];
    char url[4600];
    START_NGINX(&n, 0);
    snprintf(url, sizeof url, "%s?connect_timeout=5000&timeout=20000", n.url);
    CHECK_OK(check_open_store(&st, "writer", url, NULL));
    for (int i = 0; i < THREADS; i++) {
        runs[i].st = st;
        runs[i].first = i * 16;
        atomic_init(&runs[i].lost, 0);
        pthread_create(&t[i], NULL, hammer_remote, &runs[i]);
    }
    int lost = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        lost += atomic_load(&runs[i].lost);
    }
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK_MSG(lost == 0 && s.remote_errors == 0, "%d lost, %lld remote errors", lost,
              (long long)s.remote_errors);
    CHECK_OK(check_open_store(&reader, "reader", url, NULL));
    int whole = 0;
    for (int i = 0; i < THREADS * 16; i++) {
        uint8_t key[16];
        check_key_of(key, i);
        whole += get_matches(reader, key, payload, sizeof payload);
    }
    CHECK_MSG(whole == THREADS * 16, "%d of %d entries came back", whole, THREADS * 16);
    fi_store_close(reader);
    fi_store_close(st);
    nginx_stop(&n);
}

typedef struct remote_counts {
    char names[4][512];
    fi_jit_stats rows[4];
    int count;
} remote_counts;

static int collect_counts(void *user, const char *remote, const fi_jit_stats *counts)
{
    remote_counts *c = user;
    if (c->count == 4) return 1;
    snprintf(c->names[c->count], sizeof c->names[0], "%s", remote);
    c->rows[c->count++] = *counts;
    return 0;
}

/* The counts of the remote whose URL begins `url` and goes on with '?'. */
static const fi_jit_stats *counts_of(const remote_counts *c, const char *url)
{
    for (int i = 0; i < c->count; i++)
        if (strncmp(c->names[i], url, strlen(url)) == 0 && c->names[i][strlen(url)] == '?')
            return &c->rows[i];
    return NULL;
}

TEST(http_remotes_in_a_list_are_asked_in_order_and_all_written)
{
    nginx first, second;
    fi_store *st = NULL, *reader = NULL;
    fi_object_meta m;
    uint8_t key[16];
    char urls[9400];
    START_NGINX(&first, 0);
    CHECK(nginx_start(&second, "second", 0) == 0);
    snprintf(urls, sizeof urls, "%s?connect_timeout=5000&timeout=10000 "
             "%s?connect_timeout=5000&timeout=10000", first.url, second.url);
    CHECK_OK(check_open_store(&st, "writer", urls, NULL));
    check_key_of(key, 1);
    check_meta_of(&m, 1);
    CHECK_OK(fi_store_put(st, key, payload, sizeof payload, &m));
    CHECK(object_exists(&first, key) && object_exists(&second, key)); /* written to each */
    /* The first is asked first; without it, the second serves. */
    CHECK_OK(check_open_store(&reader, "reader", urls, NULL));
    nginx_signal(&first, SIGKILL);
    CHECK(get_matches(reader, key, payload, sizeof payload));
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(reader, &s));
    CHECK(s.remote_errors == 1 && s.remote_hits == 1);
    /* Each remote's own counters, saved with the totals. */
    fi_jit_stats none = {0};
    remote_counts counts = {0};
    CHECK_OK(fi_store_stats_add(reader, &none));
    CHECK_OK(fi_store_stats_add(st, &none));
    CHECK_OK(fi_store_remote_stats_foreach(reader, collect_counts, &counts));
    const fi_jit_stats *a = counts_of(&counts, first.url), *b = counts_of(&counts, second.url);
    CHECK_MSG(counts.count == 2 && a && b, "%d remotes", counts.count);
    CHECK(a->remote_errors == 1 && a->remote_hits == 0 && a->remote_bytes_in == 0);
    CHECK(b->remote_errors == 0 && b->remote_hits == 1 && b->remote_bytes_in > 0);
    counts.count = 0;
    CHECK_OK(fi_store_remote_stats_foreach(st, collect_counts, &counts));
    a = counts_of(&counts, first.url);
    b = counts_of(&counts, second.url);
    CHECK(counts.count == 2 && a && b && a->remote_bytes_out > 0 &&
          a->remote_bytes_out == b->remote_bytes_out);
    fi_store_close(reader);
    fi_store_close(st);
    nginx_stop(&second);
}

/* With an HTTP remote first and Redis second, the build lease is taken in
 * Redis (an HTTP store has none); with HTTP alone, the local lock only. */
TEST(http_beside_redis_leaves_the_fleet_lease_to_redis)
{
    nginx n;
    check_redis r;
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    char urls[9000], hex[33], lease[128];
    START_NGINX(&n, 0);
    int started = check_redis_start(&r, check_tmpdir, NULL, NULL);
    if (started == 1) {
        nginx_stop(&n);
        return;
    }
    CHECK(started == 0);
    snprintf(urls, sizeof urls, "%s?connect_timeout=5000&timeout=10000 %s", n.url, r.url);
    CHECK_OK(check_open_store(&st, "host", urls, NULL));
    check_key_of(key, 1);
    fi_key_hex(hex, key);
    snprintf(lease, sizeof lease, "fijit:lease:%s", hex);
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    redisContext *c = redisConnectUnix(r.socket);
    redisReply *reply = c ? redisCommand(c, "EXISTS %s", lease) : NULL;
    CHECK(reply && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1);
    if (reply) freeReplyObject(reply);
    fi_store_unlock(lock);
    fi_store_close(st);
    /* HTTP alone: the lock is the local one, and nothing is asked of a lease. */
    snprintf(urls, sizeof urls, "%s?connect_timeout=5000&timeout=10000", n.url);
    CHECK_OK(check_open_store(&st, "alone", urls, NULL));
    lock = NULL;
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    CHECK(lock != NULL);
    fi_store_unlock(lock);
    fi_jit_stats s;
    CHECK_OK(fi_store_stats_get(st, &s));
    CHECK(s.remote_errors == 0);
    fi_store_close(st);
    if (c) redisFree(c);
    check_redis_stop(&r);
    nginx_stop(&n);
}
