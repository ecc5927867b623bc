/*
 * Minimal test harness shared by the CPU test programs.
 *
 *   TEST(store_put_then_get) { ...; CHECK(x == 1); CHECK_OK(fi_...(...)); }
 * (main is in check.c)
 *
 * Tests register themselves through a constructor; each runs in order, with a
 * fresh temp directory in `check_tmpdir` (removed afterwards). A failed CHECK
 * records the failure and returns from the test. The summary line
 * "N passed, N failed" is what CI reads.
 */
#ifndef FI_CHECK_H
#define FI_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "fijit.h"
#include "store/object.h"
#include "store/store.h"

typedef void (*check_fn)(void);
typedef struct check_case {
    const char *name;
    check_fn fn;
} check_case;

void check_register(const char *name, check_fn fn);
int check_main(int argc, char **argv);
void check_fail(const char *file, int line, const char *expr, const char *detail);
/* A fresh, empty directory for the running test. */
extern char check_tmpdir[];

/* FIJIT_TEST_QUICK is set (sanitizer runs): sweeps take a sample. */
/* The spec `text` names (its variant name in a static buffer); aborts the
 * test program with the parser's message when it does not parse. */
fi_jit_spec parse_or_die(const char *text);
int check_quick(void);
/* A quiet context on a cache in check_tmpdir, compiling for `arch`. */
int check_ctx_new(fi_jit_ctx **out, const char *arch);
/* A quiet context on the cache in `dir`, compiling for `arch`. */
int check_ctx_in(fi_jit_ctx **out, const char *dir, const char *arch);
/* The modules (cache entries, compiles) specs[0..n) build on `arch`: one a
 * tuple, or one per part of a tuple built in parts (a key each in
 * fi_jit_explain's listing). A negative code when one cannot be explained. */
int check_modules_of(fi_jit_ctx *ctx, const fi_jit_spec *specs, int n, const char *arch);
/* Threads (or processes) the compile sweeps and fault loops use:
 * $FIJIT_TEST_JOBS, default 2, at most CHECK_MAX_JOBS. */
#define CHECK_MAX_JOBS 16
int check_jobs(void);
/* Prewarm specs[0..n) for ctx's arch on check_jobs() threads; each must succeed,
 * with outcome `want` unless `want` < 0. Returns the number of failures and
 * describes the first in `err`. */
int check_prewarm_all(fi_jit_ctx *ctx, const fi_jit_spec *specs, int n, int want, char *err,
                      size_t err_size);
extern int check_current_failed;
/* The fake CUDA driver (tests/fake_cuda.c) built next to the test program as
 * libcuda.so.1, loaded once with RTLD_GLOBAL before fijit's first driver
 * call (which then finds it by soname), or the build $FIJIT_TEST_FAKE_CUDA
 * names; its handle, or NULL with a message on stderr. */
void *check_fake_cuda(void);
/* Loads the fake driver (check_fake_cuda) and makes its device's primary
 * context current on this thread: 0, or -1 with a message on stderr. */
int check_fake_cuda_current(void);
/* A one-pass decode of 100 keys (8 query heads over 2 KV heads, NHD) of
 * `spec` in the current context, on addresses the fake driver never reads:
 * it refuses a function of another context, as a GPU does. */
int check_fake_decode(fi_jit_ctx *ctx, const fi_jit_spec *spec);

/* A quiet context on the cache in `dir` (use_disk 0: in memory only). */
int check_ctx_on(fi_jit_ctx **out, const char *dir, int use_disk);
/* A cache holding the `n` kernels `specs` name, built for sm_90a once per
 * process and removed at exit, for tests that do not count compiles; or the
 * one $FIJIT_TEST_SHARED_CACHE names (a test's child process sharing its
 * parent's). NULL with a message on stderr when it cannot be made. */
#define CHECK_SHARED_CACHE_ENV "FIJIT_TEST_SHARED_CACHE"
const char *check_shared_cache(const char *const *specs, int n);

