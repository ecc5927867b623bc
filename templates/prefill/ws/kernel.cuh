// Hopper main loop of prefill (sm_90a): warp-specialised, TMA-fed, with the
// softmax overlapped with the tensor cores. It computes query tiles of
// kTileQ rows (128, or 192 at head_dim 64: FI_PREFILL_WS_TILE_Q) and is
// launched in place of tile kernel 0 (prefill/tile/loop.cuh) for the tuples
// FI_PREFILL_WS_TUPLE accepts (prefill/params.h).
// Only the main loop is its own: the tile scheduler (prefill/work.cuh), the
// query rows (rope.cuh), masks (mask.cuh), softmax (softmax.cuh), the
// epilogue's steps (prefill/epilogue.cuh) and the variant hooks are the tile
// kernels'. Its parts, in prefill/ws/: config.cuh (the tuple's tiles, rings,
// registers and shared memory), schedule.cuh (which blocks a CTA takes),
// produce.cuh (the producer's loads), consume.cuh (a consumer warpgroup),
// epilogue.cuh (a consumer's O store), trace.cuh (an optional cycle trace of
// the consumers, empty unless FIJIT_WS_TRACE is defined); this file sets up
// the CTA, gives each warp its role (run) and is the kernel's entry
// (WsEntry).
//
// One CTA = a producer warpgroup and kConsumers (2 or 3) consumers:
//  * the producer (warpgroup 0) gives its registers away (setmaxnreg); its
//    first warp issues the K and V tile loads (paged K/V with Q by TMA: K,
//    and its last warp V) and a thread of its second warp those of Q:
//    cp.async.bulk.tensor (TMA)
//    through tensor maps the host encodes per launch, into a ring of
//    kStages slots per operand, each slot with a "full" mbarrier (TMA
//    transaction bytes) and an "empty" one (consumer warps arrive when
//    their wgmma has finished reading it). K and V have separate rings so
//    that K of the next tile can land while V of this one is still read.
//    TMA writes the 128-byte swizzle that the wgmma descriptors read, one
//    box of 64 columns x kTileKV keys per panel (paged: one box per page,
//    all its panels, or per part of a page where 160-key tiles take pages
//    that do not divide them; SlotLayout); keys past the tensor's end arrive as zeros.
//    Q comes by TMA too when the tuple changes it by sm_scale alone
//    (kRawQTuple): as it is in q, one box per panel is a tile's packed rows;
//    sm_scale then enters the softmax's exponent. The next block's Q lands
//    while the consumers finish this one, so a persistent CTA goes from one
//    block to the next without waiting for memory where there are two Q
//    buffers (head_dim <= 128; at 256 the one is refilled once the block's
//    output, staged there, has left by TMA). The K/V warp prefetches a
//    paged block's Q rows into L2 where Q waits for them (produce_paged).
//  * the consumers (warpgroups 1, 2[, 3]), 64 query rows each, wait for Q or
//    load and transform their rows themselves (RoPE, query_transform), then
//    run the tile loop with the next tile's S = Q K^T issued before this tile's
//    softmax (FlashAttention-3's intra-warpgroup overlap):
//        issue S(i) ; issue O += P(i-1) V(i-1) ; wait S(i) ; softmax S(i)
//        wait P V ; rescale O ; P(i-1) <- P(i)
//    and the consumers take turns issuing their MMAs (named barriers,
//    "ping-pong", round robin with three, and on across the blocks), so that
//    one's softmax runs while another's MMAs do. Each stages its output in
//    its own Q rows, and one of its threads stores them by TMA (consume).
//
// A CTA takes blocks of the grid the tile kernels would launch
// (fi_prefill_ws: work items x kv heads): one each in a launch of a CTA per
// block, several in the persistent one, the rings' position running on
// across them. A thread of the producer's third warp chooses them
// (blockIdx.x first, then + gridDim.x, ..., or the next unclaimed block of
// the grid: fi_prefill_ws.claims) and hands them to every role through a
// ring of kFeedSlots in shared memory, each claimed once the K/V loader has
// issued the block before it (kFeed; where the consumers load the Q of paged
// K/V, every role walks blockIdx.x + k gridDim.x itself).
//
// Registers: consumers 240, producer 24 (paged with Q by TMA: 232 and 40;
// three consumers: 160 and 32; kConsumerRegs).
#pragma once

#include "prefill/ws/config.cuh"
#include "prefill/ws/consume.cuh"
#include "prefill/ws/produce.cuh"
#include "prefill/ws/schedule.cuh"
#include "prefill/ws/trace.cuh"

