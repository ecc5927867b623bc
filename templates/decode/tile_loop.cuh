// Decode's tile loop (attend): q^T as mma fragments, s^T = K q^T and
// o^T += V^T p^T on mma.sync over the ring's tiles, masks and the variant's
// logits hooks, the online softmax, and the merge of the block's warps.
#pragma once

#include "decode/kv_source.cuh"
#include "decode/staging.cuh"

namespace fijit {
namespace decode {

__device__ __forceinline__ unsigned int ldg32(const void *p)
{
    unsigned int v;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// The B fragments of one query head's q^T (dims 16 ks + f * 8 + 2t + e, from
// qh = the head's q + 2t) rotated by RoPE and transformed by the variant, as
// the sum of two 16-bit parts hi + lo (attend says why).
template <class P>
__device__ __forceinline__ void transformed_q(const P &p, const Job &job, const DTypeQ *qh,
                                              int head, int t, unsigned int (&hi)[kKSteps][2],
                                              unsigned int (&lo)[kKSteps][2])
{
    float x[kKSteps][2][2];
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
        for (int f = 0; f < 2; ++f)
            Traits<DTypeQ>::unpack2(ldg32(qh + ks * 16 + f * 8), x[ks][f][0], x[ks][f][1]);
    if constexpr (kRope) {
        const float pos = (float)(job.pos_offset + job.qo_idx);
#pragma unroll
        for (int ks = 0; ks < kKSteps / 2; ++ks)
#pragma unroll
            for (int f = 0; f < 2; ++f)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float sn, cs;
                    sincos_pos(pos, p.rope_freq[ks * 16 + f * 8 + 2 * t + e], sn, cs);
                    const float a = x[ks][f][e], b = x[ks + kKSteps / 2][f][e];
                    x[ks][f][e] = fma_(-b, sn, a * cs);
                    x[ks + kKSteps / 2][f][e] = fma_(a, sn, b * cs);
                }
    }
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const int dim = ks * 16 + f * 8 + 2 * t;
            float part[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                x[ks][f][e] = Variant::query_transform(p, x[ks][f][e], head, dim + e);
                if constexpr (kFp8) x[ks][f][e] *= job.k_scale;
            }
            hi[ks][f] = Traits<DTypeMma>::pack2(x[ks][f][0], x[ks][f][1]);
            Traits<DTypeMma>::unpack2(hi[ks][f], part[0], part[1]);
            lo[ks][f] = Traits<DTypeMma>::pack2(x[ks][f][0] - part[0], x[ks][f][1] - part[1]);
        }
}

// The tile loop. On return, threads with token_lane 0 hold the block's state
// (m, d, unnormalised o) for their heads (State, in make_place's layout). Warp
// w takes keys [tg, tg + 1) * 16 of every tile (tg = w % kTG) and output dims
// [dg, dg + 1) * head_dim / kDG (dg = w / kTG). Lane (g, t) holds keys g and
// g + 8 of a product's rows and heads 2t, 2t + 1 of its columns (kHT = 1
// column tile: registers stay under 128 for head_dim <= 128, four blocks to
// an SM). The warps' states are merged through shared memory at the end.
template <class P, class KV>
__device__ __forceinline__ void attend(const P &p, KV &kv, SharedStorage &smem, const Job &job,
                                       const Place &pl, State &st)
{
    constexpr int kHT = kMmaHeads / 8;
    const int warp = pl.tid / 32, lane = pl.tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int tg = warp % kTG, dg = warp / kTG;
    const int begin = job.begin, end = job.end;
    const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;

    ring_start(kv, smem, job, num_tiles, pl.tid);

    // A block head's query head; idle heads compute on the group's last one.
    auto head_of = [&](int i) { return i < pl.block_heads ? pl.block_qo + i : pl.group_last; };

    // q^T as B fragments (dims 16 ks + f * 8 + 2t + e; head 8 ht + g). With
    // the base query_transform and no rotation, q enters the products as it
    // is (exact: DTypeMma is q's type) and sm_scale (fp8: times k_scale)
    // scales the fp32 logits. Otherwise q is rotated and transformed once and
    // held as the sum of two 16-bit parts, both multiplied with K: one part
    // alone would round the transformed q to 8 bits of mantissa with bf16,
    // far coarser than fp32 logits. RoPE pairs dim d with d + head_dim / 2:
    // the same (f, t, e) at k-step ks + kKSteps / 2, held by the same lane.
    constexpr bool kRawQ = !kRope && KeepsBaseQuery<Variant, P>::value;
    constexpr int kQParts = kRawQ ? 1 : 2;
    const float qk_scale = kRawQ ? p.sm_scale * (kFp8 ? job.k_scale : 1.f) : 1.f;
    unsigned int qb[kQParts][kHT][kKSteps][2];
#pragma unroll
    for (int ht = 0; ht < kHT; ++ht) {
        const int head = head_of(8 * ht + g);
        const DTypeQ *qh = job.q + head * job.q_stride_h + 2 * t;
        if constexpr (kRawQ) {
#pragma unroll
            for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
                for (int f = 0; f < 2; ++f) qb[0][ht][ks][f] = ldg32(qh + ks * 16 + f * 8);
        } else {
            transformed_q(p, job, qh, head, t, qb[0][ht], qb[kQParts - 1][ht]);
        }
    }
    int head[kHT][2];  // this lane's columns
#pragma unroll
    for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
        for (int c = 0; c < 2; ++c) head[ht][c] = head_of(8 * ht + 2 * t + c);

    float m[kHT][2], d[kHT][2];  // running max (log2 units), this lane's part of the sum
    float o[kHT][kMT][4];        // o^T: (dim g, heads 2t, 2t + 1), (dim g + 8, same)
#pragma unroll
    for (int ht = 0; ht < kHT; ++ht) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            m[ht][c] = kSoftmax ? -inf_() : 0.f;
            d[ht][c] = 0.f;
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[ht][mt][i] = 0.f;
    }

