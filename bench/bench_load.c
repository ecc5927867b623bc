/*
 * Per-context load cost (`make bench-load`): the time fi_jit_get_kernel
 * takes, and the device memory it costs, in each of N CUDA contexts made
 * with cuCtxCreate (spread over the devices), for N = 1, 2, 8, with each
 * way of loading (src/core/load.h: one library for the process, or a module
 * per context; FIJIT_LOAD). The kernels come from the disk cache, warmed
 * first, so no compile is timed; the first context of a run also reads the
 * cache and loads the object, the others only get their functions (library)
 * or load a module each. Memory is cuMemGetInfo's free bytes before and
 * after, per context. With the driver's lazy loading (the default) part of
 * the cost moves to the first launch; CUDA_MODULE_LOADING=EAGER shows it here.
 *
 *   bench_load [--contexts 1,2,8] [--ways library,module] [--rounds 5]
 *              [--spec "decode q=fp16 hd=128"]...
 *
 * One line per (way, contexts): medians over rounds of the first context's
 * time, the other contexts' time and memory each. On a machine without a GPU
 * it runs on the fake driver (LD_LIBRARY_PATH=build/tests), which says only
 * that it works.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fijit.h"
#include "fijit_cache.h"

#define MAX_COUNTS 8
#define MAX_CONTEXTS 64
#define MAX_SPECS 8
#define MAX_ROUNDS 50

static const char *const default_specs[] = {"decode q=fp16 hd=128", "prefill q=fp16 hd=128 mask=causal"};

/* Driver calls the library does not make for programs: taken from the
 * libcuda.so.1 fijit loaded. */
static struct {
    CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice);
    CUresult (*ctx_destroy)(CUcontext);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*ctx_synchronize)(void);
    CUresult (*mem_get_info)(size_t *, size_t *);
    CUresult (*device_get_name)(char *, int, CUdevice);
} drv;

static int driver_bind(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return -1;
    *(void **)&drv.ctx_create = dlsym(lib, "cuCtxCreate_v2");
    *(void **)&drv.ctx_destroy = dlsym(lib, "cuCtxDestroy_v2");
    *(void **)&drv.ctx_set_current = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&drv.ctx_synchronize = dlsym(lib, "cuCtxSynchronize");
    *(void **)&drv.mem_get_info = dlsym(lib, "cuMemGetInfo_v2");
    *(void **)&drv.device_get_name = dlsym(lib, "cuDeviceGetName");
    return drv.ctx_create && drv.ctx_destroy && drv.ctx_set_current && drv.ctx_synchronize ? 0 : -1;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int compare_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof v[0], compare_double);
    return v[n / 2];
}

/* Free device memory of the current context's device; -1 when unknown. */
static double free_bytes(void)
{
    size_t free_now = 0, total = 0;
    if (!drv.mem_get_info || drv.ctx_synchronize() != CUDA_SUCCESS ||
        drv.mem_get_info(&free_now, &total) != CUDA_SUCCESS)
        return -1;
    return (double)free_now;
}

static int parse_counts(const char *text, int *out, int max)
{
    int n = 0;
    for (char *end; *text && n < max; text = *end ? end + 1 : end) {
        const long v = strtol(text, &end, 10);
        if (end == text || v < 1 || v > MAX_CONTEXTS || (*end && *end != ',')) return -1;
        out[n++] = (int)v;
    }
    return n;
}

typedef struct bench {
    fi_jit_spec specs[MAX_SPECS];
    char variants[MAX_SPECS][FI_VARIANT_NAME_MAX + 1];
    int spec_count;
    int devices;
} bench;

static int spec_parse(bench *b, const char *text)
{
    const int i = b->spec_count;
    const int rc = fi_jit_spec_parse(&b->specs[i], b->variants[i], sizeof b->variants[i], text);
    if (rc == 0) b->spec_count++;
    return rc;
}

/* Load every spec in each of `n` new contexts, once; the times and memory
 * of the first context and of the others (added to `first_*` and to
 * `others_*[*others_n]`). */
static int one_round(const bench *b, int n, double *first_ms, double *first_mem,
                     double *others_ms, double *others_mem, int *others_n)
{
    CUcontext contexts[MAX_CONTEXTS] = {NULL};
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    int rc = 0, made = 0;
    opts.log_level = FI_LOG_WARN;
    if ((rc = fi_jit_ctx_new(&ctx, &opts)) < 0) return rc;
    for (; made < n; made++)
        if (drv.ctx_create(&contexts[made], 0, made % b->devices) != CUDA_SUCCESS) {
            fprintf(stderr, "bench_load: cuCtxCreate failed for context %d\n", made);
            rc = FI_ENODEVICE;
            goto out;
        }
    for (int c = 0; c < n && rc == 0; c++) {
        drv.ctx_set_current(contexts[c]);
        const double mem_before = free_bytes();
        const double t0 = now_ms();
        for (int s = 0; s < b->spec_count && rc == 0; s++) {
            const fi_jit_kernel *k = NULL;
            rc = fi_jit_get_kernel(&k, ctx, &b->specs[s]);
        }
        const double ms = now_ms() - t0;
        const double mem_after = free_bytes();
        const double mem = mem_before < 0 || mem_after < 0 ? -1 : mem_before - mem_after;
        if (c == 0) {
            *first_ms = ms;
            *first_mem = mem;
        } else {
            others_ms[*others_n] = ms;
            others_mem[(*others_n)++] = mem;
        }
    }
    if (rc < 0) fprintf(stderr, "bench_load: %s\n", fi_last_error());
out:
    fi_jit_ctx_free(ctx); /* unloads before the contexts go */
    for (int c = 0; c < made; c++) drv.ctx_destroy(contexts[c]);
    return rc;
}

