/*
 * The control interface of tests/fake_cuda.c, a stand-in for the CUDA driver
 * (libcuda.so.1) that CPU tests load before fijit does, so that the launch
 * paths of every kernel kind run without a GPU.
 *
 * Its device is an H100 as the launch code sees one: compute capability 9.0,
 * 132 SMs, 227 KiB of opt-in shared memory per block. "Device memory" is host
 * memory (cuMemAlloc is aligned_alloc), so a test can read what fijit copied
 * to the device. Modules must be ELF images that contain the names of the
 * functions asked of them. Launches are checked as the driver checks them
 * (dynamic shared memory above 48 KiB needs the function's opt-in, block and
 * grid limits), then handed to the test's hook; nothing is executed.
 *
 * Devices and contexts: one device unless a test asks for more (up to
 * FAKE_CUDA_MAX_DEVICES, all alike), each with a primary context; more come
 * from cuCtxCreate_v2 and go with cuCtxDestroy_v2, which unloads their
 * modules and lets the next cuCtxCreate reuse the handle (real drivers do),
 * while cuCtxGetId gives every context a number never reused. A module
 * belongs to the context current when it was loaded: its functions launch
 * only there (else CUDA_ERROR_INVALID_HANDLE) and it unloads only there.
 *
 * Libraries (context-independent loading, CUDA 12.0+): cuLibraryLoadData
 * needs no context and copies the image; cuLibraryGetKernel gives one kernel
 * per name; cuKernelGetFunction gives the kernel's function in the current
 * context (the same handle each time there), which launches only there and
 * goes when that context is destroyed, the library staying; cuLibraryUnload
 * takes its kernels and functions from every context. cuKernelSetAttribute's
 * dynamic shared memory opt-in holds for every context of its device, and a
 * function's own (cuFuncSetAttribute) overrides it. Built with
 * -DFAKE_CUDA_NO_LIBRARIES the fake exports none of these, as a driver
 * before CUDA 12 (build/tests/cuda11/libcuda.so.1).
 */
#ifndef FI_FAKE_CUDA_H
#define FI_FAKE_CUDA_H

#include <cuda.h>

#define FAKE_CUDA_SM_COUNT 132
#define FAKE_CUDA_MAX_DEVICES 8
#define FAKE_CUDA_SMEM_OPTIN_MAX (227 * 1024)
/* cuMemGetInfo's total per device; the free part is that less the loaded
 * code: each module's image in its context's device, each library's in
 * every context it has a function in. */
#define FAKE_CUDA_MEMORY_BYTES ((size_t)80 << 30)

typedef struct fake_cuda_launch {
    const char *name;         /* the kernel's entry name */
    unsigned grid[3], block[3];
    unsigned smem;            /* dynamic shared memory bytes */
    CUstream stream;
    void *const *params;      /* the launch's kernelParams (valid during the hook) */
} fake_cuda_launch;

/* Called for every launch that passes the checks; what it returns is what
 * cuLaunchKernel returns (a test injects launch failures this way). */
typedef CUresult (*fake_cuda_launch_hook)(const fake_cuda_launch *launch, void *user);

/* cuTensorMapEncodeTiled checks its arguments as the driver documents them
 * (rank 1-5, a 16-byte aligned address, strides multiples of 16 bytes, box
 * sides 1-256, a swizzled box's inner side within the swizzle span) and
 * writes what it was given into the map's words, for tests to read back. */
enum {
    FAKE_TMA_ADDRESS = 0,  /* global address */
    FAKE_TMA_DIMS = 1,     /* 5 words: sizes, innermost first (0 past the rank) */
    FAKE_TMA_STRIDES = 6,  /* 4 words: byte strides of dims 1-4 */
    FAKE_TMA_BOX = 10,     /* 5 words */
    FAKE_TMA_SWIZZLE = 15, /* CUtensorMapSwizzle */
};

/* Exported by the fake; look them up with dlsym on its handle. */
typedef void (*fake_cuda_set_launch_hook_fn)(fake_cuda_launch_hook hook, void *user);
typedef int (*fake_cuda_launch_count_fn)(void);
/* Calls so far that a stream capture (CUDA graphs) would not allow: memory
 * allocation and copies, memsets, synchronisation, module and library loads. */
typedef int (*fake_cuda_uncapturable_calls_fn)(void);
/* Make the n-th fallible driver call from now (n >= 1; 0 disarms) return
 * `error`; fake_cuda_fault_fired says whether it has happened. */
typedef void (*fake_cuda_fail_call_fn)(int n, CUresult error);
typedef int (*fake_cuda_fault_fired_fn)(void);
/* Devices cuDeviceGetCount reports from now (1 to FAKE_CUDA_MAX_DEVICES). */
typedef void (*fake_cuda_set_device_count_fn)(int n);
/* The context a function's module was loaded into; NULL: not a live function. */
typedef CUcontext (*fake_cuda_function_context_fn)(CUfunction f);
/* Code images loaded in `context` now: its modules, and the libraries that
 * have a function there. */
typedef int (*fake_cuda_modules_in_fn)(CUcontext context);
/* Libraries loaded in the process now. */
typedef int (*fake_cuda_libraries_loaded_fn)(void);
/* Successful calls so far of `entry`, one of cuLibraryLoadData,
 * cuLibraryUnload, cuLibraryGetKernel, cuKernelGetFunction,
 * cuKernelSetAttribute, cuModuleLoadData, cuModuleUnload, cuFuncSetAttribute
 * (-1: not one of them). */
typedef int (*fake_cuda_calls_fn)(const char *entry);
/* Make the next call of `entry` (one of fake_cuda_calls' but the unloads)
 * return `error`, once; -1 for another name. */
typedef int (*fake_cuda_fail_next_fn)(const char *entry, CUresult error);

#endif
