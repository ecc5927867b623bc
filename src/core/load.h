/*
 * Loading: a built object (a cubin) becomes the functions of a table entry
 * in the current CUDA context, in one of two ways.
 *
 *   library  where the driver has context-independent loading (CUDA 12.0+):
 *            the object is loaded once per process with cuLibraryLoadData,
 *            shared by every entry of its cache key (every context, every
 *            fi_jit_ctx) and unloaded when the last of them goes; its
 *            kernels are got once (cuLibraryGetKernel) and each context's
 *            functions with cuKernelGetFunction.
 *   module   cuModuleLoadData into each context that asks (drivers before
 *            CUDA 12, or FIJIT_LOAD=module): e->module, unloaded again in
 *            its own context when the table goes.
 *
 * FIJIT_LOAD chooses: unset, "" or "auto" the library where the driver has
 * it, "library" the library or FI_EUNSUPPORTED, "module" the module. It is
 * read at each load (a miss), so an entry keeps the way it was loaded.
 * Building the object is jit.c's; the driver comes from toolchain/cuda_drv.h.
 */
#ifndef FI_LOAD_H
#define FI_LOAD_H

#include <stdint.h>

#include "kinds/registry.h"
#include "core/table.h"
#include "toolchain/cuda_drv.h"

/* Load `object`, the cubin of cache key `key`, for the current context: every
 * entry of `kind` into e->kernel.functions (and function), and the main
 * function's registers and spill bytes, as the driver reports them, else as
 * given (ptxas' figures from the build log; -1 unknown). On the library
 * path the main kernel's dynamic shared memory opt-in (e->kernel.smem_bytes,
 * filled before the call) is set once per device. FI_ELOAD naming the call
 * that failed (FI_EINVALID for a bad FIJIT_LOAD, FI_EUNSUPPORTED for
 * FIJIT_LOAD=library on a driver without it); nothing stays loaded then. */
int fi__load_object(fi_table_entry *e, const void *object, const uint8_t key[16],
                    const fi_kind_info *kind, int registers, int spill_bytes,
                    const fi_cuda_api *cu);

/* The table's release hook: drop e's hold on its library (unloaded with the
 * last hold), or unload e's module (if any) in its own context, ignoring a
 * context already destroyed. */
void fi__load_release(fi_table_entry *e);

#endif
