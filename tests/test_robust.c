/*
 * Robustness of the cache seen through the public API: many
 * processes and threads on an empty cache, builders killed with SIGKILL at
 * random moments, damaged objects and indexes, a full disk and a read-only
 * store, size and age limits, bad input of every kind, and hostile cache
 * directories (foreign owners, open modes, planted symlinks, SQL quotes).
 * Statistics, fi_store_verify and the bytes on disk are the oracles.
 *
 * FIJIT_TEST_QUICK=1 (sanitizer runs) shrinks the process/kill counts;
 * FIJIT_TEST_LONG=1 grows them (16x8 for longer, 400 kills).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "check.h"
#include "kinds/spec.h"
#include "store/store.h"
#include "common/sys.h"

/* ---- fixtures ------------------------------------------------------------------ */

static int long_run(void) { return getenv("FIJIT_TEST_LONG") != NULL; }

static double now_s(void) { return (double)fi__now_ns() / 1e9; }

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

static fi_jit_spec spec_of(const char *text)
{
    static char variant[64];
    fi_jit_spec spec;
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) {
        fprintf(stderr, "cannot parse '%s': %s\n", text, fi_last_error());
        abort();
    }
    return spec;
}

static void path_in(char *out, const char *name)
{
    snprintf(out, 4200, "%.4000s/%s", check_tmpdir, name);
}

static int ctx_open(fi_jit_ctx **out, const char *dir, int log_level, int64_t max_bytes)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = (fi_log_level)log_level;
    opts.max_cache_bytes = max_bytes;
    return fi_jit_ctx_new(out, &opts);
}

/* Prewarm `text` in a context of its own on `dir`; the outcome or an error. */
static int prewarm_in(const char *dir, const char *text)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec spec = spec_of(text);
    fi_build_outcome outcome = FI_BUILD_CACHED;
    int rc = ctx_open(&ctx, dir, FI_LOG_OFF, 0);
    if (rc == 0) rc = fi_jit_prewarm(&outcome, ctx, &spec, NULL);
    fi_jit_ctx_free(ctx);
    return rc < 0 ? rc : (int)outcome;
}

typedef struct text_buf {
    char text[32768];
    size_t used;
} text_buf;

static void text_append(void *user, const char *text)
{
    text_buf *b = user;
    size_t n = strlen(text);
    if (b->used + n >= sizeof b->text) n = sizeof b->text - 1 - b->used;
    memcpy(b->text + b->used, text, n);
    b->used += n;
    b->text[b->used] = '\0';
}

/* The cache key of `spec` for sm_90a, from fi_jit_explain's "key <hex>" line. */
static int key_of(fi_jit_ctx *ctx, const fi_jit_spec *spec, uint8_t key[16], char hex[33])
{
    static _Thread_local text_buf buf;
    buf.used = 0;
    buf.text[0] = '\0';
    int rc = fi_jit_explain(ctx, spec, "sm_90a", text_append, &buf);
    if (rc < 0) return rc;
    const char *p = buf.text, *last = NULL;
    while ((p = strstr(p, "key "))) {
        if (p == buf.text || p[-1] == '\n') last = p;
        p += 4;
    }
    if (!last || strspn(last + 4, "0123456789abcdef") < 32) return -100;
    memcpy(hex, last + 4, 32);
    hex[32] = '\0';
    for (int i = 0; i < 16; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        key[i] = (uint8_t)v;
    }
    return 0;
}

static int key_of_text(const char *dir, const char *text, uint8_t key[16], char hex[33])
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec spec = spec_of(text);
    int rc = ctx_open(&ctx, dir, FI_LOG_OFF, 0);
    if (rc == 0) rc = key_of(ctx, &spec, key, hex);
    fi_jit_ctx_free(ctx);
    return rc;
}

static void object_path_of(char *out, const char *dir, const char *hex)
{
    snprintf(out, 4300, "%.4000s/objects/%.2s/%s.fo", dir, hex, hex);
}

/* A served object must be a cubin (ELF) of the right spec and arch. */
static int object_ok(fi_store *st, const uint8_t key[16], const char *spec_text, char *why,
                     size_t why_size)
{
    void *data = NULL;
    size_t size = 0;
    fi_object_meta meta;
    int rc = fi_store_get(st, key, &data, &size, &meta);
    if (rc < 0) {
        snprintf(why, why_size, "get: %s", fi_last_error());
        return rc;
    }
    int ok = size > 64 && memcmp(data, "\x7f" "ELF", 4) == 0 && strcmp(meta.arch, "sm_90a") == 0;
    if (ok && spec_text) {
        char canonical[256];
        fi_jit_spec spec = spec_of(spec_text);
        ok = fi_jit_spec_format(canonical, sizeof canonical, &spec) > 0 &&
             strcmp(canonical, meta.spec) == 0;
    }
    if (!ok) snprintf(why, why_size, "object is not the cubin of '%s' (meta '%s' %s, %zu bytes)",
                      spec_text ? spec_text : "?", meta.spec, meta.arch, size);
    fi__free(data);
    return ok ? 0 : -101;
}

typedef struct problems {
    int count;
    char text[2048];
} problems;

static void collect(void *user, const char *problem)
{
    problems *p = user;
    size_t used = strlen(p->text);
    p->count++;
    snprintf(p->text + used, sizeof p->text - used, "%s\n", problem);
}

/* Problems fi_store_verify finds (no repair), or a negative error. */
static int verify_count(const char *dir, problems *p)
{
    fi_store *st = NULL;
    memset(p, 0, sizeof *p);
    int rc = fi_store_open(&st, dir, 0, 0);
    if (rc == 0) rc = fi_store_verify(st, 0, collect, p);
    fi_store_close(st);
    return rc;
}

/* After a crash: the only state fi_store_verify may find is a complete
 * object whose writer died between its rename and the commit of its row
 * (every byte checked; get re-indexes it on use, verify --repair now). Any
 * other problem but a dead writer's temp file is a failure (returned as -1 with the report in `p`);
 * otherwise the number of such objects, and the cache verifies clean. */
static int verify_settled(const char *dir, problems *p)
{
    int n = verify_count(dir, p);
    if (n <= 0) return n;
    for (const char *line = p->text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if ((!strstr(line, "is not in the index") || strstr(line, "unindexed object")) &&
            !strstr(line, "leftover temp file")) /* a dead writer's, never an object */
            return -1;
    problems again;
    for (int tries = 0; tries < 3; tries++) { /* a temp may come of age meanwhile */
        fi_store *st = NULL;
        int rc = fi_store_open(&st, dir, 0, 0);
        if (rc == 0) rc = fi_store_verify(st, 1, NULL, NULL);
        fi_store_close(st);
        if (rc < 0) return -1;
        if (verify_count(dir, &again) == 0) return n;
    }
    *p = again;
    return -1;
}

static fi_jit_stats stats_in(const char *dir)
{
    fi_jit_stats s = FI_JIT_STATS_INIT;
    fi_store *st = NULL;
    memset(&s, 0xff, sizeof s);
    if (fi_store_open(&st, dir, 0, 0) == 0 && fi_store_stats_get(st, &s) < 0) memset(&s, 0xff, sizeof s);
    fi_store_close(st);
    return s;
}

/* Count files under dir/objects whose name contains `part` (NULL: all). */
static const char *count_part;
static int count_found;
static int count_visit(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    if (flag != FTW_D && flag != FTW_DP && (!count_part || strstr(path + ftw->base, count_part)))
        count_found++;
    return 0;
}
static int count_files(const char *dir, const char *part)
{
    char objects[4300];
    snprintf(objects, sizeof objects, "%.4000s/objects", dir);
    count_part = part;
    count_found = 0;
    if (nftw(objects, count_visit, 16, FTW_PHYS) < 0) return 0;
    return count_found;
}

/* Backdate temp files by `seconds`. */
static int backdate_seconds;
static int backdate_visit(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_F && strstr(path, ".tmp.")) {
        struct timespec t[2] = {{sb->st_mtime - backdate_seconds, 0},
                                {sb->st_mtime - backdate_seconds, 0}};
        utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW);
    }
    return 0;
}
static void backdate_temps(const char *dir, int seconds)
{
    char objects[4300];
    snprintf(objects, sizeof objects, "%.4000s/objects", dir);
    backdate_seconds = seconds;
    nftw(objects, backdate_visit, 16, FTW_PHYS);
}

