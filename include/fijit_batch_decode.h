/*
 * fijit — batch decode over a paged KV cache, and the merge of attention
 * states. Conventions as in fijit.h (0 or a negative fi_error; out-parameters
 * first; *_INIT for versioned structs; _free accepts NULL).
 *
 * Use (once per batch layout, then every layer):
 *
 *   fi_batch_decode_plan *plan;
 *   fi_batch_decode_plan_info info = FI_BATCH_DECODE_PLAN_INFO_INIT;
 *   info.batch = B; info.kv_indptr = host_indptr; info.kv_last_page_len = host_last;
 *   info.num_qo_heads = 32; info.num_kv_heads = 8; info.page_size = 16;
 *   fi_batch_decode_plan_new(&plan, ctx, &spec, &info);     host only (+ SM count)
 *   fi_batch_decode_plan_workspace_size(plan, &bytes);      caller allocates bytes
 *   fi_batch_decode_plan_upload(plan, workspace, bytes);    writes the work list
 *   for each layer: fi_batch_decode_run(ctx, plan, &args, stream);
 *   fi_batch_decode_plan_free(plan);
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

#define FI_BATCH_DECODE_PLAN_INFO_VERSION 1

/* The batch layout, in HOST memory. Request b owns the pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]) (kv_indices itself is on the
 * device and passed at run time); its length is
 *   (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b]
 * or 0 when it has no pages (o = 0, lse = -inf). */
typedef struct fi_batch_decode_plan_info {
    unsigned version;                /* FI_BATCH_DECODE_PLAN_INFO_VERSION */
    int batch;                       /* >= 1 */
    const int32_t *kv_indptr;        /* [batch + 1], non-decreasing, kv_indptr[0] = 0 */
    const int32_t *kv_last_page_len; /* [batch], 1..page_size for a request with pages */
    int num_qo_heads, num_kv_heads;  /* num_qo_heads a multiple of num_kv_heads */
    int page_size;                   /* 1..64 tokens */
    int window_left;                 /* with FI_MASK_WINDOW: keys >= len-1-window_left; < 0: all */
    int max_splits;                  /* chunks per request: 0 automatic, 1 never split */
    int sm_count;                    /* 0: from the device of the current context */
} fi_batch_decode_plan_info;

#define FI_BATCH_DECODE_PLAN_INFO_INIT \
    { FI_BATCH_DECODE_PLAN_INFO_VERSION, 0, NULL, NULL, 0, 0, 16, -1, 0, 0 }

typedef struct fi_batch_decode_plan fi_batch_decode_plan;

/* Plan a batch for `spec`. Needs a current CUDA context only when
 * info->sm_count is 0. The plan belongs to the caller. */
FI_API int fi_batch_decode_plan_new(fi_batch_decode_plan **out, fi_jit_ctx *ctx,
                                    const fi_jit_spec *spec,
                                    const fi_batch_decode_plan_info *info);
/* Device workspace bytes the plan needs (work list, split partials, counters). */
FI_API int fi_batch_decode_plan_workspace_size(const fi_batch_decode_plan *plan, size_t *out);
/* Work items (blocks along x) and the largest number of chunks of a request. */
FI_API int fi_batch_decode_plan_describe(const fi_batch_decode_plan *plan, int *num_items,
                                         int *max_request_splits);
/* Copy the plan's work list into `workspace` (device memory of the current
 * context, 16-byte aligned) and zero its split counters. Synchronous: returns
 * when both are done. Do
 * it once per plan and workspace, before the first run (outside any graph
 * capture). A workspace holds the work list of the plan last uploaded to it:
 * uploading another plan there invalidates the first plan's runs. */
FI_API int fi_batch_decode_plan_upload(fi_batch_decode_plan *plan, void *workspace,
                                       size_t workspace_bytes);
FI_API void fi_batch_decode_plan_free(fi_batch_decode_plan *plan);

#define FI_BATCH_DECODE_ARGS_VERSION 2 /* 2 added variant_args; 1 is still accepted */

