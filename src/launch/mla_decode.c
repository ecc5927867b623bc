/*
 * Host side of absorbed MLA decode (include/fijit_mla.h): the plan, its
 * workspace, the run. The kind (limits, launch shape, arch check) is the unit
 * src/kinds/mla_decode.c; the kernels are in templates/mla/, the parameter
 * struct and work item in templates/mla/params.h.
 *
 * The plan. A work item is one request's 64-row block ((token, head) rows)
 * against a contiguous range of its keys. With one block per SM (151-188 KiB of
 * shared memory), a batch whose row blocks fill the SMs is not split; else
 * each request's row blocks get its share of the SMs, in proportion to its
 * keys and rounded down (so the grid stays within one wave), as items of
 * even, whole 32-key tiles, none shorter than MLA_MIN_CHUNK_TILES tiles.
 * Items of one (request, row block) are consecutive.
 *
 * Workspace layout (all offsets 16-byte aligned):
 *   work        [num_items] fi_mla_decode_work
 *   partial_o   [num_items, 64, 512] float   (only if some request splits)
 *   partial_lse [num_items, 64] float
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "core/jit.h"
#include "kinds/mla_decode.h"
#include "fijit_mla.h"
#include "launch/launch_common.h"
#include "launch/mla_decode.h"
#include "mla/params.h"
#include "toolchain/cuda_drv.h"

/* Fewest tiles of a chunk: below this the per-block setup (the 72 KB Q load)
 * and the merge of one more partial state outweigh the parallelism. A first
 * guess, to be swept on the GPU (bench/bench_mla_decode.py). */
#define MLA_MIN_CHUNK_TILES 4

static const char *const who = "mla_decode";

/* A failed driver call: fi__cuda_error writes the message. */
#define FI_CU_FAIL(res, what)                                                  \
    do {                                                                       \
        rc = fi__cuda_error(FI_ECUDA, (res), (what));                          \
        goto out;                                                              \
    } while (0)

struct fi_batch_mla_decode_plan {
    fi_jit_spec spec;
    char variant[FI_VARIANT_NAME_MAX + 1];
    fi_jit_ctx *ctx;
    const fi_jit_kernel *kernel; /* borrowed from ctx, loaded by plan_new */
    int batch_size, num_heads, page_size, num_tokens;
    int num_items, max_request_splits, any_split;
    fi_mla_decode_work *work;
    size_t work_bytes, partial_o_off, partial_lse_off, workspace_bytes;
    void *uploaded; /* workspace the work list was copied to */
};

/* ---- the plan ------------------------------------------------------------------ */

static int64_t round_tiles(int64_t keys)
{
    return (keys + FI_MLA_TILE_KEYS - 1) / FI_MLA_TILE_KEYS * FI_MLA_TILE_KEYS;
}

/* Keys per item of a request of `keys` keys cut into about `pieces` items
 * (1: not cut) of whole tiles, none shorter than MLA_MIN_CHUNK_TILES tiles,
 * at most FI_MLA_MAX_SPLITS; its number of items in *splits. */
static int64_t request_chunk(int64_t keys, int64_t pieces, int *splits)
{
    const int64_t longest = (keys + MLA_MIN_CHUNK_TILES * FI_MLA_TILE_KEYS - 1) /
                            (MLA_MIN_CHUNK_TILES * FI_MLA_TILE_KEYS);
    if (pieces > longest) pieces = longest;
    if (pieces > FI_MLA_MAX_SPLITS) pieces = FI_MLA_MAX_SPLITS;
    *splits = 1;
    if (pieces <= 1) return keys;
    const int64_t c = round_tiles((keys + pieces - 1) / pieces);
    *splits = (int)((keys + c - 1) / c);
    return c;
}

