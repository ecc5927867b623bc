/*
 * JIT-side benchmark (`make bench`): cold compile time per tuple, disk-hit
 * latency in a fresh process (split into expand+key and index+read+verify;
 * each sample a new exec of this program, so that nothing the parent loaded
 * or initialised, the CUDA driver included, is inherited), and hot-lookup
 * cost with 1 and 8 threads. Medians; CUDA_CACHE_DISABLE=1 so
 * NVRTC's own cache does not hide cold compiles. Prewarm -j1 vs -jN is timed
 * by bench/bench_prewarm.sh through the CLI.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "toolchain/cuda_drv.h"
#include "core/expand.h"
#include "fijit.h"
#include "core/key.h"
#include "core/load.h"
#include "fijit_cache.h"
#include "kinds/registry.h"
#include "toolchain/nvrtc.h"
#include "kinds/spec.h"
#include "store/store.h"
#include "common/sys.h"
#include "core/table.h"

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t median(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], compare_i64);
    return v[n / 2];
}

static fi_jit_ctx *open_ctx(const char *dir)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    if (fi_jit_ctx_new(&ctx, &opts) < 0) {
        fprintf(stderr, "fi_jit_ctx_new: %s\n", fi_last_error());
        exit(1);
    }
    return ctx;
}

static fi_jit_spec spec_of(const char *text)
{
    static char variant[64];
    fi_jit_spec spec;
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) exit(1);
    return spec;
}

static const char *const tuples[] = {
    "decode q=fp16 hd=128", "decode q=bf16 hd=128 pos=rope", "decode q=fp16 hd=64 mask=window",
    "decode q=bf16 hd=256 pos=alibi softcap=1", "decode q=fp16 hd=256",
};
#define TUPLES ((int)(sizeof tuples / sizeof tuples[0]))

/* ns for the first load of `object` (the cubin of `key`, a `spec` tuple) in
 * this process, into device 0's primary context, through the library's own
 * load path (load.h: cuLibraryLoadData where the driver has it, else
 * cuModuleLoadData; FIJIT_LOAD chooses, as bench_load's --ways does); *way
 * says which ran. -1 without a GPU. */
static int64_t time_first_load(const void *object, const uint8_t key[16], const fi_jit_spec *spec,
                               int64_t *way)
{
    const fi_cuda_api *cu;
    CUcontext current;
    fi_table_entry e;
    memset(&e, 0, sizeof e);
    if (fi_device_use(0) < 0 || fi__cuda_load(&cu) < 0 ||
        fi__cuda_current_context(&current, &e.device_id) < 0) {
        fprintf(stderr, "bench_jit: no device context: %s\n", fi_last_error());
        return -1;
    }
    e.device_ctx = current;
    int64_t start = fi__now_ns();
    if (fi__load_object(&e, object, key, fi__kind_info(spec->kind), -1, -1, cu) < 0) {
        fprintf(stderr, "bench_jit: load: %s\n", fi_last_error());
        return -1;
    }
    int64_t elapsed = fi__now_ns() - start;
    *way = e.library != NULL;
    fi__load_release(&e);
    return elapsed;
}

/* Disk hit in a fresh process (main's --disk-hit). Reports ns for: opening a
 * context (index open), expand + key, index lookup + read + verify
 * (fi_store_get on a warm connection), the whole fi_jit_prewarm disk hit, and
 * the first load (R_LIBRARY: 1 when it was a library, 0 a module). */
enum { R_OPEN, R_EXPAND, R_READ, R_CALL, R_LOAD, R_LIBRARY, R_RC, R_COUNT };

static void disk_hit_child(const char *dir, int write_fd)
{
    int64_t r[R_COUNT];
    fi_jit_spec spec = spec_of(tuples[0]);
    fi_translation_unit tu;
    uint8_t key[16];
    void *object = NULL;
    size_t size = 0;
    fi_jit_stats warm;
    const fi_kind_info *kind = fi__kind_info(spec.kind);
    const char *options[] = {"--gpu-architecture=sm_90a", "-std=c++17", "--modify-stack-limit=false",
                             "-default-device", "--ptxas-options=--verbose"};
    int major, minor;
    if (fi__nvrtc_version(&major, &minor) < 0) exit(1);
    int64_t t0 = fi__now_ns();
    fi_jit_ctx *ctx = open_ctx(dir);
    int64_t t1 = fi__now_ns();
    fi__expand(&tu, &spec, NULL);
    fi_key_input in = {&tu, "sm_90a", major, minor, 5, options, fi__kind_entry_count(kind),
                       kind->entries};
    fi__key_compute(key, &in, NULL, NULL);
    int64_t t2 = fi__now_ns();
    fi_store *store = NULL;
    fi_store_open(&store, dir, 0, 0);
    fi_store_stats_get(store, &warm); /* a first statement, as a context's open runs */
    int64_t t3 = fi__now_ns();
    int rc = fi_store_get(store, key, &object, &size, NULL);
    int64_t t4 = fi__now_ns();
    fi_build_outcome outcome = FI_BUILD_COMPILED;
    rc |= fi_jit_prewarm(&outcome, ctx, &spec, NULL);
    int64_t t5 = fi__now_ns();
    r[R_OPEN] = t1 - t0;
    r[R_EXPAND] = t2 - t1;
    r[R_READ] = t4 - t3;
    r[R_CALL] = t5 - t4;
    r[R_RC] = rc || outcome != FI_BUILD_CACHED;
    r[R_LIBRARY] = 0;
    r[R_LOAD] = rc == 0 ? time_first_load(object, key, &spec, &r[R_LIBRARY]) : -1;
    if (write(write_fd, r, sizeof r) != sizeof r) exit(1);
    fi__free(object);
    fi__tu_free(&tu);
    fi_store_close(store);
    fi_jit_ctx_free(ctx);
    exit(0);
}

