// The tile kernels' products on Hopper warpgroup MMA (sm_90a, the 128- and
// 64-row tiles: FI_PREFILL_WGMMA in prefill/params.h): S = Q.K^T and
// O += P.V of one K/V tile for this warpgroup's rows, and the shared-memory
// layout their operands are read from. The CTA around them is
// prefill/tile/loop.cuh, the same as on mma.sync (prefill/tile/mainloop_sm80.cuh);
// the warp-specialised Hopper kernel is prefill/ws/kernel.cuh.
//  * The warps form warpgroups of 64 rows (two and one), and each product is
//    one asynchronous wgmma per 16-wide k-step (common/wgmma_sm90.cuh)
//    reading Q and K/V straight from shared memory, P.V with P from
//    registers.
//  * The tiles are stored in 64-column panels with the same XOR as
//    mma.sync's layout (the hardware's 128-byte swizzle), and each writer
//    fences its stores for the async proxy before the barrier that
//    publishes them (fence_operands).
//  * Softmax, masks and the epilogue are shared: a wgmma accumulator has the
//    mma.sync layout, 16 rows per warp.
#pragma once

#include "prefill/common.cuh"

namespace fijit {
namespace prefill {

// (Constants are enumerators: a static constexpr member would be emitted
// into the cubin as a global.)
template <int kTileIdx>
struct MainloopSm90Tile {
    using C = Cfg<kTileIdx>;
    enum : int {
        kTileQ = C::kTileQ,
        kMT = C::kMT,
        kTileKV = C::kTileKV,
        kNT = C::kTileKV / 8,  // 8-key column tiles of S
        kDT = kHeadDimVO / 8,  // 8-wide column tiles of O (= kHeadDim: never kSplitVO)
        // Width of the P.V wgmma: head_dim, spelled through C so that the
        // name stays dependent (never instantiated for tiles without wgmma).
        kWgDim = C::kWgmma ? kHeadDim : 64,
        // Rows that skip a K/V tile together: the warpgroup's (they multiply as one).
        kSkipRows = 64,
    };
    static_assert(C::kWgmma, "the tile runs on mma.sync: prefill/tile/mainloop_sm80.cuh");
    static_assert(!(kSplitVO && C::kWgmma), "a separate v/o head dim runs on mma.sync (kSm90aTiles)");

    static __device__ __forceinline__ unsigned int q_at(int r, int ch)
    {
        return swz_panel<kTileQ>(r, ch);
    }
    static __device__ __forceinline__ unsigned int kv_at(int r, int ch)
    {
        return swz_panel<kTileKV>(r, ch);
    }
    static __device__ __forceinline__ unsigned int v_at(int r, int ch) { return kv_at(r, ch); }
    // wgmma reads shared memory through the async proxy: each writer fences
    // its stores before the barrier that publishes them.
    static __device__ __forceinline__ void fence_operands() { wg::fence_proxy_async(); }

    // wgmma reads shared memory through descriptors: no fragment bases.
    __device__ __forceinline__ MainloopSm90Tile(unsigned int, unsigned int, unsigned int, int, int)
    {
    }
    struct Frags {};
    __device__ __forceinline__ Frags frags(int) const { return {}; }

    // S = Q K^T: the warpgroup's 64 rows of Q times the tile's keys, one
    // wgmma per 16 columns of head_dim: 32 bytes into the 128-byte rows of
    // panel kk / 4.
    static __device__ __forceinline__ void qk(float (&s)[kMT][kNT][4], const Frags &,
                                              unsigned int sq, unsigned int skt, int warp, int, int)
    {
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
    }

    // O += P V with P from registers (the S accumulators of two 8-key tiles
    // form one A fragment); B = V, N-major: 16 keys per wgmma (rows kk * 16
    // of every panel).
    static __device__ __forceinline__ void pv(float (&o)[kMT][kDT][4], float (&s)[kMT][kNT][4],
                                              const Frags &, unsigned int svt, int)
    {
        unsigned int a[kTileKV / 16][4];
#pragma unroll
        for (int kk = 0; kk < kTileKV / 16; ++kk) {
            p_fragment(s[0], kk, a[kk]);
        }
        wg::fence_regs(o[0]);
        wg::fence();
#pragma unroll
        for (int kk = 0; kk < kTileKV / 16; ++kk)
            wg::Mma<DTypeKV, kWgDim>::rs(o[0], a[kk], wg::desc(svt + kk * 16u * 128u, kTileKV * 128u),
                                         1);
        wg::commit();
        wg::wait<0>();
        wg::fence_regs(o[0]);
        wg::fence_regs(a);
    }
};

}  // namespace prefill
}  // namespace fijit
