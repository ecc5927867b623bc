/*
 * The CUDA driver API, loaded lazily with dlopen("libcuda.so.1") the first
 * time something needs a GPU, so that fijit links and runs (compile-only) on
 * machines with no driver. Each call passes the fault check of class
 * FI_FAULT_DRIVER first.
 */
#ifndef FI_CUDA_DRV_H
#define FI_CUDA_DRV_H

#include <cuda.h>

typedef struct fi_cuda_api {
    CUresult (*Init)(unsigned int);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*CtxSynchronize)(void);
    /* Optional (NULL on drivers without it, before CUDA 12): TMA descriptors. */
    CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                     const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                     const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
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
 * tensor of 16-bit elements {cols, heads, rows} at `base` (innermost first;
 * strides in elements), read in boxes of {64, 1, box_rows} with the 128-byte
 * swizzle; elements past the tensor read as zero. FI_EUNSUPPORTED (with a
 * message) when the driver lacks TMA or the tensor does not suit it (base
 * not 16-byte aligned, a stride not a multiple of 16 bytes). */
int fi__cuda_tma_map_3d(void *out, const void *base, int cols, int heads, int rows,
                        long long stride_h, long long stride_n, int box_rows);
/* The same for paged K/V: a 4-D map {cols, heads, page_size, pages} of a
 * page pool (strides in elements), box {64, 1, page_size, 1}. */
int fi__cuda_tma_map_paged(void *out, const void *base, int cols, int heads, int page_size,
                           long long stride_h, long long stride_n, long long stride_page);

#endif
