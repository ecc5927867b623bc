// The entry points of a prefill module, one per query tile (in the order of
// src/kinds/registry.c; tile sizes and warps in prefill/params.h), the RoPE
// pre-pass, the Hopper kernel (empty but on sm_90a) and fp8's V pre-pass
// (empty but for fp8, whose tile kernels are empty). Each path's entry and
// parts are its folder's: prefill/tile/kernel.cuh, prefill/ws/kernel.cuh.
// The arch's paths are picked at expansion: no kernel dispatches at run time.
#pragma once

#include "prefill/fp8.cuh"
#include "prefill/tile/kernel.cuh"
#include "prefill/ws/kernel.cuh"

// FIJIT_ENTRY_MASK, from the prelude of a tuple whose kernels are built as
// parts side by side (src/kinds/prefill.c parts): bit i set, entry i (the
// order above) is built in full here, else it is an empty stub, so that each
// part has every symbol. Unset: every kernel.
#ifndef FIJIT_ENTRY_MASK
#define FIJIT_ENTRY_MASK 0xffffffffu
#endif
namespace fijit::prefill {
constexpr bool built(int entry) { return (FIJIT_ENTRY_MASK >> entry) & 1u; }
}  // namespace fijit::prefill

#define FI_PREFILL_BOUNDS(i)                                                                \
    __launch_bounds__(FI_PREFILL_WARPS(i, fijit_cfg::kHeadDim, fijit::prefill::kSm90aTiles) * 32, \
                      FI_PREFILL_MIN_BLOCKS(i, fijit_cfg::kHeadDim, fijit::prefill::kSm90aTiles))
extern "C" __global__ void FI_PREFILL_BOUNDS(0) fi_prefill_kernel_q128(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q128[];
    if constexpr (fijit::prefill::built(0)) fijit::prefill::run_tile<0>(p, smem_q128);
}

extern "C" __global__ void FI_PREFILL_BOUNDS(1) fi_prefill_kernel_q64(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q64[];
    if constexpr (fijit::prefill::built(1)) fijit::prefill::run_tile<1>(p, smem_q64);
}

extern "C" __global__ void FI_PREFILL_BOUNDS(2) fi_prefill_kernel_q16(const fi_prefill_params p)
{
    extern __shared__ __align__(1024) unsigned char smem_q16[];
    if constexpr (fijit::prefill::built(2)) fijit::prefill::run_tile<2>(p, smem_q16);
}

// The RoPE pre-pass (empty without RoPE, and so for fp8).
extern "C" __global__ void __launch_bounds__(FI_PREFILL_ROPE_THREADS)
    fi_prefill_rope_k_kernel(const fi_prefill_params p)
{
    if constexpr (fijit::prefill::built(3) && !fijit::prefill::kFp8) fijit::prefill::rotate_keys(p);
}

// The Hopper main loop (prefill/ws/kernel.cuh), in modules for
// sm_90a of the tuples FI_PREFILL_WS_TUPLE accepts; empty elsewhere.

extern "C" __global__ void __launch_bounds__(fijit::prefill::ws::kThreads, 1)
    fi_prefill_kernel_ws(const fi_prefill_params p, const __grid_constant__ fi_prefill_ws maps)
{
    extern __shared__ __align__(1024) unsigned char smem_ws[];
    if constexpr (fijit::prefill::built(4))
        fijit::prefill::WsEntry<fijit::prefill::kWsTuple>::run(p, maps, smem_ws);
}

// fp8's V pre-pass (prefill/fp8.cuh; empty for 16-bit tuples).
extern "C" __global__ void __launch_bounds__(FI_PREFILL_FP8_V_THREADS)
    fi_prefill_fp8_v_kernel(const fi_prefill_params p)
{
    if constexpr (fijit::prefill::built(5)) fijit::prefill::write_vt(p);
}
