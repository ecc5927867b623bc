// An optional cycle trace of the Hopper main loop's consumers: where a
// block's time goes (bench/ws_trace.py). Compiled in only where
// FIJIT_WS_TRACE is defined, which the tool does in a copy of the templates
// run through FIJIT_TEMPLATE_DIR; otherwise every hook below is empty and
// the kernels are byte for byte what they are without them.
//
// Each consumer's first thread reads clock64() at every phase boundary and
// adds the cycles since its last mark to its warpgroup's total for that
// phase (a predicated red.global: a branch beside the wgmmas would make
// ptxas serialise them). The first warp of every consumer shares its SM
// sub-partition with the producer's first warp, so the trace also shows
// what that warp's instructions cost the consumers. The last consumer to
// finish the launch prints one line per warpgroup and clears the totals.
// FIJIT_WS_TRACE 2 adds up only the phases a consumer waits in (for the
// producer, a turn or the tensor cores: trace_kept), with fewer reductions
// beside the wgmmas, so that the consumers run closer to their untraced
// speed: all phases slowed them enough to hide most of what paged K/V
// loses to ragged (1-2% traced, 5% untraced, H200, 2026-11-29).
#pragma once

#include "prefill/ws/config.cuh"

namespace fijit {
namespace prefill {
namespace ws {

// A block's phases, in the order a consumer goes through them; the names
// are what ws_trace.py prints.
enum TracePhase {
    kTrWalk,       // from the previous block's end to this one's start
    kTrQWait,      // this block's Q (by TMA, or loaded by the consumers)
    kTrK0Wait,     // the first K tile
    kTrTurn0,      // the turn of the first S
    kTrS0Issue,    // issuing the first S
    kTrS0Wait,     // its completion
    kTrSoftmax0,   // the previous Q buffer freed, the first tile's masks and softmax
    kTrKWait,      // steady loop: K of the tile
    kTrTurn,       //   the turn
    kTrIssue,      //   issuing S and P.V (the tensor cores' queue), the loop's own work
    kTrVWait,      //   V of the previous tile
    kTrSWait,      //   S's completion
    kTrSoftmax,    //   masks, hooks and softmax
    kTrPVWait,     //   P.V's completion
    kTrRescale,    //   slots freed, O rescaled, P packed
    kTrVLast,      // V of the last tile (paged: its tail zeroed)
    kTrTurnLast,   // the turn of the last P.V
    kTrPVIssue,    // issuing it
    kTrPVLastWait, // its completion
    kTrPass,       // tiles passed through (no rows or keys of this consumer's)
    kTrStage,      // the output normalised and staged
    kTrStore,      // its store issued
    kTrPhases
};

#ifdef FIJIT_WS_TRACE
constexpr bool kTrWaitsOnly = FIJIT_WS_TRACE == 2;
// Whether phase ph is added up (the others only move the clock on).
__device__ __forceinline__ constexpr bool trace_kept(int ph)
{
    return !kTrWaitsOnly || ph == kTrWalk || ph == kTrQWait || ph == kTrK0Wait || ph == kTrTurn0 ||
           ph == kTrS0Wait || ph == kTrKWait || ph == kTrTurn || ph == kTrVWait || ph == kTrSWait ||
           ph == kTrPVWait || ph == kTrVLast || ph == kTrTurnLast || ph == kTrPVLastWait;
}
constexpr int kTrCtas = 1024;  // CTAs whose walk between blocks is traced
__device__ unsigned long long g_trace[kConsumers][kTrPhases + 2];  // + blocks, tiles
__device__ unsigned long long g_trace_end[kConsumers][kTrCtas];    // each CTA's last block end
__device__ unsigned int g_trace_done;
// Each CTA's entry and its consumers' last block end (globaltimer, ns): how
// long the grid's CTAs idle at its start and its end.
__device__ unsigned long long g_trace_span[kTrCtas][2];

__device__ __forceinline__ unsigned long long trace_now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
// At the CTA's entry (its first thread).
__device__ __forceinline__ void trace_cta_start()
{
    if (threadIdx.x == 0 && blockIdx.x < kTrCtas) g_trace_span[blockIdx.x][0] = trace_now_ns();
}

// One consumer's clock through a block.
struct PhaseClock {
    bool on;
    int wg;
    unsigned long long last;