static int check_plan_args(const fi_batch_mla_decode_plan_args *a)
{
    int rc = 0;
    FI_TRY(fi__check_version(who, "plan args", a, a ? a->version : 0,
                             FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION,
                             FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION));
    if (a->batch_size < 1)
        FI_FAIL(FI_EINVALID, "%s: batch_size is %d, must be >= 1", who, a->batch_size);
    if (!a->qo_indptr || !a->kv_indptr || !a->kv_last_page_len)
        FI_FAIL(FI_EINVALID, "%s: qo_indptr, kv_indptr and kv_last_page_len (host arrays) are "
                "required", who);
    if (a->num_heads < 1 || a->num_heads > 128)
        FI_FAIL(FI_EINVALID, "%s: num_heads is %d (supported: 1 to 128)", who, a->num_heads);
    if (a->page_size < 1 || a->page_size > FI_MLA_MAX_PAGE_SIZE)
        FI_FAIL(FI_EUNSUPPORTED, "%s: page_size %d is not supported (supported: 1 to %d)", who,
                a->page_size, FI_MLA_MAX_PAGE_SIZE);
    if (a->max_splits < 0 || a->max_splits > FI_MLA_MAX_SPLITS)
        FI_FAIL(FI_EINVALID, "%s: max_splits is %d (0: automatic, 1: no split, at most %d)", who,
                a->max_splits, FI_MLA_MAX_SPLITS);
    if (a->sm_count < 0)
        FI_FAIL(FI_EINVALID, "%s: sm_count is %d (0: from the device)", who, a->sm_count);
    if (a->qo_indptr[0] != 0 || a->kv_indptr[0] != 0)
        FI_FAIL(FI_EINVALID, "%s: qo_indptr[0] (%d) and kv_indptr[0] (%d) must be 0", who,
                a->qo_indptr[0], a->kv_indptr[0]);
    for (int b = 0; b < a->batch_size; b++) {
        const int64_t q_len = (int64_t)a->qo_indptr[b + 1] - a->qo_indptr[b];
        const int32_t p0 = a->kv_indptr[b], p1 = a->kv_indptr[b + 1];
        if (q_len < 1 || q_len > FI_MLA_MAX_Q_LEN)
            FI_FAIL(FI_EINVALID, "%s: request %d has %lld query tokens (qo_indptr[%d] = %d, "
                    "qo_indptr[%d] = %d); supported: 1 to %d", who, b, (long long)q_len, b,
                    a->qo_indptr[b], b + 1, a->qo_indptr[b + 1], FI_MLA_MAX_Q_LEN);
        if (p1 < p0)
            FI_FAIL(FI_EINVALID, "%s: kv_indptr[%d] = %d < kv_indptr[%d] = %d", who, b + 1, p1, b,
                    p0);
        if (p1 > p0 && (a->kv_last_page_len[b] < 1 || a->kv_last_page_len[b] > a->page_size))
            FI_FAIL(FI_EINVALID, "%s: kv_last_page_len[%d] = %d; a request with pages needs "
                    "1..page_size (%d)", who, b, a->kv_last_page_len[b], a->page_size);
        if (p1 > p0 && (int64_t)(p1 - p0 - 1) * a->page_size + a->kv_last_page_len[b] > INT32_MAX / 2)
            FI_FAIL(FI_EINVALID, "%s: request %d is too long", who, b);
    }
out:
    return rc;
}

