// Prefill attention on tensor cores (FlashAttention-2 style), shared by the
// three prefill kinds: single request, batch over ragged K/V, batch over a
// paged K/V cache. The including file (prefill_single.cuh, prefill_ragged.cuh,
// prefill_paged.cuh) sets fijit_cfg::kKind; only the work lookup and the K/V
// row addressing (KVAccess) depend on it.
//
// Organisation of one CTA (one query tile of one request x one KV head):
//  * Rows of the query tile are packed (token, group head) pairs, so every
//    query head of a GQA group is served by the same K/V tiles. Q is loaded
//    once into shared memory, with RoPE and the variant's query_transform
//    (which folds in sm_scale by default) applied on the way, and rounded
//    back to the 16-bit input type.
//  * K and V tiles stream in with cp.async, double-buffered: tile t + 1 is
//    requested right after the one barrier per tile and lands while tile t is
//    computed. With RoPE the K tile is rotated in shared memory once per CTA
//    and tile (one more barrier).
//  * Each warp owns 16 or 32 query rows; S = Q.K^T and O += P.V run on
//    mma.sync m16n8k16 with fp32 accumulation, operands fed by ldmatrix
//    from shared memory laid out in 16-byte chunks XOR-swizzled by row
//    (chunk c of row r is stored at c ^ (r % 8)), which makes every ldmatrix
//    phase and every cp.async write conflict-free.
//  * Hopper (sm_90a), 128- and 64-row tiles: the warps form warpgroups of
//    64 rows (two and one), and each product is one asynchronous wgmma
//    per 16-wide k-step (fijit_wgmma.cuh) reading Q and K/V straight from
//    shared memory, P.V with P from registers. The tiles are then stored in
//    64-column panels with the same XOR (the hardware's 128-byte swizzle),
//    and each writer fences its stores for the async proxy before the
//    barrier that publishes them. Softmax, masks and the epilogue are shared:
//    a wgmma accumulator has the mma.sync layout, 16 rows per warp.
//  * Softmax is online, in registers (exp2 with log2e folded into one FFMA); P goes from the
//    S accumulators straight into the A fragments of P.V.
//  * Tiles of keys no query row of the CTA can see (causal, sliding window)
//    are never loaded, and a warp skips the math of a tile none of its own
//    rows can see. Masks are evaluated only on tiles that straddle a
//    boundary: the causal diagonal, the window's lower edge, the end of the
//    keys, and with kMaskCustom every tile. The variant's logits_mask hook
//    (the sliding window is one) is called on those same tiles only, unless
//    the variant sets mask_every_tile.
//  * The output is normalised, passed through output_transform, staged in the
//    warp's own rows of the Q buffer and written with 16-byte stores.
//
// Requires sm_80+. Params and tile constants: prefill_params.h.
#pragma once

#include "fijit_mma.cuh"
#include "fijit_wgmma.cuh"
#include "prefill_params.h"

namespace fijit {
namespace prefill {

using DTypeQ = fijit_cfg::DTypeQ;
using DTypeKV = fijit_cfg::DTypeKV;
using DTypeO = fijit_cfg::DTypeO;
using Variant = fijit_cfg::Variant;
using P = fi_prefill_params;

constexpr int kKind = fijit_cfg::kKind;
constexpr int kHeadDim = fijit_cfg::kHeadDim;
constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
// Compiled for sm_90a: tiles 0 and 1 run on wgmma (prefill_params.h).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int kSm90a = 1;
#else
constexpr int kSm90a = 0;
#endif
constexpr int kStages = FI_PREFILL_STAGES;
constexpr unsigned int kRowBytes = kHeadDim * 2;

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
              "prefill.cuh is included through prefill_single/ragged/paged.cuh");
static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
              "prefill supports head_dim 64, 128 and 256");
static_assert(kChunks >= 8, "the swizzle permutes 8 chunks within a row");
static_assert(kStages == 2, "the pipeline below is written for double buffering");
static_assert(Traits<DTypeQ>::kBytes == 2 && Traits<DTypeKV>::kBytes == 2 &&
                  Traits<DTypeO>::kBytes == 2,
              "prefill expects 16-bit q, kv and o");
static_assert(kHeadDim <= FI_PREFILL_MAX_HEAD_DIM, "rope_freq table too small");

// Byte offset of chunk `ch` of row `row` in a swizzled tile.
__device__ __forceinline__ unsigned int swz(int row, int ch)
{
    return (unsigned int)row * kRowBytes + (unsigned int)((ch ^ (row & 7)) * 16);
}

// Byte offset of chunk `ch` of row `row` in a tile of kRows rows stored for
// wgmma (fijit_wgmma.cuh): 64-column panels of kRows x 128 bytes, the same
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

// What one CTA works on.
struct Work {
    int q_begin;      // first token of the request in q, o and lse
    int qo_len, kv_len;
    int tile;         // query tile of the request
    int kv_head;
    int kv_begin;     // ragged: first key token; paged: first kv_indices entry
    int k_row0;       // kRotatedK: the request's first row of the rotated keys
    long long mask_offset;  // kMaskCustom: first bit of the request
};

