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

#include "fijit.h"

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
 * call (which then finds it by soname); its handle, or NULL with a message
 * on stderr. */
void *check_fake_cuda(void);
/* Loads the fake driver (check_fake_cuda) and makes its device's primary
 * context current on this thread: 0, or -1 with a message on stderr. */
int check_fake_cuda_current(void);

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