static int run_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_cmd(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static int raw_sql(const char *dir, const char *sql)
{
    char path[4300];
    sqlite3 *db = NULL;
    snprintf(path, sizeof path, "%.4000s/index.sqlite", dir);
    int rc = sqlite3_open(path, &db);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    }
    sqlite3_close(db);
    return rc;
}

static uint64_t file_hash(const char *path)
{
    void *data = NULL;
    size_t size = 0;
    if (fi__read_file(path, &data, &size, (size_t)1 << 30) < 0) return 0;
    uint64_t h = XXH3_64bits(data, size);
    fi__free(data);
    return h;
}

/* Capture stderr (the library's log) into a file while `on`. */
static int saved_stderr = -1;
static void capture_stderr(const char *path)
{
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
}
static void restore_stderr(void)
{
    fflush(stderr);
    if (saved_stderr >= 0) dup2(saved_stderr, 2), close(saved_stderr);
    saved_stderr = -1;
}
static int occurrences(const char *path, const char *needle)
{
    void *data = NULL;
    size_t size = 0;
    int n = 0;
    if (fi__read_file(path, &data, &size, 1 << 24) < 0) return -1;
    for (const char *p = data; (p = strstr(p, needle)); p++) n++;
    fi__free(data);
    return n;
}

/* ---- 1. many processes x threads on an empty cache ------------------------------- */

#define MAX_SPECS 24
static char decode_specs[MAX_SPECS][128];

static int make_decode_specs(int n)
{
    static const char *const dtypes[] = {"fp16", "bf16"};
    static const int dims[] = {64, 128, 256};
    static const char *const masks[] = {"none", "window"};
    static const char *const pos[] = {"none", "rope"};
    int k = 0;
    for (int d = 0; d < 2; d++)
        for (int h = 0; h < 3; h++)
            for (int m = 0; m < 2; m++)
                for (int p = 0; p < 2 && k < n; p++)
                    snprintf(decode_specs[k++], sizeof decode_specs[0], "decode q=%s hd=%d mask=%s pos=%s",
                             dtypes[d], dims[h], masks[m], pos[p]);
    return k;
}

typedef struct crowd_thread {
    fi_jit_ctx *ctx;
    fi_store *store;
    int nspecs, requests, first;
    unsigned seed;
    int failures;
    char why[600];
} crowd_thread;

static void *crowd_requests(void *p)
{
    crowd_thread *t = p;
    for (int r = 0; r < t->requests; r++) {
        /* The first request covers every spec across the crowd; the rest are random. */
        int i = r == 0 ? t->first % t->nspecs : (int)(rand_r(&t->seed) % (unsigned)t->nspecs);
        fi_jit_spec spec = spec_of(decode_specs[i]);
        fi_build_outcome outcome;
        uint8_t key[16];
        char hex[33];
        int rc = fi_jit_prewarm(&outcome, t->ctx, &spec, "sm_90a");
        if (rc == 0) rc = key_of(t->ctx, &spec, key, hex);
        if (rc == 0) rc = object_ok(t->store, key, decode_specs[i], t->why, sizeof t->why);
        else snprintf(t->why, sizeof t->why, "%s: %s", decode_specs[i], fi_last_error());
        if (rc < 0) t->failures++;
    }
    return NULL;
}

static int crowd_process(const char *dir, int proc, int threads, int nspecs, int requests,
                         unsigned watchdog_s)
{
    fi_jit_ctx *ctx = NULL;
    fi_store *store = NULL;
    crowd_thread t[16];
    pthread_t tid[16];
    alarm(watchdog_s); /* a deadlock ends in SIGALRM, which the parent sees */
    if (ctx_open(&ctx, dir, FI_LOG_WARN, 0) < 0 || fi_store_open(&store, dir, 0, 0) < 0) {
        fprintf(stderr, "process %d: %s\n", proc, fi_last_error());
        return 3;
    }
    for (int i = 0; i < threads; i++) {
        t[i] = (crowd_thread){ctx, store, nspecs, requests, proc * threads + i,
                              (unsigned)(proc * 7919 + i * 104729 + 1), 0, ""};
        pthread_create(&tid[i], NULL, crowd_requests, &t[i]);
    }
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        if (t[i].failures) {
            fprintf(stderr, "process %d thread %d: %d failures, last: %s\n", proc, i, t[i].failures,
                    t[i].why);
            failed = 1;
        }
    }
    fi_store_close(store);
    fi_jit_ctx_free(ctx);
    return failed;
}

TEST(crowd_of_processes_and_threads_compiles_each_key_once)
{
    int procs = 16, threads = 8, nspecs = 24, requests = 6;
    if (check_quick()) procs = 6, threads = 4, nspecs = 8, requests = 4;
    if (long_run()) requests = 24;
    make_decode_specs(nspecs);
    char dir[4200];
    path_in(dir, "cache");
    pid_t pids[64];
    double start = now_s(), limit_s = check_quick() ? 240 : 300;
    for (int p = 0; p < procs; p++) {
        pids[p] = fork();
        if (pids[p] == 0) _exit(crowd_process(dir, p, threads, nspecs, requests, (unsigned)limit_s));
    }
    int bad = 0, left = procs;
    char why[256] = "";
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            left--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                bad++;
                snprintf(why, sizeof why, "a worker ended with status %#x%s", status,
                         WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (watchdog: deadlock?)" : "");
            }
            continue;
        }
        if (now_s() - start > limit_s + 10) { /* the watchdog itself hung */
            for (int p = 0; p < procs; p++) kill(pids[p], SIGKILL);
            while (waitpid(-1, NULL, 0) > 0) {
            }
            CHECK_MSG(0, "workers still running after %.0f s: deadlock", limit_s + 10);
        }
        sleep_ms(5);
    }
    double wall = now_s() - start;
    printf("  %d processes x %d threads, %d requests each over %d specs: %.1f s\n", procs, threads,
           requests, nspecs, wall);
    CHECK_MSG(bad == 0, "%d of %d workers failed: %s", bad, procs, why);
    CHECK_MSG(wall < limit_s, "took %.1f s", wall);

    fi_jit_stats s = stats_in(dir);
    CHECK_MSG(s.compiles == nspecs && s.entries == nspecs && s.compile_failures == 0 && s.corrupt == 0,
              "compiles %lld entries %lld failures %lld corrupt %lld, want %d distinct keys",
              (long long)s.compiles, (long long)s.entries, (long long)s.compile_failures,
              (long long)s.corrupt, nspecs);
    CHECK_MSG(s.disk_hits + s.misses >= procs, "lookups %lld", (long long)(s.disk_hits + s.misses));
    problems pr;
    CHECK_MSG(verify_count(dir, &pr) == 0, "verify: %s", pr.text);
    CHECK(count_files(dir, ".tmp.") == 0);
    CHECK(count_files(dir, ".fo") == nspecs);
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    for (int i = 0; i < nspecs; i++) {
        uint8_t key[16];
        char hex[33], ewhy[600];
        int rc = key_of_text(dir, decode_specs[i], key, hex);
        if (rc == 0) rc = object_ok(st, key, decode_specs[i], ewhy, sizeof ewhy);
        if (rc < 0) fi_store_close(st);
        CHECK_MSG(rc == 0, "%s: %s", decode_specs[i], ewhy);
    }
    fi_store_close(st);
}

/* ---- 2. builders killed with SIGKILL -------------------------------------------- */

