// Which blocks a CTA of the Hopper main loop computes, and in what order:
// the claims (next_block), the scheduler thread's feed (feed_blocks,
// take_block), and the walk every role makes over them (for_each_block).
#pragma once

#include "common/tma_sm90.cuh"
#include "prefill/work.cuh"
#include "prefill/ws/config.cuh"

namespace fijit {
namespace prefill {
namespace ws {

// A Work as the words of a feed slot (Smem::feed), in whole 16-byte chunks.
constexpr int kWorkWords = (int)(sizeof(Work) + 15) / 16 * 4;
union WorkWords {
    Work w;
    unsigned int u[kWorkWords];
};
static_assert(16 + 4 * kWorkWords <= (int)kFeedSlotBytes, "a feed slot holds a block and its Work");
// The scheduler passes each block's Work on with it where Q comes by TMA:
// where the consumers load Q (RoPE, soft-cap, ALiBi, hooks), the Work's
// words held from shared memory spill 4-100 B in 21 of those tuples' 108
// ragged and single modules, which read them from global memory anew. The
// paged K/V warp reads it anew too (with the words it spilled 4 B at
// head_dim 64 beside three consumers).
constexpr bool kFeedWork = kRawQTuple;

// Whether the block's query tile has rows of its request (the grid may hold
// more tiles than a request has: the scheduler skips the others).
__device__ __forceinline__ bool block_has_rows(const P &p, const Work &w)
{
    return w.tile * kTileQ < w.qo_len * p.group_size;
}

// The first packed row of the block's query tile. Under a causal mask (or a
// window) a request's tiles end at its last row, so that its partial tile is
// the first one (from row -pad), which reads the fewest keys; aligned at row
// 0, the partial tile was the last, which reads the most, with part of its
// consumers idle (kOwnTiles) or computing rows past the request. Measured
// (H200, 2026-11-29, A/B in one process, two runs): bench_batch_prefill.py
// causal ragged hd 64 1.02-1.03x, hd 128 0.98-1.01x, hd 256 1.01-1.03x;
// paged hd 64 1.02-1.04x, hd 128 0.99-1.01x, hd 256 0.98-1.03x;
// bench_prefill.py causal hd 64 seq 1k-4k 1.02-1.06x, hd 128/256
// 0.98-1.01x. Without a mask every tile reads all keys, and the tiles stay
// aligned at row 0 (aligned at the end, single prefill measured 0.98x).
__device__ __forceinline__ int block_row0(const P &p, const Work &w)
{
    if constexpr (!kCausal) return w.tile * kTileQ;
    const int rows = w.qo_len * p.group_size;
    return w.tile * kTileQ - ((rows + kTileQ - 1) / kTileQ * kTileQ - rows);
}

// The next block of this CTA after `b` in a grid of `blocks`: the next
// unclaimed one when the launch counts claims, else b + gridDim.x.
__device__ __forceinline__ int next_block(const fi_prefill_ws &ws, int b, int blocks)
{
    if (ws.claims == nullptr) return b + (int)gridDim.x;
    const unsigned int c = atomicAdd(ws.claims, 1u);
    // Every CTA claims until it gets a block past the grid, so a launch
    // makes `blocks` claims (it has at most one CTA per block) and the one
    // that returns blocks - 1 is its last: it leaves the counter at 0.
    if (c == (unsigned int)blocks - 1u) atomicExch(ws.claims, 0u);
    return (int)gridDim.x + (int)c;
}

// The scheduler (one thread): the CTA's blocks that have rows, in order,
// into the feed, then one past the grid, which ends every role's walk. A
// block is claimed only once its slot is free (the block kFeedSlots
// before it has begun) and the K/V loader has issued the loads of the one
// before it (Smem::issued), a few tiles before the consumers need it: so
// the blocks start in about the order they are claimed, as a grid of a
// CTA per block would launch them, and the K/V of the heads in flight
// stays within L2 (the block order's sections). Claimed two blocks ahead
// instead, when the slot freed, a CTA began a block up to two blocks'
// time after claiming it, and the blocks running at once spanned more
// heads: hd 256 causal ragged 32/32 (bench_batch_prefill.py's batch, ncu,
// H100) read 13.5 GB from DRAM (L2 hits 56%) against 5.2 GB (78%), in
// 6.74 ms against 6.19; single prefill of its pairs read 9.8 GB persistent
// against 0.8 GB with a CTA per block. bench_batch_prefill.py (A/B in one
// process): causal 32/32 1.02-1.05x, the rest 0.98-1.04x.
// The block's Work goes into the slot with it: read from the request's
// list and offsets once, here, ahead of time, not by every thread at the
// block's start, where each role waited for two dependent global reads.
__device__ __forceinline__ void feed_blocks(const P &p, const fi_prefill_ws &ws, const Smem &sm)
{
    const int blocks = ws.work_items * ws.kv_heads;
    for (int k = 0, b = (int)blockIdx.x;; ++k) {
        const int s = k % kFeedSlots;
        bar_wait(sm.empty_feed(s), ((k / kFeedSlots) & 1) ^ 1);
        if (k > 0) bar_wait(sm.issued(), (k - 1) & 1);
        for (b = k == 0 ? b : next_block(ws, b, blocks); b < blocks; b = next_block(ws, b, blocks)) {
            WorkWords ww;
            ww.w = get_work(p, b, ws.work_items, ws.kv_heads);
            if (block_has_rows(p, ww.w)) {
                if constexpr (kFeedWork) {
#pragma unroll
                    for (int i = 0; i < kWorkWords; ++i) sts32(sm.feed(s) + 16u + 4u * i, ww.u[i]);
                }
                break;
            }
        }
        sts32(sm.feed(s), (unsigned int)b);
        bar_arrive(sm.full_feed(s));  // release: the slot's writes are seen with the phase
        if (b >= blocks) return;
    }
}

// The k-th block of the CTA from the feed, and with kFedWork its Work when
// it is one of the grid's. Every reading thread frees the slot itself, so
// its own reads are ordered before the rewrite (a warp that left the arrive
// to one lane after __syncwarp raced it in racecheck).
template <bool kFedWork>
__device__ __forceinline__ int take_block(const Smem &sm, int k, int blocks, Work &w)
{
    const int s = k % kFeedSlots;
    bar_wait(sm.full_feed(s), (k / kFeedSlots) & 1);
    const int b = (int)lds32(sm.feed(s));
    if (kFedWork && b < blocks) {
        WorkWords ww;
#pragma unroll
        for (int i = 0; i < kWorkWords / 4; ++i) {
            const vec16_t v = lds128(sm.feed(s) + 16u + 16u * i);
#pragma unroll
            for (int e = 0; e < 4; ++e) ww.u[4 * i + e] = v.w[e];
        }
        w = ww.w;
    }
    bar_arrive(sm.empty_feed(s));
    return b;
}

// The blocks of this CTA that have rows, in order (from the feed, or
// blockIdx.x, + gridDim.x, ...): f(work, first row, key range, it, j),
// where `it` counts the tiles the rings held before the block and j the
// blocks before it (the Q buffers' turns). Every role walks them alike;
// kFedWork: the role takes each block's Work from the feed (kFeedWork).
template <bool kFedWork, class F>
__device__ __forceinline__ void for_each_block(const P &p, const fi_prefill_ws &ws, const Smem &sm,
                                               const F &f)
{
    const int blocks = ws.work_items * ws.kv_heads;
    auto visit = [&](const Work &w, int &it, int j) {
        if (!kFeed && !block_has_rows(p, w)) return false;  // the feed skips them
        const int row0 = block_row0(p, w);
        const KeyRange kr = key_range<kTileQ, kTileKV>(p, w, row0);
        f(w, row0, kr, it, j);
        it += kr.n;
        return true;
    };
    if constexpr (kFeed) {
        Work w;
        for (int j = 0, it = 0, b; (b = take_block<kFedWork>(sm, j, blocks, w)) < blocks; ++j)
            visit(kFedWork ? w : get_work(p, b, ws.work_items, ws.kv_heads), it, j);
    } else {
        // The loop as it was before the feed: paged registers are that tight.
        for (int b = (int)blockIdx.x, it = 0, j = 0; b < blocks; b += (int)gridDim.x)
            j += visit(get_work(p, b, ws.work_items, ws.kv_heads), it, j);
    }
}

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
