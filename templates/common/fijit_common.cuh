// Device helpers shared by every fijit kernel template.
//
// NVRTC compiles our translation units with no toolkit or standard headers, so
// everything a kernel needs beyond the language builtins (threadIdx,
// __syncthreads) is defined here: 16-bit float storage types and their
// conversions, 16-byte vector memory access, warp shuffles, fast math and
// cp.async. Conversions and math go through inline PTX so that the emitted
// instructions are exactly the ones we mean (and identical under nvcc, which
// we use to test-compile).
#pragma once

namespace fijit {

// ---- type utilities (no <type_traits> under NVRTC) ---------------------------
// Pick<B, T, F>::type: T when B, else F.
template <bool B, class T, class F>
struct Pick {
    using type = T;
};
template <class T, class F>
struct Pick<false, T, F> {
    using type = F;
};
// SameType<A, B>::value: A and B are one type.
template <class A, class B>
struct SameType {
    static constexpr bool value = false;
};
template <class A>
struct SameType<A, A> {
    static constexpr bool value = true;
};
// EnableIf<C>::type: void when C, else no member (SFINAE).
template <bool C>
struct EnableIf {};
template <>
struct EnableIf<true> {
    using type = void;
};

// ---- storage types -----------------------------------------------------------
// Plain 16-bit containers: arithmetic happens in fp32 after conversion.
struct half_t {
    unsigned short bits;
};
struct bf16_t {
    unsigned short bits;
};

// 16 bytes, the unit of every global and shared memory access in the kernels.
struct alignas(16) vec16_t {
    unsigned int w[4];
};

__device__ __forceinline__ float bits_to_float(unsigned int u)
{
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
    return f;
}

__device__ __forceinline__ unsigned int float_to_bits(float f)
{
    unsigned int u;
    asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
    return u;
}

// ---- conversion traits ---------------------------------------------------------
// Traits<T>::unpack2(word, lo, hi): two packed values of a 32-bit word (low
// half first, i.e. the element at the lower address) to fp32.
// Traits<T>::pack2(lo, hi): two fp32 values rounded to nearest-even into a word.
template <class T>
struct Traits;

template <>
struct Traits<half_t> {
    static constexpr int kBytes = 2;
    __device__ __forceinline__ static void unpack2(unsigned int w, float &lo, float &hi)
    {
        asm("{\n\t.reg .b16 l, h;\n\t"
            "mov.b32 {l, h}, %2;\n\t"
            "cvt.f32.f16 %0, l;\n\t"
            "cvt.f32.f16 %1, h;\n\t}"
            : "=f"(lo), "=f"(hi)
            : "r"(w));
    }
    __device__ __forceinline__ static unsigned int pack2(float lo, float hi)
    {
        unsigned int w;
        // cvt.rn.f16x2.f32 d, a, b puts a in the upper half.
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
        return w;
    }
};

template <>
struct Traits<bf16_t> {
    static constexpr int kBytes = 2;
    // bf16 is the upper half of an fp32: widening is a shift, no rounding.
    __device__ __forceinline__ static void unpack2(unsigned int w, float &lo, float &hi)
    {
        lo = bits_to_float(w << 16);
        hi = bits_to_float(w & 0xffff0000u);
    }
    __device__ __forceinline__ static unsigned int pack2(float lo, float hi)
    {
        unsigned int w;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
        return w;
    }
};

// Eight 16-bit values in a 16-byte vector to fp32 and back.
template <class T>
__device__ __forceinline__ void unpack8(const vec16_t &v, float (&f)[8])
{
#pragma unroll
    for (int i = 0; i < 4; ++i) Traits<T>::unpack2(v.w[i], f[2 * i], f[2 * i + 1]);
}

template <class T>
__device__ __forceinline__ vec16_t pack8(const float (&f)[8])
{
    vec16_t v;
#pragma unroll
    for (int i = 0; i < 4; ++i) v.w[i] = Traits<T>::pack2(f[2 * i], f[2 * i + 1]);
    return v;
}

// ---- 16- and 4-byte memory access ---------------------------------------------------
// Read-only global load through the non-coherent path: inputs are never
// written while a kernel runs.
__device__ __forceinline__ vec16_t ldg16(const void *p)
{
    vec16_t v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void stg16(void *p, const vec16_t &v)
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]),
                 "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
}