static const char *const kill_specs[] = {
    "decode q=fp16 hd=64",           "decode q=bf16 hd=64",
    "decode q=fp16 hd=64 softcap=1", "decode q=bf16 hd=64 mask=window",
    "decode q=fp16 hd=128",          "decode q=bf16 hd=64 pos=alibi",
};
#define KILL_SPECS 6

static int prewarm_child(const char *dir, const char *text)
{
    alarm(120);
    int rc = prewarm_in(dir, text);
    return rc < 0 ? 40 : 0;
}

TEST(builders_killed_at_random_lose_nothing)
{
    int trials = check_quick() ? 12 : long_run() ? 400 : 100;
    enum { LANES = 2 };
    char dir[4200];
    path_in(dir, "cache");
    /* Calibrate: how long one compile takes here, so kills spread over the
     * compile and the write that follows it. */
    double t0 = now_s();
    CHECK_RC(prewarm_in(dir, kill_specs[0]), FI_BUILD_COMPILED);
    double compile_s = now_s() - t0;
    {
        fi_store *st = NULL;
        CHECK_OK(fi_store_open(&st, dir, 0, 0));
        CHECK_OK(fi_store_clear(st));
        fi_store_close(st);
    }
    unsigned seed = 12345;
    int killed = 0, finished_first = 0, waited_max_ms = 0, done = 0, unindexed = 0;
    double start = now_s();
    for (int round = 0; done < trials; round++) {
        pid_t builder[LANES], waiter[LANES];
        double kill_at[LANES];
        const char *spec[LANES];
        for (int l = 0; l < LANES; l++) {
            spec[l] = kill_specs[(round * LANES + l) % KILL_SPECS];
            /* Half uniform over 0..1.3 x compile, half close to the end of the compile. */
            double u = (double)rand_r(&seed) / RAND_MAX;
            kill_at[l] = (rand_r(&seed) & 1) ? u * 1.3 * compile_s
                                             : compile_s * (0.85 + 0.3 * u);
            if (kill_at[l] > 1.5) kill_at[l] = 1.5 * u;
        }
        double round_start = now_s();
        for (int l = 0; l < LANES; l++) {
            if ((builder[l] = fork()) == 0) _exit(prewarm_child(dir, spec[l]));
            sleep_ms(1); /* the builder usually takes the key lock first */
            if ((waiter[l] = fork()) == 0) _exit(prewarm_child(dir, spec[l]));
        }
        for (int l = 0; l < LANES; l++) {
            double wait = round_start + kill_at[l] - now_s();
            if (wait > 0) sleep_ms(wait * 1000);
            kill(builder[l], SIGKILL);
        }
        for (int l = 0; l < LANES; l++) {
            int status = 0;
            waitpid(builder[l], &status, 0);
            if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) killed++;
            else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) finished_first++;
            else CHECK_MSG(0, "builder of '%s' ended with status %#x", spec[l], status);
            double wstart = now_s();
            for (;;) { /* the waiter must finish within a bound */
                pid_t r = waitpid(waiter[l], &status, WNOHANG);
                if (r == waiter[l]) break;
                if (now_s() - wstart > 60) {
                    kill(waiter[l], SIGKILL);
                    waitpid(waiter[l], &status, 0);
                    CHECK_MSG(0, "waiter for '%s' still waiting 60 s after the kill", spec[l]);
                }
                sleep_ms(2);
            }
            int ms = (int)((now_s() - round_start) * 1000);
            if (ms > waited_max_ms) waited_max_ms = ms;
            CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "waiter for '%s' (kill at %.0f ms) failed with status %#x", spec[l],
                      kill_at[l] * 1000, status);
        }
        /* Nothing partial: the index and objects agree, every object verifies. */
        problems pr;
        int n = verify_settled(dir, &pr);
        CHECK_MSG(n >= 0, "round %d: verify found problems: %s", round, pr.text);
        unindexed += n;
        fi_store *st = NULL;
        CHECK_OK(fi_store_open(&st, dir, 0, 0));
        for (int l = 0; l < LANES; l++) {
            uint8_t key[16];
            char hex[33], why[600] = "";
            int rc = key_of_text(dir, spec[l], key, hex);
            if (rc == 0) rc = object_ok(st, key, spec[l], why, sizeof why);
            if (rc < 0) fi_store_close(st);
            CHECK_MSG(rc == 0, "round %d: '%s' is not served after the kill: %s", round, spec[l], why);
        }
        fi_jit_stats s = FI_JIT_STATS_INIT;
        int rc = fi_store_stats_get(st, &s);
        if (rc == 0) rc = fi_store_clear(st);
        fi_store_close(st);
        CHECK_OK(rc);
        CHECK_MSG(s.entries == LANES && s.corrupt == 0, "round %d: entries %lld corrupt %lld", round,
                  (long long)s.entries, (long long)s.corrupt);
        CHECK_MSG(count_files(dir, ".fo") - count_files(dir, ".tmp.") == 0,
                  "round %d: object files outside the index after clear", round);
        done += LANES;
    }
    /* Temps of killed writers are never objects; gc removes them once their
     * writer is gone for a minute. */
    int temps = count_files(dir, ".tmp.");
    backdate_temps(dir, 120);
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    int rc = fi_store_gc(st, -1, 0);
    fi_store_close(st);
    CHECK_MSG(rc >= 0, "gc: %s", fi_last_error());
    CHECK_MSG(count_files(dir, ".tmp.") == 0, "%d temp files left after gc", count_files(dir, ".tmp."));
    printf("  %d trials in %.1f s (compile %.0f ms): %d builders killed, %d finished first, "
           "%d leftover temps cleaned, %d complete objects re-indexed, slowest round %d ms\n",
           done, now_s() - start, compile_s * 1000, killed, finished_first, temps, unindexed,
           waited_max_ms);
    CHECK(killed > 0);
}

/* Writers of big objects killed mid-write (the window of a real put is a few
 * ms; 8 MiB objects widen it): no partial object is ever indexed or served. */
static int put_forever(const char *dir, int trial)
{
    fi_store *st = NULL;
    size_t size = 8u << 20;
    unsigned char *data = malloc(size);
    alarm(60);
    if (!data || fi_store_open(&st, dir, 0, 0) < 0) return 3;
    for (int n = 0;; n++) {
        uint8_t key[16] = {0x77, (uint8_t)trial, (uint8_t)n, (uint8_t)(n >> 8)};
        fi_object_meta meta = {"decode q=fp16 kv=fp16 o=fp16 hd=64 mask=none pos=none softcap=0",
                               "sm_90a", 1, 0, 1};
        memset(data, n + trial, size);
        if (fi_store_put(st, key, data, size, &meta) < 0) return 4;
    }
}

TEST(writers_killed_mid_write_leave_no_partial_object)
{
    char dir[4200];
    int trials = check_quick() ? 8 : long_run() ? 200 : 30, temps_seen = 0, unindexed = 0;
    unsigned seed = 99;
    path_in(dir, "cache");
    for (int t = 0; t < trials; t++) {
        pid_t pid = fork();
        if (pid == 0) _exit(put_forever(dir, t));
        sleep_ms(20 + rand_r(&seed) % 200);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status), "writer ended by itself: %#x", status);
        temps_seen += count_files(dir, ".tmp.") > 0;
        problems pr;
        int n = verify_settled(dir, &pr);
        CHECK_MSG(n >= 0, "trial %d: problems: %s", t, pr.text);
        unindexed += n;
        fi_jit_stats s = stats_in(dir);
        CHECK_MSG(count_files(dir, ".fo") - count_files(dir, ".tmp.") == s.entries,
                  "trial %d: %d object files for %lld entries", t,
                  count_files(dir, ".fo") - count_files(dir, ".tmp."), (long long)s.entries);
        fi_store *st = NULL;
        CHECK_OK(fi_store_open(&st, dir, 0, 0));
        int rc = fi_store_clear(st); /* keeps verify fast */
        fi_store_close(st);
        CHECK_OK(rc);
    }
    backdate_temps(dir, 120);
    fi_store *st = NULL;
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    int rc = fi_store_gc(st, -1, 0);
    fi_store_close(st);
    CHECK(rc >= 0);
    CHECK(count_files(dir, ".tmp.") == 0);
    printf("  %d writers killed mid-put: %d left a temp file (cleaned), %d a complete object "
           "before its row (re-indexed), 0 partial objects\n", trials, temps_seen, unindexed);
}

