/*
 * fijit_cache.h's device calls: the few driver operations a program without a
 * CUDA runtime of its own needs to run a kernel fijit built (the CLI's demo,
 * the quick start), over the library's lazily opened driver table.
 */
#include <stdint.h>

#include "common/error.h"
#include "fijit_cache.h"
#include "toolchain/cuda_drv.h"

/* The driver table, or FI_ENODEVICE with the loader's words. */
#define LOAD_DRIVER(cu)                                                        \
    const fi_cuda_api *cu = NULL;                                              \
    do {                                                                       \
        int load_rc__ = fi__cuda_load(&cu);                                    \
        if (load_rc__ < 0) return load_rc__;                                   \
    } while (0)

static CUdeviceptr device_ptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

int fi_device_count(int *out)
{
    if (!out) return fi__error(FI_EINVALID, "fi_device_count: out is NULL");
    *out = 0;
    LOAD_DRIVER(cu);
    CUresult res = cu->DeviceGetCount(out);
    return res == CUDA_SUCCESS ? 0 : fi__cuda_error(FI_ENODEVICE, res, "counting CUDA devices");
}

int fi_device_use(int ordinal)
{
    int count = 0, rc = fi_device_count(&count);
    if (rc < 0) return rc;
    if (ordinal < 0 || ordinal >= count)
        return fi__error(FI_ENODEVICE, "no CUDA device %d (the driver sees %d)", ordinal, count);
    LOAD_DRIVER(cu);
    CUdevice dev;
    CUcontext ctx;
    CUresult res;
    if ((res = cu->DeviceGet(&dev, ordinal)) != CUDA_SUCCESS ||
        (res = cu->DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS ||
        (res = cu->CtxSetCurrent(ctx)) != CUDA_SUCCESS)
        return fi__cuda_error(FI_ECUDA, res, "making the device's primary context current");
    return 0;
}

int fi_device_alloc(void **out, size_t bytes)
{
    if (!out) return fi__error(FI_EINVALID, "fi_device_alloc: out is NULL");
    *out = NULL;
    LOAD_DRIVER(cu);
    CUdeviceptr p = 0;
    CUresult res = cu->MemAlloc(&p, bytes ? bytes : 1);
    if (res != CUDA_SUCCESS) return fi__cuda_error(FI_ECUDA, res, "allocating device memory");
    *out = (void *)(uintptr_t)p;
    return 0;
}

void fi_device_free(void *ptr)
{
    const fi_cuda_api *cu = NULL;
    if (ptr && fi__cuda_load(&cu) == 0) cu->MemFree(device_ptr(ptr));
}

int fi_device_upload(void *device_dst, const void *host_src, size_t bytes)
{
    if (!device_dst || (!host_src && bytes))
        return fi__error(FI_EINVALID, "fi_device_upload: NULL pointer");
    LOAD_DRIVER(cu);
    CUresult res = cu->MemcpyHtoD(device_ptr(device_dst), host_src, bytes);
    return res == CUDA_SUCCESS ? 0 : fi__cuda_error(FI_ECUDA, res, "copying to the device");
}

int fi_device_download(void *host_dst, const void *device_src, size_t bytes)
{
    if (!device_src || (!host_dst && bytes))
        return fi__error(FI_EINVALID, "fi_device_download: NULL pointer");
    LOAD_DRIVER(cu);
    CUresult res = cu->MemcpyDtoH(host_dst, device_ptr(device_src), bytes);
    return res == CUDA_SUCCESS ? 0 : fi__cuda_error(FI_ECUDA, res, "copying from the device");
}

int fi_device_synchronize(void)
{
    LOAD_DRIVER(cu);
    CUresult res = cu->CtxSynchronize();
    return res == CUDA_SUCCESS ? 0 : fi__cuda_error(FI_ECUDA, res, "waiting for the device");
}

int fi_cuda_driver_version(int *out)
{
    if (!out) return fi__error(FI_EINVALID, "fi_cuda_driver_version: out is NULL");
    *out = 0;
    LOAD_DRIVER(cu);
    CUresult res = cu->DriverGetVersion(out);
    return res == CUDA_SUCCESS ? 0 : fi__cuda_error(FI_ECUDA, res, "asking the driver's version");
}
