/*
 * fijit prefill: tensor-core attention of many query tokens against their
 * keys, for a single request (FI_KIND_PREFILL) or a batch of requests with
 * ragged (FI_KIND_BATCH_PREFILL_RAGGED) or paged (FI_KIND_BATCH_PREFILL_PAGED)
 * keys and values. Same conventions and semantics as fijit.h: 0 or a
 * negative fi_error, out-parameters first, args structs begin with
 * `unsigned version` and are initialised with their *_INIT macro.
 *
 * Semantics, for query i (0 <= i < qo_len) and key j (0 <= j < kv_len) of one
 * request, with off = kv_len - qo_len (causal masks are aligned bottom-right):
 *   s_ij = (q_i . k_j) * sm_scale           after RoPE on q_i and k_j
 *        + slope[h] * (j - (i + off))       FI_POS_ALIBI
 *   s_ij = cap * tanh(s_ij / cap)           spec.soft_cap, cap = logits_soft_cap
 *   (ALiBi first, then the cap: |s_ij| <= cap; FlashInfer's order differs)
 *   visible: FI_MASK_CAUSAL  j <= i + off
 *            FI_MASK_WINDOW  j <= i + off and j >= i + off - window_left
 *                            (a sliding window is causal; window_left >= 0
 *                            required, the default -1 is refused)
 *            FI_MASK_CUSTOM  the request's bit (i, j) of custom_mask is 1
 *   o_i = softmax over visible j of s_ij, applied to v; lse_i = natural log of
 *   sum_j exp(s_ij). A query with no visible key gets o = 0 and lse = -inf.
 *   RoPE (Llama, rotate-half): freq_d = (1/rope_scale) * rope_theta^(-2d/hd);
 *   query i at position rope_offset + off + i, key j at rope_offset + j:
 *   rope_offset shifts q and k together. A batch gives one rope_offset for
 *   every request, or per request rope_offsets[b] in its place (a device
 *   array, as batch decode takes).
 * GQA/MQA: num_qo_heads must be a multiple of num_kv_heads; query head h reads
 * kv head h / (num_qo_heads / num_kv_heads).
 *
 * Custom mask layout: one bit per (query, key) pair of a request, row-major
 * (bit index i * kv_len + j), starting at that request's bit offset (0 for
 * single prefill; custom_mask_offsets[b] for a batch, or 0 for every
 * request when custom_mask_offsets is NULL: then all requests read the same
 * bits, which suits only requests of one shape). Bit n of the array is
 * bit (n % 8), counted from the least significant, of byte n / 8 -- numpy's
 * packbits(..., bitorder="little"). 1 means visible. The buffer needs only
 * the bytes that hold the requests' bits: ceil(qo_len * kv_len / 8) for single
 * prefill, ceil((offset_b + qo_len_b * kv_len_b) / 8) for the batch's last
 * request; it may start at any byte address, and no byte outside a
 * request's bits is read.
 *
 * Tensors are device pointers; strides are in elements; the last dimension is
 * contiguous and every row must start 16-byte aligned (strides multiples of 8
 * elements, base pointers 16-byte aligned).
 *
 * MLA (DeepSeek-V3/R1, Kimi K2), the non-absorbed form engines prefill with:
 * spec.head_dim 192 (q and k, the width of q . k) and spec.head_dim_vo 128 (v
 * and o), in all three kinds, q = kv = o fp16 or bf16, every mask, pos none
 * (not RoPE: MLA rotates only its 64-column rope part, which the caller does
 * before the call; nor ALiBi), soft-cap and variants; lse as everywhere.
 * q and k rows have 192 elements, v and o rows 128 (strides as above, each
 * tensor its own); sm_scale 0 is 1/sqrt(192). On sm_90a the 128-row tiles
 * run on the Hopper main loop (TMA, wgmma: Q.K^T over 192, P.V into 128),
 * the smaller tiles and other archs on the mma.sync tile kernels.
 * Chunked context as engines do it: the new tokens against each cached chunk
 * without a mask and against their own keys causally, each call returning
 * (o, lse), then fi_merge_states (fijit_batch_decode.h) of the 128-wide
 * states, given this spec or dtype and head_dim 128.
 *
 * fp8 (single prefill, sm_90a): q_dtype = kv_dtype = FI_DTYPE_FP8_E4M3, o
 * fp16 or bf16, head_dim 128, mask none or causal; no pos encoding, no
 * soft-cap and no custom variant (anything else is FI_EUNSUPPORTED; so are
 * the batch kinds, e5m2 and any arch but sm_90a). q, k
 * and v hold the values divided by the per-tensor q_scale, k_scale and
 * v_scale of fi_prefill_args version 4; strides are in one-byte elements
 * (multiples of 16). It runs on the Hopper main loop with 8-bit tensor-core
 * products into fp32 accumulators (Hopper adds an 8-bit product's terms with
 * fewer bits than fp32); the softmax weights are rounded to e4m3
 * before P.V (relative error up to 2^-4 each), and it needs the workspace of
 * fi_prefill_workspace_size, where
 * every call, on its stream and before the main kernel, lays V out for P.V.
 *
 * RoPE (FI_POS_ROPE_LLAMA): with a workspace, every call first rotates the
 * keys once into it (a pre-pass on the call's stream) and the main kernel
 * reads them there; without one (single prefill only), each tile rotates the
 * keys it reads. Nothing is kept from one call to the next, so a workspace
 * may serve calls with other tensors, but not two calls that may run at the
 * same time.
 */