/* Device pointers and element strides. Pages: token t of page pg, kv head h
 * at k + pg*k_stride_page + h*k_stride_h + t*k_stride_n. NHD pages
 * [num_pages, page_size, kv_heads, hd]: stride_page = page_size*kv_heads*hd,
 * stride_h = hd, stride_n = kv_heads*hd. HND pages [num_pages, kv_heads,
 * page_size, hd]: stride_page = kv_heads*page_size*hd, stride_h =
 * page_size*hd, stride_n = hd. The last dimension is contiguous; every row
 * starts 16-byte aligned. In bytes, stride_page and page_size * stride_n must
 * stay below 2 GiB (the kernel's offsets within the caches are 32-bit). */
typedef struct fi_batch_decode_args {
    unsigned version;              /* FI_BATCH_DECODE_ARGS_VERSION */
    const void *q;                 /* [batch, num_qo_heads, hd], q_dtype */
    const void *k, *v;             /* paged caches, kv_dtype */
    const int32_t *kv_indices;     /* [kv_indptr[batch]] page numbers */
    void *o;                       /* [batch, num_qo_heads, hd], o_dtype */
    float *lse;                    /* NULL or [batch, num_qo_heads]: natural log */
    int64_t q_stride_b, q_stride_h, o_stride_b, o_stride_h;
    int64_t k_stride_page, k_stride_h, k_stride_n;
    int64_t v_stride_page, v_stride_h, v_stride_n;
    float sm_scale;                /* 0: 1/sqrt(hd) */
    float soft_cap;                /* used when spec.soft_cap */
    float rope_scale, rope_theta;  /* with FI_POS_ROPE_LLAMA; 0: 1 and 1e4 */
    const int32_t *rope_offsets;   /* NULL or [batch]: position of key 0 of each request
                                      (its query is at offset + len - 1) */
    const float *alibi_slopes;     /* [num_qo_heads], with FI_POS_ALIBI */
    float k_scale, v_scale;        /* fp8 KV: stored values times these; 0: 1 */
    void *workspace;               /* the one the plan was uploaded to */
    size_t workspace_bytes;
    /* Version 2: values of the variant's declared parameters (none: NULL, 0). */
    const fi_variant_arg *variant_args;
    int num_variant_args;
} fi_batch_decode_args;

#define FI_BATCH_DECODE_ARGS_INIT { FI_BATCH_DECODE_ARGS_VERSION, 0 }

/* Validate, get the kernel (through the cache) and launch one kernel on `stream`. */
FI_API int fi_batch_decode_run(fi_jit_ctx *ctx, const fi_batch_decode_plan *plan,
                               const fi_batch_decode_args *args, struct CUstream_st *stream);

/* ---- merge of attention states (cascade inference) ------------------------
 * For every position i and head h, merge num_states partial attention
 * results (v_n normalised output, s_n natural-log lse) over disjoint key sets
 * into the result over their union: v = sum_n e^(s_n - S) v_n, S = log sum_n
 * e^(s_n). States with s_n = -inf weigh nothing; a row with none gets 0 and
 * -inf. The kernel is the second entry of the batch_decode module of
 * (dtype, head_dim) with no mask, position encoding or soft-cap. */
#define FI_MERGE_STATES_ARGS_VERSION 1

typedef struct fi_merge_states_args {
    unsigned version;              /* FI_MERGE_STATES_ARGS_VERSION */
    const void *v;                 /* [seq, num_states, num_heads, hd], dtype */
    const float *s;                /* [seq, num_states, num_heads], head stride 1 */
    void *v_out;                   /* [seq, num_heads, hd], dtype */
    float *s_out;                  /* NULL or [seq, num_heads] contiguous */
    int seq_len, num_states, num_heads;
    int64_t v_stride_seq, v_stride_state, v_stride_h; /* elements */
    int64_t s_stride_seq, s_stride_state;
    int64_t o_stride_seq, o_stride_h;
} fi_merge_states_args;

#define FI_MERGE_STATES_ARGS_INIT { FI_MERGE_STATES_ARGS_VERSION, 0 }

FI_API int fi_merge_states(fi_jit_ctx *ctx, fi_dtype dtype, int head_dim,
                           const fi_merge_states_args *args, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif /* FIJIT_BATCH_DECODE_H */