/* A private redis-server for the remote-tier tests: on a unix socket in
 * `dir` (no TCP port, nothing saved to disk), its URL in `url` (with
 * `url_options`, e.g. "?backoff=100", appended). */
typedef struct check_redis {
    int pid;
    char dir[4096];
    char socket[4200];
    char password[64]; /* "" none */
    char url[4400];
} check_redis;
/* Start one (with a password unless NULL) and wait until it answers: 0, or
 * 1 when redis-server is not installed (a loud SKIPPED line is printed:
 * `make deps` installs it), or -1 when it failed to start. */
int check_redis_start(check_redis *r, const char *dir, const char *password,
                      const char *url_options);
/* Start it again, empty, on the same socket (after check_redis_kill). */
int check_redis_restart(check_redis *r);
/* Send `sig` to it (SIGKILL: reaped; SIGSTOP/SIGCONT: paused, resumed). */
void check_redis_signal(check_redis *r, int sig);
/* Stop it (if running) and reap it. Accepts a server never started. */
void check_redis_stop(check_redis *r);

/* Fixtures of the remote-tier tests, at the store level: key `i` (i < 65536),
 * an entry's metadata for it, and a store on cache dir check_tmpdir/<name>
 * with the remotes of `urls` (a space-separated list; NULL: none) and the
 * fleet secret (NULL: none). */
void check_key_of(uint8_t key[16], int i);
void check_meta_of(fi_object_meta *m, int i);
int check_open_store(fi_store **st, const char *name, const char *urls, const char *fleet_secret);
int64_t check_ms_since(int64_t start_ns);
/* Get key `i` (a miss everywhere): how long it took in ms, or -1 when it
 * was no miss. */
int64_t check_timed_miss(fi_store *st, int i);

/* A fleet host for the remote-tier tests: a child process with its own
 * cache dir check_tmpdir/<name> (arch sm_90a, remote `url`) that prewarms
 * specs[0..count) from each of `threads` threads (at most 4). Its pid;
 * check_host_wait gives its exit code: 0 when every prewarm succeeded. */
pid_t check_host_start(const char *name, const char *url, int threads,
                       const char *const *specs, int count);
int check_host_wait(pid_t pid);
/* The statistics of cache dir check_tmpdir/<name>. */
int check_host_stats(fi_jit_stats *out, const char *name);

/* Send fd 2 (the library's log) to the file `path` until check_stderr_end,
 * which puts it back and returns what was written (at most size - 1 bytes,
 * NUL-terminated, in `out`). */
void check_stderr_begin(const char *path);
void check_stderr_end(char *out, size_t size);

#define TEST(name)                                                             \
    static void test_##name(void);                                             \
    __attribute__((constructor)) static void register_##name(void)             \
    {                                                                          \
        check_register(#name, test_##name);                                    \
    }                                                                          \
    static void test_##name(void)

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            check_fail(__FILE__, __LINE__, #cond, NULL);                       \
            return;                                                            \
        }                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        if (!(cond)) {                                                         \
            char detail__[8192];                                               \
            snprintf(detail__, sizeof detail__, __VA_ARGS__);                  \
            check_fail(__FILE__, __LINE__, #cond, detail__);                   \
            return;                                                            \
        }                                                                      \
    } while (0)

/* Expect a fijit call to return `code`; on mismatch print fi_last_error(). */
#define CHECK_RC(expr, code)                                                   \
    do {                                                                       \
        int rc__ = (expr);                                                     \
        if (rc__ != (code)) {                                                  \
            char detail__[1200];                                               \
            snprintf(detail__, sizeof detail__, "got %d (%s), want %d: %s",    \
                     rc__, fi_error_name(rc__), (int)(code), fi_last_error()); \
            check_fail(__FILE__, __LINE__, #expr, detail__);                   \
            return;                                                            \
        }                                                                      \
    } while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

#endif
