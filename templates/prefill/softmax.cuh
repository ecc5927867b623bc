// Prefill's online softmax, shared by both main loops. A thread holds two
// row halves (h = 0, 1: rows g and g + 8 of an MMA tile, columns 2t, 2t + 1
// of every 8-key tile of S); the four lanes of a row (t = 0..3) reduce
// through shuffles. m is in natural units and exp(x - m) is computed as
// exp2(x * log2e - m * log2e), one FFMA per element. A row that has seen
// only hidden keys keeps m = -inf; `base2` avoids -inf - -inf. d is this
// thread's partial sum (its columns); the epilogue adds up the four lanes'.
// Without softmax (a variant's choice) S already holds the weights and
// neither function is called.
#pragma once

#include "prefill/common.cuh"

namespace fijit {
namespace prefill {

// Row half h of S (kNT 8-key tiles) into exp(s - new max), the new maximum
// into m and the rescaled sum into d; `scale` the factor O's row must be
// rescaled by (exp(old max - new max)), `grew` whether the maximum changed
// (else the factor is 1). (Out-parameters rather than a returned scale: the
// tile kernels then compile to the instructions they had with this code
// written in place.) log2_scale: log2(e) times a positive factor the logits
// still lack (the Hopper loop's unscaled Q: sm_scale), folded into the
// exponent's FFMA; m then stays in the logits' unscaled units.
// kSlack > 0: m stays as it is while the tile's maximum exceeds it by at
// most kSlack in the exponent (base 2), so that O is rescaled only when a
// maximum grows by more than 2^kSlack, not at nearly every tile; the
// weights then reach 2^kSlack, which the fp32 sums and 16-bit P hold with
// the precision they have at 1, and the result is the same (m is only the
// reference every weight and the sum share).
template <int kNT, int kSlack = 0>
__device__ __forceinline__ void softmax_row(float (&s)[kNT][4], int h, float &m, float &d,
                                            float &scale, bool &grew,
                                            const float log2_scale = kLog2e)
{
    float mx = kSlack > 0 ? -inf_() : m;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) mx = fmax_(mx, fmax_(s[nt][2 * h], s[nt][2 * h + 1]));
    mx = fmax_(mx, shfl_xor(mx, 1));
    mx = fmax_(mx, shfl_xor(mx, 2));
    if constexpr (kSlack > 0)  // mx: the tile's maximum; grows past m by more than the slack
        mx = m == -inf_() || (mx - m) * log2_scale > (float)kSlack ? fmax_(m, mx) : m;
    const float base2 = (mx == -inf_() ? 0.f : mx) * log2_scale;
    scale = exp2_fast(fma_(m, log2_scale, -base2));
    grew = mx != m;
    m = mx;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            s[nt][2 * h + e] = exp2_fast(fma_(s[nt][2 * h + e], log2_scale, -base2));
            sum += s[nt][2 * h + e];
        }
    d = fma_(d, scale, sum);
}

// O's row half h (kDT 8-wide tiles) times `scale`.
template <int kDT>
__device__ __forceinline__ void rescale_half(float (&o)[kDT][4], int h, float scale)
{
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
        o[dt][2 * h] *= scale;
        o[dt][2 * h + 1] *= scale;
    }
}

// Both row halves of O times their factors.
template <int kDT>
__device__ __forceinline__ void rescale_rows(float (&o)[kDT][4], const float (&scale)[2])
{
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] *= scale[e >> 1];
}

}  // namespace prefill
}  // namespace fijit