// Block b (in launch order, b = blockIdx.y * gridDim.x + blockIdx.x) of the
// grid (work items, kv heads) takes work item `item` of kv head `kv_head`:
// heads are cut into sections of p.heads_per_section, and within a section
// the items come in list order with the section's heads fastest. Item 0 is
// the longest (single prefill: the last query tile; batch kinds: the plan
// sorts its list longest first), so the long CTAs start first everywhere
// and the short ones fill the tail, while the K/V of the heads in flight
// (one section) stays small enough for L2.
__device__ __forceinline__ void block_work(const P &p, int b, int n, int heads, int &item,
                                           int &kv_head)
{
    if constexpr (!kCausal) {  // every item costs the same: the grid's own order
        item = b % n;
        kv_head = b / n;
        return;
    }
    const int sec = imax(1, p.heads_per_section);
    const int first = b / (sec * n) * sec;  // first head of this block's section
    const int s = imin(sec, heads - first);
    const int i = b - first * n;
    item = i / s;
    kv_head = first + (i - item * s);
}

// The work of block b in launch order of a grid of n work items x `heads`
// kv heads (the tile kernels: this block's own; the persistent Hopper loop
// walks several).
__device__ __forceinline__ Work get_work(const P &p, int b, int n, int heads)
{
    Work w;
    int item;
    block_work(p, b, n, heads, item, w.kv_head);
    if constexpr (kKind == FI_PREFILL_KIND_SINGLE) {
        w.q_begin = 0;
        w.qo_len = p.qo_len;
        w.kv_len = p.kv_len;
        w.tile = n - 1 - item;
        w.kv_begin = 0;
        w.k_row0 = 0;
        w.mask_offset = 0;
    } else {
        const int b = p.work_request[item];
        w.tile = p.work_tile[item];
        w.q_begin = p.qo_indptr[b];
        w.qo_len = p.qo_indptr[b + 1] - w.q_begin;
        w.kv_begin = p.kv_indptr[b];
        // Ragged: the rotated keys keep the rows of k, so kv_begin is the first.
        w.k_row0 = !kRotatedK                        ? 0
                   : kKind == FI_PREFILL_KIND_RAGGED ? w.kv_begin
                                                     : p.kv_token_start[b];
        const int n = p.kv_indptr[b + 1] - w.kv_begin;
        if constexpr (kKind == FI_PREFILL_KIND_RAGGED)
            w.kv_len = n;
        else
            w.kv_len = n > 0 ? (n - 1) * p.page_size + p.kv_last_page_len[b] : 0;
        w.mask_offset = 0;
        if constexpr (kCustom)
            if (p.custom_offsets != nullptr) w.mask_offset = p.custom_offsets[b];
    }
    return w;
}

// Element offsets of key j of the request in k and v (before the head offset).
__device__ __forceinline__ void kv_row_offsets(const P &p, const Work &w, int j, long long &ko,
                                               long long &vo)
{
    if constexpr (kKind == FI_PREFILL_KIND_SINGLE) {
        ko = (long long)j * p.k_stride_n;
        vo = (long long)j * p.v_stride_n;
    } else if constexpr (kKind == FI_PREFILL_KIND_RAGGED) {
        ko = (long long)(w.kv_begin + j) * p.k_stride_n;
        vo = (long long)(w.kv_begin + j) * p.v_stride_n;
    } else {
        const int page = p.kv_indices[w.kv_begin + j / p.page_size];
        const int slot = j % p.page_size;
        ko = (long long)page * p.k_stride_page + (long long)slot * p.k_stride_n;
        vo = (long long)page * p.v_stride_page + (long long)slot * p.v_stride_n;
    }
}

// The A fragment of P for keys 16kk..16kk+15 (mma.sync and register-A wgmma
// share its layout): the S accumulators of 8-key tiles 2kk and 2kk+1,
// rounded to the input type.
template <int kN>
__device__ __forceinline__ void p_fragment(const float (&s)[kN][4], int kk, unsigned int (&a)[4])
{
    a[0] = Traits<DTypeKV>::pack2(s[2 * kk][0], s[2 * kk][1]);
    a[1] = Traits<DTypeKV>::pack2(s[2 * kk][2], s[2 * kk][3]);
    a[2] = Traits<DTypeKV>::pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = Traits<DTypeKV>::pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// RoPE (rotate-half) of the pair of chunks (ch, ch + kChunks/2) at `pos`:
// x' = x cos - y sin, y' = y cos + x sin with y the element hd/2 further.
__device__ __forceinline__ void rope_pair(const P &p, float (&x)[8], float (&y)[8], int ch,
                                          float pos)
{
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        float s, c;
        sincos_pos(pos, p.rope_freq[ch * 8 + e], s, c);
        const float xr = fma_(-y[e], s, x[e] * c);
        y[e] = fma_(x[e], s, y[e] * c);
        x[e] = xr;
    }
}

