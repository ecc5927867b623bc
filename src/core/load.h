/*
 * Loading: a built object (a cubin) becomes a module in the current CUDA
 * context and the kind's functions in a table entry; the module is unloaded
 * again, in its own context, when the table goes. Building the object is
 * jit.c's; the driver comes from toolchain/cuda_drv.h.
 */
#ifndef FI_LOAD_H
#define FI_LOAD_H

#include "kinds/registry.h"
#include "core/table.h"
#include "toolchain/cuda_drv.h"

/* Load `object` with `cu` into the current context: e->module, every entry
 * of `kind` into e->kernel.functions (and merge_function), and the main
 * function's registers and spill bytes, as the driver reports them, else as
 * given (ptxas' figures from the build log; -1 unknown). FI_ELOAD naming
 * the call that failed; nothing stays loaded then. */
int fi__load_module(fi_table_entry *e, const void *object, const fi_kind_info *kind,
                    int registers, int spill_bytes, const fi_cuda_api *cu);

/* The table's release hook: unload e's module (if any) in its own context,
 * ignoring a context already destroyed. */
void fi__load_release(fi_table_entry *e);

#endif
