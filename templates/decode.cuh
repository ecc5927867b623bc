// Single-request decode attention: one query token per head against kv_len
// keys, with GQA, RoPE/ALiBi, soft-cap, sliding window and split-KV.
//
// Decode reads every K/V byte once and does little arithmetic per byte, so
// the kernel is organised around memory:
//  * One block = one KV head (all query heads of its GQA group, or a slice of
//    a very large group) x one chunk of keys (a "split"). The host picks the
//    number of splits so that the grid fills the GPU even for one request.
//  * K/V tiles stream into shared memory with cp.async through a
//    FI_DECODE_STAGES-deep ring, so that (stages - 1) tiles of every block are
//    in flight while one is consumed; every 16-byte vector read from shared
//    memory is converted once and used by up to FI_DECODE_HEADS_PER_THREAD
//    query heads held in registers.
//  * Softmax is online in fp32 in the exp2 domain. Each row group of threads
//    keeps its own running (max, sum, output) over the tokens it saw; the row
//    groups are merged through shared memory at the end, and the splits by
//    fi_decode_merge_kernel from the (output, lse) pairs in the workspace.
//
// Requires sm_80+ (cp.async, bf16 conversions). Params: fijit_params.h.
#pragma once

namespace fijit {
namespace decode {

using DTypeQ = fijit_cfg::DTypeQ;
using DTypeKV = fijit_cfg::DTypeKV;
using DTypeO = fijit_cfg::DTypeO;
using Variant = fijit_cfg::Variant;

constexpr int kHeadDim = fijit_cfg::kHeadDim;
constexpr int kVec = FI_DECODE_VEC;
constexpr int kThreads = FI_DECODE_THREADS;
constexpr int kLanes = kHeadDim / kVec;  // threads that hold one row
constexpr int kRows = FI_DECODE_ROW_GROUPS(kHeadDim);
constexpr int kSlots = FI_DECODE_HEADS_PER_THREAD;  // query heads per thread
constexpr int kStep = FI_DECODE_TOKENS_PER_STEP;
constexpr int kTile = FI_DECODE_TILE_TOKENS(kHeadDim);
constexpr int kStages = FI_DECODE_STAGES;
constexpr int kTileVecs = kTile * kLanes;  // 16-byte vectors per K (or V) tile
constexpr int kLoadsPerThread = kTileVecs / kThreads;

static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
              "decode supports head_dim 64, 128 and 256");
static_assert(kLanes <= 32 && 32 % kLanes == 0, "a row group must lie within one warp");
static_assert(kTileVecs % kThreads == 0, "every thread issues the same number of copies");
static_assert(Traits<DTypeQ>::kBytes == 2 && Traits<DTypeKV>::kBytes == 2 &&
                  Traits<DTypeO>::kBytes == 2,
              "decode expects 16-bit q, kv and o (8 elements per 16-byte vector)");
static_assert(kHeadDim <= FI_DECODE_MAX_HEAD_DIM, "rope_freq table too small");

constexpr bool kRope = fijit_cfg::kPos == fijit_cfg::kPosRopeLlama;

// The K/V ring while streaming; the row-group merge scratch afterwards.
union SharedStorage {
    struct {
        vec16_t k[kStages][kTileVecs];
        vec16_t v[kStages][kTileVecs];
    } ring;
    struct {
        float o[kRows][kSlots][kHeadDim];
        float m[kRows][kSlots];
        float d[kRows][kSlots];
    } merge;
};

// RoPE (Llama, rotate-half) on the kVec elements this lane holds, for the
// token at `pos`. Element d pairs with d +- head_dim/2, which lives in lane
// (lane ^ kLanes/2) at the same index, hence one shuffle per element:
//   x'[d] = x[d] cos - x[d + h/2] sin   (d <  h/2)
//   x'[d] = x[d] cos + x[d - h/2] sin   (d >= h/2)
__device__ __forceinline__ void rope_rotate(float (&x)[kVec], const float (&freq)[kVec], float pos,
                                            bool upper)
{
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
        const float other = shfl_xor(x[e], kLanes / 2);
        float s, c;
        sincos_pos(pos, freq[e], s, c);
        x[e] = upper ? fma_(other, s, x[e] * c) : fma_(-other, s, x[e] * c);
    }
}

// One online-softmax state: running max (log2 units), sum and output.
struct State {
    float m[kSlots];
    float d[kSlots];
    float o[kSlots][kVec];
};

}  // namespace decode
}  // namespace fijit

