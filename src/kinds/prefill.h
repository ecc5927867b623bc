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

/* 1 when v and o have a head dim of their own (fi_jit_spec.head_dim_vo:
 * MLA's 192/128), read as far as the caller's spec version reaches. */
static inline int fi__prefill_split_vo(const fi_jit_spec *spec)
{
    return spec->version >= 2 && spec->head_dim_vo > 0 && spec->head_dim_vo != spec->head_dim;
}

/* 1 when the tile kernels of `spec` compiled for `arch` have sm_90a's shapes
 * (wgmma; prefill/params.h FI_PREFILL_WGMMA): not with a separate v/o head
 * dim, which runs the mma.sync tiles there too (prefill/common.cuh
 * kSm90aTiles). */
static inline int fi__prefill_tiles_sm90a(const fi_jit_spec *spec, const char *arch)
{
    return fi__prefill_is_sm90a(arch) && !fi__prefill_split_vo(spec);
}

#endif