// rope_pair on the 16-byte chunks ch and ch + kChunks / 2 of a key row,
// rounded back to DTypeKV once.
__device__ __forceinline__ void rope_chunks(const P &p, vec16_t &lo, vec16_t &hi, int ch, float pos)
{
    float x[8], y[8];
    unpack8<DTypeKV>(lo, x);
    unpack8<DTypeKV>(hi, y);
    rope_pair(p, x, y, ch, pos);
    lo = pack8<DTypeKV>(x);
    hi = pack8<DTypeKV>(y);
}

// The 32-bit word of the custom mask at the aligned address `a`, from the
// bytes in [lo, hi) only (the others read as 0): a request's mask may begin
// and end at any byte, and no byte outside it is read.
__device__ __forceinline__ unsigned int mask_word(unsigned long long a, unsigned long long lo,
                                                  unsigned long long hi)
{
    if (a >= lo && a + 4 <= hi) return __ldg(reinterpret_cast<const unsigned int *>(a));
    unsigned int word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b)
        if (a + b >= lo && a + b < hi)
            word |= (unsigned int)__ldg(reinterpret_cast<const unsigned char *>(a + b)) << (8 * b);
    return word;
}

// Bits [bit, bit + n) of the custom mask (n <= 64), bit bit + i at bit i of
// the result, the rest 0, for request w (bits [w.mask_offset, w.mask_offset +
// qo_len * kv_len)): from the aligned 32-bit words that hold them, reading no
// byte outside the request's bits (so the buffer may end at its last bit's
// byte, ceil(bits / 8) bytes, and begin anywhere).
__device__ __forceinline__ unsigned long long custom_bits(const P &p, const Work &w, long long bit,
                                                          int n)
{
    const unsigned long long base = reinterpret_cast<unsigned long long>(p.custom_mask);
    const unsigned long long begin = base + (unsigned long long)(w.mask_offset >> 3);
    const unsigned long long end =
        base + (unsigned long long)((w.mask_offset + (long long)w.qo_len * w.kv_len + 7) >> 3);
    bit += (long long)(base & 3) * 8;
    const unsigned long long first = (base & ~3ull) + (unsigned long long)(bit >> 5) * 4;
    const int sh = (int)(bit & 31);
    const int last = (sh + n - 1) >> 5;  // words 0..last hold the bits
    unsigned int word[3] = {0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < 3; ++i)
        if (i <= last) word[i] = mask_word(first + 4 * i, begin, end);
    const unsigned int lo = __funnelshift_r(word[0], word[1], sh);
    const unsigned int hi = __funnelshift_r(word[1], word[2], sh);
    const unsigned long long bits = ((unsigned long long)hi << 32) | lo;
    return n >= 64 ? bits : bits & ((1ull << n) - 1);
}

// The RoPE pre-pass: key j of request b (single prefill: the one), kv head
// blockIdx.y, rotated at position rope_offset + j in fp32 and rounded once
// (as the tile loop rotates a K tile: the same bits), to row
// kv_token_start[b] + j of rot_k [kv_tokens, num_kv_heads, head_dim]. A
// thread takes one pair of 16-byte chunks (ch, ch + kChunks / 2) of a row.
__device__ __forceinline__ void rotate_keys(const P &p)
{
    if constexpr (kRope) {
        constexpr bool kSingle = kKind == FI_PREFILL_KIND_SINGLE;
        constexpr int kPairs = kChunks / 2;
        const int h = (int)blockIdx.y;
        const long long n = (long long)p.kv_tokens * kPairs;
        for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < n;
             c += (long long)gridDim.x * blockDim.x) {
            const int t = (int)(c / kPairs), ch = (int)(c % kPairs);
            int b = 0, top = kSingle ? 0 : p.batch_size - 1;  // the last request starting at or before t
            while (b < top) {
                const int mid = (b + top + 1) / 2;
                if (p.kv_token_start[mid] <= t) b = mid;
                else top = mid - 1;
            }
            const int j = kSingle ? t : t - p.kv_token_start[b];
            Work w = {};
            w.kv_begin = kSingle ? 0 : p.kv_indptr[b];
            long long ko, vo;
            kv_row_offsets(p, w, j, ko, vo);
            const DTypeKV *src = static_cast<const DTypeKV *>(p.k) + h * p.k_stride_h + ko;
            vec16_t lo = ldg16(src + ch * 8), hi = ldg16(src + (ch + kPairs) * 8);
            rope_chunks(p, lo, hi, ch, (float)(p.rope_offset + j));
            DTypeKV *dst = static_cast<DTypeKV *>(p.rot_k) +
                           ((long long)t * p.num_kv_heads + h) * kHeadDim;
            stg16(dst + ch * 8, lo);
            stg16(dst + (ch + kPairs) * 8, hi);
        }
    }
}