extern "C" __global__ void __launch_bounds__(FI_DECODE_THREADS)
    fi_decode_kernel(const fi_decode_params p)
{
    using namespace fijit;
    using namespace fijit::decode;

    __shared__ SharedStorage smem;

    const int tid = threadIdx.x;
    const int lane = tid % kLanes;      // which kVec elements of a row
    const int row = tid / kLanes;       // row group
    const int chunk = row & (p.head_chunks - 1);  // which kSlots heads of the block
    const int token_lane = row / p.head_chunks;   // which steps of each tile
    const int token_lanes = kRows / p.head_chunks;
    const bool upper = lane >= kLanes / 2;

    const int kv_head = blockIdx.y / p.head_blocks;
    const int first = (blockIdx.y % p.head_blocks) * p.heads_per_block + chunk * kSlots;
    const int qo_base = kv_head * p.group_size;
    const int qo_idx = p.kv_len - 1;
    const int split = blockIdx.x;

    // Query heads of this thread; idle slots (the group is smaller than the
    // block's heads) compute on a copy of the group's last head and store
    // nothing.
    int head[kSlots];
    bool active[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        active[s] = first + s < p.group_size;
        head[s] = qo_base + (active[s] ? first + s : p.group_size - 1);
    }

    float freq[kVec];
    if constexpr (kRope) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) freq[e] = p.rope_freq[(lane * kVec + e) % (kHeadDim / 2)];
    }

    // This block's keys: [begin, end).
    const int begin = p.kv_begin + split * p.kv_chunk;
    const int end = begin + p.kv_chunk < p.kv_len ? begin + p.kv_chunk : p.kv_len;
    const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;

    const DTypeKV *kbase = static_cast<const DTypeKV *>(p.k) + kv_head * p.k_stride_h;
    const DTypeKV *vbase = static_cast<const DTypeKV *>(p.v) + kv_head * p.v_stride_h;

    // Issue the copies of one tile; rows past `end` are zero-filled.
    auto load_tile = [&](int stage, int tile) {
        const int t0 = begin + tile * kTile;
#pragma unroll
        for (int i = 0; i < kLoadsPerThread; ++i) {
            const int c = i * kThreads + tid;
            const int r = c / kLanes;
            const int col = (c % kLanes) * kVec;
            const bool valid = t0 + r < end;
            const long long j = valid ? t0 + r : 0;
            cp_async16(&smem.ring.k[stage][c], kbase + j * p.k_stride_n + col, valid);
            cp_async16(&smem.ring.v[stage][c], vbase + j * p.v_stride_n + col, valid);
        }
    };

    State st;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        st.m[s] = -inf_();
        st.d[s] = 0.f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) st.o[s][e] = 0.f;
    }

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < num_tiles) load_tile(s, s);
        cp_async_commit();  // empty groups keep the wait count uniform
    }

    // q in registers, rotated and transformed once; loaded after the first
    // tiles were requested so that both latencies overlap.
    float q[kSlots][kVec];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        const DTypeQ *src = static_cast<const DTypeQ *>(p.q) + head[s] * p.q_stride_h + lane * kVec;
        unpack8<DTypeQ>(ldg16(src), q[s]);
        if constexpr (kRope) rope_rotate(q[s], freq, (float)(p.rope_offset + qo_idx), upper);
