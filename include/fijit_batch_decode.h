/*
 * fijit — batch decode over a paged KV cache, and the merge of attention
 * states. Conventions and semantics as in fijit.h (0 or a negative fi_error;
 * out-parameters first; *_INIT for versioned structs; _free accepts NULL).
 *
 * Use (once per batch layout, then every layer); the same lifecycle as
 * batch prefill (fijit_prefill.h):
 *
 *   fi_batch_decode_plan *plan;
 *   fi_batch_decode_plan_args pa = FI_BATCH_DECODE_PLAN_ARGS_INIT;
 *   pa.batch_size = B; pa.kv_indptr = host_indptr; pa.kv_last_page_len = host_last;
 *   pa.num_qo_heads = 32; pa.num_kv_heads = 8; pa.page_size = 16;
 *   fi_batch_decode_plan_new(&plan, ctx, &spec, &pa);      gets (compiles/loads) the kernel
 *   fi_batch_decode_plan_workspace_size(&bytes, plan);     caller allocates bytes
 *   fi_batch_decode_plan_upload(plan, workspace, bytes);   writes the work list
 *   for each layer: fi_batch_decode_run(ctx, plan, &args, stream);
 *   fi_batch_decode_plan_free(plan);
 *
 * (fi_batch_decode_workspace_size(&bytes, &spec, &pa) gives the same bytes
 * before there is a plan.)
 *
 * The plan cuts long requests into chunks (split-KV) so that the grid fills
 * the GPU, from the lengths, the head counts and the SM count. Its grid is
 * fixed, and fi_batch_decode_run only launches one kernel (the splits of a
 * request are merged by the last of their blocks, in the same kernel), so a
 * run can be captured in a CUDA graph; replaying a graph with other lengths
 * needs a new plan with the same number of work items (not provided yet).
 * The workspace needs no zeroing (the upload writes the work list and zeroes
 * the split counters, which every run leaves at zero); one workspace must not
 * serve two runs that may execute at the same time. spec.kind must be FI_KIND_BATCH_DECODE.
 */
#ifndef FIJIT_BATCH_DECODE_H
#define FIJIT_BATCH_DECODE_H

#include "fijit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FI_BATCH_DECODE_PLAN_ARGS_VERSION 1 /* the first (was fi_batch_decode_plan_info, same
                                              layout): the only one accepted */

/* The batch layout, in HOST memory. Request b owns the pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]) (kv_indices itself is on the
 * device and passed at run time); its length is
 *   (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b]
 * or 0 when it has no pages (o = 0, lse = -inf). */
typedef struct fi_batch_decode_plan_args {
    unsigned version;                /* FI_BATCH_DECODE_PLAN_ARGS_VERSION */
    int batch_size;                  /* requests, >= 1 */
    const int32_t *kv_indptr;        /* [batch_size + 1], non-decreasing, kv_indptr[0] = 0 */
    const int32_t *kv_last_page_len; /* [batch_size], 1..page_size for a request with pages */
    int num_qo_heads, num_kv_heads;  /* num_qo_heads a multiple of num_kv_heads */
    int page_size;                   /* 1..64 tokens (default 16) */
    int window_left;                 /* FI_MASK_WINDOW: keys >= len-1-window_left, >= 0
                                        required (-1, the default: no window) */
    int max_splits;                  /* chunks per request: 0 automatic, 1 never split,
                                        N: at most N */
    int sm_count;                    /* 0: from the device of the current context */
} fi_batch_decode_plan_args;

#define FI_BATCH_DECODE_PLAN_ARGS_INIT                                         \
    FI__INIT(fi_batch_decode_plan_args,                                        \
             FI__SET(version, FI_BATCH_DECODE_PLAN_ARGS_VERSION)               \
             FI__SET(page_size, 16) FI__SET(window_left, -1))

