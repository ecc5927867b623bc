/*
 * `fijit demo`: the end-to-end GPU check. On CUDA device 0 it runs decode
 * fp16 hd128 (GQA 32/8, NHD) through the cache with random inputs and compares
 * the output with a float64 CPU reference; on a machine with no device it says
 * so and succeeds, since compile-only hosts are a supported setup.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "cli.h"

enum { DEMO_QO_HEADS = 32, DEMO_KV_HEADS = 8, DEMO_HEAD_DIM = 128, DEMO_TIMED_RUNS = 20 };
#define DEMO_MAX_REL_ERR 1e-2

/* IEEE binary16 from float, rounding to nearest even; the host has no
 * half type in C11. */
static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (abs < 0x33000000u) return sign; /* under half of the smallest subnormal */
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(abs >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1);
        uint32_t midpoint = 1u << (shift - 1);
        if (rest > midpoint || (rest == midpoint && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((abs - 0x38000000u) >> 13); /* rebias exponent 127 → 15 */
    uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++; /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

static double half_to_double(uint16_t h)
{
    int sign = h >> 15, exponent = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exponent == 0)
        v = ldexp(mant, -24);
    else if (exponent == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp(mant | 0x400, exponent - 25);
    return sign ? -v : v;
}

/* xorshift64*: a fixed-seed generator, so every run checks the same inputs. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float random_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
    return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0); /* [-1, 1) */
}

static void fill_random(uint16_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) data[i] = float_to_half(random_uniform());
}

