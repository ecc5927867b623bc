// Prefill's tile kernels (FlashAttention-2 style): run<tile, Mainloop>() is
// one CTA per query tile, the same on every arch; Mainloop supplies the two
// products of a K/V tile and the shared-memory layout they read
// (prefill/tile/mainloop_sm80.cuh: mma.sync; prefill/tile/mainloop_sm90.cuh:
// wgmma, the 128- and 64-row tiles on sm_90a; prefill/kernels.cuh picks).
// The Hopper kernel (prefill/ws/kernel.cuh) replaces tile 0 where it can.
//
// Organisation of one CTA (one query tile of one request x one KV head):
//  * Rows of the query tile are packed (token, group head) pairs, so every
//    query head of a GQA group is served by the same K/V tiles. Q is loaded
//    once into shared memory, with RoPE and the variant's query_transform
//    (which folds in sm_scale by default) applied on the way, and rounded
//    back to the 16-bit input type.
//  * K and V tiles stream in with cp.async, double-buffered: tile t + 1 is
//    requested right after the one barrier per tile and lands while tile t is
//    computed. With RoPE the K tile is rotated in shared memory once per CTA
//    and tile (one more barrier).
//  * Each warp owns 16 or 32 query rows (a warpgroup's 64 on wgmma), with
//    fp32 accumulators in the mma.sync fragment layout whichever product
//    fills them.
//  * Softmax is online, in registers (softmax.cuh: exp2 with log2e folded
//    into one FFMA).
//  * Tiles of keys no query row of the CTA can see (causal, sliding window)
//    are never loaded, and the rows that multiply together skip the math of
//    a tile none of them can see. Masks are evaluated only on tiles that
//    straddle a boundary: the causal diagonal, the window's lower edge, the
//    end of the keys, and with kMaskCustom every tile. The variant's
//    logits_mask hook (the sliding window is one) is called on those same
//    tiles only, unless the variant sets mask_every_tile.
//  * The output is normalised, passed through output_transform, staged in the
//    warp's own rows of the Q buffer and written with 16-byte stores
//    (epilogue.cuh).
#pragma once

#include "prefill/epilogue.cuh"
#include "prefill/mask.cuh"
#include "prefill/rope.cuh"
#include "prefill/softmax.cuh"

