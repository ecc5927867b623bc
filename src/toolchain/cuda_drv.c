/*
 * Lazy loader for the CUDA driver API (see cuda_drv.h). Nothing here runs
 * until a GPU is needed, so compile-only hosts never touch libcuda.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "toolchain/cuda_drv.h"
#include "common/dynlib.h"
#include "common/error.h"
#include "common/sys.h"

static fi_cuda_api api;
static int api_status = FI_ENODEVICE;
static char api_error[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void load_api(void)
{
    /* Every entry of FI_CUDA_API, in its order; a missing optional one stays NULL. */
#define ROW(name, symbol, required, params) {symbol, offsetof(fi_cuda_api, name), required},
    static const fi_dynlib_sym syms[] = {FI_CUDA_API(ROW)};
#undef ROW
    static const char *const names[] = {"libcuda.so.1", NULL};
    char why[320];
    if (fi__dynlib_load(&api, syms, sizeof syms / sizeof syms[0], names, why, sizeof why) < 0) {
        snprintf(api_error, sizeof api_error, "no usable CUDA driver: %s", why);
        return;
    }
    CUresult res = api.Init(0);
    if (res != CUDA_SUCCESS) {
        const char *text = NULL;
        api.GetErrorString(res, &text);
        snprintf(api_error, sizeof api_error, "cuInit failed: %s", text ? text : "unknown error");
        return;
    }
    api_status = 0;
}

int fi__cuda_load(const fi_cuda_api **out)
{
    pthread_once(&api_once, load_api);
    if (api_status < 0 || fi__fault(FI_FAULT_DRIVER))
        return fi__error(FI_ENODEVICE, "%s", api_status < 0 ? api_error : "injected driver fault");
    *out = &api;
    return 0;
}

int fi__cuda_error(int code, CUresult res, const char *what)
{
    const char *text = NULL;
    if (api.GetErrorString) api.GetErrorString(res, &text);
    return fi__error(code, "%s failed: %s (CUresult %d)", what, text ? text : "unknown error",
                     (int)res);
}

int fi__cuda_current_context(CUcontext *out, uint64_t *out_id)
{
    const fi_cuda_api *cu;
    CUcontext ctx = NULL;
    unsigned long long id = 0;
    CUresult res;
    int rc;
    if ((rc = fi__cuda_load(&cu)) < 0) return rc;
    if ((res = cu->CtxGetCurrent(&ctx)) != CUDA_SUCCESS)
        return fi__cuda_error(FI_ENODEVICE, res, "cuCtxGetCurrent");
    if (!ctx)
        return fi__error(FI_ENODEVICE, "no current CUDA context on this thread (make one current first)");
    if (!cu->CtxGetId) id = (uint64_t)(uintptr_t)ctx;
    else if ((res = cu->CtxGetId(ctx, &id)) != CUDA_SUCCESS)
        return fi__cuda_error(FI_ENODEVICE, res, "cuCtxGetId (was the current context destroyed?)");
    *out = ctx;
    *out_id = id;
    return 0;
}