/* ---- 3. damage seen through the public API ---------------------------------------- */

static const char *const damage_spec = "decode q=fp16 hd=64";

typedef enum damage {
    D_TRUNCATE, D_HEADER_ONLY, D_ZERO, D_FLIP_PAYLOAD, D_FLIP_HEADER, D_FLIP_MAGIC, D_APPEND,
    D_DELETE, D_NOT_A_FILE, D_COUNT
} damage;
static const char *const damage_name[D_COUNT] = {
    "truncated", "header only", "zero length", "payload bit flip", "header bit flip",
    "bad magic", "trailing garbage", "deleted (row without object)", "a directory"};

static int apply_damage(const char *path, damage d)
{
    struct stat sb;
    if (lstat(path, &sb) < 0) return -1;
    int fd;
    unsigned char c;
    switch (d) {
    case D_TRUNCATE: return truncate(path, sb.st_size / 2);
    case D_HEADER_ONLY: return truncate(path, 120);
    case D_ZERO: return truncate(path, 0);
    case D_FLIP_PAYLOAD:
    case D_FLIP_HEADER:
    case D_FLIP_MAGIC: {
        off_t at = d == D_FLIP_PAYLOAD ? sb.st_size - 1000 : d == D_FLIP_HEADER ? 90 : 0;
        if ((fd = open(path, O_RDWR)) < 0) return -1;
        int ok = pread(fd, &c, 1, at) == 1 && (c ^= 0x10, pwrite(fd, &c, 1, at) == 1);
        close(fd);
        return ok ? 0 : -1;
    }
    case D_APPEND:
        if ((fd = open(path, O_WRONLY | O_APPEND)) < 0) return -1;
        c = 0;
        ssize_t w = write(fd, &c, 1);
        close(fd);
        return w == 1 ? 0 : -1;
    case D_DELETE: return unlink(path);
    case D_NOT_A_FILE: return unlink(path) == 0 ? mkdir(path, 0700) : -1;
    default: return -1;
    }
}

TEST(damaged_objects_are_counted_removed_and_rebuilt_never_served)
{
    char base[4200], work[4200], path[4300], hex[33];
    uint8_t key[16];
    path_in(base, "base");
    path_in(work, "work");
    CHECK_RC(prewarm_in(base, damage_spec), FI_BUILD_COMPILED);
    CHECK_OK(key_of_text(base, damage_spec, key, hex));
    object_path_of(path, work, hex);
    for (int d = 0; d < D_COUNT; d++) {
        CHECK(run_cmd("rm -rf '%s' && cp -a '%s' '%s'", work, base, work) == 0);
        CHECK_MSG(apply_damage(path, (damage)d) == 0, "cannot damage %s", path);
        int served = prewarm_in(work, damage_spec);
        /* A damaged object is never served: the kernel is compiled again. */
        CHECK_MSG(served == FI_BUILD_COMPILED, "%s object: prewarm gave %d (%s)", damage_name[d],
                  served, fi_last_error());
        fi_jit_stats s = stats_in(work);
        /* A missing object is what an interrupted gc leaves: not counted. */
        CHECK_MSG(s.corrupt == (d != D_DELETE) && s.compiles == 2 && s.entries == 1,
                  "%s object: corrupt %lld compiles %lld entries %lld", damage_name[d],
                  (long long)s.corrupt, (long long)s.compiles, (long long)s.entries);
        problems pr;
        CHECK_MSG(verify_count(work, &pr) == 0, "%s object: verify: %s", damage_name[d], pr.text);
        CHECK_MSG(prewarm_in(work, damage_spec) == FI_BUILD_CACHED, "%s object: not healed",
                  damage_name[d]);
    }
}

TEST(every_bit_flip_in_an_object_is_refused)
{
    /* Store level, so that every single-bit flip of the header and a sample
     * of the payload can be tried without a compile each. */
    char dir[4200], path[4300], hex[33];
    uint8_t key[16];
    path_in(dir, "cache");
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_COMPILED);
    CHECK_OK(key_of_text(dir, damage_spec, key, hex));
    object_path_of(path, dir, hex);
    void *good = NULL, *payload = NULL;
    size_t good_size = 0, payload_size = 0;
    fi_object_meta meta;
    fi_store *st = NULL;
    CHECK_OK(fi__read_file(path, &good, &good_size, 1 << 26));
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK_OK(fi_store_get(st, key, &payload, &payload_size, &meta));
    size_t header = good_size - payload_size;
    int flips = 0, loaded = 0, failures = 0;
    unsigned seed = 7;
    for (size_t bit = 0; bit < (header + 256) * 8 && !failures; bit++) {
        size_t at = bit / 8 < header ? bit / 8 : header + (size_t)rand_r(&seed) % payload_size;
        unsigned char *bad = malloc(good_size);
        memcpy(bad, good, good_size);
        bad[at] ^= (unsigned char)(1u << (bit % 8));
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ssize_t w = write(fd, bad, good_size);
        close(fd);
        free(bad);
        void *data = NULL;
        size_t size = 0;
        int rc = fi_store_get(st, key, &data, &size, NULL);
        flips++;
        if (rc == 0) loaded++;
        fi__free(data);
        if (w != (ssize_t)good_size || (rc != FI_ENOTFOUND)) failures++;
        if (fi_store_put(st, key, payload, payload_size, &meta) < 0) failures++;
    }
    fi_jit_stats s = FI_JIT_STATS_INIT;
    int rc = fi_store_stats_get(st, &s);
    fi_store_close(st);
    fi__free(good);
    fi__free(payload);
    CHECK_OK(rc);
    printf("  %d single-bit flips (every header bit + 256 payload bits): %d loaded\n", flips, loaded);
    CHECK_MSG(failures == 0 && loaded == 0, "%d flips served or mishandled", failures);
    CHECK_MSG(s.corrupt == flips, "corrupt %lld, flips %d", (long long)s.corrupt, flips);
}

TEST(object_without_row_is_reindexed_not_recompiled)
{
    char dir[4200];
    path_in(dir, "cache");
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_COMPILED);
    CHECK(raw_sql(dir, "DELETE FROM entries") == SQLITE_OK);
    CHECK(stats_in(dir).entries == 0);
    problems pr;
    CHECK(verify_count(dir, &pr) == 1 && strstr(pr.text, "not in the index"));
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_CACHED);
    fi_jit_stats s = stats_in(dir);
    CHECK_MSG(s.entries == 1 && s.compiles == 1 && s.corrupt == 0, "entries %lld compiles %lld",
              (long long)s.entries, (long long)s.compiles);
    CHECK(verify_count(dir, &pr) == 0);
}

typedef enum index_damage { I_GARBAGE, I_TRUNCATED, I_OLD_SCHEMA, I_NEWER_SCHEMA, I_EMPTY, I_COUNT } index_damage;
static const char *const index_damage_name[I_COUNT] = {"garbage", "truncated", "older schema",
                                                       "newer schema", "zero-length"};

