/*
 * Decode kernel parameter structs and launch constants, shared by the host
 * launch code (C11, src/launch/decode.c, batch_decode.c) and the decode
 * kernels (CUDA C++ under NVRTC, templates/decode/). Both sides include this
 * one file, so the layout cannot drift. Only builtin types: NVRTC sees no
 * <stdint.h>. Every kernel takes exactly one of these structs by value.
 */
#ifndef FIJIT_DECODE_PARAMS_H
#define FIJIT_DECODE_PARAMS_H

#include "common/params.h" /* FI_VARIANT_PARAM_WORDS */

/* ---- decode launch constants ---------------------------------------------------
 * One block serves one KV head (a GQA group, or a slice of a large one) over
 * one contiguous chunk of keys (one split). The products run on tensor cores;
 * the block's result is then laid out for the stores: each thread owns
 * FI_DECODE_VEC consecutive elements of the head dimension (16 bytes of
 * fp16/bf16), so a row of head_dim elements is held by head_dim /
 * FI_DECODE_VEC adjacent lanes, a "row group", which holds
 * FI_DECODE_HEADS_PER_THREAD query heads. */
#define FI_DECODE_THREADS 128
#define FI_DECODE_VEC 8
#define FI_DECODE_HEADS_PER_THREAD 4
/* Pipeline depth: tiles in shared memory, all but one of them in flight. An
 * fp8 tile has half the bytes of a 16-bit one, so fp8 KV keeps more tiles in
 * flight; its 4-tile ring plus the 16 KiB staging tile of the tensor-core
 * path take the 48 KiB of a 16-bit ring (4 blocks per SM). H100, bf16 q,
 * e4m3 KV: 1-3% faster than a 5-tile ring. */
#define FI_DECODE_STAGES 3
#define FI_DECODE_STAGES_FP8 4
/* The ring lives in dynamic shared memory and its depth is a launch
 * parameter (params.stages, 2..FI_DECODE_MAX_STAGES): a grid of at most two
 * (three) blocks per SM streams through a deeper ring of 16-bit tiles,
 * FI_DECODE_STAGES_DEEP2 (_DEEP3), more bytes in flight where the grid is too
 * small to hide the memory latency; a fuller grid keeps FI_DECODE_STAGES and
 * four blocks per SM. */
#define FI_DECODE_MAX_STAGES 6
#define FI_DECODE_STAGES_DEEP2 6
#define FI_DECODE_STAGES_DEEP3 4
/* A block serves at most FI_DECODE_MMA_HEADS query heads: the 8 columns of
 * its mma tiles (templates/decode/tile_loop.cuh); a larger GQA group takes several
 * head blocks. */
#define FI_DECODE_MMA_HEADS 8
/* Row groups in a block (lanes per row = head_dim / VEC). */
#define FI_DECODE_ROW_GROUPS(hd) (FI_DECODE_THREADS * FI_DECODE_VEC / (hd))
/* Keys per shared-memory tile: 4 per row group, so that a K (or V) tile is
 * always THREADS * VEC * 4 elements (8 KiB at 2 bytes) whatever the head dim:
 * 16 keys at hd 256, 32 at hd 128, 64 at hd 64. */
#define FI_DECODE_TILE_TOKENS(hd) (4 * FI_DECODE_ROW_GROUPS(hd))
/* Dynamic shared memory of a decode block: the K and V rings of `stages`
 * tiles, then the staging area for the tiles ldmatrix cannot read from the
 * ring (fp8 K and V widened to 16 bits; K rotated by RoPE), each as large as
 * a 16-bit tile. The merges at the end reuse the ring (decode/common.cuh checks
 * that they fit two stages). */
#define FI_DECODE_RING_BYTES(hd, kv_bytes, stages)                                  \
    (2 * (stages) * FI_DECODE_TILE_TOKENS(hd) * (hd) * (kv_bytes))
#define FI_DECODE_STAGING_BYTES(hd, kv_bytes, rope)                                 \
    (((kv_bytes) == 1 ? 2 : (rope) ? 1 : 0) * FI_DECODE_TILE_TOKENS(hd) * (hd) * 2)
