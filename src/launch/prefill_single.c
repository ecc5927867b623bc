/*
 * Single prefill (fi_prefill_run, fi_prefill_workspace_size): its
 * argument checks, its workspace (pre-pass output, block-claim counter)
 * and its launch.
 */
#include <limits.h>
#include <math.h>

#include "launch/prefill.h"

/* Single prefill's workspace: what a pre-pass writes (RoPE's rotated keys,
 * or fp8's V laid out for P.V), then the Hopper main loop's claimed-block
 * counter (optional: without room for it, the CTAs walk their blocks in a
 * fixed order, as with no workspace at all). */
#define SINGLE_CLAIMS_BYTES 16

static size_t single_pre_bytes(const fi_jit_spec *spec, const fi_prefill_args *a)
{
    if (fi__prefill_is_fp8(spec))
        return fi__align16((size_t)a->num_kv_heads * (size_t)spec->head_dim *
                           (size_t)fi__prefill_fp8_vt_keys(a->kv_len));
    return spec->pos == FI_POS_ROPE_LLAMA
               ? fi__prefill_rotated_keys_bytes(a->kv_len, a->num_kv_heads, spec->head_dim)
               : 0;
}

/* The counter in the caller's workspace, or NULL where it has no room. */
static unsigned int *single_claims(const fi_jit_spec *spec, const fi_prefill_args *a)
{
    if (a->version < 3 || !a->workspace) return NULL;
    const size_t at = single_pre_bytes(spec, a);
    if (a->workspace_bytes < at + SINGLE_CLAIMS_BYTES) return NULL;
    return (unsigned int *)(void *)((unsigned char *)a->workspace + at);
}

/* 1 when a single prefill rotates its keys once into the caller's workspace
 * (RoPE, args version 3 with a workspace, queries and keys to compute). */
static int single_rotates_keys(const fi_jit_spec *spec, const fi_prefill_args *a)
{
    return spec->pos == FI_POS_ROPE_LLAMA && a->version >= 3 && a->workspace != NULL &&
           a->qo_len > 0 && a->kv_len > 0;
}

/* fp8's scales, workspace and tile (its queries are read by TMA, in the
 * Hopper main loop's tiles alone). */
static int check_fp8_args(const fi_jit_spec *spec, const fi_prefill_args *a)
{
    const char *who = "prefill";
    if (a->version < 4)
        return fi__error(FI_EINVALID, "%s: q=fp8_e4m3 needs args.version 4 (q_scale, k_scale, "
                         "v_scale)", who);
    const float scales[3] = {a->q_scale, a->k_scale, a->v_scale};
    static const char *const names[3] = {"q_scale", "k_scale", "v_scale"};
    for (int i = 0; i < 3; i++)
        if (!(scales[i] >= 0.f) || isinf(scales[i]))
            return fi__error(FI_EINVALID, "%s: %s is %g; it must be finite and >= 0 (0: 1)", who,
                             names[i], (double)scales[i]);
    if (a->cta_tile_q != 0 && a->cta_tile_q != 128)
        return fi__error(FI_EINVALID, "%s: cta_tile_q %d is not supported with q=fp8_e4m3 "
                         "(supported: 0, 128)", who, a->cta_tile_q);
    const size_t need = single_pre_bytes(spec, a);
    if (!a->workspace || a->workspace_bytes < need)
        return fi__error(FI_EINVALID, "%s: q=fp8_e4m3 needs a workspace of at least %zu bytes for "
                         "V laid out for the tensor cores (%zu given; see "
                         "fi_prefill_workspace_size)", who, need,
                         a->workspace ? a->workspace_bytes : (size_t)0);
    return 0;
}