/* The plan for these arguments, without its kernel. */
static int plan_make(fi_batch_mla_decode_plan **out, const fi_jit_spec *spec,
                     const fi_batch_mla_decode_plan_args *a)
{
    int rc = 0;
    fi_batch_mla_decode_plan *plan = NULL;
    int *keys = NULL, *blocks = NULL, *pieces = NULL;
    *out = NULL;
    if (!spec) FI_FAIL(FI_EINVALID, "%s: spec is NULL", who);
    FI_TRY(fi__check_kind(who, spec, FI_KIND_MLA_DECODE, "FI_KIND_MLA_DECODE"));
    FI_TRY(check_plan_args(a));
    const int batch = a->batch_size;
    if (!(plan = fi__calloc(1, sizeof *plan)) || !(keys = fi__calloc((size_t)batch, sizeof *keys)) ||
        !(blocks = fi__calloc((size_t)batch, sizeof *blocks)) ||
        !(pieces = fi__calloc((size_t)batch, sizeof *pieces)))
        FI_FAIL(FI_ENOMEM, "%s: out of memory planning %d requests", who, batch);
    fi__launch_keep_spec(&plan->spec, plan->variant, sizeof plan->variant, spec);
    plan->batch_size = batch;
    plan->num_heads = a->num_heads;
    plan->page_size = a->page_size;
    plan->num_tokens = a->qo_indptr[batch];

    int64_t row_blocks = 0, key_work = 0;
    int max_keys = 0;
    for (int b = 0; b < batch; b++) {
        const int32_t p0 = a->kv_indptr[b], p1 = a->kv_indptr[b + 1];
        keys[b] = p1 > p0 ? (p1 - p0 - 1) * a->page_size + a->kv_last_page_len[b] : 0;
        blocks[b] = ((a->qo_indptr[b + 1] - a->qo_indptr[b]) * a->num_heads + FI_MLA_ROWS - 1) /
                    FI_MLA_ROWS;
        row_blocks += blocks[b];
        key_work += (int64_t)blocks[b] * keys[b];
        if (keys[b] > max_keys) max_keys = keys[b];
    }

    /* Items per row block of each request: with fewer row blocks than SMs,
     * each request's share of the SMs, in proportion to its keys, rounded
     * down so that the grid stays within one wave. */
    if (a->max_splits != 1 && max_keys > MLA_MIN_CHUNK_TILES * FI_MLA_TILE_KEYS) {
        int sm_count = a->sm_count;
        if (sm_count == 0) FI_TRY(fi__cuda_sm_count(&sm_count));
        for (int b = 0; b < batch && row_blocks < sm_count; b++) {
            int64_t share = (int64_t)sm_count * keys[b] / key_work;
            if (a->max_splits > 1 && share > a->max_splits) share = a->max_splits;
            pieces[b] = share > 1 ? (int)share : 1;
        }
    }

    int64_t items = 0;
    for (int b = 0; b < batch; b++) {
        int s;
        request_chunk(keys[b], pieces[b], &s);
        items += (int64_t)blocks[b] * s;
    }
    if (items > INT32_MAX / 2) FI_FAIL(FI_EINVALID, "%s: too many work items", who);
    if (!(plan->work = fi__calloc((size_t)items, sizeof *plan->work)))
        FI_FAIL(FI_ENOMEM, "%s: out of memory for %lld work items", who, (long long)items);
    int item = 0;
    for (int b = 0; b < batch; b++) {
        int s;
        const int64_t c = request_chunk(keys[b], pieces[b], &s);
        if (s > plan->max_request_splits) plan->max_request_splits = s;
        if (s > 1) plan->any_split = 1;
        for (int rb = 0; rb < blocks[b]; rb++) {
            for (int i = 0; i < s; i++) {
                fi_mla_decode_work *w = &plan->work[item + i];
                w->request = b;
                w->row_block = rb;
                w->kv_begin = (int)(c * i);
                w->kv_end = i == s - 1 ? keys[b] : (int)(c * (i + 1));
                w->kv_len = keys[b];
                w->q_start = a->qo_indptr[b];
                w->q_len = a->qo_indptr[b + 1] - a->qo_indptr[b];
                w->page_start = a->kv_indptr[b];
                w->split = i;
                w->num_splits = s;
                w->first_item = item;
            }
            item += s;
        }
    }
    plan->num_items = item;

    plan->work_bytes = fi__align16((size_t)items * sizeof(fi_mla_decode_work));
    size_t off = plan->work_bytes;
    if (plan->any_split) {
        plan->partial_o_off = off;
        off += fi__align16((size_t)items * FI_MLA_ROWS * FI_MLA_DIM_CKV * sizeof(float));
        plan->partial_lse_off = off;
        off += fi__align16((size_t)items * FI_MLA_ROWS * sizeof(float));
    }
    plan->workspace_bytes = off;
    *out = plan;
    plan = NULL;
out:
    fi_batch_mla_decode_plan_free(plan);
    fi__free(keys);
    fi__free(blocks);
    fi__free(pieces);
    return rc;
}

