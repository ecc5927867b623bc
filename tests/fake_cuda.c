/*
 * A fake CUDA driver for the CPU tests (see fake_cuda.h): the entry points
 * fijit loads from libcuda.so.1 (src/toolchain/cuda_drv.c), built as a shared library
 * with that soname. A test dlopens it by path before fijit's first driver
 * call; fijit's dlopen("libcuda.so.1") then finds it already loaded.
 */
#include <elf.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

#define API __attribute__((visibility("default")))
#define MAX_MODULES 64
#define MAX_LIBRARIES 64
#define MAX_KERNELS 256
#define MAX_FUNCTIONS 256
#define STATIC_SMEM_LIMIT (48 * 1024) /* dynamic shared memory without the opt-in */
/* Slots 0..FAKE_CUDA_MAX_DEVICES-1 are the devices' primary contexts; the
 * rest serve cuCtxCreate, first free slot first, so a destroyed context's
 * handle comes back for the next one made, as real drivers' handles do. */
#define MAX_CONTEXTS (FAKE_CUDA_MAX_DEVICES + 16)

typedef struct fake_context {
    int live;
    CUdevice device;
    unsigned long long id; /* cuCtxGetId: never reused */
} fake_context;

typedef struct fake_module {
    int loaded;
    const unsigned char *image;
    size_t size;
    fake_context *context; /* where it was loaded */
} fake_module;

/* A library (cuLibraryLoadData): loaded once, for no context in particular. */
typedef struct fake_library {
    int loaded;
    const unsigned char *image;
    size_t size;
} fake_library;

typedef struct fake_kernel {
    fake_library *library;    /* NULL: slot free */
    char name[128];
    int max_dynamic_smem[FAKE_CUDA_MAX_DEVICES]; /* cuKernelSetAttribute's, per device */
} fake_kernel;

/* A function of a module (module set) or a library kernel's function in one
 * context (kernel and context set); neither: slot free. */
typedef struct fake_function {
    fake_module *module;
    fake_kernel *kernel;
    fake_context *context;    /* the kernel's function's context */
    char name[128];
    int max_dynamic_smem;     /* cuFuncSetAttribute's; -1: the kernel's for the device */
} fake_function;

/* Entry points whose successful calls are counted and which a test can make
 * fail by name (fake_cuda_calls, fake_cuda_fail_next). */
