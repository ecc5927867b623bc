// Exponentials a clock an SM of the forms a softmax can take: ex2.approx.f32
// (the MUFU), ex2.approx.f16x2, 2^x on the FMA and integer pipes (the form
// tried in fp8 prefill's softmax and dropped: docs/performance.md), and mixes
// of the MUFU and that. Independent chains, many warps: a throughput, not a latency.
// nvcc -O3 -arch=sm_90a -o /tmp/exp2_rate bench/exp2_rate.cu && /tmp/exp2_rate
// (the device machine has nvcc; the build host has no GPU to run it).
#include <cstdio>
#include <cuda_runtime.h>

__device__ __forceinline__ float ex2_mufu(float x)
{
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned int ex2_half2(unsigned int x)
{
    unsigned int y;
    asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

// 2^x: x rounded to the nearest integer r by adding 1.5 * 2^23 (the sum's
// low bits are then r), 2^(x - r) on [-0.5, 0.5] as a degree-2 polynomial
// (relative error 1.8e-3), r added into the exponent field.
__device__ __forceinline__ float ex2_fma(float x)
{
    x = fmaxf(x, -126.f);  // the exponent field cannot wrap
    const float t = __fadd_rn(x, 12582912.f);
    const float r = __fadd_rn(t, -12582912.f);
    const float f = __fadd_rn(x, -r);
    const float p = fmaf(fmaf(0.2378304f, f, 0.7033965f), f, 1.0005137f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

enum Form { kMufu, kHalf2, kFma, kQuarterFma, kHalfFma, kForms };
const char *const kNames[kForms] = {"ex2.approx.f32", "ex2.approx.f16x2", "on the FMA pipe",
                                    "3/4 MUFU, 1/4 FMA", "1/2 MUFU, 1/2 FMA"};

template <int kForm>
__global__ void chains(float *out, int iters)
{
    float a[8];
    unsigned int h[8];
    for (int i = 0; i < 8; ++i) {
        a[i] = -(1.f + threadIdx.x * 1e-3f + i * 0.1f);
        h[i] = 0xbc00bc00u ^ (threadIdx.x & 7) ^ i;  // -1.0 in both halves, perturbed
    }
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // negated so that every chain stays in range
            if (kForm == kMufu) a[i] = -ex2_mufu(a[i]);
            if (kForm == kHalf2) h[i] = ex2_half2(h[i]) ^ 0x80008000u;
            if (kForm == kFma) a[i] = -ex2_fma(a[i]);
            if (kForm == kQuarterFma) a[i] = (i & 3) == 3 ? -ex2_fma(a[i]) : -ex2_mufu(a[i]);
            if (kForm == kHalfFma) a[i] = (i & 1) ? -ex2_fma(a[i]) : -ex2_mufu(a[i]);
        }
    }
    float sum = 0.f;
    for (int i = 0; i < 8; ++i) sum += a[i] + __uint_as_float(h[i]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;  // keeps the chains live
}

template <int kForm>
static float time_form(float *out, int blocks, int threads, int iters)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {  // the first warms up; the fastest counts
        cudaEventRecord(e0);
        chains<kForm><<<blocks, threads>>>(out, iters);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

int main()
{
    int sms = 0, khz = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    const int threads = 1024, blocks = 2 * sms, iters = 4096;
    float *out = nullptr;
    if (cudaMalloc(&out, sizeof(float) * blocks * threads) != cudaSuccess) {
        fprintf(stderr, "exp2_rate: no device memory\n");
        return 1;
    }
    const float ms[kForms] = {time_form<kMufu>(out, blocks, threads, iters),
                              time_form<kHalf2>(out, blocks, threads, iters),
                              time_form<kFma>(out, blocks, threads, iters),
                              time_form<kQuarterFma>(out, blocks, threads, iters),
                              time_form<kHalfFma>(out, blocks, threads, iters)};
    for (int f = 0; f < kForms; ++f) {
        const double elems = (double)blocks * threads * iters * 8 * (f == kHalf2 ? 2 : 1);
        printf("%-20s %8.3f ms %7.2f exponentials a clock an SM (%d SMs at the rated %d MHz)\n",
               kNames[f], ms[f], elems / (ms[f] * 1e-3) / sms / (khz * 1e3), sms, khz / 1000);
    }
    cudaFree(out);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