    const unsigned int ring_k = smem_addr(&smem.ring.kv[0][0][0]);
    constexpr unsigned int kTileBytes = kTileChunks * 16;           // a ring tile
    constexpr unsigned int kMmaTileBytes = kTile * kMmaRowChunks * 16;  // as 16-bit
    const unsigned int staged = ring_k + job.stages * 2 * kTileBytes;  // K (and V) as 16-bit
    const int row0 = tg * kTokW;                          // this warp's first key in a tile
    const int lrow = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix row of this lane
    // This lane's ldmatrix address in a K tile for k-step ks, less the tile's
    // base. In a ring tile (the base moves every tile) it is kq[ks % 4] +
    // (ks / 4) * 128, computed once: the swizzle permutes chunks within groups
    // of 8, so chunk c + 8 lies 8 chunks after chunk c. K staged (fp8, RoPE)
    // has one base, and kernels that stage were 2% slower with kq (H100, fp8
    // e4m3, batch 64 x kv 16k).
    static_assert(kMmaRowChunks % 8 == 0, "k-steps 4 apart are 8 chunks apart");
    unsigned int kq[4];
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) kq[ks] = mma_index(lrow, 2 * ks + (lane >> 4)) * 16;
    auto k_address = [&](unsigned int kbase, int ks) {
        return kStagedK ? kbase + mma_index(lrow, 2 * ks + (lane >> 4)) * 16
                        : kbase + kq[ks % 4] + (ks / 4) * 128;
    };
    for (int tile = 0, stage = 0; tile < num_tiles;
         ++tile, stage = stage + 1 == job.stages ? 0 : stage + 1) {
        ring_next(kv, smem, job, tile, stage, num_tiles, pl.tid);
        unsigned int kbase = ring_k + stage * 2 * kTileBytes;
        unsigned int vbase = kbase + kTileBytes;
        if constexpr (kStagedK) {
            // The previous tile's reads of the staging area ended before
            // ring_next's barrier.
            if constexpr (kRope)
                rope_tile(p, kbase, staged, (float)(job.pos_offset + begin + tile * kTile), pl.tid);
            else
                widen_tile(kbase, staged, pl.tid);
            if constexpr (kStagedV) widen_tile(vbase, staged + kMmaTileBytes, pl.tid);
            __syncthreads();
            kbase = staged;
            if constexpr (kStagedV) vbase = staged + kMmaTileBytes;
        }
        const int j0 = begin + tile * kTile + row0;

        // s^T = K q^T: (keys g, g + 8) x (heads 2t, 2t + 1) of each head tile;
        // four independent accumulator chains (q part x k-step residue), two
        // for one q part read from the ring (H100: decode 32/8 kv 4k 16.1
        // against 16.8 us; fp8 was 1% slower with two).
        float s[kHT][4];
        {
            constexpr int kChains = kStagedK ? 4 / kQParts : 2;
            float acc[kQParts][kChains][kHT][4] = {};
#pragma unroll
            for (int ks = 0; ks < kKSteps; ++ks) {
                unsigned int a[4];  // keys 0-7 / 8-15 x dims 16 ks + 0-7 / 8-15
                ldmatrix_x4(a, k_address(kbase, ks));
#pragma unroll
                for (int h = 0; h < kQParts; ++h)
#pragma unroll
                    for (int ht = 0; ht < kHT; ++ht)
                        Mma<DTypeMma>::run(acc[h][ks % kChains][ht], a, qb[h][ht][ks][0],
                                          qb[h][ht][ks][1]);
            }
#pragma unroll
            for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float sum[kQParts] = {};
#pragma unroll
                    for (int h = 0; h < kQParts; ++h)
#pragma unroll
                        for (int c = 0; c < kChains; ++c) sum[h] += acc[h][c][ht][i];
                    s[ht][i] = kQParts == 1 ? sum[0] * qk_scale : sum[0] + sum[kQParts - 1];
                }
        }

        // Final logits in log2 units; hidden keys -inf (without softmax: the
        // weights, hidden keys 0).