enum {
    CALL_LIBRARY_LOAD_DATA, CALL_LIBRARY_UNLOAD, CALL_LIBRARY_GET_KERNEL, CALL_KERNEL_GET_FUNCTION,
    CALL_KERNEL_SET_ATTRIBUTE, CALL_MODULE_LOAD_DATA, CALL_MODULE_UNLOAD, CALL_FUNC_SET_ATTRIBUTE,
    CALL_COUNT
};
static const char *const call_names[CALL_COUNT] = {
    "cuLibraryLoadData", "cuLibraryUnload", "cuLibraryGetKernel", "cuKernelGetFunction",
    "cuKernelSetAttribute", "cuModuleLoadData", "cuModuleUnload", "cuFuncSetAttribute",
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fake_module modules[MAX_MODULES];
static fake_library libraries[MAX_LIBRARIES];
static fake_function functions[MAX_FUNCTIONS];
static int calls[CALL_COUNT];             /* successful calls per counted entry */
static CUresult fail_next[CALL_COUNT];    /* != CUDA_SUCCESS: the next call returns it */
static fake_cuda_launch_hook launch_hook;
static void *launch_hook_user;
static int launches;
static int uncapturable; /* see fake_cuda_uncapturable_calls */
static int fault_countdown; /* > 0: the countdown-th fallible call from now fails */
static CUresult fault_error;
static int fault_fired;
static int device_count = 1; /* fake_cuda_set_device_count */
static fake_context contexts[MAX_CONTEXTS];
static unsigned long long next_context_id = 1;
static __thread CUcontext current_context;

API void fake_cuda_set_launch_hook(fake_cuda_launch_hook hook, void *user)
{
    pthread_mutex_lock(&lock);
    launch_hook = hook;
    launch_hook_user = user;
    pthread_mutex_unlock(&lock);
}

/* Launches that passed the checks so far. */
API int fake_cuda_launch_count(void)
{
    pthread_mutex_lock(&lock);
    const int n = launches;
    pthread_mutex_unlock(&lock);
    return n;
}

API int fake_cuda_uncapturable_calls(void)
{
    pthread_mutex_lock(&lock);
    const int n = uncapturable;
    pthread_mutex_unlock(&lock);
    return n;
}

API void fake_cuda_fail_call(int n, CUresult error)
{
    pthread_mutex_lock(&lock);
    fault_countdown = n;
    fault_error = error;
    fault_fired = 0;
    pthread_mutex_unlock(&lock);
}

API int fake_cuda_fault_fired(void)
{
    pthread_mutex_lock(&lock);
    const int fired = fault_fired;
    pthread_mutex_unlock(&lock);
    return fired;
}

static int call_index(const char *entry)
{
    for (int i = 0; entry && i < CALL_COUNT; i++)
        if (strcmp(call_names[i], entry) == 0) return i;
    return -1;
}

API int fake_cuda_calls(const char *entry)
{
    const int i = call_index(entry);
    if (i < 0) return -1;
    pthread_mutex_lock(&lock);
    const int n = calls[i];
    pthread_mutex_unlock(&lock);
    return n;
}

API int fake_cuda_fail_next(const char *entry, CUresult error)
{
    const int i = call_index(entry);
    if (i < 0) return -1;
    pthread_mutex_lock(&lock);
    fail_next[i] = error;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* The failure armed for entry `i` by fake_cuda_fail_next (once), else success. */
static CUresult failure_armed(int i)
{
    pthread_mutex_lock(&lock);
    const CUresult res = fail_next[i];
    fail_next[i] = CUDA_SUCCESS;
    pthread_mutex_unlock(&lock);
    return res;
}

#define NAMED_FAULT_POINT(i)                                                   \
    do {                                                                       \
        const CUresult named__ = failure_armed(i);                             \
        if (named__ != CUDA_SUCCESS) return named__;                           \
    } while (0)

/* The armed fault, when this call is the one it is for. Every entry point
 * fijit can see fail counts, except cuInit (called once per process),
 * cuGetErrorString, and the releases (cuModuleUnload, cuMemFree), whose
 * failure the fake could only model by leaking. */
static CUresult injected_fault(void)
{
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (fault_countdown > 0 && --fault_countdown == 0) {
        res = fault_error;
        fault_fired = 1;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

#define FAULT_POINT()                                                          \
    do {                                                                       \
        const CUresult fault__ = injected_fault();                             \
        if (fault__ != CUDA_SUCCESS) return fault__;                           \
    } while (0)

static void count_uncapturable(void)
{
    pthread_mutex_lock(&lock);
    uncapturable++;
    pthread_mutex_unlock(&lock);
}

/* ---- driver, device and context --------------------------------------------- */

API CUresult cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* NVRTC opens libcuda.so.1 too when it can and asks for the driver's
 * private tables, which a fake has none of. */
API CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    (void)id;
    *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuDriverGetVersion(int *version)
{
    FAULT_POINT();
    *version = 13000;
    return CUDA_SUCCESS;
}

API CUresult cuGetErrorString(CUresult error, const char **text)
{
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *text = "invalid device context"; break;
    case CUDA_ERROR_INVALID_IMAGE: *text = "device kernel image is invalid"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "named symbol not found"; break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *text = "too many resources requested for launch"; break;
    default: *text = "unknown error (fake driver)"; break;
    }
    return CUDA_SUCCESS;
}

static int device_valid(CUdevice device)
{
    pthread_mutex_lock(&lock);
    const int valid = device >= 0 && device < device_count;
    pthread_mutex_unlock(&lock);
    return valid;
}

API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    FAULT_POINT();
    if (!device_valid(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *count)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    *count = device_count;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device)
{
    FAULT_POINT();
    if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = FAKE_CUDA_SM_COUNT; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = FAKE_CUDA_SMEM_OPTIN_MAX; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

API void fake_cuda_set_device_count(int n)
{
    pthread_mutex_lock(&lock);
    device_count = n < 1 ? 1 : n > FAKE_CUDA_MAX_DEVICES ? FAKE_CUDA_MAX_DEVICES : n;
    pthread_mutex_unlock(&lock);
}

/* The live context behind a handle, or NULL; called with the lock held. */
static fake_context *context_of(CUcontext c)
{
    fake_context *ctx = (fake_context *)(void *)c;
    return ctx >= contexts && ctx < contexts + MAX_CONTEXTS && ctx->live ? ctx : NULL;
}

/* The current context if it is still live (NULL otherwise); lock held. */
static fake_context *current_of_thread(void) { return context_of(current_context); }

/* Unload every module of `ctx` and drop the functions libraries' kernels
 * have there, as the driver does when a context goes (the libraries stay);
 * lock held. */
static void unload_modules_of(const fake_context *ctx)
{
    for (int i = 0; i < MAX_MODULES; i++) {
        if (!modules[i].loaded || modules[i].context != ctx) continue;
        modules[i].loaded = 0;
        for (int f = 0; f < MAX_FUNCTIONS; f++)
            if (functions[f].module == &modules[i]) functions[f].module = NULL;
    }
    for (int f = 0; f < MAX_FUNCTIONS; f++)
        if (functions[f].kernel && functions[f].context == ctx) functions[f].kernel = NULL;
}

/* The primary context stays live (with its modules) across retain and
 * release: the tests never reset it. */
API CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device)
{
    FAULT_POINT();
    if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    fake_context *ctx = &contexts[device];
    if (!ctx->live) *ctx = (fake_context){1, device, next_context_id++};
    pthread_mutex_unlock(&lock);
    *context = (CUcontext)(void *)ctx;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int *flags, int *active)
{
    FAULT_POINT();
    if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    *flags = 0;
    *active = contexts[device].live;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    FAULT_POINT();
    return device_valid(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* cuCtxCreate in its CUDA 11-12 form; the new context is made current. */
API CUresult cuCtxCreate_v2(CUcontext *context, unsigned int flags, CUdevice device)
{
    FAULT_POINT();
    (void)flags;
    if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = FAKE_CUDA_MAX_DEVICES; i < MAX_CONTEXTS; i++)
        if (!contexts[i].live) {
            contexts[i] = (fake_context){1, device, next_context_id++};
            *context = current_context = (CUcontext)(void *)&contexts[i];
            res = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return res;
}

/* Destroys a created context and its modules; its handle may come back from
 * the next cuCtxCreate. Current on this thread: no context is current after. */
API CUresult cuCtxDestroy_v2(CUcontext context)
{
    CUresult res = CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    fake_context *ctx = context_of(context);
    if (ctx && ctx >= contexts + FAKE_CUDA_MAX_DEVICES) {
        unload_modules_of(ctx);
        ctx->live = 0;
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    if (res == CUDA_SUCCESS && current_context == context) current_context = NULL;
    return res;
}

API CUresult cuCtxGetId(CUcontext context, unsigned long long *id)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    fake_context *ctx = context ? context_of(context) : current_of_thread();
    if (ctx) *id = ctx->id;
    pthread_mutex_unlock(&lock);
    return ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuCtxGetCurrent(CUcontext *context)
{
    FAULT_POINT();
    *context = current_context;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext context)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    const int live = !context || context_of(context);
    pthread_mutex_unlock(&lock);
    if (!live) return CUDA_ERROR_INVALID_CONTEXT;
    current_context = context;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *device)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    fake_context *ctx = current_of_thread();
    if (ctx) *device = ctx->device;
    pthread_mutex_unlock(&lock);
    return ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuCtxSynchronize(void)
{
    FAULT_POINT();
    count_uncapturable();
    return current_context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuStreamSynchronize(CUstream stream)
{
    FAULT_POINT();
    (void)stream;
    count_uncapturable();
    return current_context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- modules and functions ---------------------------------------------------- */

/* Bytes of the ELF image at p: its section header table ends it. 0: not one. */
static size_t elf_size(const unsigned char *p)
{
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)(const void *)p;
    if (memcmp(p, ELFMAG, SELFMAG) != 0 || p[EI_CLASS] != ELFCLASS64 || h->e_shnum == 0) return 0;
    return (size_t)h->e_shoff + (size_t)h->e_shnum * h->e_shentsize;
}

API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    FAULT_POINT();
    NAMED_FAULT_POINT(CALL_MODULE_LOAD_DATA);
    count_uncapturable();
    const size_t size = image ? elf_size(image) : 0;
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    fake_context *ctx = current_of_thread();
    if (!ctx) res = CUDA_ERROR_INVALID_CONTEXT;
    else if (!size) res = CUDA_ERROR_INVALID_IMAGE;
    else
        for (int i = 0; i < MAX_MODULES; i++)
            if (!modules[i].loaded) {
                modules[i] = (fake_module){1, image, size, ctx};
                *module = (CUmodule)(void *)&modules[i];
                calls[CALL_MODULE_LOAD_DATA]++;
                res = CUDA_SUCCESS;
                break;
            }
    pthread_mutex_unlock(&lock);
    return res;
}

/* A module unloads from its own context, which must be current (the
 * driver's documented contract; fijit switches to it first). */
API CUresult cuModuleUnload(CUmodule module)
{
    fake_module *m = (fake_module *)(void *)module;
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    if (m >= modules && m < modules + MAX_MODULES && m->loaded) {
        if (m->context != current_of_thread()) {
            res = CUDA_ERROR_INVALID_CONTEXT;
        } else {
            m->loaded = 0;
            for (int i = 0; i < MAX_FUNCTIONS; i++)
                if (functions[i].module == m) functions[i].module = NULL;
            calls[CALL_MODULE_UNLOAD]++;
            res = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return res;
}

/* A free function slot, or NULL; lock held. */
static fake_function *function_slot(void)
{
    for (int i = 0; i < MAX_FUNCTIONS; i++)
        if (!functions[i].module && !functions[i].kernel) return &functions[i];
    return NULL;
}

API CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name)
{
    FAULT_POINT();
    fake_module *m = (fake_module *)(void *)module;
    const size_t len = strlen(name);
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    if (m >= modules && m < modules + MAX_MODULES && m->loaded) {
        /* The symbol's name, NUL included, is in the image's string table. */
        if (len >= sizeof functions[0].name || !memmem(m->image, m->size, name, len + 1)) {
            res = CUDA_ERROR_NOT_FOUND;
        } else {
            fake_function *fn = function_slot();
            res = CUDA_ERROR_OUT_OF_MEMORY; /* unless a slot is free */
            if (fn) {
                *fn = (fake_function){.module = m, .max_dynamic_smem = STATIC_SMEM_LIMIT};
                memcpy(fn->name, name, len + 1);
                *function = (CUfunction)(void *)fn;
                res = CUDA_SUCCESS;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return res;
}

/* The live function behind a handle, or NULL; called with the lock held. */
static fake_function *function_of(CUfunction f)
{
    fake_function *fn = (fake_function *)(void *)f;
    return fn >= functions && fn < functions + MAX_FUNCTIONS && (fn->module || fn->kernel) ? fn
                                                                                          : NULL;
}

/* The context a live function launches in; lock held. */
static fake_context *function_context(const fake_function *fn)
{
    return fn->module ? fn->module->context : fn->context;
}

/* The dynamic shared memory a live function may launch with: its own
 * opt-in, which overrides its kernel's for the device (as documented for
 * cuKernelSetAttribute); lock held. */
static int function_smem(const fake_function *fn)
{
    if (fn->max_dynamic_smem >= 0) return fn->max_dynamic_smem;
    return fn->kernel->max_dynamic_smem[fn->context->device];
}

API CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attribute, CUfunction f)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    fake_function *fn = function_of(f);
    if (fn) {
        switch (attribute) {
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 64; break;
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
        case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = function_smem(fn); break;
        default: *value = 0; break;
        }
    }
    pthread_mutex_unlock(&lock);
    return fn ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attribute, int value)
{
    FAULT_POINT();
    NAMED_FAULT_POINT(CALL_FUNC_SET_ATTRIBUTE);
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    fake_function *fn = function_of(f);
    if (fn) {
        res = CUDA_SUCCESS;
        if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
            if (value < 0 || value > FAKE_CUDA_SMEM_OPTIN_MAX) res = CUDA_ERROR_INVALID_VALUE;
            else fn->max_dynamic_smem = value;
        }
        if (res == CUDA_SUCCESS) calls[CALL_FUNC_SET_ATTRIBUTE]++;
    }
    pthread_mutex_unlock(&lock);
    return res;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned smem, CUstream stream,
                            void **params, void **extra)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    fake_context *ctx = current_of_thread();
    fake_function *fn = function_of(f);
    CUresult res = CUDA_SUCCESS;
    if (!ctx) res = CUDA_ERROR_INVALID_CONTEXT;
    else if (!fn || function_context(fn) != ctx) res = CUDA_ERROR_INVALID_HANDLE; /* another context's */
    else if (!params || extra) res = CUDA_ERROR_INVALID_VALUE; /* fijit passes kernelParams */
    else if (!gx || !gy || !gz || gx > INT32_MAX || gy > 65535 || gz > 65535)
        res = CUDA_ERROR_INVALID_VALUE;
    else if (!bx || !by || !bz || (unsigned long long)bx * by * bz > 1024 || bz > 64)
        res = CUDA_ERROR_INVALID_VALUE;
    else if ((int)smem > function_smem(fn)) /* the opt-in was missing or too small */
        res = CUDA_ERROR_INVALID_VALUE;
    fake_cuda_launch_hook hook = launch_hook;
    void *user = launch_hook_user;
    fake_cuda_launch launch = {fn ? fn->name : NULL, {gx, gy, gz}, {bx, by, bz}, smem, stream,
                               params};
    if (res == CUDA_SUCCESS) launches++;
    pthread_mutex_unlock(&lock);
    if (res == CUDA_SUCCESS && hook) res = hook(&launch, user);
    return res;
}

API CUcontext fake_cuda_function_context(CUfunction f)
{
    pthread_mutex_lock(&lock);
    fake_function *fn = function_of(f);
    CUcontext ctx = fn ? (CUcontext)(void *)function_context(fn) : NULL;
    pthread_mutex_unlock(&lock);
    return ctx;
}

/* Whether `lib` has a function in `ctx`; lock held. */
static int library_in(const fake_library *lib, const fake_context *ctx)
{
    for (int f = 0; f < MAX_FUNCTIONS; f++)
        if (functions[f].kernel && functions[f].kernel->library == lib && functions[f].context == ctx)
            return 1;
    return 0;
}

API int fake_cuda_modules_in(CUcontext context)
{
    int n = 0;
    pthread_mutex_lock(&lock);
    fake_context *ctx = context_of(context);
    for (int i = 0; i < MAX_MODULES; i++)
        n += modules[i].loaded && modules[i].context == ctx;
    for (int i = 0; ctx && i < MAX_LIBRARIES; i++)
        n += libraries[i].loaded && library_in(&libraries[i], ctx);
    pthread_mutex_unlock(&lock);
    return n;
}

API int fake_cuda_libraries_loaded(void)
{
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_LIBRARIES; i++) n += libraries[i].loaded;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Device memory the loaded code takes, as cuMemGetInfo reports it: a
 * module's image in its context, a library's in each context it has a
 * function in (lazy loading); lock held. */
static size_t code_bytes_on(CUdevice device)
{
    size_t bytes = 0;
    for (int i = 0; i < MAX_MODULES; i++)
        if (modules[i].loaded && modules[i].context->device == device) bytes += modules[i].size;
    for (int c = 0; c < MAX_CONTEXTS; c++)
        for (int i = 0; contexts[c].live && contexts[c].device == device && i < MAX_LIBRARIES; i++)
            if (libraries[i].loaded && library_in(&libraries[i], &contexts[c]))
                bytes += libraries[i].size;
    return bytes;
}

API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    FAULT_POINT();
    pthread_mutex_lock(&lock);
    fake_context *ctx = current_of_thread();
    if (ctx) {
        *total_bytes = FAKE_CUDA_MEMORY_BYTES;
        *free_bytes = FAKE_CUDA_MEMORY_BYTES - code_bytes_on(ctx->device);
    }
    pthread_mutex_unlock(&lock);
    return ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- libraries: context-independent loading (CUDA 12.0+) ------------------------ */

#ifndef FAKE_CUDA_NO_LIBRARIES
static fake_kernel kernels[MAX_KERNELS];

API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                               void **jit_values, unsigned int jit_count,
                               CUlibraryOption *library_options, void **library_values,
                               unsigned int library_count)
{
    (void)jit_options, (void)jit_values, (void)library_options, (void)library_values;
    FAULT_POINT();
    NAMED_FAULT_POINT(CALL_LIBRARY_LOAD_DATA);
    count_uncapturable();
    const size_t size = code ? elf_size(code) : 0;
    if (!library || jit_count || library_count) return CUDA_ERROR_INVALID_VALUE;
    if (!size) return CUDA_ERROR_INVALID_IMAGE;
    /* The driver copies the image (no CU_LIBRARY_BINARY_IS_PRESERVED). */
    unsigned char *copy = malloc(size);
    if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, code, size);
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_LIBRARIES; i++)
        if (!libraries[i].loaded) {
            libraries[i] = (fake_library){1, copy, size};
            *library = (CUlibrary)(void *)&libraries[i];
            calls[CALL_LIBRARY_LOAD_DATA]++;
            res = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    if (res != CUDA_SUCCESS) free(copy);
    return res;
}

/* The loaded library behind a handle, or NULL; lock held. */
static fake_library *library_of(CUlibrary l)
{
    fake_library *lib = (fake_library *)(void *)l;
    return lib >= libraries && lib < libraries + MAX_LIBRARIES && lib->loaded ? lib : NULL;
}

/* The live kernel behind a handle, or NULL; lock held. */
static fake_kernel *kernel_of(CUkernel k)
{
    fake_kernel *kernel = (fake_kernel *)(void *)k;
    return kernel >= kernels && kernel < kernels + MAX_KERNELS && kernel->library ? kernel : NULL;
}

/* Unloads it from every context: its kernels and their functions go. */
API CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    unsigned char *image = NULL;
    pthread_mutex_lock(&lock);
    fake_library *lib = library_of(library);
    if (lib) {
        for (int f = 0; f < MAX_FUNCTIONS; f++)
            if (functions[f].kernel && functions[f].kernel->library == lib) functions[f].kernel = NULL;
        for (int k = 0; k < MAX_KERNELS; k++)
            if (kernels[k].library == lib) kernels[k].library = NULL;
        image = (unsigned char *)lib->image;
        lib->loaded = 0;
        calls[CALL_LIBRARY_UNLOAD]++;
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    free(image);
    return res;
}

/* One kernel per (library, name): asking again gives the same handle. */
API CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    FAULT_POINT();
    NAMED_FAULT_POINT(CALL_LIBRARY_GET_KERNEL);
    const size_t len = strlen(name);
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    fake_library *lib = library_of(library);
    if (lib && (len >= sizeof kernels[0].name || !memmem(lib->image, lib->size, name, len + 1))) {
        res = CUDA_ERROR_NOT_FOUND;
    } else if (lib) {
        fake_kernel *found = NULL, *free_slot = NULL;
        for (int k = 0; k < MAX_KERNELS && !found; k++) {
            if (kernels[k].library == lib && strcmp(kernels[k].name, name) == 0) found = &kernels[k];
            else if (!kernels[k].library && !free_slot) free_slot = &kernels[k];
        }
        if (!found && free_slot) {
            found = free_slot;
            found->library = lib;
            memcpy(found->name, name, len + 1);
            for (int d = 0; d < FAKE_CUDA_MAX_DEVICES; d++) found->max_dynamic_smem[d] = STATIC_SMEM_LIMIT;
        }
        res = found ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        if (found) {
            *kernel = (CUkernel)(void *)found;
            calls[CALL_LIBRARY_GET_KERNEL]++;
        }
    }
    pthread_mutex_unlock(&lock);
    return res;
}

/* The kernel's function in the current context: made at the first call
 * there (the library's code is loaded into the context then), the same
 * handle after. */
API CUresult cuKernelGetFunction(CUfunction *function, CUkernel kernel)
{
    FAULT_POINT();
    NAMED_FAULT_POINT(CALL_KERNEL_GET_FUNCTION);
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    fake_kernel *k = kernel_of(kernel);
    fake_context *ctx = current_of_thread();
    if (!ctx) {
        res = CUDA_ERROR_INVALID_CONTEXT;
    } else if (k) {
        fake_function *fn = NULL;
        for (int f = 0; f < MAX_FUNCTIONS && !fn; f++)
            if (functions[f].kernel == k && functions[f].context == ctx) fn = &functions[f];
        if (!fn && (fn = function_slot())) {
            *fn = (fake_function){.kernel = k, .context = ctx, .max_dynamic_smem = -1};
            memcpy(fn->name, k->name, sizeof fn->name);
        }
        res = fn ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        if (fn) {
            *function = (CUfunction)(void *)fn;
            calls[CALL_KERNEL_GET_FUNCTION]++;
        }
    }
    pthread_mutex_unlock(&lock);
    return res;
}

/* Per device: every context of `device`, now and later, sees the value
 * (unless cuFuncSetAttribute set the function's own). */
API CUresult cuKernelSetAttribute(CUfunction_attribute attribute, int value, CUkernel kernel,
                                  CUdevice device)
{
    FAULT_POINT();
    NAMED_FAULT_POINT(CALL_KERNEL_SET_ATTRIBUTE);
    if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    fake_kernel *k = kernel_of(kernel);
    if (k) {
        res = CUDA_SUCCESS;
        if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
            if (value < 0 || value > FAKE_CUDA_SMEM_OPTIN_MAX) res = CUDA_ERROR_INVALID_VALUE;
            else k->max_dynamic_smem[device] = value;
        }
        if (res == CUDA_SUCCESS) calls[CALL_KERNEL_SET_ATTRIBUTE]++;
    }
    pthread_mutex_unlock(&lock);
    return res;
}
#endif

/* ---- TMA descriptors (see fake_cuda.h) ----------------------------------------- */

API CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                    void *address, const cuuint64_t *dims,
                                    const cuuint64_t *strides, const cuuint32_t *box,
                                    const cuuint32_t *element_strides,
                                    CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                    CUtensorMapL2promotion promotion, CUtensorMapFloatOOBfill fill)
{
    (void)promotion;
    (void)fill;
    FAULT_POINT();
    if (!map || !address || !dims || !box || !element_strides || rank < 1 || rank > 5 ||
        (uintptr_t)address % 16 != 0 || interleave != CU_TENSOR_MAP_INTERLEAVE_NONE ||
        (type != CU_TENSOR_MAP_DATA_TYPE_UINT16 && type != CU_TENSOR_MAP_DATA_TYPE_UINT8))
        return CUDA_ERROR_INVALID_VALUE;
    const cuuint32_t elem_bytes = type == CU_TENSOR_MAP_DATA_TYPE_UINT8 ? 1 : 2;
    for (cuuint32_t i = 0; i < rank; i++) {
        if (!dims[i] || !box[i] || box[i] > 256 || element_strides[i] != 1)
            return CUDA_ERROR_INVALID_VALUE;
        if (i > 0 && (!strides || strides[i - 1] % 16 != 0)) return CUDA_ERROR_INVALID_VALUE;
    }
    if (swizzle == CU_TENSOR_MAP_SWIZZLE_128B && box[0] * elem_bytes > 128)
        return CUDA_ERROR_INVALID_VALUE;
    _Static_assert(sizeof(CUtensorMap) >= (FAKE_TMA_SWIZZLE + 1) * sizeof(cuuint64_t),
                   "the fake's record fits a map");
    cuuint64_t *w = (cuuint64_t *)map;
    memset(map, 0, sizeof *map);
    w[FAKE_TMA_ADDRESS] = (cuuint64_t)(uintptr_t)address;
    for (cuuint32_t i = 0; i < rank; i++) {
        w[FAKE_TMA_DIMS + i] = dims[i];
        w[FAKE_TMA_BOX + i] = box[i];
        if (i > 0) w[FAKE_TMA_STRIDES + i - 1] = strides[i - 1];
    }
    w[FAKE_TMA_SWIZZLE] = (cuuint64_t)swizzle;
    return CUDA_SUCCESS;
}

/* ---- memory: host memory stands in for the device's ---------------------------- */

API CUresult cuMemAlloc(CUdeviceptr *ptr, size_t bytes)
{
    FAULT_POINT();
    count_uncapturable();
    void *p = bytes ? aligned_alloc(256, (bytes + 255) / 256 * 256) : NULL;
    if (!p) return bytes ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemFree(CUdeviceptr ptr)
{
    count_uncapturable();
    free((void *)(uintptr_t)ptr);
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes)
{
    FAULT_POINT();
    count_uncapturable();
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
    FAULT_POINT();
    count_uncapturable();
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

API CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count)
{
    FAULT_POINT();
    count_uncapturable();
    memset((void *)(uintptr_t)dst, value, count);
    return CUDA_SUCCESS;
}

/* Stream-ordered, so capturable: a fake stream runs everything at once. */
API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream)
{
    (void)stream;
    FAULT_POINT();
    unsigned int *words = (unsigned int *)(uintptr_t)dst;
    for (size_t i = 0; i < count; i++) words[i] = value;
    return CUDA_SUCCESS;
}