/* FI_BATCH_DECODE_PLAN_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_batch_decode_plan_args_init(fi_batch_decode_plan_args *out, unsigned version);

typedef struct fi_batch_decode_plan fi_batch_decode_plan;

/* Device workspace bytes a plan for these arguments needs (work list, split
 * partials, counters): what fi_batch_decode_plan_workspace_size says of the
 * plan fi_batch_decode_plan_new makes from them. Needs a current CUDA
 * context only when args->sm_count is 0. */
FI_API int fi_batch_decode_workspace_size(size_t *out, const fi_jit_spec *spec,
                                          const fi_batch_decode_plan_args *args);
/* Plan a batch for `spec` and get its kernel (compiled, or read from the
 * cache, and loaded into the current CUDA context, which it needs), so that
 * no run compiles or loads: plan outside CUDA-graph capture, run inside it.
 * The plan belongs to the caller. */
FI_API int fi_batch_decode_plan_new(fi_batch_decode_plan **out, fi_jit_ctx *ctx,
                                    const fi_jit_spec *spec,
                                    const fi_batch_decode_plan_args *args);
/* Device workspace bytes the plan needs (work list, split partials, counters). */
FI_API int fi_batch_decode_plan_workspace_size(size_t *out, const fi_batch_decode_plan *plan);
/* Work items (blocks along x) and the largest number of chunks of a request;
 * either out-parameter may be NULL. */
FI_API int fi_batch_decode_plan_describe(int *out_num_items, int *out_max_request_splits,
                                         const fi_batch_decode_plan *plan);
/* Copy the plan's work list into `workspace` (device memory of the current
 * context, 16-byte aligned) and zero its split counters. Synchronous: returns
 * when both are done. Do
 * it once per plan and workspace, before the first run (outside any graph
 * capture). A workspace holds the work list of the plan last uploaded to it:
 * uploading another plan there invalidates the first plan's runs. */
FI_API int fi_batch_decode_plan_upload(fi_batch_decode_plan *plan, void *workspace,
                                       size_t workspace_bytes);
FI_API void fi_batch_decode_plan_free(fi_batch_decode_plan *plan);

#define FI_BATCH_DECODE_ARGS_VERSION 3 /* 3: strides in the order of every args struct,
                                          soft_cap renamed logits_soft_cap, kv_indices
                                          after lse; 1 and 2 are refused (rebuild) */

/* Device pointers and element strides. Pages: token t of page pg, kv head h
 * at k + pg*k_stride_page + t*k_stride_n + h*k_stride_h. NHD pages
 * [num_pages, page_size, kv_heads, hd]: stride_page = page_size*kv_heads*hd,
 * stride_n = kv_heads*hd, stride_h = hd. HND pages [num_pages, kv_heads,
 * page_size, hd]: stride_page = kv_heads*page_size*hd, stride_n = hd,
 * stride_h = page_size*hd. The last dimension is contiguous; every row
 * starts 16-byte aligned. In bytes, stride_page and page_size * stride_n must
 * stay below 2 GiB (the kernel's offsets within the caches are 32-bit).
 * Request b's query is at position rope_offsets[b] + len_b - 1, its key j at
 * rope_offsets[b] + j (per request, as batch prefill's rope_offsets; the
 * single kinds take one rope_offset). */
typedef struct fi_batch_decode_args {
    unsigned version;              /* FI_BATCH_DECODE_ARGS_VERSION */
    const void *q;                 /* [batch_size, num_qo_heads, hd], q_dtype */
    const void *k, *v;             /* paged caches, kv_dtype */
    void *o;                       /* [batch_size, num_qo_heads, hd], o_dtype */
    float *lse;                    /* NULL or [batch_size, num_qo_heads]: natural log */
    const int32_t *kv_indices;     /* [kv_indptr[batch_size]] page numbers */
    int64_t q_stride_b, q_stride_h, o_stride_b, o_stride_h;
    int64_t k_stride_page, k_stride_n, k_stride_h;
    int64_t v_stride_page, v_stride_n, v_stride_h;
    float sm_scale;                /* 0: 1/sqrt(hd) */
    float logits_soft_cap;         /* > 0, used when spec.soft_cap */
    float rope_scale, rope_theta;  /* with FI_POS_ROPE_LLAMA; 0: 1 and 1e4 */
    const int32_t *rope_offsets;   /* NULL (all 0) or device [batch_size]: position of key 0
                                      of each request (its query is at offset + len - 1) */
    const float *alibi_slopes;     /* [num_qo_heads], with FI_POS_ALIBI */
    float k_scale, v_scale;        /* fp8 KV: stored values times these; 0: 1 */
    void *workspace;               /* the one the plan was uploaded to */
    size_t workspace_bytes;
    const fi_variant_arg *variant_args; /* the variant's declared parameters (none: NULL, 0) */
    int num_variant_args;
} fi_batch_decode_args;

