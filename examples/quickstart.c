/*
 * fijit quick start: decode attention for one request (bf16, head_dim 128,
 * 32 query heads over 8 KV heads), compiled by fijit on first use, run on
 * GPU 0 and checked against a CPU reference.
 *
 *   cc -std=c11 quickstart.c $(pkg-config --cflags --libs fijit) -o quickstart
 *   ./quickstart
 *
 * The .pc brings -lm for the reference's exp and sqrt. The CUDA driver is
 * reached through fijit, which opens libcuda at run time: no -lcuda.
 *
 * Exit status: 0 the output matches the reference; 1 an error; 77 no GPU
 * (FI_ENODEVICE): the kernel was compiled into the cache, nothing was run.
 */
#include <cuda.h>
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

/* Make GPU 0's primary context current (retained for the process's life: fijit
 * loads kernels into the thread's current context). FI_ENODEVICE without a
 * driver or a device. */
static int open_device(const fi_cuda_api **out)
{
    const fi_cuda_api *cu;
    int rc, count = 0;
    CUdevice dev;
    CUcontext cuctx;
    CUresult res;
    if ((rc = fi_cuda_load(&cu)) < 0) return rc;
    if ((res = cu->DeviceGetCount(&count)) != CUDA_SUCCESS || count < 1)
        return fi_error_set(FI_ENODEVICE, "the CUDA driver sees no device");
    if ((res = cu->DeviceGet(&dev, 0)) != CUDA_SUCCESS ||
        (res = cu->DevicePrimaryCtxRetain(&cuctx, dev)) != CUDA_SUCCESS ||
        (res = cu->CtxSetCurrent(cuctx)) != CUDA_SUCCESS)
        return fi_cuda_error(FI_ECUDA, res, "making GPU 0 current");
    *out = cu;
    return 0;
}

int main(void)
{
    const size_t q_elems = QO_HEADS * HEAD_DIM, kv_elems = (size_t)KV_LEN * KV_HEADS * HEAD_DIM;
    static uint16_t q[QO_HEADS * HEAD_DIM], o[QO_HEADS * HEAD_DIM];
    static double expected[QO_HEADS * HEAD_DIM];
    uint16_t *k = malloc(kv_elems * 2), *v = malloc(kv_elems * 2);
    const fi_cuda_api *cu = NULL;
    fi_jit_ctx *ctx = NULL;
    CUdeviceptr dq = 0, dk = 0, dv = 0, dout = 0, dwork = 0;
    int rc, status = 1;
    if (!k || !v) {
        fprintf(stderr, "quickstart: out of memory\n");
        goto out;
    }

    /* 1. A context: the cache in $FIJIT_CACHE_DIR or ~/.cache/fijit. */
    if ((rc = fi_jit_ctx_new(&ctx, NULL)) < 0) goto fail;

    /* 2. GPU 0, if there is one. */
    if ((rc = open_device(&cu)) == FI_ENODEVICE)
        printf("no GPU (%s: %s): compiling only\n", fi_error_name(rc), fi_last_error());
    else if (rc < 0)
        goto fail;

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
    if (!cu) {
        status = EXIT_NO_DEVICE;
        goto out;
    }
    fill_random(q, q_elems);
    fill_random(k, kv_elems);
    fill_random(v, kv_elems);
    CUresult res;
    if ((res = cu->MemAlloc(&dq, q_elems * 2)) != CUDA_SUCCESS ||
        (res = cu->MemAlloc(&dk, kv_elems * 2)) != CUDA_SUCCESS ||
        (res = cu->MemAlloc(&dv, kv_elems * 2)) != CUDA_SUCCESS ||
        (res = cu->MemAlloc(&dout, q_elems * 2)) != CUDA_SUCCESS ||
        (res = cu->MemcpyHtoD(dq, q, q_elems * 2)) != CUDA_SUCCESS ||
        (res = cu->MemcpyHtoD(dk, k, kv_elems * 2)) != CUDA_SUCCESS ||
        (res = cu->MemcpyHtoD(dv, v, kv_elems * 2)) != CUDA_SUCCESS) {
        rc = fi_cuda_error(FI_ECUDA, res, "copying the inputs to the GPU");
        goto fail;
    }

    fi_decode_args args = FI_DECODE_ARGS_INIT;
    args.q = (const void *)(uintptr_t)dq;
    args.k = (const void *)(uintptr_t)dk;
    args.v = (const void *)(uintptr_t)dv;
    args.o = (void *)(uintptr_t)dout;
    args.num_qo_heads = QO_HEADS;
    args.num_kv_heads = KV_HEADS;
    args.kv_len = KV_LEN;
    args.q_stride_h = args.o_stride_h = HEAD_DIM;
    args.k_stride_n = args.v_stride_n = KV_HEADS * HEAD_DIM; /* NHD: [kv_len, kv_heads, hd] */
    args.k_stride_h = args.v_stride_h = HEAD_DIM;
    size_t work_bytes = 0; /* split-KV partial results, when the keys are split */
    if ((rc = fi_decode_workspace_size(&work_bytes, &spec, &args)) < 0) goto fail;
    if (work_bytes && (res = cu->MemAlloc(&dwork, work_bytes)) != CUDA_SUCCESS) {
        rc = fi_cuda_error(FI_ECUDA, res, "allocating the workspace");
        goto fail;
    }
    args.workspace = (void *)(uintptr_t)dwork;
    args.workspace_bytes = work_bytes;
    if ((rc = fi_decode_run(ctx, &spec, &args, NULL)) < 0) goto fail;
    if ((res = cu->CtxSynchronize()) != CUDA_SUCCESS ||
        (res = cu->MemcpyDtoH(o, dout, q_elems * 2)) != CUDA_SUCCESS) {
        rc = fi_cuda_error(FI_ECUDA, res, "running the kernel");
        goto fail;
    }

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
    if (cu) {
        CUdeviceptr buffers[] = {dq, dk, dv, dout, dwork};
        for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++)
            if (buffers[i]) cu->MemFree(buffers[i]);
    }
    fi_jit_ctx_free(ctx);
    free(k);
    free(v);
    return status;
}
