// Read-bandwidth ceilings for the decode benchmarks: how fast this GPU reads
// memory the way decode does (16 KiB tiles of four 4 KiB chunks streamed
// through a cp.async ring in shared memory, 128 threads a block, as
// templates/decode/), once with each block's chunks contiguous (a
// dense K/V cache) and once with the chunks in random order (a paged cache
// of page_size 16, HND, hd 128: one 4 KiB chunk per page and head). Then
// paged with 8 heads to a page, 32 KiB (GQA 32/8): each block reads one head's
// 4 KiB slice of a list of random pages, the 8 blocks of a page list either
// neighbours in launch order (batch decode's grid) or a launch-wide stride
// apart (a grid with the head as its slow index). The copy ceiling of
// bench_decode.py counts a read and a write; these count reads.
//
// Build and run (scripts/gpu/run.sh does): nvcc -O3 -arch=sm_90 -o read_ceiling
// bench/read_ceiling.cu && ./read_ceiling [OUT.json]
// Prints one line and writes {"contiguous_gbs", "random_4k_gbs",
// "paged_heads_adjacent_gbs", "paged_heads_strided_gbs"}, each
// the best over ring depths 3..6 and 2..4 blocks per SM, median of 9 runs of
// 4 GiB each after 3 warm-up runs (CUDA events).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#define CHECK_CUDA(x)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "read_ceiling: %s: %s\n", #x, cudaGetErrorString(e_));       \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

constexpr int kChunk = 4096, kTileChunks = 4, kTile = kChunk * kTileChunks, kThreads = 128;

__device__ __forceinline__ unsigned shared_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

// Block b streams tiles [b * tiles, (b + 1) * tiles) of the chunk list; the
// sum of one word per thread and tile keeps the loads alive.
template <int kDepth>
__global__ void __launch_bounds__(kThreads)
    stream_tiles(const char *buf, const int *chunks, int tiles, float *sink)
{
    extern __shared__ __align__(128) char ring[];
    const int *mine = chunks + (size_t)blockIdx.x * tiles * kTileChunks;
    auto issue = [&](int t) {
        if (t < tiles) {
            char *dst = ring + (t % kDepth) * kTile;
#pragma unroll
            for (int j = 0; j < kTile / 16 / kThreads; ++j) {
                const int i = threadIdx.x + j * kThreads;
                const int c = i / (kChunk / 16), off = (i % (kChunk / 16)) * 16;
                const char *src = buf + (size_t)mine[t * kTileChunks + c] * kChunk + off;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                                 shared_addr(dst + c * kChunk + off)),
                             "l"(src)
                             : "memory");
            }
        }
        asm volatile("cp.async.commit_group;");
    };
    float acc = 0.f;
    for (int t = 0; t < kDepth - 1; ++t) issue(t);
    for (int t = 0; t < tiles; ++t) {
        asm volatile("cp.async.wait_group %0;" ::"n"(kDepth - 2));
        __syncthreads();
        acc += reinterpret_cast<const float *>(ring + (t % kDepth) * kTile)[threadIdx.x];
        __syncthreads();
        issue(t + kDepth - 1);
    }
    if (acc == 1234.5f) *sink = acc;  // never true for the data written below
}

typedef void (*Kernel)(const char *, const int *, int, float *);

// Block b's chunk list for a launch of `blocks` blocks of `tiles` tiles.
typedef std::vector<int> (*Order)(int blocks, int tiles);

