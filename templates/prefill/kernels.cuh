// The entry points of a prefill module, one per query tile (in the order of
// src/core/kinds.c; tile sizes and warps in prefill/params.h), the RoPE
// pre-pass, the Hopper kernel (empty but on sm_90a) and fp8's V pre-pass
// (empty but for fp8, whose tile kernels are empty). The arch's paths
// are picked here, at expansion: no kernel dispatches at run time.
#pragma once

#include "prefill/fp8.cuh"
#include "prefill/mainloop_sm80.cuh"
#include "prefill/mainloop_sm90_tile.cuh"
#include "prefill/mainloop_sm90_ws.cuh"
#include "prefill/tile_loop.cuh"

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

#define FI_PREFILL_BOUNDS(i)                                                                \
    __launch_bounds__(FI_PREFILL_WARPS(i, fijit_cfg::kHeadDim, fijit::prefill::kSm90aTiles) * 32, \
                      FI_PREFILL_MIN_BLOCKS(i, fijit_cfg::kHeadDim, fijit::prefill::kSm90aTiles))
extern "C" __global__ void FI_PREFILL_BOUNDS(0) fi_prefill_kernel_q128(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q128[];
    fijit::prefill::run_tile<0>(p, smem_q128);
}

extern "C" __global__ void FI_PREFILL_BOUNDS(1) fi_prefill_kernel_q64(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q64[];
    fijit::prefill::run_tile<1>(p, smem_q64);
}

extern "C" __global__ void FI_PREFILL_BOUNDS(2) fi_prefill_kernel_q16(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q16[];
    fijit::prefill::run_tile<2>(p, smem_q16);
}

// The RoPE pre-pass (empty without RoPE, and so for fp8).
extern "C" __global__ void __launch_bounds__(FI_PREFILL_ROPE_THREADS)
    fi_prefill_rope_k_kernel(const fi_prefill_params p)
{
    if constexpr (!fijit::prefill::kFp8) fijit::prefill::rotate_keys(p);
}

// The Hopper main loop (mainloop_sm90_ws.cuh), in modules for
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

extern "C" __global__ void __launch_bounds__(fijit::prefill::ws::kThreads, 1)
    fi_prefill_kernel_ws(const fi_prefill_params p, const __grid_constant__ fi_prefill_ws maps)
{
    extern __shared__ __align__(1024) unsigned char smem_ws[];
    fijit::prefill::WsEntry<fijit::prefill::kWsTuple>::run(p, maps, smem_ws);
}

// fp8's V pre-pass (prefill/fp8.cuh; empty for 16-bit tuples).
extern "C" __global__ void __launch_bounds__(FI_PREFILL_FP8_V_THREADS)
    fi_prefill_fp8_v_kernel(const fi_prefill_params p)
{
    fijit::prefill::write_vt(p);
}
