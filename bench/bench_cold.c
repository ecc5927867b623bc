/*
 * Cold builds side by side: the wall time fi_jit_prewarm takes from an empty
 * cache, for the library under test and, with --baseline, an older build of
 * it, loaded into this one process (dlopen, RTLD_LOCAL: each its own copy)
 * and timed in turn, rep by rep, so that both see the same machine load.
 *
 *   bench_cold [--baseline OLD.so] [--reps N] [--jobs J] [--sweep] [--arch A]
 *              [--only WORD] [LIB]
 *
 * Sets: one prefill tuple of each prefill kind at head_dim 64, 128 and 256
 * (fp16, causal), one decode and one batch-decode tuple (fp16, head_dim
 * 128), each alone; `make run`'s 36 decode tuples on J threads; with
 * --sweep, every prefill tuple (432, and fp8's 4 on sm_90a) on J threads;
 * --only runs the sets whose name holds WORD.
 * Each line is the median of N cold builds (a fresh cache each), with the
 * fastest and slowest. NVRTC's own cache is switched off
 * (CUDA_CACHE_DISABLE=1); set FIJIT_FAST_COMPILE to time fast builds (a
 * library that does not know it builds as ever).
 */
#include <dlfcn.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fijit.h"

#define MAX_REPS 99
#define MAX_SPECS 512
#define MAX_JOBS 64

/* The public calls the bench makes, resolved in one library. */
typedef struct lib {
    const char *path;
    int (*ctx_new)(fi_jit_ctx **, const fi_jit_options *);
    void (*ctx_free)(fi_jit_ctx *);
    int (*prewarm)(fi_build_outcome *, fi_jit_ctx *, const fi_jit_spec *, const char *);
    int (*spec_parse)(fi_jit_spec *, char *, size_t, const char *);
    int (*spec_enumerate)(fi_jit_spec *, size_t, int);
    const char *(*last_error)(void);
} lib;

static int lib_open(lib *l, const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bench_cold: %s\n", dlerror());
        return -1;
    }
    l->path = path;
    *(void **)&l->ctx_new = dlsym(h, "fi_jit_ctx_new");
    *(void **)&l->ctx_free = dlsym(h, "fi_jit_ctx_free");
    *(void **)&l->prewarm = dlsym(h, "fi_jit_prewarm");
    *(void **)&l->spec_parse = dlsym(h, "fi_jit_spec_parse");
    *(void **)&l->spec_enumerate = dlsym(h, "fi_jit_spec_enumerate");
    *(void **)&l->last_error = dlsym(h, "fi_last_error");
    if (!l->ctx_new || !l->ctx_free || !l->prewarm || !l->spec_parse || !l->spec_enumerate ||
        !l->last_error) {
        fprintf(stderr, "bench_cold: %s lacks fijit's public calls\n", path);
        return -1;
    }
    return 0;
}

/* A set of specs to build from empty, `jobs` at a time. */
typedef struct spec_set {
    char name[64];
    const char *texts[MAX_SPECS]; /* spec strings, or NULL with `kinds` */
    int count;
    int kinds[4];                 /* enumerate these kinds instead, 0-terminated */
    int threads;
} spec_set;

/* One timed run: build every spec of `specs` into `dir` on `threads` threads. */
typedef struct run {
    const lib *l;
    fi_jit_ctx *ctx;
    const fi_jit_spec *specs;
    int count;
    atomic_int next;
    atomic_int failed;
} run;

static void *worker(void *arg)
{
    run *r = arg;
    for (int i; (i = atomic_fetch_add(&r->next, 1)) < r->count;) {
        fi_build_outcome outcome;
        if (r->l->prewarm(&outcome, r->ctx, &r->specs[i], NULL) < 0 &&
            atomic_fetch_add(&r->failed, 1) == 0)
            fprintf(stderr, "bench_cold: %s: %s\n", r->l->path, r->l->last_error());
    }
    return NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The specs of `set` as `l` parses them (each library its own struct). */
static int set_specs(const lib *l, const spec_set *set, fi_jit_spec *out, char variants[][64])
{
    int n = 0;
    for (int i = 0; i < set->count; i++)
        if (l->spec_parse(&out[n++], variants[i], 64, set->texts[i]) < 0) {
            fprintf(stderr, "bench_cold: %s: %s\n", set->texts[i], l->last_error());
            return -1;
        }
    for (int k = 0; set->kinds[k]; k++) {
        int got = l->spec_enumerate(&out[n], (size_t)(MAX_SPECS - n), set->kinds[k]);
        if (got < 0 || got > MAX_SPECS - n) return -1;
        n += got;
    }
    return n;
}

/* Seconds to build `set` with `l` from an empty cache, or < 0. */
static double time_cold(const lib *l, const spec_set *set, const char *arch)
{
    static fi_jit_spec specs[MAX_SPECS];
    static char variants[MAX_SPECS][64];
    char dir[] = "/tmp/fijit-bench-cold-XXXXXX";
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    pthread_t threads[MAX_JOBS];
    double seconds = -1;
    run r = {l, NULL, specs, 0, 0, 0};
    if ((r.count = set_specs(l, set, specs, variants)) < 0 || !mkdtemp(dir)) return -1;
    opts.version = 1; /* what every build of the library takes */
    opts.cache_dir = dir;
    opts.arch = arch;
    opts.log_level = FI_LOG_OFF;
    if (l->ctx_new(&r.ctx, &opts) < 0) {
        fprintf(stderr, "bench_cold: %s: %s\n", l->path, l->last_error());
        goto out;
    }
    double start = now_s();
    for (int t = 0; t < set->threads; t++) pthread_create(&threads[t], NULL, worker, &r);
    for (int t = 0; t < set->threads; t++) pthread_join(threads[t], NULL);
    if (!atomic_load(&r.failed)) seconds = now_s() - start;
out:
    l->ctx_free(r.ctx);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return seconds;
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_cold [--baseline OLD.so] [--reps N] [--jobs J] [--sweep] "
                    "[--arch A] [--only WORD] [LIB (default build/libfijit.so)]\n");
}

