// Single-request decode attention: one query token per head against kv_len
// keys in dense K/V tensors (any strides), with GQA, RoPE/ALiBi, soft-cap,
// sliding window, fp8 KV and split-KV. The tile loop and the split merge are
// shared with batch decode (decode/common.cuh lists the parts); this file only maps a block to
// its work: blockIdx.x is the split (a contiguous chunk of keys), blockIdx.y
// the kv head (and head block of a large GQA group). With more than one split
// the last block of each kv head to finish merges the splits (no second
// kernel). Params: decode/params.h (fi_decode_params).
#pragma once

#include "decode/split_merge.cuh"
#include "decode/tile_loop.cuh"

extern "C" __global__ void __launch_bounds__(FI_DECODE_THREADS)
    fi_decode_kernel(const fi_decode_params p)
{
    using namespace fijit;
    using namespace fijit::decode;

    SharedStorage &smem = shared_storage();

    const Place pl = make_place(blockIdx.y, p.group_size, p.head_chunks, p.heads_per_block,
                                p.head_blocks);
    const int split = blockIdx.x;

    Job job;
    job.begin = p.kv_begin + split * p.kv_chunk;
    job.end = job.begin + p.kv_chunk < p.kv_len ? job.begin + p.kv_chunk : p.kv_len;
    job.qo_idx = p.kv_len - 1;
    job.pos_offset = p.rope_offset;
    job.q = static_cast<const DTypeQ *>(p.q);
    job.q_stride_h = p.q_stride_h;
    job.k_scale = p.k_scale;
    job.stages = p.stages;

    DenseKV kv;
    kv.k = static_cast<const unsigned char *>(p.k) + pl.kv_head * p.k_stride_h * kKVBytes;
    kv.v = static_cast<const unsigned char *>(p.v) + pl.kv_head * p.v_stride_h * kKVBytes;
    kv.k_stride_n = (int)(p.k_stride_n * kKVBytes);
    kv.v_stride_n = (int)(p.v_stride_n * kKVBytes);

    State st;
    attend(p, kv, smem, job, pl, st);

    Out out;
    out.o = static_cast<DTypeO *>(p.o);
    out.o_stride_h = p.o_stride_h;
    out.lse = p.lse;
    out.v_scale = kFp8 ? p.v_scale : 1.0f;
    if (p.num_splits == 1) {
        store_final(p, st, pl, out);
        return;
    }
    Splits sp;
    sp.partial_o = p.partial_o;
    sp.partial_lse = p.partial_lse;
    sp.num_qo_heads = p.num_qo_heads;
    sp.first_item = 0;
    sp.split = split;
    sp.num_splits = p.num_splits;
    sp.counter = p.counters + blockIdx.y;
    sp.epoch = p.epoch;
    store_split(p, st, pl, out, sp, smem);
}