static int check_single(const fi_jit_spec *spec, const fi_prefill_args *a)
{
    int rc = 0;
    const char *who = "prefill";
    FI_TRY(fi__check_kind(who, spec, FI_KIND_PREFILL, "FI_KIND_PREFILL"));
    FI_TRY(fi__check_version(who, "args", a, a ? a->version : 0, 1, FI_PREFILL_ARGS_VERSION));
    FI_TRY(fi__prefill_check_heads(who, a->num_qo_heads, a->num_kv_heads));
    if (a->qo_len < 0 || a->kv_len < 0)
        FI_FAIL(FI_EINVALID, "prefill: qo_len (%d) and kv_len (%d) must be >= 0", a->qo_len,
                a->kv_len);
    if ((int64_t)a->qo_len * (a->num_qo_heads / a->num_kv_heads) > INT_MAX - 128)
        FI_FAIL(FI_EINVALID, "prefill: qo_len %d x group size %d is too large", a->qo_len,
                a->num_qo_heads / a->num_kv_heads);
    if (a->cta_tile_q != 0) {
        int idx;
        FI_TRY(fi__prefill_tile_index(who, a->cta_tile_q, &idx));
    }
    if (a->qo_len == 0) goto out; /* nothing to compute, nothing is read */
    FI_TRY(fi__check_tensors(who, a->q, a->k, a->v, a->o, a->lse, a->kv_len > 0));
    const int eb = fi__prefill_in_bytes(spec);
    FI_TRY(fi__check_stride(who, "q_stride_n", a->q_stride_n, a->qo_len > 1, eb));
    FI_TRY(fi__check_stride(who, "o_stride_n", a->o_stride_n, a->qo_len > 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "q_stride_h", a->q_stride_h, a->num_qo_heads > 1, eb));
    FI_TRY(fi__check_stride(who, "o_stride_h", a->o_stride_h, a->num_qo_heads > 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "k_stride_n", a->k_stride_n, a->kv_len > 1, eb));
    FI_TRY(fi__check_stride(who, "v_stride_n", a->v_stride_n, a->kv_len > 1, eb));
    FI_TRY(fi__check_stride(who, "k_stride_h", a->k_stride_h, a->num_kv_heads > 1, eb));
    FI_TRY(fi__check_stride(who, "v_stride_h", a->v_stride_h, a->num_kv_heads > 1, eb));
    if (a->num_qo_heads > 1 && a->o_stride_h < fi__spec_head_dim_vo(spec) && a->o_stride_n != 0 &&
        a->o_stride_n < fi__spec_head_dim_vo(spec))
        FI_FAIL(FI_EINVALID, "prefill: o strides (n %lld, h %lld) are smaller than o's head dim "
                "(%d): rows would overlap", (long long)a->o_stride_n, (long long)a->o_stride_h,
                fi__spec_head_dim_vo(spec));
    FI_TRY(fi__prefill_check_scalars(who, spec, a->sm_scale, a->logits_soft_cap, a->rope_scale,
                                     a->rope_theta, a->rope_offset, a->alibi_slopes,
                                     a->custom_mask));
    FI_TRY(fi__check_window(who, spec, a->window_left));
    if (spec->pos == FI_POS_ROPE_LLAMA && (int64_t)a->rope_offset + a->kv_len + a->qo_len > INT_MAX)
        FI_FAIL(FI_EINVALID, "prefill: rope_offset %d + lengths must fit in an int", a->rope_offset);
    if (a->version >= 3 && a->workspace) FI_TRY(fi__check_ptr(who, "workspace", a->workspace, 16));
    if (fi__prefill_is_fp8(spec)) FI_TRY(check_fp8_args(spec, a));
    if (single_rotates_keys(spec, a)) {
        const size_t need = single_pre_bytes(spec, a);
        if (a->workspace_bytes < need)
            FI_FAIL(FI_EINVALID, "prefill: workspace has %zu bytes, RoPE's rotated keys need %zu "
                    "(see fi_prefill_workspace_size; or pass no workspace)", a->workspace_bytes, need);
    }
out:
    return rc;
}