#pragma unroll
        for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = i & 1, j = j0 + g + 8 * (i >> 1);
                const bool visible = j < end && Variant::logits_mask(p, head[ht][c], j, job.qo_idx);
                const float logit =
                    visible ? Variant::logits_transform(p, s[ht][i], head[ht][c], j, job.qo_idx)
                            : 0.f;
                if constexpr (kSoftmax)
                    s[ht][i] = visible ? logit * kLog2e : -inf_();
                else
                    s[ht][i] = logit;
            }

        // Online softmax per head (the eight lanes of a column share it).
        if constexpr (kSoftmax) {
            float scale[kHT][2];
            bool moved = false;
#pragma unroll
            for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float mx = fmax_(m[ht][c], fmax_(s[ht][c], s[ht][c + 2]));
#pragma unroll
                    for (int off = 4; off < 32; off *= 2) mx = fmax_(mx, shfl_xor(mx, off));
                    const float base = mx == -inf_() ? 0.f : mx;
                    scale[ht][c] = exp2_fast(m[ht][c] - base);
                    moved |= scale[ht][c] != 1.f;
                    m[ht][c] = mx;
                    s[ht][c] = exp2_fast(s[ht][c] - base);
                    s[ht][c + 2] = exp2_fast(s[ht][c + 2] - base);
                    d[ht][c] = fma_(d[ht][c], scale[ht][c], s[ht][c] + s[ht][c + 2]);
                }
            // Rescale only when some head's max moved (rare after the first tiles).
            if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
                for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
                    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) o[ht][mt][i] *= scale[ht][i & 1];
            }
        } else {
#pragma unroll
            for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
                for (int c = 0; c < 2; ++c) d[ht][c] += s[ht][c] + s[ht][c + 2];
        }

        // o^T += V^T p^T: p^T as B fragments (keys 2t, 2t + 1 and + 8; head
        // g), transposed from s^T in registers; V^T through ldmatrix.trans.
        unsigned int pb[kHT][2];
#pragma unroll
        for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                pb[ht][r] = movmatrix_trans(Traits<DTypeMma>::pack2(s[ht][2 * r], s[ht][2 * r + 1]));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
            unsigned int a[4];  // dims 16 mt + 0-7 / 8-15 x keys 0-7 / 8-15
            const int ch = (dg * kMT + mt) * 2 + ((lane >> 3) & 1);
            ldmatrix_x4_trans(a, vbase + mma_index(row0 + (lane & 7) + (lane >> 4) * 8, ch) * 16);
#pragma unroll
            for (int ht = 0; ht < kHT; ++ht) Mma<DTypeMma>::run(o[ht][mt], a, pb[ht][0], pb[ht][1]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is now free for the merge scratch

    // Merge the kTG warps along the keys in a fixed order (warps of one tg
    // hold the same m and d; only dg 0 publishes them).
#pragma unroll
    for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int off = 4; off < 32; off *= 2) d[ht][c] += shfl_xor(d[ht][c], off);
    if (g == 0 && dg == 0) {
#pragma unroll
        for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                smem.mma.m[tg][8 * ht + 2 * t + c] = m[ht][c];
                smem.mma.d[tg][8 * ht + 2 * t + c] = d[ht][c];
            }
    }
    __syncthreads();
    float w[kHT][2];
#pragma unroll
    for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float mx = -inf_();
#pragma unroll
            for (int i = 0; i < kTG; ++i) mx = fmax_(mx, smem.mma.m[i][8 * ht + 2 * t + c]);
            w[ht][c] = exp2_fast(m[ht][c] - (mx == -inf_() ? 0.f : mx));
        }
#pragma unroll
    for (int turn = 0; turn < kTG; ++turn) {
        if (tg == turn) {
#pragma unroll
            for (int ht = 0; ht < kHT; ++ht)
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        float *dst = &smem.mma.o[8 * ht + 2 * t + (i & 1)]
                                                [(dg * kMT + mt) * 16 + g + 8 * (i >> 1)];
                        const float v = o[ht][mt][i] * w[ht][i & 1];
                        *dst = turn == 0 ? v : *dst + v;
                    }
        }
        __syncthreads();
    }

    // Hand the merged state over in State's layout: head chunk * kSlots + s.
#pragma unroll
    for (int sl = 0; sl < kSlots; ++sl) {
        const int i = pl.chunk * kSlots + sl;  // < kMmaHeads: the plan caps head_chunks
        float mx = -inf_();
#pragma unroll
        for (int k = 0; k < kTG; ++k) mx = fmax_(mx, smem.mma.m[k][i]);
        const float base = mx == -inf_() ? 0.f : mx;
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < kTG; ++k)
            sum = fma_(smem.mma.d[k][i], exp2_fast(smem.mma.m[k][i] - base), sum);
        st.m[sl] = mx;
        st.d[sl] = sum;
#pragma unroll
        for (int e = 0; e < kVec; ++e) st.o[sl][e] = smem.mma.o[i][pl.lane * kVec + e];
    }
}

}  // namespace decode
}  // namespace fijit
