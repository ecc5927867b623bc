/*
 * Prefill kernel parameters and launch constants, shared by the host launch
 * code (C11, src/launch/prefill_*.c) and the kernels (CUDA C++ under NVRTC,
 * templates/prefill/). Builtin types only: NVRTC sees no <stdint.h>.
 * Every prefill kernel takes exactly one fi_prefill_params by value.
 */
#ifndef FIJIT_PREFILL_PARAMS_H
#define FIJIT_PREFILL_PARAMS_H

#include "common/params.h" /* FI_VARIANT_PARAM_WORDS */

/* ---- tiles ---------------------------------------------------------------------
 * A module holds one kernel per CTA query tile, in this order (the kinds'
 * entries in src/kinds/registry.c follow it): rows of the tile are "packed rows",
 * (query token, head of the GQA group) pairs, row = token * group + head, so
 * that all query heads sharing a KV head share every K/V tile. On mma.sync
 * (every arch but sm_90a, below):
 *   index 0: 128 rows; 4 warps x 32 rows (head_dim 64/128), 8 warps x 16 (256)
 *   index 1:  64 rows; 4 warps x 16 rows
 *   index 2:  16 rows; 1 warp
 * Keys per K/V tile: 64 (head_dim 64, 128) or 32 (head_dim 256). K and V are
 * double-buffered; Q stays in shared memory for the whole CTA.
 * Measured on H100 (bench_prefill.py, batch 4, seq 4k/8k, fp16): 4 warps x 32
 * rows with 64-key tiles (2 CTAs per SM, 255 registers) beat 8 warps x 16
 * rows (B: up to -15% at head_dim 128), 32-key tiles at head_dim 128 (-4 to
 * -7%), and 8 warps x 16 rows x 32 keys at 128 registers (-20%).
 *
 * Hopper: in a module compiled for sm_90a (`sm90a` = 1 below; the kernels see
 * __CUDA_ARCH_FEAT_SM90_ALL, the host the kernel's arch string), tiles 0 and 1
 * run on warpgroup MMA (wgmma, templates/common/wgmma_sm90.cuh) instead of mma.sync:
 * 16 rows per warp, a warpgroup per 64 rows (8 and 4 warps), with
 * FI_PREFILL_WGMMA_KEYS keys per K/V tile; the 16-row tile keeps mma.sync.
 * Head dim 64 and 128 are held to 128 registers for 2 CTAs per SM.
 * Measured on H100 (bench_prefill.py, batch 4, seq 4k/8k, A/B against the
 * mma.sync build in one process): head_dim 128 1.23-1.46x SDPA flash (the
 * mma.sync build: 0.96-1.13x), 256 1.32-1.54x (0.79-0.92x); at head_dim 128
 * 1 CTA per SM (147 registers, causal) measured 1.02-1.13x. */
#define FI_PREFILL_NUM_TILES 3
#define FI_PREFILL_TILE_Q(i) ((i) == 0 ? 128 : (i) == 1 ? 64 : 16)
#define FI_PREFILL_WGMMA(i, sm90a) ((sm90a) && (i) <= 1)
#define FI_PREFILL_WGMMA_KEYS 64
#define FI_PREFILL_ROWS_PER_WARP(i, hd, sm90a) \
    (FI_PREFILL_WGMMA(i, sm90a) ? 16 : (i) == 0 && (hd) <= 128 ? 32 : 16)
#define FI_PREFILL_WARPS(i, hd, sm90a) \
    (FI_PREFILL_TILE_Q(i) / FI_PREFILL_ROWS_PER_WARP(i, hd, sm90a))
#define FI_PREFILL_TILE_KV(i, hd, sm90a) \
    (FI_PREFILL_WGMMA(i, sm90a) ? FI_PREFILL_WGMMA_KEYS : (hd) <= 128 ? 64 : 32)
