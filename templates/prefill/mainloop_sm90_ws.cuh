// Hopper main loop of prefill (sm_90a): warp-specialised, TMA-fed, with the
// softmax overlapped with the tensor cores. It computes query tiles of
// kTileQ rows (128, or 192 at head_dim 64: FI_PREFILL_WS_TILE_Q) and is
// launched in place of tile kernel 0 (prefill/tile_loop.cuh) for the tuples
// FI_PREFILL_WS_TUPLE accepts (prefill/params.h).
// Only the main loop is its own: the tile scheduler (prefill/work.cuh), the
// query rows (rope.cuh), masks (mask.cuh), softmax (softmax.cuh), epilogue
// (epilogue.cuh) and the variant hooks are the tile kernels'.
//
// One CTA = a producer warpgroup and kConsumers (2 or 3) consumers:
//  * the producer (warpgroup 0) gives its registers away (setmaxnreg); its
//    first warp issues the K and V tile loads and a thread of its second
//    warp those of Q: cp.async.bulk.tensor (TMA)
//    through tensor maps the host encodes per launch, into a ring of
//    kStages slots per operand, each slot with a "full" mbarrier (TMA
//    transaction bytes) and an "empty" one (consumer warps arrive when
//    their wgmma has finished reading it). K and V have separate rings so
//    that K of the next tile can land while V of this one is still read.
//    TMA writes the 128-byte swizzle that the wgmma descriptors read, one
//    box of 64 columns x kTileKV keys per panel (paged: one box per page,
//    all its panels; SlotLayout); keys past the tensor's end arrive as zeros.
//    Q comes by TMA too when the tuple changes it by sm_scale alone
//    (kRawQTuple): as it is in q, one box per panel is a tile's packed rows;
//    sm_scale then enters the softmax's exponent. The next block's Q lands
//    while the consumers finish this one, so a persistent CTA goes from one
//    block to the next without waiting for memory: into the second of two
//    Q buffers (head_dim <= 128), or into the one (head_dim 256, and paged
//    K/V at 128) once the block's last S has run, the output then leaving
//    from registers (kDirectOut). Paged K/V at head_dim 64 and 256 keeps the
//    consumers loading Q; the K/V warp prefetches a paged block's Q rows
//    into L2 either way (produce_paged).
//  * the consumers (warpgroups 1, 2[, 3]), 64 query rows each, wait for Q or
//    load and transform their rows themselves (RoPE, query_transform), then
//    run the tile loop with the next tile's S = Q K^T issued before this tile's
//    softmax (FlashAttention-3's intra-warpgroup overlap):
//        issue S(i) ; issue O += P(i-1) V(i-1) ; wait S(i) ; softmax S(i)
//        wait P V ; rescale O ; P(i-1) <- P(i)
//    and the consumers take turns issuing their MMAs (named barriers,
//    "ping-pong", round robin with three), so that one's softmax runs while
//    another's MMAs do.
//
// A CTA takes blocks of the grid the tile kernels would launch
// (fi_prefill_ws: work items x kv heads): one each in a launch of a CTA per
// block, several in the persistent one, the rings' position running on
// across them. A thread of the producer's third warp chooses them
// (blockIdx.x first, then + gridDim.x, ..., or the next unclaimed block of
// the grid: fi_prefill_ws.claims) and hands them to every role through a
// ring of kFeedSlots in shared memory (kFeed; where the consumers load the
// Q of paged K/V, every role walks blockIdx.x + k gridDim.x itself).
//
// Registers: consumers 240, producer 24 (paged: 232 and 40, or 224 and 56
// with Q by TMA; three consumers: 160 and 32; kConsumerRegs).
#pragma once

#include "common/tma_sm90.cuh"
#include "prefill/epilogue.cuh"
#include "prefill/mask.cuh"
#include "prefill/rope.cuh"
#include "prefill/softmax.cuh"

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
constexpr int kTileKV = FI_PREFILL_WS_TILE_KV(kHeadDim, kLean, kPaged, kCausalMask);
constexpr int kStages = FI_PREFILL_WS_STAGES(kHeadDim, kPaged);
constexpr int kQBufs = FI_PREFILL_WS_Q_BUFS(kHeadDim, kPaged);
// Q may come by TMA as it is in q: the tuple changes it by sm_scale alone,
// and sm_scale, positive (the host checks), commutes with masks and maxima.
// Where the host makes a q map (FI_PREFILL_WS_RAW_Q).
constexpr bool kRawQTuple = FI_PREFILL_WS_RAW_Q(kHeadDim, kPaged) && !kRope && kSoftmax &&
                            KeepsBaseQuery<Variant, P>::value && KeepsBaseLogits<Variant, P>::value;
