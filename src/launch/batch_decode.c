/*
 * Host side of batch decode over a paged KV cache (include/fijit_batch_decode.h):
 * the plan, its workspace and the launch (fi_merge_states: merge_states.c).
 * The kernels are in templates/decode/batch_decode.cuh (tile loop shared with
 * single decode in templates/decode/); the parameter structs in
 * templates/decode/params.h.
 *
 * The plan. One block serves one kv head (or a slice of a large GQA group,
 * "head block") over one work item: a contiguous range of one request's keys.
 * The chunk length (tokens per item, whole tiles) is chosen so that:
 *  - when the batch alone does not fill one wave of resident blocks
 *    (DECODE_BLOCKS_PER_SM per SM), it is the shortest chunk for which the
 *    whole grid still fits in that wave, but never below
 *    BATCH_DECODE_MIN_CHUNK_TILES;
 *  - when it does, and no request is longer than a slot's share of all the
 *    keys (total keys x blocks per key / slots), nothing is split;
 *  - otherwise requests are cut into chunks of about 1/BATCH_DECODE_WAVES of
 *    a wave's share (at least BATCH_DECODE_BIG_CHUNK_TILES), so that the long
 *    requests of a skewed batch do not leave a tail of lone blocks.
 * A request's chunks are then evened out (its length divided by its chunk
 * count, rounded up to whole tiles). Items of one request are consecutive.
 * The ring depth follows from the grid (fi__decode_stages in decode.c): a 4-
 * or 6-tile ring for at most 3 or 2 blocks per SM whose items have
 * BATCH_DECODE_DEEP_MIN_TILES..32 tiles, else 3 tiles (four blocks per SM).
 * The tuning constants are in decode.h, next to single decode's.
 *
 * Workspace layout (all offsets 16-byte aligned):
 *   work   [num_items] fi_batch_decode_work
 *   partial_o   [num_items, num_qo_heads, hd] float     (only if some request splits)
 *   partial_lse [num_items, num_qo_heads] float
 *   counters    [batch, num_kv_heads * head_blocks] u64
 * Counters are zeroed by the upload and left at 0 by every launch (the last
 * block of a count resets it; see decode/params.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "launch/launch_common.h"
#include "toolchain/cuda_drv.h"
#include "launch/decode.h"
#include "common/error.h"
#include "launch/rope.h"
#include "core/jit.h"
#include "fijit_batch_decode.h"
#include "decode/params.h"
#include "kinds/registry.h"
#include "kinds/spec.h"
#include "common/sys.h"

/* A failed driver call: fi__cuda_error has already written the message. */
#define CU_FAIL(expr)                                                          \
    do {                                                                       \
        rc = (expr);                                                           \
        goto out;                                                              \
    } while (0)

struct fi_batch_decode_plan {
    fi_jit_spec spec;
    char variant[FI_VARIANT_NAME_MAX + 1];
    int batch_size, num_qo_heads, num_kv_heads, page_size, window_left;
    int group_size, head_chunks, heads_per_block, head_blocks;
    int num_items, max_request_splits, any_split;
    int stages;                /* ring depth for the plan's grid (fi__decode_stages) */
    fi_batch_decode_work *work;
    size_t work_bytes, partial_o_off, partial_lse_off, counters_off, workspace_bytes;
    void *uploaded;            /* workspace the work list was copied to */
};

/* Blocks of the grid for chunk length `chunk` (0: no split). */
static int64_t count_blocks(const int *keys, int batch, int64_t chunk, int y)
{
    int64_t n = 0;
    for (int b = 0; b < batch; b++)
        n += chunk > 0 && keys[b] > 0 ? (keys[b] + chunk - 1) / chunk : 1;
    return n * y;
}

