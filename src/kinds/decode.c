/*
 * The decode kinds: single-request decode and paged batch decode. Both take
 * q = o of one 16-bit type with kv the same or fp8 (e4m3, e5m2, per-tensor
 * scales given at launch), head_dim 64/128/256, and no mask but the sliding
 * window. Kernels: templates/decode/; launch code: src/launch/decode.c and
 * batch_decode.c.
 */
#include <string.h>

#include "common/error.h"
#include "kinds/names.h"
#include "decode/params.h"
#include "kinds/decode.h"
#include "kinds/units.h"

int fi__decode_kv_bytes(const fi_jit_spec *spec)
{
    return spec->kv_dtype == FI_DTYPE_FP8_E4M3 || spec->kv_dtype == FI_DTYPE_FP8_E5M2 ? 1 : 2;
}

static int check_decode_dtypes(const fi_jit_spec *spec, const char *kind)
{
    if (fi__decode_kv_bytes(spec) == 1) {
        fi_jit_spec same = *spec;
        same.kv_dtype = spec->q_dtype;
        return fi__check_same_16bit_dtypes(&same, kind);
    }
    if (spec->kv_dtype != spec->q_dtype &&
        (spec->q_dtype == FI_DTYPE_FP16 || spec->q_dtype == FI_DTYPE_BF16))
        return fi__error(FI_EUNSUPPORTED,
                         "kv dtype '%s' is not supported with q=%s for %s (supported: kv equal to "
                         "q, fp8_e4m3, fp8_e5m2)",
                         fi__dtype_name(spec->kv_dtype), fi__dtype_name(spec->q_dtype), kind);
    return fi__check_same_16bit_dtypes(spec, kind);
}

static int check_decode(const fi_jit_spec *spec, const fi_kind_info *unit)
{
    int rc = check_decode_dtypes(spec, unit->name);
    if (rc < 0 || (rc = fi__check_head_dim(spec, unit)) < 0) return rc;
    if (spec->mask != FI_MASK_NONE && spec->mask != FI_MASK_WINDOW)
        return fi__error(FI_EUNSUPPORTED, "mask '%s' is not supported for %s (supported: none, window)",
                         fi__mask_name(spec->mask), unit->name);
    return 0;
}

static int check_single(const fi_jit_spec *spec) { return check_decode(spec, &fi__kind_decode); }
static int check_batch(const fi_jit_spec *spec) { return check_decode(spec, &fi__kind_batch_decode); }

static void single_launch_shape(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out)
{
    FI_UNUSED(arch); /* one shape on every arch */
    memset(out, 0, sizeof *out);
    out->block_dim[0] = FI_DECODE_THREADS;
    out->block_dim[1] = out->block_dim[2] = 1;
    /* Nominal: each launch passes its ring's size (fi__decode_launch). */
    out->smem_bytes = (unsigned)FI_DECODE_SMEM_BYTES(spec->head_dim, fi__decode_kv_bytes(spec),
                                                     spec->pos == FI_POS_ROPE_LLAMA,
                                                     FI_DECODE_STAGES);
    out->param_bytes = (unsigned)sizeof(fi_decode_params);
}

static void batch_launch_shape(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out)
{
    FI_UNUSED(spec);
    FI_UNUSED(arch); /* one shape on every arch */
    memset(out, 0, sizeof *out);
    out->block_dim[0] = FI_DECODE_THREADS;
    out->block_dim[1] = out->block_dim[2] = 1;
    out->merge_block_dim[0] = FI_MERGE_THREADS;
    out->merge_block_dim[1] = out->merge_block_dim[2] = 1;
    out->smem_bytes = 0;
    out->param_bytes = (unsigned)sizeof(fi_batch_decode_params);
}

const fi_kind_info fi__kind_decode = {
    .kind = FI_KIND_DECODE,
    .name = "decode",
    .template_name = "decode/decode.cuh",
    .entries = {"fi_decode_kernel"},
    .head_dims = {64, 128, 256},
    .check = check_single,
    .launch_shape = single_launch_shape,
};

const fi_kind_info fi__kind_batch_decode = {
    .kind = FI_KIND_BATCH_DECODE,
    .name = "batch_decode",
    .template_name = "decode/batch_decode.cuh",
    .entries = {"fi_batch_decode_kernel", "fi_merge_states_kernel"},
    .head_dims = {64, 128, 256},
    .check = check_batch,
    .launch_shape = batch_launch_shape,
};