#pragma unroll
        for (int e = 0; e < kVec; ++e)
            q[s][e] = Variant::query_transform(p, q[s][e], head[s], lane * kVec + e);
    }

    for (int tile = 0; tile < num_tiles; ++tile) {
        cp_async_wait<kStages - 2>();
        // Makes this tile visible to all threads, and tells everyone the
        // slot consumed in the previous iteration may be overwritten.
        __syncthreads();
        {
            const int next = tile + kStages - 1;
            if (next < num_tiles) load_tile(next % kStages, next);
            cp_async_commit();
        }
        const int stage = tile % kStages;
        const int t0 = begin + tile * kTile;

        for (int step = token_lane; step < kTile / kStep; step += token_lanes) {
            // Logits of kStep keys for every slot, reduced over the row's lanes.
            float x[kStep][kSlots];
#pragma unroll
            for (int i = 0; i < kStep; ++i) {
                const int r = step * kStep + i;
                float kf[kVec];
                unpack8<DTypeKV>(lds16(&smem.ring.k[stage][r * kLanes + lane]), kf);
                if constexpr (kRope)
                    rope_rotate(kf, freq, (float)(p.rope_offset + t0 + r), upper);
#pragma unroll
                for (int s = 0; s < kSlots; ++s) {
                    float acc = 0.f;
#pragma unroll
                    for (int e = 0; e < kVec; ++e) acc = fma_(q[s][e], kf[e], acc);
                    x[i][s] = acc;
                }
            }
#pragma unroll
            for (int off = kLanes / 2; off >= 1; off /= 2)
#pragma unroll
                for (int i = 0; i < kStep; ++i)
#pragma unroll
                    for (int s = 0; s < kSlots; ++s) x[i][s] += shfl_xor(x[i][s], off);

            // Final logits in log2 units; hidden keys become -inf.
#pragma unroll
            for (int i = 0; i < kStep; ++i) {
                const int j = t0 + step * kStep + i;
#pragma unroll
                for (int s = 0; s < kSlots; ++s) {
                    const bool visible = j < end && Variant::logits_mask(p, head[s], j, qo_idx);
                    x[i][s] = visible
                                  ? Variant::logits_transform(p, x[i][s], head[s], j, qo_idx) * kLog2e
                                  : -inf_();
                }
            }

            // Online softmax update. A state that has seen only hidden keys
            // keeps m = -inf; `base` avoids exp2(-inf - -inf).
            float pr[kStep][kSlots];
#pragma unroll
            for (int s = 0; s < kSlots; ++s) {
                float mx = st.m[s];
#pragma unroll
                for (int i = 0; i < kStep; ++i) mx = fmax_(mx, x[i][s]);
                const float base = mx == -inf_() ? 0.f : mx;
                const float scale = exp2_fast(st.m[s] - base);
                st.m[s] = mx;
                float sum = 0.f;
#pragma unroll
                for (int i = 0; i < kStep; ++i) {
                    pr[i][s] = exp2_fast(x[i][s] - base);
                    sum += pr[i][s];
                }
                st.d[s] = fma_(st.d[s], scale, sum);
#pragma unroll
                for (int e = 0; e < kVec; ++e) st.o[s][e] *= scale;
            }

#pragma unroll
            for (int i = 0; i < kStep; ++i) {
                const int r = step * kStep + i;
                float vf[kVec];
                unpack8<DTypeKV>(lds16(&smem.ring.v[stage][r * kLanes + lane]), vf);
#pragma unroll
                for (int s = 0; s < kSlots; ++s)
#pragma unroll
                    for (int e = 0; e < kVec; ++e) st.o[s][e] = fma_(pr[i][s], vf[e], st.o[s][e]);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is now free for the merge scratch

    // Merge the token lanes that share a head chunk into token lane 0.
    if (token_lanes > 1) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) smem.merge.o[row][s][lane * kVec + e] = st.o[s][e];
            if (lane == 0) {
                smem.merge.m[row][s] = st.m[s];
                smem.merge.d[row][s] = st.d[s];
            }
        }
        __syncthreads();
        if (token_lane == 0) {
#pragma unroll
            for (int s = 0; s < kSlots; ++s) {
                float mx = st.m[s];
                for (int l = 1; l < token_lanes; ++l)
                    mx = fmax_(mx, smem.merge.m[l * p.head_chunks + chunk][s]);
                const float base = mx == -inf_() ? 0.f : mx;
                const float own = exp2_fast(st.m[s] - base);
                st.d[s] *= own;
#pragma unroll
                for (int e = 0; e < kVec; ++e) st.o[s][e] *= own;
                for (int l = 1; l < token_lanes; ++l) {
                    const int r = l * p.head_chunks + chunk;
                    const float w = exp2_fast(smem.merge.m[r][s] - base);
                    st.d[s] = fma_(smem.merge.d[r][s], w, st.d[s]);
#pragma unroll
                    for (int e = 0; e < kVec; ++e)
                        st.o[s][e] = fma_(smem.merge.o[r][s][lane * kVec + e], w, st.o[s][e]);
                }
                st.m[s] = mx;
            }
        }
    }
    if (token_lane != 0) return;