// Chunks ch and ch + kChunks / 2 of packed query row pr of request w, as
// the MMAs read them: RoPE'd (position rope_offset + kv_len - qo_len +
// token), passed through the variant's query_transform (which folds in
// sm_scale by default) and rounded to the 16-bit input type; zeros for a
// row past the request.
__device__ __forceinline__ void query_chunks(const P &p, const Work &w, int pr, int ch, vec16_t &lo,
                                             vec16_t &hi)
{
    const int G = p.group_size;
    float x[8], y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = y[e] = 0.f;
    if (pr < w.qo_len * G) {
        const int token = pr / G;
        const int head = w.kv_head * G + pr % G;
        const DTypeQ *src = static_cast<const DTypeQ *>(p.q) +
                            (long long)(w.q_begin + token) * p.q_stride_n +
                            (long long)head * p.q_stride_h;
        unpack8<DTypeQ>(ldg16(src + ch * 8), x);
        unpack8<DTypeQ>(ldg16(src + (ch + kChunks / 2) * 8), y);
        if constexpr (kRope)
            rope_pair(p, x, y, ch, (float)(p.rope_offset + w.kv_len - w.qo_len + token));
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            x[e] = Variant::query_transform(p, x[e], head, ch * 8 + e);
            y[e] = Variant::query_transform(p, y[e], head, (ch + kChunks / 2) * 8 + e);
        }
    }
    lo = pack8<DTypeKV>(x);
    hi = pack8<DTypeKV>(y);
}

// Whether the K tile at key t0 needs masks for rows of tokens tok_lo..tok_hi
// (positions + off): it straddles the end of the keys, the causal diagonal
// or the window's lower edge, or every tile does (custom mask, the variant's
// mask_every_tile).
__device__ __forceinline__ bool tile_needs_mask(const P &p, const Work &w, int t0, int tile_kv,
                                                int tok_lo, int tok_hi, int off)
{
    bool need = kCustom || kMaskEveryTile || t0 + tile_kv > w.kv_len;
    if constexpr (kCausal) need = need || t0 + tile_kv - 1 > tok_lo + off;
    if constexpr (kWindow)
        need = need || (p.window_left >= 0 && t0 < tok_hi + off - p.window_left);
    return need;
}

// Logit s of query position qpos (head `head`) and key j on a masked tile:
// -inf (0 without softmax) for a key past the request, after the query
// (causal), outside the custom mask (`bit`) or hidden by the variant's
// logits_mask; else the variant's logits_transform of it.
__device__ __forceinline__ float masked_logit(const P &p, const Work &w, float s, int head, int j,
                                              int qpos, bool bit)
{
    bool visible = j < w.kv_len;
    if constexpr (kCausal) visible = visible && j <= qpos;
    visible = visible && bit && Variant::logits_mask(p, head, j, qpos);
    return visible ? Variant::logits_transform(p, s, head, j, qpos) : (kSoftmax ? -inf_() : 0.f);
}

template <int kTileIdx>
struct Cfg {
    static constexpr int kTileQ = FI_PREFILL_TILE_Q(kTileIdx);
    static constexpr bool kWgmma = FI_PREFILL_WGMMA(kTileIdx, kSm90a);
    static constexpr int kWarps = FI_PREFILL_WARPS(kTileIdx, kHeadDim, kSm90a);
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kMT = FI_PREFILL_ROWS_PER_WARP(kTileIdx, kHeadDim, kSm90a) / 16;
    static constexpr int kTileKV = FI_PREFILL_TILE_KV(kTileIdx, kHeadDim, kSm90a);
    static_assert(kTileKV <= 64, "a row's custom-mask bits of a K tile fit 64 bits");
    static_assert(kWarps * kMT * 16 == kTileQ, "warps must cover the query tile");
    static_assert(!kWgmma || (kMT == 1 && kTileQ % 64 == 0), "wgmma: warpgroups of 4 x 16 rows");
};