#define FI_PREFILL_STAGES 2
/* Threads of a block of the RoPE pre-pass (fi_prefill_rope_k_kernel). */
#define FI_PREFILL_ROPE_THREADS 256
/* CTAs per SM the compiler must leave registers for (__launch_bounds__).
 * Tile 0 of a heavy tuple (window + ALiBi, RoPE + soft-cap, custom mask)
 * spills under 128 registers (32-144 bytes); at 1 CTA per SM instead (no
 * spills, 155-189 registers) those tuples ran 0.59-0.81x as fast (H100,
 * hd 128, seq 4k/8k, measured when they spilled 40-100 bytes): the spills
 * are the cheaper side. */
#define FI_PREFILL_MIN_BLOCKS(i, hd, sm90a) (FI_PREFILL_WGMMA(i, sm90a) && (hd) <= 128 ? 2 : 1)
/* Dynamic shared memory of tile index i: Q tile + STAGES x (K tile + V tile), 16-bit elements. */
#define FI_PREFILL_SMEM_BYTES(i, hd, sm90a)                                                   \
    ((FI_PREFILL_TILE_Q(i) + 2 * FI_PREFILL_STAGES * FI_PREFILL_TILE_KV(i, hd, sm90a)) * (hd) * 2)
/* The same where v and o have head dim hd_vo (MLA: 192/128): Q and K rows of
 * hd, V rows of hd_vo. Such tuples' tile kernels are the mma.sync ones on
 * every arch (the caller passes sm90a 0; on sm_90a the Hopper main loop
 * takes their 128-row tiles): 128 rows as 8 warps x 16, 32 keys per K/V
 * tile, as head_dim 256 does. */
#define FI_PREFILL_SMEM_BYTES_VO(i, hd, hd_vo, sm90a)                                         \
    (((FI_PREFILL_TILE_Q(i) + FI_PREFILL_STAGES * FI_PREFILL_TILE_KV(i, hd, sm90a)) * (hd) +    \
      FI_PREFILL_STAGES * FI_PREFILL_TILE_KV(i, hd, sm90a) * (hd_vo)) * 2)
#define FI_PREFILL_MAX_HEAD_DIM 256
/* Bytes of K/V (all requests) the heads of one block-order section may span. */
#define FI_PREFILL_L2_BUDGET (24u << 20)

/* ---- the Hopper main loop (templates/prefill/ws/kernel.cuh) -------------
 * In a module compiled for sm_90a, every prefill kind without a custom
 * mask also holds fi_prefill_kernel_ws: query tiles of FI_PREFILL_WS_TILE_Q
 * rows (the block order of tile kernel 0, over its own work items: tiles of
 * its size) computed by a producer warpgroup issuing TMA loads and two or
 * three consumer warpgroups of 64 rows, with kTileKV keys per K/V tile in
 * STAGES-deep rings. The host launches it instead of tile kernel 0 when the
 * tensors suit TMA (16-byte strides) and, with RoPE, the keys were rotated
 * into a workspace. Everywhere else the entry is empty.
 * Paged K/V: one TMA per box of a page's rows, all panels (FI_PREFILL_WS_PAGE_OK); a producer
 * warpgroup gathering pages with cp.async instead measured 0.40-0.42x single
 * prefill on a mixed batch (page 16, H100, 2026-11-24, bench_batch_prefill.py). */
#define FI_PREFILL_WS_TUPLE(kind, custom_mask) (!(custom_mask))
/* Paged K/V takes it when the page size is a multiple of 8 rows that
 * divides the K/V tile, or any multiple of 8 where the tile is taken in
 * boxes of part of a page (FI_PREFILL_WS_PART_PAGES: 160 keys, which pages of
 * 64 do not divide). A tile is boxes of fi_prefill_ws.page_box rows, a TMA
 * each, every box on 1024-byte swizzle atoms and in one page; other page
 * sizes stay on the tile kernels. */
