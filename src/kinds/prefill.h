/* What the prefill units (kinds/prefill.c) share with the prefill launch code. */
#ifndef FI_KINDS_PREFILL_H
#define FI_KINDS_PREFILL_H

#include <string.h>

#include "fijit.h"

/* 1 for an fp8 prefill spec (q = kv = e4m3: templates/prefill/fp8.cuh). */
static inline int fi__prefill_is_fp8(const fi_jit_spec *spec)
{
    return spec->q_dtype == FI_DTYPE_FP8_E4M3;
}

/* 1 when kernels compiled for `arch` use the sm_90a tile shapes and the
 * Hopper main loop (FI_PREFILL_WGMMA in prefill/params.h). */
static inline int fi__prefill_is_sm90a(const char *arch)
{
    return strcmp(arch, "sm_90a") == 0;
}

#endif
