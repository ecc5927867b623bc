/*
 * The CUDA driver API, loaded lazily with dlopen("libcuda.so.1") the first
 * time something needs a GPU, so that fijit links and runs (compile-only) on
 * machines with no driver. Each call passes the fault check of class
 * FI_FAULT_DRIVER first.
 */
#ifndef FI_CUDA_DRV_H
#define FI_CUDA_DRV_H

#include <cuda.h>
#include <stdint.h>

#include "fijit_cache.h"

/* Every driver call goes through this one table (as SQLite's aSyscall[]):
 * it gives the lazy dlopen and a single place where tests put a fake driver
 * (tests/fake_cuda.c, loaded as libcuda.so.1). Programs outside the library
 * reach the driver through fijit_cache.h's fi_device_* calls. */
/* The driver's entry points fijit calls, one line each: X(name, symbol,
 * required, parameters). `name` is the field of fi_cuda_api (cu<name> in
 * cuda.h), `symbol` the versioned name cuda.h maps that macro to; an
 * optional entry (required 0) is NULL on drivers without it. The struct and
 * the loader (cuda_drv.c) are both made from this list. */
#define FI_CUDA_API(X)                                                                     \
    X(Init, "cuInit", 1, (unsigned int))                                                   \
    X(DriverGetVersion, "cuDriverGetVersion", 1, (int *))                                  \
    X(GetErrorString, "cuGetErrorString", 1, (CUresult, const char **))                    \
    X(CtxGetCurrent, "cuCtxGetCurrent", 1, (CUcontext *))                                  \
    X(CtxGetDevice, "cuCtxGetDevice", 1, (CUdevice *))                                     \
    X(CtxSetCurrent, "cuCtxSetCurrent", 1, (CUcontext))                                    \
    X(DeviceGet, "cuDeviceGet", 1, (CUdevice *, int))                                      \
    X(DeviceGetCount, "cuDeviceGetCount", 1, (int *))                                      \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", 1, (int *, CUdevice_attribute, CUdevice)) \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1, (CUcontext *, CUdevice))      \
    X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1, (CUdevice))              \
    X(ModuleLoadData, "cuModuleLoadData", 1, (CUmodule *, const void *))                   \
    X(ModuleUnload, "cuModuleUnload", 1, (CUmodule))                                       \
    X(ModuleGetFunction, "cuModuleGetFunction", 1, (CUfunction *, CUmodule, const char *)) \
    X(FuncGetAttribute, "cuFuncGetAttribute", 1, (int *, CUfunction_attribute, CUfunction)) \
    X(FuncSetAttribute, "cuFuncSetAttribute", 1, (CUfunction, CUfunction_attribute, int))  \
    X(LaunchKernel, "cuLaunchKernel", 1,                                                   \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,    \
       CUstream, void **, void **))                                                        \
    X(MemAlloc, "cuMemAlloc_v2", 1, (CUdeviceptr *, size_t))                               \
    X(MemFree, "cuMemFree_v2", 1, (CUdeviceptr))                                           \
    X(MemcpyHtoD, "cuMemcpyHtoD_v2", 1, (CUdeviceptr, const void *, size_t))               \
    X(MemcpyDtoH, "cuMemcpyDtoH_v2", 1, (void *, CUdeviceptr, size_t))                     \
    X(MemsetD8, "cuMemsetD8_v2", 1, (CUdeviceptr, unsigned char, size_t))                  \
    X(StreamSynchronize, "cuStreamSynchronize", 1, (CUstream))                             \
    X(CtxSynchronize, "cuCtxSynchronize", 1, (void))                                       \
    /* TMA descriptors: drivers before CUDA 12 lack it. */                                 \
    X(TensorMapEncodeTiled, "cuTensorMapEncodeTiled", 0,                                   \
      (CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,         \
       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,  \
       CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill))               \
    /* Entries added since 0.2.0 come last, so that earlier fields keep their offsets. */ \
    /* A context's number, never reused in the process (handles are): CUDA 12.0+. */        \
    X(CtxGetId, "cuCtxGetId", 0, (CUcontext, unsigned long long *))                        \
    /* Whether a device's primary context is active (fi_jit_ctx_free's liveness test). */   \
    X(DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 0,                           \
      (CUdevice, unsigned int *, int *))                                                   \
    /* Zeroes single prefill's block-claim counter on the launch's stream (capturable). */  \
    X(MemsetD32Async, "cuMemsetD32Async", 0, (CUdeviceptr, unsigned int, size_t, CUstream)) \
    /* Context-independent loading (CUDA 12.0+, core/load.h): a library loaded once per  */ \
    /* process, a kernel per entry, a function per context, attributes per device.      */ \
    X(LibraryLoadData, "cuLibraryLoadData", 0,                                             \
      (CUlibrary *, const void *, CUjit_option *, void **, unsigned int, CUlibraryOption *, \
       void **, unsigned int))                                                             \
    X(LibraryUnload, "cuLibraryUnload", 0, (CUlibrary))                                    \
    X(LibraryGetKernel, "cuLibraryGetKernel", 0, (CUkernel *, CUlibrary, const char *))    \
    X(KernelGetFunction, "cuKernelGetFunction", 0, (CUfunction *, CUkernel))               \
    X(KernelSetAttribute, "cuKernelSetAttribute", 0,                                       \
      (CUfunction_attribute, int, CUkernel, CUdevice))