int fi_prefill_workspace_size(size_t *out, const fi_jit_spec *spec, const fi_prefill_args *a)
{
    int rc = 0;
    if (!out) FI_FAIL(FI_EINVALID, "prefill: out is NULL");
    *out = 0;
    FI_TRY(fi__check_kind("prefill", spec, FI_KIND_PREFILL, "FI_KIND_PREFILL"));
    if (!a) FI_FAIL(FI_EINVALID, "prefill: args is NULL");
    FI_TRY(fi__prefill_check_heads("prefill", a->num_qo_heads, a->num_kv_heads));
    if (a->kv_len < 0) FI_FAIL(FI_EINVALID, "prefill: kv_len is %d, must be >= 0", a->kv_len);
    *out = single_pre_bytes(spec, a) + SINGLE_CLAIMS_BYTES;
out:
    return rc;
}

int fi_prefill_run(fi_jit_ctx *ctx, const fi_jit_spec *spec, const fi_prefill_args *a,
                   struct CUstream_st *stream)
{
    int rc = 0, idx = 0, sm_count = 0;
    const fi_jit_kernel *kernel = NULL;
    fi_prefill_params p;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];

    if (!ctx) FI_FAIL(FI_EINVALID, "prefill: ctx is NULL");
    FI_TRY(check_single(spec, a));
    FI_TRY(fi__jit_variant_pack(ctx, spec, "prefill", a->version >= 2 ? a->variant_args : NULL,
                                a->version >= 2 ? a->num_variant_args : 0, variant_params));
    if (a->qo_len == 0) goto out;
    const int group = a->num_qo_heads / a->num_kv_heads;
    const int64_t rows = (int64_t)a->qo_len * group;
    int64_t tiles[FI_PREFILL_NUM_TILES];
    for (int i = 0; i < FI_PREFILL_NUM_TILES; i++) tiles[i] = fi__prefill_ceil_div(rows, FI_PREFILL_TILE_Q(i));
    if (a->cta_tile_q) {
        FI_TRY(fi__prefill_tile_index("prefill", a->cta_tile_q, &idx));
    } else if (!fi__prefill_is_fp8(spec)) { /* fp8 has only the Hopper loop, in tile 0's place */
        FI_TRY(fi__cuda_sm_count(&sm_count));
        idx = fi__prefill_choose_tile(tiles, a->num_kv_heads, sm_count, rows);
    }
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));

    memset(&p, 0, sizeof p);
    PREFILL_FILL_COMMON(&p, a, spec, variant_params, a->window_left);
    p.num_qo_heads = a->num_qo_heads;
    p.num_kv_heads = a->num_kv_heads;
    p.group_size = group;
    p.heads_per_section = fi__prefill_heads_per_section(a->kv_len, spec, a->num_kv_heads);
    p.qo_len = a->qo_len;
    p.kv_len = a->kv_len;
    if (single_rotates_keys(spec, a))
        FI_TRY(fi__prefill_rotate_keys(kernel, spec->head_dim, a->workspace, NULL, a->kv_len, 1, &p,
                                       (CUstream)stream, "prefill"));
    if (fi__prefill_is_fp8(spec)) fi__prefill_fp8_scale_and_place_v(a, &p);
    unsigned int *claims = single_claims(spec, a);
    const enum ws_mode ws = fi__prefill_ws_mode_for(
        kernel, spec, idx, p.rot_k != NULL, 0,
        fi__prefill_row_mean_keys(spec, a->qo_len, a->kv_len), claims != NULL);
    if (ws == WS_PERSISTENT || ws == WS_STATIC) FI_TRY(fi__prefill_persistent_ctas(&sm_count));
    const struct ws_rows ws_rows = {a->qo_len, a->kv_len, a->kv_len};
    const struct work_grid tile_grid = {(int)tiles[idx], NULL, NULL, NULL};
    const struct work_grid ws_grid = {(int)fi__prefill_ceil_div(rows, fi__prefill_ws_tile_q(spec)),
                                      NULL, NULL, claims, 1};
    FI_TRY(fi__prefill_launch(kernel, spec, idx, ws, sm_count, &tile_grid, &ws_grid,
                              a->num_kv_heads, &p, &ws_rows, (CUstream)stream, "prefill"));
out:
    return rc;
}
