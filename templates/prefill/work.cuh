// Prefill's tile scheduler: which query tile of which request, and which kv
// head, a block computes (the tile kernels: their own block; the persistent
// Hopper kernel: every gridDim.x-th block), and where key j of a request
// lives in k and v for the kind (single, ragged, paged).
#pragma once

#include "prefill/common.cuh"

namespace fijit {
namespace prefill {

// What one CTA works on.
struct Work {
    int q_begin;      // first token of the request in q, o and lse
    int qo_len, kv_len;
    int tile;         // query tile of the request
    int kv_head;
    int kv_begin;     // ragged: first key token; paged: first kv_indices entry
    int k_row0;       // kRotatedK: the request's first row of the rotated keys
    long long mask_offset;  // kMaskCustom: first bit of the request
    int rope_pos0;    // kRope: position of key 0 of the request (rope_base)
};

// RoPE position of key 0 of request b: the request's own offset when the
// batch gives one per request (rope_offsets), else the one rope_offset.
__device__ __forceinline__ int rope_base(const P &p, int b)
{
    if constexpr (kKind != FI_PREFILL_KIND_SINGLE)
        if (p.rope_offsets != nullptr) return p.rope_offsets[b];
    return p.rope_offset;
}

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
        w.rope_pos0 = p.rope_offset;
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
        w.rope_pos0 = 0;
        if constexpr (kRope) w.rope_pos0 = rope_base(p, b);
    }
    return w;
}

// The keys a CTA reads for the query tile of kTileQ packed rows from row0
// of request w: K/V tiles [0, n) of kTileKV keys from key kv_start, which
// is tile-aligned, so that every key some row of the tile sees (causal:
// up to the last row's position; window: from the first row's) is in one.
struct KeyRange {
    int kv_start, n;
};
template <int kTileQ, int kTileKV>
__device__ __forceinline__ KeyRange key_range(const P &p, const Work &w, int row0)
{
    const int G = p.group_size;
    const int rows = w.qo_len * G;
    const int off = w.kv_len - w.qo_len;  // query i sits at key position i + off
    const int tok_lo = imax(row0, 0) / G;  // the Hopper loop's first tile starts before row 0
    const int tok_hi = (imin(rows, row0 + kTileQ) - 1) / G;
    int kv_lo = 0, kv_hi = w.kv_len;
    if constexpr (kCausal) kv_hi = imax(0, imin(kv_hi, tok_hi + off + 1));
    if constexpr (kWindow)
        if (p.window_left >= 0) kv_lo = imax(0, tok_lo + off - p.window_left);
    KeyRange r;
    r.kv_start = kv_lo / kTileKV * kTileKV;
    r.n = kv_hi > r.kv_start ? (kv_hi - r.kv_start + kTileKV - 1) / kTileKV : 0;
    return r;
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

}  // namespace prefill
}  // namespace fijit