// With one Q buffer, loaded by TMA, the output leaves the registers as
// they are (store_row_direct), not staged in the Q rows, so that Q is free
// once the block's last S = Q K^T has run: the next block's Q lands while
// the consumers finish this one (its last P.V, the epilogue). Where the
// consumers load Q (paged, RoPE, query hooks) staging costs nothing more.
constexpr bool kDirectOut = kQBufs == 1 && kRawQTuple;
constexpr int kPanels = kHeadDim / 64;
constexpr int kNT = kTileKV / 8;   // 8-key column tiles of S
constexpr int kDT = kHeadDim / 8;  // 8-wide column tiles of O
constexpr unsigned int kQBytes = kTileQ * kRowBytes;
constexpr unsigned int kKVBytes = kTileKV * kRowBytes;
// Layout of a K or V slot. Panel-major (a panel's kTileKV rows, then the
// next panel's), as a tile-sized TMA box per panel lands; or, for pages,
// group-major (8 rows of every panel, then the next 8 rows), as a page's
// one box lands (prefill/params.h), so that a page costs one TMA, not one
// per panel. The descriptors' strides: from one panel to the next and from
// one 8-row group to the next.
struct SlotLayout {
    unsigned int panel, group;
};
constexpr SlotLayout kPanelMajor = {kTileKV * 128u, 1024u};
constexpr SlotLayout kGroupMajor = {1024u, kPanels * 1024u};
constexpr SlotLayout kKLayout = kPaged && !kRotatedK ? kGroupMajor : kPanelMajor;
constexpr SlotLayout kVLayout = kPaged ? kGroupMajor : kPanelMajor;

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
// The consumers alternate their MMA issue (see above). Measured with three
// consumers (head_dim 64, H100, bench_prefill.py A/B in one process): round
// robin 1.05-1.17x no turns at seq 4k-8k, 0.97-1.10x at 16k.
constexpr bool kPingPong = true;
// Each consumer skips the tiles it has no key of (past the request, or
// causal past its last row), only with three: a 192-row tile of a group of
// 1 spans 192 tokens, and a short request's last tile is often a third
// full. Measured at head_dim 64 (H100, A/B in one process, seq 1k-16k):
// causal 32/32 1.01-1.12x, causal 32/8 0.94-1.08x, no mask 0.93-1.06x (as
// the noise); with two consumers its registers cost 0.86-0.96x at head_dim
// 256.
constexpr bool kOwnTiles = kConsumers == 3;
// Registers of the producer and of the consumers. setmaxnreg only moves
// registers within what the CTA was launched with (64K / threads a thread,
// in steps of 8: 168 with two consumers, 128 with three), so an increase
// past that waits forever: the sum must fit (measured: 32 / 240 hangs). The
// paged producer (a warp that also reads page ids and copies partial pages)
// spills below 32; 40 / 232 fits exactly and spills nowhere on the plain
// tuples; with Q by TMA and the block feed besides (kRawQTuple) it needs
// 56 (48: 24 B of spills), beside consumers of 224. Three consumers leave
// 32 / 160.
constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
constexpr int kProducerRegs = kConsumers == 3 ? 32 : kPaged ? (kRawQTuple ? 56 : 40) : 24;
constexpr int kConsumerRegs = kConsumers == 3 ? 160 : kPaged ? (kRawQTuple ? 224 : 232) : 240;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kThreads * kLaunchRegs,
              "setmaxnreg: the warpgroups' registers must fit the CTA's launch allocation");

// A scheduler thread passes the blocks on: everywhere but paged K/V with the
// consumers loading Q, where reading the feed costs the K/V warp 20 bytes of
// spills at 40 registers and its consumers 24 at 232 (those CTAs take every
// gridDim.x-th block; at the grid's end their SMs idle ~3% of the time).
constexpr bool kFeed = !kPaged || kRawQTuple;
// Blocks passed on ahead of their use: the K/V loader starts block k + 1
// while the consumers compute block k (a claim further ahead would hold a
// short block back from an idle CTA at the grid's end: see feed_blocks).
constexpr int kFeedSlots = 2;

static_assert(kTileQ == 64 * kConsumers && kThreads == 128 * (kConsumers + 1),
              "a producer and consumers of 64 rows");
