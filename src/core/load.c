/* Loading built objects as libraries or modules, and unloading them (see load.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "core/load.h"
#include "core/settings.h"

/* Dynamic shared memory a kernel gets without opting in. */
#define DEFAULT_SMEM_LIMIT (48 * 1024)
/* Devices whose opt-in is remembered as done; a device past them sets it at
 * every load (cuKernelSetAttribute is idempotent). */
#define TRACKED_DEVICES 64

/* One cubin loaded with cuLibraryLoadData: held by every table entry of its
 * key, in every fi_jit_ctx of the process. */
typedef struct loaded_library {
    struct loaded_library *next;
    uint8_t key[16];
    CUlibrary library;
    CUkernel kernels[FI_JIT_MAX_FUNCTIONS]; /* the kind's entries, in its order */
    int kernel_count;
    unsigned holds;                         /* table entries that point at it */
    uint64_t smem_set_on;                   /* bit d: the opt-in is set on device d */
} loaded_library;

/* The process's libraries; a short list (one per kernel in use), walked on
 * misses only. The lock also makes the per-device attribute calls one at a
 * time (the driver documents concurrent sets of one attribute as racing). */
static pthread_mutex_t libraries_lock = PTHREAD_MUTEX_INITIALIZER;
static loaded_library *libraries;
/* The driver that loaded them, for the releases (whose fi__cuda_load could
 * fail under fault injection and leave a library held). */
static const fi_cuda_api *libraries_driver;

/* ---- which way --------------------------------------------------------------- */

enum load_way { LOAD_LIBRARY, LOAD_MODULE };

static int driver_has_libraries(const fi_cuda_api *cu)
{
    return cu->LibraryLoadData && cu->LibraryUnload && cu->LibraryGetKernel &&
           cu->KernelGetFunction && cu->KernelSetAttribute;
}

/* FIJIT_LOAD over what the driver offers (load.h). */
static int load_way(enum load_way *out, const fi_cuda_api *cu)
{
    const char *env = getenv("FIJIT_LOAD");
    const int has = driver_has_libraries(cu);
    if (!env || !*env || strcmp(env, "auto") == 0) {
        *out = has ? LOAD_LIBRARY : LOAD_MODULE;
        return 0;
    }
    if (strcmp(env, "module") == 0) {
        *out = LOAD_MODULE;
        return 0;
    }
    if (strcmp(env, "library") == 0) {
        if (!has)
            return fi__error(FI_EUNSUPPORTED, "FIJIT_LOAD=library: the CUDA driver has no "
                                              "context-independent loading (cuLibraryLoadData, "
                                              "CUDA 12.0+)");
        *out = LOAD_LIBRARY;
        return 0;
    }
    return fi__env_choice_check("FIJIT_LOAD", env); /* FI_EINVALID, naming what it accepts */
}

/* ---- the library way ---------------------------------------------------------- */

/* The library of `key` with one more hold, loaded from `object` if the
 * process has none; libraries_lock held. */
static int library_hold(loaded_library **out, const uint8_t key[16], const void *object,
                        const fi_kind_info *kind, const fi_cuda_api *cu)
{
    loaded_library *lib;
    CUresult res;
    for (lib = libraries; lib; lib = lib->next)
        if (memcmp(lib->key, key, sizeof lib->key) == 0) {
            lib->holds++;
            *out = lib;
            return 0;
        }
    if (fi__fault(FI_FAULT_DRIVER)) return fi__error(FI_ELOAD, "cuLibraryLoadData failed: injected fault");
    if (!(lib = fi__calloc(1, sizeof *lib))) return fi__error(FI_ENOMEM, "out of memory");
    /* No options: the driver keeps its own copy of the object, which may
     * outlive the table entry that owns ours. */
    if ((res = cu->LibraryLoadData(&lib->library, object, NULL, NULL, 0, NULL, NULL, 0)) !=
        CUDA_SUCCESS) {
        fi__free(lib);
        return fi__cuda_error(FI_ELOAD, res, "cuLibraryLoadData");
    }
    lib->kernel_count = fi__kind_entry_count(kind);
    for (int i = 0; i < lib->kernel_count; i++)
        if ((res = cu->LibraryGetKernel(&lib->kernels[i], lib->library, kind->entries[i]))) {
            char what[160];
            snprintf(what, sizeof what, "cuLibraryGetKernel(%s)", kind->entries[i]);
            cu->LibraryUnload(lib->library);
            fi__free(lib);
            return fi__cuda_error(FI_ELOAD, res, what);
        }
    memcpy(lib->key, key, sizeof lib->key);
    lib->holds = 1;
    libraries_driver = cu;
    lib->next = libraries;
    libraries = lib;
    *out = lib;
    return 0;
}

