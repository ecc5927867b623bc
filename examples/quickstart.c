/*
 * fijit quick start: decode attention for one request (bf16, head_dim 128,
 * 32 query heads over 8 KV heads), compiled by fijit on first use, run on
 * GPU 0 and checked against a CPU reference.
 *
 *   cc -std=c11 quickstart.c $(pkg-config --cflags --libs fijit) -o quickstart
 *   ./quickstart
 *
 * The .pc brings -lm for the reference's exp and sqrt. The GPU is reached
 * through fijit (fi_device_*), which opens the CUDA driver at run time: no
 * cuda.h, no -lcuda.
 *
 * Exit status: 0 the output matches the reference; 1 an error; 77 no GPU
 * (FI_ENODEVICE): the kernel was compiled into the cache, nothing was run.
 */
#include <fijit.h>
#include <fijit_cache.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { QO_HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, KV_LEN = 1000 };
enum { EXIT_NO_DEVICE = 77 }; /* the test-suite convention for "skipped" */

/* bf16 is the top half of a float (rounded to nearest even). */
static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static double from_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* A fixed-seed generator: every run checks the same inputs. */
static void fill_random(uint16_t *data, size_t n)
{
    uint32_t state = 12345;
    for (size_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        data[i] = to_bf16((float)(state >> 8) / (float)(1u << 24) * 2.f - 1.f); /* [-1, 1) */
    }
}

/* o[h] = softmax(q[h] . k[:, h / group] / sqrt(hd)) v[:, h / group], in double;
 * k and v are [KV_LEN, KV_HEADS, HEAD_DIM] (NHD). */
static void reference(double *o, const uint16_t *q, const uint16_t *k, const uint16_t *v)
{
    static double p[KV_LEN];
    for (int h = 0; h < QO_HEADS; h++) {
        int kvh = h / (QO_HEADS / KV_HEADS);
        double max_s = -INFINITY, sum = 0;
        for (int j = 0; j < KV_LEN; j++) {
            double s = 0;
            for (int d = 0; d < HEAD_DIM; d++)
                s += from_bf16(q[h * HEAD_DIM + d]) *
                     from_bf16(k[((size_t)j * KV_HEADS + kvh) * HEAD_DIM + d]);
            p[j] = s / sqrt(HEAD_DIM);
            if (p[j] > max_s) max_s = p[j];
        }
        for (int d = 0; d < HEAD_DIM; d++) o[h * HEAD_DIM + d] = 0;
        for (int j = 0; j < KV_LEN; j++) {
            p[j] = exp(p[j] - max_s);
            sum += p[j];
            for (int d = 0; d < HEAD_DIM; d++)
                o[h * HEAD_DIM + d] += p[j] * from_bf16(v[((size_t)j * KV_HEADS + kvh) * HEAD_DIM + d]);
        }
        for (int d = 0; d < HEAD_DIM; d++) o[h * HEAD_DIM + d] /= sum;
    }
}

