/*
 * The argument checks both prefill launch kinds (single, batch) share, and
 * the scalars both fill into the kernels' params (prefill/params.h).
 */

#include "launch/prefill.h"

/* Bytes of a q, k or v element of the spec. */
int fi__prefill_in_bytes(const fi_jit_spec *spec)
{
    return fi__prefill_is_fp8(spec) ? 1 : PREFILL_ELEM_BYTES;
}

int fi__prefill_check_heads(const char *who, int qo_heads, int kv_heads)
{
    int rc = fi__check_heads(who, qo_heads, kv_heads);
    if (rc == 0 && kv_heads > 65535)
        rc = fi__error(FI_EINVALID, "%s: num_kv_heads %d exceeds the grid's y limit of 65535",
                       who, kv_heads);
    return rc;
}

/* The scalar arguments both launch kinds share (window_left: the batch
 * kinds check it in the plan). */
int fi__prefill_check_scalars(const char *who, const fi_jit_spec *spec, float sm_scale,
                              float soft_cap, float rope_scale, float rope_theta, int rope_offset,
                              const float *alibi_slopes, const void *custom_mask)
{
    int rc = fi__check_scalars(who, spec, sm_scale, soft_cap, rope_scale, rope_theta, alibi_slopes);
    if (rc < 0) return rc;
    if (spec->pos == FI_POS_ROPE_LLAMA && rope_offset < 0)
        return fi__error(FI_EINVALID, "%s: rope_offset is %d, must be >= 0", who, rope_offset);
    if (spec->mask == FI_MASK_CUSTOM && !custom_mask)
        return fi__error(FI_EINVALID, "%s: custom_mask is NULL with mask=custom", who);
    return 0;
}

int fi__prefill_tile_index(const char *who, int cta_tile_q, int *out)
{
    for (int i = 0; i < FI_PREFILL_NUM_TILES; i++)
        if (FI_PREFILL_TILE_Q(i) == cta_tile_q) {
            *out = i;
            return 0;
        }
    return fi__error(FI_EINVALID, "%s: cta_tile_q is %d (0: automatic, or 128, 64, 16)", who,
                     cta_tile_q);
}

void fi__prefill_fill_scalars(fi_prefill_params *p, const fi_jit_spec *spec, float sm_scale,
                              float soft_cap, float rope_scale, float rope_theta, int rope_offset,
                              int window_left)
{
    p->sm_scale = fi__launch_sm_scale(sm_scale, spec->head_dim);
    p->soft_cap = fi__launch_soft_cap(spec, soft_cap);
    p->rope_offset = rope_offset;
    p->window_left = fi__launch_window(spec, window_left);
    if (spec->pos == FI_POS_ROPE_LLAMA)
        fi__rope_fill(p->rope_freq, spec->head_dim, rope_scale, rope_theta);
}

/* The kernels' kind values are fi_kernel_kind's (prefill/params.h). */
_Static_assert(FI_PREFILL_KIND_SINGLE == FI_KIND_PREFILL &&
                   FI_PREFILL_KIND_RAGGED == FI_KIND_BATCH_PREFILL_RAGGED &&
                   FI_PREFILL_KIND_PAGED == FI_KIND_BATCH_PREFILL_PAGED,
               "prefill kind values");