/* Drop one hold; the last unloads the library. libraries_lock held. */
static void library_drop(loaded_library *lib, const fi_cuda_api *cu)
{
    if (--lib->holds > 0) return;
    for (loaded_library **p = &libraries; *p; p = &(*p)->next)
        if (*p == lib) {
            *p = lib->next;
            break;
        }
    cu->LibraryUnload(lib->library);
    fi__free(lib);
}

/* Opt the main kernel into `smem` bytes of dynamic shared memory on the
 * current context's device, once per device (attributes of a library's
 * kernel are per device, not per context). A preparation for callers that
 * launch e->kernel.function themselves: fijit's launches opt in to what
 * each needs (cuda_drv.c), so a refusal here is logged, not an error.
 * libraries_lock held. */
static void library_prepare_device(loaded_library *lib, unsigned smem, const fi_cuda_api *cu)
{
    CUdevice dev;
    CUresult res;
    if (smem <= DEFAULT_SMEM_LIMIT || cu->CtxGetDevice(&dev) != CUDA_SUCCESS) return;
    const int tracked = dev >= 0 && dev < TRACKED_DEVICES;
    if (tracked && (lib->smem_set_on >> dev & 1)) return;
    res = cu->KernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem,
                                 lib->kernels[0], dev);
    if (res != CUDA_SUCCESS) {
        fi__log(FI_LOG_DEBUG, "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, %u) on device "
                              "%d: CUresult %d; launches opt in themselves", smem, (int)dev, (int)res);
        return;
    }
    if (tracked) lib->smem_set_on |= UINT64_C(1) << dev;
}

static int load_library(fi_table_entry *e, const void *object, const uint8_t key[16],
                        const fi_kind_info *kind, const fi_cuda_api *cu)
{
    loaded_library *lib = NULL;
    CUresult res;
    int rc;
    pthread_mutex_lock(&libraries_lock);
    if ((rc = library_hold(&lib, key, object, kind, cu)) < 0) goto out;
    for (int i = 0; i < lib->kernel_count; i++)
        if ((res = cu->KernelGetFunction(&e->kernel.functions[i], lib->kernels[i]))) {
            char what[160];
            snprintf(what, sizeof what, "cuKernelGetFunction(%s)", kind->entries[i]);
            library_drop(lib, cu);
            rc = fi__cuda_error(FI_ELOAD, res, what);
            goto out;
        }
    library_prepare_device(lib, e->kernel.smem_bytes, cu);
    e->library = lib;
out:
    pthread_mutex_unlock(&libraries_lock);
    return rc;
}

/* ---- the module way ------------------------------------------------------------ */

static int load_module(fi_table_entry *e, const void *object, const fi_kind_info *kind,
                       const fi_cuda_api *cu)
{
    CUresult res;
    CUmodule module = NULL;
    if (fi__fault(FI_FAULT_DRIVER)) return fi__error(FI_ELOAD, "cuModuleLoadData failed: injected fault");
    if ((res = cu->ModuleLoadData(&module, object)) != CUDA_SUCCESS)
        return fi__cuda_error(FI_ELOAD, res, "cuModuleLoadData");
    for (int i = 0; i < fi__kind_entry_count(kind); i++) {
        if ((res = cu->ModuleGetFunction(&e->kernel.functions[i], module, kind->entries[i]))) {
            cu->ModuleUnload(module);
            return fi__cuda_error(FI_ELOAD, res, kind->entries[i]);
        }
    }
    e->module = module;
    return 0;
}