TEST(broken_index_is_rebuilt_and_objects_reindexed)
{
    char base[4200], work[4200], index[4300];
    path_in(base, "base");
    path_in(work, "work");
    CHECK_RC(prewarm_in(base, damage_spec), FI_BUILD_COMPILED);
    snprintf(index, sizeof index, "%s/index.sqlite", work);
    for (int d = 0; d < I_COUNT; d++) {
        CHECK(run_cmd("rm -rf '%s' && cp -a '%s' '%s' && rm -f '%s-wal' '%s-shm'", work, base, work,
                      index, index) == 0);
        int ok = 0;
        if (d == I_GARBAGE) {
            ok = run_cmd("head -c 20000 /dev/urandom > '%s'", index) == 0;
        } else if (d == I_TRUNCATED) {
            ok = truncate(index, 1000) == 0;
        } else if (d == I_EMPTY) {
            ok = truncate(index, 0) == 0;
        } else if (d == I_OLD_SCHEMA) {
            ok = raw_sql(work, "DROP TABLE entries; CREATE TABLE entries (key TEXT PRIMARY KEY, "
                               "path TEXT); INSERT INTO entries VALUES ('x', '/etc/passwd'); "
                               "PRAGMA user_version = 0") == SQLITE_OK;
        } else {
            ok = raw_sql(work, "PRAGMA user_version = 7") == SQLITE_OK;
        }
        CHECK_MSG(ok, "cannot damage the index (%s)", index_damage_name[d]);
        /* The object is still good: served from disk and re-indexed, no compile. */
        int outcome = prewarm_in(work, damage_spec);
        CHECK_MSG(outcome == FI_BUILD_CACHED, "%s index: prewarm gave %d (%s)",
                  index_damage_name[d], outcome, fi_last_error());
        fi_jit_stats s = stats_in(work);
        CHECK_MSG(s.entries == 1 && s.compiles == 0,
                  "%s index: entries %lld compiles %lld", index_damage_name[d],
                  (long long)s.entries, (long long)s.compiles);
        if (d == I_GARBAGE || d == I_TRUNCATED)
            CHECK_MSG(s.corrupt == 1, "%s index: corrupt %lld", index_damage_name[d],
                      (long long)s.corrupt);
        problems pr;
        CHECK_MSG(verify_count(work, &pr) == 0, "%s index: verify: %s", index_damage_name[d], pr.text);
    }
}

/* An index damaged under a running context (tables dropped): a miss still
 * compiles, and an error names the first failure, not the later failed
 * statistics flush. */
TEST(damaged_index_under_a_context_still_serves_and_reports_the_first_failure)
{
    char dir[4200];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_spec spec = spec_of(damage_spec);
    fi_build_outcome outcome;
    path_in(dir, "cache");
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_ERROR;
    opts.jit = 0;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    CHECK(raw_sql(dir, "DROP TABLE stats") == SQLITE_OK);
    CHECK_RC(fi_jit_prewarm(&outcome, ctx, &spec, "sm_90a"), FI_ENOTFOUND);
    CHECK_MSG(strstr(fi_last_error(), "JIT is disabled") != NULL, "message: %s", fi_last_error());
    fi_jit_ctx_free(ctx);

    CHECK_OK(ctx_open(&ctx, dir, FI_LOG_ERROR, 0));
    CHECK(raw_sql(dir, "DROP TABLE entries") == SQLITE_OK);
    int rc = fi_jit_prewarm(&outcome, ctx, &spec, "sm_90a");
    CHECK_MSG(rc == 0 && outcome == FI_BUILD_COMPILED, "rc %d: %s", rc, fi_last_error());
    fi_jit_ctx_free(ctx);
    problems pr = {0};
    CHECK_MSG(verify_count(dir, &pr) == 0, "the next open rebuilt nothing: %s", pr.text);
}

/* ---- 4. a full disk, a read-only store -------------------------------------------- */

TEST(full_disk_still_serves_kernels_says_so_once_and_leaves_no_temp)
{
    char dir[4200], log[4200];
    fi_jit_ctx *ctx = NULL;
    fi_build_outcome outcome;
    path_in(dir, "cache");
    path_in(log, "stderr.txt");
    fi_jit_spec a = spec_of("decode q=fp16 hd=64"), b = spec_of("decode q=bf16 hd=64"),
                c = spec_of("decode q=fp16 hd=64 softcap=1");
    CHECK_OK(ctx_open(&ctx, dir, FI_LOG_WARN, 0));
    int rc = fi_jit_prewarm(&outcome, ctx, &a, NULL); /* loads NVRTC, stores a */
    if (rc < 0) fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    capture_stderr(log);
    fi__fault_arm(FI_FAULT_DISK_FULL, 1, 1);
    int rb = fi_jit_prewarm(&outcome, ctx, &b, NULL), ob = outcome;
    int rc2 = fi_jit_prewarm(&outcome, ctx, &c, NULL), oc = outcome;
    int ra = fi_jit_prewarm(&outcome, ctx, &a, NULL), oa = outcome;
    long faults = fi__fault_count();
    fi__fault_arm(0, 0, 0);
    fi_jit_ctx_free(ctx);
    restore_stderr();
    /* Compiled but not stored: prewarm says so (its job is to store). */
    CHECK_MSG(rb == FI_EIO && rc2 == FI_EIO, "on a full disk: %d/%d %d/%d: %s", rb, ob, rc2, oc,
              fi_last_error());
    CHECK_MSG(ra == 0 && oa == FI_BUILD_CACHED, "the cached kernel is not served: %d", ra);
    CHECK(faults > 0);
    int said = occurrences(log, "cannot write to the cache");
    CHECK_MSG(said == 1, "the full disk was reported %d times", said);
    printf("  full disk: %ld writes refused, reported once\n", faults);
    CHECK(count_files(dir, ".tmp.") == 0);
    fi_jit_stats s = stats_in(dir);
    CHECK_MSG(s.entries == 1 && s.compiles == 3, "entries %lld compiles %lld", (long long)s.entries,
              (long long)s.compiles);
    problems pr;
    CHECK_MSG(verify_count(dir, &pr) == 0, "%s", pr.text);
}

TEST(full_disk_at_open_falls_back_to_memory)
{
    char dir[4200], log[4200];
    fi_jit_ctx *ctx = NULL;
    fi_build_outcome outcome = FI_BUILD_CACHED;
    fi_jit_stats s = FI_JIT_STATS_INIT;
    struct stat sb;
    path_in(dir, "new/cache");
    path_in(log, "stderr.txt");
    fi_jit_spec a = spec_of("decode q=fp16 hd=64");
    capture_stderr(log);
    fi__fault_arm(FI_FAULT_DISK_FULL, 1, 1);
    int rc = ctx_open(&ctx, dir, FI_LOG_WARN, 0);
    if (rc == 0) rc = fi_jit_prewarm(&outcome, ctx, &a, NULL);
    fi__fault_arm(0, 0, 0);
    if (ctx) fi_jit_stats_get(&s, ctx);
    fi_jit_ctx_free(ctx);
    restore_stderr();
    /* The kernel compiled in memory, but prewarm could not store it. */
    CHECK_MSG(rc == FI_EIO && strstr(fi_last_error(), "not stored"), "rc %d: %s", rc,
              fi_last_error());
    CHECK(occurrences(log, "disk cache disabled") == 1);
    CHECK(lstat(dir, &sb) < 0 && errno == ENOENT);
}