namespace fijit {
namespace prefill {
namespace ws {

// A K/V loader (the producer's first warp, or with kSplitKV its first for K
// and its last for V): the tiles of every block of the CTA, then its
// arrival on Smem::issued.
template <int kOps>
__device__ __forceinline__ void load_kv(const P &p, const fi_prefill_ws &ws, const Smem &sm, int tid)
{
    // Contiguous K/V has one loader thread; the rest of its warp leaves here.
    // Bounding the caller's branch instead (tid < 1) changed ptxas's output in
    // 28 of the 164 fp16 and fp8 sm_90a modules, several spilling 4 B more.
    if (!kPaged && tid != 0) return;
    for_each_block<kFeedWork && !kPaged>(p, ws, sm, [&](const Work &w, int row0, const KeyRange &kr, int it, int) {
        if (kPagesInParts && ws.page_box != p.page_size)  // pages not dividing the tile
            produce_paged<true, kOps>(p, ws, w, row0, kr, sm, it);
        else if constexpr (kPaged)
            produce_paged<false, kOps>(p, ws, w, row0, kr, sm, it);
        else
            produce(ws, w, kr, sm, it);
        if (kFeed && tid % 32 == 0) bar_arrive(sm.issued());
    });
}

__device__ __forceinline__ void run(const P &p, const fi_prefill_ws &ws, unsigned char *smem)
{
    Smem sm;
    sm.q = smem_addr(smem);
    sm.k = sm.q + kQBufs * kQBufBytes;
    sm.v = sm.k + kStages * kKVBytes;
    sm.bars = sm.v + kStages * kVSlotBytes;
    trace_cta_start();  // FIJIT_WS_TRACE only (ws/trace.cuh)
    const int tid = (int)threadIdx.x;
    const bool raw_q = kRawQTuple && ws.q_rows > 0;
    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            bar_init(sm.full_k(s), 1);
            bar_init(sm.full_v(s), 1);
            bar_init(sm.empty_k(s), 4 * kConsumers);  // lane 0 of each consumer warp
            bar_init(sm.empty_v(s), 4 * kConsumers);
        }
        for (int b = 0; b < kQBufs; ++b) {
            for (int part = 0; part < kQParts; ++part) {
                bar_init(sm.full_q(b, part), 1);
                bar_init(sm.empty_q(b, part), 4 * kConsumers / kQParts);  // the part's warps
            }
        }
        // The feed's readers: the consumer threads, the K/V loaders and,
        // when Q comes by TMA, the Q loader.
        for (int s = 0; s < (kFeed ? kFeedSlots : 0); ++s) {
            bar_init(sm.full_feed(s), 1);
            bar_init(sm.empty_feed(s), 128 * kConsumers + kKVLoaders + (raw_q ? 1 : 0));
        }
        if (kFeed) bar_init(sm.issued(), kSplitKV ? 2 : 1);  // lane 0 of each K/V loader
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (tid < 128) {
        // The producer: its first warp loads K and V (paged: every lane, a
        // box each, and with kSplitKV the last warp V; else one thread), the
        // second warp's first thread Q, so that neither waits behind the
        // other's barriers; the third warp's first thread chooses the blocks.
        set_max_regs_dec<kProducerRegs>();
        if (kFeed && tid == 64) {
            feed_blocks(p, ws, sm);
        } else if (tid == 32 && raw_q) {
            for_each_block<kFeedWork>(p, ws, sm, [&](const Work &w, int row0, const KeyRange &, int, int j) {
                produce_q(p, ws, w, row0, sm, j);
            });
        } else if (tid < 32 || (kSplitKV && tid >= 96)) {
            if (kSplitKV && tid >= 96)
                load_kv<kOpV>(p, ws, sm, tid);
            else
                load_kv<kSplitKV ? kOpK : kOpK | kOpV>(p, ws, sm, tid);
        }
    } else {
        set_max_regs_inc<kConsumerRegs>();
        // Uniform to ptxas where the wgmmas a consumer issues depend on it
        // (ws/config.cuh: kUniformWg), else it serialises them.
        const int wg = kUniformWg ? __shfl_sync(0xffffffffu, tid / 128 - 1, 0) : tid / 128 - 1;
        int blocks = 0;
        for_each_block<kFeedWork>(p, ws, sm, [&](const Work &w, int row0, const KeyRange &kr, int it, int j) {
            consume(p, ws, w, kr, sm, row0, wg, it, j, raw_q);
            blocks = j + 1;
        });
        end_turns(wg, blocks);
    }
}

}  // namespace ws
}  // namespace prefill
}  // namespace fijit

// The kernel entry: the Hopper main loop in modules for sm_90a of the
// tuples FI_PREFILL_WS_TUPLE accepts; empty elsewhere (fi_prefill_kernel_ws
// in prefill/kernels.cuh calls it).
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