#define FI_DECODE_SMEM_BYTES(hd, kv_bytes, rope, stages)                            \
    (FI_DECODE_RING_BYTES(hd, kv_bytes, stages) + FI_DECODE_STAGING_BYTES(hd, kv_bytes, rope))
/* Largest head_dim the rope frequency table holds. */
#define FI_DECODE_MAX_HEAD_DIM 256
#define FI_MERGE_THREADS 128
/* Most splits one (request, kv head) may be cut into: bounds the merge's
 * workspace and keeps its per-thread loop short. */
#define FI_DECODE_MAX_SPLITS 1024

/* ---- split-KV merge in the decode kernels ------------------------------------------
 * With more than one split, every block writes its normalised partial output
 * and base-2 lse, then counts itself done on a 64-bit counter of its
 * (request, kv-head block); the block that completes the count merges all
 * splits and resets the counter. A counter word is (epoch << 32 | count): the
 * host passes a new epoch with every launch, and a word whose epoch differs
 * from the launch's counts as 0, so a workspace needs no zeroing (whatever it
 * held before, barring a 2^-32 collision of the garbage with the epoch). A
 * CUDA graph replays one epoch; the reset to (epoch << 32 | 0) by the last
 * block makes that safe too. Single decode counts this way, as its workspace
 * comes fresh with every call: the first block to finish turns the stale word
 * into (epoch, 1) by compare-and-swap, the others add. Batch decode owns its
 * counters (fi_batch_decode_plan_upload zeroes them) and passes epoch 0: a
 * plain count from 0, one atomic add a block, reset to 0 by the last. */
/* ---- single decode ----------------------------------------------------------------
 * Grid: x = split index (num_splits), y = kv_head * head_blocks + head_block.
 * Block: FI_DECODE_THREADS threads, FI_DECODE_SMEM_BYTES(hd, kv bytes, rope, stages)
 * of dynamic shared memory.
 * Strides are in elements. */
typedef struct fi_decode_params {
    const void *q;            /* [num_qo_heads, head_dim] at q_stride_h */
    const void *k;            /* key j of kv head h at k + j*k_stride_n + h*k_stride_h */
    const void *v;
    void *o;                  /* [num_qo_heads, head_dim] at o_stride_h */
    float *lse;               /* NULL or [num_qo_heads]: natural log of the sum of
                                 exp(final logit) over visible keys; -inf when none */
    const float *alibi_slopes; /* [num_qo_heads] with kPos == kPosAlibi */
    /* Split-KV scratch, used when num_splits > 1 (from the caller's workspace):
     * partial_o [num_splits, num_qo_heads, head_dim] holds each split's
     * normalised output, partial_lse [num_splits, num_qo_heads] its
     * log-sum-exp in base 2 (-inf for a split with no visible key). */
    float *partial_o;
    float *partial_lse;
    unsigned long long *counters; /* [num_kv_heads * head_blocks], see above */
    long long q_stride_h, o_stride_h;
    long long k_stride_n, k_stride_h, v_stride_n, v_stride_h;
    int num_qo_heads, num_kv_heads, kv_len;
    int group_size;           /* num_qo_heads / num_kv_heads */
    int head_chunks;          /* row groups that split a block's heads (power of two) */
    int heads_per_block;      /* HEADS_PER_THREAD * head_chunks */
    int head_blocks;          /* blocks per kv head along y: ceil(group / heads_per_block) */
    int num_splits;           /* blocks along x */
    int kv_begin;             /* first key any split reads (window start, else 0) */
    int kv_chunk;             /* keys per split, a multiple of the tile */
    int stages;               /* ring depth, 2..FI_DECODE_MAX_STAGES */
    float sm_scale;           /* already resolved: never 0 here */
    float soft_cap;           /* > 0 when kSoftCap */
    int rope_offset;          /* position of key 0; the query is at offset + kv_len - 1 */
    int window_left;          /* kMaskWindow: keys j >= kv_len - 1 - window_left; < 0: all */
    unsigned epoch;           /* split counter epoch of this launch */
    float k_scale, v_scale;   /* fp8 KV: k = k_scale * stored, v = v_scale * stored; else 1 */
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    /* RoPE (Llama, rotate-half): rope_freq[i] = (1/rope_scale) * theta^(-2i/head_dim),
     * computed in double on the host and rounded once to float, i < head_dim/2.
     * A table instead of device math keeps the frequencies bit-identical to
     * what a reference computes. */
    float rope_freq[FI_DECODE_MAX_HEAD_DIM / 2];
} fi_decode_params;