#define FI_PREFILL_WS_PART_PAGES(tile_kv) ((tile_kv) == 160)
#define FI_PREFILL_WS_PAGE_OK(page_size, tile_kv)                                     \
    ((page_size) >= 8 && (page_size) % 8 == 0 && (page_size) <= 256 &&                \
     ((tile_kv) % (page_size) == 0 || FI_PREFILL_WS_PART_PAGES(tile_kv)))
/* Consumer warpgroups, 64 query rows each, so the query tile's rows and the
 * CTA's threads (a producer warpgroup besides): three at head_dim 64 for a
 * lean tuple (FI_PREFILL_WS_LEAN), whose softmax is long beside its short
 * MMAs, so that two warpgroups' softmax overlap the third's MMAs (as
 * FlashAttention-3 does there); two elsewhere (their registers: 240 where
 * three would have 160). */
#ifndef FI_PREFILL_WS_CONSUMERS
#define FI_PREFILL_WS_CONSUMERS(hd, lean) ((hd) == 64 && (lean) ? 3 : 2)
#endif
#define FI_PREFILL_WS_TILE_Q(hd, lean) (64 * FI_PREFILL_WS_CONSUMERS(hd, lean))
#define FI_PREFILL_WS_THREADS(hd, lean) (128 * (1 + FI_PREFILL_WS_CONSUMERS(hd, lean)))
/* Keys per K/V tile: 128 at head_dim 64 and 128, 80 at 256 (the most that
 * two stages of K and V fit beside Q: 64 + 4 x 40 KiB); 160 at head_dim 128
 * for lean tuples with a causal mask (two stages beside two Q buffers: 64 +
 * 4 x 40 KiB): H100, batch 4, A/B in one process against 128, fp16 and
 * bf16, 32/32 and 32/8, causal seq 4k-16k 0.99-1.05x (10 of 12 shapes >=
 * 1.01x), no mask 0.96-1.06x (mean 1.00), seq 1k 0.93-0.98x (the last
 * tile's unused keys); paged K/V 1.06-1.10x against 128 keys with the
 * producer's boxes of part of a page in both (bench_batch_prefill.py, page
 * 16, fp16, 32/8 and 32/32, two runs), and with whole pages where they
 * divide the tile 1.00-1.01x a build that took only those (pages of 64 take
 * boxes of 32 rows: 1.94x the tile kernels they ran on before, page 64).
 * Measured on H100
 * (batch 4, seq 4k-16k, bench_prefill.py A/B in one process): head_dim 256,
 * 64 keys 0.86-0.96x cuDNN, 80 keys 1.02-1.03x (32/8, non-causal); head_dim
 * 128 non-causal, 176 keys did not beat 128 (0.98-1.03x, with one Q buffer);
 * head_dim 64 with two consumers, 192 keys 1.01-1.06x 128 keys at seq
 * 8k-16k, 0.96-1.01x at 4k (three consumers' 160 registers hold 128). Not
 * the MUFU: computing every 4th, 3rd or 2nd 8-key tile's exponentials on the
 * FMA pipe (a cubic for 2^f) measured 0.93-1.01x, 0.90-1.00x and 0.81-0.95x
 * at head_dim 64. */
/* Head dim 192 (MLA's q and k, with v and o of 128: not yet measured) takes
 * 128 keys, its one Q buffer and two stages of K (192 wide) and V (128
 * wide) in 208.3 KiB. */
#ifndef FI_PREFILL_WS_TILE_KV
#define FI_PREFILL_WS_TILE_KV(hd, lean, causal) \
    ((hd) == 128 && (lean) && (causal) ? 160 : (hd) <= 192 ? 128 : 80)
#endif
/* A lean tuple: no soft-cap, no ALiBi, no custom variant (no hook runs on
 * every logit). */