#ifndef FIJIT_PREFILL_H
#define FIJIT_PREFILL_H

#include "fijit.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* CUstream from cuda.h */

/* ---- single request -------------------------------------------------------- */
#define FI_PREFILL_ARGS_VERSION 4 /* 2 added variant_args, 3 workspace, 4 the fp8 scales; 1-3
                                     are still accepted */

/* q and o [qo_len, num_qo_heads, hd] (token stride q_stride_n, head stride
 * q_stride_h); k and v [kv_len, num_kv_heads, hd] in NHD (stride_n =
 * kv_heads*hd, stride_h = hd) or HND [num_kv_heads, kv_len, hd] (stride_n =
 * hd, stride_h = kv_len*hd). */
typedef struct fi_prefill_args {
    unsigned version;              /* FI_PREFILL_ARGS_VERSION */
    const void *q;
    const void *k, *v;
    void *o;
    float *lse;                    /* optional [qo_len, num_qo_heads], natural log; NULL: none */
    int num_qo_heads, num_kv_heads;
    int qo_len, kv_len;            /* >= 0 each */
    int64_t q_stride_n, q_stride_h, o_stride_n, o_stride_h;
    int64_t k_stride_n, k_stride_h, v_stride_n, v_stride_h;
    float sm_scale;                /* 0: 1/sqrt(hd) */
    float logits_soft_cap;         /* > 0, used when spec.soft_cap */
    float rope_scale, rope_theta;  /* FI_POS_ROPE_LLAMA; 0: 1 and 1e4 */
    int rope_offset;               /* position of key 0 */
    int window_left;               /* FI_MASK_WINDOW: >= 0 (-1, the default: no window) */
    const float *alibi_slopes;     /* [num_qo_heads] with FI_POS_ALIBI */
    const uint8_t *custom_mask;    /* FI_MASK_CUSTOM: qo_len*kv_len bits, see above */
    int cta_tile_q;                /* 0: automatic; 128, 64 or 16 query rows per block */
    /* Version 2: values of the variant's declared parameters (none: NULL, 0). */
    const fi_variant_arg *variant_args;
    int num_variant_args;
    /* Version 3, optional (NULL: none): device memory, 16-byte aligned, of
     * fi_prefill_workspace_size bytes; needs no initialisation. With
     * FI_POS_ROPE_LLAMA the keys are rotated once into it (a short first
     * launch) instead of in every block that reads them (faster from a few
     * thousand keys: docs/performance.md; a workspace too small for them is
     * refused). After them, a counter through which sm_90a's persistent
     * CTAs claim their blocks (zeroed by a memset on the stream before the
     * launch), so that none idles at a causal grid's end; without room for
     * it they walk the blocks in a fixed order. Runs that share a workspace
     * must not overlap in time.
     * fp8 (below) requires one: V is laid out there for the tensor cores. */
    void *workspace;
    size_t workspace_bytes;
    /* Version 4: fp8 prefill (q=kv=fp8_e4m3, o fp16 or bf16; sm_90a only):
     * q, k and v hold the real values divided by these per-tensor scales
     * (0: 1), as batch decode's fp8 KV does. Ignored for 16-bit tuples. */
    float q_scale, k_scale, v_scale;
} fi_prefill_args;

#define FI_PREFILL_ARGS_INIT                                                   \
    FI__INIT(fi_prefill_args, FI__SET(version, FI_PREFILL_ARGS_VERSION)       \
             FI__SET(window_left, -1))

/* FI_PREFILL_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_prefill_args_init(fi_prefill_args *out, unsigned version);

/* Workspace bytes fi_prefill_run can use for these arguments: RoPE's
 * rotated keys and 16 for the block claims. Needs no device. */
FI_API int fi_prefill_workspace_size(size_t *out, const fi_jit_spec *spec,
                                     const fi_prefill_args *args);

/* Validate, get the kernel (through the cache) and launch on `stream` (with
 * RoPE and a workspace: two launches, the keys' rotation first). Needs no
 * synchronisation: safe inside CUDA graph capture. */
