// Warp-level tensor-core helpers (sm_80+): ldmatrix and mma.sync m16n8k16
// with fp32 accumulation, for fp16 and bf16 inputs.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4:
//   A 16x16 (row-major): a0 (row g, cols 2t, 2t+1), a1 (row g+8, same cols),
//                        a2 (row g, cols 2t+8, 2t+9), a3 (row g+8, cols 2t+8, 2t+9)
//   B 16x8 (k x n):      b0 (k 2t, 2t+1; col g),  b1 (k 2t+8, 2t+9; col g)
//   C 16x8 fp32:         c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, same cols)
// Each 32-bit register holds two 16-bit values, the lower column (or k) in
// the low half. ldmatrix.x4 loads four 8x8 matrices; lanes 8m..8m+7 give the
// row addresses of matrix m, and every lane receives (row g, cols 2t, 2t+1)
// of each (with .trans: (rows 2t, 2t+1, col g), i.e. the transpose).
#pragma once

namespace fijit {

__device__ __forceinline__ void ldmatrix_x4(unsigned int (&r)[4], unsigned int smem_address)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int (&r)[4], unsigned int smem_address)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address));
}

// d += a * b on one 16x8x16 tile; T (half_t or bf16_t) is the input type.
template <class T>
struct Mma;

template <>
struct Mma<half_t> {
    __device__ __forceinline__ static void run(float (&d)[4], const unsigned int (&a)[4],
                                               unsigned int b0, unsigned int b1)
    {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <>
struct Mma<bf16_t> {
    __device__ __forceinline__ static void run(float (&d)[4], const unsigned int (&a)[4],
                                               unsigned int b0, unsigned int b1)
    {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ void sts32(unsigned int smem_address, unsigned int v)
{
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_address), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int lds32(unsigned int smem_address)
{
    unsigned int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(smem_address) : "memory");
    return v;
}

__device__ __forceinline__ void sts128(unsigned int smem_address, const vec16_t &v)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(smem_address), "r"(v.w[0]),
                 "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
}

__device__ __forceinline__ vec16_t lds128(unsigned int smem_address)
{
    vec16_t v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "r"(smem_address));
    return v;
}

// The transpose of an 8x8 matrix of 16-bit values held as mma fragments
// (this lane: row g, cols 2t and 2t + 1; see above).
__device__ __forceinline__ unsigned int movmatrix_trans(unsigned int x)
{
    unsigned int y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

}  // namespace fijit