int fi__cuda_sm_count(int *out)
{
    const fi_cuda_api *cu;
    CUdevice dev;
    CUresult res;
    int rc;
    if ((rc = fi__cuda_load(&cu)) < 0) return rc;
    if ((res = cu->CtxGetDevice(&dev)) != CUDA_SUCCESS)
        return fi__cuda_error(FI_ENODEVICE, res, "cuCtxGetDevice (is a CUDA context current?)");
    if ((res = cu->DeviceGetAttribute(out, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) !=
        CUDA_SUCCESS)
        return fi__cuda_error(FI_ENODEVICE, res, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    return 0;
}

int fi__cuda_launch(CUfunction f, unsigned gx, unsigned gy, const unsigned block[3],
                    unsigned smem, CUstream stream, void *params, const char *who)
{
    void *args[] = {params};
    return fi__cuda_launch_args(f, gx, gy, block, smem, stream, args, who);
}

/* Encode a tiled map of `type` elements, `rank` dimensions innermost first
 * (dims[0] contiguous), 128-byte swizzle. */
static int tma_map(void *out, const void *base, CUtensorMapDataType type, int rank,
                   const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box)
{
    const fi_cuda_api *cu;
    int rc;
    if ((rc = fi__cuda_load(&cu)) < 0) return rc;
    if (!cu->TensorMapEncodeTiled)
        return fi__error(FI_EUNSUPPORTED, "the CUDA driver has no cuTensorMapEncodeTiled");
    if ((uintptr_t)base % 16 != 0) return fi__error(FI_EUNSUPPORTED, "TMA needs a 16-byte aligned base");
    for (int i = 0; i + 1 < rank; i++)
        if (strides[i] == 0 || strides[i] % 16 != 0)
            return fi__error(FI_EUNSUPPORTED, "TMA needs 16-byte aligned rows and strides");
    const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
    CUresult res = cu->TensorMapEncodeTiled(
        (CUtensorMap *)out, type, (cuuint32_t)rank, (void *)base, dims, strides, box, unit,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (res != CUDA_SUCCESS) return fi__cuda_error(FI_EUNSUPPORTED, res, "cuTensorMapEncodeTiled");
    return 0;
}

int fi__cuda_tma_map_3d(void *out, const void *base, int elem_bytes, int cols, int heads, int rows,
                        long long stride_h, long long stride_n, int box_heads, int box_rows)
{
    /* A single head or row needs no stride; TMA still wants one. */
    if (heads <= 1) stride_h = cols;
    if (rows <= 1) stride_n = (long long)cols * heads;
    if (stride_h <= 0 || stride_n <= 0 || rows <= 0)
        return fi__error(FI_EUNSUPPORTED, "TMA needs positive strides and rows");
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)heads, (cuuint64_t)rows};
    if (elem_bytes != 1 && elem_bytes != 2)
        return fi__error(FI_EUNSUPPORTED, "TMA maps here take 1- or 2-byte elements");
    const cuuint64_t strides[2] = {(cuuint64_t)(stride_h * elem_bytes),
                                   (cuuint64_t)(stride_n * elem_bytes)};
    /* A box row is one 128-byte swizzle row. */
    const cuuint32_t box[3] = {128u / (cuuint32_t)elem_bytes, (cuuint32_t)box_heads,
                               (cuuint32_t)box_rows};
    const CUtensorMapDataType type =
        elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16;
    return tma_map(out, base, type, 3, dims, strides, box);
}

int fi__cuda_tma_map_paged(void *out, const void *base, int cols, int heads, int page_size,
                           int box_rows, long long stride_h, long long stride_n,
                           long long stride_page, int coords[3])
{
    if (heads <= 1) stride_h = cols;
    if (stride_h <= 0 || stride_n <= 0 || stride_page <= 0)
        return fi__error(FI_EUNSUPPORTED, "TMA needs positive strides");
    if (cols % 64 != 0 || page_size % 8 != 0 || box_rows < 8 || box_rows % 8 != 0 ||
        page_size % box_rows != 0 || box_rows / 8 > 256)
        return fi__error(FI_EUNSUPPORTED, "paged TMA needs 64-column panels and boxes of 8-row "
                                          "groups that divide the page");
    const int panels = cols / 64;
    /* The head joins the panel coordinate where heads are contiguous, else
     * the page coordinate where a page holds whole heads. */
    const int in_panels = stride_h == cols;
    if (!in_panels && stride_page != (long long)heads * stride_h)
        return fi__error(FI_EUNSUPPORTED, "paged TMA needs contiguous heads (stride_h == head_dim) "
                                          "or pages of whole heads (stride_page == heads x stride_h)");
    coords[0] = in_panels ? panels : 0;
    coords[1] = in_panels ? 1 : heads;
    coords[2] = in_panels ? 0 : 1;
    /* Page ids are the caller's (any int); the map's extent only bounds them. */
    const cuuint64_t dims[5] = {64, 8, (cuuint64_t)(in_panels ? heads * panels : panels),
                                (cuuint64_t)page_size / 8, (cuuint64_t)INT_MAX};
    const cuuint64_t strides[4] = {(cuuint64_t)stride_n * 2, 128, (cuuint64_t)stride_n * 16,
                                   (cuuint64_t)(in_panels ? stride_page : stride_h) * 2};
    const cuuint32_t box[5] = {64, 8, (cuuint32_t)panels, (cuuint32_t)box_rows / 8, 1};
    return tma_map(out, base, CU_TENSOR_MAP_DATA_TYPE_UINT16, 5, dims, strides, box);
}

int fi__cuda_launch_args(CUfunction f, unsigned gx, unsigned gy, const unsigned block[3],
                         unsigned smem, CUstream stream, void **args, const char *who)
{
    const fi_cuda_api *cu;
    CUresult res;
    char what[96];
    int rc;
    if ((rc = fi__cuda_load(&cu)) < 0) return rc;
    if (smem > 48 * 1024) {
        /* Cheap and idempotent, so done at every launch rather than tracked. */
        res = cu->FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
        if (res != CUDA_SUCCESS) {
            snprintf(what, sizeof what, "%s: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", who);
            return fi__cuda_error(FI_ECUDA, res, what);
        }
    }
    res = cu->LaunchKernel(f, gx, gy, 1, block[0], block[1], block[2], smem, stream, args, NULL);
    if (res != CUDA_SUCCESS) {
        snprintf(what, sizeof what, "%s: cuLaunchKernel", who);
        return fi__cuda_error(FI_ECUDA, res, what);
    }
    return 0;
}

int fi__cuda_current_arch(char out[16], CUcontext *out_ctx, CUdevice *out_dev)
{
    const fi_cuda_api *cu;
    CUcontext ctx = NULL;
    CUdevice dev;
    int major = 0, minor = 0, rc;
    CUresult res;
    if ((rc = fi__cuda_load(&cu)) < 0) return rc;
    if ((res = cu->CtxGetCurrent(&ctx)) != CUDA_SUCCESS) return fi__cuda_error(FI_ENODEVICE, res, "cuCtxGetCurrent");
    if (!ctx)
        return fi__error(FI_ENODEVICE,
                         "no current CUDA context on this thread (make one current, e.g. with cuDevicePrimaryCtxRetain + cuCtxSetCurrent)");
    if ((res = cu->CtxGetDevice(&dev)) != CUDA_SUCCESS) return fi__cuda_error(FI_ENODEVICE, res, "cuCtxGetDevice");
    if ((res = cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) ||
        (res = cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)))
        return fi__cuda_error(FI_ENODEVICE, res, "cuDeviceGetAttribute(compute capability)");
    /* Hopper's wgmma/setmaxnreg need the arch-specific target. */
    snprintf(out, 16, "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
    if (out_ctx) *out_ctx = ctx;
    if (out_dev) *out_dev = dev;
    return 0;
}