FI_API int fi_prefill_run(fi_jit_ctx *ctx, const fi_jit_spec *spec, const fi_prefill_args *args,
                          struct CUstream_st *stream);

/* ---- batch (ragged or paged K/V) -------------------------------------------
 * The lifecycle of batch decode (fijit_batch_decode.h): a plan from
 * host-side copies of the index arrays (once per batch shape), uploaded once
 * to a workspace (outside graph capture: it copies the work list to the
 * device and waits for the copy to land, cuCtxSynchronize, so a run on any
 * stream, non-blocking ones included, reads it), then any number of runs
 * with the device arrays, each a single launch of a grid fixed by the plan
 * (with RoPE two: the keys' rotation into the workspace first; CUDA-graph
 * friendly). The device arrays passed to a run must hold the same values as
 * the host arrays the plan saw.
 *
 *   fi_batch_prefill_plan_new(&plan, ctx, &spec, &pa);     gets the kernel (current context)
 *   fi_batch_prefill_plan_workspace_size(&bytes, plan);    caller allocates bytes
 *   fi_batch_prefill_plan_upload(plan, workspace, bytes);  writes the work list
 *   for each layer: fi_batch_prefill_run(ctx, plan, &args, stream);
 *   fi_batch_prefill_plan_free(plan);
 */
typedef struct fi_batch_prefill_plan fi_batch_prefill_plan;

#define FI_BATCH_PREFILL_PLAN_ARGS_VERSION 2 /* 2: window_left moved here from the run
                                                args; 1 is refused (rebuild) */

typedef struct fi_batch_prefill_plan_args {
    unsigned version;                    /* FI_BATCH_PREFILL_PLAN_ARGS_VERSION */
    int batch_size;                      /* requests, >= 1 */
    const int32_t *qo_indptr;            /* host [batch_size+1]: token offsets of each request's queries */
    const int32_t *kv_indptr;            /* host [batch_size+1]: ragged: key token offsets;
                                            paged: offsets into kv_indices (page counts) */
    const int32_t *kv_last_page_len;     /* host [batch_size], paged only: 1..page_size when the
                                            request has pages (ignored when it has none) */
    int num_qo_heads, num_kv_heads;
    int page_size;                       /* paged only: 1..64 (default 16) */
    int window_left;                     /* FI_MASK_WINDOW: >= 0 (-1, the default: no window) */
    int sm_count;                        /* 0: from the current device */
    int cta_tile_q;                      /* 0: automatic; 128, 64 or 16 */
} fi_batch_prefill_plan_args;

#define FI_BATCH_PREFILL_PLAN_ARGS_INIT                                        \
    FI__INIT(fi_batch_prefill_plan_args,                                       \
             FI__SET(version, FI_BATCH_PREFILL_PLAN_ARGS_VERSION)              \
             FI__SET(page_size, 16) FI__SET(window_left, -1))

/* FI_BATCH_PREFILL_PLAN_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_batch_prefill_plan_args_init(fi_batch_prefill_plan_args *out, unsigned version);

/* Device workspace bytes the plan for these arguments needs: the work list
 * and a counter of the blocks claimed during a run (Hopper); with pos = RoPE
 * also the keys rotated once per run (kv tokens x num_kv_heads x head_dim x
 * 2 bytes, ragged: kv tokens as kv_indptr counts them) and, paged, one int
 * per request. Needs no device. */
FI_API int fi_batch_prefill_workspace_size(size_t *out, const fi_jit_spec *spec,
                                           const fi_batch_prefill_plan_args *args);

/* Make a plan for `spec` (a batch prefill kind). Gets (and so compiles or
 * loads) the kernel into the current CUDA context, which it needs, so that
 * runs never do: plan outside CUDA-graph capture. `*out` belongs to
 * the caller: fi_batch_prefill_plan_free. */
FI_API int fi_batch_prefill_plan_new(fi_batch_prefill_plan **out, fi_jit_ctx *ctx,
                                     const fi_jit_spec *spec,
                                     const fi_batch_prefill_plan_args *args);
/* The bytes fi_batch_prefill_workspace_size gives for the plan's arguments. */
FI_API int fi_batch_prefill_plan_workspace_size(size_t *out, const fi_batch_prefill_plan *plan);
/* Write the plan's work list into `workspace` (device memory of the current
 * context, 16-byte aligned, at least the plan's workspace bytes; NULL is
 * accepted when that is 0), which must stay allocated and unchanged while
 * the plan is used. Runs write there (a counter of claimed blocks on
 * Hopper, and with RoPE the rotated keys), so runs of one plan must not
 * overlap in time: give each stream its own plan and workspace, or order
 * the runs with events. Synchronous; once per plan and workspace, before
 * the first run. */
FI_API int fi_batch_prefill_plan_upload(fi_batch_prefill_plan *plan, void *workspace,
                                        size_t workspace_bytes);