int fi__load_object(fi_table_entry *e, const void *object, const uint8_t key[16],
                    const fi_kind_info *kind, int registers, int spill_bytes,
                    const fi_cuda_api *cu)
{
    enum load_way way = LOAD_MODULE;
    int value = 0, rc;
    if ((rc = load_way(&way, cu)) < 0) return rc;
    rc = way == LOAD_LIBRARY ? load_library(e, object, key, kind, cu)
                             : load_module(e, object, kind, cu);
    if (rc < 0) {
        memset(e->kernel.functions, 0, sizeof e->kernel.functions);
        return rc;
    }
    CUfunction function = e->kernel.functions[0];
    e->kernel.function = function;
    e->kernel.registers = registers;
    e->kernel.spill_bytes = spill_bytes;
    if (cu->FuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, function) == CUDA_SUCCESS)
        e->kernel.registers = value;
    if (cu->FuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function) == CUDA_SUCCESS)
        e->kernel.spill_bytes = value;
    return 0;
}

/* ---- unloading ------------------------------------------------------------------ */

/* Whether `ctx` is certainly a live context, so that its handle may be
 * passed to the driver: the current context, or the active primary context
 * of a device. A handle of a context destroyed since can dangle, and the
 * driver does not always refuse one (seen on an H100: a crash inside
 * cuCtxSetCurrent), so another context's modules are left to it: they go
 * when it is destroyed. */
static int context_is_live(const fi_cuda_api *cu, CUcontext ctx)
{
    CUcontext current = NULL;
    int devices = 0;
    if (cu->CtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx) return 1;
    if (!cu->DevicePrimaryCtxGetState || cu->DeviceGetCount(&devices) != CUDA_SUCCESS) return 0;
    for (int i = 0; i < devices; i++) {
        CUdevice dev;
        CUcontext primary = NULL;
        unsigned int flags = 0;
        int active = 0;
        if (cu->DeviceGet(&dev, i) != CUDA_SUCCESS ||
            cu->DevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active ||
            cu->DevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS)
            continue;
        cu->DevicePrimaryCtxRelease(dev);
        if (primary == ctx) return 1;
    }
    return 0;
}

static void release_module(fi_table_entry *e, const fi_cuda_api *cu)
{
    CUcontext previous = NULL, now = NULL;
    uint64_t id = 0;
    if (!context_is_live(cu, (CUcontext)e->device_ctx)) return;
    /* Unload in the module's own context. A live handle may still name a
     * newer context than the module's (a primary context reset since, or a
     * destroyed context's handle given to the next one made), whose module
     * could have this module's handle too: unload only when the handle still
     * has the id the module was loaded under. */
    /* Without the caller's context to restore, switching would leave the
     * thread without it: the module is left to its context then. */
    if (cu->CtxGetCurrent(&previous) != CUDA_SUCCESS) return;
    if (cu->CtxSetCurrent((CUcontext)e->device_ctx) == CUDA_SUCCESS &&
        fi__cuda_current_context(&now, &id) == 0 && id == e->device_id)
        cu->ModuleUnload((CUmodule)e->module);
    cu->CtxSetCurrent(previous);
}

void fi__load_release(fi_table_entry *e)
{
    const fi_cuda_api *cu;
    if (e->library) {
        /* A library serves no context in particular: none to check or switch to. */
        pthread_mutex_lock(&libraries_lock);
        library_drop(e->library, libraries_driver);
        pthread_mutex_unlock(&libraries_lock);
        e->library = NULL;
    } else if (e->module && fi__cuda_load(&cu) == 0) {
        release_module(e, cu);
    }
}
