// Absorbed MLA decode over a paged latent cache (DeepSeek-V3/R1, Kimi K2):
// for query row (token i, head h) of request b and its visible keys j,
//   s_j = ([q_nope || q_pe] . [ckv_j || kpe_j]) * sm_scale      (576 dims)
//   o   = sum_j softmax(s)_j ckv_j                               (512 dims)
// through the variant's logits hooks (soft-cap, a user's logits_transform /
// logits_mask) and output_transform (an attention sink). Key j is visible to
// token i when j <= kv_len - q_len + i: causal among the request's new tokens,
// aligned bottom-right. The host plan (src/launch/mla_decode.c) lists work
// items (request, 64-row block, range of keys); blockIdx.x is the item.
//
// Per block, for each 32-key tile: cp.async brings the tile (a ring of two
// or three by arch, so the next tiles load during this one's products); each of the 8 warps
// computes S for 16 rows x 16 keys, the two warps of a row group exchange
// their row maxima through shared memory, write P (q dtype) and then each
// accumulates 16 rows x 256 output columns of P.V from the same tile. Warps
// whose rows are all past the request's skip the products (mla/params.h).
//
// Second entry: fi_mla_decode_merge_kernel combines the normalised partial
// states of items cut by keys. A second kernel rather than a merge by the last
// block (as batch decode does): the main kernel then needs no counters, atomics
// or zeroed workspace, and its registers stay with the 128-float accumulator;
// the cost is one small launch when the plan splits (whether a fused merge
// pays is for the GPU measurements to show).
#pragma once

#include "mla/tile.cuh"

namespace fijit {
namespace mla {

// The block's final (or partial) rows: o = acc / l (times the fp8 scale), lse.
// Rows past the request's are not written.
__device__ __forceinline__ void store_rows(const Params &p, const fi_mla_decode_work &w,
                                           const Row (&rows)[2], const float (&o)[kONTiles][4],
                                           const float (&m)[2], const float (&l)[2], int rg,
                                           int half, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const bool split = w.num_splits > 1;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const Row &x = rows[i];
        if (!x.valid) continue;
        const int r = rg * 16 + g + 8 * i;
        const float lse = l[i] > 0.0f ? m[i] + log2_fast(l[i]) * kLn2 : -inf_();
        const float scale = (l[i] > 0.0f ? 1.0f / l[i] : 0.0f) * (kFp8 ? p.kv_scale : 1.0f);
        const long long token = w.q_start + x.token;
        if (split) {
            float *dst = p.partial_o + ((long long)blockIdx.x * FI_MLA_ROWS + r) * FI_MLA_DIM_CKV +
                         half * kHalfCols + 2 * t;
#pragma unroll
            for (int n = 0; n < kONTiles; ++n) {
                dst[8 * n] = o[n][2 * i] * scale;
                dst[8 * n + 1] = o[n][2 * i + 1] * scale;
            }
            if (half == 0 && t == 0) p.partial_lse[blockIdx.x * FI_MLA_ROWS + r] = lse;
            continue;
        }
        DTypeO *dst = static_cast<DTypeO *>(p.o) + token * p.o_stride_t + x.head * p.o_stride_h;
#pragma unroll
        for (int n = 0; n < kONTiles; ++n) {
            const int d = half * kHalfCols + 8 * n + 2 * t;
            const float lo = Variant::output_transform(p, o[n][2 * i] * scale, x.head, d, lse);
            const float hi =
                Variant::output_transform(p, o[n][2 * i + 1] * scale, x.head, d + 1, lse);
            *reinterpret_cast<unsigned int *>(dst + d) = Traits<DTypeO>::pack2(lo, hi);
        }
        if (p.lse && half == 0 && t == 0) p.lse[token * p.num_heads + x.head] = lse;
    }
}

}  // namespace mla
}  // namespace fijit

