// A consumer warpgroup of the Hopper main loop: its 64 query rows through
// every K/V tile of the block (S = Q K^T, masks and hooks, online softmax,
// O += P V, in turns with the other consumers), then the epilogue
// (ws/epilogue.cuh).
#pragma once

#include "common/tma_sm90.cuh"
#include "prefill/mask.cuh"
#include "prefill/rope.cuh"
#include "prefill/softmax.cuh"
#include "prefill/ws/config.cuh"
#include "prefill/ws/epilogue.cuh"
#include "prefill/ws/trace.cuh"

namespace fijit {
namespace prefill {
namespace ws {

// After a consumer's last block (of `blocks`, the CTA's with rows): consumer
// 0 takes the hand-over of the last consumer's last turn (consume).
__device__ __forceinline__ void end_turns(int wg, int blocks)
{
    if (kPingPong && wg == 0 && blocks > 0) named_sync(kBarTurn + 0, 256);
    trace_report();
    // The last block's output store has read its rows before the CTA's
    // shared memory goes (kLateQRelease leaves the wait to the next block).
    if (kLateQRelease && threadIdx.x % 128 == 0) bulk_wait_read();
}

// Paged K/V: V rows [keys, kTileKV) of slot `slot`, past the request's keys
// in its last tile, hold what the page held past its last key or an earlier
// tile's rows (produce_paged), which P.V weighs by zero: a NaN there would
// still reach O. This consumer zeroes them before its P.V of the tile; the
// other consumers write the same zeros, so that no read sees anything else.
// The last page's read then goes out with the tile's other boxes, where a
// copy of its keys by the producer waited for the slot to free.
__device__ __forceinline__ void zero_v_tail(const Smem &sm, int slot, int keys, int wg, int wtid)
{
    const vec16_t zero = {{0u, 0u, 0u, 0u}};
    for (int c = keys * kChunksVO + wtid; c < kTileKV * kChunksVO; c += 128)
        sts128(sm.v_slot(slot) + slot_offset(kVLayout, c / kChunksVO, c % kChunksVO), zero);
    wg::fence_proxy_async();  // read by wgmma
    named_sync(kBarWg + wg, 128);
}

// One consumer warpgroup: 64 query rows from row0 + 64 * wg of the tile of
// the CTA's block j; the rings hold `it` tiles before its first
// (produce.cuh). raw_q: Q comes by TMA, unscaled. maps: the output's map.
__device__ __forceinline__ void consume(const P &p, const fi_prefill_ws &maps, const Work &w,
                                        const KeyRange &kr, const Smem &sm, int row0, int wg,
                                        int it, int j, bool raw_q)
{
    const int wtid = (int)threadIdx.x % 128;
    const int warp = wtid / 32, lane = wtid % 32;
    const int g = lane / 4, t = lane % 4;
    const int G = p.group_size;
    const int kv_head = w.kv_head;
    const int rows = w.qo_len * G;
    const int off = w.kv_len - w.qo_len;
    const int wg_row0 = wg * 64;  // in the tile
    // Q by TMA into two buffers: this block's output leaves from its buffer
    // while the next block runs on the other (kLateQRelease).
    const bool late_q = kLateQRelease && raw_q;
    const int q_part = kQParts == 1 ? 0 : wg;  // this warpgroup's Q barriers
    PhaseClock phases(wg, wtid, kr.n);  // FIJIT_WS_TRACE only (trace.cuh)

    // Q's buffer: the producer's turn j when it loads Q, else always the first
    // (a fixed address keeps the wgmma descriptors out of registers).
    const unsigned int q_tile = raw_q ? sm.q_buf(j % kQBufs) : sm.q;
    // The factor the logits lack: sm_scale when Q came as it is in q (read
    // from the parameters where used: registers are what this loop lacks).
    auto logit_scale = [&]() { return raw_q ? p.sm_scale : 1.f; };
    if (raw_q) {
        bar_wait(sm.full_q(j % kQBufs, q_part), (j / kQBufs) & 1);
    } else {
        // Q rows of this warpgroup: rotated, transformed, rounded, swizzled
        // (the previous block's MMAs and epilogue are done with them: the
        // sync at this function's end).
#pragma unroll 2
        for (int c = wtid; c < 64 * (kChunks / 2); c += 128) {
            const int r = wg_row0 + c / (kChunks / 2), ch = c % (kChunks / 2);
            vec16_t lo, hi;
            query_chunks(p, w, imax(row0 + r, 0), ch, lo, hi);  // rows before it borrow row 0
            sts128(q_tile + swz_panel<kTileQ>(r, ch), lo);
            sts128(q_tile + swz_panel<kTileQ>(r, ch + kChunks / 2), hi);
        }
        wg::fence_proxy_async();  // Q is read by wgmma
        named_sync(kBarWg + wg, 128);
    }
    phases.mark(kTrQWait);

    // This thread's rows: g and g + 8 of its warp's 16; rows before or past
    // the request (the first tile starts before it: block_row0) borrow its
    // first or last one (never stored).
    int row_tok[2], row_head[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int pr = iclamp(row0 + wg_row0 + warp * 16 + g + 8 * h, 0, rows - 1);
        row_tok[h] = pr / G;
        row_head[h] = kv_head * G + pr % G;
    }
    // Tokens of the warpgroup's first and last rows: tiles that need masks.
    const int wg_tok_lo = imin(row0 + wg_row0, rows - 1) / G;
    const int wg_tok_hi = imin(row0 + wg_row0 + 63, rows - 1) / G;

    float o[kDT][4];
    float s[kNT][4];
    unsigned int pa[kPVSteps][4];  // P of the previous tile, A fragments of P.V
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
        for (int kk = 0; kk < kQKSteps; ++kk) {
            const unsigned int at = (unsigned int)(kk & 3) * 32u;  // a k-step is 32 bytes
            wg::Mma<DTypeKV, kTileKV>::ss(
                s, wg::desc(q_wg + (kk >> 2) * kTileQ * 128u + at, 0),
                wg::desc(kt + (kk >> 2) * kKLayout.panel + at, 0, kKLayout.group), kk != 0);
        }
        wg::commit();
    };
    // O += P V of slot s, issued. fp8: V lies transposed, K-major as K
    // does, 128 keys (bytes) a row, a 128-key panel of head_dim rows at a
    // time (prefill/fp8.cuh).
    // With `keys` (kTrimLast), only the k-steps of the tile's first keys:
    // the weights past them are 0.
    auto issue_pv = [&](int slot, int keys = kTileKV) {
        const unsigned int vt = sm.v_slot(slot);
#pragma unroll
        for (int kk = 0; kk < kPVSteps; ++kk) {
            if (kTrimLast && kk > 0 && kk * kStepK >= keys) break;
            const unsigned long long b =
                kFp8 ? wg::desc(vt + (kk >> 2) * kVtPanelBytes + (unsigned int)(kk & 3) * 32u, 0)
                     : wg::desc(vt + kk * 2u * kVLayout.group, kVLayout.panel, kVLayout.group);
            wg::Mma<DTypeKV, kHeadDimVO>::rs(o, pa[kk], b, 1);
        }
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
                // Key t0 + 2t + c is seen where c <= seen_to: one compare a
                // logit, with the constant c. Each logit's key sum and two
                // compares (the request's end, the row's position) held
                // registers that spilled in 40 of the 162 fp16 sm_90a modules
                // (up to 96 B; this form: 8 of 4 B, none new), and this form
                // measured 1.00-1.05x faster (H200, 2026-11-29, A/B in one
                // process: causal single prefill, ragged and paged).
                const int seen_to = last_key_seen(w, qpos) - t0 - 2 * t;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        const int c = nt * 8 + (e & 1);
                        s[nt][e] = masked_logit_seen(p, s[nt][e], head, t0 + 2 * t + c, qpos, c <= seen_to);
                    }
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
            softmax_row<kNT, kRescaleSlack>(s, h, m[h], d[h], scale[h], grew_row,
                                            logit_scale() * kLog2e);
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
        for (int kk = 0; kk < kPVSteps; ++kk) {
            if constexpr (kFp8)
                p_fragment_fp8(s, kk, pa[kk]);
            else
                p_fragment(s, kk, pa[kk]);
        }
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
        if (row0 + wg_row0 >= rows || row0 + wg_row0 + 64 <= 0) n_own = 0;
        if (kCausal && n_own > 0)
            n_own = imax(0, imin(n, (imin(w.kv_len, wg_tok_hi + off + 1) - kr.kv_start + kTileKV - 1) /
                                        kTileKV));
    }
    // Keys of its last tile that some row of this warpgroup sees (kTrimLast:
    // its P.V stops there; the logits past them are masked). The bound is
    // spelt here as above: named once (last_key_seen + 1), ptxas scheduled
    // every causal module's loop anew, and paged hd 128 causal measured
    // 0.96-0.97x (H200, 2026-11-29, A/B in one process).
    const int last_keys =
        kTrimLast ? imin(w.kv_len, wg_tok_hi + off + 1) - (kr.kv_start + (n_own - 1) * kTileKV) : kTileKV;
    // Each consumer takes n + 1 turns a block (S of tile 0, S + P.V of
    // tiles 1..n-1, P.V of the last; a tile passed through takes one too),
    // round robin across the blocks: the last consumer's last turn of a
    // block hands consumer 0 the next block's first, so that consumer 0's
    // first S runs while the others finish the block (their last P.V, the
    // epilogue), instead of waiting for them to begin the next. The last
    // consumer lets consumer 0 go first at the CTA's first block, and
    // consumer 0 takes its hand-over after the last (end_turns), so that
    // every turn barrier sees as many arrivals as waits.
    if (kPingPong && j == 0 && next_wg == 0) named_arrive(kBarTurn + 0, 256);
    // The previous block's Q buffer, where its output was staged, is freed
    // here (kLateQRelease): once this block's first S is done, or at once
    // where this warpgroup has no tile of the block.
    auto release_previous_q = [&]() {
        if (!late_q || j == 0) return;
        // The store's TMA has read the rows: its thread waits; the others,
        // with no bulk group, pass (a branch here serialises the wgmmas).
        bulk_wait_read();
        __syncwarp();
        wg::fence_proxy_async();  // the producer's TMA writes the buffer next
        release(sm.empty_q((j - 1) % kQBufs, q_part));
    };
    if (n_own == 0) release_previous_q();
    if (n_own > 0) {
        float scale[2];
        bool grew;

        const int s0 = it % kStages;
        bar_wait(sm.full_k(s0), (it / kStages) & 1);
        phases.mark(kTrK0Wait);
        turn_begin();
        phases.mark(kTrTurn0);
        wg::fence_regs(s);
        wg::fence();
        issue_s(s0);
        turn_end();
        phases.mark(kTrS0Issue);
        wg::wait<0>();
        wg::fence_regs(s);
        phases.mark(kTrS0Wait);
        release_previous_q();  // no wgmma in flight: ptxas serialises them around a branch
        release(sm.empty_k(s0));
        transform(kr.kv_start);
        softmax(scale, grew);
        take_p();
        phases.mark(kTrSoftmax0);

        for (int i = 1; i < n_own; ++i) {
            const int ic = it + i, ip = ic - 1;  // ring positions of tiles i, i - 1
            const int sc = ic % kStages, sp = ip % kStages;
            phases.mark(kTrIssue);
            bar_wait(sm.full_k(sc), (ic / kStages) & 1);
            phases.mark(kTrKWait);
            turn_begin();
            phases.mark(kTrTurn);
            wg::fence_regs(s);
            wg::fence_regs(o);
            wg::fence();
            issue_s(sc);
            phases.mark(kTrIssue);
            // V waited for here, after the fence: ptxas then re-fences the
            // registers of P.V (its note C7519); waiting before the fence
            // avoids that but measured no faster (0.93-1.10x, H100 A/B).
            bar_wait(sm.full_v(sp), (ip / kStages) & 1);
            phases.mark(kTrVWait);
            issue_pv(sp);
            turn_end();
            phases.mark(kTrIssue);
            wg::wait<1>();  // S of tile i
            wg::fence_regs(s);
            phases.mark(kTrSWait);
            release(sm.empty_k(sc));
            transform(kr.kv_start + i * kTileKV);
            softmax(scale, grew);
            phases.mark(kTrSoftmax);
            if constexpr (kWaitAfterSoftmax) {
                // The block ends here, so the wait below stays below the softmax
                // (config.cuh). The condition needs both sums and never holds: no
                // arithmetic yields this NaN's bits, and were one to, it would sleep 0 ns.
                if (any_sync((__float_as_uint(d[0]) & __float_as_uint(d[1])) == 0xffffffffu))
                    __nanosleep(0);
            }
            wg::wait<0>();  // P.V of tile i - 1
            wg::fence_regs(o);
            wg::fence_regs(pa);
            phases.mark(kTrPVWait);
            release(sm.empty_v(sp));
            rescale(scale, grew);
            take_p();
            phases.mark(kTrRescale);
        }
        phases.mark(kTrIssue);

        const int il = it + n_own - 1;
        const int sl = il % kStages;
        bar_wait(sm.full_v(sl), (il / kStages) & 1);
        if constexpr (kPaged) {
            const int keys = w.kv_len - (kr.kv_start + (n_own - 1) * kTileKV);
            if (keys < kTileKV) zero_v_tail(sm, sl, keys, wg, wtid);
        }
        phases.mark(kTrVLast);
        turn_begin();
        phases.mark(kTrTurnLast);
        wg::fence_regs(o);
        wg::fence();
        issue_pv(sl, last_keys);
        turn_end();
        phases.mark(kTrPVIssue);
        wg::wait<0>();
        wg::fence_regs(o);
        wg::fence_regs(pa);
        release(sm.empty_v(sl));
        phases.mark(kTrPVLastWait);
    }
    for (int i = n_own; i < n; ++i) {  // tiles only passed through
        const int ic = it + i, sc = ic % kStages;
        bar_wait(sm.full_k(sc), (ic / kStages) & 1);
        turn_begin();
        turn_end();
        release(sm.empty_k(sc));
        bar_wait(sm.full_v(sc), (ic / kStages) & 1);
        release(sm.empty_v(sc));
    }
    if (n_own == 0 && n > 0) {  // the turn of the last P.V
        turn_begin();
        turn_end();
    }
    phases.mark(kTrPass);

    store_output(p, maps, w, row0, wg, q_tile, o, m, d, row_tok, row_head, logit_scale, late_q,
                 phases);
    if (late_q) return;
    named_sync(kBarWg + wg, 128);  // the rows are free for the next block's Q
    if (raw_q) {
        // The producer's TMA writes the buffer next: order this warpgroup's
        // generic-proxy accesses before them.
        wg::fence_proxy_async();
        release(sm.empty_q(j % kQBufs, q_part));
    }
}

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