#define FI_BATCH_DECODE_ARGS_INIT \
    FI__INIT(fi_batch_decode_args, FI__SET(version, FI_BATCH_DECODE_ARGS_VERSION))

/* FI_BATCH_DECODE_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_batch_decode_args_init(fi_batch_decode_args *out, unsigned version);

/* Validate, get the kernel (through the cache) and launch one kernel on `stream`. */
FI_API int fi_batch_decode_run(fi_jit_ctx *ctx, const fi_batch_decode_plan *plan,
                               const fi_batch_decode_args *args, struct CUstream_st *stream);

/* ---- merge of attention states (cascade inference, chunked prefill) -------
 * For every position i and head h, merge num_states partial attention
 * results (v_n normalised output, lse_n natural-log lse) over disjoint key
 * sets into the result over their union: v = sum_n e^(lse_n - L) v_n,
 * L = log sum_n e^(lse_n). States with lse_n = -inf weigh nothing; a row
 * with none gets 0 and -inf. The kernel is the second entry of the
 * batch_decode module of (dtype, head_dim of v) with no mask, position
 * encoding, soft-cap or variant. dtype (fp16 or bf16: v's and v_out's) and
 * head_dim (64, 128 or 256) come from the args (version 2: spec may then be
 * NULL), else from `spec`, of any kind: its o_dtype and the head dim of its
 * v and o (head_dim_vo where given), so that the spec of the attention that
 * made the states serves, a 192/128 prefill's included (chunked context:
 * the new tokens against each cached chunk, causal against their own, then
 * one merge of 128-wide states). */
#define FI_MERGE_STATES_ARGS_VERSION 2 /* 2 appended dtype, head_dim; 1 is still accepted.
                                          Renamed, same layout: s -> lse (0.2), the row
                                          strides *_seq -> *_n as in every args struct (0.3) */

typedef struct fi_merge_states_args {
    unsigned version;              /* FI_MERGE_STATES_ARGS_VERSION */
    const void *v;                 /* [seq, num_states, num_heads, hd], spec.o_dtype */
    const float *lse;              /* [seq, num_states, num_heads], head stride 1 */
    void *v_out;                   /* [seq, num_heads, hd], spec.o_dtype */
    float *lse_out;                /* NULL or [seq, num_heads] contiguous */
    int seq_len, num_states, num_heads;
    int64_t v_stride_n, v_stride_state, v_stride_h; /* elements */
    int64_t lse_stride_n, lse_stride_state;
    int64_t v_out_stride_n, v_out_stride_h;
    /* Version 2: the states' dtype and head dim (0: from the spec). */
    fi_dtype dtype;
    int head_dim;
} fi_merge_states_args;

#define FI_MERGE_STATES_ARGS_INIT \
    FI__INIT(fi_merge_states_args, FI__SET(version, FI_MERGE_STATES_ARGS_VERSION))

/* FI_MERGE_STATES_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_merge_states_args_init(fi_merge_states_args *out, unsigned version);

FI_API int fi_merge_states(fi_jit_ctx *ctx, const fi_jit_spec *spec,
                           const fi_merge_states_args *args, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif /* FIJIT_BATCH_DECODE_H */