TEST(read_only_store_serves_and_changes_nothing)
{
    char dir[4200], path[4300], hex[33];
    uint8_t key[16], other[16] = {1, 2, 3};
    fi_store *st = NULL;
    void *data = NULL;
    size_t size = 0;
    path_in(dir, "cache");
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_COMPILED);
    CHECK_OK(key_of_text(dir, damage_spec, key, hex));
    object_path_of(path, dir, hex);
    CHECK(run_cmd("cd '%s' && find . -printf '%%p %%s\\n' | grep -v -e -wal -e -shm | sort > ../before.txt", dir) == 0);
    CHECK_OK(fi_store_open(&st, dir, FI_STORE_READ_ONLY, 0));
    int rc_get = fi_store_get(st, key, &data, &size, NULL);
    fi__free(data);
    int rc_put = fi_store_put(st, other, "x", 1, NULL);
    int rc_gc = fi_store_gc(st, 0, 0);
    int rc_clear = fi_store_clear(st);
    int rc_repair = fi_store_verify(st, 1, NULL, NULL);
    /* A damaged object is refused, and left alone. */
    apply_damage(path, D_FLIP_PAYLOAD);
    int rc_bad = fi_store_get(st, key, &data, &size, NULL);
    apply_damage(path, D_FLIP_PAYLOAD);
    fi_store_close(st);
    CHECK(run_cmd("cd '%s' && find . -printf '%%p %%s\\n' | grep -v -e -wal -e -shm | sort > ../after.txt", dir) == 0);
    CHECK_OK(rc_get);
    CHECK_RC(rc_put, FI_EINVALID);
    CHECK_RC(rc_gc, FI_EINVALID);
    CHECK_RC(rc_clear, FI_EINVALID);
    CHECK_RC(rc_repair, FI_EINVALID);
    CHECK_RC(rc_bad, FI_ENOTFOUND);
    CHECK_MSG(run_cmd("cd '%s' && cmp -s before.txt after.txt", check_tmpdir) == 0,
              "a read-only store changed files");
    struct stat sb;
    CHECK(lstat(path, &sb) == 0); /* the damaged object stays in a read-only cache */
}

/* ---- 5. limits ----------------------------------------------------------------------- */

static int64_t entry_size(const char *dir, const char *text)
{
    uint8_t key[16];
    char hex[33], path[4300];
    struct stat sb;
    if (key_of_text(dir, text, key, hex) < 0) return -1;
    object_path_of(path, dir, hex);
    return lstat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

TEST(size_limit_from_options_and_environment_evicts_least_recently_used)
{
    const char *a = "decode q=fp16 hd=64", *b = "decode q=bf16 hd=256 mask=window pos=rope softcap=1",
               *c = "decode q=bf16 hd=64";
    char dir[4200];
    fi_jit_ctx *ctx = NULL;
    path_in(dir, "cache");
    CHECK_RC(prewarm_in(dir, a), FI_BUILD_COMPILED);
    CHECK_RC(prewarm_in(dir, b), FI_BUILD_COMPILED);
    sleep_ms(5);
    CHECK_RC(prewarm_in(dir, a), FI_BUILD_CACHED); /* b is now the least recently used */
    int64_t sa = entry_size(dir, a), sb_ = entry_size(dir, b);
    CHECK(sa > 0 && sb_ > sa);
    /* Option: room for a and b minus one byte; adding c (smaller than b) evicts b only. */
    fi_jit_spec spec = spec_of(c);
    CHECK_OK(ctx_open(&ctx, dir, FI_LOG_OFF, sa + sb_ - 1));
    int rc = fi_jit_prewarm(NULL, ctx, &spec, NULL);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    fi_jit_stats s = stats_in(dir);
    CHECK_MSG(s.entries == 2 && s.bytes <= sa + sb_ - 1, "entries %lld bytes %lld", (long long)s.entries,
              (long long)s.bytes);
    CHECK(entry_size(dir, a) > 0 && entry_size(dir, c) > 0 && entry_size(dir, b) == 0);
    /* Environment: a limit of 1 byte keeps only the newest entry. */
    setenv("FIJIT_MAX_CACHE_SIZE", "1", 1);
    rc = prewarm_in(dir, b);
    unsetenv("FIJIT_MAX_CACHE_SIZE");
    CHECK_RC(rc, FI_BUILD_COMPILED);
    s = stats_in(dir);
    CHECK_MSG(s.entries == 1 && entry_size(dir, b) > 0, "entries %lld", (long long)s.entries);
    problems pr;
    CHECK(verify_count(dir, &pr) == 0);
}

TEST(gc_removes_temp_files_of_dead_writers_and_old_ones_only)
{
    char dir[4200], sub[4300], names[4][4400];
    fi_store *st = NULL;
    path_in(dir, "cache");
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    snprintf(sub, sizeof sub, "%s/objects/ab", dir);
    CHECK(mkdir(sub, 0700) == 0);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    const char *hex = "ab0123456789abcdef0123456789abcd";
    /* dead writer 2 min ago | live writer 2 min ago | dead writer just now | live writer 2 h ago */
    long pids[4] = {dead, (long)getpid(), dead, (long)getpid()};
    int ages[4] = {120, 120, 0, 7200}, gone[4] = {1, 0, 0, 1};
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof names[i], "%s/%s.fo.tmp.%ld.%d", sub, hex, pids[i], i);
        int fd = open(names[i], O_WRONLY | O_CREAT, 0600);
        CHECK(fd >= 0 && write(fd, "partial", 7) == 7);
        close(fd);
        struct timespec t[2] = {{time(NULL) - ages[i], 0}, {time(NULL) - ages[i], 0}};
        CHECK(utimensat(AT_FDCWD, names[i], t, 0) == 0);
    }
    problems pr = {0};
    int found = fi_store_verify(st, 0, collect, &pr);
    int removed = fi_store_gc(st, -1, 0);
    fi_store_close(st);
    /* Leftovers are noted (2), never problems: a killed writer did no harm. */
    CHECK_MSG(found == 0 && pr.count == 2 && strstr(pr.text, "note: leftover temp"),
              "verify found %d problems: %s", found, pr.text);
    CHECK(removed == 0);
    for (int i = 0; i < 4; i++) {
        struct stat sb;
        CHECK_MSG((lstat(names[i], &sb) < 0) == gone[i], "temp %d: %s", i,
                  gone[i] ? "left behind" : "removed while its writer may be at work");
    }
}

typedef struct churn {
    fi_store *st;
    atomic_int stop;
    atomic_int wrong, served, missing;
    unsigned char *payload;
    size_t size;
} churn;

static void *churn_reader(void *p)
{
    churn *c = p;
    uint8_t key[16] = {0xab, 1};
    while (!atomic_load(&c->stop)) {
        void *data = NULL;
        size_t size = 0;
        int rc = fi_store_get(c->st, key, &data, &size, NULL);
        if (rc == 0) {
            atomic_fetch_add(&c->served, 1);
            if (size != c->size || memcmp(data, c->payload, size) != 0) atomic_fetch_add(&c->wrong, 1);
        } else if (rc == FI_ENOTFOUND) {
            atomic_fetch_add(&c->missing, 1);
        } else {
            atomic_fetch_add(&c->wrong, 1);
        }
        fi__free(data);
    }
    return NULL;
}

TEST(eviction_while_another_reader_loads_is_safe)
{
    char dir[4200], hex[33], path[4300];
    uint8_t key[16] = {0xab, 1};
    static churn c;
    path_in(dir, "cache");
    c.size = 1 << 20;
    c.payload = malloc(c.size);
    for (size_t i = 0; i < c.size; i++) c.payload[i] = (unsigned char)(i * 131 + 7);
    CHECK_OK(fi_store_open(&c.st, dir, 0, 0));
    CHECK_OK(fi_store_put(c.st, key, c.payload, c.size, NULL));
    /* The POSIX fact the reader relies on: an open file survives its unlink. */
    fi_key_hex(hex, key);
    object_path_of(path, dir, hex);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(fi_store_gc(c.st, 0, 0) == 1);
    struct stat sb;
    CHECK(lstat(path, &sb) < 0);
    unsigned char *copy = malloc(c.size + 4096);
    ssize_t got = read(fd, copy, c.size + 4096);
    close(fd);
    CHECK((size_t)got > c.size && memcmp(copy + got - (ssize_t)c.size, c.payload, c.size) == 0);
    free(copy);
    /* Then a reader thread against a thread that keeps putting and evicting. */
    atomic_store(&c.stop, 0);
    pthread_t reader;
    pthread_create(&reader, NULL, churn_reader, &c);
    int rounds = check_quick() ? 100 : 400, failures = 0;
    for (int i = 0; i < rounds; i++) {
        if (fi_store_put(c.st, key, c.payload, c.size, NULL) < 0) failures++;
        if (fi_store_gc(c.st, 0, 0) < 0) failures++;
    }
    atomic_store(&c.stop, 1);
    pthread_join(reader, NULL);
    fi_store_close(c.st);
    free(c.payload);
    printf("  evict under a reader: %d put+evict rounds, %d loads served, %d misses, %d wrong\n",
           rounds, atomic_load(&c.served), atomic_load(&c.missing), atomic_load(&c.wrong));
    CHECK(failures == 0);
    CHECK(atomic_load(&c.wrong) == 0);
}