int fi_batch_mla_decode_workspace_size(size_t *out, const fi_jit_spec *spec,
                                       const fi_batch_mla_decode_plan_args *args)
{
    fi_batch_mla_decode_plan *plan = NULL;
    if (!out) return fi__error(FI_EINVALID, "%s: out is NULL", who);
    *out = 0;
    int rc = plan_make(&plan, spec, args);
    if (rc == 0) *out = plan->workspace_bytes;
    fi_batch_mla_decode_plan_free(plan);
    return rc;
}

int fi_batch_mla_decode_plan_new(fi_batch_mla_decode_plan **out, fi_jit_ctx *ctx,
                                 const fi_jit_spec *spec, const fi_batch_mla_decode_plan_args *args)
{
    int rc = 0;
    fi_batch_mla_decode_plan *plan = NULL;
    if (!out) return fi__error(FI_EINVALID, "%s: out is NULL", who);
    *out = NULL;
    if (!ctx) return fi__error(FI_EINVALID, "%s: ctx is NULL", who);
    FI_TRY(plan_make(&plan, spec, args));
    /* The kernel now, so that a run (perhaps under graph capture) never compiles. */
    FI_TRY(fi_jit_get_kernel(&plan->kernel, ctx, &plan->spec));
    plan->ctx = ctx;
    *out = plan;
    plan = NULL;
out:
    fi_batch_mla_decode_plan_free(plan);
    return rc;
}

void fi_batch_mla_decode_plan_free(fi_batch_mla_decode_plan *plan)
{
    if (!plan) return;
    fi__free(plan->work);
    fi__free(plan);
}

int fi_batch_mla_decode_plan_workspace_size(size_t *out, const fi_batch_mla_decode_plan *plan)
{
    if (!plan || !out) return fi__error(FI_EINVALID, "%s: NULL argument (out, plan)", who);
    *out = plan->workspace_bytes;
    return 0;
}

int fi_batch_mla_decode_plan_describe(int *out_num_items, int *out_max_request_splits,
                                      const fi_batch_mla_decode_plan *plan)
{
    if (!plan) return fi__error(FI_EINVALID, "%s: plan is NULL", who);
    if (out_num_items) *out_num_items = plan->num_items;
    if (out_max_request_splits) *out_max_request_splits = plan->max_request_splits;
    return 0;
}

int fi__mla_decode_plan_work(const fi_batch_mla_decode_plan *plan, const fi_mla_decode_work **out,
                             int *count)
{
    if (!plan || !out || !count) return fi__error(FI_EINVALID, "%s: NULL argument", who);
    *out = plan->work;
    *count = plan->num_items;
    return 0;
}

int fi_batch_mla_decode_plan_upload(fi_batch_mla_decode_plan *plan, void *workspace,
                                    size_t workspace_bytes)
{
    int rc = 0;
    const fi_cuda_api *cu = NULL;
    CUresult res;
    if (!plan) FI_FAIL(FI_EINVALID, "%s: plan is NULL", who);
    if (!workspace || (uintptr_t)workspace % 16 != 0)
        FI_FAIL(FI_EINVALID, "%s: workspace (%p) must be non-NULL and 16-byte aligned", who,
                workspace);
    if (workspace_bytes < plan->workspace_bytes)
        FI_FAIL(FI_EINVALID, "%s: workspace has %zu bytes, the plan needs %zu (see "
                "fi_batch_mla_decode_plan_workspace_size)", who, workspace_bytes,
                plan->workspace_bytes);
    FI_TRY(fi__cuda_load(&cu));
    if ((res = cu->MemcpyHtoD((CUdeviceptr)(uintptr_t)workspace, plan->work,
                              (size_t)plan->num_items * sizeof(fi_mla_decode_work))) != CUDA_SUCCESS)
        FI_CU_FAIL(res, "mla_decode: cuMemcpyHtoD (work list)");
    /* Ordered on the legacy stream; make it visible to all streams. */
    if ((res = cu->CtxSynchronize()) != CUDA_SUCCESS)
        FI_CU_FAIL(res, "mla_decode: cuCtxSynchronize");
    plan->uploaded = workspace;
out:
    return rc;
}

