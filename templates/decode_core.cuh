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
//    merged by the last of their blocks to finish (see fijit_params.h), so a
//    split launch needs no second kernel.
//  * fp8 scales cost nothing per element: k_scale multiplies q once, v_scale
//    the normalised output once.
//
// Requires sm_80+ (cp.async, bf16 conversions); fp8 KV uses sm_89's cvt when
// compiled for it.
#pragma once

#include "fijit_mma.cuh"

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

// Wait until at most n committed cp.async groups are in flight (n: the ring's
// depth - 2, known only at run time; wait_group takes an immediate).
__device__ __forceinline__ void cp_async_wait_upto(int n)
{
    static_assert(kMaxStages - 2 <= 4, "cp_async_wait_upto covers n <= 4");
    if (n <= 0) cp_async_wait<0>();
    else if (n == 1) cp_async_wait<1>();
    else if (n == 2) cp_async_wait<2>();
    else if (n == 3) cp_async_wait<3>();
    else cp_async_wait<4>();
}

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

__device__ __forceinline__ int ldg_s32(const int *p)
{
    int v;
    asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(p));
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

// Where copy i of a tile (i < kLoadsPerThread) goes: row (key) and 16-byte
// chunk of the row, the same for every tile.
__device__ __forceinline__ int copy_row(int i, int tid)
{
    return (i * kThreads + tid) / kChunksPerRow;
}
__device__ __forceinline__ int copy_chunk(int i, int tid)
{
    return (i * kThreads + tid) % kChunksPerRow;
}

// Both K/V sources copy a tile with kLoadsPerThread 16-byte cp.async per
// thread into K and into V, addressed with 32-bit strides in bytes (the host
// refuses larger ones) so that each source address costs one wide multiply.
// Copies past the end of the range zero-fill their chunk.

// Dense K/V: key j of this head at base + j * stride (bytes).
struct DenseKV {
    const unsigned char *k, *v;
    int k_stride_n, v_stride_n;  // bytes

    __device__ __forceinline__ void start(SharedStorage &, int, int, int) {}
    __device__ __forceinline__ void prefetch_first(int, int) {}
    __device__ __forceinline__ void prefetch(int, int) {}
    __device__ __forceinline__ void issue(vec16_t *kdst, vec16_t *vdst, int t0, int end,
                                          int tid) const
    {
        const unsigned int ks = smem_addr(kdst), vs = smem_addr(vdst);
#pragma unroll
        for (int i = 0; i < kLoadsPerThread; ++i) {
            const int r = copy_row(i, tid), ch = copy_chunk(i, tid);
            const bool valid = t0 + r < end;
            const int j = valid ? t0 + r : 0;
            const unsigned int dst = ring_index(r, ch) * 16;
            cp_async16(ks + dst, k + ((long long)j * k_stride_n + ch * 16), valid);
            cp_async16(vs + dst, v + ((long long)j * v_stride_n + ch * 16), valid);
        }
    }
};

// Paged K/V: key j of the request is token j % page_size of page
// pages[j / page_size]. The page numbers of the ring's first stages - 1
// tiles are loaded together (start: one page-table round trip before the
// first copies, not one per tile) into the ring's last slot, which no copy
// fills before ring_next's first barrier; later tiles' are loaded one tile
// ahead (prefetch), so that their latency hides behind a tile's compute
// instead of stalling the copies that need them. Both record, per copy, the
// page and the token within it (-1 past the end), so that issue only adds.
struct PagedKV {
    const unsigned char *k, *v;  // this kv head's base
    const int *pages;            // the request's first entry of kv_indices
    int k_stride_page, k_stride_n, v_stride_page, v_stride_n;  // bytes
    int page_size;
    int page_shift;              // log2(page_size) for a power of two, else -1
    int first_page;              // page of key `begin`: first_pages[0]
    const int *first_pages;      // start's page numbers, in the ring's last slot
    int page[kLoadsPerThread];   // the next tile's copies: page number,
    int token[kLoadsPerThread];  // and token within the page (-1: none)

