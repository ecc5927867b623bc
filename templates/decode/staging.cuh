// Decode's staging area: K/V tiles that ldmatrix cannot read from the ring
// rewritten as 16-bit tiles after it (fp8 tiles widened, K tiles rotated by
// RoPE), each element converted once by one thread.
#pragma once

#include "decode/common.cuh"

namespace fijit {
namespace decode {

// Four fp8 values (one word) as two words of DTypeMma pairs.
template <class T = DTypeKV>
__device__ __forceinline__ void widen4(unsigned int w, unsigned int &lo, unsigned int &hi)
{
    Traits<T>::to_half4(w, lo, hi);
    if constexpr (!SameType<DTypeMma, half_t>::value) {
        float f[4];
        Traits<half_t>::unpack2(lo, f[0], f[1]);
        Traits<half_t>::unpack2(hi, f[2], f[3]);
        lo = Traits<DTypeMma>::pack2(f[0], f[1]);
        hi = Traits<DTypeMma>::pack2(f[2], f[3]);
    }
}

// fp8 tile -> 16-bit tile for ldmatrix: ring tile at `src` (raw rows), the
// same keys in DTypeMma at `dst` (mma_index layout). Each thread widens the
// chunks it copied in. (A template so that 16-bit kernels never see it.)
template <class T = DTypeKV>
__device__ __forceinline__ void widen_tile(unsigned int src, unsigned int dst, int tid)
{
#pragma unroll
    for (int i = 0; i < kLoadsPerThread; ++i) {
        const int c = i * kThreads + tid;
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const vec16_t v = lds128(src + c * 16);
        vec16_t lo, hi;
        widen4<T>(v.w[0], lo.w[0], lo.w[1]);
        widen4<T>(v.w[1], lo.w[2], lo.w[3]);
        widen4<T>(v.w[2], hi.w[0], hi.w[1]);
        widen4<T>(v.w[3], hi.w[2], hi.w[3]);
        sts128(dst + mma_index(r, 2 * ch) * 16, lo);
        sts128(dst + mma_index(r, 2 * ch + 1) * 16, hi);
    }
}

// Elements [8 group, 8 group + 8) of row `r` of the ring tile at `src`, as
// fp32 (16-bit ring: swizzled chunks; fp8 ring: raw rows). (A template so
// that the branch not taken is never instantiated.)
template <class T = DTypeKV>
__device__ __forceinline__ void ring_load8(unsigned int src, int r, int group, float (&f)[8])
{
    if constexpr (Traits<T>::kBytes == 1) {
        unsigned int w0, w1;
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];"
                     : "=r"(w0), "=r"(w1)
                     : "r"(src + r * kRowBytes + group * 8));
        float lo[4], hi[4];
        Traits<T>::unpack4(w0, lo);
        Traits<T>::unpack4(w1, hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            f[e] = lo[e];
            f[e + 4] = hi[e];
        }
    } else {
        unpack8<T>(lds128(src + ring_index(r, group) * 16), f);
    }
}

// K tile -> rotated 16-bit tile for ldmatrix (RoPE, rotate-half, key of row
// r at position pos0 + r): element d of the first half pairs with d +
// head_dim / 2. Each thread takes 8-element groups of the first half with
// their partners; every (key, frequency) angle is computed once.
template <class P>
__device__ __forceinline__ void rope_tile(const P &p, unsigned int src, unsigned int dst,
                                          float pos0, int tid)
{
    constexpr int kHalfGroups = kHeadDim / 16;  // 8-element groups in half a row
    constexpr int kItems = kTile * kHalfGroups;
    static_assert(kItems % kThreads == 0, "every thread rotates the same number of groups");
#pragma unroll
    for (int i = 0; i < kItems / kThreads; ++i) {
        const int item = i * kThreads + tid;
        const int r = item / kHalfGroups, group = item % kHalfGroups;
        float lo[8], hi[8];
        ring_load8(src, r, group, lo);
        ring_load8(src, r, group + kHalfGroups, hi);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            float sn, cs;
            sincos_pos(pos0 + (float)r, p.rope_freq[group * 8 + e], sn, cs);
            const float a = lo[e], b = hi[e];
            lo[e] = fma_(-b, sn, a * cs);
            hi[e] = fma_(a, sn, b * cs);
        }
        sts128(dst + mma_index(r, group) * 16, pack8<DTypeMma>(lo));
        sts128(dst + mma_index(r, group + kHalfGroups) * 16, pack8<DTypeMma>(hi));
    }
}

}  // namespace decode
}  // namespace fijit