#define FI_PREFILL_WS_LEAN(soft_cap, alibi, custom_variant) (!(soft_cap) && !(alibi) && !(custom_variant))
/* Q buffers: two where they fit beside the rings (the producer loads the next
 * block's Q while the consumers finish this one, whose output leaves by TMA
 * from the rows of its own; only when Q comes by TMA), else one (head_dim
 * 256: its next block's Q lands once this block's output, staged there, has
 * left by TMA).
 * Q comes by TMA (fi_prefill_ws.q below) wherever the tuple changes q by
 * sm_scale alone (ws/config.cuh: kRawQTuple), and the CTAs then take their
 * blocks from the feed (dynamic claims). Paged K/V at 128 takes it into two
 * buffers beside two K/V stages (against one buffer and three stages, where
 * the output had left the registers by 4-byte stores: 1.6-2.7k cycles a
 * block in a cycle trace; H100, the batch below, A/B in one process, two
 * runs: causal 1.04-1.11x, no mask 1.03-1.06x). The feed, measured with one
 * buffer (H100, the batch of bench_batch_prefill.py: 16 requests of
 * 975-7931 tokens, page 16, fp16 32/8, causal): under ncu the SMs walking
 * paged blocks in a fixed order idled 3.4% of the kernel's time at its end
 * (active cycles 93-99.6% of elapsed), claiming 0.2%, and the kernel took
 * 4.04 ms against 4.25. At 256 it measured 0.82-0.87x against 0.85-0.94x
 * while the output left the registers by 4-byte stores; with the output by
 * TMA and causal CTAs claiming blocks (prefill_ws.c: ws_default), 1.00-1.05x
 * the consumers loading Q on 7 of 8 shapes (one 0.97x; H100, the batch
 * below, two runs in one call). Paged K/V at 64, whose consumers loaded Q
 * (its producer, 32 registers beside three consumers, spilled 52-56 B with
 * Q by TMA while it also copied the partial last page: 0.85-0.87x against
 * 0.88-0.91x), takes it since the consumers zero that page's tail instead
 * (ws/consume.cuh: zero_v_tail; no spills): 1.01-1.03x, 1.03x on three of
 * its four shapes (H100, the batch below, fp16 32/8 and 32/32, A/B in one
 * process), where a fourth K/V stage in the second Q buffer's place
 * measured 0.99-1.03x three (1.00x on three shapes). */
#ifndef FI_PREFILL_WS_Q_BUFS
#define FI_PREFILL_WS_Q_BUFS(hd) ((hd) <= 128 ? 2 : 1)
#endif
#ifndef FI_PREFILL_WS_STAGES
#define FI_PREFILL_WS_STAGES(hd) ((hd) == 64 ? 3 : 2)
#endif
/* Packed rows of one Q load (the box of fi_prefill_ws.q): a tile's, or with
 * one Q buffer a consumer's 64, so that each consumer's rows are refilled as
 * soon as its own output has left them (ws/config.cuh: kQParts). */
#define FI_PREFILL_WS_Q_BOX_ROWS(hd, lean) \
    (FI_PREFILL_WS_Q_BUFS(hd) == 1 ? 64 : FI_PREFILL_WS_TILE_Q(hd, lean))
/* The Q buffers + the K and V rings + 320 bytes for the mbarriers and the
 * block feed (ws/config.cuh: Smem): at most 224.31 KiB (head_dim 128 with
 * 160-key tiles), under the 227 KiB an H100 CTA may opt in to. */
#define FI_PREFILL_WS_SMEM_BYTES(hd, lean, causal) FI_PREFILL_WS_SMEM_BYTES_VO(hd, hd, lean, causal)
/* The same with V rows of hd_vo (MLA: 192/128; the output, 128 wide, is
 * staged in the Q buffer). */
#define FI_PREFILL_WS_SMEM_BYTES_VO(hd, hd_vo, lean, causal)                              \
    ((FI_PREFILL_WS_Q_BUFS(hd) * FI_PREFILL_WS_TILE_Q(hd, lean) * (hd) +                   \
      FI_PREFILL_WS_STAGES(hd) * FI_PREFILL_WS_TILE_KV(hd, lean, causal) * ((hd) + (hd_vo))) * \
         2 +                                                                               \
     320)

