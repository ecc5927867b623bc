// fp8 prefill (q = kv = e4m3, sm_90a; prefill/params.h): the V pre-pass and
// the conversion of softmax weights into the A operand of P.V.
//
// An 8-bit wgmma reads both operands K-major. For S = Q K^T that is how q
// and k lie (head_dim contiguous); for O += P V the reduction runs over keys,
// so V must have its keys contiguous: fi_prefill_fp8_v_kernel writes it so,
// once per launch, into the caller's workspace (fi_prefill_params.vt), as
// [kv head][head_dim][vt_keys]. Within each 32-key chunk (a k-step) the keys
// are permuted (FI_PREFILL_FP8_KEY_AT) to the order in which a thread holds
// its weights in S's accumulators (keys 2t, 2t + 1, 8 + 2t, 9 + 2t of each
// 16), so that four of them round into one word of the A operand as they
// are, with no shuffle between the lanes of a quad.
#pragma once

#include "prefill/work.cuh"

namespace fijit {
namespace prefill {

constexpr bool kFp8 = Traits<DTypeKV>::kBytes == 1;

// Four fp32 values rounded to e4m3 (saturating) into one word, a in its
// lowest byte.
__device__ __forceinline__ unsigned int pack4_e4m3(float a, float b, float c, float d)
{
    unsigned short lo, hi;
    // cvt's first source lands in the upper byte.
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %3;\n\tcvt.rn.satfinite.e4m3x2.f32 %1, %4, %5;"
        : "=h"(lo), "=h"(hi)
        : "f"(b), "f"(a), "f"(d), "f"(c));
    return (unsigned int)lo | ((unsigned int)hi << 16);
}

// The A fragment of P for keys 32kk..32kk+31 (positions of vt's chunk kk):
// rows g and g + 8 (words 0, 1), positions 4t..4t+3, then 16 + 4t.. (words
// 2, 3), which hold keys {2t, 2t+1, 8+2t, 9+2t} (+16): the accumulators
// of 8-key tiles 4kk, 4kk + 1 (+2, +3) as they are.
template <int kN>
__device__ __forceinline__ void p_fragment_fp8(const float (&s)[kN][4], int kk, unsigned int (&a)[4])
{
    const int n = 4 * kk;
    a[0] = pack4_e4m3(s[n][0], s[n][1], s[n + 1][0], s[n + 1][1]);
    a[1] = pack4_e4m3(s[n][2], s[n][3], s[n + 1][2], s[n + 1][3]);
    a[2] = pack4_e4m3(s[n + 2][0], s[n + 2][1], s[n + 3][0], s[n + 3][1]);
    a[3] = pack4_e4m3(s[n + 2][2], s[n + 2][3], s[n + 3][2], s[n + 3][3]);
}

// The V pre-pass: block (x, h) writes keys [64x, 64x + 64) of kv head h of
// vt (zeros past kv_len) from v [kv_len, heads, head_dim] (strides in
// bytes: one-byte elements). The keys' rows go through shared memory, padded
// by 16 bytes so that the column reads of 16 keys spread over the banks.
__device__ __forceinline__ void write_vt(const P &p)
{
    if constexpr (kFp8) {
        constexpr int kKeys = FI_PREFILL_FP8_V_KEYS;
        constexpr int kPitch = kHeadDim + 16;
        constexpr int kRowChunks = kHeadDim / 16;
        __shared__ __align__(16) unsigned char rows[kKeys * kPitch];
        const int h = (int)blockIdx.y, key0 = (int)blockIdx.x * kKeys;
        const unsigned char *v = static_cast<const unsigned char *>(p.v) + (long long)h * p.v_stride_h;
        for (int c = (int)threadIdx.x; c < kKeys * kRowChunks; c += (int)blockDim.x) {
            const int r = c / kRowChunks, ch = c % kRowChunks, key = key0 + r;
            vec16_t x = {{0u, 0u, 0u, 0u}};
            if (key < p.kv_len) x = ldg16(v + (long long)key * p.v_stride_n + ch * 16);
            *reinterpret_cast<vec16_t *>(rows + r * kPitch + ch * 16) = x;
        }
        __syncthreads();
        // A 16-byte chunk of positions [16q, 16q + 16) of row d per thread.
        unsigned char *vt = static_cast<unsigned char *>(p.vt) + (long long)h * kHeadDim * p.vt_keys + key0;
        for (int c = (int)threadIdx.x; c < kHeadDim * (kKeys / 16); c += (int)blockDim.x) {
            const int d = c / (kKeys / 16), q = c % (kKeys / 16);
            unsigned int w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                unsigned int word = 0;
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const int pos = 16 * q + 4 * i + b;
                    const int key = (pos & ~31) + FI_PREFILL_FP8_KEY_AT(pos & 31);
                    word |= (unsigned int)rows[key * kPitch + d] << (8 * b);
                }
                w[i] = word;
            }
            const vec16_t out = {{w[0], w[1], w[2], w[3]}};
            stg16(vt + (long long)d * p.vt_keys + 16 * q, out);
        }
    }
}

}  // namespace prefill
}  // namespace fijit
