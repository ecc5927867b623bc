// Decode's key source: where key j of a head lives (DenseKV: strides;
// PagedKV: a page table) and the ring of K/V tiles that cp.async streams
// into shared memory (ring_start, ring_next). The tile loop
// (decode/tile_loop.cuh) is compiled once per source, with no run-time
// branching on the layout.
#pragma once

#include "decode/common.cuh"

namespace fijit {
namespace decode {

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

__device__ __forceinline__ int ldg_s32(const int *p)
{
    int v;
    asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

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

}  // namespace decode
}  // namespace fijit