/* ---- 6. bad input ----------------------------------------------------------------------- */

TEST(bad_spec_strings_are_refused_clearly)
{
    char long_text[3000];
    memset(long_text, 'x', sizeof long_text - 1);
    memcpy(long_text, "decode ", 7);
    long_text[sizeof long_text - 1] = '\0';
    static const char *const bad[] = {
        "", " \t ", "decode hd=99999999999999999999", "decode hd=-64", "decode hd=0x40",
        "decode hd=64.0", "decode hd= 64", "decode q=\xff\xfe", "decode q=fp16\xc3\xa9",
        "d\xc3\xa9" "code", "decode variant=../../etc/passwd", "decode variant=a/b",
        "decode variant=/abs", "decode variant=", "decode variant=a b",
        "decode variant=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "decode q=", "decode =fp16", "decode q=fp16 q=fp16", "decode\x01", "decode q=fp16\x7f",
        "decode q='; DROP TABLE entries; --", "../decode", "decode/../x", "decode softcap=1e0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
        const char *text = i < sizeof bad / sizeof bad[0] ? bad[i] : long_text;
        fi_jit_spec spec;
        char variant[64];
        int rc = fi_jit_spec_parse(&spec, variant, sizeof variant, text);
        CHECK_MSG(rc == FI_EINVALID, "'%.80s' parsed (rc %d)", text, rc);
        CHECK_MSG(strlen(fi_last_error()) > 10, "'%.80s': no message", text);
    }
}

TEST(bad_specs_and_arches_write_nothing_to_the_cache)
{
    char dir[4200];
    fi_jit_ctx *ctx = NULL;
    path_in(dir, "cache");
    CHECK_OK(ctx_open(&ctx, dir, FI_LOG_OFF, 0));
    struct {
        fi_jit_spec spec;
        const char *arch;
        int code;
    } cases[40];
    int n = 0;
    fi_jit_spec good = FI_JIT_SPEC_INIT;
#define CASE(field, value, arch_, code_)                                       \
    do {                                                                       \
        cases[n].spec = good;                                                  \
        cases[n].spec.field = value;                                           \
        cases[n].arch = arch_;                                                 \
        cases[n++].code = code_;                                               \
    } while (0)
    CASE(version, 0, NULL, FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION + 1, NULL, FI_EINVALID);
    CASE(kind, (fi_kernel_kind)0, NULL, FI_EINVALID);
    CASE(kind, (fi_kernel_kind)99, NULL, FI_EINVALID);
    CASE(kind, (fi_kernel_kind)-1, NULL, FI_EINVALID);
    CASE(q_dtype, FI_DTYPE_FP8_E5M2, NULL, FI_EUNSUPPORTED); /* fp8 is for KV only */
    CASE(q_dtype, (fi_dtype)0, NULL, FI_EINVALID);
    CASE(q_dtype, (fi_dtype)77, NULL, FI_EINVALID);
    CASE(o_dtype, FI_DTYPE_FP8_E4M3, NULL, FI_EUNSUPPORTED);
    CASE(o_dtype, (fi_dtype)-5, NULL, FI_EINVALID);
    CASE(head_dim, 0, NULL, FI_EUNSUPPORTED);
    CASE(head_dim, -128, NULL, FI_EUNSUPPORTED);
    CASE(head_dim, INT_MAX, NULL, FI_EUNSUPPORTED);
    CASE(head_dim, 96, NULL, FI_EUNSUPPORTED);
    CASE(mask, (fi_mask)99, NULL, FI_EINVALID);
    CASE(mask, FI_MASK_CAUSAL, NULL, FI_EUNSUPPORTED);
    CASE(pos, (fi_pos_encoding)-1, NULL, FI_EINVALID);
    CASE(soft_cap, 2, NULL, FI_EINVALID);
    CASE(soft_cap, -1, NULL, FI_EINVALID);
    CASE(variant, "../../etc/passwd", NULL, FI_EINVALID);
    CASE(variant, "a/b", NULL, FI_EINVALID);
    CASE(variant, "", NULL, FI_EINVALID);
    CASE(variant, "caf\xc3\xa9", NULL, FI_EINVALID);
    CASE(variant, "x'; DROP TABLE entries; --", NULL, FI_EINVALID);
    CASE(variant, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", NULL,
         FI_EINVALID);
    CASE(variant, "fuzz", NULL, FI_ENOTFOUND); /* a valid name nobody registered */
    CASE(version, FI_JIT_SPEC_VERSION, "sm_", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "../sm_90", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "sm_90a/../../x", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "sm_99999", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "SM_90", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "sm_90\xff", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "sm_90 --x", FI_EINVALID);
    CASE(version, FI_JIT_SPEC_VERSION, "compute_90", FI_EINVALID);
#undef CASE
    for (int i = 0; i < n; i++) {
        int rc = fi_jit_prewarm(NULL, ctx, &cases[i].spec, cases[i].arch);
        if (rc != cases[i].code) fi_jit_ctx_free(ctx);
        CHECK_MSG(rc == cases[i].code, "case %d: got %d want %d: %s", i, rc, cases[i].code,
                  fi_last_error());
        if (strlen(fi_last_error()) <= 10) fi_jit_ctx_free(ctx);
        CHECK_MSG(strlen(fi_last_error()) > 10, "case %d: no message", i);
    }
    CHECK_RC(fi_jit_prewarm(NULL, ctx, NULL, NULL), FI_EINVALID);
    CHECK_RC(fi_jit_prewarm(NULL, NULL, &good, NULL), FI_EINVALID);
    fi_jit_stats s = FI_JIT_STATS_INIT;
    CHECK_OK(fi_jit_stats_get(&s, ctx));
    fi_jit_ctx_free(ctx);
    CHECK_MSG(s.compiles == 0 && s.compile_failures == 0 && s.entries == 0 && s.misses == 0,
              "compiles %lld failures %lld entries %lld misses %lld", (long long)s.compiles,
              (long long)s.compile_failures, (long long)s.entries, (long long)s.misses);
    CHECK(count_files(dir, NULL) == 0);
}

TEST(bad_options_and_environment_are_refused)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    char long_dir[5000], dir[4200];
    memset(long_dir, 'a', sizeof long_dir - 1);
    long_dir[0] = '/';
    long_dir[sizeof long_dir - 1] = '\0';
    path_in(dir, "cache");
    opts.cache_dir = "";
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    opts.cache_dir = long_dir;
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    opts.cache_dir = dir;
    opts.arch = "../sm_90";
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    opts.arch = NULL;
    static const char *const sizes[] = {"lots", "-1", "99999999999T", "1Q", "", "12 M", "nan"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        setenv("FIJIT_MAX_CACHE_SIZE", sizes[i], 1);
        int rc = fi_jit_ctx_new(&ctx, &opts);
        unsetenv("FIJIT_MAX_CACHE_SIZE");
        fi_jit_ctx_free(ctx);
        ctx = NULL;
        /* "" means unset; every other value is not a size. */
        CHECK_MSG(rc == (*sizes[i] ? FI_EINVALID : 0), "FIJIT_MAX_CACHE_SIZE='%s': rc %d", sizes[i], rc);
    }
    setenv("FIJIT_ARCH", "sm_90a; rm -rf /", 1);
    opts.arch = NULL;
    int rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_ARCH");
    fi_jit_ctx_free(ctx);
    CHECK_RC(rc, FI_EINVALID);
    CHECK(count_files(dir, NULL) == 0);
}