static_assert(kConsumers == 2 || kConsumers == 3, "the turn barriers and registers above");
static_assert(FI_PREFILL_WS_SMEM_BYTES(kHeadDim, kLean, kPaged, kCausalMask) >=
                  kQBufs * kQBytes + 2u * kStages * kKVBytes +
                      (4u * kStages + 2u * kQBufs + 2u * kFeedSlots) * 8u + 4u * kFeedSlots,
              "shared memory: Q, the K and V rings, the block feed, their barriers");

// Shared memory: the Q buffers (kTileQ rows each), the K ring, the V ring
// (slots panel-major, group-major for pages: SlotLayout), then the
// barriers: full K, full V, empty K, empty V, one per slot, full Q and
// empty Q, one per buffer, full and empty of the block feed, one per slot;
// then the feed's slots (block numbers). Block j of a CTA (its j-th with
// rows) uses Q buffer j % kQBufs when Q comes by TMA, else the first.
struct Smem {
    unsigned int q, k, v, bars;
    __device__ __forceinline__ unsigned int q_buf(int b) const { return q + b * kQBytes; }
    __device__ __forceinline__ unsigned int k_slot(int s) const { return k + s * kKVBytes; }
    __device__ __forceinline__ unsigned int v_slot(int s) const { return v + s * kKVBytes; }
    __device__ __forceinline__ unsigned int full_k(int s) const { return bars + 8u * s; }
    __device__ __forceinline__ unsigned int full_v(int s) const { return bars + 8u * (kStages + s); }
    __device__ __forceinline__ unsigned int empty_k(int s) const { return bars + 8u * (2 * kStages + s); }
    __device__ __forceinline__ unsigned int empty_v(int s) const { return bars + 8u * (3 * kStages + s); }
    __device__ __forceinline__ unsigned int full_q(int b) const { return bars + 8u * (4 * kStages + b); }
    __device__ __forceinline__ unsigned int empty_q(int b) const
    {
        return bars + 8u * (4 * kStages + kQBufs + b);
    }
    __device__ __forceinline__ unsigned int full_feed(int s) const
    {
        return bars + 8u * (4 * kStages + 2 * kQBufs + s);
    }
    __device__ __forceinline__ unsigned int empty_feed(int s) const
    {
        return bars + 8u * (4 * kStages + 2 * kQBufs + kFeedSlots + s);
    }
    __device__ __forceinline__ unsigned int feed(int s) const
    {
        return bars + 8u * (4 * kStages + 2 * kQBufs + 2 * kFeedSlots) + 4u * s;
    }
};

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
// before it has begun), so that a CTA holds no more blocks than the feed.
__device__ __forceinline__ void feed_blocks(const P &p, const fi_prefill_ws &ws, const Smem &sm)
{
    const int blocks = ws.work_items * ws.kv_heads;
    for (int k = 0, b = (int)blockIdx.x;; ++k) {
        const int s = k % kFeedSlots;
        bar_wait(sm.empty_feed(s), ((k / kFeedSlots) & 1) ^ 1);
        for (b = k == 0 ? b : next_block(ws, b, blocks); b < blocks; b = next_block(ws, b, blocks)) {
            const Work w = get_work(p, b, ws.work_items, ws.kv_heads);
            if (w.tile * kTileQ < w.qo_len * p.group_size) break;
        }
        sts32(sm.feed(s), (unsigned int)b);
        bar_arrive(sm.full_feed(s));  // release: the slot's write is seen with the phase
        if (b >= blocks) return;
    }
}

// The k-th block of the CTA from the feed. Every reading thread frees the
// slot itself, so its own read is ordered before the rewrite (a warp that
// left the arrive to one lane after __syncwarp raced it in racecheck).
__device__ __forceinline__ int take_block(const Smem &sm, int k)
{
    const int s = k % kFeedSlots;
    bar_wait(sm.full_feed(s), (k / kFeedSlots) & 1);
    const int b = (int)lds32(sm.feed(s));
    bar_arrive(sm.empty_feed(s));
    return b;
}

// The producer's one thread: Q of the CTA's block j, rows row0.. of request
// w, into its buffer once the consumers have stored the output of block
// j - kQBufs from it (they stage it there).
__device__ __forceinline__ void produce_q(const P &p, const fi_prefill_ws &maps, const Work &w,
                                          int row0, const Smem &sm, int j)
{
    const int b = j % kQBufs;
    bar_wait(sm.empty_q(b), ((j / kQBufs) & 1) ^ 1);
    bar_expect(sm.full_q(b), kQBytes);
    const int G = p.group_size;
#pragma unroll
    for (int c = 0; c < kPanels; ++c)
        tma_load(sm.q_buf(b) + c * kTileQ * 128u, &maps.q, c * 64, w.kv_head * G,
                 w.q_begin + row0 / G, sm.full_q(b));
}

