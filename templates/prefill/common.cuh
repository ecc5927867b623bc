// Prefill attention on tensor cores, shared by the three prefill kinds:
// single request, batch over ragged K/V, batch over a paged K/V cache. The
// including file (prefill/single.cuh, ragged.cuh, paged.cuh) sets
// fijit_cfg::kKind; only the work lookup and the K/V row addressing depend
// on it. The parts, one file each (after FlashAttention-3's hopper/):
//   prefill/common.cuh     this file: the tuple's constants, shared-memory
//                          layouts and small helpers
//   prefill/work.cuh       the tile scheduler: which query tile and kv head a
//                          block computes, where key j of a request lives
//   prefill/rope.cuh       RoPE, the keys' pre-pass and the query rows as the
//                          MMAs read them (rotated, transformed, rounded)
//   prefill/mask.cuh       which K tiles need masks, the masked logit, the
//                          custom mask's bits
//   prefill/softmax.cuh    the online softmax of a row and the rescale of O
//   prefill/epilogue.cuh   normalise, output hook, lse, the 16-byte stores
//   prefill/tile/          the tile kernels (FlashAttention-2 style, every arch):
//     loop.cuh             their CTA: Q, the K/V pipeline, masks, softmax and
//                          epilogue around one K/V tile's products
//     mainloop_sm80.cuh    those products on mma.sync (sm_80+)
//     mainloop_sm90.cuh    on wgmma (sm_90a, 128- and 64-row tiles)
//     kernel.cuh           the entry: which products tile kernel i runs
//   prefill/ws/            the warp-specialised Hopper kernel (TMA, wgmma,
//                          producer and consumer warpgroups):
//     kernel.cuh           its CTA and entry; config.cuh (tiles, rings,
//                          registers, shared memory), schedule.cuh (the
//                          blocks a CTA takes), produce.cuh (TMA loads of Q,
//                          K and V), consume.cuh (a consumer warpgroup),
//                          epilogue.cuh (a consumer's O store)
//   prefill/kernels.cuh    the module's entry points
// Every part calls the variant hooks of common/variant.cuh the same way.
//
// Requires sm_80+. Params and tile constants: prefill/params.h.
#pragma once

#include "common/mma_sm80.cuh"
#include "common/wgmma_sm90.cuh"
#include "prefill/params.h"

// fijit_cfg::kHeadDimVO, the head dim of v and o, is in the prelude only
// where it differs from kHeadDim (MLA's 192/128), so that no other tuple's
// translation unit changes; elsewhere qualified lookup, which takes a
// namespace's own member before those of the namespaces it uses, finds this
// default.
namespace fijit_cfg {
namespace vo_default {
constexpr int kHeadDimVO = kHeadDim;
}  // namespace vo_default
using namespace vo_default;
}  // namespace fijit_cfg