/* ---- the run ------------------------------------------------------------------- */

static int check_run_args(const fi_batch_mla_decode_plan *plan, const fi_batch_mla_decode_args *a)
{
    int rc = 0;
    const int kvb = fi__mla_decode_kv_bytes(&plan->spec);
    FI_TRY(fi__check_version(who, "args", a, a->version, FI_BATCH_MLA_DECODE_ARGS_VERSION,
                             FI_BATCH_MLA_DECODE_ARGS_VERSION));
    FI_TRY(fi__check_ptr(who, "q_nope", a->q_nope, 16));
    FI_TRY(fi__check_ptr(who, "q_pe", a->q_pe, 16));
    FI_TRY(fi__check_ptr(who, "ckv", a->ckv, 16));
    FI_TRY(fi__check_ptr(who, "kpe", a->kpe, 16));
    FI_TRY(fi__check_ptr(who, "o", a->o, 16));
    FI_TRY(fi__check_ptr(who, "kv_indices", a->kv_indices, 4));
    FI_TRY(fi__check_opt_ptr(who, "lse", a->lse, 4));
    const int tokens = plan->num_tokens > 1, heads = plan->num_heads > 1;
    FI_TRY(fi__check_stride(who, "q_nope_stride_n", a->q_nope_stride_n, tokens, 2));
    FI_TRY(fi__check_stride(who, "q_nope_stride_h", a->q_nope_stride_h, heads, 2));
    FI_TRY(fi__check_stride(who, "q_pe_stride_n", a->q_pe_stride_n, tokens, 2));
    FI_TRY(fi__check_stride(who, "q_pe_stride_h", a->q_pe_stride_h, heads, 2));
    FI_TRY(fi__check_stride(who, "ckv_stride_page", a->ckv_stride_page, 1, kvb));
    FI_TRY(fi__check_stride(who, "ckv_stride_n", a->ckv_stride_n, plan->page_size > 1, kvb));
    FI_TRY(fi__check_stride(who, "kpe_stride_page", a->kpe_stride_page, 1, kvb));
    FI_TRY(fi__check_stride(who, "kpe_stride_n", a->kpe_stride_n, plan->page_size > 1, kvb));
    FI_TRY(fi__check_stride(who, "o_stride_n", a->o_stride_n, tokens, 2));
    FI_TRY(fi__check_stride(who, "o_stride_h", a->o_stride_h, heads, 2));
    /* Rows of o must not overlap: the blocks write them at the same time. */
    if (heads && a->o_stride_h < FI_MLA_DIM_CKV)
        FI_FAIL(FI_EINVALID, "%s: o_stride_h (%lld) is smaller than the 512 values of a row", who,
                (long long)a->o_stride_h);
    if (tokens && a->o_stride_n < (int64_t)plan->num_heads * FI_MLA_DIM_CKV &&
        a->o_stride_n < a->o_stride_h * plan->num_heads)
        FI_FAIL(FI_EINVALID, "%s: o_stride_n (%lld) makes tokens overlap", who,
                (long long)a->o_stride_n);
    if (!(a->sm_scale > 0.f && isfinite(a->sm_scale)))
        FI_FAIL(FI_EINVALID, "%s: sm_scale is %g; give the finite scale > 0 of the model "
                "(DeepSeek-V3: 1/sqrt(192) before absorption, times its YaRN factor)", who,
                (double)a->sm_scale);
    if (!isfinite(a->kv_scale) || a->kv_scale < 0.f)
        FI_FAIL(FI_EINVALID, "%s: kv_scale is %g; it must be finite and >= 0 (0: 1)", who,
                (double)a->kv_scale);
    FI_TRY(fi__check_scalars(who, &plan->spec, a->sm_scale, a->logits_soft_cap, 0.f, 0.f, NULL));
    if (!a->workspace || a->workspace != plan->uploaded)
        FI_FAIL(FI_EINVALID, "%s: workspace %p is not the one this plan was uploaded to (%p); "
                "call fi_batch_mla_decode_plan_upload first", who, a->workspace, plan->uploaded);
    if (a->workspace_bytes < plan->workspace_bytes)
        FI_FAIL(FI_EINVALID, "%s: workspace has %zu bytes, the plan needs %zu", who,
                a->workspace_bytes, plan->workspace_bytes);
out:
    return rc;
}

