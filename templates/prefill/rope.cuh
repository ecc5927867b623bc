// Prefill's query rows and RoPE: rotate-half on the fly, the keys' pre-pass
// (fi_prefill_rope_k_kernel), and the rows of Q as the MMAs read them.
#pragma once

#include "prefill/work.cuh"

namespace fijit {
namespace prefill {

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
// rounded back to the 16-bit input type once.
__device__ __forceinline__ void rope_chunks(const P &p, vec16_t &lo, vec16_t &hi, int ch, float pos)
{
    float x[8], y[8];
    unpack8<DTypeIn16>(lo, x);
    unpack8<DTypeIn16>(hi, y);
    rope_pair(p, x, y, ch, pos);
    lo = pack8<DTypeIn16>(x);
    hi = pack8<DTypeIn16>(y);
}

// The RoPE pre-pass: key j of request b (single prefill: the one), kv head
// blockIdx.y, rotated at position rope_base(b) + j in fp32 and rounded once
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
            const DTypeIn16 *src = static_cast<const DTypeIn16 *>(p.k) + h * p.k_stride_h + ko;
            vec16_t lo = ldg16(src + ch * 8), hi = ldg16(src + (ch + kPairs) * 8);
            rope_chunks(p, lo, hi, ch, (float)(rope_base(p, b) + j));
            DTypeIn16 *dst = static_cast<DTypeIn16 *>(p.rot_k) +
                           ((long long)t * p.num_kv_heads + h) * kHeadDim;
            stg16(dst + ch * 8, lo);
            stg16(dst + (ch + kPairs) * 8, hi);
        }
    }
}

// Chunks ch and ch + kChunks / 2 of packed query row pr of request w, as
// the MMAs read them: RoPE'd (position rope_base + kv_len - qo_len +
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
        const DTypeIn16 *src = static_cast<const DTypeIn16 *>(p.q) +
                            (long long)(w.q_begin + token) * p.q_stride_n +
                            (long long)head * p.q_stride_h;
        unpack8<DTypeIn16>(ldg16(src + ch * 8), x);
        unpack8<DTypeIn16>(ldg16(src + (ch + kChunks / 2) * 8), y);
        if constexpr (kRope)
            rope_pair(p, x, y, ch, (float)(w.rope_pos0 + w.kv_len - w.qo_len + token));
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            x[e] = Variant::query_transform(p, x[e], head, ch * 8 + e);
            y[e] = Variant::query_transform(p, y[e], head, (ch + kChunks / 2) * 8 + e);
        }
    }
    lo = pack8<DTypeIn16>(x);
    hi = pack8<DTypeIn16>(y);
}

}  // namespace prefill
}  // namespace fijit