template <int kTileIdx>
__device__ __forceinline__ void run(const P &p, unsigned char *smem)
{
    using C = Cfg<kTileIdx>;
    constexpr int kTileQ = C::kTileQ;
    constexpr int kThreads = C::kThreads;
    constexpr int kMT = C::kMT;           // 16-row MMA tiles per warp
    constexpr bool kWg = C::kWgmma;       // S and P.V on wgmma, per warpgroup
    constexpr bool kLdmXor = kXor && !kWg;  // kXor applies to ldmatrix addressing
    constexpr int kTileKV = C::kTileKV;
    constexpr unsigned int kKVTileBytes = kTileKV * kRowBytes;
    // Width of the P.V wgmma: head_dim, spelled through C so that the name
    // stays dependent (never instantiated for tiles without wgmma).
    constexpr int kWgDim = C::kWgmma ? kHeadDim : 64;
    constexpr int kNT = kTileKV / 8;      // 8-key column tiles of S
    constexpr int kDT = kHeadDim / 8;     // 8-wide column tiles of O

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const Work w = get_work(p, (int)blockIdx.y * (int)gridDim.x + (int)blockIdx.x, (int)gridDim.x,
                            (int)gridDim.y);
    const int kv_head = w.kv_head;
    const int G = p.group_size;
    const int rows = w.qo_len * G;
    const int row0 = w.tile * kTileQ;
    if (row0 >= rows) return;  // whole CTA: nothing to do
    const int off = w.kv_len - w.qo_len;  // query i sits at key position i + off
    const int tok_lo = row0 / G;
    const int tok_hi = (imin(rows, row0 + kTileQ) - 1) / G;

    // Keys any row of this CTA can see: [kv_lo, kv_hi).
    int kv_lo = 0, kv_hi = w.kv_len;
    if constexpr (kCausal) kv_hi = imax(0, imin(kv_hi, tok_hi + off + 1));
    if constexpr (kWindow)
        if (p.window_left >= 0) kv_lo = imax(0, tok_lo + off - p.window_left);
    const int kv_start = kv_lo / kTileKV * kTileKV;
    const int num_tiles = kv_hi > kv_start ? (kv_hi - kv_start + kTileKV - 1) / kTileKV : 0;

    const unsigned int sq = smem_addr(smem);
    const unsigned int sk = sq + kTileQ * kRowBytes;
    const unsigned int sv = sk + kStages * kKVTileBytes;
    // Where chunk ch of row r of the Q tile and of a K/V tile lives: the
    // wgmma panel layout or the row-major one ldmatrix reads.
    auto q_at = [](int r, int ch) { return kWg ? swz_panel<kTileQ>(r, ch) : swz(r, ch); };
    auto kv_at = [](int r, int ch) { return kWg ? swz_panel<kTileKV>(r, ch) : swz(r, ch); };

    const DTypeKV *kbase = static_cast<const DTypeKV *>(p.k) + kv_head * p.k_stride_h;
    const DTypeKV *vbase = static_cast<const DTypeKV *>(p.v) + kv_head * p.v_stride_h;

    // One cp.async group per tile (K and V); keys past the end are zero-filled.
    // Each thread copies one 16-byte column of the tile, every kLoadRows-th row.
    constexpr int kLoadRows = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kTileKV % kLoadRows == 0, "whole rows per pass");
    const int load_row = tid / kChunks, load_ch = tid % kChunks;
    auto load_kv = [&](int stage, int tile) {
        const int t0 = kv_start + tile * kTileKV;
#pragma unroll 2
        for (int i = 0; i < kTileKV / kLoadRows; ++i) {
            const int r = load_row + i * kLoadRows;
            const bool valid = t0 + r < w.kv_len;
            long long ko = 0, vo = 0;
            if (valid) kv_row_offsets(p, w, t0 + r, ko, vo);
            if constexpr (kRotatedK) ko = (long long)(w.k_row0 + t0 + r) * p.k_stride_n;
            const unsigned int dst = stage * kKVTileBytes + kv_at(r, load_ch);
            cp_async16(sk + dst, kbase + ko + load_ch * 8, valid);
            cp_async16(sv + dst, vbase + vo + load_ch * 8, valid);
        }
        cp_async_commit();
    };

    if (num_tiles > 0) load_kv(0, 0);

    // Q: rotated, transformed, rounded to the MMA input type, swizzled.
    // Rows past the request are zero and never stored.