extern "C" __global__ void __launch_bounds__(FI_MLA_THREADS, 1)
    fi_mla_decode_kernel(const fi_mla_decode_params p)
{
    using namespace fijit;
    using namespace fijit::mla;
    extern __shared__ __align__(16) unsigned char smem[];

    const fi_mla_decode_work w = p.work[blockIdx.x];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rg = warp >> 1, half = warp & 1;  // row group, key half / column half
    const int g = lane >> 2, t = lane & 3;
    const unsigned int base = smem_addr(smem);
    const unsigned int q_smem = base + Smem::q, k_smem = base + Smem::k, p_smem = base + Smem::p;
    float *red = reinterpret_cast<float *>(smem + Smem::red);

    const Row rows[2] = {row_of(w, p.num_heads, rg * 16 + g),
                         row_of(w, p.num_heads, rg * 16 + g + 8)};
    // Valid rows come first: a row group whose first row is past the
    // request's has none, and its warps skip both products (mla/params.h).
    const bool active = row_of(w, p.num_heads, rg * 16).valid;
    const float logit_scale = (kScaleLogits ? p.sm_scale : 1.0f) * (kFp8 ? p.kv_scale : 1.0f);

    load_q(p, w, q_smem);
    if constexpr (!kScaleLogits) {
        cp_async_wait<0>();
        __syncthreads();
        transform_q(p, w, q_smem);
    }

    float o[kONTiles][4];
#pragma unroll
    for (int n = 0; n < kONTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
    float m[2] = {-inf_(), -inf_()}, l[2] = {0.0f, 0.0f};

    const int tiles = (w.kv_end - w.kv_begin + FI_MLA_TILE_KEYS - 1) / FI_MLA_TILE_KEYS;
    // Tile i in ring slot i % kStages (16-bit: a K tile; fp8: a raw tile,
    // widened into the one 16-bit tile). One cp.async group per tile, an
    // empty one past the last, so that waiting for all but the newest
    // kStages - 2 groups always means: tile i has landed.
    auto load_slot = [&](int i) {
        const int slot = i % kStages;
        if (i >= tiles) {
            cp_async_commit();
            return;
        }
        const unsigned int dst = kFp8 ? base + Smem::raw + slot * FI_MLA_FP8_TILE_BYTES
                                      : k_smem + slot * FI_MLA_K_BYTES;
        load_kv_tile(p, w, w.kv_begin + i * FI_MLA_TILE_KEYS, dst);
    };
    for (int i = 0; i < kStages - 1; ++i) load_slot(i);

    for (int i = 0; i < tiles; ++i) {
        // Tile i has landed, and every warp is done with tile i - 1: its slot
        // takes tile i + kStages - 1, which loads during the products.
        cp_async_wait<kStages - 2>();
        __syncthreads();
        load_slot(i + kStages - 1);
        unsigned int k_tile = k_smem + (i % kStages) * FI_MLA_K_BYTES;
        if constexpr (kFp8) {
            widen_fp8_tile<DTypeKV>(base + Smem::raw + (i % kStages) * FI_MLA_FP8_TILE_BYTES,
                                    k_smem);
            __syncthreads();
            k_tile = k_smem;
        }

        float s[2][4] = {};
        if (active) qk_product(s, q_smem, k_tile, rg, half, lane);

        // Final logits of the visible keys, -inf elsewhere; this half's row maxima.
        const int key0 = w.kv_begin + i * FI_MLA_TILE_KEYS + half * 16 + 2 * t;
        float mx[2] = {-inf_(), -inf_()};
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const Row &x = rows[e >> 1];
                const int j = key0 + 8 * n + (e & 1);
                s[n][e] = visible(p, w, x, j)
                              ? Variant::logits_transform(p, s[n][e] * logit_scale, x.head, j,
                                                          x.qo_idx)
                              : -inf_();
                mx[e >> 1] = fmax_(mx[e >> 1], s[n][e]);
            }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmax_(mx[r], shfl_xor(mx[r], 1));
            mx[r] = fmax_(mx[r], shfl_xor(mx[r], 2));
            if (t == 0) red[half * FI_MLA_ROWS + rg * 16 + g + 8 * r] = mx[r];
        }
        __syncthreads();

        // Online softmax over both halves' keys: both warps of a row group
        // compute the same running maximum, so their partial sums add up.
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = rg * 16 + g + 8 * r;
            const float m_new = fmax_(m[r], fmax_(red[row], red[FI_MLA_ROWS + row]));
            alpha[r] = m_new == -inf_() ? 1.0f : exp2_fast((m[r] - m_new) * kLog2e);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            float pr[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float mr = m[e >> 1];
                pr[e] = mr == -inf_() ? 0.0f : exp2_fast((s[n][e] - mr) * kLog2e);
                l[e >> 1] += pr[e];
            }
            const int col = half * 16 + 8 * n + 2 * t;
            sts32(p_smem + ((rg * 16 + g) * FI_MLA_P_ROW + col) * 2,
                  Traits<DTypeQ>::pack2(pr[0], pr[1]));
            sts32(p_smem + ((rg * 16 + g + 8) * FI_MLA_P_ROW + col) * 2,
                  Traits<DTypeQ>::pack2(pr[2], pr[3]));
        }
