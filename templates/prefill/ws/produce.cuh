// The Hopper main loop's producer warpgroup: TMA loads of Q (produce_q) and
// of the K and V tiles into their rings, contiguous (produce) or page by page
// (produce_paged: whole pages, or boxes of part of a page).
#pragma once

#include "common/tma_sm90.cuh"
#include "prefill/work.cuh"
#include "prefill/ws/config.cuh"

namespace fijit {
namespace prefill {
namespace ws {

// The producer's one thread: Q of the CTA's block j, rows row0.. of request
// w, into its buffer once the consumers have freed it: after block
// j - kQBufs's output was staged there and has left; part by part
// (kQParts), each once its consumer is done with it.
__device__ __forceinline__ void produce_q(const P &p, const fi_prefill_ws &maps, const Work &w,
                                          int row0, const Smem &sm, int j)
{
    const int b = j % kQBufs;
    const int G = p.group_size;
#pragma unroll
    for (int part = 0; part < kQParts; ++part) {
        bar_wait(sm.empty_q(b, part), ((j / kQBufs) & 1) ^ 1);
        bar_expect(sm.full_q(b, part), kQBytes / kQParts);
#pragma unroll
        for (int c = 0; c < kPanels; ++c)
            tma_load(sm.q_buf(b) + (unsigned int)(c * kTileQ + part * kQPartRows) * 128u, &maps.q,
                     c * kPanelCols, w.kv_head * G, w.q_begin + (row0 + part * kQPartRows) / G,
                     sm.full_q(b, part));
    }
}

// One K or V tile of a contiguous map (kTileKV rows from `row`, a box per
// panel: kNPanels, K's kPanels or V's kPanelsVO) into `slot`, completing
// `full`'s transaction bytes.
template <int kNPanels>
__device__ __forceinline__ void load_tile(unsigned int slot, const fi_tma_map *map, int kv_head, int row,
                                          unsigned int full)
{
    bar_expect(full, kNPanels * kTileKV * 128u);
#pragma unroll
    for (int c = 0; c < kNPanels; ++c)
        tma_load(slot + c * kTileKV * 128u, map, c * kPanelCols, kv_head, row, full);
}

// fp8: V tile at key `key` from the map of vt (prefill/fp8.cuh), whose
// coordinates are {key, head_dim row, kv head}: a box of 128 keys (a
// 128-byte row) x head_dim rows per panel, the last one whole (keys past the
// tile land unread; past vt's end, as zeros).
__device__ __forceinline__ void load_vt_tile(unsigned int slot, const fi_tma_map *map, int kv_head,
                                             int key, unsigned int full)
{
    bar_expect(full, kVSlotBytes);
#pragma unroll
    for (int c = 0; c < FI_PREFILL_FP8_V_PANELS; ++c)
        tma_load(slot + c * kVtPanelBytes, map, key + c * 128, 0, kv_head, full);
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
    // Each tile of each operand into its slot, once the consumers freed it.
    for (int i = 0; i < kr.n; ++i, ++it) {
        const int s = it % kStages;
        const unsigned int free_parity = ((it / kStages) & 1) ^ 1;
        const int t0 = kr.kv_start + i * kTileKV;
        bar_wait(sm.empty_k(s), free_parity);
        load_tile<kPanels>(sm.k_slot(s), &maps.k, w.kv_head, k_row + t0, sm.full_k(s));
        bar_wait(sm.empty_v(s), free_parity);
        if constexpr (kFp8)
            load_vt_tile(sm.v_slot(s), &maps.v, w.kv_head, v_row + t0, sm.full_v(s));
        else
            load_tile<kPanelsVO>(sm.v_slot(s), &maps.v, w.kv_head, v_row + t0, sm.full_v(s));
    }
}

// Paged K/V: this block's Q rows into L2 (lane 0, through the map of q when
// the host made one): see produce_paged.
__device__ __forceinline__ void prefetch_q_rows(const P &p, const fi_prefill_ws &maps, const Work &w,
                                                int row0, int lane)
{
    if (lane == 0 && maps.q_rows > 0) {
#pragma unroll
        for (int part = 0; part < kQParts; ++part)
#pragma unroll
            for (int c = 0; c < kPanels; ++c)
                tma_prefetch(&maps.q, c * kPanelCols, w.kv_head * p.group_size,
                             w.q_begin + (row0 + part * kQPartRows) / p.group_size);
    }
}

// Paged K/V: the producer's first warp. A tile is boxes of whole pages
// (the host launches this only when page_size is a multiple of 8 and
// divides kTileKV, so that every page lands on swizzle atoms), or with
// kParts boxes of part of a page: 160-key tiles (kPagesInParts) from pages
// that do not divide them (of 24, 48, 56 or 64 rows) take kTileKV /
// page_box boxes of page_box rows (maps.page_box: the greatest common
// divisor of the page size and kTileKV, a multiple of 8, so that every box
// lands on swizzle atoms and lies in one page). Each box is one TMA of all
// its panels at its row group of its page (group-major slots: kKLayout,
// kVLayout). Whole pages are not the parts form with a box of a page: that
// measured 0.92-0.95x this (H100, bench_batch_prefill.py, page 16, hd
// 64-256, A/B in one process), though ptxas gave the two near the same
// instructions; each form is compiled as it was measured.
// The request's last page may be partial and the tile may run past it: its
// rows past the keys, K and V, land as the page holds them, and boxes past
// the keys are not loaded (the slot keeps an earlier tile's rows). K there
// is masked; V is zeroed by the consumers (consume.cuh: zero_v_tail).
// The operands a K/V loader warp takes: K or V (kSplitKV), else both.
constexpr int kOpK = 1, kOpV = 2;

template <bool kParts, int kOps>
__device__ __forceinline__ void produce_paged(const P &p, const fi_prefill_ws &maps, const Work &w,
                                              int row0, const KeyRange &kr, const Smem &sm, int it)
{
    static_assert(kTileKV / 8 <= 32, "a lane per box of a tile");
    const int lane = (int)threadIdx.x % 32;
    // Where the consumers load this block's Q (the tuple changes it: RoPE,
    // per-logit hooks), they do so once the previous block is done, from
    // memory no CTA has read yet. This warp gets here up to kStages tiles
    // before that, so it asks L2 for those rows (through the map of q, when
    // the host made one): the Q loads then wait for L2, not for HBM.
    // Measured with the consumers loading Q (H100, bench_batch_prefill.py,
    // fp16 32/8): hd 128 causal 463-467 TFLOP/s without, 464-479 with (four
    // runs in two device calls), the rest within the runs' spread (+-2%):
    // a small gain at best, kept as it costs no registers. So does the Q
    // thread's TMA into one buffer (head_dim 256), which waits for the
    // output to leave. Into two buffers it loads a block ahead, and the
    // prefetch only added L2 lookups: without it, hd 128 no mask 32/8 read
    // 891 M L2 sectors, not 906 M, in 7.56 ms against 7.62 (ncu), and paged
    // hd 64 and 128 measured 1.00-1.01x on the batch's 8 shapes (H200,
    // 2026-11-28, A/B in one process).
    if constexpr ((kOps & kOpK) && (!kRawQTuple || kQBufs == 1)) prefetch_q_rows(p, maps, w, row0, lane);
    // No division by the page size (a run-time value: a reciprocal on the
    // MUFU, which the consumers' exponentials wait on) in the tile loop, nor
    // a population count (the same unit): a full tile's boxes are counted
    // once a block, a request's last tile's by a vote; whole pages' first
    // kv_indices entry steps by a full tile's pages, and a part-page box's
    // page and row in it (lane_page, lane_row: this lane's box) by a tile's
    // pages and rows past them. Measured against dividing each tile (H200,
    // 2026-11-29, bench_batch_prefill.py paged, A/B in one process, two
    // runs): hd 64 1.00-1.04x, hd 128 1.00-1.04x, hd 256 1.00-1.05x. What
    // this warp does each tile shows in the consumers' time: a check of its
    // page ids (a shuffle and a vote for K and V) measured 0.93-0.96x at hd 64.
    const int box = kParts ? maps.page_box : p.page_size;
    const int full_n = kTileKV / box;  // a full tile's boxes
    int first_page = kParts ? 0 : w.kv_begin + kr.kv_start / p.page_size;
    int lane_page = 0, lane_row = 0, step_pages = 0, step_rows = 0;
    if constexpr (kParts) {
        const int key0 = kr.kv_start + lane * box;
        lane_page = w.kv_begin + key0 / p.page_size;
        lane_row = key0 % p.page_size;
        step_pages = kTileKV / p.page_size;
        step_rows = kTileKV % p.page_size;
    }
    for (int i = 0; i < kr.n; ++i, ++it) {
        const int s = it % kStages;
        const unsigned int free_parity = ((it / kStages) & 1) ^ 1;
        const int t0 = kr.kv_start + i * kTileKV;
        const int keys = imin(kTileKV, w.kv_len - t0);
        // Boxes with keys, the partial one too.
        const int n =
            keys == kTileKV ? full_n : __popc(__ballot_sync(0xffffffffu, lane * box < keys));
        // The page id and row group of this lane's box, read at once (one
        // latency, not n). Read a tile ahead instead, while this tile's boxes
        // wait for their slots: 1.00-1.04x alone at hd 128 and 256, 0.97-1.01x
        // beside block_row0's tiles (H200, 2026-11-29, bench_batch_prefill.py
        // paged, A/B in one process; 4 B of spills beside three consumers).
        const int my_page = lane < n ? p.kv_indices[kParts ? lane_page : first_page + lane] : 0;
        const int my_group = kParts ? lane_row / 8 : 0;
        // The tile's boxes with keys into `slot`, a TMA each, completing
        // `full`: lane i issues box i's, after lane 0 has set the bytes to
        // expect. ptxas still issues them a lane at a time (a TMA's operands
        // are uniform registers), yet one lane looping over the boxes took as
        // long as the tile's MMAs.
        auto load_boxes = [&](unsigned int slot, const fi_tma_map *map, const int (&coords)[3],
                              unsigned int full, unsigned int row_bytes) {
            const unsigned int box_bytes = (unsigned int)box * row_bytes;
            if (lane == 0) bar_expect(full, (unsigned int)n * box_bytes);
            __syncwarp();
            if (lane < n)
                tma_load_page_part(slot + (unsigned int)lane * box_bytes, map, w.kv_head * coords[0],
                                   my_group, my_page * coords[1] + w.kv_head * coords[2], full);
        };

        if constexpr (kOps & kOpK) {
            bar_wait(sm.empty_k(s), free_parity);
            if constexpr (kRotatedK) {  // K from the contiguous rotated rows
                if (lane == 0)
                    load_tile<kPanels>(sm.k_slot(s), &maps.k, w.kv_head, w.k_row0 + t0, sm.full_k(s));
            } else {
                load_boxes(sm.k_slot(s), &maps.k, maps.k_coords, sm.full_k(s), kRowBytes);
            }
        }
        if constexpr (kOps & kOpV) {
            bar_wait(sm.empty_v(s), free_parity);
            load_boxes(sm.v_slot(s), &maps.v, maps.v_coords, sm.full_v(s), kRowBytesVO);
        }
        if constexpr (kParts) {
            lane_row += step_rows;
            const bool wraps = lane_row >= p.page_size;
            lane_page += step_pages + (wraps ? 1 : 0);
            lane_row -= wraps ? p.page_size : 0;
        } else {
            first_page += full_n;
        }
    }
}

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