// The producer's first thread: K and V of every tile of one block into the
// rings, whose tiles so far number `it` (the ring position runs on across
// the blocks of a persistent CTA).
__device__ __forceinline__ void produce(const fi_prefill_ws &maps, const Work &w, const KeyRange &kr,
                                        const Smem &sm, int it)
{
    // Row of key 0 of the request in the tensors the maps describe.
    const int k_row = kRotatedK || kKind == FI_PREFILL_KIND_SINGLE ? w.k_row0 : w.kv_begin;
    const int v_row = kKind == FI_PREFILL_KIND_SINGLE ? 0 : w.kv_begin;
    // One tile of one operand into `slot`, once the consumers freed it.
    auto load = [&](unsigned int slot, const fi_tma_map *map, unsigned int empty,
                    unsigned int full, unsigned int free_parity, int row) {
        bar_wait(empty, free_parity);
        bar_expect(full, kKVBytes);
#pragma unroll
        for (int c = 0; c < kPanels; ++c)
            tma_load(slot + c * kTileKV * 128u, map, c * 64, w.kv_head, row, full);
    };
    for (int i = 0; i < kr.n; ++i, ++it) {
        const int s = it % kStages;
        const unsigned int free_parity = ((it / kStages) & 1) ^ 1;
        const int t0 = kr.kv_start + i * kTileKV;
        load(sm.k_slot(s), &maps.k, sm.empty_k(s), sm.full_k(s), free_parity, k_row + t0);
        load(sm.v_slot(s), &maps.v, sm.empty_v(s), sm.full_v(s), free_parity, v_row + t0);
    }
}

// Paged K/V: the producer's first warp. A tile is kTileKV / page_size whole
// pages (the host launches this only when page_size divides kTileKV and is
// a multiple of 8, so that every page lands on swizzle atoms), each one TMA
// of all its panels (group-major slots: kKLayout, kVLayout).
// The request's last page may be partial and the tile may run past it: K
// rows there are left as they are (those keys are masked), while V rows
// must be finite, since P.V multiplies them by a zero weight: the warp
// copies the partial page's rows itself and zeroes the rest, before the
// full barrier's arrival publishes them.
__device__ __forceinline__ void produce_paged(const P &p, const fi_prefill_ws &maps, const Work &w,
                                              const KeyRange &kr, const Smem &sm, int it)
{
    static_assert(kTileKV / 8 <= 32, "a lane per page of a tile");
    const int lane = (int)threadIdx.x % 32;
    // The consumers load this block's Q themselves once they have finished
    // the previous block, from memory no CTA has read yet. This warp gets
    // here up to kStages tiles before them, so it asks L2 for those rows
    // (through the map of q, when the host made one): the consumers' loads
    // then wait for L2, not for HBM. Measured (H100, bench_batch_prefill.py,
    // fp16 32/8): hd 128 causal 463-467 TFLOP/s without, 464-479 with (four
    // runs in two device calls), the rest within the runs' spread (+-2%):
    // a small gain at best, kept as it costs no registers. Issuing all of a
    // thread's Q loads at once added nothing; nor did Q by TMA into two
    // buffers (two K/V stages at hd 128: paged x single 0.81-0.92x against
    // 0.81-0.94x).
    if (lane == 0 && maps.q_rows > 0) {
#pragma unroll
        for (int c = 0; c < kPanels; ++c)
            tma_prefetch(&maps.q, c * 64, w.kv_head * p.group_size,
                         w.q_begin + w.tile * kTileQ / p.group_size);
    }
    for (int i = 0; i < kr.n; ++i, ++it) {
        const int s = it % kStages;
        const unsigned int free_parity = ((it / kStages) & 1) ^ 1;
        const int t0 = kr.kv_start + i * kTileKV;
        const int keys = imin(kTileKV, w.kv_len - t0);
        const int n = (keys + p.page_size - 1) / p.page_size;  // pages, the partial one too
        const int whole = keys / p.page_size;
        // The tile's page ids, one per lane, read at once (one latency, not n).
        const int my_page = lane < n ? p.kv_indices[w.kv_begin + t0 / p.page_size + lane] : 0;
        // Pages [0, count) of the tile into `slot`, a TMA per page,
        // completing `full`: lane i issues page i's (one instruction for the
        // warp's pages, where one lane issuing them all in turn took as long
        // as the tile's MMAs), after lane 0 has set the bytes to expect.
        auto load_pages = [&](unsigned int slot, const fi_tma_map *map, const int (&coords)[3],
                              unsigned int full, int count) {
            const unsigned int page_bytes = (unsigned int)p.page_size * kRowBytes;
            if (lane == 0) bar_expect(full, (unsigned int)count * page_bytes);
            __syncwarp();
            if (lane < count)
                tma_load_page(slot + (unsigned int)lane * page_bytes, map, w.kv_head * coords[0],
                              my_page * coords[1] + w.kv_head * coords[2], full);
        };

        bar_wait(sm.empty_k(s), free_parity);
        if constexpr (kRotatedK) {
            if (lane == 0) {
                bar_expect(sm.full_k(s), kKVBytes);
#pragma unroll
                for (int c = 0; c < kPanels; ++c)
                    tma_load(sm.k_slot(s) + c * kTileKV * 128u, &maps.k, c * 64, w.kv_head,
                             w.k_row0 + t0, sm.full_k(s));
            }
        } else {
            load_pages(sm.k_slot(s), &maps.k, maps.k_coords, sm.full_k(s), n);
        }

        bar_wait(sm.empty_v(s), free_parity);
        const int rows = whole * p.page_size;
        if (rows < kTileKV) {
            const int tail_page = __shfl_sync(0xffffffffu, my_page, imin(whole, 31));
            const DTypeKV *tail = static_cast<const DTypeKV *>(p.v) +
                                  (long long)w.kv_head * p.v_stride_h +
                                  (keys > rows ? (long long)tail_page * p.v_stride_page : 0);
            // cp.async zero-fills the rows past the keys; waited for here, as
            // the generic-proxy writes must be fenced before the arrival.
            for (int c = lane; c < (kTileKV - rows) * kChunks; c += 32) {
                const int r = c / kChunks, ch = c % kChunks;
                const bool real = rows + r < keys;
                cp_async16(sm.v_slot(s) + slot_offset(kVLayout, rows + r, ch),
                           real ? tail + (long long)r * p.v_stride_n + ch * 8 : tail, real);
            }
            cp_async_commit();
            cp_async_wait<0>();
            wg::fence_proxy_async();  // read by wgmma after the barrier
        }
        __syncwarp();
        load_pages(sm.v_slot(s), &maps.v, maps.v_coords, sm.full_v(s), whole);
    }
}