/* ---- fp8 prefill (templates/prefill/fp8.cuh) ------------------------------------
 * q, k and v of e4m3 on the Hopper main loop alone (no tile kernels: their
 * entries are empty), head_dim 128, o fp16 or bf16. The tensor cores take
 * both operands of an 8-bit product K-major, so P.V needs V with the keys
 * contiguous: a pre-pass writes it so (fi_prefill_params.vt), with the keys
 * of each 32-key chunk (one k-step of the product) in the order in which a
 * thread's softmax weights come out of S's accumulators, so that P goes from
 * S to the A operand without a shuffle: position p of a chunk holds key
 * FI_PREFILL_FP8_KEY_AT(p). Two consumers and two Q buffers as at head_dim
 * 128 in 16 bits, the Q buffers of the 16-bit output's size (they stage
 * it), and K/V tiles of 192 keys in two stages: H200, A/B in one process,
 * 128-key tiles 0.96-1.04x, with four stages 0.95-1.06x (docs/performance.md). */
#define FI_PREFILL_FP8_KEY_CHUNK 32
#define FI_PREFILL_FP8_KEY_AT(p) \
    (((p) & 16) | (((p) & 2) << 2) | (((p) >> 1) & 6) | ((p) & 1))
#define FI_PREFILL_FP8_TILE_KV 192
#define FI_PREFILL_FP8_STAGES 2
/* A V slot: 128-key panels of head_dim rows (a box each), the last one
 * whole even where the tile ends inside it. */
#define FI_PREFILL_FP8_V_PANELS ((FI_PREFILL_FP8_TILE_KV + 127) / 128)
/* Threads of a block of the V pre-pass: a block per kv head and 64 keys. */
#define FI_PREFILL_FP8_V_THREADS 256
#define FI_PREFILL_FP8_V_KEYS 64
#define FI_PREFILL_FP8_SMEM_BYTES(hd, lean)                                                 \
    (FI_PREFILL_WS_Q_BUFS(hd) * FI_PREFILL_WS_TILE_Q(hd, lean) * (hd) * 2 +                   \
     FI_PREFILL_FP8_STAGES * (FI_PREFILL_FP8_TILE_KV + 128 * FI_PREFILL_FP8_V_PANELS) * (hd) + 320)

/* A CUtensorMap (cuda.h), which NVRTC does not see: 128 opaque bytes,
 * 64-byte aligned. The kernel takes the K and V maps by value
 * (__grid_constant__), after fi_prefill_params. Each describes a 3-D tensor
 * {head_dim, num_kv_heads, tokens} (innermost first) of 16-bit elements, box
 * {64, 1, FI_PREFILL_WS_TILE_KV}, 128-byte swizzle. Tokens: single prefill
 * the keys (k: or the rotated keys), ragged every token of the batch. Paged
 * maps (K: 3-D as above over the rotated keys with RoPE) are 5-D, {64
 * columns, 8 rows, panels, page_size / 8 row groups, pages}, box {64, 8,
 * panels, page_box / 8, 1}: page_box rows of a page (the greatest common
 * divisor of page_size and FI_PREFILL_WS_TILE_KV, so that a K/V tile is
 * whole boxes and none crosses a page), landing as row groups of 8 rows x
 * every 64-column panel, so that a box takes one TMA however many panels a
 * row has (the wgmma descriptors step over the interleaved panels). The kv head is folded into the panel
 * coordinate (head * panels, where heads are contiguous: stride_h ==
 * head_dim) or into the page one (page * num_kv_heads + head, where a page
 * holds whole heads: stride_page == num_kv_heads * stride_h); other layouts
 * take the tile kernels. */