#pragma unroll
        for (int n = 0; n < kONTiles; ++n) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
        __syncthreads();  // P complete; the row maxima read

        if (active) pv_product(o, p_smem, k_tile, rg, half, lane);
    }

    // The row sums: over the four lanes of a row, then over the two halves.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += shfl_xor(l[r], 1);
        l[r] += shfl_xor(l[r], 2);
    }
    __syncthreads();  // every warp is past its last read of red
    if (t == 0) {
        red[half * FI_MLA_ROWS + rg * 16 + g] = l[0];
        red[half * FI_MLA_ROWS + rg * 16 + g + 8] = l[1];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = rg * 16 + g + 8 * r;
        l[r] = red[row] + red[FI_MLA_ROWS + row];
    }
    store_rows(p, w, rows, o, m, l, rg, half, lane);
}

// The items of a (request, row block) cut by keys, merged: for each row,
// o = sum_s e^(lse_s - L) o_s with L = log sum_s e^(lse_s); splits that saw
// no key (lse -inf) weigh nothing, a row with none gets 0 and -inf. The block
// of the first item does the work; the others return at once.
extern "C" __global__ void __launch_bounds__(FI_MLA_MERGE_THREADS)
    fi_mla_decode_merge_kernel(const fi_mla_decode_params p)
{
    using namespace fijit;
    using namespace fijit::mla;
    static_assert(FI_MLA_MERGE_THREADS * 2 == FI_MLA_DIM_CKV, "two columns a thread");
    const fi_mla_decode_work w = p.work[blockIdx.x];
    if (w.num_splits == 1 || w.split != 0) return;
    const int d = threadIdx.x * 2;
    for (int r = 0; r < FI_MLA_ROWS; ++r) {
        const Row x = row_of(w, p.num_heads, r);
        if (!x.valid) break;  // valid rows come first
        float mx = -inf_();
        for (int s = 0; s < w.num_splits; ++s)
            mx = fmax_(mx, p.partial_lse[((long long)blockIdx.x + s) * FI_MLA_ROWS + r]);
        float sum = 0.0f, lo = 0.0f, hi = 0.0f;
        for (int s = 0; mx != -inf_() && s < w.num_splits; ++s) {
            const long long item = (long long)blockIdx.x + s;
            const float wgt = exp2_fast((p.partial_lse[item * FI_MLA_ROWS + r] - mx) * kLog2e);
            const float *src = p.partial_o + (item * FI_MLA_ROWS + r) * FI_MLA_DIM_CKV + d;
            sum += wgt;
            lo = fma_(wgt, src[0], lo);
            hi = fma_(wgt, src[1], hi);
        }
        const float lse = sum > 0.0f ? mx + log2_fast(sum) * kLn2 : -inf_();
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        const long long token = w.q_start + x.token;
        DTypeO *dst = static_cast<DTypeO *>(p.o) + token * p.o_stride_t + x.head * p.o_stride_h;
        lo = Variant::output_transform(p, lo * inv, x.head, d, lse);
        hi = Variant::output_transform(p, hi * inv, x.head, d + 1, lse);
        *reinterpret_cast<unsigned int *>(dst + d) = Traits<DTypeO>::pack2(lo, hi);
        if (p.lse && threadIdx.x == 0) p.lse[token * p.num_heads + x.head] = lse;
    }
}