// One consumer warpgroup: 64 query rows from row0 + 64 * wg of the tile of
// the CTA's block j; the rings hold `it` tiles before its first (see
// produce). raw_q: Q comes by TMA, unscaled.
__device__ __forceinline__ void consume(const P &p, const Work &w, const KeyRange &kr,
                                        const Smem &sm, int row0, int wg, int it, int j,
                                        bool raw_q)
{
    const int wtid = (int)threadIdx.x % 128;
    const int warp = wtid / 32, lane = wtid % 32;
    const int g = lane / 4, t = lane % 4;
    const int G = p.group_size;
    const int kv_head = w.kv_head;
    const int rows = w.qo_len * G;
    const int off = w.kv_len - w.qo_len;
    const int wg_row0 = wg * 64;  // in the tile

    // Q's buffer: the producer's turn j when it loads Q, else always the first
    // (a fixed address keeps the wgmma descriptors out of registers).
    const unsigned int q_tile = raw_q ? sm.q_buf(j % kQBufs) : sm.q;
    // The factor the logits lack: sm_scale when Q came as it is in q (read
    // from the parameters where used: registers are what this loop lacks).
    auto logit_scale = [&]() { return raw_q ? p.sm_scale : 1.f; };
    if (raw_q) {
        bar_wait(sm.full_q(j % kQBufs), (j / kQBufs) & 1);
    } else {
        // Q rows of this warpgroup: rotated, transformed, rounded, swizzled
        // (the previous block's MMAs and epilogue are done with them: the
        // sync at this function's end).
#pragma unroll 2
        for (int c = wtid; c < 64 * (kChunks / 2); c += 128) {
            const int r = wg_row0 + c / (kChunks / 2), ch = c % (kChunks / 2);
            vec16_t lo, hi;
            query_chunks(p, w, row0 + r, ch, lo, hi);
            sts128(q_tile + swz_panel<kTileQ>(r, ch), lo);
            sts128(q_tile + swz_panel<kTileQ>(r, ch + kChunks / 2), hi);
        }
        wg::fence_proxy_async();  // Q is read by wgmma
        named_sync(kBarWg + wg, 128);
    }

    // This thread's rows: g and g + 8 of its warp's 16; rows past the
    // request borrow the last one (never stored).
    int row_tok[2], row_head[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int pr = imin(row0 + wg_row0 + warp * 16 + g + 8 * h, rows - 1);
        row_tok[h] = pr / G;
        row_head[h] = kv_head * G + pr % G;
    }
    // Tokens of the warpgroup's first and last rows: tiles that need masks.
    const int wg_tok_lo = imin(row0 + wg_row0, rows - 1) / G;
    const int wg_tok_hi = imin(row0 + wg_row0 + 63, rows - 1) / G;

    float o[kDT][4];
    float s[kNT][4];
    unsigned int pa[kTileKV / 16][4];  // P of the previous tile, A fragments of P.V
    float m[2], d[2];
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        m[h] = kSoftmax ? -inf_() : 0.f;
        d[h] = 0.f;
    }
    const unsigned int q_wg = q_tile + (unsigned int)wg_row0 * 128u;

    // S = Q K^T of slot s, issued (not waited for).
    auto issue_s = [&](int slot) {
        const unsigned int kt = sm.k_slot(slot);
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
            const unsigned int at = (unsigned int)(kk & 3) * 32u;
            wg::Mma<DTypeKV, kTileKV>::ss(
                s, wg::desc(q_wg + (kk >> 2) * kTileQ * 128u + at, 0),
                wg::desc(kt + (kk >> 2) * kKLayout.panel + at, 0, kKLayout.group), kk != 0);
        }
        wg::commit();
    };
    // O += P V of slot s, issued.
    auto issue_pv = [&](int slot) {
        const unsigned int vt = sm.v_slot(slot);
#pragma unroll
        for (int kk = 0; kk < kTileKV / 16; ++kk)
            wg::Mma<DTypeKV, kHeadDim>::rs(
                o, pa[kk], wg::desc(vt + kk * 2u * kVLayout.group, kVLayout.panel, kVLayout.group), 1);
        wg::commit();
    };
    auto release = [&](unsigned int bar) {
        if (lane == 0) bar_arrive(bar);
    };
    // Masks and the variant's logits hooks on S of the tile at key t0.
    auto transform = [&](int t0) {
        const bool need_mask = tile_needs_mask(p, w, t0, kTileKV, wg_tok_lo, wg_tok_hi, off);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int qpos = row_tok[h] + off, head = row_head[h];
            if (need_mask) {
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e)
                        s[nt][e] = masked_logit(p, w, s[nt][e], head, t0 + nt * 8 + 2 * t + (e & 1),
                                                qpos, true);
            } else {
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e)
                        s[nt][e] = Variant::logits_transform(p, s[nt][e], head,
                                                             t0 + nt * 8 + 2 * t + (e & 1), qpos);
            }
        }
    };
    // Online softmax of S into the new maximum and sums (prefill/softmax.cuh);
    // returns the factor O must be rescaled by, per row half (1 without
    // softmax), and sets `grew` when a maximum changed (else the factor is 1).
    auto softmax = [&](float (&scale)[2], bool &grew) {
        grew = false;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if constexpr (!kSoftmax) {
                scale[h] = 1.f;
                continue;
            }
            bool grew_row;
            softmax_row(s, h, m[h], d[h], scale[h], grew_row, logit_scale() * kLog2e);
            grew = grew || grew_row;
        }
    };
    // O *= scale, skipped when no row of the warp has a new maximum (most
    // tiles after the first few): a warp-uniform branch.
    auto rescale = [&](const float (&scale)[2], bool grew) {
        if (kSoftmax && any_sync(grew)) rescale_rows(o, scale);
    };
    auto take_p = [&]() {
#pragma unroll
        for (int kk = 0; kk < kTileKV / 16; ++kk) p_fragment(s, kk, pa[kk]);
    };
    // The turn of this consumer to issue MMAs, and handing it to the next.
    const int next_wg = wg + 1 == kConsumers ? 0 : wg + 1;
    auto turn_begin = [&]() {
        if constexpr (kPingPong) named_sync(kBarTurn + wg, 256);
    };
    auto turn_end = [&]() {
        if constexpr (kPingPong) named_arrive(kBarTurn + next_wg, 256);
    };

    // The CTA's tiles (kr.n), and those of them this warpgroup computes
    // (kOwnTiles): none when its rows all lie past the request, and with a
    // causal mask none past its own last row's keys (the CTA's range runs
    // to the tile's last row). Through the others it only keeps the rings
    // and the turns going.
    const int n = kr.n;
    int n_own = n;
    if constexpr (kOwnTiles) {
        if (row0 + wg_row0 >= rows) n_own = 0;
        if (kCausal && n_own > 0)
            n_own = imax(0, imin(n, (imin(w.kv_len, wg_tok_hi + off + 1) - kr.kv_start + kTileKV - 1) /
                                        kTileKV));
    }
    // The last consumer lets consumer 0 go first; each then takes n + 1
    // turns (S of tile 0, S + P.V of tiles 1..n-1, P.V of the last; a
    // tile passed through takes one too), and the last skips its last
    // hand-over, so every turn barrier sees as many arrivals as waits.
    auto pass_turn = [&](bool last) {
        if (!last || next_wg != 0) turn_end();
    };
    if (kPingPong && n > 0 && next_wg == 0) named_arrive(kBarTurn + 0, 256);
    // Q by TMA into the one buffer: freed for the next block's once this
    // warpgroup's last S has run (kDirectOut), else after the epilogue.
    const bool early_q = kDirectOut && raw_q;
    auto free_q = [&]() { release(sm.empty_q(j % kQBufs)); };
    if (early_q && n_own == 0) free_q();
    if (n_own > 0) {
        float scale[2];
        bool grew;

        const int s0 = it % kStages;
        bar_wait(sm.full_k(s0), (it / kStages) & 1);
        turn_begin();
        wg::fence_regs(s);
        wg::fence();
        issue_s(s0);
        turn_end();
        wg::wait<0>();
        wg::fence_regs(s);
        release(sm.empty_k(s0));
        if (early_q && n_own == 1) free_q();
        transform(kr.kv_start);
        softmax(scale, grew);
        take_p();

        for (int i = 1; i < n_own; ++i) {
            const int ic = it + i, ip = ic - 1;  // ring positions of tiles i, i - 1
            const int sc = ic % kStages, sp = ip % kStages;
            bar_wait(sm.full_k(sc), (ic / kStages) & 1);
            turn_begin();
            wg::fence_regs(s);
            wg::fence_regs(o);
            wg::fence();
            issue_s(sc);
            // V waited for here, after the fence: ptxas then re-fences the
            // registers of P.V (its note C7519); waiting before the fence
            // avoids that but measured no faster (0.93-1.10x, H100 A/B).
            bar_wait(sm.full_v(sp), (ip / kStages) & 1);
            issue_pv(sp);
            turn_end();
            wg::wait<1>();  // S of tile i
            wg::fence_regs(s);
            release(sm.empty_k(sc));
            if (early_q && i + 1 == n_own) free_q();
            transform(kr.kv_start + i * kTileKV);
            softmax(scale, grew);
            wg::wait<0>();  // P.V of tile i - 1
            wg::fence_regs(o);
            wg::fence_regs(pa);
            release(sm.empty_v(sp));
            rescale(scale, grew);
            take_p();
        }

        const int il = it + n_own - 1;
        const int sl = il % kStages;
        bar_wait(sm.full_v(sl), (il / kStages) & 1);
        turn_begin();
        wg::fence_regs(o);
        wg::fence();
        issue_pv(sl);
        pass_turn(n_own == n);
        wg::wait<0>();
        wg::fence_regs(o);
        wg::fence_regs(pa);
        release(sm.empty_v(sl));
    }
    for (int i = n_own; i < n; ++i) {  // tiles only passed through
        const int ic = it + i, sc = ic % kStages;
        bar_wait(sm.full_k(sc), (ic / kStages) & 1);
        turn_begin();
        pass_turn(n_own > 0 && i + 1 == n);
        release(sm.empty_k(sc));
        bar_wait(sm.full_v(sc), (ic / kStages) & 1);
        release(sm.empty_v(sc));
    }
    if (n_own == 0 && n > 0) {  // the turn of the last P.V
        turn_begin();
        pass_turn(true);
    }

    // Epilogue (prefill/epilogue.cuh, as tile kernel 0): normalise, output
    // hook, then straight from the registers (kDirectOut), or staged in this
    // warpgroup's own Q rows and 16-byte stores of whole rows.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float inv, lse;
        finish_row(d[h], m[h] * logit_scale(), inv, lse);
        const int r = wg_row0 + warp * 16 + g + 8 * h;
        const int tok = row_tok[h], head = row_head[h];
        if constexpr (kDirectOut) {
            store_row_direct(p, w, G, imin(row0 + r, rows - 1), row0 + r < rows, o, h, inv, lse,
                             head, t);
        } else {
            stage_row(p, o, h, inv, lse, head, t,
                      [&](int dt) { return q_tile + swz_panel<kTileQ>(r, dt); });
        }
        if (p.lse != nullptr && t == 0 && row0 + r < rows) store_lse(p, w, tok, head, lse);
    }
    // Staged: the rows are whole before they leave. Direct: Q by TMA was
    // freed above, else every warp writes the next block's Q rows, so each
    // waits until the warpgroup's MMAs are all done (a barrier made only
    // then, on raw_q, serialised the wgmmas: C7520).
    named_sync(kBarWg + wg, 128);
    if constexpr (kDirectOut) return;
