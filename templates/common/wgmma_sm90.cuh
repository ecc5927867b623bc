// Hopper warpgroup MMA (sm_90a only): wgmma.mma_async m64nNk16 with fp32
// accumulation, for fp16 and bf16 inputs, operands in shared memory through
// matrix descriptors (A may come from registers instead).
//
// A warpgroup (4 consecutive warps, 128 threads) computes a 64 x N tile
// together; warp w of the group holds rows 16w..16w+15 of it, in the same
// fragment layout as an mma.sync m16n8 accumulator per 8-column block:
// d[n][0..1] at (row g, cols 8n + 2t, +1), d[n][2..3] at (row g + 8, same
// cols), g = lane / 4, t = lane % 4. An A operand held in registers uses the
// mma.sync m16n8k16 A layout (see common/mma_sm80.cuh), so the S accumulators of
// two 8-key blocks form one A fragment of P.V, as with mma.sync.
//
// Shared-memory tiles use the 128-byte swizzle: a tile of R rows x C 16-bit
// columns is stored as C / 64 panels of R rows x 128 bytes, row r of a panel
// at r * 128 with its 16-byte chunk c at (c ^ (r % 8)) * 16 (see
// swz_panel), panels 1024-byte aligned. The hardware applies the same XOR
// to the address bits, so a descriptor names a panel's start (plus the
// k-step's byte offset inside the 128-byte row) and two strides: SBO, from
// one 8-row group to the next (1024 bytes), and LBO, from one panel to the
// next along N when the operand is N-major (V in P.V; K-major operands
// never cross a panel within one k-step of 16).
//
// Ordering rules (PTX ISA, "Asynchronous warpgroup level matrix
// operations"): fence() before the first wgmma that reads registers
// written since the last one; shared memory written by ordinary stores or
// cp.async must be made visible to the async proxy (fence_proxy_async() by
// the writing threads, then a barrier) before a wgmma reads it; results and
// the registers given as A may be touched only after wait<0>().
#pragma once

namespace fijit {
namespace wg {

// Descriptor of a shared-memory operand in the 128-byte swizzle layout
// starting at `addr` (byte address in the shared window), with `lbo` bytes
// between panels along N (N-major operands only; K-major ones ignore it)
// and `sbo` from one 8-row group to the next (1024 where a panel's rows are
// contiguous; more where groups of the panels interleave, as paged K/V's do).
__device__ __forceinline__ unsigned long long desc(unsigned int addr, unsigned int lbo,
                                                   unsigned int sbo = 1024u)
{
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) |
           ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) |
           (1ull << 62);  // 128-byte swizzle
}

__device__ __forceinline__ void fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Orders this thread's earlier shared-memory writes before later reads by
// the async proxy (wgmma operands).
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Keep the compiler from moving accesses of `x` (accumulators, or A
// fragments that must stay live until the wait) across the asynchronous MMA.
template <int kN>
__device__ __forceinline__ void fence_regs(float (&x)[kN][4])
{
#pragma unroll
    for (int i = 0; i < kN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(x[i][e])::"memory");
}
template <int kN>
__device__ __forceinline__ void fence_regs(unsigned int (&x)[kN][4])
{
#pragma unroll
    for (int i = 0; i < kN; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(x[i][e])::"memory");
}

// Mma<T, N>::ss(d, a, b, acc): d = A B (+ d when acc), A 64 x kK and B
// kK x N (K-major) from descriptors (kK: 16 for 16-bit inputs, 32 for
// 8-bit). ::rs(d, a, b, acc): the same with A from
// registers and B N-major.
template <class T, int N>
struct Mma;

// Operand lists: the accumulator registers, 4 per 8 columns (N = 64, 80, 128, 160, 176, 192, 256).
#define FI_WG_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define FI_WG_D32(i)                                                                        \
    FI_WG_D4(i), FI_WG_D4(i + 1), FI_WG_D4(i + 2), FI_WG_D4(i + 3), FI_WG_D4(i + 4),        \
        FI_WG_D4(i + 5), FI_WG_D4(i + 6), FI_WG_D4(i + 7)
#define FI_WG_N64_REGS \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FI_WG_N64_OPS FI_WG_D32(0)
#define FI_WG_N80_REGS \
    FI_WG_N64_REGS ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FI_WG_N80_OPS FI_WG_D32(0), FI_WG_D4(8), FI_WG_D4(9)
#define FI_WG_N128_REGS \
    FI_WG_N64_REGS \
    ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FI_WG_N128_OPS FI_WG_D32(0), FI_WG_D32(8)
#define FI_WG_N160_REGS FI_WG_N128_REGS ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FI_WG_N160_OPS FI_WG_N128_OPS, FI_WG_D4(16), FI_WG_D4(17), FI_WG_D4(18), FI_WG_D4(19)
#define FI_WG_N176_REGS FI_WG_N128_REGS ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define FI_WG_N176_OPS FI_WG_N128_OPS, FI_WG_D4(16), FI_WG_D4(17), FI_WG_D4(18), FI_WG_D4(19), \
    FI_WG_D4(20), FI_WG_D4(21)
#define FI_WG_N192_REGS FI_WG_N128_REGS ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FI_WG_N192_OPS FI_WG_N128_OPS, FI_WG_D32(16)
#define FI_WG_N256_REGS \
    FI_WG_N128_REGS \
    ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FI_WG_N256_OPS FI_WG_D32(0), FI_WG_D32(8), FI_WG_D32(16), FI_WG_D32(24)

// TY: PTX input type; N: tile width; K: the k-step; SS_TAIL, RS_TAIL: the
// immediates after imm-scale-b (16-bit: transposes of A and B, or of B; 8-bit
// inputs have none); A0..A5: the operand numbers after the accumulators (ss:
// a, b, acc; rs: a0..a3, b, acc).
#define FI_WG_DEFINE_K(CTYPE, TY, N, K, SS_TAIL, RS_TAIL, A0, A1, A2, A3, A4, A5)            \
    template <>                                                                              \
    struct Mma<CTYPE, N> {                                                                   \
        static constexpr int kK = K;                                                         \
        __device__ __forceinline__ static void ss(float (&d)[N / 8][4], unsigned long long a, \
                                                  unsigned long long b, int acc)             \
        {                                                                                    \
            asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" A2 ", 0;\n"                  \
                         " wgmma.mma_async.sync.aligned.m64n" #N "k" #K ".f32." TY "." TY    \
                         " {" FI_WG_N##N##_REGS "}, %" A0 ", %" A1 ", p, 1, 1" SS_TAIL ";\n}" \
                         : FI_WG_N##N##_OPS                                                  \
                         : "l"(a), "l"(b), "r"(acc));                                        \
        }                                                                                    \
        __device__ __forceinline__ static void rs(float (&d)[N / 8][4],                       \
                                                  const unsigned int (&a)[4],                \
                                                  unsigned long long b, int acc)             \
        {                                                                                    \
            asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" A5 ", 0;\n"                  \
                         " wgmma.mma_async.sync.aligned.m64n" #N "k" #K ".f32." TY "." TY    \
                         " {" FI_WG_N##N##_REGS "}, {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" A4 \
                         ", p, 1, 1" RS_TAIL ";\n}"                                          \
                         : FI_WG_N##N##_OPS                                                  \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));    \
        }                                                                                    \
    };