    __device__ __forceinline__ int page_of(int j) const
    {
        return page_shift >= 0 ? j >> page_shift : j / page_size;
    }
    // The pages of keys [begin, min(end, begin + (stages - 1) tiles)): at
    // most one a key plus one, within a tile's kTileChunks * 16 bytes.
    __device__ __forceinline__ void start(SharedStorage &smem, int begin, int end, int stages)
    {
        static_assert((kMaxStages - 1) * kTile + 1 <= kTileChunks * 4, "first pages fit a slot");
        int *dst = reinterpret_cast<int *>(smem.ring.kv[stages - 1][0]);
        const int ahead = begin + (stages - 1) * kTile;
        const int stop = end < ahead ? end : ahead;
        first_page = page_of(begin);
        const int n = stop > begin ? page_of(stop - 1) - first_page + 1 : 0;
        for (int i = threadIdx.x; i < n; i += kThreads) dst[i] = ldg_s32(pages + first_page + i);
        first_pages = dst;
        __syncthreads();
    }
    // Locates the copies of the tile at t0, reading page numbers with `load`
    // (the index into the request's pages).
    template <class Load>
    __device__ __forceinline__ void locate(int t0, int end, Load load)
    {
#pragma unroll
        for (int i = 0; i < kLoadsPerThread; ++i) {
            const int j = t0 + copy_row(i, (int)threadIdx.x);
            const int pg = page_of(j);
            page[i] = j < end ? load(pg) : 0;
            token[i] = j < end ? j - pg * page_size : -1;
        }
    }
    // As prefetch, for a tile within start's range.
    __device__ __forceinline__ void prefetch_first(int t0, int end)
    {
        locate(t0, end, [&](int pg) { return first_pages[pg - first_page]; });
    }
    __device__ __forceinline__ void prefetch(int t0, int end)
    {
        locate(t0, end, [&](int pg) { return ldg_s32(pages + pg); });
    }
    __device__ __forceinline__ void issue(vec16_t *kdst, vec16_t *vdst, int, int, int tid) const
    {
        const unsigned int ks = smem_addr(kdst), vs = smem_addr(vdst);
#pragma unroll
        for (int i = 0; i < kLoadsPerThread; ++i) {
            const int ch = copy_chunk(i, tid);
            const bool valid = token[i] >= 0;
            const int n = valid ? token[i] : 0;
            const unsigned int dst = ring_index(copy_row(i, tid), ch) * 16;
            const long long kofs = (long long)page[i] * k_stride_page + (n * k_stride_n + ch * 16);
            const long long vofs = (long long)page[i] * v_stride_page + (n * v_stride_n + ch * 16);
            cp_async16(ks + dst, k + kofs, valid);
            cp_async16(vs + dst, v + vofs, valid);
        }
    }
};

// The K/V ring: the first stages - 1 tiles of [begin, end) requested.
template <class KV>
__device__ __forceinline__ void ring_start(KV &kv, SharedStorage &smem, const Job &job,
                                           int num_tiles, int tid)
{
    kv.start(smem, job.begin, job.end, job.stages);
    for (int s = 0; s < job.stages - 1; ++s) {
        if (s < num_tiles) {
            const int t0 = job.begin + s * kTile;
            kv.prefetch_first(t0, job.end);
            kv.issue(smem.ring.kv[s][0], smem.ring.kv[s][1], t0, job.end, tid);
        }
        cp_async_commit();  // empty groups keep the wait count uniform
    }
    kv.prefetch(job.begin + (job.stages - 1) * kTile, job.end);
}

// Wait for tile `tile` (in slot `stage` = tile % stages) and request tile +
// stages - 1 (into the slot before `stage`, consumed in the last iteration).
template <class KV>
__device__ __forceinline__ void ring_next(KV &kv, SharedStorage &smem, const Job &job, int tile,
                                          int stage, int num_tiles, int tid)
{
    cp_async_wait_upto(job.stages - 2);
    // Makes this tile visible to all threads, and tells everyone the slot
    // consumed in the previous iteration may be overwritten.
    __syncthreads();
    const int next = tile + job.stages - 1;
    const int slot = stage == 0 ? job.stages - 1 : stage - 1;
    if (next < num_tiles)
        kv.issue(smem.ring.kv[slot][0], smem.ring.kv[slot][1], job.begin + next * kTile, job.end,
                 tid);
    cp_async_commit();
    kv.prefetch(job.begin + (next + 1) * kTile, job.end);
}

