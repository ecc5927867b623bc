/*
 * Absorbed MLA decode (DeepSeek-V3/R1, Kimi K2): the kernel parameter struct,
 * the work item of a plan and the launch constants, shared by the host launch
 * code (C11, src/launch/mla_decode.c) and the kernels (CUDA C++ under NVRTC,
 * templates/mla/). Both sides include this one file, so the layout cannot
 * drift. Only builtin types: NVRTC sees no <stdint.h>.
 *
 * Shapes. Each query row (token i, head h) holds a 512-wide latent part
 * (q_nope, already multiplied by W_UK) and a 64-wide RoPE part (q_pe); each
 * cached token holds 512 latent values (ckv) and 64 RoPE key values (kpe).
 * The key is [ckv || kpe] (576 wide), the value is ckv (512 wide): one
 * 576-wide tile in shared memory serves as K and, through its first 512
 * columns, as V. Every head reads the same latent cache (MQA over the latent).
 */
#ifndef FIJIT_MLA_PARAMS_H
#define FIJIT_MLA_PARAMS_H

#include "common/params.h" /* FI_VARIANT_PARAM_WORDS */

#define FI_MLA_DIM_CKV 512 /* latent = value = output width: the spec's head_dim */
#define FI_MLA_DIM_KPE 64  /* RoPE part of q and k, fixed by the kind */
#define FI_MLA_DIM_QK (FI_MLA_DIM_CKV + FI_MLA_DIM_KPE)

/* ---- launch constants --------------------------------------------------------
 * A block serves FI_MLA_ROWS query rows of one request, (token, head) pairs
 * in the order row = token * num_heads + head, against one contiguous range
 * of its keys (a work item). All q rows of a request share every K/V tile, so
 * they are tiled together (FlashMLA's idea): a request with q_len * heads
 * rows takes ceil(rows / 64) row blocks. Eight warps: warp w owns rows
 * 16 * (w / 2) .. +16 and, for Q.K^T, keys 16 * (w % 2) .. +16 of the tile;
 * for P.V the columns 256 * (w % 2) .. +256 of the output, so that the 64 x
 * 512 fp32 accumulator is 128 registers per thread. Warps whose 16 rows are
 * all past the request's skip their products: warp w runs on the SM's
 * sub-partition w % 4, so a block of 16 rows (16 heads, one token) keeps
 * two sub-partitions busy with one warp each, and one of 32 rows four. */
#define FI_MLA_THREADS 256
#define FI_MLA_ROWS 64
#define FI_MLA_TILE_KEYS 32
#define FI_MLA_MERGE_THREADS 256
/* Shared-memory rows are padded by 16 bytes so that ldmatrix's eight row
 * addresses fall in distinct banks (576 * 2 bytes is a multiple of 128). */
#define FI_MLA_SMEM_ROW (FI_MLA_DIM_QK + 8)        /* elements of a Q or K row */
#define FI_MLA_P_ROW (FI_MLA_TILE_KEYS + 8)        /* elements of a P row */
/* Tiles in the K ring by compute capability (80, 90 ...): two where a block
 * may have 163 KiB (sm_80, sm_87), three from sm_90 on (227 KiB), so that two
 * tiles are in flight while a third is in use. */
#define FI_MLA_STAGES(cc) ((cc) >= 90 ? 3 : 2)
/* Dynamic shared memory (bytes): Q [64][584] and P [64][40] in the q dtype;
 * 16-bit KV: a ring of `stages` K tiles [32][584] filled by cp.async; fp8
 * KV: a ring of `stages` raw fp8 tiles [32][576] and one 16-bit K tile they
 * are widened into; then the row exchange [2][64] floats of the two key
 * halves. Two stages: 155,136 bytes (16-bit), 154,624 (fp8), one block per
 * SM on sm_80; three: 192,512 and 173,056 on sm_90. */
#define FI_MLA_Q_BYTES (FI_MLA_ROWS * FI_MLA_SMEM_ROW * 2)
#define FI_MLA_K_BYTES (FI_MLA_TILE_KEYS * FI_MLA_SMEM_ROW * 2)
#define FI_MLA_FP8_TILE_BYTES (FI_MLA_TILE_KEYS * FI_MLA_DIM_QK)
#define FI_MLA_P_BYTES (FI_MLA_ROWS * FI_MLA_P_ROW * 2)
#define FI_MLA_RED_BYTES (2 * FI_MLA_ROWS * 4)
#define FI_MLA_SMEM_BYTES(kv_bytes, stages)                                                   \
    (FI_MLA_Q_BYTES +                                                                         \
     ((kv_bytes) == 1 ? FI_MLA_K_BYTES + (stages) * FI_MLA_FP8_TILE_BYTES                     \
                      : (stages) * FI_MLA_K_BYTES) +                                          \
     FI_MLA_P_BYTES + FI_MLA_RED_BYTES)

/* Limits of the plan (fijit_mla.h). */
#define FI_MLA_MAX_Q_LEN 8
#define FI_MLA_MAX_PAGE_SIZE 64
/* Most items one (request, row block) is cut into: bounds the merge's loop
 * and the workspace. */
#define FI_MLA_MAX_SPLITS 64

/* One block's work: rows row_block * 64 .. of request `request` against its
 * keys kv_begin .. kv_end (whole tiles from kv_begin, the last one cut). A
 * (request, row block) cut into num_splits > 1 items writes partial states
 * that fi_mla_decode_merge_kernel combines; items of one (request, row
 * block) are consecutive, the first at first_item. 48 bytes. */
typedef struct fi_mla_decode_work {
    int request;
    int row_block;
    int kv_begin, kv_end;
    int kv_len;     /* the request's keys: causal positions are counted from its end */
    int q_start;    /* the request's first query token in q, o and lse */
    int q_len;      /* its query tokens, 1..FI_MLA_MAX_Q_LEN */
    int page_start; /* kv_indptr[request]: its first entry of kv_indices */
    int split, num_splits, first_item;
    int reserved;
} fi_mla_decode_work;

/* Both kernels of the module take this struct by value. Strides are in
 * elements. Token t, head h of q: q_nope + t*q_nope_stride_t + h*q_nope_stride_h
 * (512 values), q_pe likewise (64). Cached token n of page pg: ckv + pg *
 * ckv_stride_page + n * ckv_stride_n (512 values), kpe likewise (64). */
typedef struct fi_mla_decode_params {
    const void *q_nope, *q_pe;  /* q dtype */
    const void *ckv, *kpe;      /* kv dtype */
    const int *kv_indices;      /* page numbers, request b's from work.page_start */
    void *o;                    /* [tokens, num_heads, 512] at o_stride_t, o_stride_h */
    float *lse;                 /* NULL or [tokens, num_heads] contiguous: natural log of
                                   the softmax denominator; -inf when no key is visible */
    const fi_mla_decode_work *work;
    /* Split scratch (num_splits > 1): normalised partial outputs
     * [num_items, 64, 512] and their natural-log lse [num_items, 64]. */
    float *partial_o;
    float *partial_lse;
    long long q_nope_stride_t, q_nope_stride_h, q_pe_stride_t, q_pe_stride_h;
    long long ckv_stride_page, ckv_stride_n, kpe_stride_page, kpe_stride_n;
    long long o_stride_t, o_stride_h;
    int num_heads;
    int page_size;
    float sm_scale;             /* resolved: never 0 here */
    float soft_cap;             /* > 0 when kSoftCap */
    float kv_scale;             /* fp8 KV: ckv, kpe = kv_scale * stored; else 1 */
    int reserved;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
} fi_mla_decode_params;

#endif /* FIJIT_MLA_PARAMS_H */