/* ---- batch decode over a paged KV cache ------------------------------------------
 * The host plan (src/launch/batch_decode.c) cuts every request's keys into chunks;
 * one work item is one (request, chunk). Grid: x = work item, y = kv_head *
 * head_blocks + head_block. Items of one request are consecutive, so split s
 * of a request is item first_item + s; partial states are indexed by item. */
typedef struct fi_batch_decode_work {
    int request;
    int kv_begin, kv_end;     /* this item's keys [kv_begin, kv_end) */
    int kv_len;               /* the request's length (query at kv_len - 1) */
    int page_start;           /* kv_indptr[request]: its first entry in kv_indices */
    int split, num_splits;    /* which of the request's chunks, out of how many */
    int first_item;           /* item index of the request's split 0 */
} fi_batch_decode_work;

typedef struct fi_batch_decode_params {
    const void *q;            /* [batch, num_qo_heads, hd] at q_stride_b, q_stride_h */
    const void *k, *v;        /* token t of page pg, kv head h: k + pg*k_stride_page
                                 + h*k_stride_h + t*k_stride_n (elements) */
    const int *kv_indices;    /* page numbers; request b uses those from page_start */
    void *o;                  /* [batch, num_qo_heads, hd] at o_stride_b, o_stride_h */
    float *lse;               /* NULL or [batch, num_qo_heads], natural log */
    const float *alibi_slopes; /* [num_qo_heads] */
    const int *rope_offsets;  /* NULL or [batch]: position of key 0 of each request */
    const fi_batch_decode_work *work; /* [num_items], in the workspace */
    float *partial_o;         /* [num_items, num_qo_heads, hd] */
    float *partial_lse;       /* [num_items, num_qo_heads], base 2 */
    unsigned long long *counters; /* [batch, num_kv_heads * head_blocks] */
    long long q_stride_b, q_stride_h, o_stride_b, o_stride_h;
    long long k_stride_page, k_stride_h, k_stride_n;
    long long v_stride_page, v_stride_h, v_stride_n;
    int num_qo_heads, num_kv_heads, page_size;
    int page_shift;           /* log2(page_size) when a power of two, else -1 */
    int group_size, head_chunks, heads_per_block, head_blocks;
    int stages;               /* as in fi_decode_params */
    float sm_scale, soft_cap;
    int window_left;          /* as in fi_decode_params */
    unsigned epoch;           /* 0: counters start at 0 (zeroed by the plan's upload) */
    float k_scale, v_scale;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    float rope_freq[FI_DECODE_MAX_HEAD_DIM / 2];
} fi_batch_decode_params;

/* Standalone merge of attention states (cascade inference): for each row
 * (position, head) merge num_states pairs (o, lse). Grid: x = seq * heads.
 * Block: FI_MERGE_THREADS. o and lse in natural log; o in DTypeO. */
typedef struct fi_merge_states_params {
    const void *v;            /* [seq, num_states, num_heads, hd] at the strides below */
    const float *s;           /* [seq, num_states, num_heads] lse, natural log; -inf: empty */
    void *v_out;              /* [seq, num_heads, hd] */
    float *s_out;             /* NULL or [seq, num_heads] */
    long long v_stride_seq, v_stride_state, v_stride_h;   /* elements */
    long long s_stride_seq, s_stride_state;               /* elements; head stride 1 */
    long long o_stride_seq, o_stride_h;
    int seq_len, num_states, num_heads;
} fi_merge_states_params;

#endif /* FIJIT_DECODE_PARAMS_H */