// 16-bit inputs: A and B as they are, B N-major for rs (the 1).
#define FI_WG_DEFINE(CTYPE, TY, N, A0, A1, A2, A3, A4, A5) \
    FI_WG_DEFINE_K(CTYPE, TY, N, 16, ", 0, 0", ", 1", A0, A1, A2, A3, A4, A5)

FI_WG_DEFINE(half_t, "f16", 64, "32", "33", "34", "35", "36", "37")
FI_WG_DEFINE(bf16_t, "bf16", 64, "32", "33", "34", "35", "36", "37")
FI_WG_DEFINE(half_t, "f16", 80, "40", "41", "42", "43", "44", "45")
FI_WG_DEFINE(bf16_t, "bf16", 80, "40", "41", "42", "43", "44", "45")
FI_WG_DEFINE(half_t, "f16", 128, "64", "65", "66", "67", "68", "69")
FI_WG_DEFINE(bf16_t, "bf16", 128, "64", "65", "66", "67", "68", "69")
FI_WG_DEFINE(half_t, "f16", 160, "80", "81", "82", "83", "84", "85")
FI_WG_DEFINE(bf16_t, "bf16", 160, "80", "81", "82", "83", "84", "85")
FI_WG_DEFINE(half_t, "f16", 176, "88", "89", "90", "91", "92", "93")
FI_WG_DEFINE(bf16_t, "bf16", 176, "88", "89", "90", "91", "92", "93")
FI_WG_DEFINE(half_t, "f16", 192, "96", "97", "98", "99", "100", "101")
FI_WG_DEFINE(bf16_t, "bf16", 192, "96", "97", "98", "99", "100", "101")
FI_WG_DEFINE(half_t, "f16", 256, "128", "129", "130", "131", "132", "133")
FI_WG_DEFINE(bf16_t, "bf16", 256, "128", "129", "130", "131", "132", "133")

// 8-bit inputs (e4m3), k-steps of 32: both operands K-major (the PTX has no
// transpose for them), so V is read transposed (prefill/fp8.cuh). A held in
// registers: a thread's 4 words are rows g and g + 8 of its warp's 16, each
// with k columns 4t..4t+3 (first two words) and 16 + 4t..16 + 4t + 3.
FI_WG_DEFINE_K(fp8_e4m3_t, "e4m3", 128, 32, "", "", "64", "65", "66", "67", "68", "69")
FI_WG_DEFINE_K(fp8_e4m3_t, "e4m3", 256, 32, "", "", "128", "129", "130", "131", "132", "133")
FI_WG_DEFINE_K(fp8_e4m3_t, "e4m3", 192, 32, "", "", "96", "97", "98", "99", "100", "101")

#undef FI_WG_DEFINE_K
#undef FI_WG_DEFINE
#undef FI_WG_N256_OPS
#undef FI_WG_N256_REGS
#undef FI_WG_N128_OPS
#undef FI_WG_N128_REGS
#undef FI_WG_N192_OPS
#undef FI_WG_N192_REGS
#undef FI_WG_N160_OPS
#undef FI_WG_N160_REGS
#undef FI_WG_N176_OPS
#undef FI_WG_N176_REGS
#undef FI_WG_N80_OPS
#undef FI_WG_N80_REGS
#undef FI_WG_N64_OPS
#undef FI_WG_N64_REGS
#undef FI_WG_D32
#undef FI_WG_D4

}  // namespace wg
}  // namespace fijit