namespace fijit {
namespace prefill {

using DTypeQ = fijit_cfg::DTypeQ;
using DTypeKV = fijit_cfg::DTypeKV;
using DTypeO = fijit_cfg::DTypeO;
// The 16-bit input type the tile kernels, RoPE and consumer-loaded Q compute
// in: DTypeKV (= DTypeQ), or fp16 in an fp8 module, which compiles those
// paths but never runs them (prefill/fp8.cuh).
template <bool k16, class T16>
struct Input16 {
    using type = T16;
};
template <class T16>
struct Input16<false, T16> {
    using type = half_t;
};
using DTypeIn16 = typename Input16<Traits<DTypeKV>::kBytes == 2, DTypeKV>::type;
using Variant = fijit_cfg::Variant;
using P = fi_prefill_params;

constexpr int kKind = fijit_cfg::kKind;
// kHeadDim: q and k, the width of Q.K^T; kHeadDimVO: v and o, of P.V. They
// differ only for MLA's prefill (192 and 128: kSplitVO).
constexpr int kHeadDim = fijit_cfg::kHeadDim;
constexpr int kHeadDimVO = fijit_cfg::kHeadDimVO;
constexpr bool kSplitVO = kHeadDimVO != kHeadDim;
constexpr int kChunks = kHeadDim / 8;      // 16-byte chunks per row of Q and K
constexpr int kChunksVO = kHeadDimVO / 8;  // of V and O
// Compiled for sm_90a: tiles 0 and 1 run on wgmma (prefill/params.h).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int kSm90a = 1;
#else
constexpr int kSm90a = 0;
#endif
// The tile kernels' shapes of sm_90a (prefill/params.h) where their wgmma
// main loop is written for the tuple: not for kSplitVO, which runs the
// mma.sync tiles there too.
constexpr int kSm90aTiles = kSm90a && !kSplitVO;
constexpr int kStages = FI_PREFILL_STAGES;
constexpr unsigned int kRowBytes = kHeadDim * 2;
constexpr unsigned int kRowBytesVO = kHeadDimVO * 2;

constexpr bool kRope = fijit_cfg::kPos == fijit_cfg::kPosRopeLlama;
// With RoPE, keys are read rotated once, by fi_prefill_rope_k_kernel
// (rotate_keys below), from a workspace: rotating each K tile in every CTA
// that reads it cost 35-43% of the kernel's time (H100, hd 128, seq 4k/8k,
// 32/8 heads). The batch kinds always have a workspace (kRotatedK); single
// prefill when its caller gives one (p.rot_k set), else it rotates K tiles.
constexpr bool kRotatedK = kRope && kKind != FI_PREFILL_KIND_SINGLE;
constexpr bool kWindow = fijit_cfg::kMask == fijit_cfg::kMaskWindow;
// A sliding window is causal too (keys after the query are hidden).
constexpr bool kCausal = fijit_cfg::kMask == fijit_cfg::kMaskCausal || kWindow;
constexpr bool kCustom = fijit_cfg::kMask == fijit_cfg::kMaskCustom;
// A variant may turn softmax off (the weights are then its transformed logits)
// or ask for its mask on every tile.
constexpr bool kSoftmax = Variant::use_softmax;
constexpr bool kMaskEveryTile = Variant::mask_every_tile;
// Head dim 128 leaves the 4 x 32-row warps almost no registers (O takes 128
// per thread, S of a 64-key tile 64 more, the limit is 255), and there the
// tile loop is written to need fewer:
//  * kXor: ldmatrix addresses come from one base register per operand, one
//    XOR per fragment (frag_at), instead of one held address per fragment;
//  * kRecompute (masked tuples): the rows' token and head are recomputed
//    where needed (masked tiles, the epilogue) instead of held;
//  * O is rescaled only when a row's maximum grew (its scale is 1 otherwise,
//    rare after the first tiles): kLazyRow rescales the rows of each (MMA
//    tile, half) right after their softmax when one of them in the warp grew
//    (non-causal); kLazy rescales all of O once after the softmax when any
//    row grew (masked tuples, where the per-row branch measured slower).
// Measured on H100 (bench_prefill.py, interleaved, seq 4k/8k): +3-11% over
// 32-key steps (masked) and over the plain loop (non-causal), although ptxas
// reports 8-20 bytes of spill stores for them. Head dims 64 and 256 keep the
// plain loop (64: XOR addressing with lazy rescale measured 4-9% slower).
constexpr bool kTight = kHeadDim == 128;
constexpr bool kMasked = kCausal || kCustom;
constexpr bool kXor = kTight;
constexpr bool kRecompute = kTight && kMasked;
constexpr bool kLazy = kTight && kMasked;
constexpr bool kLazyRow = kTight && !kMasked;

static_assert(kKind == FI_PREFILL_KIND_SINGLE || kKind == FI_PREFILL_KIND_RAGGED ||
                  kKind == FI_PREFILL_KIND_PAGED,
              "prefill is included through prefill/single.cuh, ragged.cuh or paged.cuh");
static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256 ||
                  (kHeadDim == 192 && kHeadDimVO == 128),
              "prefill supports head_dim 64, 128 and 256, and 192 with v and o of 128");
static_assert(kHeadDimVO == kHeadDim || (kHeadDim == 192 && kHeadDimVO == 128),
              "a separate v/o head dim is 128 with head_dim 192");
static_assert(!kSplitVO || !kRope,
              "RoPE rotates all of q and k: MLA's split rope part is the caller's to rotate");
static_assert(kChunks % 8 == 0 && kChunksVO % 8 == 0,
              "the swizzle permutes 8 chunks within a row: rows are whole groups of 8");
static_assert(kStages == 2, "the pipeline below is written for double buffering");
static_assert(Traits<DTypeQ>::kBytes == Traits<DTypeKV>::kBytes && Traits<DTypeO>::kBytes == 2,
              "prefill expects q and kv of one size (16-bit, or fp8: prefill/fp8.cuh) and 16-bit o");
static_assert(kHeadDim <= FI_PREFILL_MAX_HEAD_DIM, "rope_freq table too small");

// Byte offset of chunk `ch` of row `row` in a swizzled tile of rows of
// kBytes (Q and K: kRowBytes; V: kRowBytesVO). The XOR stays within the
// row's group of 8 chunks; a row of 24 (head_dim 192) is three groups.
template <unsigned int kBytes>
__device__ __forceinline__ unsigned int swz_rows(int row, int ch)
{
    return (unsigned int)row * kBytes + (unsigned int)((ch ^ (row & 7)) * 16);
}
__device__ __forceinline__ unsigned int swz(int row, int ch) { return swz_rows<kRowBytes>(row, ch); }
__device__ __forceinline__ unsigned int swz_vo(int row, int ch)
{
    return swz_rows<kRowBytesVO>(row, ch);
}

// Byte offset of chunk `ch` of row `row` in a tile of kRows rows stored for
// wgmma (common/wgmma_sm90.cuh): 64-column panels of kRows x 128 bytes, the same
// XOR within each 128-byte row.
template <int kRows>
__device__ __forceinline__ unsigned int swz_panel(int row, int ch)
{
    return (unsigned int)(ch >> 3) * (kRows * 128u) + (unsigned int)row * 128u +
           (unsigned int)(((ch & 7) ^ (row & 7)) * 16);
}

// ldmatrix addressing. Every row a lane addresses in a fragment has the same
// row & 7 (= lane & 7), and the chunk it reads is 2k + (a lane bit b), so its
// address for step k is frag_base ^ (32k) with frag_base the address of
// chunk b of its row: one register per operand and one XOR per step (16-row
// steps are added as immediates). Exact because row bases are multiples of
// kRowBytes (the buffers are 1024-aligned) and 32k + 16 * 7 < kRowBytes.
__device__ __forceinline__ unsigned int frag_base(unsigned int tile, int row, int b)
{
    return tile + swz(row, b);
}
__device__ __forceinline__ unsigned int frag_at(unsigned int base, int k)
{
    return base ^ (unsigned int)(k * 32);
}
// True on every lane when `pred` holds on some lane of the warp.
__device__ __forceinline__ bool any_sync(bool pred)
{
    unsigned int r;
    asm volatile(
        "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n vote.sync.any.pred q, p, 0xffffffff;\n"
        " selp.u32 %0, 1, 0, q;\n}"
        : "=r"(r)
        : "r"((unsigned int)pred));
    return r != 0;
}

// x, opaque to the compiler: addresses derived from it inside the K/V loop
// are computed there (one XOR each) instead of being hoisted out of it and
// held in registers for the whole loop.
template <class T>
__device__ __forceinline__ T opaque(T x)
{
    asm volatile("" : "+r"(x));
    return x;
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int iclamp(int x, int lo, int hi) { return imin(imax(x, lo), hi); }

// The A fragment of P for keys 16kk..16kk+15 (mma.sync and register-A wgmma
// share its layout): the S accumulators of 8-key tiles 2kk and 2kk+1,
// rounded to the input type.
template <int kN>
__device__ __forceinline__ void p_fragment(const float (&s)[kN][4], int kk, unsigned int (&a)[4])
{
    a[0] = Traits<DTypeIn16>::pack2(s[2 * kk][0], s[2 * kk][1]);
    a[1] = Traits<DTypeIn16>::pack2(s[2 * kk][2], s[2 * kk][3]);
    a[2] = Traits<DTypeIn16>::pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = Traits<DTypeIn16>::pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// A tile kernel's shape (prefill/params.h): query rows, warps, rows per
// warp in 16-row MMA tiles, keys per K/V tile, and whether its products run
// on wgmma (prefill/tile/mainloop_sm90.cuh) or mma.sync (tile/mainloop_sm80.cuh).
template <int kTileIdx>
struct Cfg {
    static constexpr int kTileQ = FI_PREFILL_TILE_Q(kTileIdx);
    static constexpr bool kWgmma = FI_PREFILL_WGMMA(kTileIdx, kSm90aTiles);
    static constexpr int kWarps = FI_PREFILL_WARPS(kTileIdx, kHeadDim, kSm90aTiles);
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kMT = FI_PREFILL_ROWS_PER_WARP(kTileIdx, kHeadDim, kSm90aTiles) / 16;
    static constexpr int kTileKV = FI_PREFILL_TILE_KV(kTileIdx, kHeadDim, kSm90aTiles);
    static_assert(kTileKV <= 64, "a row's custom-mask bits of a K tile fit 64 bits");
    static_assert(kWarps * kMT * 16 == kTileQ, "warps must cover the query tile");
    static_assert(!kWgmma || (kMT == 1 && kTileQ % 64 == 0), "wgmma: warpgroups of 4 x 16 rows");
};

}  // namespace prefill
}  // namespace fijit