int fi__batch_decode_plan_make(fi_batch_decode_plan **out, const fi_jit_spec *spec,
                               const fi_batch_decode_plan_args *info)
{
    int rc = 0;
    fi_batch_decode_plan *plan = NULL;
    int *len = NULL, *first = NULL, *keys = NULL, *splits = NULL;
    *out = NULL;
    if (!spec) FI_FAIL(FI_EINVALID, "batch_decode: spec is NULL");
    FI_TRY(fi__check_kind("batch_decode", spec, FI_KIND_BATCH_DECODE, "FI_KIND_BATCH_DECODE"));
    FI_TRY(fi__check_version("batch_decode", "plan args", info, info ? info->version : 0,
                             FI_BATCH_DECODE_PLAN_ARGS_VERSION, FI_BATCH_DECODE_PLAN_ARGS_VERSION));
    if (info->batch_size < 1)
        FI_FAIL(FI_EINVALID, "batch_decode: batch_size is %d, must be >= 1", info->batch_size);
    if (!info->kv_indptr || !info->kv_last_page_len)
        FI_FAIL(FI_EINVALID, "batch_decode: kv_indptr and kv_last_page_len (host arrays) are required");
    FI_TRY(fi__check_heads("batch_decode", info->num_qo_heads, info->num_kv_heads));
    if (info->page_size < 1 || info->page_size > BATCH_DECODE_MAX_PAGE_SIZE)
        FI_FAIL(FI_EUNSUPPORTED, "batch_decode: page_size %d is not supported (supported: 1 to %d)",
                info->page_size, BATCH_DECODE_MAX_PAGE_SIZE);
    FI_TRY(fi__check_window("batch_decode", spec, info->window_left));
    if (info->sm_count < 0)
        FI_FAIL(FI_EINVALID, "batch_decode: sm_count is %d (0: from the device)", info->sm_count);
    if (info->max_splits < 0)
        FI_FAIL(FI_EINVALID, "batch_decode: max_splits is %d (0: automatic, 1: no split)",
                info->max_splits);
    if (info->kv_indptr[0] != 0)
        FI_FAIL(FI_EINVALID, "batch_decode: kv_indptr[0] is %d, must be 0", info->kv_indptr[0]);

    if (!(plan = fi__calloc(1, sizeof *plan)) || !(len = fi__calloc((size_t)info->batch_size, sizeof *len)) ||
        !(keys = fi__calloc((size_t)info->batch_size, sizeof *keys)) ||
        !(first = fi__calloc((size_t)info->batch_size, sizeof *first)) ||
        !(splits = fi__calloc((size_t)info->batch_size, sizeof *splits)))
        FI_FAIL(FI_ENOMEM, "batch_decode: out of memory planning %d requests", info->batch_size);
    fi__launch_keep_spec(&plan->spec, plan->variant, sizeof plan->variant, spec);
    plan->batch_size = info->batch_size;
    plan->num_qo_heads = info->num_qo_heads;
    plan->num_kv_heads = info->num_kv_heads;
    plan->page_size = info->page_size;
    plan->window_left = fi__launch_window(spec, info->window_left);

    const int hd = spec->head_dim;
    const int tile = FI_DECODE_TILE_TOKENS(hd);
    plan->group_size = info->num_qo_heads / info->num_kv_heads;
    plan->head_chunks = fi__decode_head_chunks(plan->group_size);
    plan->heads_per_block = FI_DECODE_HEADS_PER_THREAD * plan->head_chunks;
    plan->head_blocks = (plan->group_size + plan->heads_per_block - 1) / plan->heads_per_block;
    const int y = info->num_kv_heads * plan->head_blocks;
    if (y > 65535)
        FI_FAIL(FI_EINVALID, "batch_decode: %d kv heads x %d head blocks exceed the grid's y limit "
                "of 65535", info->num_kv_heads, plan->head_blocks);

    int64_t total_keys = 0;
    int max_keys = 0;
    for (int b = 0; b < info->batch_size; b++) {
        const int32_t p0 = info->kv_indptr[b], p1 = info->kv_indptr[b + 1];
        const int32_t last = info->kv_last_page_len[b];
        if (p1 < p0)
            FI_FAIL(FI_EINVALID, "batch_decode: kv_indptr[%d] = %d < kv_indptr[%d] = %d", b + 1,
                    p1, b, p0);
        if (p1 > p0 && (last < 1 || last > info->page_size))
            FI_FAIL(FI_EINVALID, "batch_decode: kv_last_page_len[%d] = %d; a request with pages "
                    "needs 1..page_size (%d)", b, last, info->page_size);
        const int64_t l = p1 > p0 ? (int64_t)(p1 - p0 - 1) * info->page_size + last : 0;
        if (l > INT32_MAX / 2) FI_FAIL(FI_EINVALID, "batch_decode: request %d is too long", b);
        len[b] = (int)l;
        if (plan->window_left >= 0 && len[b] - 1 - plan->window_left > 0)
            first[b] = len[b] - 1 - plan->window_left;
        keys[b] = len[b] - first[b];
        total_keys += keys[b];
        if (keys[b] > max_keys) max_keys = keys[b];
    }

    /* The chunk length; 0 = no split. */
    int64_t chunk = 0;
    int sm_count = info->sm_count;
    if (info->max_splits != 1 && max_keys > BATCH_DECODE_MIN_CHUNK_TILES(max_keys) * tile) {
        if (sm_count <= 0) FI_TRY(fi__cuda_sm_count(&sm_count));
        const int64_t slots = (int64_t)sm_count * DECODE_BLOCKS_PER_SM;
        if (count_blocks(keys, info->batch_size, 0, y) < slots) {
            /* Smallest chunk (whole tiles) whose grid fits in one wave. */
            int64_t lo = BATCH_DECODE_MIN_CHUNK_TILES(max_keys), hi = (max_keys + tile - 1) / tile;
            while (lo < hi) {
                const int64_t mid = (lo + hi) / 2;
                if (count_blocks(keys, info->batch_size, mid * tile, y) <= slots) hi = mid;
                else lo = mid + 1;
            }
            chunk = lo * tile;
        } else if ((int64_t)max_keys * slots <= total_keys * y) {
            /* No request is longer than one slot's share of the work: the
             * unsplit blocks are as even as chunks would make them, without
             * the merges (H100, hd 128, page 16: batch 64 x kv 4k GQA 32/8
             * 360 us unsplit against 368 in chunks of ~1.4k keys; 16 x 4k
             * 32/32 358 against 363; larger shapes within 0.4%). */
            chunk = 0;
        } else {
            int64_t c = (total_keys * y + BATCH_DECODE_WAVES * slots - 1) /
                        (BATCH_DECODE_WAVES * slots);
            if (c < (int64_t)BATCH_DECODE_BIG_CHUNK_TILES * tile)
                c = (int64_t)BATCH_DECODE_BIG_CHUNK_TILES * tile;
            chunk = (c + tile - 1) / tile * tile;
        }
        if (info->max_splits > 1) {
            int64_t c = ((int64_t)max_keys + info->max_splits - 1) / info->max_splits;
            c = (c + tile - 1) / tile * tile;
            if (c > chunk) chunk = c;
        }
        if (chunk >= max_keys) chunk = 0;
    }

    /* Chunks per request, evened out. */
    int64_t items = 0;
    for (int b = 0; b < info->batch_size; b++) {
        int s = 1;
        if (chunk > 0 && keys[b] > 0) {
            int64_t n = (keys[b] + chunk - 1) / chunk;
            int64_t c = (keys[b] + n - 1) / n;
            c = (c + tile - 1) / tile * tile;
            n = (keys[b] + c - 1) / c;
            if (n > FI_DECODE_MAX_SPLITS) n = FI_DECODE_MAX_SPLITS;
            s = (int)n;
        }
        splits[b] = s;
        items += s;
    }
    if (items > INT32_MAX / 2) FI_FAIL(FI_EINVALID, "batch_decode: too many work items");
    plan->num_items = (int)items;
    {
        int64_t most = 0; /* tiles of the longest item */
        for (int b = 0; b < info->batch_size; b++) {
            const int64_t c = keys[b] > 0 ? ((int64_t)keys[b] + splits[b] - 1) / splits[b] : 0;
            if ((c + tile - 1) / tile > most) most = (c + tile - 1) / tile;
        }
        plan->stages = fi__decode_stages(spec, (long long)items * y, most, BATCH_DECODE_DEEP_MIN_TILES,
                                         sm_count > 0 ? sm_count : 0);
    }
    if (!(plan->work = fi__calloc((size_t)items, sizeof *plan->work)))
        FI_FAIL(FI_ENOMEM, "batch_decode: out of memory for %lld work items", (long long)items);
    int item = 0;
    for (int b = 0; b < info->batch_size; b++) {
        const int s = splits[b];
        int64_t c = keys[b] > 0 ? ((int64_t)keys[b] + s - 1) / s : 0;
        c = (c + tile - 1) / tile * tile;
        if (s > plan->max_request_splits) plan->max_request_splits = s;
        if (s > 1) plan->any_split = 1;
        for (int i = 0; i < s; i++) {
            fi_batch_decode_work *w = &plan->work[item + i];
            w->request = b;
            w->kv_begin = first[b] + (int)(c * i);
            w->kv_end = i == s - 1 ? len[b] : first[b] + (int)(c * (i + 1));
            w->kv_len = len[b];
            w->page_start = info->kv_indptr[b];
            w->split = i;
            w->num_splits = s;
            w->first_item = item;
        }
        item += s;
    }

    plan->work_bytes = fi__align16((size_t)items * sizeof(fi_batch_decode_work));
    size_t off = plan->work_bytes;
    if (plan->any_split) {
        plan->partial_o_off = off;
        off += fi__align16((size_t)items * info->num_qo_heads * hd * sizeof(float));
        plan->partial_lse_off = off;
        off += fi__align16((size_t)items * info->num_qo_heads * sizeof(float));
        plan->counters_off = off;
        off += fi__align16((size_t)info->batch_size * y * sizeof(uint64_t));
    }
    plan->workspace_bytes = off;
    *out = plan;
    plan = NULL;
out:
    fi_batch_decode_plan_free(plan);
    fi__free(len);
    fi__free(keys);
    fi__free(first);
    fi__free(splits);
    return rc;
}

