// Decode's results: the final output of a block (store_final), or its
// partial state and, in the last block of a request's splits to finish, the
// merge of all splits (store_split; the counter scheme is in decode/params.h).
#pragma once

#include "decode/common.cuh"

namespace fijit {
namespace decode {

// Global loads through L2 only: partial states written by other blocks of
// the same launch must not come from a (non-coherent) L1 line.
__device__ __forceinline__ vec16_t ldcg16(const void *p)
{
    vec16_t v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p));
    return v;
}

__device__ __forceinline__ float ldcg_f32(const float *p)
{
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

__device__ __forceinline__ unsigned long long atom_cas64(unsigned long long *p,
                                                         unsigned long long cmp,
                                                         unsigned long long val)
{
    unsigned long long old;
    asm volatile("atom.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(old)
                 : "l"(p), "l"(cmp), "l"(val)
                 : "memory");
    return old;
}

__device__ __forceinline__ unsigned long long atom_add64(unsigned long long *p,
                                                         unsigned long long val)
{
    unsigned long long old;
    asm volatile("atom.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(val) : "memory");
    return old;
}

__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_relaxed64(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Where a block's results go.
struct Out {
    DTypeO *o;           // the request's o, head 0
    long long o_stride_h;
    float *lse;          // NULL or the request's lse, head 0 (natural log)
    float v_scale;       // fp8: applied to the normalised output
};

// What multiplies a state's o to give its output: 1/d with softmax (0 when
// no key was visible: o = 0), 1 without.
__device__ __forceinline__ float normaliser(float d)
{
    if constexpr (!kSoftmax) return 1.f;
    return d > 0.f ? rcp_fast(d) : 0.f;
}

// A state's log-sum-exp in base 2: -inf when no key was visible; 0 without
// softmax, so that merging partial states sums them.
__device__ __forceinline__ float lse2(float m, float d)
{
    if constexpr (!kSoftmax) return 0.f;
    return d > 0.f ? m + log2_fast(d) : -inf_();
}

// Store the final output of the heads in `st` (threads of token lane 0).
template <class P>
__device__ __forceinline__ void store_final(const P &p, const State &st, const Place &pl,
                                            const Out &out)
{
    if (pl.token_lane != 0) return;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        if (!pl.active[s]) continue;
        const float inv = normaliser(st.d[s]) * out.v_scale;
        const float lse = lse2(st.m[s], st.d[s]) * kLn2;
        float res[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e)
            res[e] = Variant::output_transform(p, st.o[s][e] * inv, pl.head[s], pl.lane * kVec + e,
                                               lse);
        stg16(out.o + pl.head[s] * out.o_stride_h + pl.lane * kVec, pack8<DTypeO>(res));
        if (out.lse != nullptr && pl.lane == 0) out.lse[pl.head[s]] = lse;
    }
}

// Split of a (request, kv head block): where its partial states live.
struct Splits {
    float *partial_o;      // [item, num_qo_heads, hd]
    float *partial_lse;    // [item, num_qo_heads], base 2
    int num_qo_heads;
    int first_item;        // item of split 0; split s is item first_item + s
    int split, num_splits;
    unsigned long long *counter;
    unsigned epoch;
};

// Write this block's partial states, count it done, and if it is the last
// split of its (request, kv head block) to finish, merge all splits into the
// final output. Every thread of the block must call this.
template <class P>
__device__ __forceinline__ void store_split(const P &p, const State &st, const Place &pl,
                                            const Out &out, const Splits &sp, SharedStorage &smem)
{
    // The counter as it stands, read while the partials are written (its
    // latency hides behind theirs). With epoch 0 the word is known: a count.
    const unsigned long long seen = sp.epoch != 0 && pl.tid == 0 ? ld_relaxed64(sp.counter) : 0;
    if (pl.token_lane == 0) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            if (!pl.active[s]) continue;
            const float inv = normaliser(st.d[s]) * out.v_scale;
            const long long idx = (long long)(sp.first_item + sp.split) * sp.num_qo_heads + pl.head[s];
            float *dst = sp.partial_o + idx * kHeadDim + pl.lane * kVec;
            vec16_t a, b;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                a.w[e] = float_to_bits(st.o[s][e] * inv);
                b.w[e] = float_to_bits(st.o[s][e + 4] * inv);
            }
            stg16(dst, a);
            stg16(dst + 4, b);
            if (pl.lane == 0) sp.partial_lse[idx] = lse2(st.m[s], st.d[s]);
        }
    }
    // Thread 0 publishes for the block (as CUTLASS's semaphores do): the
    // barrier orders every thread's partials before its release fence, whose
    // cumulativity carries them; the last block's thread 0 acquires the other
    // blocks' partials before the barrier that lets its threads read them.
    // One fence a block each way instead of one per thread.
    __syncthreads();
    if (pl.tid == 0) {
        fence_gpu();  // release: the block's partials before its count
        const unsigned long long tag = (unsigned long long)sp.epoch << 32;
        // A stale word (another launch's epoch, or garbage) becomes (epoch,
        // 1) by one compare-and-swap: the block that wins it counted first.
        // A word of this epoch takes an add. A failed swap means another
        // block made the word current (nothing else changes a stale word
        // while this launch runs, and the count cannot complete without us),
        // so the add follows: at most two round trips, however many splits
        // end together. (Adding first and repairing stale words afterwards
        // made every block that met the stale word retry against the rest.)
        unsigned long long count;
        if ((seen >> 32) != sp.epoch && atom_cas64(sp.counter, seen, tag | 1ull) == seen)
            count = 1;
        else
            count = (atom_add64(sp.counter, 1ull) & 0xffffffffull) + 1;
        const bool last = count == (unsigned long long)sp.num_splits;
        if (last) {
            st_relaxed64(sp.counter, tag);  // ready for the next launch (or graph replay)
            fence_gpu();                    // acquire: the other blocks' partials
        }
        smem.is_last = last;
    }
    __syncthreads();
    if (!smem.is_last) return;

    // Merge. kMLanes threads (four floats each) cover a head's row; the
    // kMRows groups of them are spread over the block's heads and, when there
    // are fewer heads than groups, over the splits too (`sub` groups per head,
    // combined through shared memory). kUnroll splits' loads are in flight
    // before any is used: a chain of dependent L2 round trips would cost
    // ~0.5 us per split. 16 rather than 8 halves the rounds of a 32-split
    // merge, the last thing a long request's launch waits for (H100, batch
    // 1 x kv 16k / 32k GQA 32/8: 34.8 -> 34.4, 58.9 -> 57.5 us); it raises
    // the 16-bit kernels to 128 registers (no spills): still four blocks per SM.
    constexpr int kMLanes = kHeadDim / 4;
    constexpr int kMRows = kThreads / kMLanes;
    constexpr int kUnroll = 16;
    int sub = 1;
    while (sub * 2 <= kMRows && sub * 2 * pl.block_heads <= kMRows) sub *= 2;
    const int heads_at_once = kMRows / sub;
    const int lane = pl.tid % kMLanes;
    const int group = pl.tid / kMLanes;
    const int slot = group / sub, subrow = group % sub;
    const int qo_base = pl.kv_head * p.group_size;
    float *scratch = &smem.split_merge[0][0];
    for (int base = 0; base < pl.block_heads; base += heads_at_once) {
        const int i = base + slot;
        const bool valid = i < pl.block_heads;
        const int head = qo_base + pl.block_first + (valid ? i : 0);
        float m = -inf_(), d = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int s0 = subrow; valid && s0 < sp.num_splits; s0 += sub * kUnroll) {
            float l[kUnroll];
            vec16_t v[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int s = s0 + u * sub;
                const long long idx =
                    (long long)(sp.first_item + (s < sp.num_splits ? s : s0)) * sp.num_qo_heads + head;
                l[u] = s < sp.num_splits ? ldcg_f32(sp.partial_lse + idx) : -inf_();
                v[u] = ldcg16(sp.partial_o + idx * kHeadDim + lane * 4);
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
        if (sub > 1) {
            __syncthreads();  // the previous round's (or is_last's) readers are done
            float *mine = scratch + pl.tid * 6;
            mine[0] = m;
            mine[1] = d;
#pragma unroll
            for (int e = 0; e < 4; ++e) mine[2 + e] = acc[e];
            __syncthreads();
            if (subrow == 0) {
                for (int r = 1; r < sub; ++r) {
                    const float *o = scratch + (pl.tid + r * kMLanes) * 6;
                    if (o[0] == -inf_()) continue;
                    const float mx = fmax_(m, o[0]);
                    const float a = exp2_fast(m - mx), b = exp2_fast(o[0] - mx);
                    d = d * a + o[1] * b;
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[e] = acc[e] * a + o[2 + e] * b;
                    m = mx;
                }
            }
        }
        if (!valid || subrow != 0) continue;
        const float inv = normaliser(d);
        const float lse = lse2(m, d) * kLn2;
        float res[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) res[e] = Variant::output_transform(p, acc[e] * inv, head, lane * 4 + e, lse);
        const unsigned int w0 = Traits<DTypeO>::pack2(res[0], res[1]);
        const unsigned int w1 = Traits<DTypeO>::pack2(res[2], res[3]);
        DTypeO *dst = out.o + head * out.o_stride_h + lane * 4;
        asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(w0), "r"(w1) : "memory");
        if (out.lse != nullptr && lane == 0) out.lse[head] = lse;
    }
}

}  // namespace decode
}  // namespace fijit