int fi_batch_mla_decode_run(fi_jit_ctx *ctx, const fi_batch_mla_decode_plan *plan,
                            const fi_batch_mla_decode_args *a, struct CUstream_st *stream)
{
    int rc = 0;
    fi_mla_decode_params p;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    if (!ctx || !plan || !a) FI_FAIL(FI_EINVALID, "%s: NULL argument (ctx, plan, args)", who);
    if (ctx != plan->ctx)
        FI_FAIL(FI_EINVALID, "%s: ctx is not the context the plan was made with", who);
    FI_TRY(check_run_args(plan, a));
    FI_TRY(fi__jit_variant_pack(ctx, &plan->spec, who, a->variant_args, a->num_variant_args,
                                variant_params));

    memset(&p, 0, sizeof p);
    char *ws = (char *)a->workspace;
    p.q_nope = a->q_nope;
    p.q_pe = a->q_pe;
    p.ckv = a->ckv;
    p.kpe = a->kpe;
    p.kv_indices = a->kv_indices;
    p.o = a->o;
    p.lse = a->lse;
    p.work = (const fi_mla_decode_work *)ws;
    if (plan->any_split) {
        p.partial_o = (float *)(ws + plan->partial_o_off);
        p.partial_lse = (float *)(ws + plan->partial_lse_off);
    }
    p.q_nope_stride_t = a->q_nope_stride_n;
    p.q_nope_stride_h = a->q_nope_stride_h;
    p.q_pe_stride_t = a->q_pe_stride_n;
    p.q_pe_stride_h = a->q_pe_stride_h;
    p.ckv_stride_page = a->ckv_stride_page;
    p.ckv_stride_n = a->ckv_stride_n;
    p.kpe_stride_page = a->kpe_stride_page;
    p.kpe_stride_n = a->kpe_stride_n;
    p.o_stride_t = a->o_stride_n;
    p.o_stride_h = a->o_stride_h;
    p.num_heads = plan->num_heads;
    p.page_size = plan->page_size;
    p.sm_scale = a->sm_scale;
    p.soft_cap = fi__launch_soft_cap(&plan->spec, a->logits_soft_cap);
    p.kv_scale = fi__launch_fp8_scale(a->kv_scale);
    memcpy(p.variant_params, variant_params, sizeof p.variant_params);

    const fi_jit_kernel *k = plan->kernel;
    FI_TRY(fi__cuda_launch(k->functions[0], (unsigned)plan->num_items, 1, k->block_dim,
                           k->smem_bytes, (CUstream)stream, &p, who));
    if (plan->any_split)
        FI_TRY(fi__cuda_launch(k->functions[1], (unsigned)plan->num_items, 1, k->merge_block_dim,
                               0, (CUstream)stream, &p, "mla_decode merge"));
out:
    return rc;
}