    __device__ __forceinline__ PhaseClock(int wg_, int wtid, int tiles) : on(wtid == 0), wg(wg_)
    {
        last = clock64();
        const unsigned long long prev = blockIdx.x < kTrCtas ? g_trace_end[wg][blockIdx.x] : 0;
        add(kTrWalk, prev != 0 ? last - prev : 0);
        add(kTrPhases, 1);
        add(kTrPhases + 1, (unsigned long long)tiles);
    }
    __device__ __forceinline__ void add(int slot, unsigned long long v) const
    {
        asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %0, 0;\n @p red.global.add.u64 [%1], %2;\n}" ::"r"(
                         (unsigned int)on),
                     "l"(&g_trace[wg][slot]), "l"(v)
                     : "memory");
    }
    __device__ __forceinline__ void mark(TracePhase ph)
    {
        const unsigned long long now = clock64();
        if (trace_kept(ph)) add(ph, now - last);  // ph is a constant: no branch is left
        last = now;
    }
    __device__ __forceinline__ void end_block() const
    {
        if (on && blockIdx.x < kTrCtas) {
            g_trace_end[wg][blockIdx.x] = clock64();
            atomicMax(&g_trace_span[blockIdx.x][1], trace_now_ns());
        }
    }
};

// After a consumer's last block: the last of the launch prints the totals
// (cycles summed over every CTA's warpgroup wg) and clears them.
__device__ __forceinline__ void trace_report()
{
    if (threadIdx.x % 128 != 0) return;
    __threadfence();
    if (atomicAdd(&g_trace_done, 1u) != gridDim.x * kConsumers - 1) return;
    g_trace_done = 0;
    for (int wg = 0; wg < kConsumers; ++wg) {
        unsigned long long *t = g_trace[wg];
        printf("FIJIT_WS_TRACE wg %d blocks %llu tiles %llu:", wg, t[kTrPhases], t[kTrPhases + 1]);
        for (int ph = 0; ph < kTrPhases; ++ph) printf(" %llu", t[ph]);
        printf("\n");
        for (int i = 0; i < kTrPhases + 2; ++i) t[i] = 0;
        for (int c = 0; c < kTrCtas; ++c) g_trace_end[wg][c] = 0;
    }
    // The CTAs' entries and last block ends from the first entry: first and
    // mean entry, mean and last end (ns).
    const int ctas = gridDim.x < kTrCtas ? (int)gridDim.x : kTrCtas;
    unsigned long long t0 = ~0ull, last = 0, sum_start = 0, sum_end = 0;
    for (int c = 0; c < ctas; ++c) t0 = g_trace_span[c][0] < t0 ? g_trace_span[c][0] : t0;
    for (int c = 0; c < ctas; ++c) {
        const unsigned long long end = g_trace_span[c][1] > t0 ? g_trace_span[c][1] - t0 : 0;
        sum_start += g_trace_span[c][0] - t0;
        sum_end += end;
        last = end > last ? end : last;
        g_trace_span[c][0] = g_trace_span[c][1] = 0;
    }
    printf("FIJIT_WS_TRACE span ctas %d ns: %llu %llu %llu\n", ctas, sum_start / ctas, sum_end / ctas, last);
}
#else
struct PhaseClock {
    __device__ __forceinline__ PhaseClock(int, int, int) {}
    __device__ __forceinline__ void mark(TracePhase) const {}
    __device__ __forceinline__ void end_block() const {}
};
__device__ __forceinline__ void trace_report() {}
__device__ __forceinline__ void trace_cta_start() {}
#endif

}  // namespace ws
}  // namespace prefill
}  // namespace fijit
