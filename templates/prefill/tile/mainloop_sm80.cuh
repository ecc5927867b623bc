// The tile kernels' products on mma.sync (sm_80+; every tile but the 128-
// and 64-row ones on sm_90a, prefill/tile/mainloop_sm90.cuh): S = Q.K^T and
// O += P.V of one K/V tile for this warp's rows, and the shared-memory
// layout their operands are read from. The CTA around them (work, loads,
// masks, softmax, epilogue) is prefill/tile/loop.cuh.
//  * Q.K^T contracts over kHeadDim, P.V produces kHeadDimVO columns (MLA's
//    prefill: 192 and 128); V rows are kHeadDimVO wide in shared memory.
//  * Each warp owns 16 or 32 query rows; both products run on mma.sync
//    m16n8k16 with fp32 accumulation, operands fed by ldmatrix from shared
//    memory laid out in 16-byte chunks XOR-swizzled by row (chunk c of row r
//    is stored at c ^ (r % 8)), which makes every ldmatrix phase and every
//    cp.async write conflict-free.
//  * With kXor (common.cuh) each operand's ldmatrix addresses come from one
//    base register per K/V stage, one XOR per fragment (frag_at).
//  * P goes from the S accumulators straight into the A fragments of P.V.
#pragma once

#include "prefill/common.cuh"

namespace fijit {
namespace prefill {

// (Constants are enumerators or locals: a static constexpr member would be
// emitted into the cubin as a global.)
template <int kTileIdx>
struct MainloopSm80 {
    using C = Cfg<kTileIdx>;
    enum : int {
        kMT = C::kMT,              // 16-row MMA tiles per warp
        kNT = C::kTileKV / 8,      // 8-key column tiles of S
        kDT = kHeadDimVO / 8,      // 8-wide column tiles of O
        kSkipRows = C::kMT * 16,   // rows that skip a K/V tile together: the warp's
    };
    static_assert(!C::kWgmma, "the tile runs on wgmma: prefill/tile/mainloop_sm90.cuh");

    // Where chunk ch of row r of the Q tile and of a K/V tile lives.
    static __device__ __forceinline__ unsigned int q_at(int r, int ch) { return swz(r, ch); }
    static __device__ __forceinline__ unsigned int kv_at(int r, int ch) { return swz(r, ch); }
    static __device__ __forceinline__ unsigned int v_at(int r, int ch) { return swz_vo(r, ch); }
    // Shared-memory writes need no fence before a barrier for ldmatrix.
    static __device__ __forceinline__ void fence_operands() {}

    // Fragment bases (see frag_base): Q rows of this warp, K rows (keys of
    // B in S = Q K^T), V rows (keys of B in O += P V, transposed load).
    unsigned int q_frag, k_frag, v_frag;
    __device__ __forceinline__ MainloopSm80(unsigned int sq, unsigned int sk, unsigned int sv,
                                            int warp_row0, int lane)
        : q_frag(frag_base(sq, warp_row0 + (lane & 15), lane >> 4)),
          k_frag(frag_base(sk, ((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1)),
          v_frag(sv + swz_vo((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4))
    {
    }

    // The fragment bases of K/V stage `stage`; with kXor opaque, so that the
    // per-fragment addresses are not hoisted out of the loop into registers.
    struct Frags {
        unsigned int q, k, v;
    };
    __device__ __forceinline__ Frags frags(int stage) const
    {
        constexpr unsigned int kKTileBytes = C::kTileKV * kRowBytes;
        constexpr unsigned int kVTileBytes = C::kTileKV * kRowBytesVO;
        return {kXor ? opaque(q_frag) : 0u, kXor ? opaque(k_frag + stage * kKTileBytes) : 0u,
                kXor ? opaque(v_frag + stage * kVTileBytes) : 0u};
    }

    // S = Q K^T for this warp's rows (s zeroed by the caller).
    static __device__ __forceinline__ void qk(float (&s)[kMT][kNT][4], const Frags &f,
                                              unsigned int sq, unsigned int skt, int, int warp_row0,
                                              int lane)
    {
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
            unsigned int a[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
                ldmatrix_x4(a[mt], kXor ? frag_at(f.q, kk) + mt * 16 * kRowBytes
                                        : sq + swz(warp_row0 + mt * 16 + (lane & 15),
                                                   kk * 2 + (lane >> 4)));
#pragma unroll
            for (int np = 0; np < kNT / 2; ++np) {
                unsigned int b[4];
                ldmatrix_x4(b, kXor ? frag_at(f.k, kk) + np * 16 * kRowBytes
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

    // O += P V: the S accumulators of two 8-key tiles form one A fragment.
    static __device__ __forceinline__ void pv(float (&o)[kMT][kDT][4], float (&s)[kMT][kNT][4],
                                              const Frags &f, unsigned int svt, int lane)
    {
#pragma unroll
        for (int kk = 0; kk < C::kTileKV / 16; ++kk) {
            unsigned int a[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) p_fragment(s[mt], kk, a[mt]);
#pragma unroll
            for (int dp = 0; dp < kHeadDimVO / 16; ++dp) {
                unsigned int b[4];
                ldmatrix_x4_trans(b, kXor ? frag_at(f.v, dp) + kk * 16 * kRowBytesVO
                                          : svt + swz_vo(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                         dp * 2 + (lane >> 4)));
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                    Mma<DTypeKV>::run(o[mt][2 * dp], a[mt], b[0], b[1]);
                    Mma<DTypeKV>::run(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
};

}  // namespace prefill
}  // namespace fijit
