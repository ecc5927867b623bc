/*
 * fijit — absorbed MLA decode over a paged latent cache (multi-head latent
 * attention: DeepSeek-V3/R1, Kimi K2). Conventions and semantics as in
 * fijit.h (0 or a negative fi_error; out-parameters first; *_INIT for
 * versioned structs; _free accepts NULL).
 *
 * The spec: kind FI_KIND_MLA_DECODE, head_dim 512 (the latent width, which is
 * also the value and output width; the RoPE part is 64 wide, fixed by the
 * kind), q = o fp16 or bf16, kv equal to q or fp8_e4m3 (per-tensor scale),
 * mask none (causal among a request's new tokens is built in), pos none (the
 * engine applies RoPE to q_pe and kpe before they get here), soft_cap and
 * variants as in batch decode (the logits hooks, output_transform: an
 * attention sink). Spec string: "mla_decode q=bf16 hd=512". The head count is
 * not part of the spec: one module serves every head count (a block tiles 64
 * (token, head) rows of one request whatever their split into heads). Needs
 * sm_80, sm_87, sm_90(a) or sm_100 (151-188 KiB of shared memory per block).
 *
 * For query row (token i, head h) of request b and each visible key j:
 *   s_j = ([q_nope || q_pe] . [ckv_j || kpe_j]) * sm_scale   (576 wide)
 *   o   = sum_j softmax(s)_j ckv_j                            (512 wide)
 * with soft-cap and a variant's hooks as fijit.h describes. q_nope is the
 * query's no-RoPE part already multiplied by W_UK (the absorbed form); the
 * output is in the latent space (the engine applies W_UV). Key j of request
 * b is visible to its token i (0-based among its q_len new tokens) when
 *   j <= kv_len_b - q_len_b + i
 * (causal, aligned bottom-right: the cache already holds the new tokens). A
 * row with no visible key (kv_len 0) gets o = 0 and lse = -inf.
 *
 * Use (once per batch layout, then every layer), as batch decode:
 *
 *   fi_batch_mla_decode_plan *plan;
 *   fi_batch_mla_decode_plan_args pa = FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT;
 *   pa.batch_size = B; pa.qo_indptr = host_qo; pa.kv_indptr = host_kv;
 *   pa.kv_last_page_len = host_last; pa.num_heads = 16; pa.page_size = 64;
 *   fi_batch_mla_decode_plan_new(&plan, ctx, &spec, &pa);     host, CUDA context current
 *   fi_batch_mla_decode_plan_workspace_size(&bytes, plan);    caller allocates bytes
 *   fi_batch_mla_decode_plan_upload(plan, workspace, bytes);  writes the work list
 *   for each layer: fi_batch_mla_decode_run(ctx, plan, &args, stream);
 *   fi_batch_mla_decode_plan_free(plan);
 *
 * The plan gets (compiles or loads) the kernel, in the CUDA context current
 * then, and chooses the split over keys; a run only checks its arguments and
 * launches one kernel, or two when the plan splits a request (the main one and
 * the merge of its partial states), on `stream`, in the plan's CUDA context:
 * no allocation, copy, synchronisation or compile, so a run can be captured
 * in a CUDA graph. The workspace needs no zeroing; one workspace must not
 * serve two runs that may execute at the same time.
 */
#ifndef FIJIT_MLA_H
#define FIJIT_MLA_H

#include "fijit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FI_MLA_HEAD_DIM 512    /* spec.head_dim: latent (ckv), value and output width */
#define FI_MLA_ROPE_DIM 64     /* q_pe and kpe width */

#define FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION 1

/* The batch layout, in HOST memory. Request b's query tokens are rows
 * qo_indptr[b] .. qo_indptr[b+1] of q, o and lse (1 to 8 of them: one for
 * plain decode, more for multi-token prediction and speculative
 * verification; they may differ within a batch). Its keys are in the pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]) (kv_indices itself is on the
 * device and passed at run time); their number is
 *   (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b]
 * or 0 when it has no pages. */
typedef struct fi_batch_mla_decode_plan_args {
    unsigned version;                /* FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION */
    int batch_size;                  /* requests, >= 1 */
    const int32_t *qo_indptr;        /* [batch_size + 1], qo_indptr[0] = 0, steps of 1..8 */
    const int32_t *kv_indptr;        /* [batch_size + 1], non-decreasing, kv_indptr[0] = 0 */
    const int32_t *kv_last_page_len; /* [batch_size], 1..page_size for a request with pages */
    int num_heads;                   /* query heads, 1..128 (DeepSeek-V3: 128 over 1-8 GPUs) */
    int page_size;                   /* 1..64 tokens (default 64) */
    int max_splits;                  /* items per (request, row block): 0 automatic,
                                        1 never split, N: at most N (<= 64) */
    int sm_count;                    /* 0: from the device of the current context */
} fi_batch_mla_decode_plan_args;

#define FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT                                     \
    FI__INIT(fi_batch_mla_decode_plan_args,                                    \
             FI__SET(version, FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION)           \
             FI__SET(page_size, 64))
/* FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_batch_mla_decode_plan_args_init(fi_batch_mla_decode_plan_args *out,
                                              unsigned version);

typedef struct fi_batch_mla_decode_plan fi_batch_mla_decode_plan;

/* Device workspace bytes a plan for these arguments needs (work list, split
 * partials): what fi_batch_mla_decode_plan_workspace_size says of the plan
 * fi_batch_mla_decode_plan_new makes from them. Needs a current CUDA context
 * only when args->sm_count is 0. */
FI_API int fi_batch_mla_decode_workspace_size(size_t *out, const fi_jit_spec *spec,
                                              const fi_batch_mla_decode_plan_args *args);
/* Plan a batch for `spec` and get its kernel into the current CUDA context
 * (compiling on a cache miss): call it on the host, outside any graph capture.
 * The plan belongs to the caller; it borrows ctx, which must outlive it. */
FI_API int fi_batch_mla_decode_plan_new(fi_batch_mla_decode_plan **out, fi_jit_ctx *ctx,
                                        const fi_jit_spec *spec,
                                        const fi_batch_mla_decode_plan_args *args);
/* Device workspace bytes the plan needs. */
FI_API int fi_batch_mla_decode_plan_workspace_size(size_t *out,
                                                   const fi_batch_mla_decode_plan *plan);
/* Work items (blocks of the main kernel) and the most items one (request,
 * 64-row block) was cut into (1: no split, no merge kernel); either
 * out-parameter may be NULL. */
FI_API int fi_batch_mla_decode_plan_describe(int *out_num_items, int *out_max_request_splits,
                                             const fi_batch_mla_decode_plan *plan);
/* Copy the plan's work list into `workspace` (device memory of the current
 * context, 16-byte aligned). Synchronous. Once per plan and workspace, before
 * the first run, outside any graph capture. */
FI_API int fi_batch_mla_decode_plan_upload(fi_batch_mla_decode_plan *plan, void *workspace,
                                           size_t workspace_bytes);
FI_API void fi_batch_mla_decode_plan_free(fi_batch_mla_decode_plan *plan);

#define FI_BATCH_MLA_DECODE_ARGS_VERSION 1

/* Device pointers and element strides. Query token t, head h: q_nope +
 * t*q_nope_stride_n + h*q_nope_stride_h (512 values), q_pe likewise (64). One
 * 576-wide q tensor [tokens, heads, 576] is q_pe = q_nope + 512 with the same
 * strides. Cached token n of page pg: ckv + pg*ckv_stride_page +
 * n*ckv_stride_n (512 values), kpe likewise (64): two paged tensors
 * [pages, page_size, 512] and [pages, page_size, 64], or one
 * [pages, page_size, 576] tensor (vLLM's and FlashMLA's layout) as kpe =
 * ckv + 512 with the same strides. Rows are contiguous and start 16-byte
 * aligned (every stride a multiple of 16 bytes). */
typedef struct fi_batch_mla_decode_args {
    unsigned version;              /* FI_BATCH_MLA_DECODE_ARGS_VERSION */
    const void *q_nope, *q_pe;     /* q dtype */
    const void *ckv, *kpe;         /* kv dtype */
    void *o;                       /* [tokens, num_heads, 512] at o_stride_n, o_stride_h, o dtype */
    float *lse;                    /* NULL or [tokens, num_heads] contiguous: natural log */
    const int32_t *kv_indices;     /* [kv_indptr[batch_size]] page numbers */
    int64_t q_nope_stride_n, q_nope_stride_h, q_pe_stride_n, q_pe_stride_h;
    int64_t ckv_stride_page, ckv_stride_n, kpe_stride_page, kpe_stride_n;
    int64_t o_stride_n, o_stride_h;
    float sm_scale;                /* > 0, required (DeepSeek-V3: 1/sqrt(192), the scale
                                      of the un-absorbed head dim, times its YaRN factor) */
    float logits_soft_cap;         /* > 0, used when spec.soft_cap */
    float kv_scale;                /* fp8 KV: ckv and kpe are stored / kv_scale; 0: 1 */
    void *workspace;               /* the one the plan was uploaded to */
    size_t workspace_bytes;
    const fi_variant_arg *variant_args; /* the variant's declared parameters (none: NULL, 0) */
    int num_variant_args;
} fi_batch_mla_decode_args;

#define FI_BATCH_MLA_DECODE_ARGS_INIT \
    FI__INIT(fi_batch_mla_decode_args, FI__SET(version, FI_BATCH_MLA_DECODE_ARGS_VERSION))
/* FI_BATCH_MLA_DECODE_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_batch_mla_decode_args_init(fi_batch_mla_decode_args *out, unsigned version);

/* Validate and launch on `stream` (the plan's kernel; nothing is compiled). */
FI_API int fi_batch_mla_decode_run(fi_jit_ctx *ctx, const fi_batch_mla_decode_plan *plan,
                                   const fi_batch_mla_decode_args *args,
                                   struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif /* FIJIT_MLA_H */