/* ---- 7. hostile directories ----------------------------------------------------------- */

static int mode_of(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
}

TEST(cache_dir_and_objects_are_created_private)
{
    char dir[4200], sub[4300], hex[33];
    uint8_t key[16];
    path_in(dir, "a/b/cache");
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_COMPILED);
    CHECK_MSG(mode_of(dir) == 0700, "cache dir mode %o", mode_of(dir));
    static const char *const subs[] = {"objects", "locks", "tmp"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, subs[i]);
        CHECK_MSG(mode_of(sub) == 0700, "%s mode %o", sub, mode_of(sub));
    }
    CHECK_OK(key_of_text(dir, damage_spec, key, hex));
    object_path_of(sub, dir, hex);
    CHECK_MSG(mode_of(sub) == 0600, "object mode %o", mode_of(sub));
}

TEST(foreign_or_shared_dirs_are_refused_unless_allowed)
{
    char dir[4200], sub[4300];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    path_in(dir, "cache");
    opts.cache_dir = dir;
    opts.log_level = FI_LOG_OFF;
    static const int modes[] = {0770, 0720, 0702, 01777, 0777};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        CHECK(mkdir(dir, 0700) == 0 && chmod(dir, (mode_t)modes[i]) == 0);
        CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EPERM);
        CHECK_MSG(strstr(fi_last_error(), "writable by group or others") &&
                      strstr(fi_last_error(), dir),
                  "mode %o: '%s'", modes[i], fi_last_error());
        snprintf(sub, sizeof sub, "%s/objects", dir);
        CHECK(mode_of(sub) < 0); /* nothing created inside a refused dir */
        CHECK(rmdir(dir) == 0);
    }
    CHECK(mkdir(dir, 0700) == 0);
    if (geteuid() == 0) {
        CHECK(chown(dir, 65534, 65534) == 0);
        CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EPERM);
        CHECK_MSG(strstr(fi_last_error(), "belongs to uid 65534"), "'%s'", fi_last_error());
        opts.allow_unsafe_dir = 1;
        CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
        fi_jit_ctx_free(ctx);
        opts.allow_unsafe_dir = 0;
        /* A subfolder handed to another user is refused too. */
        CHECK(chown(dir, 0, 0) == 0);
        snprintf(sub, sizeof sub, "%s/objects", dir);
        CHECK(chown(sub, 65534, 65534) == 0);
        CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EPERM);
        CHECK(strstr(fi_last_error(), "objects"));
    } else {
        printf("  (not root: the foreign-owner case is skipped)\n");
    }
}

TEST(planted_symlinks_are_never_followed)
{
    char dir[4200], outside[4200], victim[4300], path[4300], sub[4300], lock[4300], planted[4300],
        hex[33], hex2[33];
    uint8_t key[16], key2[16];
    struct stat sb;
    const char *other_spec = "decode q=bf16 hd=64";
    path_in(dir, "cache");
    path_in(outside, "outside");
    CHECK(mkdir(outside, 0700) == 0);
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_COMPILED);
    CHECK_OK(key_of_text(dir, damage_spec, key, hex));
    object_path_of(path, dir, hex);

    /* 1. The object path is a link to a valid object elsewhere: not read
     * through, not written through; the link is replaced by a real file. */
    snprintf(victim, sizeof victim, "%s/victim.fo", outside);
    CHECK(rename(path, victim) == 0 && symlink(victim, path) == 0);
    uint64_t before = file_hash(victim);
    CHECK_RC(prewarm_in(dir, damage_spec), FI_BUILD_COMPILED);
    CHECK(file_hash(victim) == before);
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    CHECK(stats_in(dir).corrupt == 1);

    /* 2. Links planted where a new object and its lock will go. */
    CHECK_OK(key_of_text(dir, other_spec, key2, hex2));
    object_path_of(path, dir, hex2);
    snprintf(sub, sizeof sub, "%s/objects/%.2s", dir, hex2);
    mkdir(sub, 0700);
    snprintf(planted, sizeof planted, "%s/planted", outside);
    CHECK(symlink(planted, path) == 0);
    snprintf(lock, sizeof lock, "%s/locks/%s.lock", dir, hex2);
    snprintf(victim, sizeof victim, "%s/lock-victim", outside);
    CHECK(run_cmd("printf keep > '%s'", victim) == 0 && symlink(victim, lock) == 0);
    before = file_hash(victim);
    CHECK_RC(prewarm_in(dir, other_spec), FI_BUILD_COMPILED);
    CHECK_MSG(lstat(planted, &sb) < 0, "a file was created through the planted object link");
    CHECK(file_hash(victim) == before && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));

    /* 3. An objects/<xx> folder that is a link: neither read nor written. */
    char moved[4300];
    snprintf(moved, sizeof moved, "%s/moved", outside);
    snprintf(sub, sizeof sub, "%s/objects/%.2s", dir, hex);
    CHECK(rename(sub, moved) == 0 && symlink(moved, sub) == 0);
    CHECK(run_cmd("cd '%s' && ls -l > ../listing-before.txt", moved) == 0);
    CHECK_RC(prewarm_in(dir, damage_spec), FI_EIO); /* compiled, but not stored through the link */
    CHECK(run_cmd("cd '%s' && ls -l > ../listing-after.txt && cmp -s ../listing-before.txt "
                  "../listing-after.txt", moved) == 0);
    CHECK(count_files(dir, ".tmp.") == 0);

    /* 4. index.sqlite as a link: SQLite refuses it; the link (not its
     * target) is moved aside, a new index started, objects re-indexed. */
    char index[4300], index_victim[4300];
    snprintf(index, sizeof index, "%s/index.sqlite", dir);
    snprintf(index_victim, sizeof index_victim, "%s/index-victim", outside);
    CHECK(run_cmd("printf keep > '%s' && rm -f '%s' '%s-wal' '%s-shm'", index_victim, index, index,
                  index) == 0);
    CHECK(symlink(index_victim, index) == 0);
    before = file_hash(index_victim);
    int rc = prewarm_in(dir, other_spec);
    CHECK_MSG(rc == FI_BUILD_CACHED, "rc %d: %s", rc, fi_last_error());
    CHECK(file_hash(index_victim) == before && lstat(index, &sb) == 0 && S_ISREG(sb.st_mode));
}

/* SQL in the meta texts never reaches the index: the codec refuses any spec
 * that is not canonical and any arch fi_arch_check refuses (the statements
 * bind their values anyway), and nothing is written. */
TEST(sql_text_in_meta_is_refused_and_writes_nothing)
{
    char dir[4200];
    fi_store *st = NULL;
    uint8_t key[16] = {0x5a, 0x17};
    fi_object_meta meta = {0};
    path_in(dir, "cache");
    snprintf(meta.spec, sizeof meta.spec, "'; DROP TABLE entries; --");
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    int rc_spec = fi_store_put(st, key, "payload", 7, &meta);
    snprintf(meta.spec, sizeof meta.spec, "%s", "");
    snprintf(meta.arch, sizeof meta.arch, "x\"); --");
    int rc_arch = fi_store_put(st, key, "payload", 7, &meta);
    fi_jit_stats s = FI_JIT_STATS_INIT;
    int rc = fi_store_stats_get(st, &s);
    fi_store_close(st);
    CHECK_RC(rc_spec, FI_EINVALID);
    CHECK_RC(rc_arch, FI_EINVALID);
    CHECK_OK(rc);
    CHECK(s.entries == 0 && s.bytes_written == 0);
    CHECK(raw_sql(dir, "SELECT count(*) FROM entries") == SQLITE_OK);
    problems pr;
    CHECK(verify_count(dir, &pr) == 0);
}
