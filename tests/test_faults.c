/*
 * Fault loops in the style of SQLite's malloc tests: for N = 1, 2, ... make
 * the Nth allocation / file operation / SQLite call / NVRTC call fail, once
 * and then persistently, while a context opens a cache, reads one kernel from
 * disk and compiles another (and, with a Redis remote, the Nth command sent
 * to it). Every call must return OK or an fi_error with a
 * message, nothing may leak (ASan/LSan in `make test`), and afterwards the
 * cache must verify clean and serve both kernels.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "store/store.h"
#include "common/sys.h"

static const char *const cached_spec = "decode q=fp16 hd=64";
static const char *const new_spec = "decode q=bf16 hd=64 mask=window";

static int expected_code(int rc)
{
    return rc == 0 || rc == FI_EIO || rc == FI_ENOMEM || rc == FI_ECOMPILE ||
           rc == FI_ENOTFOUND || rc == FI_ECORRUPT;
}

static fi_jit_spec spec_of(const char *text)
{
    static char variant[64];
    fi_jit_spec spec;
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) abort();
    return spec;
}

static int open_ctx(fi_jit_ctx **out, const char *dir) { return check_ctx_in(out, dir, "sm_90a"); }

/* The workload under faults; returns the first unexpected code, or 0. */
static int workload(const char *dir, char *why, size_t why_size)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    fi_jit_spec a = spec_of(cached_spec), b = spec_of(new_spec);
    int rc = open_ctx(&ctx, dir);
    if (rc < 0) {
        if (!expected_code(rc) || !*fi_last_error()) goto bad;
        return 0;
    }
    const fi_jit_spec *specs[] = {&a, &b, &a};
    for (int i = 0; i < 3; i++) {
        rc = fi_jit_prewarm(NULL, ctx, specs[i], NULL);
        if (!expected_code(rc) || (rc < 0 && !*fi_last_error())) goto bad;
    }
    rc = fi_jit_stats_get(&stats, ctx);
    if (!expected_code(rc)) goto bad;
    fi_jit_ctx_free(ctx);
    return 0;
bad:
    snprintf(why, why_size, "rc %d (%s): '%s'", rc, fi_error_name(rc), fi_last_error());
    fi_jit_ctx_free(ctx);
    return rc ? rc : -100;
}

static void report_problem(void *user, const char *problem)
{
    snprintf(user, 512, "%s", problem);
}

/* With faults off: the cache verifies clean and serves both kernels. */
static int cache_is_healthy(const char *dir, char *why, size_t why_size)
{
    fi_store *store = NULL;
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec a = spec_of(cached_spec), b = spec_of(new_spec);
    char problem[512] = "";
    int rc = fi_store_open(&store, dir, 0, 0);
    if (rc == 0) rc = fi_store_verify(store, 0, report_problem, problem);
    fi_store_close(store);
    if (rc != 0) {
        snprintf(why, why_size, "verify: %d problems (%s) %s", rc, problem, fi_last_error());
        return -1;
    }
    if ((rc = open_ctx(&ctx, dir)) == 0 && (rc = fi_jit_prewarm(NULL, ctx, &a, NULL)) == 0)
        rc = fi_jit_prewarm(NULL, ctx, &b, NULL);
    fi_jit_ctx_free(ctx);
    if (rc < 0) snprintf(why, why_size, "after faults: %s", fi_last_error());
    return rc;
}

/* Fault points first, first + stride, ... in a fresh copy of `base` each,
 * until one runs past the workload's last fault point (*last); returns 0, or
 * -1 with the failure in `why`. */
static int fault_points(unsigned mask, int persistent, long first, long stride, long max_n,
                        const char *base, const char *work, long *last, char *why,
                        size_t why_size)
{
    char cmd[13000];
    for (long n = first; n < max_n; n += stride) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", work, base, work);
        if (system(cmd) != 0) {
            snprintf(why, why_size, "fault %ld: cannot copy the base cache", n);
            return -1;
        }
        fi__fault_arm(mask, n, persistent);
        char step[1024] = "";
        int rc = workload(work, step, sizeof step);
        long fired = fi__fault_count();
        fi__fault_arm(0, 0, 0);
        if (rc == 0 && cache_is_healthy(work, step, sizeof step) != 0) rc = -1;
        if (rc != 0) {
            snprintf(why, why_size, "fault %ld%s: %s", n, persistent ? " (persistent)" : "", step);
            return -1;
        }
        *last = n;
        if (fired == 0) return 0; /* the workload ran past its last fault point */
    }
    snprintf(why, why_size, "fault loop did not finish within %ld faults", max_n);
    return -1;
}

