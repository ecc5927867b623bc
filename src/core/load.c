/* Loading built objects into CUDA modules, and unloading them (see load.h). */
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "core/load.h"

int fi__load_module(fi_table_entry *e, const void *object, const fi_kind_info *kind,
                    int registers, int spill_bytes, const fi_cuda_api *cu)
{
    CUresult res;
    CUmodule module = NULL;
    int value = 0;
    if (fi__fault(FI_FAULT_DRIVER)) return fi__error(FI_ELOAD, "cuModuleLoadData failed: injected fault");
    if ((res = cu->ModuleLoadData(&module, object)) != CUDA_SUCCESS)
        return fi__cuda_error(FI_ELOAD, res, "cuModuleLoadData");
    for (int i = 0; i < fi__kind_entry_count(kind); i++) {
        if ((res = cu->ModuleGetFunction(&e->kernel.functions[i], module, kind->entries[i]))) {
            cu->ModuleUnload(module);
            return fi__cuda_error(FI_ELOAD, res, kind->entries[i]);
        }
    }
    CUfunction function = e->kernel.functions[0];
    e->module = module;
    e->kernel.function = function;
    e->kernel.registers = registers;
    e->kernel.spill_bytes = spill_bytes;
    if (cu->FuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, function) == CUDA_SUCCESS)
        e->kernel.registers = value;
    if (cu->FuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function) == CUDA_SUCCESS)
        e->kernel.spill_bytes = value;
    return 0;
}

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

void fi__load_release(fi_table_entry *e)
{
    const fi_cuda_api *cu;
    CUcontext previous = NULL, now = NULL;
    uint64_t id = 0;
    if (!e->module || fi__cuda_load(&cu) < 0 || !context_is_live(cu, (CUcontext)e->device_ctx))
        return;
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
