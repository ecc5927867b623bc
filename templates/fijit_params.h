/*
 * Kernel parameter structs and launch constants, shared by the host launch
 * code (C11, src/decode.c) and the kernels (CUDA C++ under NVRTC). Both sides
 * include this one file, so the layout cannot drift. Only builtin types:
 * NVRTC sees no <stdint.h>. Every kernel takes exactly one of these structs by
 * value.
 */
#ifndef FIJIT_PARAMS_H
#define FIJIT_PARAMS_H

/* ---- decode launch constants ---------------------------------------------------
 * One block serves one KV head (a GQA group, or a slice of a large one) over
 * one contiguous chunk of keys (one split). Each thread owns FI_DECODE_VEC
 * consecutive elements of the head dimension (16 bytes of fp16/bf16), so a row
 * of head_dim elements is held by head_dim / FI_DECODE_VEC adjacent lanes: a
 * "row group". A row group works on FI_DECODE_HEADS_PER_THREAD query heads at
 * once, sharing every K/V vector it reads from shared memory among them. */
#define FI_DECODE_THREADS 128
#define FI_DECODE_VEC 8
#define FI_DECODE_HEADS_PER_THREAD 4
/* Pipeline depth: tiles in shared memory, all but one of them in flight. */
#define FI_DECODE_STAGES 3
/* Tokens each row group handles per tile before its online-softmax update. */
#define FI_DECODE_TOKENS_PER_STEP 4
/* Row groups in a block (lanes per row = head_dim / VEC). */
#define FI_DECODE_ROW_GROUPS(hd) (FI_DECODE_THREADS * FI_DECODE_VEC / (hd))
/* Keys per shared-memory tile: every row group takes TOKENS_PER_STEP of them,
 * so a K (or V) tile is always THREADS * VEC * TOKENS_PER_STEP elements (8 KiB
 * at 2 bytes) whatever the head dim. */
#define FI_DECODE_TILE_TOKENS(hd) (FI_DECODE_TOKENS_PER_STEP * FI_DECODE_ROW_GROUPS(hd))
/* Largest head_dim the rope frequency table holds. */
#define FI_DECODE_MAX_HEAD_DIM 256
#define FI_MERGE_THREADS 128

/* ---- single decode ----------------------------------------------------------------
 * Grid: x = split index (num_splits), y = kv_head * head_blocks + head_block.
 * Block: FI_DECODE_THREADS threads, static shared memory only.
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
    float sm_scale;           /* already resolved: never 0 here */
    float soft_cap;           /* > 0 when kSoftCap */
    int rope_offset;          /* position of key 0; the query is at offset + kv_len - 1 */
    int window_left;          /* kMaskWindow: keys j >= kv_len - 1 - window_left; < 0: all */
    /* RoPE (Llama, rotate-half): rope_freq[i] = (1/rope_scale) * theta^(-2i/head_dim),
     * computed in double on the host and rounded once to float, i < head_dim/2.
     * A table instead of device math keeps the frequencies bit-identical to
     * what a reference computes. */
    float rope_freq[FI_DECODE_MAX_HEAD_DIM / 2];
} fi_decode_params;

/* Merge of split-KV partial states. Grid: x = qo head. Block: FI_MERGE_THREADS.
 * Carries the decode launch it completes: its outputs, scratch and the values
 * the variant's output hook may read. */
typedef struct fi_merge_params {
    fi_decode_params dec;
} fi_merge_params;

#endif /* FIJIT_PARAMS_H */