typedef struct fi_cuda_api {
#define FI_CUDA_FIELD(name, symbol, required, params) CUresult(*name) params;
    FI_CUDA_API(FI_CUDA_FIELD)
#undef FI_CUDA_FIELD
} fi_cuda_api;

/* Load the driver once (thread-safe). FI_ENODEVICE with a message when
 * libcuda cannot be loaded or cuInit fails. */
int fi__cuda_load(const fi_cuda_api **out);

/* Turn a failed driver call into an fi_error with the driver's message:
 * `return fi__cuda_error(FI_ELOAD, res, "cuModuleLoadData")`. */
int fi__cuda_error(int code, CUresult res, const char *what);

/* Compute capability of the current context's device as an arch name
 * ("sm_90a" for 9.0, "sm_80", ...). */
int fi__cuda_current_arch(char out[16], CUcontext *out_ctx, CUdevice *out_dev);

/* The current context and its id: cuCtxGetId's number, unique for the
 * process's life, so that a context destroyed and a new one given the same
 * handle (drivers reuse them) are told apart; the handle itself where the
 * driver predates cuCtxGetId (CUDA 11). FI_ENODEVICE when none is current. */
int fi__cuda_current_context(CUcontext *out, uint64_t *out_id);

/* SM count of the current context's device. */
int fi__cuda_sm_count(int *out);

/* Launch `f` on `stream` with one parameter block: grid (gx, gy), `block`,
 * `smem` bytes of dynamic shared memory, opted into when above the 48 KiB a
 * kernel gets by default. Errors begin with `who` ("decode", ...). */
int fi__cuda_launch(CUfunction f, unsigned gx, unsigned gy, const unsigned block[3],
                    unsigned smem, CUstream stream, void *params, const char *who);
/* The same with the kernel's parameter list `args` (cuLaunchKernel's kernelParams). */
int fi__cuda_launch_args(CUfunction f, unsigned gx, unsigned gy, const unsigned block[3],
                         unsigned smem, CUstream stream, void **args, const char *who);

/* Encode a TMA descriptor (`out`, 128 bytes, 64-byte aligned) of the 3-D
 * tensor of elem_bytes-byte elements (2, or 1 for fp8) {cols, heads, rows}
 * at `base` (innermost first; strides in elements), read in boxes of {128
 * bytes of columns, box_heads, box_rows} with the 128-byte swizzle; elements
 * past the tensor read as zero. FI_EUNSUPPORTED (with a message) when the
 * driver lacks TMA or the tensor does not suit it (base not 16-byte aligned,
 * a stride not a multiple of 16 bytes). */
int fi__cuda_tma_map_3d(void *out, const void *base, int elem_bytes, int cols, int heads, int rows,
                        long long stride_h, long long stride_n, int box_heads, int box_rows);
/* The same for paged K/V (strides in elements): a 5-D map of a page pool,
 * one box `box_rows` rows of a page (a multiple of 8 that divides
 * page_size) that lands as 8-row groups of every 64-column panel
 * (prefill/params.h). The kv head is folded into the panel coordinate when
 * heads are contiguous, else into the page one when a page holds whole
 * heads: head h of page g is at panel coordinate h * coords[0] and page
 * coordinate g * coords[1] + h * coords[2]. Other layouts are
 * FI_EUNSUPPORTED. */
int fi__cuda_tma_map_paged(void *out, const void *base, int cols, int heads, int page_size,
                           int box_rows, long long stride_h, long long stride_n,
                           long long stride_page, int coords[3]);

#endif
