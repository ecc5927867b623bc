/* What jit.c offers the rest of the library beyond the public API. */
#ifndef FI_JIT_H
#define FI_JIT_H

#include <stddef.h>

#include "fijit.h"

struct fi_registry;

/* The context's registered variants (core/registry.h). */
struct fi_registry *fi__jit_registry(fi_jit_ctx *ctx);

/* fi_jit_variant_register with messages naming `origin` (the CLI registers
 * the bytes of --variant-file FILE from memory and names FILE). */
int fi__jit_variant_register_as(fi_jit_ctx *ctx, const char *name, const char *source,
                                unsigned flags, const char *origin);

/* fi__variant_pack for the variant `spec` names in `ctx` (launch code). */
int fi__jit_variant_pack(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *who,
                         const fi_variant_arg *args, int count, unsigned long long *out);

/* The translation unit `spec` expands to on `arch` (NULL: the context's),
 * byte for byte what the key hashes and NVRTC compiles (ptx 0), or the PTX
 * NVRTC makes of it for the virtual arch (ptx 1, compiled now, not cached).
 * `*out` (fi__free) is NUL-terminated; `*out_size` excludes the NUL. For
 * `fijit explain --source / --ptx`. */
int fi__jit_unit(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *arch, int ptx, char **out,
                 size_t *out_size);

#endif