/* o[h] = softmax(q[h] . k[:, h/group] * scale) v[:, h/group], in float64. */
static void reference_decode(double *out, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             int kv_len)
{
    const int group = DEMO_QO_HEADS / DEMO_KV_HEADS, hd = DEMO_HEAD_DIM;
    const double scale = 1.0 / sqrt((double)hd);
    double *scores = malloc((size_t)kv_len * sizeof *scores);
    if (!scores) return;
    for (int h = 0; h < DEMO_QO_HEADS; h++) {
        int kvh = h / group;
        double max_score = -INFINITY, sum = 0;
        for (int j = 0; j < kv_len; j++) {
            const uint16_t *kj = k + ((size_t)j * DEMO_KV_HEADS + kvh) * hd;
            double s = 0;
            for (int d = 0; d < hd; d++)
                s += half_to_double(q[h * hd + d]) * half_to_double(kj[d]);
            scores[j] = s * scale;
            if (scores[j] > max_score) max_score = scores[j];
        }
        for (int d = 0; d < hd; d++) out[h * hd + d] = 0;
        for (int j = 0; j < kv_len; j++) {
            double p = exp(scores[j] - max_score);
            sum += p;
            const uint16_t *vj = v + ((size_t)j * DEMO_KV_HEADS + kvh) * hd;
            for (int d = 0; d < hd; d++) out[h * hd + d] += p * half_to_double(vj[d]);
        }
        for (int d = 0; d < hd; d++) out[h * hd + d] /= sum;
    }
    free(scores);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cli_cmd_demo(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_KV_LEN, OPT_REMOTE };
    cli_option options[] = {
        [OPT_KV_LEN] = {"kv-len", 0, 1, 0, NULL},
        [OPT_REMOTE] = {"remote", 0, 1, 0, NULL},
        {0},
    };
    int rc = cli_parse_options(cmd, options, argc, argv);
    if (rc >= 0) return rc;
    if ((rc = cli_check_env(cmd, CLI_ENV_LOG | CLI_ENV_SIZE | CLI_ENV_ARCH)) >= 0) return rc;
    if ((rc = cli_check_remote(cmd, options[OPT_REMOTE].value)) >= 0) return rc;
    int kv_len = 4096;
    if (options[OPT_KV_LEN].value && cli_parse_positive_int(options[OPT_KV_LEN].value, &kv_len) < 0)
        return cli_usage_error(cmd, "--kv-len '%s': expected a positive number",
                               options[OPT_KV_LEN].value);

    int device_count = 0;
    if (fi_device_count(&device_count) < 0 || device_count < 1) {
        printf("demo: no CUDA device; skipped launch (compile-only machine)\n");
        return CLI_EXIT_OK;
    }

    const size_t hd = DEMO_HEAD_DIM;
    const size_t q_elems = DEMO_QO_HEADS * hd;
    const size_t kv_elems = (size_t)kv_len * DEMO_KV_HEADS * hd;
    uint16_t *q = malloc(q_elems * 2), *k = malloc(kv_elems * 2), *v = malloc(kv_elems * 2);
    uint16_t *o = malloc(q_elems * 2);
    double *ref = malloc(q_elems * sizeof *ref);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dwork = NULL;
    fi_jit_ctx *ctx = NULL;
    rc = CLI_EXIT_FAILED;
    if (!q || !k || !v || !o || !ref) {
        fprintf(stderr, "fijit demo: out of memory\n");
        goto out;
    }

    if (fi_device_use(0) < 0) {
        rc = cli_runtime_error(cmd, "cannot use CUDA device 0");
        goto out;
    }

    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = cli_cache_dir_option;
    opts.remote = cli_remote_option;
    if (fi_jit_ctx_new(&ctx, &opts) < 0) {
        rc = cli_runtime_error(cmd, "cannot create a context");
        goto out;
    }
    fi_jit_spec spec;
    char variant[64];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, "decode q=fp16 hd=128") < 0) {
        rc = cli_runtime_error(cmd, "spec");
        goto out;
    }

    fill_random(q, q_elems);
    fill_random(k, kv_elems);
    fill_random(v, kv_elems);

    fi_decode_args a = FI_DECODE_ARGS_INIT;
    a.num_qo_heads = DEMO_QO_HEADS;
    a.num_kv_heads = DEMO_KV_HEADS;
    a.kv_len = kv_len;
    a.q_stride_h = (int64_t)hd;
    a.o_stride_h = (int64_t)hd;
    a.k_stride_n = a.v_stride_n = (int64_t)(DEMO_KV_HEADS * hd); /* NHD */
    a.k_stride_h = a.v_stride_h = (int64_t)hd;

    /* The workspace size depends on the arguments, pointers included (they
     * are validated), so it is asked for after q, k, v and o exist. */
    struct {
        void **ptr;
        size_t bytes;
        const void *host;
    } buffers[] = {
        {&dq, q_elems * 2, q}, {&dk, kv_elems * 2, k}, {&dv, kv_elems * 2, v},
        {&dout, q_elems * 2, NULL},
    };
    for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++) {
        if (fi_device_alloc(buffers[i].ptr, buffers[i].bytes) < 0) {
            rc = cli_runtime_error(cmd, "cannot allocate device memory");
            goto out;
        }
        if (buffers[i].host &&
            fi_device_upload(*buffers[i].ptr, buffers[i].host, buffers[i].bytes) < 0) {
            rc = cli_runtime_error(cmd, "cannot copy the inputs to the device");
            goto out;
        }
    }
    a.q = dq;
    a.k = dk;
    a.v = dv;
    a.o = dout;

    size_t work_bytes = 0;
    if (fi_decode_workspace_size(&work_bytes, &spec, &a) < 0) {
        rc = cli_runtime_error(cmd, "cannot size the decode workspace");
        goto out;
    }
    if (work_bytes && fi_device_alloc(&dwork, work_bytes) < 0) {
        rc = cli_runtime_error(cmd, "cannot allocate device memory");
        goto out;
    }
    a.workspace = work_bytes ? dwork : NULL;
    a.workspace_bytes = work_bytes;

    /* The first run compiles or reads the cache; time it on its own. */
    double t0 = seconds_now();
    if (fi_decode_run(ctx, &spec, &a, NULL) < 0) {
        rc = cli_runtime_error(cmd, "the decode launch failed");
        goto out;
    }
    if (fi_device_synchronize() < 0) {
        rc = cli_runtime_error(cmd, "the kernel failed");
        goto out;
    }
    double first_s = seconds_now() - t0;
    t0 = seconds_now();
    for (int i = 0; i < DEMO_TIMED_RUNS; i++) {
        if (fi_decode_run(ctx, &spec, &a, NULL) < 0) {
            rc = cli_runtime_error(cmd, "the decode launch failed");
            goto out;
        }
    }
    if (fi_device_synchronize() < 0) {
        rc = cli_runtime_error(cmd, "the kernel failed");
        goto out;
    }
    double per_run_s = (seconds_now() - t0) / DEMO_TIMED_RUNS;
    if (fi_device_download(o, dout, q_elems * 2) < 0) {
        rc = cli_runtime_error(cmd, "cannot copy the output from the device");
        goto out;
    }

    reference_decode(ref, q, k, v, kv_len);
    /* Relative to the largest reference value: outputs near zero would make
     * an element-wise ratio meaningless. */
    double max_abs_err = 0, max_ref = 0;
    for (size_t i = 0; i < q_elems; i++) {
        double got = half_to_double(o[i]);
        double err = isnan(got) ? INFINITY : fabs(got - ref[i]);
        if (err > max_abs_err) max_abs_err = err;
        if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    }
    double max_rel_err = max_ref > 0 ? max_abs_err / max_ref : max_abs_err;
    double kv_bytes = 2.0 * (double)kv_elems * 2;
    int ok = max_rel_err <= DEMO_MAX_REL_ERR;
    printf("demo: decode fp16 hd128 qo_heads=%d kv_heads=%d kv_len=%d NHD: first call %.1f ms, "
           "%.1f us/run (%.0f GB/s of KV), max_abs_err=%.3g max_rel_err=%.3g %s\n",
           DEMO_QO_HEADS, DEMO_KV_HEADS, kv_len, first_s * 1e3, per_run_s * 1e6,
           kv_bytes / per_run_s / 1e9, max_abs_err, max_rel_err, ok ? "OK" : "FAILED");
    if (!ok)
        fprintf(stderr, "fijit demo: max relative error %.3g is above %.0e\n", max_rel_err,
                DEMO_MAX_REL_ERR);
    rc = ok ? CLI_EXIT_OK : CLI_EXIT_FAILED;
out:
    fi_device_free(dq);
    fi_device_free(dk);
    fi_device_free(dv);
    fi_device_free(dout);
    fi_device_free(dwork);
    fi_jit_ctx_free(ctx);
    free(q);
    free(k);
    free(v);
    free(o);
    free(ref);
    return rc;
}
