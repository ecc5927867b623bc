// The tile path's kernel entry: which products (tile/mainloop_sm80.cuh on
// mma.sync, tile/mainloop_sm90.cuh on wgmma) the CTA of tile/loop.cuh runs
// for tile kernel i of the module, or nothing for fp8. The __global__
// entries that call run_tile are prefill/kernels.cuh's.
#pragma once

#include "prefill/tile/loop.cuh"
#include "prefill/tile/mainloop_sm80.cuh"
#include "prefill/tile/mainloop_sm90.cuh"

namespace fijit {
namespace prefill {
// The products of tile kernel i: wgmma for the 128- and 64-row tiles of an
// sm_90a module (FI_PREFILL_WGMMA), mma.sync everywhere else.
template <int kTileIdx, bool kWgmma = Cfg<kTileIdx>::kWgmma>
struct TileMainloop {
    using type = MainloopSm80<kTileIdx>;
};
template <int kTileIdx>
struct TileMainloop<kTileIdx, true> {
    using type = MainloopSm90Tile<kTileIdx>;
};
// Tile kernel i, or nothing for fp8 (the Hopper main loop alone runs it).
template <int kTileIdx, bool kOn = !kFp8>
struct TileEntry {
    static __device__ __forceinline__ void run(const P &, unsigned char *) {}
};
template <int kTileIdx>
struct TileEntry<kTileIdx, true> {
    static __device__ __forceinline__ void run(const P &p, unsigned char *smem)
    {
        prefill::run<kTileIdx, typename TileMainloop<kTileIdx>::type>(p, smem);
    }
};
template <int kTileIdx>
__device__ __forceinline__ void run_tile(const P &p, unsigned char *smem)
{
    TileEntry<kTileIdx>::run(p, smem);
}
}  // namespace prefill
}  // namespace fijit
