// Batch decode over a paged KV cache: one query token per head for each of
// `batch` requests, each with its own length and pages. The host plan
// (src/launch/batch_decode.c) turns the batch into a list of work items (request,
// range of keys) that fills the GPU; blockIdx.x is the item, blockIdx.y the
// kv head (and head block of a large GQA group). A request cut into several
// items is merged by the last of its blocks to finish, in this same launch.
// The tile loop is decode/tile_loop.cuh's, with PagedKV as the key source.
//
// Second entry: fi_merge_states_kernel, the standalone merge of N attention
// states (o, lse) per row that cascade inference needs.
// Params: decode/params.h (fi_batch_decode_params, fi_merge_states_params).
#pragma once

#include "decode/split_merge.cuh"
#include "decode/tile_loop.cuh"

extern "C" __global__ void __launch_bounds__(FI_DECODE_THREADS)
    fi_batch_decode_kernel(const fi_batch_decode_params p)
{
    using namespace fijit;
    using namespace fijit::decode;

    SharedStorage &smem = shared_storage();

    const fi_batch_decode_work w = p.work[blockIdx.x];
    const Place pl = make_place(blockIdx.y, p.group_size, p.head_chunks, p.heads_per_block,
                                p.head_blocks);

    Job job;
    job.begin = w.kv_begin;
    job.end = w.kv_end;
    job.qo_idx = w.kv_len - 1;
    job.pos_offset = p.rope_offsets != nullptr ? p.rope_offsets[w.request] : 0;
    job.q = static_cast<const DTypeQ *>(p.q) + w.request * p.q_stride_b;
    job.q_stride_h = p.q_stride_h;
    job.k_scale = p.k_scale;
    job.stages = p.stages;

    PagedKV kv;
    kv.k = static_cast<const unsigned char *>(p.k) + pl.kv_head * p.k_stride_h * kKVBytes;
    kv.v = static_cast<const unsigned char *>(p.v) + pl.kv_head * p.v_stride_h * kKVBytes;
    kv.pages = p.kv_indices + w.page_start;
    kv.k_stride_page = (int)(p.k_stride_page * kKVBytes);
    kv.v_stride_page = (int)(p.v_stride_page * kKVBytes);
    kv.k_stride_n = (int)(p.k_stride_n * kKVBytes);
    kv.v_stride_n = (int)(p.v_stride_n * kKVBytes);
    kv.page_size = p.page_size;
    kv.page_shift = p.page_shift;

    State st;
    attend(p, kv, smem, job, pl, st);

    Out out;
    out.o = static_cast<DTypeO *>(p.o) + w.request * p.o_stride_b;
    out.o_stride_h = p.o_stride_h;
    out.lse = p.lse != nullptr ? p.lse + (long long)w.request * p.num_qo_heads : nullptr;
    out.v_scale = kFp8 ? p.v_scale : 1.0f;
    if (w.num_splits == 1) {
        store_final(p, st, pl, out);
        return;
    }
    Splits sp;
    sp.partial_o = p.partial_o;
    sp.partial_lse = p.partial_lse;
    sp.num_qo_heads = p.num_qo_heads;
    sp.first_item = w.first_item;
    sp.split = w.split;
    sp.num_splits = w.num_splits;
    sp.counter = p.counters + (long long)w.request * gridDim.y + blockIdx.y;
    sp.epoch = p.epoch;
    store_split(p, st, pl, out, sp, smem);
}

// Merge states: for row (position i, head h), with s_n the natural-log lse of
// state n and v_n its normalised output, v = sum_n e^(s_n - S) v_n and
// S = log sum_n e^(s_n). States with s_n = -inf weigh 0; a row with none gets
// v = 0 and S = -inf. Rows of states are spread over the block's threads
// (kMRows states at once, kHeadDim / 4 threads per state), then combined.
extern "C" __global__ void __launch_bounds__(FI_MERGE_THREADS)
    fi_merge_states_kernel(const fi_merge_states_params p)
{
    using namespace fijit;
    using DTypeO = fijit_cfg::DTypeO;
    constexpr int kHeadDim = fijit_cfg::kHeadDim;
    constexpr int kMLanes = kHeadDim / 4;
    constexpr int kMRows = FI_MERGE_THREADS / kMLanes;
    static_assert(FI_MERGE_THREADS % kMLanes == 0, "merge block must hold whole rows");
    __shared__ float so[kMRows][kHeadDim];
    __shared__ float sm[kMRows], sd[kMRows];

    const int pos = blockIdx.x / p.num_heads;
    const int head = blockIdx.x % p.num_heads;
    const int lane = threadIdx.x % kMLanes;
    const int row = threadIdx.x / kMLanes;
    const DTypeO *v = static_cast<const DTypeO *>(p.v) + pos * p.v_stride_seq + head * p.v_stride_h;
    const float *s = p.s + pos * p.s_stride_seq + head;

    float m = -inf_(), d = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int n = row; n < p.num_states; n += kMRows) {
        const float l = s[n * p.s_stride_state] * kLog2e;
        unsigned int w[2];
        asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];"
                     : "=r"(w[0]), "=r"(w[1])
                     : "l"(v + n * p.v_stride_state + lane * 4));
        if (l == -inf_()) continue;
        float x[4];
        Traits<DTypeO>::unpack2(w[0], x[0], x[1]);
        Traits<DTypeO>::unpack2(w[1], x[2], x[3]);
        const float mx = fmax_(m, l);
        const float scale = exp2_fast(m - mx);
        const float wt = exp2_fast(l - mx);
        d = fma_(d, scale, wt);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] = fma_(acc[e], scale, wt * x[e]);
        m = mx;
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
        const float wt = exp2_fast(sm[r] - base);
        tot = fma_(sd[r], wt, tot);
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = fma_(so[r][lane * 4 + e], wt, out[e]);
    }
    const float inv = tot > 0.f ? rcp_fast(tot) : 0.f;
    const unsigned int w0 = Traits<DTypeO>::pack2(out[0] * inv, out[1] * inv);
    const unsigned int w1 = Traits<DTypeO>::pack2(out[2] * inv, out[3] * inv);
    DTypeO *dst = static_cast<DTypeO *>(p.v_out) + pos * p.o_stride_seq + head * p.o_stride_h +
                  lane * 4;
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(w0), "r"(w1) : "memory");
    if (p.s_out != nullptr && lane == 0)
        p.s_out[pos * p.num_heads + head] = tot > 0.f ? (base + log2_fast(tot)) * kLn2 : -inf_();
}