typedef struct hot_arg {
    fi_table *table;
    int iterations;
    int64_t ns;
} hot_arg;

/* What fi_jit_get_kernel does on a hit, minus the driver's cuCtxGetCurrent and cuCtxGetId. */
static void *hot_lookups(void *p)
{
    hot_arg *arg = p;
    fi_jit_spec spec = spec_of(tuples[0]);
    const uint64_t device_id = 1;
    int found = 0;
    int64_t start = fi__now_ns();
    for (int i = 0; i < arg->iterations; i++) {
        fi_spec_key key;
        fi__spec_key(&key, &spec);
        found += fi__table_find(arg->table, fi__table_hash(&key, device_id), &key, device_id) != NULL;
    }
    arg->ns = fi__now_ns() - start;
    if (found != arg->iterations) fprintf(stderr, "hot lookup missed\n");
    return NULL;
}

static double hot_ns_per_op(int threads)
{
    static fi_table table;
    fi__table_init(&table);
    for (int i = 0; i < TUPLES; i++) {
        fi_jit_spec spec = spec_of(tuples[i]);
        fi_table_entry *e = fi__calloc(1, sizeof *e);
        fi__spec_key(&e->spec, &spec);
        e->device_id = 1;
        e->hash = fi__table_hash(&e->spec, e->device_id);
        fi__table_insert(&table, e);
    }
    pthread_t tid[8];
    hot_arg args[8];
    /* Wall time x busy cores / operations: with more threads than cores, a
     * thread's own wall time also counts the time it waited for a core. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int busy = threads < cores ? threads : (int)cores;
    int64_t start = fi__now_ns();
    for (int t = 0; t < threads; t++) {
        args[t] = (hot_arg){&table, 2000000, 0};
        pthread_create(&tid[t], NULL, hot_lookups, &args[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    double wall = (double)(fi__now_ns() - start);
    fi__table_destroy(&table, NULL);
    return wall * busy / (2000000.0 * threads);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--disk-hit") == 0) disk_hit_child(argv[2], atoi(argv[3]));
    char dir[] = "/tmp/fijit-bench-XXXXXX";
    int64_t compile_ms[TUPLES];
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    if (!mkdtemp(dir)) return 1;
    char cache[64];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    fi_jit_ctx *ctx = open_ctx(cache);
    for (int i = 0; i < TUPLES; i++) {
        fi_jit_spec spec = spec_of(tuples[i]);
        int64_t start = fi__now_ns();
        if (fi_jit_prewarm(NULL, ctx, &spec, NULL) < 0) {
            fprintf(stderr, "%s\n", fi_last_error());
            return 1;
        }
        compile_ms[i] = (fi__now_ns() - start) / 1000000;
        printf("cold compile  %-45s %5lld ms\n", tuples[i], (long long)compile_ms[i]);
    }
    fi_jit_ctx_free(ctx);

    enum { RUNS = 15 };
    int64_t samples[R_COUNT][RUNS];
    for (int run = 0; run < RUNS; run++) {
        int fds[2];
        int64_t r[R_COUNT] = {0};
        if (pipe(fds) < 0) return 1;
        if (fork() == 0) {
            char fd[16];
            snprintf(fd, sizeof fd, "%d", fds[1]);
            close(fds[0]);
            execl("/proc/self/exe", argv[0], "--disk-hit", cache, fd, (char *)NULL);
            _exit(127);
        }
        close(fds[1]);
        if (read(fds[0], r, sizeof r) != sizeof r || r[R_RC] != 0) {
            fprintf(stderr, "disk-hit child failed\n");
            return 1;
        }
        close(fds[0]);
        wait(NULL);
        for (int i = 0; i < R_COUNT; i++) samples[i][run] = r[i];
    }
    double hot1 = hot_ns_per_op(1), hot8 = hot_ns_per_op(8);
    printf("\n%-56s %10s\n", "JIT benchmark (medians)", "value");
    printf("%-56s %7lld ms\n", "cold compile per decode tuple (NVRTC, sm_90a)",
           (long long)median(compile_ms, TUPLES));
    printf("%-56s %7.3f ms\n", "fresh process: open context (index)", median(samples[R_OPEN], RUNS) / 1e6);
    printf("%-56s %7.3f ms\n", "disk hit: expand + key", median(samples[R_EXPAND], RUNS) / 1e6);
    printf("%-56s %7.3f ms\n", "disk hit: index lookup + read + verify",
           median(samples[R_READ], RUNS) / 1e6);
    printf("%-56s %7.3f ms\n", "disk hit: whole fi_jit_prewarm call", median(samples[R_CALL], RUNS) / 1e6);
    int64_t load = median(samples[R_LOAD], RUNS);
    const char *load_label = samples[R_LIBRARY][0] ? "disk hit: first load in process (cuLibraryLoadData)"
                                                    : "disk hit: first load in process (cuModuleLoadData)";
    if (load >= 0)
        printf("%-56s %7.3f ms\n", load_label, load / 1e6);
    else
        printf("%-56s %10s\n", "disk hit: first load in process", "no GPU");
    printf("%-56s %7.1f ns\n", "hot lookup, 1 thread", hot1);
    printf("%-56s %7.1f ns\n", "hot lookup, 8 threads (per op per busy core)", hot8);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
