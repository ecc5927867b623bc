/* Checks that several kind units share. */
#include <stdio.h>

#include "common/error.h"
#include "kinds/names.h"
#include "kinds/kind.h"

/* q, kv and o of one 16-bit type: the kernels convert nothing else. */
int fi__check_same_16bit_dtypes(const fi_jit_spec *spec, const char *kind)
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

int fi__check_head_dim(const fi_jit_spec *spec, const fi_kind_info *unit)
{
    char list[96] = "";
    int head_dim_known = 0;
    for (int i = 0; i < FI_KIND_MAX_HEAD_DIMS && unit->head_dims[i]; i++) {
        const int vo = unit->head_dims_vo[i];
        if (unit->head_dims[i] == spec->head_dim && vo == spec->head_dim_vo) return 0;
        head_dim_known |= unit->head_dims[i] == spec->head_dim;
        char one[32];
        snprintf(one, sizeof one, vo ? "%d/%d" : "%d", unit->head_dims[i], vo);
        fi__name_list_add(list, sizeof list, one);
    }
    if (spec->head_dim_vo && head_dim_known)
        return fi__error(FI_EUNSUPPORTED, "head_dim_vo %d with head_dim %d is not supported for %s "
                         "(supported head_dim or head_dim/head_dim_vo: %s)", spec->head_dim_vo,
                         spec->head_dim, unit->name, list);
    if (spec->head_dim_vo)
        return fi__error(FI_EUNSUPPORTED, "head_dim %d with head_dim_vo %d is not supported for %s "
                         "(supported head_dim or head_dim/head_dim_vo: %s)", spec->head_dim,
                         spec->head_dim_vo, unit->name, list);
    return fi__error(FI_EUNSUPPORTED, "head_dim %d is not supported for %s (supported: %s)",
                     spec->head_dim, unit->name, list);
}