int fi_batch_decode_plan_new(fi_batch_decode_plan **out, fi_jit_ctx *ctx, const fi_jit_spec *spec,
                             const fi_batch_decode_plan_args *args)
{
    if (!out) return fi__error(FI_EINVALID, "batch_decode: out is NULL");
    *out = NULL;
    if (!ctx) return fi__error(FI_EINVALID, "batch_decode: ctx is NULL");
    fi_batch_decode_plan *plan = NULL;
    const fi_jit_kernel *kernel = NULL;
    int rc = fi__batch_decode_plan_make(&plan, spec, args);
    /* Compile or load now, as batch prefill's plan does, so that no run
     * (maybe under CUDA-graph capture) ever does. */
    if (rc == 0) rc = fi_jit_get_kernel(&kernel, ctx, &plan->spec);
    if (rc < 0) {
        fi_batch_decode_plan_free(plan);
        return rc;
    }
    *out = plan;
    return 0;
}

int fi_batch_decode_workspace_size(size_t *out, const fi_jit_spec *spec,
                                   const fi_batch_decode_plan_args *args)
{
    fi_batch_decode_plan *plan = NULL;
    if (!out) return fi__error(FI_EINVALID, "batch_decode: out is NULL");
    *out = 0;
    int rc = fi__batch_decode_plan_make(&plan, spec, args);
    if (rc == 0) *out = plan->workspace_bytes;
    fi_batch_decode_plan_free(plan);
    return rc;
}