namespace fijit {
namespace prefill {

template <int kTileIdx, class Mainloop>
__device__ __forceinline__ void run(const P &p, unsigned char *smem)
{
    using C = Cfg<kTileIdx>;
    constexpr int kTileQ = C::kTileQ;
    constexpr int kThreads = C::kThreads;
    constexpr int kMT = C::kMT;           // 16-row MMA tiles per warp
    constexpr int kTileKV = C::kTileKV;
    constexpr unsigned int kKVTileBytes = kTileKV * kRowBytes;      // a K tile
    constexpr unsigned int kVTileBytes = kTileKV * kRowBytesVO;     // a V tile
    constexpr int kNT = kTileKV / 8;      // 8-key column tiles of S
    constexpr int kDT = kHeadDimVO / 8;   // 8-wide column tiles of O

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const Work w = get_work(p, (int)blockIdx.y * (int)gridDim.x + (int)blockIdx.x, (int)gridDim.x,
                            (int)gridDim.y);
    const int kv_head = w.kv_head;
    const int G = p.group_size;
    const int rows = w.qo_len * G;
    const int row0 = w.tile * kTileQ;
    if (row0 >= rows) return;  // whole CTA: nothing to do
    const int off = w.kv_len - w.qo_len;  // query i sits at key position i + off
    const int tok_lo = row0 / G;
    const int tok_hi = (imin(rows, row0 + kTileQ) - 1) / G;

    // The K/V tiles holding every key some row of this CTA can see.
    const KeyRange keys = key_range<kTileQ, kTileKV>(p, w, row0);
    const int kv_start = keys.kv_start, num_tiles = keys.n;

    const unsigned int sq = smem_addr(smem);
    const unsigned int sk = sq + kTileQ * kRowBytes;
    const unsigned int sv = sk + kStages * kKVTileBytes;
    // Where chunk ch of row r of the Q tile and of a K/V tile lives: the
    // layout the main loop's products read.
    auto q_at = [](int r, int ch) { return Mainloop::q_at(r, ch); };
    auto kv_at = [](int r, int ch) { return Mainloop::kv_at(r, ch); };
    auto v_at = [](int r, int ch) { return Mainloop::v_at(r, ch); };

    const DTypeKV *kbase = static_cast<const DTypeKV *>(p.k) + kv_head * p.k_stride_h;
    const DTypeKV *vbase = static_cast<const DTypeKV *>(p.v) + kv_head * p.v_stride_h;

    // One cp.async group per tile (K and V); keys past the end are zero-filled.
    // Each thread copies one 16-byte column of the tile, every kLoadRows-th row.
    // kSplitVO: K rows of kChunks and V rows of kChunksVO chunks, each its
    // own pass over (row, chunk) pairs.
    constexpr int kLoadRows = kThreads / kChunks;
    static_assert(kSplitVO || (kThreads % kChunks == 0 && kTileKV % kLoadRows == 0),
                  "whole rows per pass");
    static_assert(!kSplitVO || ((kTileKV * kChunks) % kThreads == 0 &&
                                (kTileKV * kChunksVO) % kThreads == 0),
                  "whole passes over the K and V tiles");
    const int load_row = tid / kChunks, load_ch = tid % kChunks;
    auto load_kv = [&](int stage, int tile) {
        const int t0 = kv_start + tile * kTileKV;
        if constexpr (kSplitVO) {
            // A K or V tile of `chunks` per row into `dst` (layout `at`).
            auto load_rows = [&](unsigned int dst, const DTypeKV *base, int chunks, bool v, auto at) {
#pragma unroll 2
                for (int c = tid; c < kTileKV * chunks; c += kThreads) {
                    const int r = c / chunks, ch = c % chunks;
                    const bool valid = t0 + r < w.kv_len;
                    long long ko = 0, vo = 0;
                    if (valid) kv_row_offsets(p, w, t0 + r, ko, vo);
                    cp_async16(dst + at(r, ch), base + (v ? vo : ko) + ch * 8, valid);
                }
            };
            load_rows(sk + stage * kKVTileBytes, kbase, kChunks, false, kv_at);
            load_rows(sv + stage * kVTileBytes, vbase, kChunksVO, true, v_at);
        } else {
#pragma unroll 2
            for (int i = 0; i < kTileKV / kLoadRows; ++i) {
                const int r = load_row + i * kLoadRows;
                const bool valid = t0 + r < w.kv_len;
                long long ko = 0, vo = 0;
                if (valid) kv_row_offsets(p, w, t0 + r, ko, vo);
                if constexpr (kRotatedK) ko = (long long)(w.k_row0 + t0 + r) * p.k_stride_n;
                const unsigned int dst = stage * kKVTileBytes + kv_at(r, load_ch);
                cp_async16(sk + dst, kbase + ko + load_ch * 8, valid);
                cp_async16(sv + dst, vbase + vo + load_ch * 8, valid);
            }
        }
        cp_async_commit();
    };

    if (num_tiles > 0) load_kv(0, 0);

    // Q: rotated, transformed, rounded to the MMA input type, swizzled.
    // Rows past the request are zero and never stored.
#pragma unroll
    for (int c = tid; c < kTileQ * (kChunks / 2); c += kThreads) {
        const int r = c / (kChunks / 2), ch = c % (kChunks / 2);
        vec16_t lo, hi;
        query_chunks(p, w, row0 + r, ch, lo, hi);
        sts128(sq + q_at(r, ch), lo);
        sts128(sq + q_at(r, ch + kChunks / 2), hi);
    }
    Mainloop::fence_operands();  // Q is read by the products
    __syncthreads();

    // This thread holds rows g and g + 8 of each of its warp's MMA tiles.
    // row_at gives the token and query head of row (mt, h); rows past the
    // request borrow the last row (never stored). They are held in
    // registers, or with kRecompute recomputed where needed (masked tiles,
    // the epilogue, variants that read them).
    const int g = lane / 4, t = lane % 4;
    const int warp_row0 = warp * kMT * 16;
    const int thr_row0 = row0 + warp_row0 + g;
    int row_tok[kMT][2], row_head[kMT][2];
    auto row_of = [&](int mt, int h, int pr, int &tok, int &head) {
        pr = imin(pr + mt * 16 + 8 * h, rows - 1);
        tok = pr / G;
        head = kv_head * G + pr % G;
    };
    if constexpr (!kRecompute)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) row_of(mt, h, thr_row0, row_tok[mt][h], row_head[mt][h]);
    auto row_at = [&](int mt, int h, int &tok, int &head) {
        if constexpr (kRecompute) {
            row_of(mt, h, opaque(thr_row0), tok, head);
        } else {
            tok = row_tok[mt][h];
            head = row_head[mt][h];
        }
    };
    // fn(mt, h, tok, head) for each row this thread holds.
    auto for_each_row = [&](auto fn) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int tok, head;
                row_at(mt, h, tok, head);
                fn(mt, h, tok, head);
            }
    };

    const Mainloop mainloop(sq, sk, sv, warp_row0, lane);

    // Positions of the first and last query of the rows that skip a tile
    // together (the main loop's kSkipRows).
    constexpr int kSkipRows = Mainloop::kSkipRows;
    const int skip_row0 = warp_row0 / kSkipRows * kSkipRows;
    const int warp_pos_lo = imin(row0 + skip_row0, rows - 1) / G + off;
    const int warp_pos_hi = (imin(row0 + skip_row0 + kSkipRows, rows) - 1) / G + off;

    float o[kMT][kDT][4];
    float m[kMT][2], d[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            m[mt][h] = kSoftmax ? -inf_() : 0.f;
            d[mt][h] = 0.f;
        }
    }

    for (int tile = 0; tile < num_tiles; ++tile) {
        const int stage = tile & 1;
        const unsigned int skt = sk + stage * kKVTileBytes;
        const typename Mainloop::Frags frags = mainloop.frags(stage);
        const unsigned int svt = sv + stage * kVTileBytes;
        const int t0 = kv_start + tile * kTileKV;

        // This tile's K and V have landed and are visible to all, and every
        // warp is done with the other stage: the next tile goes there and
        // streams in while this one is computed.
        cp_async_wait<0>();
        Mainloop::fence_operands();  // the tile is read by the products
        __syncthreads();
        if (tile + 1 < num_tiles) load_kv(stage ^ 1, tile + 1);
        if constexpr (kRope && !kRotatedK) {
            if (p.rot_k == nullptr) {  // block-uniform
#pragma unroll
                for (int c = tid; c < kTileKV * (kChunks / 2); c += kThreads) {
                    const int r = c / (kChunks / 2), ch = c % (kChunks / 2);
                    vec16_t lo = lds128(skt + kv_at(r, ch));
                    vec16_t hi = lds128(skt + kv_at(r, ch + kChunks / 2));
                    rope_chunks(p, lo, hi, ch, (float)(p.rope_offset + t0 + r));
                    sts128(skt + kv_at(r, ch), lo);
                    sts128(skt + kv_at(r, ch + kChunks / 2), hi);
                }
                Mainloop::fence_operands();
                __syncthreads();
            }
        }

        if constexpr (kCausal) {
            bool warp_skip = t0 > warp_pos_hi;
            if constexpr (kWindow)
                warp_skip = warp_skip ||
                            (p.window_left >= 0 && t0 + kTileKV - 1 < warp_pos_lo - p.window_left);
            if (warp_skip) continue;  // its state is what the hidden keys would leave
        }
        // kCustom: the bits of this thread's rows for the tile's keys, bit j - t0
        // for key j, requested before S so that their latency hides behind it.
        unsigned long long mask_bits[kMT][2];
        if constexpr (kCustom)
            for_each_row([&](int mt, int h, int tok, int) {
                mask_bits[mt][h] = custom_bits(p, w, w.mask_offset + (long long)tok * w.kv_len + t0,
                                               imin(kTileKV, w.kv_len - t0));
            });
        // S = Q K^T for this warp's rows.
        float s[kMT][kNT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
        Mainloop::qk(s, frags, sq, skt, warp, warp_row0, lane);

        // Final logits (variant transform, natural units) are masked on
        // boundary tiles only.
        if (tile_needs_mask(p, w, t0, kTileKV, tok_lo, tok_hi, off)) {
            for_each_row([&](int mt, int h, int tok, int head) {
                const int qpos = tok + off;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        const int j = t0 + nt * 8 + 2 * t + (e & 1);
                        bool bit = true;
                        if constexpr (kCustom) bit = (mask_bits[mt][h] >> (j - t0)) & 1;
                        s[mt][nt][e] = masked_logit(p, w, s[mt][nt][e], head, j, qpos, bit);
                    }
            });
        } else {
            for_each_row([&](int mt, int h, int tok, int head) {
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e)
                        s[mt][nt][e] = Variant::logits_transform(
                            p, s[mt][nt][e], head, t0 + nt * 8 + 2 * t + (e & 1), tok + off);
            });
        }

        // Online softmax (prefill/softmax.cuh). Without softmax, S already
        // holds the weights.
        if constexpr (kSoftmax) {
            float scale[kMT][2];
            bool grew = false;
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    bool grew_row;
                    softmax_row(s[mt], h, m[mt][h], d[mt][h], scale[mt][h], grew_row);
                    grew = grew || grew_row;
                    // kLazyRow: only when the maximum of one of these rows
                    // (in the warp) grew.
                    if constexpr (!kLazy)
                        if (!kLazyRow || any_sync(grew_row)) rescale_half(o[mt], h, scale[mt][h]);
                }
            // kLazy: O is rescaled here, only when some row of the warp has
            // a new maximum.
            if constexpr (kLazy)
                if (any_sync(grew))
