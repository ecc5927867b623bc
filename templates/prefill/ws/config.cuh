// The Hopper main loop's shape for the tuple (prefill/ws/kernel.cuh):
// its tiles, rings and registers, the layout of a K/V slot, the named
// barriers, and the shared memory map. Compile-time only.
#pragma once

#include "prefill/common.cuh"
#include "prefill/fp8.cuh"

namespace fijit {
namespace prefill {
namespace ws {

#ifdef FIJIT_CUSTOM_VARIANT
constexpr bool kCustomVariant = true;
#else
constexpr bool kCustomVariant = false;
#endif
constexpr bool kLean = FI_PREFILL_WS_LEAN(fijit_cfg::kSoftCap, fijit_cfg::kPos == fijit_cfg::kPosAlibi,
                                         kCustomVariant);
constexpr int kConsumers = FI_PREFILL_WS_CONSUMERS(kHeadDim, kLean);
constexpr int kTileQ = FI_PREFILL_WS_TILE_Q(kHeadDim, kLean);
constexpr int kThreads = FI_PREFILL_WS_THREADS(kHeadDim, kLean);
constexpr bool kPaged = kKind == FI_PREFILL_KIND_PAGED;
// A causal mask proper (kCausal also holds for windows): the host's test.
constexpr bool kCausalMask = fijit_cfg::kMask == fijit_cfg::kMaskCausal;
constexpr int kTileKV =
    kFp8 ? FI_PREFILL_FP8_TILE_KV : FI_PREFILL_WS_TILE_KV(kHeadDim, kLean, kCausalMask);
constexpr int kStages = kFp8 ? FI_PREFILL_FP8_STAGES : FI_PREFILL_WS_STAGES(kHeadDim);
// Paged K/V tiles that may be boxes of part of a page (produce.cuh:
// produce_paged<true>), where pages need not divide the tile:
// FI_PREFILL_WS_PAGE_OK.
constexpr bool kPagesInParts = kPaged && FI_PREFILL_WS_PART_PAGES(kTileKV);
constexpr int kQBufs = FI_PREFILL_WS_Q_BUFS(kHeadDim);
// Q loads per buffer, each on its own full and empty barriers: with one
// buffer, a load per consumer's 64 rows, so that a consumer whose output
// has left starts its next block without waiting for the others' epilogues.
constexpr int kQPartRows = FI_PREFILL_WS_Q_BOX_ROWS(kHeadDim, kLean);
constexpr int kQParts = kTileQ / kQPartRows;
constexpr int kQBars = kQBufs * kQParts;
// Q may come by TMA as it is in q: the tuple changes it by sm_scale alone,
// and sm_scale, positive (the host checks), commutes with masks and maxima.
// Where the host makes a q map (params.h: fi_prefill_ws.q).
constexpr bool kRawQTuple = !kRope && kSoftmax && KeepsBaseQuery<Variant, P>::value &&
                            KeepsBaseLogits<Variant, P>::value;
// Q and K rows as TMA lands them: 128-byte panels of 64 16-bit columns or
// 128 fp8 ones; the output's are 16-bit.
constexpr int kInBytes = Traits<DTypeKV>::kBytes;
constexpr int kPanelCols = 128 / kInBytes;
// Q and K have kHeadDim columns, V and O kHeadDimVO (MLA: 192 and 128).
constexpr int kPanels = kHeadDim / kPanelCols;
constexpr int kPanelsVO = kHeadDimVO / kPanelCols;
constexpr int kOutPanels = kHeadDimVO / 64;
constexpr int kNT = kTileKV / 8;     // 8-key column tiles of S
constexpr int kDT = kHeadDimVO / 8;  // 8-wide column tiles of O
constexpr unsigned int kQBytes = kTileQ * kHeadDim * kInBytes;
constexpr unsigned int kKVBytes = kTileKV * kHeadDim * kInBytes;  // a K slot
// fp8: V^T in 128-key panels of head_dim 128-byte rows (prefill/fp8.cuh); a
// V slot is whole panels, else kTileKV rows of kHeadDimVO.
constexpr unsigned int kVtPanelBytes = kHeadDim * 128u;
constexpr unsigned int kVSlotBytes =
    kFp8 ? FI_PREFILL_FP8_V_PANELS * kVtPanelBytes : kTileKV * kHeadDimVO * kInBytes;
// A Q buffer also stages the block's 16-bit output (consume.cuh).
constexpr unsigned int kQBufBytes = kTileQ * kHeadDim * 2;
// Products of a K/V tile: k-steps of S = Q K^T over head_dim and of
// O += P V over the tile's keys (32 for fp8, else 16; wgmma_sm90.cuh).
constexpr int kStepK = wg::Mma<DTypeKV, kTileKV>::kK;
constexpr int kQKSteps = kHeadDim / kStepK;
constexpr int kPVSteps = kTileKV / kStepK;
// Layout of a K or V slot. Panel-major (a panel's kTileKV rows, then the
// next panel's), as a tile-sized TMA box per panel lands; or, for pages,
// group-major (8 rows of every panel, then the next 8 rows), as a box of a
// page's rows lands (prefill/params.h), so that a box costs one TMA, not
// one per panel. The descriptors' strides: from one panel to the next and from
// one 8-row group to the next.
struct SlotLayout {
    unsigned int panel, group;
};
constexpr SlotLayout kPanelMajor = {kTileKV * 128u, 1024u};
constexpr SlotLayout kGroupMajor = {1024u, kPanels * 1024u};
constexpr SlotLayout kVGroupMajor = {1024u, kPanelsVO * 1024u};  // V's rows: kPanelsVO panels
constexpr SlotLayout kKLayout = kPaged && !kRotatedK ? kGroupMajor : kPanelMajor;
constexpr SlotLayout kVLayout = kPaged ? kVGroupMajor : kPanelMajor;

// Byte offset of 16-byte chunk `ch` of row `row` in a slot of layout `L`,
// with the 128-byte swizzle. Where a panel's rows are contiguous the row
// offset is spelt row x 128: ptxas does not fold the group form back into
// it, and the paged K/V warp at head_dim 64 spilled for the difference.
__device__ __forceinline__ unsigned int slot_offset(const SlotLayout &L, int row, int ch)
{
    const unsigned int row_at = L.group == 1024u
                                    ? (unsigned int)row * 128u
                                    : (unsigned int)(row >> 3) * L.group + (unsigned int)(row & 7) * 128u;
    return row_at + (unsigned int)(ch >> 3) * L.panel + (unsigned int)(((ch & 7) ^ (row & 7)) * 16);
}
// Named barriers (0 is __syncthreads): the consumers' turns, then one per
// consumer for its own 128 threads.
constexpr int kBarTurn = 1;
constexpr int kBarWg = kBarTurn + kConsumers;
// The consumers alternate their MMA issue ("ping-pong": consume.cuh) where
// that measured faster than each issuing as soon as it is ready: with three
// consumers (head_dim 64, H100, bench_prefill.py A/B in one process: 1.05-
// 1.17x at seq 4k-8k, 0.97-1.10x at 16k), with a mask (no turns: head_dim
// 256 causal 0.90-1.03x, its loop spilling 12 B; fp8 causal 0.98-1.02x) and
// at head_dim 128 in 16 bits (no turns: seq 1k 0.98-0.99x, else 1.00-1.03x).
// Not at head_dim 256 without a mask (no turns: single prefill 1.00-1.08x,
// ragged and paged 1.01-1.03x) nor in fp8 without one (1.01-1.10x; H200,
// 2026-11-29, A/B in one process).
constexpr bool kPingPong = kConsumers == 3 || fijit_cfg::kMask != fijit_cfg::kMaskNone ||
                           (kHeadDim == 128 && !kFp8);
// The wait for P.V of tile i - 1 stays after the softmax of tile i, which
// then runs beside that product as the loop is written: ptxas had hoisted
// the wait above the softmax (it schedules within a block, and the wait has
// no operands to keep it below), so a consumer's softmax began only once
// both of its products were done (ncu source view, fp8 seq 8k: the wait the
// consumers' longest stall, 7.7% of the warps' samples). A branch that needs
// the softmax's sums ends the block before the wait (consume.cuh). Taken at
// head_dim 128, where it measured faster (H200, 2026-11-29, A/B in one
// process): 16-bit single prefill seq 4k-16k 1.00-1.11x (no mask
// 1.02-1.11x), seq 1k 0.98-1.02x; ragged 1.01-1.04x, paged 0.99-1.02x; fp8
// no mask 1.00-1.04x, causal 0.98-1.03x. Not at 64 (three consumers:
// 0.97-1.00x) nor 256 (0.97-1.04x, and paged spills 8 B).
constexpr bool kWaitAfterSoftmax = kHeadDim == 128;
// Each consumer skips the tiles it has no key of (past the request, or
// causal past its last row). With three (head_dim 64) always: a 192-row
// tile of a group of 1 spans 192 tokens, and a short request's last tile is
// often a third full. Measured at head_dim 64 (H100, A/B in one process, seq
// 1k-16k): causal 32/32 1.01-1.12x, causal 32/8 0.94-1.08x, no mask
// 0.93-1.06x (as the noise). With two, under a causal mask or a window:
// consumer 0's rows end 64 packed rows before the block's, and with them,
// often, its last tile. Tried before with two, it lost (0.86-0.96x at
// head_dim 256), and then ptxas serialised the wgmmas (C7520, "WG.AR
// in divergent path": the tile count depends on the warpgroup, which it
// could not prove uniform); since run() takes the warpgroup from a shuffle
// (kUniformWg) no module serialises and none spills more. Measured (H200,
// 2026-11-29, A/B in one process, two runs): bench_batch_prefill.py causal
// ragged 1.00-1.03x, paged hd 128 1.04-1.06x, hd 256 1.05x;
// bench_prefill.py causal hd 128 0.99-1.02x, hd 256 1.01-1.06x, window hd
// 128 1.01-1.02x, hd 256 0.97-1.03x, hd 64 ALiBi causal (two consumers)
// 1.01-1.05x.
constexpr bool kOwnTiles = kConsumers == 3 || kCausal;
// A consumer's last tile under a causal mask: P.V of only the k-steps of
// the keys its rows see. Measured against own tiles alone (H200, 2026-11-29,
// A/B in one process): hd 128 (160-key tiles) ragged 1.01x, paged 1.01x,
// single prefill 0.98-1.03x; hd 64 paged 1.02-1.04x (three runs), but
// ragged 0.98-1.01x and single prefill 1.00-1.01x, so only paged there; hd
// 256 (80-key tiles) 0.97-1.01x, so not there. S of the tile's first 64 or
// 128 keys by a narrower wgmma made ptxas serialise the wgmmas (C7515,
// C7511).
constexpr bool kTrimLast = kOwnTiles && kCausalMask && !kFp8 &&
                           (kTileKV == 160 || (kConsumers == 3 && kPaged));
// The consumers' warpgroup index as a shuffle from lane 0, which ptxas knows
// to be uniform (ws/kernel.cuh: run), where the wgmmas they issue
// depend on it: their tile counts with two consumers, and the last P.V's
// k-steps (kTrimLast). Not with three otherwise, where in one run single
// prefill causal 32/32 seq 4k measured 0.82x with it (not seen again with
// kTrimLast's shuffle: 1.00-1.01x in two runs).
constexpr bool kUniformWg = kOwnTiles && (kConsumers == 2 || kTrimLast);
// Registers of the producer and of the consumers. setmaxnreg only moves
// registers within what the CTA was launched with (64K / threads a thread,
// in steps of 8: 168 with two consumers, 128 with three), so an increase
// past that waits forever: the sum must fit (measured: 32 / 240 hangs). The
// paged producer is a warp that also reads page ids: with the consumers
// loading Q it fits 24, beside consumers of 240; with Q by TMA and the
// block feed besides (kRawQTuple) it needs 40 (24: 12-16 B of spills),
// beside 232. (While it also copied the partial page's keys, before
// consume.cuh's zero_v_tail, it needed 40, 56 and 64.) Three consumers
// leave 32 / 160. Single prefill at 192/128 (MLA) with Q by TMA in two
// parts spilled 4 B at 24 (causal and window); 40 / 232 spill nothing.
constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
constexpr bool kWideProducer =
    kRawQTuple && (kPaged || (kSplitVO && kKind == FI_PREFILL_KIND_SINGLE));
constexpr int kProducerRegs = kConsumers == 3 ? 32 : kWideProducer ? 40 : 24;
constexpr int kConsumerRegs = kConsumers == 3 ? 160 : kWideProducer ? 232 : 240;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kThreads * kLaunchRegs,
              "setmaxnreg: the warpgroups' registers must fit the CTA's launch allocation");

// A scheduler thread passes the blocks on: everywhere but paged K/V with the
// consumers loading Q (RoPE, per-logit hooks), where at 24 / 240 registers
// reading the feed spills 20-40 B with RoPE, which spills nowhere without
// it (ALiBi: hd 64 0 -> 12 B, hd 128/256 44-92 -> 56-92 B). Those CTAs
// take every gridDim.x-th block; at the grid's end their SMs idle ~3% of
// the time.
constexpr bool kFeed = !kPaged || kRawQTuple;
// O is rescaled only where a row's maximum grows by more than 2^8 in the
// weights (prefill/softmax.cuh, kSlack): with random logits nearly every
// tile of a long row raised some row's maximum of a warp a little, and the
// warp then rescaled all of its O. Not with three consumers, where ptxas
// then serialises the batch kinds' wgmmas (C7520).
constexpr int kRescaleSlack = kConsumers == 3 ? 0 : 8;
// Paged K/V: the producer's first warp loads K and its last warp V (a lane
// per box each), so that the loop issuing a tile's boxes, a lane at a time,
// takes its issue slots from two SM sub-partitions' consumer warps, not all
// from the first's (a warpgroup's wgmma waits for its slowest warp; a
// cycle trace, bench/ws_trace.py, found those consumers' waits for S 40%
// longer than in ragged). Measured against one warp loading both (H200,
// 2026-11-29, bench_batch_prefill.py paged, A/B in one process, two runs):
// hd 128 1.02-1.08x, hd 64 1.00-1.03x, hd 256 0.98-1.02x (before
// kWaitAfterSoftmax: 0.98-1.02x). Only where Q comes by TMA: beside
// consumers that load Q the producer has 24 registers, and split it
// spilled in 60 more of the 108 paged modules.
constexpr bool kSplitKV = kPaged && kRawQTuple;
// Threads that load K and V: a warp for pages (a lane per box), two where
// K and V are split, else one.
constexpr int kKVLoaders = kPaged ? (kSplitKV ? 64 : 32) : 1;
// With two Q buffers, a consumer frees the one its block's output was staged
// in (and leaves by TMA from) only once the next block's first S is done,
// not after waiting for the store to read it at the block's end: the next
// block runs on the other buffer, and the producer refills this one for the
// block after. With kFeedWork: single prefill seq 1k 1.02-1.04x at hd 64
// and 128 (H200, 2026-11-29).
constexpr bool kLateQRelease = kQBufs == 2;
// Blocks passed on ahead of their use: the K/V loader starts block k + 1
// while the consumers compute block k (a claim further ahead would hold a
// short block back from an idle CTA at the grid's end: see feed_blocks).
constexpr int kFeedSlots = 2;
// A feed slot: the block's number, then its Work (schedule.cuh), from 16
// bytes on.
constexpr unsigned int kFeedSlotBytes = 64;
// The feed's slots follow the barriers, 16-byte aligned.
constexpr unsigned int kFeedAt = (8u * (4 * kStages + 2 * kQBars + 2 * kFeedSlots + 1) + 15u) & ~15u;

static_assert(kTileQ == 64 * kConsumers && kThreads == 128 * (kConsumers + 1),
              "a producer and consumers of 64 rows");
static_assert(kConsumers == 2 || kConsumers == 3, "the turn barriers and registers above");
static_assert(!kFp8 || (kRawQTuple && kKind == FI_PREFILL_KIND_SINGLE && kTileKV % 32 == 0),
              "fp8: single prefill with Q as it is in q, k-steps within 128-key panels");
static_assert(kQParts == 1 || kQParts == kConsumers, "a Q load is a tile's rows or a consumer's");
static_assert(!kSplitVO || !kFp8, "fp8 has one head dim");
static_assert(kKVBytes == kPanels * kTileKV * 128u && (kFp8 || kVSlotBytes == kPanelsVO * kTileKV * 128u),
              "a K or V slot is its panels of kTileKV 128-byte rows (produce.cuh: load_tile)");
static_assert(kOutPanels * 64 == kHeadDimVO && kHeadDimVO <= kHeadDim,
              "the output's 64-column panels are staged in the Q buffer's first ones");
static_assert((kFp8 ? FI_PREFILL_FP8_SMEM_BYTES(kHeadDim, kLean)
                      : FI_PREFILL_WS_SMEM_BYTES_VO(kHeadDim, kHeadDimVO, kLean, kCausalMask)) >=
                  kQBufs * kQBufBytes + kStages * (kKVBytes + kVSlotBytes) + kFeedAt +
                      kFeedSlotBytes * kFeedSlots,
              "shared memory: Q, the K and V rings, the block feed, their barriers");

// Shared memory: the Q buffers (kTileQ rows each), the K ring, the V ring
// (slots panel-major, group-major for pages: SlotLayout), then the
// barriers: full K, full V, empty K, empty V, one per slot, full Q and
// empty Q, one per buffer and part (kQParts), full and empty of the block
// feed, one per slot, the K/V loader's "issued"; then the feed's slots (a
// block and its Work). Block j of a CTA (its j-th with rows) uses Q buffer
// j % kQBufs when Q comes by TMA, else the first.
struct Smem {
    unsigned int q, k, v, bars;
    __device__ __forceinline__ unsigned int q_buf(int b) const { return q + b * kQBufBytes; }
    __device__ __forceinline__ unsigned int k_slot(int s) const { return k + s * kKVBytes; }
    __device__ __forceinline__ unsigned int v_slot(int s) const { return v + s * kVSlotBytes; }
    __device__ __forceinline__ unsigned int full_k(int s) const { return bars + 8u * s; }
    __device__ __forceinline__ unsigned int full_v(int s) const { return bars + 8u * (kStages + s); }
    __device__ __forceinline__ unsigned int empty_k(int s) const { return bars + 8u * (2 * kStages + s); }
    __device__ __forceinline__ unsigned int empty_v(int s) const { return bars + 8u * (3 * kStages + s); }
    __device__ __forceinline__ unsigned int full_q(int b, int part) const
    {
        return bars + 8u * (4 * kStages + b * kQParts + part);
    }
    __device__ __forceinline__ unsigned int empty_q(int b, int part) const
    {
        return bars + 8u * (4 * kStages + kQBars + b * kQParts + part);
    }
    __device__ __forceinline__ unsigned int full_feed(int s) const
    {
        return bars + 8u * (4 * kStages + 2 * kQBars + s);
    }
    __device__ __forceinline__ unsigned int empty_feed(int s) const
    {
        return bars + 8u * (4 * kStages + 2 * kQBars + kFeedSlots + s);
    }
    // The K/V loader's arrival after each block's loads (feed_blocks).
    __device__ __forceinline__ unsigned int issued() const
    {
        return bars + 8u * (4 * kStages + 2 * kQBars + 2 * kFeedSlots);
    }
    __device__ __forceinline__ unsigned int feed(int s) const { return bars + kFeedAt + kFeedSlotBytes * s; }
};

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