int main(void)
{
    const size_t q_elems = QO_HEADS * HEAD_DIM, kv_elems = (size_t)KV_LEN * KV_HEADS * HEAD_DIM;
    static uint16_t q[QO_HEADS * HEAD_DIM], o[QO_HEADS * HEAD_DIM];
    static double expected[QO_HEADS * HEAD_DIM];
    uint16_t *k = malloc(kv_elems * 2), *v = malloc(kv_elems * 2);
    fi_jit_ctx *ctx = NULL;
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dwork = NULL;
    int rc, status = 1, gpu = 0;
    if (!k || !v) {
        fprintf(stderr, "quickstart: out of memory\n");
        goto out;
    }

    /* 1. A context: the cache in $FIJIT_CACHE_DIR or ~/.cache/fijit. */
    if ((rc = fi_jit_ctx_new(&ctx, NULL)) < 0) goto fail;

    /* 2. GPU 0, if there is one: its primary context made current (fijit
     *    loads kernels into the thread's current context). */
    if ((rc = fi_device_use(0)) == FI_ENODEVICE)
        printf("no GPU (%s: %s): compiling only\n", fi_error_name(rc), fi_last_error());
    else if (rc < 0)
        goto fail;
    else
        gpu = 1;

    /* 3. The kernel for this tuple, compiled by NVRTC into the cache for the
     *    GPU's arch (without a GPU, for the default one). Needs no GPU. */
    fi_jit_spec spec = FI_JIT_SPEC_INIT; /* decode q=kv=o=fp16 hd=128, no mask, no pos */
    spec.q_dtype = spec.kv_dtype = spec.o_dtype = FI_DTYPE_BF16;
    fi_build_outcome outcome;
    if ((rc = fi_jit_prewarm(&outcome, ctx, &spec, NULL)) < 0) goto fail;
    char text[256];
    if ((rc = fi_jit_spec_format(text, sizeof text, &spec)) < 0) goto fail;
    printf("%s: %s in %s\n", text, outcome == FI_BUILD_COMPILED ? "compiled" : "already cached",
           fi_jit_ctx_cache_dir(ctx));

    /* 4. Run it on the GPU. */
    if (!gpu) {
        status = EXIT_NO_DEVICE;
        goto out;
    }
    fill_random(q, q_elems);
    fill_random(k, kv_elems);
    fill_random(v, kv_elems);
    if ((rc = fi_device_alloc(&dq, q_elems * 2)) < 0 ||
        (rc = fi_device_alloc(&dk, kv_elems * 2)) < 0 ||
        (rc = fi_device_alloc(&dv, kv_elems * 2)) < 0 ||
        (rc = fi_device_alloc(&dout, q_elems * 2)) < 0 ||
        (rc = fi_device_upload(dq, q, q_elems * 2)) < 0 ||
        (rc = fi_device_upload(dk, k, kv_elems * 2)) < 0 ||
        (rc = fi_device_upload(dv, v, kv_elems * 2)) < 0)
        goto fail;

    fi_decode_args args = FI_DECODE_ARGS_INIT;
    args.q = dq;
    args.k = dk;
    args.v = dv;
    args.o = dout;
    args.num_qo_heads = QO_HEADS;
    args.num_kv_heads = KV_HEADS;
    args.kv_len = KV_LEN;
    args.q_stride_h = args.o_stride_h = HEAD_DIM;
    args.k_stride_n = args.v_stride_n = KV_HEADS * HEAD_DIM; /* NHD: [kv_len, kv_heads, hd] */
    args.k_stride_h = args.v_stride_h = HEAD_DIM;
    size_t work_bytes = 0; /* split-KV partial results, when the keys are split */
    if ((rc = fi_decode_workspace_size(&work_bytes, &spec, &args)) < 0) goto fail;
    if (work_bytes && (rc = fi_device_alloc(&dwork, work_bytes)) < 0) goto fail;
    args.workspace = dwork;
    args.workspace_bytes = work_bytes;
    if ((rc = fi_decode_run(ctx, &spec, &args, NULL)) < 0) goto fail;
    if ((rc = fi_device_synchronize()) < 0 || (rc = fi_device_download(o, dout, q_elems * 2)) < 0)
        goto fail;

    /* 5. Check: bf16 output against the reference, relative to its largest value. */
    reference(expected, q, k, v);
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < q_elems; i++) {
        double err = fabs(from_bf16(o[i]) - expected[i]);
        if (!(err <= max_err)) max_err = err; /* NaN included */
        if (fabs(expected[i]) > max_ref) max_ref = fabs(expected[i]);
    }
    double rel = max_err / max_ref;
    int ok = rel <= 2e-2;
    printf("decode on the GPU: max error %.3g relative to the largest output: %s\n", rel,
           ok ? "OK" : "MISMATCH");
    status = ok ? 0 : 1;
    goto out;
fail:
    fprintf(stderr, "quickstart: %s: %s\n", fi_error_name(rc), fi_last_error());
out:
    fi_device_free(dq); /* each accepts NULL */
    fi_device_free(dk);
    fi_device_free(dv);
    fi_device_free(dout);
    fi_device_free(dwork);
    fi_jit_ctx_free(ctx);
    free(k);
    free(v);
    return status;
}