#pragma unroll
                    for (int mt = 0; mt < kMT; ++mt) rescale_rows(o[mt], scale[mt]);
        }

        // O += P V.
        Mainloop::pv(o, s, frags, svt, lane);
    }
    cp_async_wait<0>();

    // Epilogue: normalise, output hook, stage in this warp's Q rows (only
    // this warp ever read them), then 16-byte stores of whole rows. The
    // __syncwarp orders every lane's last ldmatrix of Q before any lane's
    // staging store (compute-sanitizer racecheck reported the pair).
    __syncwarp();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float inv, lse;
            finish_row(d[mt][h], m[mt][h], inv, lse);
            const int r = warp_row0 + mt * 16 + g + 8 * h;
            int tok, head;
            row_at(mt, h, tok, head);
            stage_row(p, o[mt], h, inv, lse, head, t, [&](int dt) { return sq + q_at(r, dt); });
            if (p.lse != nullptr && t == 0 && row0 + r < rows) store_lse(p, w, tok, head, lse);
        }
    __syncwarp();
#pragma unroll
    for (int c = lane; c < kMT * 16 * kChunksVO; c += 32) {
        const int r = warp_row0 + c / kChunksVO, ch = c % kChunksVO;
        const int pr = row0 + r;
        if (pr < rows) store_chunk(p, w, G, pr, ch, [&] { return sq + q_at(r, ch); });
    }
}

}  // namespace prefill
}  // namespace fijit