static int run(const bench *b, const char *way, int n, int rounds)
{
    double first_ms[MAX_ROUNDS], first_mem[MAX_ROUNDS];
    static double others_ms[MAX_ROUNDS * MAX_CONTEXTS], others_mem[MAX_ROUNDS * MAX_CONTEXTS];
    int others_n = 0, rc;
    setenv("FIJIT_LOAD", way, 1);
    for (int r = 0; r < rounds; r++)
        if ((rc = one_round(b, n, &first_ms[r], &first_mem[r], others_ms, others_mem, &others_n)) < 0)
            return rc;
    char other_ms[32] = "-", other_kib[32] = "-";
    if (others_n) {
        snprintf(other_ms, sizeof other_ms, "%.3f", median(others_ms, others_n));
        snprintf(other_kib, sizeof other_kib, "%.0f", median(others_mem, others_n) / 1024);
    }
    printf("%-8s %8d %14.3f %15s %14.0f %15s\n", way, n, median(first_ms, rounds), other_ms,
           median(first_mem, rounds) / 1024, other_kib);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    bench b = {.spec_count = 0};
    int counts[MAX_COUNTS] = {1, 2, 8}, count_n = 3, rounds = 5;
    const char *ways = "library,module";
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--contexts") == 0 && value) {
            if ((count_n = parse_counts(value, counts, MAX_COUNTS)) <= 0) {
                fprintf(stderr, "bench_load: --contexts takes counts 1..%d, e.g. 1,2,8\n", MAX_CONTEXTS);
                return 2;
            }
        } else if (strcmp(argv[i], "--ways") == 0 && value) {
            ways = value;
        } else if (strcmp(argv[i], "--rounds") == 0 && value) {
            rounds = atoi(value);
            if (rounds < 1 || rounds > MAX_ROUNDS) {
                fprintf(stderr, "bench_load: --rounds takes 1..%d\n", MAX_ROUNDS);
                return 2;
            }
        } else if (strcmp(argv[i], "--spec") == 0 && value && b.spec_count < MAX_SPECS) {
            if (spec_parse(&b, value) < 0) {
                fprintf(stderr, "bench_load: %s\n", fi_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_load [--contexts 1,2,8] [--ways library,module] "
                            "[--rounds N] [--spec TEXT]...\n");
            return 2;
        }
        i++;
    }
    if (b.spec_count == 0)
        for (size_t s = 0; s < sizeof default_specs / sizeof *default_specs; s++)
            if (spec_parse(&b, default_specs[s]) < 0) return 1;
    if (fi_device_count(&b.devices) < 0 || b.devices < 1 || driver_bind() < 0) {
        fprintf(stderr, "bench_load: no CUDA device: %s\n", fi_last_error());
        return 1;
    }
    /* Warm the disk cache for the device's arch: nothing below compiles. */
    fi_jit_ctx *warm = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.log_level = FI_LOG_WARN;
    int rc = fi_device_use(0) < 0 ? -1 : fi_jit_ctx_new(&warm, &opts);
    for (int s = 0; s < b.spec_count && rc == 0; s++) {
        const fi_jit_kernel *k = NULL;
        rc = fi_jit_get_kernel(&k, warm, &b.specs[s]);
    }
    fi_jit_ctx_free(warm);
    if (rc < 0) {
        fprintf(stderr, "bench_load: warming the cache: %s\n", fi_last_error());
        return 1;
    }
    char name[128] = "unnamed";
    if (drv.device_get_name && drv.device_get_name(name, sizeof name, 0) != CUDA_SUCCESS)
        snprintf(name, sizeof name, "unnamed");
    printf("# bench_load: %d device(s) (%s), %d kernel(s), medians of %d round(s)\n", b.devices,
           name, b.spec_count, rounds);
    printf("%-8s %8s %14s %15s %14s %15s\n", "way", "contexts", "first ms", "each other ms",
           "first KiB", "each other KiB");
    char list[128];
    snprintf(list, sizeof list, "%s", ways);
    for (char *save = NULL, *way = strtok_r(list, ",", &save); way; way = strtok_r(NULL, ",", &save))
        for (int i = 0; i < count_n; i++)
            if (run(&b, way, counts[i], rounds) < 0) return 1;
    return 0;
}
