// The pieces of the absorbed MLA decode kernel (mla/mla_decode.cuh): where a
// block's rows and keys are, the shared-memory layout, the loads of Q and of
// one 576-wide K tile from the paged latent cache, and the two tensor-core
// products (S = Q.K^T over 576 dims; O += P.V over the tile's keys, V being
// the first 512 columns of the same K tile). mma.sync m16n8k16 with fp32
// accumulation (common/mma_sm80.cuh): the portable path of sm_80 and later.
// Params: mla/params.h.
#pragma once

#include "common/mma_sm80.cuh"
#include "mla/params.h"

namespace fijit {
namespace mla {

using DTypeQ = fijit_cfg::DTypeQ;
using DTypeKV = fijit_cfg::DTypeKV;
using DTypeO = fijit_cfg::DTypeO;
using Variant = fijit_cfg::Variant;
using Params = fi_mla_decode_params;

constexpr int kKVBytes = Traits<DTypeKV>::kBytes;
constexpr bool kFp8 = kKVBytes == 1;
constexpr int kStages = FI_MLA_STAGES(__CUDA_ARCH__ / 10);  // K ring depth (mla/params.h)
constexpr int kRow = FI_MLA_SMEM_ROW;          // elements of a shared Q / K row
constexpr int kQKSteps = FI_MLA_DIM_QK / 16;    // k-steps of S = Q.K^T
constexpr int kHalfCols = FI_MLA_DIM_CKV / 2;   // output columns of one warp
constexpr int kONTiles = kHalfCols / 8;         // its 8-wide accumulator tiles

static_assert(fijit_cfg::kHeadDim == FI_MLA_DIM_CKV,
              "mla_decode: head_dim is the 512-wide latent (the value and output width)");
static_assert(SameType<DTypeQ, DTypeO>::value, "mla_decode: o has q's dtype");
static_assert(SameType<DTypeKV, DTypeQ>::value || SameType<DTypeKV, fp8_e4m3_t>::value,
              "mla_decode: kv is q's dtype or fp8_e4m3");
static_assert(Variant::use_softmax,
              "mla_decode: a variant must keep use_softmax (splits merge as softmax states)");
static_assert(FI_MLA_THREADS == 256 && FI_MLA_ROWS == 64 && FI_MLA_TILE_KEYS == 32,
              "mla_decode: the warp layout below assumes 8 warps, 64 rows and 32 keys");

// The default query transform only folds sm_scale into q: the kernel then
// keeps q as given and scales the fp32 logits instead (no rounding of q*scale).
constexpr bool kScaleLogits = KeepsBaseQuery<Variant, Params>::value;

// Byte offsets in dynamic shared memory (mla/params.h, FI_MLA_SMEM_BYTES).
struct Smem {
    static constexpr int q = 0;
    static constexpr int k = FI_MLA_Q_BYTES;  // 16-bit K tiles: the ring, or 1 with fp8
    static constexpr int raw = k + (kFp8 ? 1 : kStages) * FI_MLA_K_BYTES;  // fp8 ring
    static constexpr int p = raw + (kFp8 ? kStages * FI_MLA_FP8_TILE_BYTES : 0);
    static constexpr int red = p + FI_MLA_P_BYTES;  // [2 key halves][64 rows] floats
    static constexpr int total = red + FI_MLA_RED_BYTES;
};
static_assert(Smem::total == FI_MLA_SMEM_BYTES(kKVBytes, kStages),
              "mla_decode: shared layout and FI_MLA_SMEM_BYTES disagree");

// Query row r (0..63) of a block: which token and head, and where the query
// sits on the key axis (bottom-right: the request's last token sees every key).
struct Row {
    bool valid;
    int token, head, qo_idx;
};

__device__ __forceinline__ Row row_of(const fi_mla_decode_work &w, int num_heads, int r)
{
    const int flat = w.row_block * FI_MLA_ROWS + r;
    Row x;
    x.valid = flat < w.q_len * num_heads;
    x.token = flat / num_heads;
    x.head = flat - x.token * num_heads;
    x.qo_idx = w.kv_len - w.q_len + x.token;
    return x;
}

// Key j is visible to row x: inside the item, causal among the new tokens,
// and not hidden by the variant.
__device__ __forceinline__ bool visible(const Params &p, const fi_mla_decode_work &w,
                                        const Row &x, int j)
{
    return x.valid && j < w.kv_end && j <= x.qo_idx &&
           Variant::logits_mask(p, x.head, j, x.qo_idx);
}

// Q [64][576] of the block's rows into shared memory (zeros for rows past the
// request's), one cp.async group; the caller waits.
__device__ __forceinline__ void load_q(const Params &p, const fi_mla_decode_work &w,
                                       unsigned int q_smem)
{
    constexpr int kChunks = FI_MLA_DIM_QK / 8;  // 16-byte chunks of a row
    constexpr int kNopeChunks = FI_MLA_DIM_CKV / 8;
    for (int c = threadIdx.x; c < FI_MLA_ROWS * kChunks; c += FI_MLA_THREADS) {
        const int r = c / kChunks, col = c - r * kChunks;
        const Row x = row_of(w, p.num_heads, r);
        const long long t = w.q_start + x.token;
        const void *src = p.q_nope;
        if (x.valid)
            src = col < kNopeChunks
                      ? static_cast<const DTypeQ *>(p.q_nope) + t * p.q_nope_stride_t +
                            x.head * p.q_nope_stride_h + col * 8
                      : static_cast<const DTypeQ *>(p.q_pe) + t * p.q_pe_stride_t +
                            x.head * p.q_pe_stride_h + (col - kNopeChunks) * 8;
        cp_async16(q_smem + (r * kRow + col * 8) * 2, src, x.valid);
    }
    cp_async_commit();
}

// A variant's own query_transform, applied in place to the loaded Q (fp32,
// rounded back to the q dtype); called between barriers.
__device__ __forceinline__ void transform_q(const Params &p, const fi_mla_decode_work &w,
                                            unsigned int q_smem)
{
    constexpr int kPairs = FI_MLA_DIM_QK / 2;
    for (int c = threadIdx.x; c < FI_MLA_ROWS * kPairs; c += FI_MLA_THREADS) {
        const int r = c / kPairs, d = (c - r * kPairs) * 2;
        const Row x = row_of(w, p.num_heads, r);
        if (!x.valid) continue;
        const unsigned int a = q_smem + (r * kRow + d) * 2;
        float lo, hi;
        Traits<DTypeQ>::unpack2(lds32(a), lo, hi);
        lo = Variant::query_transform(p, lo, x.head, d);
        hi = Variant::query_transform(p, hi, x.head, d + 1);
        sts32(a, Traits<DTypeQ>::pack2(lo, hi));
    }
}

// Address of cached token j's 16-byte chunk `col` (in units of 16 bytes of
// the KV dtype): the ckv part, then the kpe part.
__device__ __forceinline__ const void *kv_chunk(const Params &p, const fi_mla_decode_work &w,
                                                int j, int col)
{
    constexpr int kPer = 16 / kKVBytes;  // elements per chunk
    constexpr int kNopeChunks = FI_MLA_DIM_CKV / kPer;
    const long long page = p.kv_indices[w.page_start + j / p.page_size];
    const int n = j % p.page_size;
    return col < kNopeChunks
               ? static_cast<const DTypeKV *>(p.ckv) + page * p.ckv_stride_page +
                     n * p.ckv_stride_n + col * kPer
               : static_cast<const DTypeKV *>(p.kpe) + page * p.kpe_stride_page +
                     n * p.kpe_stride_n + (col - kNopeChunks) * kPer;
}

// Keys tile_begin .. +32 of the item into shared memory (zeros past kv_end,
// so that P.V never multiplies a 0 weight by stale bytes), one cp.async
// group. 16-bit KV: into a padded K tile; fp8: into a raw [32][576] tile.
__device__ __forceinline__ void load_kv_tile(const Params &p, const fi_mla_decode_work &w,
                                             int tile_begin, unsigned int dst)
{
    constexpr int kChunks = FI_MLA_DIM_QK * kKVBytes / 16;
    constexpr int kDstRow = kFp8 ? FI_MLA_DIM_QK : kRow * 2;  // bytes
    for (int c = threadIdx.x; c < FI_MLA_TILE_KEYS * kChunks; c += FI_MLA_THREADS) {
        const int r = c / kChunks, col = c - r * kChunks;
        const int j = tile_begin + r;
        const bool valid = j < w.kv_end;
        cp_async16(dst + r * kDstRow + col * 16, valid ? kv_chunk(p, w, j, col) : p.ckv, valid);
    }
    cp_async_commit();
}

// fp8: the raw tile widened into the 16-bit K tile (exact: every e4m3 value
// is an fp16 and a bf16 value); the scale is applied to logits and output.
template <class Fp8>
__device__ __forceinline__ void widen_fp8_tile(unsigned int raw, unsigned int k16)
{
    constexpr int kUnits = FI_MLA_DIM_QK / 8;  // 8 values a unit
    for (int c = threadIdx.x; c < FI_MLA_TILE_KEYS * kUnits; c += FI_MLA_THREADS) {
        const int r = c / kUnits, col = c - r * kUnits;
        const unsigned int src = raw + r * FI_MLA_DIM_QK + col * 8;
        float f[8], lo[4], hi[4];
        Traits<Fp8>::unpack4(lds32(src), lo);
        Traits<Fp8>::unpack4(lds32(src + 4), hi);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[i] = lo[i];
            f[4 + i] = hi[i];
        }
        sts128(k16 + (r * kRow + col * 8) * 2, pack8<DTypeQ>(f));
    }
}

// S[16 rows of row group rg][16 keys of half `half`] = Q . K^T over 576 dims.
// s[n][0..1]: row g, keys 8n + 2t, +1; s[n][2..3]: row g + 8 (mma_sm80.cuh).
__device__ __forceinline__ void qk_product(float (&s)[2][4], unsigned int q_smem,
                                           unsigned int k_smem, int rg, int half, int lane)
{
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
    // A (Q rows) by rows lane % 16, columns (lane / 16) * 8; B (K rows as
    // columns of K^T): matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15).
    const unsigned int qa = q_smem + ((rg * 16 + (lane & 15)) * kRow + (lane >> 4) * 8) * 2;
    const unsigned int kb =
        k_smem + ((half * 16 + (lane >> 4) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 8) * 2;
#pragma unroll 4
    for (int kk = 0; kk < kQKSteps; ++kk) {
        unsigned int a[4], b[4];
        ldmatrix_x4(a, qa + kk * 32);
        ldmatrix_x4(b, kb + kk * 32);
        Mma<DTypeQ>::run(s[0], a, b[0], b[1]);
        Mma<DTypeQ>::run(s[1], a, b[2], b[3]);
    }
}

// O[16 rows of rg][256 columns of half] += P[16 rows][32 keys] . V, V the
// first 512 columns of the K tile. o[n][0..1]: row g, columns 8n + 2t, +1
// of the half; o[n][2..3]: row g + 8.
__device__ __forceinline__ void pv_product(float (&o)[kONTiles][4], unsigned int p_smem,
                                           unsigned int k_smem, int rg, int half, int lane)
{
    const unsigned int pa =
        p_smem + ((rg * 16 + (lane & 15)) * FI_MLA_P_ROW + (lane >> 4) * 8) * 2;
    // ldmatrix.trans of (keys 0-7 | 8-15) x (dims d | d + 8): the B fragments
    // (keys 2t, 2t+1; dim g) of two 8-wide column tiles.
    const unsigned int vb = k_smem + ((((lane >> 3) & 1) * 8 + (lane & 7)) * kRow +
                                      half * kHalfCols + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int ks = 0; ks < FI_MLA_TILE_KEYS / 16; ++ks) {
        unsigned int a[4];
        ldmatrix_x4(a, pa + ks * 32);
#pragma unroll
        for (int d = 0; d < kONTiles / 2; ++d) {
            unsigned int b[4];
            ldmatrix_x4_trans(b, vb + (ks * 16 * kRow + d * 16) * 2);
            Mma<DTypeQ>::run(o[2 * d], a, b[0], b[1]);
            Mma<DTypeQ>::run(o[2 * d + 1], a, b[2], b[3]);
        }
    }
}

}  // namespace mla
}  // namespace fijit