#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        if (!active[s]) continue;
        // d == 0: no visible key (kv_len 0, or all masked): output 0, lse -inf.
        const float inv = st.d[s] > 0.f ? rcp_fast(st.d[s]) : 0.f;
        const float lse2 = st.d[s] > 0.f ? st.m[s] + log2_fast(st.d[s]) : -inf_();
        if (p.num_splits == 1) {
            float out[kVec];
#pragma unroll
            for (int e = 0; e < kVec; ++e)
                out[e] = Variant::output_transform(p, st.o[s][e] * inv, head[s], lane * kVec + e);
            stg16(static_cast<DTypeO *>(p.o) + head[s] * p.o_stride_h + lane * kVec,
                  pack8<DTypeO>(out));
            if (p.lse != nullptr && lane == 0) p.lse[head[s]] = lse2 * kLn2;
        } else {
            const long long idx = (long long)split * p.num_qo_heads + head[s];
            float *dst = p.partial_o + idx * kHeadDim + lane * kVec;
            vec16_t a, b;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                a.w[e] = float_to_bits(st.o[s][e] * inv);
                b.w[e] = float_to_bits(st.o[s][e + 4] * inv);
            }
            stg16(dst, a);
            stg16(dst + 4, b);
            if (lane == 0) p.partial_lse[idx] = lse2;
        }
    }
}

// Combine the splits of each query head: with l_s the base-2 lse of split s
// and o_s its normalised output, o = sum_s 2^(l_s - L) o_s with
// L = log2 sum_s 2^l_s. Splits with no visible key (l_s = -inf) weigh 0.
extern "C" __global__ void __launch_bounds__(FI_MERGE_THREADS)
    fi_decode_merge_kernel(const fi_merge_params mp)
{
    using namespace fijit;
    using namespace fijit::decode;
    constexpr int kMLanes = kHeadDim / 4;  // four floats per thread
    constexpr int kMRows = FI_MERGE_THREADS / kMLanes;
    static_assert(FI_MERGE_THREADS % kMLanes == 0, "merge block must hold whole rows");

    const fi_decode_params &p = mp.dec;
    __shared__ float so[kMRows][kHeadDim];
    __shared__ float sm[kMRows], sd[kMRows];

    const int head = blockIdx.x;
    const int lane = threadIdx.x % kMLanes;
    const int row = threadIdx.x / kMLanes;

    // Splits are read kUnroll at a time with every load issued before any
    // result is used: a loop of dependent L2 round trips (load lse, test,
    // load o) would cost ~0.3 us per split, more than the data.
    constexpr int kUnroll = 4;
    float m = -inf_(), d = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s0 = row; s0 < p.num_splits; s0 += kMRows * kUnroll) {
        float l[kUnroll];
        vec16_t v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int s = s0 + u * kMRows;
            const long long idx = (long long)(s < p.num_splits ? s : s0) * p.num_qo_heads + head;
            // Every split wrote both, an empty one o = 0 and lse = -inf.
            l[u] = s < p.num_splits ? p.partial_lse[idx] : -inf_();
            v[u] = ldg16(p.partial_o + idx * kHeadDim + lane * 4);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (l[u] == -inf_()) continue;
            const float mx = fmax_(m, l[u]);
            const float scale = exp2_fast(m - mx);
            const float w = exp2_fast(l[u] - mx);
            d = fma_(d, scale, w);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[e] = fma_(acc[e], scale, w * bits_to_float(v[u].w[e]));
            m = mx;
        }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) so[row][lane * 4 + e] = acc[e];
    if (lane == 0) {
        sm[row] = m;
        sd[row] = d;
    }
    __syncthreads();
    if (row != 0) return;

    float mx = -inf_();
    for (int r = 0; r < kMRows; ++r) mx = fmax_(mx, sm[r]);
    const float base = mx == -inf_() ? 0.f : mx;
    float tot = 0.f, out[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < kMRows; ++r) {
        const float w = exp2_fast(sm[r] - base);
        tot = fma_(sd[r], w, tot);
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = fma_(so[r][lane * 4 + e], w, out[e]);
    }
    const float inv = tot > 0.f ? rcp_fast(tot) : 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e)
        out[e] = Variant::output_transform(p, out[e] * inv, head, lane * 4 + e);
    const unsigned int w0 = Traits<DTypeO>::pack2(out[0], out[1]);
    const unsigned int w1 = Traits<DTypeO>::pack2(out[2], out[3]);
    DTypeO *dst = static_cast<DTypeO *>(p.o) + head * p.o_stride_h + lane * 4;
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(w0), "r"(w1) : "memory");
    if (p.lse != nullptr && lane == 0)
        p.lse[head] = tot > 0.f ? (mx + log2_fast(tot)) * kLn2 : -inf_();
}