__device__ __forceinline__ unsigned int ldg32(const void *p)
{
    unsigned int v;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// Four fp8 values (one word) as two words of DTypeMma pairs.
template <class T = DTypeKV>
__device__ __forceinline__ void widen4(unsigned int w, unsigned int &lo, unsigned int &hi)
{
    Traits<T>::to_half4(w, lo, hi);
    if constexpr (!SameType<DTypeMma, half_t>::value) {
        float f[4];
        Traits<half_t>::unpack2(lo, f[0], f[1]);
        Traits<half_t>::unpack2(hi, f[2], f[3]);
        lo = Traits<DTypeMma>::pack2(f[0], f[1]);
        hi = Traits<DTypeMma>::pack2(f[2], f[3]);
    }
}

// fp8 tile -> 16-bit tile for ldmatrix: ring tile at `src` (raw rows), the
// same keys in DTypeMma at `dst` (mma_index layout). Each thread widens the
// chunks it copied in. (A template so that 16-bit kernels never see it.)
template <class T = DTypeKV>
__device__ __forceinline__ void widen_tile(unsigned int src, unsigned int dst, int tid)
{
#pragma unroll
    for (int i = 0; i < kLoadsPerThread; ++i) {
        const int c = i * kThreads + tid;
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const vec16_t v = lds128(src + c * 16);
        vec16_t lo, hi;
        widen4<T>(v.w[0], lo.w[0], lo.w[1]);
        widen4<T>(v.w[1], lo.w[2], lo.w[3]);
        widen4<T>(v.w[2], hi.w[0], hi.w[1]);
        widen4<T>(v.w[3], hi.w[2], hi.w[3]);
        sts128(dst + mma_index(r, 2 * ch) * 16, lo);
        sts128(dst + mma_index(r, 2 * ch + 1) * 16, hi);
    }
}

// Elements [8 group, 8 group + 8) of row `r` of the ring tile at `src`, as
// fp32 (16-bit ring: swizzled chunks; fp8 ring: raw rows). (A template so
// that the branch not taken is never instantiated.)
template <class T = DTypeKV>
__device__ __forceinline__ void ring_load8(unsigned int src, int r, int group, float (&f)[8])
{
    if constexpr (Traits<T>::kBytes == 1) {
        unsigned int w0, w1;
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];"
                     : "=r"(w0), "=r"(w1)
                     : "r"(src + r * kRowBytes + group * 8));
        float lo[4], hi[4];
        Traits<T>::unpack4(w0, lo);
        Traits<T>::unpack4(w1, hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            f[e] = lo[e];
            f[e + 4] = hi[e];
        }
    } else {
        unpack8<T>(lds128(src + ring_index(r, group) * 16), f);
    }
}

// K tile -> rotated 16-bit tile for ldmatrix (RoPE, rotate-half, key of row
// r at position pos0 + r): element d of the first half pairs with d +
// head_dim / 2. Each thread takes 8-element groups of the first half with
// their partners; every (key, frequency) angle is computed once.
template <class P>
__device__ __forceinline__ void rope_tile(const P &p, unsigned int src, unsigned int dst,
                                          float pos0, int tid)
{
    constexpr int kHalfGroups = kHeadDim / 16;  // 8-element groups in half a row
    constexpr int kItems = kTile * kHalfGroups;
    static_assert(kItems % kThreads == 0, "every thread rotates the same number of groups");
#pragma unroll
    for (int i = 0; i < kItems / kThreads; ++i) {
        const int item = i * kThreads + tid;
        const int r = item / kHalfGroups, group = item % kHalfGroups;
        float lo[8], hi[8];
        ring_load8(src, r, group, lo);
        ring_load8(src, r, group + kHalfGroups, hi);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            float sn, cs;
            sincos_pos(pos0 + (float)r, p.rope_freq[group * 8 + e], sn, cs);
            const float a = lo[e], b = hi[e];
            lo[e] = fma_(-b, sn, a * cs);
            hi[e] = fma_(a, sn, b * cs);
        }
        sts128(dst + mma_index(r, group) * 16, pack8<DTypeMma>(lo));
        sts128(dst + mma_index(r, group + kHalfGroups) * 16, pack8<DTypeMma>(hi));
    }
}

// The transpose of an 8x8 matrix of 16-bit values held as mma fragments
// (this lane: row g, cols 2t and 2t + 1; see fijit_mma.cuh).
__device__ __forceinline__ unsigned int movmatrix_trans(unsigned int x)
{
    unsigned int y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
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