int main(int argc, char **argv)
{
    const char *paths[2] = {"build/libfijit.so", NULL}, *arch = "sm_90a", *only = "";
    int reps = 5, jobs = 2, sweep = 0, libs = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--baseline") == 0 && i + 1 < argc) paths[1] = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc) jobs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) arch = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--sweep") == 0) sweep = 1;
        else if (argv[i][0] != '-') paths[0] = argv[i];
        else return usage(), 2;
    }
    if (reps < 1 || reps > MAX_REPS || jobs < 1 || jobs > MAX_JOBS) return usage(), 2;
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    lib l[2];
    if (lib_open(&l[0], paths[0]) < 0) return 1;
    if (paths[1] && lib_open(&l[libs++], paths[1]) < 0) return 1;

    static spec_set sets[16];
    int set_count = 0;
    static const char *const kinds[] = {"prefill", "batch_prefill_ragged", "batch_prefill_paged"};
    static char texts[16][96];
    for (int k = 0; k < 3; k++)
        for (int hd = 64; hd <= 256; hd *= 2) {
            spec_set *s = &sets[set_count];
            snprintf(texts[set_count], sizeof texts[0], "%s q=fp16 hd=%d mask=causal", kinds[k], hd);
            snprintf(s->name, sizeof s->name, "%s hd%d causal", kinds[k], hd);
            s->texts[0] = texts[set_count++];
            s->count = s->threads = 1;
        }
    sets[set_count++] = (spec_set){"decode hd128", {"decode q=fp16 hd=128"}, 1, {0}, 1};
    sets[set_count++] = (spec_set){"batch_decode hd128", {"batch_decode q=fp16 hd=128"}, 1, {0}, 1};
    /* make run's DEFAULT_SET: decode x fp16,bf16 x 64,128,256 x none,window x none,rope,alibi. */
    static char run_texts[36][96];
    spec_set *run_set = &sets[set_count++];
    snprintf(run_set->name, sizeof run_set->name, "make run set (36), -j%d", jobs);
    run_set->threads = jobs;
    for (int d = 0; d < 2; d++)
        for (int hd = 64; hd <= 256; hd *= 2)
            for (int m = 0; m < 2; m++)
                for (int p = 0; p < 3; p++) {
                    snprintf(run_texts[run_set->count], sizeof run_texts[0],
                             "decode q=%s hd=%d mask=%s pos=%s", d ? "bf16" : "fp16", hd,
                             m ? "window" : "none", (const char *[]){"none", "rope", "alibi"}[p]);
                    run_set->texts[run_set->count] = run_texts[run_set->count];
                    run_set->count++;
                }
    if (sweep) {
        spec_set *s = &sets[set_count++];
        snprintf(s->name, sizeof s->name, "prefill sweep, -j%d", jobs);
        s->kinds[0] = FI_KIND_PREFILL;
        s->kinds[1] = FI_KIND_BATCH_PREFILL_RAGGED;
        s->kinds[2] = FI_KIND_BATCH_PREFILL_PAGED;
        s->threads = jobs;
    }

    char host[256] = "";
    time_t t = time(NULL);
    char date[64];
    double load[1] = {0};
    gethostname(host, sizeof host);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    getloadavg(load, 1);
    printf("# bench_cold on %s, %ld CPUs, %s, load %.2f, %s, %d reps%s%s\n", host,
           sysconf(_SC_NPROCESSORS_ONLN), date, load[0], arch, reps,
           getenv("FIJIT_FAST_COMPILE") ? ", FIJIT_FAST_COMPILE=" : "",
           getenv("FIJIT_FAST_COMPILE") ? getenv("FIJIT_FAST_COMPILE") : "");
    printf("# A: %s\n", paths[0]);
    if (libs == 2) printf("# B: %s (baseline)\n", paths[1]);
    printf("# %-34s %-26s%s\n", "seconds from empty: median (min-max)", "A",
           libs == 2 ? " B                          B/A" : "");
    /* Warm-up: NVRTC and the library loaded, a first compile done (decode). */
    for (int i = 0; i < libs; i++) time_cold(&l[i], &sets[9], arch);
    int failed = 0;
    for (int s = 0; s < set_count; s++) {
        if (!strstr(sets[s].name, only)) continue;
        double times[2][MAX_REPS];
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < libs; i++)
                if ((times[i][r] = time_cold(&l[i], &sets[s], arch)) < 0) failed = 1;
        double median[2];
        printf("  %-34s", sets[s].name);
        for (int i = 0; i < libs; i++) {
            qsort(times[i], (size_t)reps, sizeof times[i][0], compare_doubles);
            median[i] = reps % 2 ? times[i][reps / 2] : (times[i][reps / 2 - 1] + times[i][reps / 2]) / 2;
            char cell[64];
            snprintf(cell, sizeof cell, "%.3f (%.3f-%.3f)", median[i], times[i][0], times[i][reps - 1]);
            printf(" %-26s", cell);
        }
        if (libs == 2) printf(" %.2fx", median[1] / median[0]);
        printf("\n");
        fflush(stdout);
    }
    return failed;
}
