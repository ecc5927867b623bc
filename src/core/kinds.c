/*
 * The table of kernel kinds (see kinds.h) and each kind's limits. A kind's
 * template file and launch code live in templates/ and src/launch/; this
 * file only names them.
 */
#include <stddef.h>
#include <string.h>

#include "common/error.h"
#include "core/kinds.h"
#include "core/names.h"
#include "core/spec.h"

/* q, kv and o of one 16-bit type: the kernels convert nothing else yet. */
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

static int check_head_dim(const fi_jit_spec *spec)
{
    if (spec->head_dim != 64 && spec->head_dim != 128 && spec->head_dim != 256)
        return fi__error(FI_EUNSUPPORTED, "head_dim %d is not supported (supported: 64, 128, 256)",
                         spec->head_dim);
    return 0;
}

/* Single and batch decode: q = o of one 16-bit type; kv the same, or fp8
 * (e4m3, e5m2) with per-tensor scales given at launch. */
static int check_decode(const fi_jit_spec *spec)
{
    const char *kind = fi__kind_name(spec->kind);
    int rc = 0;
    if (spec->kv_dtype == FI_DTYPE_FP8_E4M3 || spec->kv_dtype == FI_DTYPE_FP8_E5M2) {
        fi_jit_spec same = *spec;
        same.kv_dtype = spec->q_dtype;
        rc = fi__check_same_16bit_dtypes(&same, kind);
    } else if (spec->kv_dtype != spec->q_dtype &&
               (spec->q_dtype == FI_DTYPE_FP16 || spec->q_dtype == FI_DTYPE_BF16)) {
        return fi__error(FI_EUNSUPPORTED,
                         "kv dtype '%s' is not supported with q=%s for %s (supported: kv equal to "
                         "q, fp8_e4m3, fp8_e5m2)",
                         fi__dtype_name(spec->kv_dtype), fi__dtype_name(spec->q_dtype), kind);
    } else {
        rc = fi__check_same_16bit_dtypes(spec, kind);
    }
    if (rc < 0 || (rc = check_head_dim(spec)) < 0 || (rc = fi__check_no_head_dim_vo(spec, kind)) < 0)
        return rc;
    if (spec->mask != FI_MASK_NONE && spec->mask != FI_MASK_WINDOW)
        return fi__error(FI_EUNSUPPORTED, "mask '%s' is not supported for %s (supported: none, window)",
                         fi__mask_name(spec->mask), kind);
    return 0;
}

static const fi_kind_info kinds[] = {
    {FI_KIND_DECODE, "decode", "decode/decode.cuh", {"fi_decode_kernel"}, check_decode,
     fi__decode_launch_shape},
    {FI_KIND_BATCH_DECODE, "batch_decode", "decode/batch_decode.cuh",
     {"fi_batch_decode_kernel", "fi_merge_states_kernel"}, check_decode,
     fi__batch_decode_launch_shape},
    /* Prefill: one kernel per query tile (128, 64, 16 rows; see
     * templates/prefill/params.h), all kinds sharing templates/prefill/,
     * then the RoPE pre-pass (src/launch/prefill.c), then the Hopper main
     * loop (templates/prefill/mainloop_sm90_ws.cuh; empty but for sm_90a),
     * then fp8's V pre-pass (templates/prefill/fp8.cuh; empty but for fp8). */
    {FI_KIND_PREFILL, "prefill", "prefill/single.cuh",
     {"fi_prefill_kernel_q128", "fi_prefill_kernel_q64", "fi_prefill_kernel_q16",
      "fi_prefill_rope_k_kernel", "fi_prefill_kernel_ws", "fi_prefill_fp8_v_kernel"},
     fi__prefill_check, fi__prefill_launch_shape, fi__prefill_check_arch},
    {FI_KIND_BATCH_PREFILL_RAGGED, "batch_prefill_ragged", "prefill/ragged.cuh",
     {"fi_prefill_kernel_q128", "fi_prefill_kernel_q64", "fi_prefill_kernel_q16",
      "fi_prefill_rope_k_kernel", "fi_prefill_kernel_ws", "fi_prefill_fp8_v_kernel"},
     fi__prefill_check, fi__prefill_launch_shape, fi__prefill_check_arch},
    {FI_KIND_BATCH_PREFILL_PAGED, "batch_prefill_paged", "prefill/paged.cuh",
     {"fi_prefill_kernel_q128", "fi_prefill_kernel_q64", "fi_prefill_kernel_q16",
      "fi_prefill_rope_k_kernel", "fi_prefill_kernel_ws", "fi_prefill_fp8_v_kernel"},
     fi__prefill_check, fi__prefill_launch_shape, fi__prefill_check_arch},
};

#define KIND_COUNT (sizeof kinds / sizeof kinds[0])

const fi_kind_info *fi__kind_info(fi_kernel_kind kind)
{
    for (size_t i = 0; i < KIND_COUNT; i++)
        if (kinds[i].kind == kind) return &kinds[i];
    return NULL;
}

const char *fi__kind_name(int kind)
{
    const fi_kind_info *info = fi__kind_info((fi_kernel_kind)kind);
    return info ? info->name : NULL;
}

int fi__kind_entry_count(const fi_kind_info *kind)
{
    int n = 0;
    while (n < FI_JIT_MAX_FUNCTIONS && kind->entries[n]) n++;
    return n;
}

int fi__kind_parse(int *out, const char *text)
{
    char names[160] = "";
    for (size_t i = 0; i < KIND_COUNT; i++) {
        if (strcmp(kinds[i].name, text) == 0) {
            *out = kinds[i].kind;
            return 0;
        }
        fi__name_list_add(names, sizeof names, kinds[i].name);
    }
    return fi__name_unknown("kernel kind", text, names);
}