__device__ __forceinline__ unsigned int smem_addr(const void *p)
{
    // Shared-window address for PTX instructions that take a .shared operand.
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

__device__ __forceinline__ vec16_t lds16(const void *p)
{
    vec16_t v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "r"(smem_addr(p)));
    return v;
}

// ---- cp.async (sm_80+) ---------------------------------------------------------------
// Copy 16 bytes global -> shared without passing through registers. With
// `valid` false nothing is read and the destination is zero-filled, so a
// partial tile needs no separate clearing pass. .cg skips L1: KV data is
// streamed once.
__device__ __forceinline__ void cp_async16(unsigned int smem, const void *gmem, bool valid)
{
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    cp_async16(smem_addr(smem), gmem, valid);
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- warp shuffles ---------------------------------------------------------------------
__device__ __forceinline__ float shfl_xor(float x, int lane_mask)
{
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                 : "=f"(r)
                 : "f"(x), "r"(lane_mask));
    return r;
}

// ---- fast math ---------------------------------------------------------------------------
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float inf_() { return bits_to_float(0x7f800000u); }

__device__ __forceinline__ float exp2_fast(float x)
{
    // ex2.approx: 2 ulp, exp2(-inf) = 0, which the online softmax relies on.
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float log2_fast(float x)
{
    // lg2.approx(0) = -inf: an empty softmax gets lse = -inf.
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float tanh_fast(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// tanh good to ~1e-6 absolute everywhere. tanh.approx is off by up to 2^-11
// relative, which a soft-cap multiplies by the cap (30..50 in practice) into
// logit errors of 1e-2; this form costs one more MUFU op.
__device__ __forceinline__ float rcp_fast(float x);
__device__ __forceinline__ float tanh_accurate(float x)
{
    const float e = exp2_fast(x * (2.0f * 1.4426950408889634f));  // e^(2x); inf/0 saturate
    return 1.0f - 2.0f * rcp_fast(e + 1.0f);
}

__device__ __forceinline__ float rcp_fast(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float fmax_(float a, float b)
{
    float y;
    asm("max.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
    return y;
}

__device__ __forceinline__ float fma_(float a, float b, float c)
{
    float y;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(y) : "f"(a), "f"(b), "f"(c));
    return y;
}

__device__ __forceinline__ float rint_(float x)
{
    float y;
    asm("cvt.rni.f32.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// sin and cos of pos * freq for |pos * freq| up to ~1e7.
// sin/cos.approx are only accurate near [-pi, pi], and pos * freq rounded to
// fp32 is already off by up to ulp(angle) (~2e-3 rad at angle 3e4). So the
// product is split exactly into hi + lo with an FMA, hi is reduced modulo 2*pi
// with a three-part Cody-Waite constant (FMA keeps each step exact enough),
// and lo is added back: the argument is then good to ~1e-6 rad.
__device__ __forceinline__ void sincos_pos(float pos, float freq, float &s, float &c)
{
    const float hi = pos * freq;
    const float lo = fma_(pos, freq, -hi);
    const float n = rint_(hi * 0.15915494309189535f);
    float r = fma_(-n, 6.28318548202514648f, hi);  // float(2*pi)
    r = fma_(-n, -1.74845553e-7f, r);              // 2*pi - float(2*pi)
    r = fma_(-n, -6.86049804e-15f, r) + lo;        // what is still left of 2*pi
    asm("sin.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(r));
    asm("cos.approx.ftz.f32 %0, %1;" : "=f"(c) : "f"(r));
}

}  // namespace fijit

// ---- fp8 storage (KV cache) ------------------------------------------------------------
// One-byte containers for OCP fp8 e4m3 ("fn": no infinities) and e5m2. They
// are only ever read: Traits<T>::unpack4(word, f) turns the four values of a
// 32-bit word (lowest byte = lowest address first) into fp32 exactly (every
// fp8 value is an fp16 value). sm_89+ has cvt.rn.f16x2.{e4m3,e5m2}x2, which
// puts the upper byte of its 16-bit operand into the upper half; older
// targets use the bit-level form below (same results for finite values).
namespace fijit {

struct fp8_e4m3_t {
    unsigned char bits;
};
struct fp8_e5m2_t {
    unsigned char bits;
};

// Bytes 0 and 1 of w into the low bytes of the two 16-bit halves.
__device__ __forceinline__ unsigned int fp8_spread2(unsigned int w)
{
    return (w & 0xffu) | ((w & 0xff00u) << 8);
}

// cvt.rn.f16x2.<fmt>x2 of the byte pairs (0, 1) and (2, 3) of w (sm_89+).
#define FI_CVT_FP8X4(fmt, w, lo, hi)                                               \
    asm("{\n\t.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\t"                            \
        "cvt.rn.f16x2." fmt "x2 %0, l;\n\tcvt.rn.f16x2." fmt "x2 %1, h;\n\t}"        \
        : "=r"(lo), "=r"(hi)                                                         \
        : "r"(w))

// What the two fp8 types share: four values of a word, through fp16 (which
// holds every e4m3 and e5m2 value exactly). T::to_half4 gives the fp16x2
// pairs of bytes (0, 1) and (2, 3).
template <class T>
struct Fp8Traits {
    static constexpr int kBytes = 1;
    __device__ __forceinline__ static void unpack4(unsigned int w, float (&f)[4])
    {
        unsigned int lo, hi;
        T::to_half4(w, lo, hi);
        Traits<half_t>::unpack2(lo, f[0], f[1]);
        Traits<half_t>::unpack2(hi, f[2], f[3]);
    }
};

template <>
struct Traits<fp8_e4m3_t> : Fp8Traits<Traits<fp8_e4m3_t>> {
    __device__ __forceinline__ static void to_half4(unsigned int w, unsigned int &lo,
                                                    unsigned int &hi)
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        FI_CVT_FP8X4("e4m3", w, lo, hi);
#else
        // Sign to bit 15, exponent and mantissa shifted into fp16's fields:
        // that fp16 is the value times 2^-8 (fp16 bias 15 vs 7), subnormals
        // included; times 256 (0x5c00) is exact.
        const unsigned int a = fp8_spread2(w), b = fp8_spread2(w >> 16);
        const unsigned int ha = ((a & 0x00800080u) << 8) | ((a & 0x007f007fu) << 7);
        const unsigned int hb = ((b & 0x00800080u) << 8) | ((b & 0x007f007fu) << 7);
        asm("mul.rn.f16x2 %0, %2, %4;\n\tmul.rn.f16x2 %1, %3, %4;"
            : "=r"(lo), "=r"(hi)
            : "r"(ha), "r"(hb), "r"(0x5c005c00u));
#endif
    }
};

template <>
struct Traits<fp8_e5m2_t> : Fp8Traits<Traits<fp8_e5m2_t>> {
    __device__ __forceinline__ static void to_half4(unsigned int w, unsigned int &lo,
                                                    unsigned int &hi)
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        FI_CVT_FP8X4("e5m2", w, lo, hi);
#else
        // e5m2 is an fp16's upper byte: bytes 0, 1 (2, 3) of w into the
        // upper bytes of the halves.
        asm("prmt.b32 %0, %2, 0, 0x1404;\n\tprmt.b32 %1, %2, 0, 0x3424;"
            : "=r"(lo), "=r"(hi)
            : "r"(w));
#endif
    }
};

}  // namespace fijit
