// Prefill's epilogue, shared by both main loops: each thread finishes its
// row halves (the four lanes' sums added up, 1/d and lse), passes O through
// the variant's output_transform, rounds it to DTypeO and stages it in the
// rows of the Q buffer the MMAs have finished with; then whole rows leave
// shared memory with 16-byte stores (or, in the Hopper main loop, by TMA).
// The callers order the two steps (a __syncwarp or a named barrier between
// them).
#pragma once

#include "prefill/work.cuh"

namespace fijit {
namespace prefill {

// d: this thread's part of a row's sum, made the row's. inv: what O is
// multiplied by (1/d; 0 when no key was visible, o = 0; 1 without softmax).
// lse: natural log of the row's sum (-inf when no key was visible; 0
// without softmax).
__device__ __forceinline__ void finish_row(float &d, float m, float &inv, float &lse)
{
    d += shfl_xor(d, 1);
    d += shfl_xor(d, 2);
    inv = !kSoftmax ? 1.f : d > 0.f ? rcp_fast(d) : 0.f;
    lse = !kSoftmax ? 0.f : d > 0.f ? fma_(log2_fast(d), kLn2, m) : -inf_();
}

// Tile dt of row half h of O (kDT 8-wide tiles) of query head `head`: this
// thread's two values, normalised, transformed and rounded into one word.
template <int kDT>
__device__ __forceinline__ unsigned int out_pair(const P &p, const float (&o)[kDT][4], int dt, int h,
                                                 float inv, float lse, int head, int t)
{
    const int col = dt * 8 + 2 * t;
    const float v0 = Variant::output_transform(p, o[dt][2 * h] * inv, head, col, lse);
    const float v1 = Variant::output_transform(p, o[dt][2 * h + 1] * inv, head, col + 1, lse);
    return Traits<DTypeO>::pack2(v0, v1);
}

// Row half h of O into shared memory: tile dt's word (out_pair) at
// at(dt) + 4t.
template <int kDT, class At>
__device__ __forceinline__ void stage_row(const P &p, const float (&o)[kDT][4], int h, float inv,
                                          float lse, int head, int t, At at)
{
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) sts32(at(dt) + 4 * t, out_pair(p, o, dt, h, inv, lse, head, t));
}

// The lse of query `tok` of the request, head `head`.
__device__ __forceinline__ void store_lse(const P &p, const Work &w, int tok, int head, float lse)
{
    p.lse[(long long)(w.q_begin + tok) * p.num_qo_heads + head] = lse;
}

// Chunk ch of packed row pr (< the request's rows) of the output, from its
// staged copy at src() (shared memory) to o. (src is a callable, read after
// the global address: the kernels then compile to the instructions they had
// with this code written in place.)
template <class Src>
__device__ __forceinline__ void store_chunk(const P &p, const Work &w, int G, int pr, int ch,
                                            Src src)
{
    const int token = pr / G;
    const int head = w.kv_head * G + pr % G;
    DTypeO *dst = static_cast<DTypeO *>(p.o) + (long long)(w.q_begin + token) * p.o_stride_n +
                  (long long)head * p.o_stride_h + ch * 8;
    stg16(dst, lds128(src()));
}

}  // namespace prefill
}  // namespace fijit
