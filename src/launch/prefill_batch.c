/*
 * Batch prefill's run (fi_batch_prefill_run): the run arguments checked
 * against the plan (prefill_plan.c), the pre-pass and the launch.
 */

#include "launch/prefill.h"

/* The per-request RoPE offsets of a batch run (args version 4): NULL, or a
 * device array read in place of rope_offset, so rope_offset must be 0 (two
 * positions for one key would be a caller's mistake, not a sum). Without
 * RoPE they are not read. */
static int batch_rope_offsets(const char *who, const fi_jit_spec *spec,
                              const fi_batch_prefill_args *a, const int32_t **out)
{
    *out = NULL;
    if (a->version < 4 || spec->pos != FI_POS_ROPE_LLAMA || !a->rope_offsets) return 0;
    int rc = fi__check_opt_ptr(who, "rope_offsets", a->rope_offsets, 4);
    if (rc == 0 && a->rope_offset != 0)
        rc = fi__error(FI_EINVALID, "%s: rope_offset is %d and rope_offsets is set: give one "
                       "(rope_offsets replaces rope_offset per request)", who, a->rope_offset);
    if (rc == 0) *out = a->rope_offsets;
    return rc;
}

int fi_batch_prefill_run(fi_jit_ctx *ctx, const fi_batch_prefill_plan *plan,
                         const fi_batch_prefill_args *a, struct CUstream_st *stream)
{
    int rc = 0;
    const fi_jit_kernel *kernel = NULL;
    fi_prefill_params p;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    const int32_t *rope_offsets = NULL;

    if (!ctx) FI_FAIL(FI_EINVALID, "fi_batch_prefill_run: ctx is NULL");
    if (!plan) FI_FAIL(FI_EINVALID, "fi_batch_prefill_run: plan is NULL");
    const fi_jit_spec *spec = &plan->spec;
    const char *who = fi__prefill_batch_who(spec);
    const int paged = spec->kind == FI_KIND_BATCH_PREFILL_PAGED;
    FI_TRY(fi__check_version(who, "args", a, a ? a->version : 0, 3, FI_BATCH_PREFILL_ARGS_VERSION));
    FI_TRY(fi__jit_variant_pack(ctx, spec, who, a->variant_args, a->num_variant_args,
                                variant_params));
    if (plan->num_work == 0) goto out; /* no query in the batch */
    if (!plan->uploaded)
        FI_FAIL(FI_EINVALID, "%s: the plan has no workspace yet; call "
                "fi_batch_prefill_plan_upload first", who);
    FI_TRY(fi__check_tensors(who, a->q, a->k, a->v, a->o, a->lse, 1));
    if (!a->qo_indptr || !a->kv_indptr)
        FI_FAIL(FI_EINVALID, "%s: qo_indptr and kv_indptr (device arrays) must not be NULL", who);
    if (paged && (!a->kv_indices || !a->kv_last_page_len))
        FI_FAIL(FI_EINVALID, "%s: kv_indices and kv_last_page_len (device arrays) must not be NULL",
                who);
    FI_TRY(fi__check_stride(who, "q_stride_n", a->q_stride_n, 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "o_stride_n", a->o_stride_n, 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "q_stride_h", a->q_stride_h, plan->num_qo_heads > 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "o_stride_h", a->o_stride_h, plan->num_qo_heads > 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "k_stride_n", a->k_stride_n, 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "v_stride_n", a->v_stride_n, 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "k_stride_h", a->k_stride_h, plan->num_kv_heads > 1, PREFILL_ELEM_BYTES));
    FI_TRY(fi__check_stride(who, "v_stride_h", a->v_stride_h, plan->num_kv_heads > 1, PREFILL_ELEM_BYTES));
    if (paged) {
        FI_TRY(fi__check_stride(who, "k_stride_page", a->k_stride_page, 1, PREFILL_ELEM_BYTES));
        FI_TRY(fi__check_stride(who, "v_stride_page", a->v_stride_page, 1, PREFILL_ELEM_BYTES));
    }
    FI_TRY(fi__prefill_check_scalars(who, spec, a->sm_scale, a->logits_soft_cap, a->rope_scale,
                                     a->rope_theta, a->rope_offset, a->alibi_slopes,
                                     a->custom_mask));
    FI_TRY(fi__check_opt_ptr(who, "custom_mask_offsets", a->custom_mask_offsets, 8));
    FI_TRY(batch_rope_offsets(who, spec, a, &rope_offsets));
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));

    memset(&p, 0, sizeof p);
    PREFILL_FILL_COMMON(&p, a, spec, variant_params, plan->window_left);
    p.qo_indptr = a->qo_indptr;
    p.kv_indptr = a->kv_indptr;
    p.kv_indices = a->kv_indices;
    p.kv_last_page_len = a->kv_last_page_len;
    p.custom_offsets = (const long long *)a->custom_mask_offsets;
    p.rope_offsets = rope_offsets;
    p.k_stride_page = a->k_stride_page;
    p.v_stride_page = a->v_stride_page;
    p.num_qo_heads = plan->num_qo_heads;
    p.num_kv_heads = plan->num_kv_heads;
    p.group_size = plan->num_qo_heads / plan->num_kv_heads;
    p.heads_per_section = plan->heads_per_section;
    p.page_size = paged ? plan->page_size : 1;
    if (plan->rot_k)
        FI_TRY(fi__prefill_rotate_keys(kernel, spec->head_dim, plan->rot_k,
                                       plan->kv_token_start ? plan->kv_token_start : a->kv_indptr,
                                       plan->kv_rows, plan->batch_size, &p, (CUstream)stream, who));
    const struct ws_rows rows = {plan->qo_tokens, paged ? plan->kv_rows : plan->kv_tokens,
                                 plan->kv_tokens};
    const struct work_grid tile_grid = {plan->num_work, plan->work_request, plan->work_tile, NULL};
    const struct work_grid ws_grid = {plan->num_ws_work, plan->ws_work_request, plan->ws_work_tile,
                                      plan->claims};
    FI_TRY(fi__prefill_launch(kernel, spec, plan->tile, (enum ws_mode)plan->ws, plan->sm_count,
                              &tile_grid, &ws_grid, plan->num_kv_heads, &p, &rows, (CUstream)stream,
                              who));
out:
    return rc;
}