#pragma unroll
    for (int c = tid; c < kTileQ * (kChunks / 2); c += kThreads) {
        const int r = c / (kChunks / 2), ch = c % (kChunks / 2);
        vec16_t lo, hi;
        query_chunks(p, w, row0 + r, ch, lo, hi);
        sts128(sq + q_at(r, ch), lo);
        sts128(sq + q_at(r, ch + kChunks / 2), hi);
    }
    if constexpr (kWg) wg::fence_proxy_async();  // Q is read by wgmma
    __syncthreads();

    // This thread holds rows g and g + 8 of each of its warp's MMA tiles.
    // row_at gives the token and query head of row (mt, h); rows past the
    // request borrow the last row (never stored). They are held in
    // registers, or with kRecompute recomputed where needed (masked tiles,
    // the epilogue, variants that read them).
    const int g = lane / 4, t = lane % 4;
    const int warp_row0 = warp * kMT * 16;
    const int thr_row0 = row0 + warp_row0 + g;
    int row_tok[kMT][2], row_head[kMT][2];
    auto row_of = [&](int mt, int h, int pr, int &tok, int &head) {
        pr = imin(pr + mt * 16 + 8 * h, rows - 1);
        tok = pr / G;
        head = kv_head * G + pr % G;
    };
    if constexpr (!kRecompute)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) row_of(mt, h, thr_row0, row_tok[mt][h], row_head[mt][h]);
    auto row_at = [&](int mt, int h, int &tok, int &head) {
        if constexpr (kRecompute) {
            row_of(mt, h, opaque(thr_row0), tok, head);
        } else {
            tok = row_tok[mt][h];
            head = row_head[mt][h];
        }
    };
    // fn(mt, h, tok, head) for each row this thread holds.
    auto for_each_row = [&](auto fn) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int tok, head;
                row_at(mt, h, tok, head);
                fn(mt, h, tok, head);
            }
    };

    // Fragment bases (see frag_base): Q rows of this warp, K rows (keys of
    // B in S = Q K^T), V rows (keys of B in O += P V, transposed load).
    const unsigned int q_frag = frag_base(sq, warp_row0 + (lane & 15), lane >> 4);
    const unsigned int k_frag = frag_base(sk, ((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1);
    const unsigned int v_frag = frag_base(sv, (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

    // Positions of the first and last query of the rows that skip a tile
    // together: the warp's, or with wgmma its warpgroup's (they multiply as one).
    constexpr int kSkipRows = kWg ? 64 : kMT * 16;
    const int skip_row0 = warp_row0 / kSkipRows * kSkipRows;
    const int warp_pos_lo = imin(row0 + skip_row0, rows - 1) / G + off;
    const int warp_pos_hi = (imin(row0 + skip_row0 + kSkipRows, rows) - 1) / G + off;

    float o[kMT][kDT][4];
    float m[kMT][2], d[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            m[mt][h] = kSoftmax ? -inf_() : 0.f;
            d[mt][h] = 0.f;
        }
    }

    for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = tile & 1;
        const unsigned int skt = sk + stage * kKVTileBytes;
        // kXor: the fragment bases, opaque so that the per-fragment
        // addresses are not hoisted out of the loop into registers.
        // (wgmma reads shared memory through descriptors: none there.)
        const unsigned int qf = kLdmXor ? opaque(q_frag) : 0u;
        const unsigned int kf = kLdmXor ? opaque(k_frag + stage * kKVTileBytes) : 0u;
        const unsigned int vf = kLdmXor ? opaque(v_frag + stage * kKVTileBytes) : 0u;
        const unsigned int svt = sv + stage * kKVTileBytes;
        const int t0 = kv_start + tile * kTileKV;

        // This tile's K and V have landed and are visible to all, and every
        // warp is done with the other stage: the next tile goes there and
        // streams in while this one is computed.
        cp_async_wait<0>();
        if constexpr (kWg) wg::fence_proxy_async();  // the tile is read by wgmma
        __syncthreads();
        if (tile + 1 < num_tiles) load_kv(stage ^ 1, tile + 1);
        if constexpr (kRope && !kRotatedK) {
            if (p.rot_k == nullptr) {  // block-uniform
#pragma unroll
                for (int c = tid; c < kTileKV * (kChunks / 2); c += kThreads) {
                    const int r = c / (kChunks / 2), ch = c % (kChunks / 2);
                    vec16_t lo = lds128(skt + kv_at(r, ch));
                    vec16_t hi = lds128(skt + kv_at(r, ch + kChunks / 2));
                    rope_chunks(p, lo, hi, ch, (float)(p.rope_offset + t0 + r));
                    sts128(skt + kv_at(r, ch), lo);
                    sts128(skt + kv_at(r, ch + kChunks / 2), hi);
                }
                if constexpr (kWg) wg::fence_proxy_async();
                __syncthreads();
            }
        }

        if constexpr (kCausal) {
            bool warp_skip = t0 > warp_pos_hi;
            if constexpr (kWindow)
                warp_skip = warp_skip ||
                            (p.window_left >= 0 && t0 + kTileKV - 1 < warp_pos_lo - p.window_left);
            if (warp_skip) continue;  // its state is what the hidden keys would leave
        }
        // kCustom: the bits of this thread's rows for the tile's keys, bit j - t0
        // for key j, requested before S so that their latency hides behind it.
        unsigned long long mask_bits[kMT][2];
        if constexpr (kCustom)
            for_each_row([&](int mt, int h, int tok, int) {
                mask_bits[mt][h] = custom_bits(p, w, w.mask_offset + (long long)tok * w.kv_len + t0,
                                               imin(kTileKV, w.kv_len - t0));
            });
        // S = Q K^T for this warp's rows.
        float s[kMT][kNT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
        if constexpr (kWg) {
            // The warpgroup's 64 rows of Q times the tile's keys, one wgmma per
            // 16 columns of head_dim: 32 bytes into the 128-byte rows of panel kk / 4.
            const unsigned int q_wg = sq + (unsigned int)(warp / 4) * 64u * 128u;
            wg::fence_regs(s[0]);
            wg::fence();
#pragma unroll
            for (int kk = 0; kk < kHeadDim / 16; ++kk) {
                const unsigned int at = (unsigned int)(kk & 3) * 32u;
                const unsigned int a = q_wg + (kk >> 2) * kTileQ * 128u + at;
                const unsigned int b = skt + (kk >> 2) * kTileKV * 128u + at;
                wg::Mma<DTypeKV, kTileKV>::ss(s[0], wg::desc(a, 0), wg::desc(b, 0), 1);
            }
            wg::commit();
            wg::wait<0>();
            wg::fence_regs(s[0]);
        } else {
#pragma unroll
            for (int kk = 0; kk < kHeadDim / 16; ++kk) {
                unsigned int a[kMT][4];
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt)
                    ldmatrix_x4(a[mt], kLdmXor ? frag_at(qf, kk) + mt * 16 * kRowBytes
                                             : sq + swz(warp_row0 + mt * 16 + (lane & 15),
                                                        kk * 2 + (lane >> 4)));
#pragma unroll
                for (int np = 0; np < kNT / 2; ++np) {
                    unsigned int b[4];
                    ldmatrix_x4(b, kLdmXor ? frag_at(kf, kk) + np * 16 * kRowBytes
                                         : skt + swz(np * 16 + ((lane >> 4) << 3) + (lane & 7),
                                                     kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
                    for (int mt = 0; mt < kMT; ++mt) {
                        Mma<DTypeKV>::run(s[mt][2 * np], a[mt], b[0], b[1]);
                        Mma<DTypeKV>::run(s[mt][2 * np + 1], a[mt], b[2], b[3]);
                    }
                }
            }
        }

        // Final logits (variant transform, natural units) are masked on
        // boundary tiles only.
        if (tile_needs_mask(p, w, t0, kTileKV, tok_lo, tok_hi, off)) {
            for_each_row([&](int mt, int h, int tok, int head) {
                const int qpos = tok + off;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        const int j = t0 + nt * 8 + 2 * t + (e & 1);
                        bool bit = true;
                        if constexpr (kCustom) bit = (mask_bits[mt][h] >> (j - t0)) & 1;
                        s[mt][nt][e] = masked_logit(p, w, s[mt][nt][e], head, j, qpos, bit);
                    }
            });
        } else {
            for_each_row([&](int mt, int h, int tok, int head) {
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e)
                        s[mt][nt][e] = Variant::logits_transform(
                            p, s[mt][nt][e], head, t0 + nt * 8 + 2 * t + (e & 1), tok + off);
            });
        }

        // Online softmax; m is in natural units and exp(x - m) is computed as
        // exp2(x * log2e - m * log2e), one FFMA per element. A row that has
        // seen only hidden keys keeps m = -inf; `base` avoids -inf - -inf. d
        // is this thread's partial sum (its columns); the four lanes of a row
        // add up at the end. Without softmax, S already holds the weights.
        if constexpr (kSoftmax) {
            float scale[kMT][2];
            bool grew = false;
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float mx = m[mt][h];
#pragma unroll
                    for (int nt = 0; nt < kNT; ++nt)
                        mx = fmax_(mx, fmax_(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
                    mx = fmax_(mx, shfl_xor(mx, 1));
                    mx = fmax_(mx, shfl_xor(mx, 2));
                    const float base2 = (mx == -inf_() ? 0.f : mx) * kLog2e;
                    scale[mt][h] = exp2_fast(fma_(m[mt][h], kLog2e, -base2));
                    const bool grew_row = mx != m[mt][h];
                    grew = grew || grew_row;
                    m[mt][h] = mx;
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            s[mt][nt][2 * h + e] =
                                exp2_fast(fma_(s[mt][nt][2 * h + e], kLog2e, -base2));
                            sum += s[mt][nt][2 * h + e];
                        }
                    d[mt][h] = fma_(d[mt][h], scale[mt][h], sum);
                    // kLazyRow: only when the maximum of one of these rows
                    // (in the warp) grew.
                    if constexpr (!kLazy)
                        if (!kLazyRow || any_sync(grew_row))
#pragma unroll
                        for (int dt = 0; dt < kDT; ++dt) {
                            o[mt][dt][2 * h] *= scale[mt][h];
                            o[mt][dt][2 * h + 1] *= scale[mt][h];
                        }
                }
            // kLazy: O is rescaled here, only when some row of the warp has
            // a new maximum.
            if constexpr (kLazy)
                if (any_sync(grew))
#pragma unroll
                    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                        for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
                            for (int e = 0; e < 4; ++e) o[mt][dt][e] *= scale[mt][e >> 1];
        }

        // O += P V: the S accumulators of two 8-key tiles form one A fragment.
        if constexpr (kWg) {
            // B = V, N-major: 16 keys per wgmma (rows kk * 16 of every panel).
            unsigned int a[kTileKV / 16][4];
#pragma unroll
            for (int kk = 0; kk < kTileKV / 16; ++kk) {
                p_fragment(s[0], kk, a[kk]);
            }
            wg::fence_regs(o[0]);
            wg::fence();
#pragma unroll
            for (int kk = 0; kk < kTileKV / 16; ++kk)
                wg::Mma<DTypeKV, kWgDim>::rs(o[0], a[kk],
                                             wg::desc(svt + kk * 16u * 128u, kTileKV * 128u), 1);
            wg::commit();
            wg::wait<0>();
            wg::fence_regs(o[0]);
            wg::fence_regs(a);
        } else {
#pragma unroll
            for (int kk = 0; kk < kTileKV / 16; ++kk) {
                unsigned int a[kMT][4];
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) p_fragment(s[mt], kk, a[mt]);
#pragma unroll
                for (int dp = 0; dp < kHeadDim / 16; ++dp) {
                    unsigned int b[4];
                    ldmatrix_x4_trans(
                        b, kLdmXor ? frag_at(vf, dp) + kk * 16 * kRowBytes
                                 : svt + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                             dp * 2 + (lane >> 4)));
#pragma unroll
                    for (int mt = 0; mt < kMT; ++mt) {
                        Mma<DTypeKV>::run(o[mt][2 * dp], a[mt], b[0], b[1]);
                        Mma<DTypeKV>::run(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    // Epilogue: normalise, output hook, stage in this warp's Q rows (only
    // this warp ever read them), then 16-byte stores of whole rows. The
    // __syncwarp orders every lane's last ldmatrix of Q before any lane's
    // staging store (compute-sanitizer racecheck reported the pair).
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            d[mt][h] += shfl_xor(d[mt][h], 1);
            d[mt][h] += shfl_xor(d[mt][h], 2);
            // d == 0: no visible key: output 0, lse -inf. Without softmax:
            // the weighted sum as it is, lse 0.
            const float inv = !kSoftmax ? 1.f : d[mt][h] > 0.f ? rcp_fast(d[mt][h]) : 0.f;
            const float lse = !kSoftmax        ? 0.f
                              : d[mt][h] > 0.f ? fma_(log2_fast(d[mt][h]), kLn2, m[mt][h])
                                               : -inf_();
            const int r = warp_row0 + mt * 16 + g + 8 * h;
            int tok, head;
            row_at(mt, h, tok, head);
#pragma unroll
            for (int dt = 0; dt < kDT; ++dt) {
                const int col = dt * 8 + 2 * t;
                const float v0 = Variant::output_transform(p, o[mt][dt][2 * h] * inv, head, col, lse);
                const float v1 =
                    Variant::output_transform(p, o[mt][dt][2 * h + 1] * inv, head, col + 1, lse);
                sts32(sq + q_at(r, dt) + 4 * t, Traits<DTypeO>::pack2(v0, v1));
            }
            if (p.lse != nullptr && t == 0 && row0 + r < rows)
                p.lse[(long long)(w.q_begin + tok) * p.num_qo_heads + head] = lse;
        }
    __syncwarp();
#pragma unroll
    for (int c = lane; c < kMT * 16 * kChunks; c += 32) {
        const int r = warp_row0 + c / kChunks, ch = c % kChunks;
        const int pr = row0 + r;
        if (pr < rows) {
            const int token = pr / G;
            const int head = kv_head * G + pr % G;
            DTypeO *dst = static_cast<DTypeO *>(p.o) + (long long)(w.q_begin + token) * p.o_stride_n +
                          (long long)head * p.o_stride_h + ch * 8;
            stg16(dst, lds128(sq + q_at(r, ch)));
        }
    }
}

}  // namespace prefill
}  // namespace fijit

#include "prefill_sm90.cuh"

// The module's kernels, one per query tile, in the order of src/kinds.c
// (tile sizes and warps in prefill_params.h).
#define FI_PREFILL_BOUNDS(i)                                                                \
    __launch_bounds__(FI_PREFILL_WARPS(i, fijit_cfg::kHeadDim, fijit::prefill::kSm90a) * 32, \
                      FI_PREFILL_MIN_BLOCKS(i, fijit_cfg::kHeadDim, fijit::prefill::kSm90a))
extern "C" __global__ void FI_PREFILL_BOUNDS(0) fi_prefill_kernel_q128(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q128[];
    fijit::prefill::run<0>(p, smem_q128);
}

extern "C" __global__ void FI_PREFILL_BOUNDS(1) fi_prefill_kernel_q64(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q64[];
    fijit::prefill::run<1>(p, smem_q64);
}

extern "C" __global__ void FI_PREFILL_BOUNDS(2) fi_prefill_kernel_q16(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q16[];
    fijit::prefill::run<2>(p, smem_q16);
}

// The RoPE pre-pass (empty without RoPE).
extern "C" __global__ void __launch_bounds__(FI_PREFILL_ROPE_THREADS)
    fi_prefill_rope_k_kernel(const fi_prefill_params p)
{
    fijit::prefill::rotate_keys(p);
}

// The Hopper main loop for 128-row tiles (prefill_sm90.cuh), in modules for
// sm_90a of the tuples FI_PREFILL_WS_TUPLE accepts; empty elsewhere.
namespace fijit {
namespace prefill {
constexpr bool kWsTuple = kSm90a && FI_PREFILL_WS_TUPLE(kKind, kCustom);
template <bool kOn, int kUnused = 0>
struct WsEntry {
    static __device__ __forceinline__ void run(const P &, const fi_prefill_ws &, unsigned char *) {}
};
template <int kUnused>
struct WsEntry<true, kUnused> {
    static __device__ __forceinline__ void run(const P &p, const fi_prefill_ws &maps,
                                               unsigned char *smem)
    {
        ws::run(p, maps, smem);
    }
};
}  // namespace prefill
}  // namespace fijit

extern "C" __global__ void __launch_bounds__(FI_PREFILL_WS_THREADS, 1)
    fi_prefill_kernel_ws(const fi_prefill_params p, const __grid_constant__ fi_prefill_ws maps)
{
    extern __shared__ __align__(1024) unsigned char smem_ws[];
    fijit::prefill::WsEntry<fijit::prefill::kWsTuple>::run(p, maps, smem_ws);
}