// GB/s of the best configuration for the chunk order `order` makes.
static double best_gbs(const char *buf, int *chunks, size_t total_chunks, float *sink, int sms,
                       Order order)
{
    const struct {
        Kernel k;
        int depth;
    } rings[] = {{stream_tiles<3>, 3}, {stream_tiles<4>, 4}, {stream_tiles<6>, 6}};
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    double best = 0;
    // The chunk list depends on the grid only: made and uploaded once per grid.
    for (int per_sm = 2; per_sm <= 4; ++per_sm) {
        const int blocks = sms * per_sm;
        const int tiles = (int)(total_chunks / kTileChunks / blocks);
        const std::vector<int> list = order(blocks, tiles);
        if (list.empty()) continue;  // the order does not fit this grid
        CHECK_CUDA(cudaMemcpy(chunks, list.data(), list.size() * sizeof(int),
                              cudaMemcpyHostToDevice));
        for (const auto &r : rings) {
            const int smem = r.depth * kTile;
            if ((size_t)per_sm * (smem + 1024) > 228 * 1024) continue;
            CHECK_CUDA(cudaFuncSetAttribute((const void *)r.k,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            std::vector<float> ms;
            for (int rep = 0; rep < 12; ++rep) {
                CHECK_CUDA(cudaEventRecord(a));
                r.k<<<blocks, kThreads, smem>>>(buf, chunks, tiles, sink);
                CHECK_CUDA(cudaEventRecord(b));
                CHECK_CUDA(cudaEventSynchronize(b));
                float t;
                CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
                if (rep >= 3) ms.push_back(t);
            }
            CHECK_CUDA(cudaGetLastError());
            std::sort(ms.begin(), ms.end());
            const double gbs = (double)blocks * tiles * kTile / (ms[ms.size() / 2] * 1e-3) / 1e9;
            best = std::max(best, gbs);
        }
    }
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    return best;
}

// Each block's chunks one after the other (a dense cache), or all chunks in
// random order (a paged one, one 4 KiB chunk per page and head).
static std::vector<int> in_order(int blocks, int tiles)
{
    std::vector<int> list((size_t)blocks * tiles * kTileChunks);
    std::iota(list.begin(), list.end(), 0);
    return list;
}
static std::vector<int> shuffled(int blocks, int tiles)
{
    std::vector<int> list = in_order(blocks, tiles);
    std::shuffle(list.begin(), list.end(), std::mt19937(7));
    return list;
}

// Pages of kHeads 4 KiB chunks in random order; the blocks of one page list
// (one head each) are neighbours (b = list * kHeads + head) or a launch-wide
// stride apart (b = head * lists + list). Only for grids of whole pages.
template <bool kAdjacent>
std::vector<int> paged(int blocks, int tiles)
{
    constexpr int kHeads = 8;
    if (blocks % kHeads != 0) return {};
    const int lists = blocks / kHeads, per_list = tiles * kTileChunks;
    std::vector<int> pages((size_t)lists * per_list);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
    std::vector<int> list((size_t)blocks * per_list);
    for (int l = 0; l < lists; ++l)
        for (int h = 0; h < kHeads; ++h) {
            const int b = kAdjacent ? l * kHeads + h : h * lists + l;
            for (int i = 0; i < per_list; ++i)
                list[(size_t)b * per_list + i] = pages[(size_t)l * per_list + i] * kHeads + h;
        }
    return list;
}

int main(int argc, char **argv)
{
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    const size_t total_chunks = (size_t)1 << 20;  // 4 GiB
    char *buf = nullptr;
    int *chunks = nullptr;
    float *sink = nullptr;
    CHECK_CUDA(cudaMalloc(&buf, total_chunks * kChunk));
    CHECK_CUDA(cudaMemset(buf, 0x3c, total_chunks * kChunk));
    CHECK_CUDA(cudaMalloc(&chunks, total_chunks * sizeof(int)));
    CHECK_CUDA(cudaMalloc(&sink, sizeof(float)));
    const double contiguous = best_gbs(buf, chunks, total_chunks, sink, sms, in_order);
    const double random4k = best_gbs(buf, chunks, total_chunks, sink, sms, shuffled);
    const double adjacent = best_gbs(buf, chunks, total_chunks, sink, sms, paged<true>);
    const double strided = best_gbs(buf, chunks, total_chunks, sink, sms, paged<false>);
    printf("read ceiling on %s: contiguous %.0f GB/s, random 4 KiB chunks %.0f GB/s, "
           "32 KiB pages of 8 heads: heads adjacent in launch order %.0f GB/s, strided %.0f "
           "GB/s\n",
           prop.name, contiguous, random4k, adjacent, strided);
    if (argc > 1) {
        FILE *f = fopen(argv[1], "w");
        if (!f) {
            perror(argv[1]);
            return 1;
        }
        fprintf(f,
                "{\"device\": \"%s\", \"contiguous_gbs\": %.1f, \"random_4k_gbs\": %.1f, "
                "\"paged_heads_adjacent_gbs\": %.1f, \"paged_heads_strided_gbs\": %.1f}\n",
                prop.name, contiguous, random4k, adjacent, strided);
        fclose(f);
    }
    CHECK_CUDA(cudaFree(buf));
    CHECK_CUDA(cudaFree(chunks));
    CHECK_CUDA(cudaFree(sink));
    return 0;
}
