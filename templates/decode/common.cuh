// The decode tile loop shared by single decode (decode.cuh) and batch decode
// over a paged KV cache (batch_decode.cuh): one query token per head against
// a range of keys, with GQA, RoPE/ALiBi, soft-cap, sliding window, fp8 KV and
// the split-KV merge. The two kernels differ only in how a block finds its
// work (a split of one request, or an item of the host's plan) and where key
// j of a head lives (dense strides, or a page table): the latter is a small
// "KV source" class with prefetch()/issue(), so the loop below is compiled
// once per kernel with no run-time branching on the layout.
//
// Organised around memory, as decode reads every K/V byte once:
//  * One block = one KV head (all query heads of its GQA group, or a slice of
//    a very large group) x one contiguous range of keys.
//  * K/V tiles stream into shared memory with cp.async through a ring of
//    Job::stages tiles in dynamic shared memory, its depth chosen by the host
//    per launch (a small grid takes a deeper one). Tiles are raw bytes:
//    16-byte copies carry 8 fp16/bf16 or 16 fp8 values. The products run on
//    tensor cores (attend: ldmatrix + mma.sync, the heads of the block as mma
//    columns); a K tile that RoPE must rotate, and an fp8 tile, is first
//    rewritten as a 16-bit tile in a staging area after the ring.
//  * Softmax is online in fp32 in the exp2 domain; row groups of a block are
//    merged through shared memory; split ranges of one (request, kv head) are
//    merged by the last of their blocks to finish (see decode/params.h), so a
//    split launch needs no second kernel.
//  * fp8 scales cost nothing per element: k_scale multiplies q once, v_scale
//    the normalised output once.
//
// Requires sm_80+ (cp.async, bf16 conversions); fp8 KV uses sm_89's cvt when
// compiled for it.
//
// The parts, one file each: decode/common.cuh (this file: types, tiling,
// shared memory, a block's place and job), decode/kv_source.cuh (where key j
// lives, the cp.async ring), decode/staging.cuh (fp8 and RoPE tiles
// rewritten for ldmatrix), decode/tile_loop.cuh (the products and the online
// softmax), decode/split_merge.cuh (the final and split stores, the merge).
#pragma once

#include "common/mma_sm80.cuh"
#include "decode/params.h"