void fi_batch_decode_plan_free(fi_batch_decode_plan *plan)
{
    if (!plan) return;
    fi__free(plan->work);
    fi__free(plan);
}

int fi_batch_decode_plan_workspace_size(size_t *out, const fi_batch_decode_plan *plan)
{
    if (!plan || !out) return fi__error(FI_EINVALID, "batch_decode: NULL argument");
    *out = plan->workspace_bytes;
    return 0;
}

int fi_batch_decode_plan_describe(int *out_num_items, int *out_max_request_splits,
                                  const fi_batch_decode_plan *plan)
{
    if (!plan) return fi__error(FI_EINVALID, "batch_decode: plan is NULL");
    if (out_num_items) *out_num_items = plan->num_items;
    if (out_max_request_splits) *out_max_request_splits = plan->max_request_splits;
    return 0;
}

int fi__batch_decode_plan_work(const fi_batch_decode_plan *plan, const fi_batch_decode_work **out,
                               int *count)
{
    if (!plan || !out || !count) return fi__error(FI_EINVALID, "batch_decode: NULL argument");
    *out = plan->work;
    *count = plan->num_items;
    return 0;
}

int fi_batch_decode_plan_upload(fi_batch_decode_plan *plan, void *workspace, size_t workspace_bytes)
{
    int rc = 0;
    const fi_cuda_api *cu = NULL;
    CUresult res;
    if (!plan) FI_FAIL(FI_EINVALID, "batch_decode: plan is NULL");
    if (!workspace || (uintptr_t)workspace % 16 != 0)
        FI_FAIL(FI_EINVALID, "batch_decode: workspace (%p) must be non-NULL and 16-byte aligned",
                workspace);
    if (workspace_bytes < plan->workspace_bytes)
        FI_FAIL(FI_EINVALID, "batch_decode: workspace has %zu bytes, the plan needs %zu (see "
                "fi_batch_decode_plan_workspace_size)", workspace_bytes, plan->workspace_bytes);
    FI_TRY(fi__cuda_load(&cu));
    if ((res = cu->MemcpyHtoD((CUdeviceptr)(uintptr_t)workspace, plan->work,
                              (size_t)plan->num_items * sizeof(fi_batch_decode_work))) != CUDA_SUCCESS)
        CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch_decode: cuMemcpyHtoD (work list)"));
    if (plan->any_split &&
        (res = cu->MemsetD8((CUdeviceptr)((uintptr_t)workspace + plan->counters_off), 0,
                            plan->workspace_bytes - plan->counters_off)) != CUDA_SUCCESS)
        CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch_decode: cuMemsetD8 (split counters)"));
    /* Both are ordered on the legacy stream; make them visible to all streams. */
    if ((res = cu->CtxSynchronize()) != CUDA_SUCCESS)
        CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch_decode: cuCtxSynchronize"));
    plan->uploaded = workspace;
out:
    return rc;
}