#ifdef __cplusplus
#define FI_ALIGN64 alignas(64)
#else
#define FI_ALIGN64 _Alignas(64)
#endif
typedef struct fi_tma_map {
    FI_ALIGN64 unsigned long long words[16];
} fi_tma_map;
/* The Hopper kernel's second parameter: the maps, and the grid of blocks it
 * walks (work items x kv heads, in the launch order the tile kernels use);
 * a persistent launch has fewer CTAs than blocks. CTA c takes block c
 * first; then, with no claims counter, c + gridDim.x, c + 2 gridDim.x, ...;
 * with one (`claims`, in the batch plan's workspace), the next unclaimed
 * block, gridDim.x + atomicAdd(claims, 1), so that CTAs whose blocks were
 * short take more of them (causal blocks differ in length). The claim that
 * returns blocks - 1 is the launch's last (each CTA claims until it gets a
 * block past the grid): its CTA sets the counter back to 0 for the next
 * launch (the plan's upload zeroes it first).
 * q: when q_rows > 0, a map of q {head_dim, num_qo_heads, q_rows tokens},
 * box {64, group, FI_PREFILL_WS_Q_BOX_ROWS(hd, lean) / group}: a box is a tile's
 * packed rows, or a consumer's (token-major, the group's heads fastest) as
 * they are in q. The host makes it when the group divides the box's rows,
 * sm_scale > 0 and q suits TMA;
 * the kernel reads Q through it when its tuple changes q by sm_scale alone
 * (no RoPE, the default query and logits hooks: ws/config.cuh kRawQTuple), and
 * with paged K/V prefetches each block's Q rows into L2 through it.
 * o: when o_rows > 0, a map of o {head_dim, num_qo_heads, o_rows tokens},
 * box {64, group, 64 / group}: a consumer's 64 packed rows. The host makes
 * it when the group divides 64 and o suits TMA; the kernel stores the output
 * it stages in shared memory through it where the 64 rows are the request's
 * (a ragged request's last tile may not be: 16-byte stores there). */
typedef struct fi_prefill_ws {
    fi_tma_map k, v, q, o;
    unsigned int *claims;
    int work_items, kv_heads, q_rows, o_rows;
    /* Paged maps: kv head h of page g is at panel coordinate h * c[0] and
     * page coordinate g * c[1] + h * c[2]; a box is page_box rows (see
     * above). */
    int k_coords[3], v_coords[3];
    int page_box;
} fi_prefill_ws;

/* Values of fijit_cfg::kKind, equal to fi_kernel_kind. */
#define FI_PREFILL_KIND_SINGLE 3
#define FI_PREFILL_KIND_RAGGED 4
#define FI_PREFILL_KIND_PAGED 5

/* ---- parameters ------------------------------------------------------------------
 * Grid: (work items, kv heads). Blocks are mapped to (work item, kv head) in
 * launch order (b = blockIdx.y * gridDim.x + blockIdx.x): kv heads are cut
 * into sections of heads_per_section; a section's blocks take work item 0 for
 * each of its heads, then item 1, and so on; then the next section. The host
 * sizes sections so that their K/V fits in L2 (FI_PREFILL_L2_BUDGET).
 * Single prefill: work item i is query tile (gridDim.x - 1 - i) of the one
 * request (the longest causal tiles start first). Batch kinds: work item i is
 * query tile work_tile[i] of request work_request[i] (the plan's list, longest
 * tiles first).
 * Strides are in elements; the last dimension is contiguous. */