namespace fijit {
namespace decode {

using DTypeQ = fijit_cfg::DTypeQ;
using DTypeKV = fijit_cfg::DTypeKV;
using DTypeO = fijit_cfg::DTypeO;
using Variant = fijit_cfg::Variant;

constexpr int kHeadDim = fijit_cfg::kHeadDim;
constexpr int kVec = FI_DECODE_VEC;  // elements of a row each lane owns
constexpr int kThreads = FI_DECODE_THREADS;
constexpr int kLanes = kHeadDim / kVec;  // threads that hold one row of the output
constexpr int kSlots = FI_DECODE_HEADS_PER_THREAD;  // query heads per thread
constexpr int kTile = FI_DECODE_TILE_TOKENS(kHeadDim);
constexpr int kKVBytes = Traits<DTypeKV>::kBytes;
constexpr bool kFp8 = kKVBytes == 1;
constexpr int kMaxStages = FI_DECODE_MAX_STAGES;  // sizes the ring's type only
constexpr int kRowBytes = kHeadDim * kKVBytes;
constexpr int kChunksPerRow = kRowBytes / 16;      // 16-byte copies per row
constexpr int kTileChunks = kTile * kChunksPerRow;
constexpr int kLoadsPerThread = kTileChunks / kThreads;

static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
              "decode supports head_dim 64, 128 and 256");
static_assert(kLanes <= 32 && 32 % kLanes == 0, "a row group must lie within one warp");
static_assert(kTileChunks % kThreads == 0, "every thread issues the same number of copies");
static_assert(Traits<DTypeQ>::kBytes == 2 && Traits<DTypeO>::kBytes == 2,
              "decode expects 16-bit q and o (8 elements per 16-byte vector)");
static_assert(kKVBytes == 2 || kKVBytes == 1, "kv must be a 16-bit or an fp8 type");
static_assert(kHeadDim <= FI_DECODE_MAX_HEAD_DIM, "rope_freq table too small");

constexpr bool kRope = fijit_cfg::kPos == fijit_cfg::kPosRopeLlama;

// The products (attend) are transposed, keys being the 16 rows of mma.sync
// tiles and query heads the 8 columns (FI_DECODE_MMA_HEADS; a larger group
// takes several head blocks), so that a GQA group wastes no rows: s^T =
// K q^T, o^T += V^T p^T. A tile's keys are split among the warps in 16-key
// slices, the output dims among the rest (64 dims a warp), and K/V are read
// with ldmatrix: a key costs a few instructions per warp instead of a
// shuffle tree and a conversion per element. 16-bit tiles are read from the
// ring itself. fp8 tiles are first widened to q's type (exact: fp16 and bf16
// hold every e4m3 and e5m2 value), and with RoPE the K tile is rotated (in
// fp32, rounded once to the 16-bit type, as prefill does), into a staging
// area after the ring (FI_DECODE_STAGING_BYTES), each element converted once
// by one thread; the products then run in q's type.
constexpr bool kStagedK = kFp8 || kRope;  // K is read from the staging area
constexpr bool kStagedV = kFp8;           // V too
using DTypeMma = typename Pick<kFp8, DTypeQ, DTypeKV>::type;  // the mma's input type
constexpr int kMmaRowChunks = kHeadDim * 2 / 16;  // 16-byte chunks of a 16-bit row
constexpr bool kSwizzledRing = !kFp8;            // ldmatrix may read the ring itself
constexpr int kWarps = kThreads / 32;
constexpr int kMmaHeads = FI_DECODE_MMA_HEADS;
constexpr int kTokW = kTile / kWarps >= 16 ? kTile / kWarps : 16;  // keys per warp per tile
constexpr int kTG = kTile / kTokW;         // warps along the keys of a tile
constexpr int kDG = kWarps / kTG;          // warps along the output dims
constexpr int kKSteps = kHeadDim / 16;     // k-steps of q.k
constexpr int kMT = kHeadDim / kDG / 16;   // 16-dim m-tiles of a warp's output
constexpr int kMmaPad = 4;                 // floats of padding per merge row (banks)
static_assert(kMmaHeads == 8 && kMmaHeads % kSlots == 0, "a block's mma heads: one column tile");
static_assert(kTG * kDG == kWarps && kTokW == 16 && kMT >= 1, "mma decode tiling");
static_assert(kMmaRowChunks >= 8, "the mma tile swizzle needs 8 chunks per row");

// Where 16-byte chunk `ch` of row `r` of a 16-bit tile that ldmatrix reads
// lives: chunks are swizzled within each group of 8 rows so that ldmatrix's
// eight row reads hit distinct banks.
__device__ __forceinline__ int mma_index(int r, int ch)
{
    return r * kMmaRowChunks + (ch ^ (r & 7));
}

// Where 16-byte chunk `ch` of row `r` of a K/V tile lives in the ring.
__device__ __forceinline__ int ring_index(int r, int ch)
{
    return kSwizzledRing ? mma_index(r, ch) : r * kChunksPerRow + ch;
}
// Without softmax (a variant's choice) the state's m stays 0 and the weights
// are the transformed logits themselves; every merge below then reduces to a
// sum, because all its exp2(m - max) factors are 1.
constexpr bool kSoftmax = Variant::use_softmax;

// The K/V ring while streaming (stage s: K tile, then V tile; only the
// launch's Job::stages stages are allocated, FI_DECODE_SMEM_BYTES); the
// warps' merge afterwards, then the split merge's scratch; one flag at the
// end. Dynamic shared memory (fi_decode_smem below), so the ring may exceed
// the 48 KiB of static shared memory.
union SharedStorage {
    struct {
        vec16_t kv[kMaxStages][2][kTileChunks];
    } ring;
    struct {
        float o[kMmaHeads][kHeadDim + kMmaPad];
        float m[kWarps][kMmaHeads];
        float d[kWarps][kMmaHeads];
    } mma;
    float split_merge[kThreads][6];  // store_split: m, d, acc[4] of each thread
    int is_last;  // after both: "this block merges the splits" (store_split)
};
// What follows the ring must fit the smallest ring a launch allocates (two
// stages), the only shared memory FI_DECODE_SMEM_BYTES is sure to cover.
static_assert(sizeof(SharedStorage::mma) <= 2 * 2 * kTileChunks * 16 &&
                  sizeof(SharedStorage::split_merge) <= 2 * 2 * kTileChunks * 16,
              "the merges fit a two-stage ring");

// The block's dynamic shared memory (the kernels' only shared memory).
__device__ __forceinline__ SharedStorage &shared_storage()
{
    extern __shared__ __align__(16) unsigned char fi_decode_smem[];
    return *reinterpret_cast<SharedStorage *>(fi_decode_smem);
}

// A thread's share of the block's attention state as attend hands it over:
// for its kSlots heads, the running max (log2 units), the sum and its kVec
// elements of the unnormalised output (the layout the stores use).
struct State {
    float m[kSlots];
    float d[kSlots];
    float o[kSlots][kVec];
};

// Where this thread sits in its block: which elements (lane), row group and
// heads. Row groups beyond the block's heads hold copies; only token lane 0
// of each head chunk stores.
struct Place {
    int tid, lane, row;
    int chunk;        // which kSlots heads of the block
    int token_lane;   // which copy of its head chunk this row group is
    int kv_head;
    int block_first;  // first head (within the group) this block serves
    int block_heads;  // heads this block serves
    int block_qo;     // query head (within the request) of the block's first head
    int group_last;   // query head (within the request) of the group's last head
    int head[kSlots]; // query head (within the request) of each slot
    bool active[kSlots];
};

// `yblock` is blockIdx.y = kv_head * head_blocks + head_block.
__device__ __forceinline__ Place make_place(int yblock, int group_size, int head_chunks,
                                            int heads_per_block, int head_blocks)
{
    Place pl;
    pl.tid = threadIdx.x;
    pl.lane = pl.tid % kLanes;
    pl.row = pl.tid / kLanes;
    pl.chunk = pl.row & (head_chunks - 1);
    pl.token_lane = pl.row / head_chunks;
    pl.kv_head = yblock / head_blocks;
    pl.block_first = (yblock % head_blocks) * heads_per_block;
    const int left = group_size - pl.block_first;
    pl.block_heads = left < heads_per_block ? left : heads_per_block;
    const int first = pl.block_first + pl.chunk * kSlots;
    const int qo_base = pl.kv_head * group_size;
    pl.block_qo = qo_base + pl.block_first;
    pl.group_last = qo_base + group_size - 1;
    // Idle slots (the group is smaller than the block's heads) compute on a
    // copy of the group's last head and store nothing.
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
        pl.active[s] = first + s < group_size;
        pl.head[s] = pl.active[s] ? qo_base + first + s : pl.group_last;
    }
    return pl;
}

// What one block computes: keys [begin, end) of one request.
struct Job {
    int begin, end;
    int qo_idx;          // the query's index on the key axis: kv_len - 1
    int pos_offset;      // RoPE position of key 0
    const DTypeQ *q;     // the request's q, head 0
    long long q_stride_h;
    float k_scale;       // fp8: folded into q
    int stages;          // ring depth, 2..kMaxStages
};

}  // namespace decode
}  // namespace fijit