#pragma unroll 4
    for (int c = wtid; c < 64 * kChunks; c += 128) {
        const int r = wg_row0 + c / kChunks, ch = c % kChunks;
        const int pr = row0 + r;
        if (pr < rows)
            store_chunk(p, w, G, pr, ch, [&] { return q_tile + swz_panel<kTileQ>(r, ch); });
    }
    named_sync(kBarWg + wg, 128);  // the rows are free for the next block's Q
    if (raw_q) {
        // The producer's TMA writes the buffer next: order this warpgroup's
        // generic-proxy accesses before them.
        wg::fence_proxy_async();
        release(sm.empty_q(j % kQBufs));
    }
}

// The blocks of this CTA that have rows, in order (from the feed, or
// blockIdx.x, + gridDim.x, ...): f(work, first row, key range, it, j),
// where `it` counts the tiles the rings held before the block and j the
// blocks before it (the Q buffers' turns). Every role walks them alike.
template <class F>
__device__ __forceinline__ void for_each_block(const P &p, const fi_prefill_ws &ws, const Smem &sm,
                                               const F &f)
{
    const int blocks = ws.work_items * ws.kv_heads;
    auto visit = [&](int b, int &it, int j) {
        const Work w = get_work(p, b, ws.work_items, ws.kv_heads);
        const int row0 = w.tile * kTileQ;
        if (!kFeed && row0 >= w.qo_len * p.group_size) return false;  // the feed skips them
        const KeyRange kr = key_range<kTileQ, kTileKV>(p, w, row0);
        f(w, row0, kr, it, j);
        it += kr.n;
        return true;
    };
    if constexpr (kFeed) {
        for (int j = 0, it = 0, b; (b = take_block(sm, j)) < blocks; ++j) visit(b, it, j);
    } else {
        // The loop as it was before the feed: paged registers are that tight.
        for (int b = (int)blockIdx.x, it = 0, j = 0; b < blocks; b += (int)gridDim.x)
            j += visit(b, it, j);
    }
}