FI_API void fi_batch_prefill_plan_free(fi_batch_prefill_plan *plan);

#define FI_BATCH_PREFILL_ARGS_VERSION 4 /* 4: rope_offsets appended (3 is accepted: no
                                           rope_offsets); 3: window_left moved to the plan
                                           args, strides in the order of every args
                                           struct, soft_cap renamed logits_soft_cap; 1 and
                                           2 are refused */

/* q and o [total_qo_tokens, num_qo_heads, hd] packed by qo_indptr.
 * Ragged: k and v [total_kv_tokens, num_kv_heads, hd] packed by kv_indptr
 * (token stride k_stride_n, head stride k_stride_h; stride_page unused).
 * Paged: k and v caches of pages; NHD [pages, page_size, heads, hd]
 * (stride_page = page_size*heads*hd, stride_n = heads*hd, stride_h = hd) or
 * HND [pages, heads, page_size, hd] (stride_page = heads*page_size*hd,
 * stride_n = hd, stride_h = page_size*hd). Key j of request b is in page
 * kv_indices[kv_indptr[b] + j / page_size], slot j % page_size. On sm_90a
 * the Hopper main loop reads pages by TMA where stride_h = hd (NHD, any
 * 16-byte multiple stride_n and stride_page) or stride_page =
 * heads*stride_h (HND), and page_size is a multiple of 8; which page sizes
 * it reads whole and which in parts depends on its K/V tile (see
 * docs/design.md, "The kernels"). Other layouts run the tile kernels: correct, but
 * slower.
 * The device arrays hold the plan's values, with one exception: the paged
 * kind without RoPE reads each request's keys (kv_indptr, kv_indices,
 * kv_last_page_len) on the device at every run, and the plan's host counts
 * only order its work, so a run may pass other keys for the same requests
 * and queries (a decode step over a growing cache, one plan per shape).
 * With RoPE the rotated keys are sized and placed by the plan's counts. */
typedef struct fi_batch_prefill_args {
    unsigned version;                    /* FI_BATCH_PREFILL_ARGS_VERSION */
    const void *q;
    const void *k, *v;
    void *o;
    float *lse;                          /* optional [total_qo_tokens, num_qo_heads] */
    const int32_t *qo_indptr;            /* device copies of the plan's arrays */
    const int32_t *kv_indptr;
    const int32_t *kv_indices;           /* paged: device [kv_indptr[batch_size]] page ids */
    const int32_t *kv_last_page_len;     /* paged */
    int64_t q_stride_n, q_stride_h, o_stride_n, o_stride_h;
    int64_t k_stride_page, k_stride_n, k_stride_h; /* stride_page: paged only */
    int64_t v_stride_page, v_stride_n, v_stride_h;
    float sm_scale;                      /* 0: 1/sqrt(hd) */
    float logits_soft_cap;               /* > 0, used when spec.soft_cap */
    float rope_scale, rope_theta;        /* FI_POS_ROPE_LLAMA; 0: 1 and 1e4 */
    int rope_offset;                     /* position of key 0 of every request (0 when
                                            rope_offsets is given) */
    const float *alibi_slopes;           /* [num_qo_heads] with FI_POS_ALIBI */
    const uint8_t *custom_mask;          /* FI_MASK_CUSTOM: see the layout above */
    const int64_t *custom_mask_offsets;  /* NULL or device [batch_size]: first bit of each
                                            request (NULL: 0 for every request) */
    const fi_variant_arg *variant_args;  /* the variant's declared parameters (none: NULL, 0) */
    int num_variant_args;
    const int32_t *rope_offsets;         /* version 4, FI_POS_ROPE_LLAMA: NULL (rope_offset
                                            for every request) or device [batch_size]:
                                            position of key 0 of request b, >= 0, in place
                                            of rope_offset (which must then be 0); as batch
                                            decode's rope_offsets */
} fi_batch_prefill_args;

#define FI_BATCH_PREFILL_ARGS_INIT \
    FI__INIT(fi_batch_prefill_args, FI__SET(version, FI_BATCH_PREFILL_ARGS_VERSION))

/* FI_BATCH_PREFILL_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_batch_prefill_args_init(fi_batch_prefill_args *out, unsigned version);

/* One launch on `stream` for the planned batch (with RoPE two: the keys'
 * rotation into the workspace, then the attention kernel). The workspace is
 * the one fi_batch_prefill_plan_upload was given (batch prefill's args have
 * no workspace field, unlike batch decode's, which names it again and is
 * checked against it); a run before the upload is refused with FI_EINVALID. */
FI_API int fi_batch_prefill_run(fi_jit_ctx *ctx, const fi_batch_prefill_plan *plan,
                                const fi_batch_prefill_args *args, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif /* FIJIT_PREFILL_H */