int fi_batch_decode_run(fi_jit_ctx *ctx, const fi_batch_decode_plan *plan,
                        const fi_batch_decode_args *a, struct CUstream_st *stream)
{
    int rc = 0;
    const fi_jit_kernel *kernel = NULL;
    fi_batch_decode_params p;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    const char *who = "batch_decode";
    if (!ctx || !plan || !a) FI_FAIL(FI_EINVALID, "batch_decode: NULL argument");
    FI_TRY(fi__check_version(who, "args", a, a->version, FI_BATCH_DECODE_ARGS_VERSION,
                             FI_BATCH_DECODE_ARGS_VERSION));
    const fi_jit_spec *spec = &plan->spec;
    FI_TRY(fi__jit_variant_pack(ctx, spec, "batch_decode", a->variant_args, a->num_variant_args,
                                variant_params));
    const int kvb = fi__decode_kv_bytes(spec);
    FI_TRY(fi__check_tensors(who, a->q, a->k, a->v, a->o, a->lse, 1));
    FI_TRY(fi__check_ptr(who, "kv_indices", a->kv_indices, 4));
    /* All used: the plan's batch and head counts are not looked at here. q
     * and o are 16-bit. */
    FI_TRY(fi__check_stride(who, "q_stride_b", a->q_stride_b, 1, 2));
    FI_TRY(fi__check_stride(who, "q_stride_h", a->q_stride_h, 1, 2));
    FI_TRY(fi__check_stride(who, "o_stride_b", a->o_stride_b, 1, 2));
    FI_TRY(fi__check_stride(who, "o_stride_h", a->o_stride_h, 1, 2));
    FI_TRY(fi__check_stride(who, "k_stride_page", a->k_stride_page, 1, kvb));
    FI_TRY(fi__check_stride(who, "k_stride_h", a->k_stride_h, 1, kvb));
    FI_TRY(fi__check_stride(who, "k_stride_n", a->k_stride_n, 1, kvb));
    FI_TRY(fi__check_stride(who, "v_stride_page", a->v_stride_page, 1, kvb));
    FI_TRY(fi__check_stride(who, "v_stride_h", a->v_stride_h, 1, kvb));
    FI_TRY(fi__check_stride(who, "v_stride_n", a->v_stride_n, 1, kvb));
    FI_TRY(fi__check_offset32(who, "k_stride_page", a->k_stride_page, 1, kvb));
    FI_TRY(fi__check_offset32(who, "v_stride_page", a->v_stride_page, 1, kvb));
    FI_TRY(fi__check_offset32(who, "k_stride_n", a->k_stride_n, plan->page_size, kvb));
    FI_TRY(fi__check_offset32(who, "v_stride_n", a->v_stride_n, plan->page_size, kvb));
    if (plan->num_qo_heads > 1 && a->o_stride_h < spec->head_dim)
        FI_FAIL(FI_EINVALID, "batch_decode: o_stride_h (%lld) is smaller than head_dim (%d)",
                (long long)a->o_stride_h, spec->head_dim);
    if (plan->batch_size > 1 && a->o_stride_b < (int64_t)plan->num_qo_heads * spec->head_dim &&
        a->o_stride_b < a->o_stride_h * plan->num_qo_heads)
        FI_FAIL(FI_EINVALID, "batch_decode: o_stride_b (%lld) makes requests overlap",
                (long long)a->o_stride_b);
    if (!isfinite(a->k_scale) || !isfinite(a->v_scale))
        FI_FAIL(FI_EINVALID, "batch_decode: k_scale and v_scale must be finite");
    FI_TRY(fi__check_scalars(who, spec, a->sm_scale, a->logits_soft_cap, a->rope_scale,
                             a->rope_theta, a->alibi_slopes));
    FI_TRY(fi__check_opt_ptr(who, "rope_offsets", a->rope_offsets, 4));
    if (!a->workspace || a->workspace != plan->uploaded)
        FI_FAIL(FI_EINVALID, "batch_decode: workspace %p is not the one this plan was uploaded to "
                "(%p); call fi_batch_decode_plan_upload first", a->workspace, plan->uploaded);
    if (a->workspace_bytes < plan->workspace_bytes)
        FI_FAIL(FI_EINVALID, "batch_decode: workspace has %zu bytes, the plan needs %zu",
                a->workspace_bytes, plan->workspace_bytes);
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));

    memset(&p, 0, sizeof p);
    char *ws = (char *)a->workspace;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.kv_indices = a->kv_indices;
    p.o = a->o;
    p.lse = a->lse;
    p.alibi_slopes = a->alibi_slopes;
    p.rope_offsets = a->rope_offsets;
    p.work = (const fi_batch_decode_work *)ws;
    if (plan->any_split) {
        p.partial_o = (float *)(ws + plan->partial_o_off);
        p.partial_lse = (float *)(ws + plan->partial_lse_off);
        p.counters = (unsigned long long *)(ws + plan->counters_off);
    }
    p.q_stride_b = a->q_stride_b;
    p.q_stride_h = a->q_stride_h;
    p.o_stride_b = a->o_stride_b;
    p.o_stride_h = a->o_stride_h;
    p.k_stride_page = a->k_stride_page;
    p.k_stride_h = a->k_stride_h;
    p.k_stride_n = a->k_stride_n;
    p.v_stride_page = a->v_stride_page;
    p.v_stride_h = a->v_stride_h;
    p.v_stride_n = a->v_stride_n;
    p.num_qo_heads = plan->num_qo_heads;
    p.num_kv_heads = plan->num_kv_heads;
    p.page_size = plan->page_size;
    p.page_shift = -1;
    for (int sh = 0; sh < 7; sh++)
        if (plan->page_size == 1 << sh) p.page_shift = sh;
    p.group_size = plan->group_size;
    p.head_chunks = plan->head_chunks;
    p.heads_per_block = plan->heads_per_block;
    p.head_blocks = plan->head_blocks;
    p.stages = plan->stages;
    p.sm_scale = fi__launch_sm_scale(a->sm_scale, spec->head_dim);
    p.soft_cap = fi__launch_soft_cap(spec, a->logits_soft_cap);
    p.window_left = plan->window_left;
    p.epoch = 0; /* counters zeroed by the upload, see decode/params.h */
    p.k_scale = fi__launch_fp8_scale(a->k_scale);
    p.v_scale = fi__launch_fp8_scale(a->v_scale);
    memcpy(p.variant_params, variant_params, sizeof p.variant_params);
    if (spec->pos == FI_POS_ROPE_LLAMA)
        fi__rope_fill(p.rope_freq, spec->head_dim, a->rope_scale, a->rope_theta);
    FI_TRY(fi__decode_launch(kernel, spec, p.stages, (unsigned)plan->num_items,
                             (unsigned)(plan->num_kv_heads * plan->head_blocks), &p, stream, 1));
out:
    return rc;
}
