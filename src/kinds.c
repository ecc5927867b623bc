/*
 * The table of implemented kernel kinds (see kinds.h) and each kind's limits.
 * A kind's template file and launch code live in templates/<kind>.cuh and
 * src/<kind>.c; this file only names them.
 */
#include <stddef.h>
#include <stdio.h>

#include "error.h"
#include "kinds.h"
#include "spec.h"

/* q, kv and o of one 16-bit type: the kernels convert nothing else yet. */
static int check_same_16bit_dtypes(const fi_jit_spec *spec, const char *kind)
{
    if (spec->q_dtype != FI_DTYPE_FP16 && spec->q_dtype != FI_DTYPE_BF16)
        return fi__error(FI_EUNSUPPORTED, "q dtype '%s' is not supported for %s (supported: fp16, bf16)",
                         fi__dtype_name(spec->q_dtype), kind);
    if (spec->kv_dtype != spec->q_dtype)
        return fi__error(FI_EUNSUPPORTED,
                         "kv dtype '%s' is not supported with q=%s for %s (supported: kv equal to q)",
                         fi__dtype_name(spec->kv_dtype), fi__dtype_name(spec->q_dtype), kind);
    if (spec->o_dtype != spec->q_dtype)
        return fi__error(FI_EUNSUPPORTED,
                         "o dtype '%s' is not supported with q=%s for %s (supported: o equal to q)",
                         fi__dtype_name(spec->o_dtype), fi__dtype_name(spec->q_dtype), kind);
    return 0;
}

static int check_head_dim(const fi_jit_spec *spec)
{
    if (spec->head_dim != 64 && spec->head_dim != 128 && spec->head_dim != 256)
        return fi__error(FI_EUNSUPPORTED, "head_dim %d is not supported (supported: 64, 128, 256)",
                         spec->head_dim);
    return 0;
}

static int check_decode(const fi_jit_spec *spec)
{
    int rc = check_same_16bit_dtypes(spec, "decode");
    if (rc < 0 || (rc = check_head_dim(spec)) < 0) return rc;
    if (spec->mask != FI_MASK_NONE && spec->mask != FI_MASK_WINDOW)
        return fi__error(FI_EUNSUPPORTED, "mask '%s' is not supported for decode (supported: none, window)",
                         fi__mask_name(spec->mask));
    return 0;
}

static const fi_kind_info kinds[] = {
    {FI_KIND_DECODE, "decode", "decode.cuh", {"fi_decode_kernel", "fi_decode_merge_kernel"},
     "fi_decode_merge_kernel", check_decode, fi__decode_launch_shape},
};

const fi_kind_info *fi__kind_info(fi_kernel_kind kind)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == kind) return &kinds[i];
    return NULL;
}

int fi__kind_entry_count(const fi_kind_info *kind)
{
    int n = 0;
    while (n < FI_JIT_MAX_FUNCTIONS && kind->entries[n]) n++;
    return n;
}

const char *fi__kind_supported_names(void)
{
    static char names[160];
    if (!names[0]) {
        size_t used = 0;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                     kinds[i].name);
    }
    return names;
}
