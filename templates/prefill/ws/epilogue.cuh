// The Hopper main loop's epilogue: a consumer warpgroup's O after its
// block's last K/V tile, normalised (prefill/epilogue.cuh, as tile kernel
// 0), passed through the output hook and staged in the warpgroup's own Q
// rows, then stored to o by TMA or by 16-byte stores of whole rows.
#pragma once

#include "common/tma_sm90.cuh"
#include "prefill/epilogue.cuh"
#include "prefill/ws/config.cuh"
#include "prefill/ws/trace.cuh"

namespace fijit {
namespace prefill {
namespace ws {

// The epilogue (prefill/epilogue.cuh, as tile kernel 0): normalise, output
// hook, staged in this warpgroup's own Q rows, which leave by TMA where
// the host made a map of o and the 64 rows are the request's (single
// prefill: the map ends with its rows; a ragged request's are followed
// by the next one's), else by 16-byte stores of whole rows. The store by
// TMA is one thread's instruction: the 8 rounds of shared loads and
// global stores of 64 rows cost the warps ~2.6k cycles a block (H100,
// hd 128), while the other consumer, in the same place, left the tensor
// cores idle. (With one Q buffer, at head_dim 256, the output once left
// from registers, 4-byte stores, so that the next block's Q could land
// during the epilogue: 4-6k cycles a block; staged and stored by TMA,
// the Q after it, measured 1.01-1.15x that on bench_prefill's hd 256
// shapes and ragged 1.01-1.08x, H100 A/B in one process.)
// The warpgroup's rows leave from q_tile (its Q buffer), its accumulators
// o, m and d as consume left them; row_tok and row_head: this thread's
// rows' tokens and heads; maps: the output's map. late_q: the rows are
// freed in the next block (kLateQRelease).
template <class LogitScale>
__device__ __forceinline__ void store_output(const P &p, const fi_prefill_ws &maps, const Work &w,
                                             int row0, int wg, unsigned int q_tile,
                                             float (&o)[kDT][4], float (&m)[2], float (&d)[2],
                                             const int (&row_tok)[2], const int (&row_head)[2],
                                             const LogitScale &logit_scale, bool late_q,
                                             PhaseClock &phases)
{
    // This thread's place (consume's): its warp, its rows g and g + 8 of the
    // warp's 16, its column pairs t; the warpgroup's first row in the tile.
    const int wtid = (int)threadIdx.x % 128, warp = wtid / 32, g = wtid % 32 / 4, t = wtid % 4;
    const int G = p.group_size, kv_head = w.kv_head, rows = w.qo_len * G, wg_row0 = wg * 64;
    const bool by_tma = maps.o_rows > 0 && row0 + wg_row0 >= 0 &&
                        (kKind == FI_PREFILL_KIND_SINGLE || row0 + wg_row0 + 64 <= rows);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float inv, lse;
        finish_row(d[h], m[h] * logit_scale(), inv, lse);
        if constexpr (kFp8) inv *= p.v_scale;  // v holds the values / v_scale
        const int r = wg_row0 + warp * 16 + g + 8 * h;
        const int tok = row_tok[h], head = row_head[h];
        stage_row(p, o, h, inv, lse, head, t,
                  [&](int dt) { return q_tile + swz_panel<kTileQ>(r, dt); });
        if (p.lse != nullptr && t == 0 && (unsigned int)(row0 + r) < (unsigned int)rows)
            store_lse(p, w, tok, head, lse);
    }
    // The rows are whole before they leave (and, for TMA, seen by the async
    // proxy).
    if (by_tma) wg::fence_proxy_async();
    named_sync(kBarWg + wg, 128);
    phases.mark(kTrStage);
    if (by_tma) {
        // A box per panel: the group's heads x 64 / G tokens (the host makes
        // the map only where G divides 64). Its thread waits until TMA has
        // read the rows, then frees them with the others (consume).
        if (wtid == 0) {
#pragma unroll
            for (int c = 0; c < kOutPanels; ++c)
                tma_store(&maps.o, c * 64, kv_head * G, w.q_begin + (row0 + wg_row0) / G,
                          q_tile + (unsigned int)(c * kTileQ + wg_row0) * 128u);
            bulk_commit();
            if (!late_q) bulk_wait_read();
        }
    } else {
#pragma unroll 4
        for (int c = wtid; c < 64 * kChunksVO; c += 128) {
            const int r = wg_row0 + c / kChunksVO, ch = c % kChunksVO;
            const int pr = row0 + r;
            if ((unsigned int)pr < (unsigned int)rows)  // rows before the request too
                store_chunk(p, w, G, pr, ch, [&] { return q_tile + swz_panel<kTileQ>(r, ch); });
        }
    }
    // Converged before the next block's wgmmas (else ptxas serialises them:
    // C7520); the rows are freed in that block (release_previous_q).
    __syncwarp();
    phases.mark(kTrStore);
    phases.end_block();
}

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