__device__ __forceinline__ void run(const P &p, const fi_prefill_ws &ws, unsigned char *smem)
{
    Smem sm;
    sm.q = smem_addr(smem);
    sm.k = sm.q + kQBufs * kQBytes;
    sm.v = sm.k + kStages * kKVBytes;
    sm.bars = sm.v + kStages * kKVBytes;
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
            bar_init(sm.full_q(b), 1);
            bar_init(sm.empty_q(b), 4 * kConsumers);
        }
        // The feed's readers: the consumer threads, the K/V loader (paged:
        // its warp) and, when Q comes by TMA, the Q loader.
        for (int s = 0; s < (kFeed ? kFeedSlots : 0); ++s) {
            bar_init(sm.full_feed(s), 1);
            bar_init(sm.empty_feed(s), 128 * kConsumers + (kPaged ? 32 : 1) + (raw_q ? 1 : 0));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (tid < 128) {
        // The producer: its first warp loads K and V (paged: every lane, a
        // page each; else one thread), the second warp's first thread Q,
        // so that neither waits behind the other's barriers; the third
        // warp's first thread chooses the blocks.
        set_max_regs_dec<kProducerRegs>();
        if (kFeed && tid == 64) {
            feed_blocks(p, ws, sm);
        } else if (tid == 32 && raw_q) {
            for_each_block(p, ws, sm, [&](const Work &w, int row0, const KeyRange &, int, int j) {
                produce_q(p, ws, w, row0, sm, j);
            });
        } else if (tid < (kPaged ? 32 : 1)) {
            for_each_block(p, ws, sm, [&](const Work &w, int, const KeyRange &kr, int it, int) {
                if constexpr (kPaged)
                    produce_paged(p, ws, w, kr, sm, it);
                else
                    produce(ws, w, kr, sm, it);
            });
        }
    } else {
        set_max_regs_inc<kConsumerRegs>();
        for_each_block(p, ws, sm, [&](const Work &w, int row0, const KeyRange &kr, int it, int j) {
            consume(p, w, kr, sm, row0, tid / 128 - 1, it, j, raw_q);
        });
    }
}

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
