/*
 * Per-kernel latency of the tiers, for bench/bench_remote.sh: in this (fresh)
 * process, prewarm each spec of a manifest through a context on CACHE_DIR
 * (with the remote URL, if given) and print the time of the first kernel and
 * the median and 90th percentile of the others, in microseconds. What is
 * timed is fi_jit_prewarm: key, lookup (memory, disk, remote) and, on a
 * miss, the compile and the store; no GPU load (there may be no GPU).
 *
 *   bench_remote CACHE_DIR MANIFEST [URL]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fijit.h"

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    char line[512], variant[64];
    long long times[1024];
    int n = 0, compiled = 0;
    if (argc < 3) {
        fprintf(stderr, "usage: bench_remote CACHE_DIR MANIFEST [URL]\n");
        return 2;
    }
    FILE *manifest = fopen(argv[2], "r");
    if (!manifest) return 2;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = argv[1];
    opts.arch = "sm_90a";
    opts.remote = argc > 3 ? argv[3] : NULL;
    fi_jit_ctx *ctx = NULL;
    long long start = now_ns();
    if (fi_jit_ctx_new(&ctx, &opts) < 0) {
        fprintf(stderr, "bench_remote: %s\n", fi_last_error());
        return 1;
    }
    long long ctx_ns = now_ns() - start;
    fi_jit_stats before = FI_JIT_STATS_INIT; /* the dir's counters are cumulative */
    fi_jit_stats_get(&before, ctx);
    while (n < 1024 && fgets(line, sizeof line, manifest)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0] || line[0] == '#') continue;
        fi_jit_spec spec;
        fi_build_outcome outcome;
        if (fi_jit_spec_parse(&spec, variant, sizeof variant, line) < 0) return 2;
        long long t0 = now_ns();
        if (fi_jit_prewarm(&outcome, ctx, &spec, NULL) < 0) {
            fprintf(stderr, "bench_remote: %s: %s\n", line, fi_last_error());
            return 1;
        }
        times[n++] = now_ns() - t0;
        compiled += outcome == FI_BUILD_COMPILED;
    }
    fclose(manifest);
    fi_jit_stats s = FI_JIT_STATS_INIT;
    fi_jit_stats_get(&s, ctx);
    fi_jit_ctx_free(ctx);
    long long first = times[0];
    qsort(times + 1, (size_t)(n - 1), sizeof *times, by_value);
    printf("kernels %d compiled %d disk_hits %lld remote_hits %lld | ctx_new %.0f us, first "
           "%.0f us, rest median %.0f us p90 %.0f us\n", n, compiled,
           (long long)(s.disk_hits - before.disk_hits),
           (long long)(s.remote_hits - before.remote_hits), ctx_ns / 1e3, first / 1e3,
           n > 1 ? times[1 + (n - 1) / 2] / 1e3 : 0.0,
           n > 1 ? times[1 + (n - 1) * 9 / 10] / 1e3 : 0.0);
    return 0;
}