/* The fault points are independent (each starts from a copy of the base
 * cache), so check_jobs() forked workers share them out, interleaved: most
 * points cost an NVRTC compile, and the loops were most of `make test`. A
 * worker reports its failure on stderr and in its exit status (and leaks, in
 * sanitizer runs, at its exit). */
static void fault_loop(unsigned mask, int persistent)
{
    /* Sanitizer runs take the single-fault loops only: each point compiles a kernel. */
    if (persistent && getenv("FIJIT_TEST_QUICK")) return;
    char base[4200];
    snprintf(base, sizeof base, "%.4000s/base", check_tmpdir);
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec a = spec_of(cached_spec);
    CHECK_OK(open_ctx(&ctx, base));
    CHECK_OK(fi_jit_prewarm(NULL, ctx, &a, NULL));
    fi_jit_ctx_free(ctx);
    const long max_n = getenv("FIJIT_TEST_QUICK") ? 400 : 4000;
    const int workers = check_jobs();
    pid_t pids[CHECK_MAX_JOBS];
    int started = 0;
    fflush(NULL);
    for (int k = 0; k < workers; k++, started++) {
        if ((pids[k] = fork()) < 0) break;
        if (pids[k] == 0) {
            char work[4200], why[1400] = "";
            long last = 0;
            snprintf(work, sizeof work, "%.4000s/work%d", check_tmpdir, k);
            const int rc = fault_points(mask, persistent, 1 + k, workers, max_n, base, work,
                                        &last, why, sizeof why);
            if (rc != 0) fprintf(stderr, "  worker %d of %d: %s\n", k + 1, workers, why);
            else printf("  worker %d of %d: faults survived up to point %ld, where none fires "
                        "(mask %#x%s)\n", k + 1, workers, last, mask,
                        persistent ? ", persistent" : "");
            exit(rc != 0);
        }
    }
    int failed = workers - started; /* those that could not be forked */
    for (int k = 0; k < started; k++) {
        int status = 0;
        if (waitpid(pids[k], &status, 0) != pids[k] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            failed++;
    }
    CHECK_MSG(failed == 0, "%d of %d fault workers failed (mask %#x%s; their errors above)",
              failed, workers, mask, persistent ? ", persistent" : "");
}

/* The remote tier's calls, like every other seam: a context with a Redis
 * remote (FIJIT_REMOTE, so that the forked workers and the health check
 * use it too) where the Nth command sent to Redis fails. */
static void remote_fault_loop(int persistent)
{
    check_redis r;
    char dir[4200];
    snprintf(dir, sizeof dir, "%.4000s/redis", check_tmpdir);
    if (mkdir(dir, 0700) < 0) CHECK_MSG(0, "cannot create %s", dir);
    int started = check_redis_start(&r, dir, NULL, NULL);
    if (started == 1) return;
    CHECK_MSG(started == 0, "redis-server did not start (see %s/redis.log)", dir);
    setenv("FIJIT_REMOTE", r.url, 1);
    fault_loop(FI_FAULT_REMOTE, persistent);
    unsetenv("FIJIT_REMOTE");
    check_redis_stop(&r);
}

TEST(faults_in_remote_calls_once) { remote_fault_loop(0); }
TEST(faults_in_remote_calls_persistent) { remote_fault_loop(1); }

TEST(faults_in_allocations_once) { fault_loop(FI_FAULT_ALLOC, 0); }
TEST(faults_in_allocations_persistent) { fault_loop(FI_FAULT_ALLOC, 1); }
TEST(faults_in_file_operations_once) { fault_loop(FI_FAULT_FILE, 0); }
TEST(faults_in_file_operations_persistent) { fault_loop(FI_FAULT_FILE, 1); }
TEST(faults_in_sqlite_once) { fault_loop(FI_FAULT_SQL, 0); }
TEST(faults_in_sqlite_persistent) { fault_loop(FI_FAULT_SQL, 1); }
TEST(faults_in_nvrtc_once) { fault_loop(FI_FAULT_NVRTC, 0); }
TEST(faults_in_nvrtc_persistent) { fault_loop(FI_FAULT_NVRTC, 1); }