typedef struct fi_prefill_params {
    const void *q;             /* token t, head h at q + t*q_stride_n + h*q_stride_h */
    const void *k;             /* see the kv addressing below */
    const void *v;
    void *o;                   /* like q, at o_stride_n / o_stride_h */
    float *lse;                /* NULL or [tokens, num_qo_heads], natural log; -inf: no key */
    const float *alibi_slopes; /* [num_qo_heads] with kPos == kPosAlibi */
    /* Batch kinds: qo_indptr [batch + 1] token offsets into q/o/lse.
     * Ragged: kv_indptr [batch + 1] token offsets into k/v.
     * Paged: kv_indptr [batch + 1] offsets into kv_indices (page ids),
     * kv_last_page_len [batch] (1..page_size for a request with pages). */
    const int *qo_indptr;
    const int *kv_indptr;
    const int *kv_indices;
    const int *kv_last_page_len;
    const int *work_request;   /* batch kinds: the plan's work list */
    const int *work_tile;
    /* kMaskCustom: bit (custom_offsets[b] + i * kv_len_b + j) of custom_mask,
     * byte (bit >> 3), bit (bit & 7) counted from the least significant, is 1
     * when query i of request b sees key j. custom_offsets NULL: offset 0
     * (single prefill). */
    const unsigned char *custom_mask;
    const long long *custom_offsets;
    long long q_stride_n, q_stride_h, o_stride_n, o_stride_h;
    /* Single and ragged: key j of kv head h at k + j*k_stride_n + h*k_stride_h.
     * Paged: key j of the request lies in page kv_indices[kv_indptr[b] + j / page_size],
     * at k + page*k_stride_page + (j % page_size)*k_stride_n + h*k_stride_h. */
    long long k_stride_n, k_stride_h, v_stride_n, v_stride_h;
    long long k_stride_page, v_stride_page;
    int num_qo_heads, num_kv_heads;
    int group_size;            /* num_qo_heads / num_kv_heads */
    int heads_per_section;     /* block order, see below; >= 1 */
    int qo_len, kv_len;        /* single prefill only */
    int page_size;             /* paged only */
    float sm_scale;            /* resolved: never 0 here */
    float soft_cap;            /* > 0 when kSoftCap */
    int rope_offset;           /* key j at position rope_offset + j; query i at
                                  rope_offset + kv_len - qo_len + i (batch kinds:
                                  unless rope_offsets is given) */
    int window_left;           /* kMaskWindow: keys j >= i + kv_len - qo_len - window_left
                                  (and causal); < 0: causal only */
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    /* RoPE (Llama, rotate-half): rope_freq[i] = (1/rope_scale) * theta^(-2i/head_dim),
     * i < head_dim/2, computed in double on the host, rounded once. */
    float rope_freq[FI_PREFILL_MAX_HEAD_DIM / 2];
    /* RoPE with a workspace (batch kinds always; single prefill when its caller
     * gives one, else rot_k is NULL and K tiles are rotated in the tile loop):
     * the keys rotated once, rot_k [kv_tokens, num_kv_heads, head_dim],
     * request b from row kv_token_start[b] (ragged: kv_indptr itself; single:
     * row j is key j, kv_token_start unused). The pre-pass reads k as above
     * and writes rot_k; the tile kernels then get k = rot_k, k_stride_n =
     * num_kv_heads * head_dim, k_stride_h = head_dim. */
    void *rot_k;
    const int *kv_token_start;
    int kv_tokens;
    int batch_size;
    /* Batch kinds with RoPE: NULL, or [batch]: request b's keys and queries
     * are positioned from rope_offsets[b] instead of rope_offset (batch
     * decode's per-request offsets). */
    const int *rope_offsets;
    /* fp8 (q = kv = e4m3; the Hopper main loop only, prefill/fp8.cuh): O is
     * multiplied by v_scale (sm_scale already holds q_scale x k_scale).
     * vt: V as the P.V products read it, written by fi_prefill_fp8_v_kernel
     * into the caller's workspace: [num_kv_heads][head_dim][vt_keys] bytes,
     * keys (kv_len rounded up to whole K/V tiles) contiguous, permuted
     * within each chunk (FI_PREFILL_FP8_KEY_AT), zeros past kv_len. */
    float v_scale;
    int vt_keys;
    void *vt;
} fi_prefill_params;

#endif /* FIJIT_PREFILL_PARAMS_H */
