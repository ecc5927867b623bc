/*
 * Which query tile a prefill launch takes, in which order its blocks start,
 * and batch prefill's plan: the work list, the workspace's layout and the
 * upload (fi_batch_prefill_plan_*, fi_batch_prefill_workspace_size).
 *
 * Tile choice. A module holds kernels for query tiles of 128, 64 and 16
 * packed rows (token x GQA head). Big tiles read each K/V tile for more
 * queries, so the largest one is used whenever its grid still fills the GPU
 * (one CTA per SM at least); otherwise 64 rows, and 16 rows only when no
 * request has more than 16 packed rows (decode-like batches).
 *
 * Block order. The grid is (work items, kv heads); a work item is one query
 * tile of one request. Blocks start longest first (the kernel maps launch
 * order to (item, head) through heads_per_section, see prefill/params.h):
 * the long causal tiles begin in the first waves and short ones fill the
 * tail, while the heads whose K/V is read at one time are few enough for L2.
 *
 * Batch plan. The work list holds every query tile of every request, sorted
 * by the keys the tile reads, most first (the Hopper main loop's causal
 * tiles end at a request's last row, the tile kernels' start at its first:
 * work_keys). It lives in the caller's
 * workspace: work_request[n] then work_tile[n], int32 each. Its size is an
 * upper bound that does not depend on the tile chosen (16-row tiles), so
 * fi_batch_prefill_workspace_size needs no device.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "launch/prefill.h"

/* Heads per block-order section: as many kv heads as keep the K/V they read
 * (kv_tokens keys of K and V per head, all requests) within the L2 budget. */
int fi__prefill_heads_per_section(int64_t kv_tokens, const fi_jit_spec *spec, int kv_heads)
{
    const int64_t per_head = kv_tokens * (spec->head_dim + fi__spec_head_dim_vo(spec)) * 2;
    const int64_t n = per_head > 0 ? (int64_t)FI_PREFILL_L2_BUDGET / per_head : kv_heads;
    return (int)(n < 1 ? 1 : n > kv_heads ? kv_heads : n);
}

/* The automatic tile: `tiles[i]` CTAs per kv head with tile i. */
int fi__prefill_choose_tile(const int64_t tiles[FI_PREFILL_NUM_TILES], int kv_heads, int sm_count,
                            int64_t max_rows)
{
    if (tiles[0] * kv_heads >= sm_count) return 0;
    return max_rows > 16 ? 1 : 2;
}

const char *fi__prefill_batch_who(const fi_jit_spec *spec)
{
    return spec && spec->kind == FI_KIND_BATCH_PREFILL_PAGED ? "batch_prefill_paged"
                                                             : "batch_prefill_ragged";
}

/* Check the plan arguments; `*max_rows` gets the largest request's packed rows
 * and `bound` the work items of the two lists a plan may have (the
 * workspace bound): tiles of 16 rows and of 128 (the Hopper loop's least). */
static int check_plan_args(const fi_jit_spec *spec, const fi_batch_prefill_plan_args *a,
                           int64_t *max_rows, int64_t *bound)
{
    int rc = 0;
    FI_TRY(fi_jit_spec_check(spec));
    const char *who = fi__prefill_batch_who(spec);
    const int paged = spec->kind == FI_KIND_BATCH_PREFILL_PAGED;
    if (spec->kind != FI_KIND_BATCH_PREFILL_RAGGED && !paged)
        FI_FAIL(FI_EINVALID, "spec.kind %s is not a batch prefill kind (expected "
                "batch_prefill_ragged or batch_prefill_paged)",
                fi__kind_name(spec->kind) ? fi__kind_name(spec->kind) : "(unknown)");
    FI_TRY(fi__check_version(who, "plan args", a, a ? a->version : 0,
                             FI_BATCH_PREFILL_PLAN_ARGS_VERSION, FI_BATCH_PREFILL_PLAN_ARGS_VERSION));
    if (a->batch_size <= 0)
        FI_FAIL(FI_EINVALID, "%s: batch_size is %d, must be >= 1", who, a->batch_size);
    FI_TRY(fi__prefill_check_heads(who, a->num_qo_heads, a->num_kv_heads));
    if (!a->qo_indptr || !a->kv_indptr)
        FI_FAIL(FI_EINVALID, "%s: qo_indptr and kv_indptr (host arrays) must not be NULL", who);
    if (paged && !a->kv_last_page_len)
        FI_FAIL(FI_EINVALID, "%s: kv_last_page_len (host array) is NULL", who);
    if (paged && (a->page_size < 1 || a->page_size > 64))
        FI_FAIL(FI_EINVALID, "%s: page_size is %d (supported: 1..64)", who, a->page_size);
    FI_TRY(fi__check_window(who, spec, a->window_left));
    if (a->sm_count < 0) FI_FAIL(FI_EINVALID, "%s: sm_count is %d (0: from the device)", who, a->sm_count);
    if (a->cta_tile_q != 0) {
        int idx;
        FI_TRY(fi__prefill_tile_index(who, a->cta_tile_q, &idx));
    }
    if (a->qo_indptr[0] != 0 || a->kv_indptr[0] != 0)
        FI_FAIL(FI_EINVALID, "%s: qo_indptr[0] (%d) and kv_indptr[0] (%d) must be 0", who,
                a->qo_indptr[0], a->kv_indptr[0]);
    const int group = a->num_qo_heads / a->num_kv_heads;
    *max_rows = 0;
    *bound = 0;
    for (int b = 0; b < a->batch_size; b++) {
        const int64_t qo = (int64_t)a->qo_indptr[b + 1] - a->qo_indptr[b];
        const int64_t kv = (int64_t)a->kv_indptr[b + 1] - a->kv_indptr[b];
        if (qo < 0 || kv < 0)
            FI_FAIL(FI_EINVALID, "%s: request %d has qo_indptr %d..%d, kv_indptr %d..%d; indptr "
                    "arrays must not decrease", who, b, a->qo_indptr[b], a->qo_indptr[b + 1],
                    a->kv_indptr[b], a->kv_indptr[b + 1]);
        if (paged && kv > 0) {
            const int last = a->kv_last_page_len[b];
            if (last < 1 || last > a->page_size)
                FI_FAIL(FI_EINVALID, "%s: kv_last_page_len[%d] is %d, must be 1..page_size (%d) "
                        "for a request with pages", who, b, last, a->page_size);
            if ((kv - 1) * a->page_size + last > INT_MAX)
                FI_FAIL(FI_EINVALID, "%s: request %d has too many keys", who, b);
        }
        const int64_t rows = qo * group;
        if (rows > INT_MAX - 128) FI_FAIL(FI_EINVALID, "%s: request %d has too many queries", who, b);
        if (rows > *max_rows) *max_rows = rows;
        *bound += fi__prefill_ceil_div(rows, FI_PREFILL_TILE_Q(FI_PREFILL_NUM_TILES - 1)) +
                  fi__prefill_ceil_div(rows, FI_PREFILL_TILE_Q(0));
    }
    if (*bound > INT_MAX / 2) FI_FAIL(FI_EINVALID, "%s: the batch has too many query tiles", who);
out:
    return rc;
}

static size_t work_bytes(int64_t items) { return fi__align16((size_t)items * 2 * sizeof(int32_t)); }

/* Keys of request b (checked by check_plan_args). */
static int request_kv_len(const fi_batch_prefill_plan_args *a, int paged, int b)
{
    const int n = a->kv_indptr[b + 1] - a->kv_indptr[b];
    if (!paged) return n;
    return n > 0 ? (n - 1) * a->page_size + a->kv_last_page_len[b] : 0;
}

/* The plan's parts of the workspace, each 16-byte aligned: the work list
 * (`bound` items), the Hopper loop's claimed-block counter (one uint32,
 * prefill/params.h: fi_prefill_ws), then with RoPE the rotated keys
 * [kv_rows, kv heads, head_dim] (ragged: rows as kv_indptr counts them)
 * and, paged, the requests' first rows [batch + 1]. */
typedef struct workspace_layout {
    size_t claims_off, rot_k_off, starts_off, total;
    int64_t kv_rows;
} workspace_layout;

static int layout_workspace(const fi_jit_spec *spec, const fi_batch_prefill_plan_args *a,
                            int64_t bound, workspace_layout *l)
{
    const int paged = spec->kind == FI_KIND_BATCH_PREFILL_PAGED;
    memset(l, 0, sizeof *l);
    l->claims_off = work_bytes(bound);
    l->total = l->claims_off + 16;
    if (spec->pos != FI_POS_ROPE_LLAMA) return 0;
    int64_t rows = a->kv_indptr[a->batch_size];
    if (paged) {
        rows = 0;
        for (int b = 0; b < a->batch_size; b++) rows += request_kv_len(a, 1, b);
    }
    if (rows > INT_MAX)
        return fi__error(FI_EINVALID, "%s: the batch has %lld keys; with RoPE at most %d (the "
                         "rotated keys' rows are int)", fi__prefill_batch_who(spec), (long long)rows, INT_MAX);
    l->kv_rows = rows;
    l->rot_k_off = l->total;
    l->total += fi__prefill_rotated_keys_bytes(rows, a->num_kv_heads, spec->head_dim);
    if (paged) {
        l->starts_off = l->total;
        l->total += fi__align16(((size_t)a->batch_size + 1) * sizeof(int32_t));
    }
    return 0;
}

int fi_batch_prefill_workspace_size(size_t *out, const fi_jit_spec *spec,
                                    const fi_batch_prefill_plan_args *args)
{
    int rc = 0;
    int64_t max_rows, bound;
    workspace_layout layout;
    if (!out) FI_FAIL(FI_EINVALID, "fi_batch_prefill_workspace_size: out is NULL");
    *out = 0;
    FI_TRY(check_plan_args(spec, args, &max_rows, &bound));
    FI_TRY(layout_workspace(spec, args, bound, &layout));
    *out = layout.total;
out:
    return rc;
}

/* Keys query tile t (tq packed rows) of a request reads, as the kernel
 * bounds them (a sliding window's start is not known at plan time). The
 * Hopper main loop's tiles end at the request's last row (end_aligned:
 * ws/schedule.cuh, block_row0), the tile kernels' start at its first. */
static int64_t work_keys(int kv_len, int qo_len, int group, int tq, int t, int causal,
                         int end_aligned)
{
    if (!causal) return kv_len;
    const int64_t rows = (int64_t)qo_len * group;
    const int64_t pad = end_aligned ? fi__prefill_ceil_div(rows, tq) * tq - rows : 0;
    const int64_t end = (int64_t)(t + 1) * tq - pad;
    const int64_t last = (end < rows ? end : rows) - 1;
    const int64_t hi = last / group + (kv_len - qo_len) + 1;
    return hi < 0 ? 0 : hi < kv_len ? hi : kv_len;
}

struct work_item {
    int64_t keys;
    int request, tile;
};

/* Most keys first; ties in request order, each request's last tile first.
 * Measured against each request's tiles together (requests with the most
 * keys first), which reads fewer requests' K/V at once: 0.65-1.07x (H100,
 * causal, batch 4, seq 4k-16k, A/B in one process). */
static int work_item_cmp(const void *pa, const void *pb)
{
    const struct work_item *x = pa, *y = pb;
    if (x->keys != y->keys) return x->keys > y->keys ? -1 : 1;
    if (x->request != y->request) return x->request < y->request ? -1 : 1;
    return (x->tile < y->tile) - (x->tile > y->tile);
}

/* Query tiles of tq packed rows in the batch. */
static int64_t count_tiles(const fi_batch_prefill_plan_args *a, int group, int tq)
{
    int64_t n = 0;
    for (int b = 0; b < a->batch_size; b++)
        n += fi__prefill_ceil_div((int64_t)(a->qo_indptr[b + 1] - a->qo_indptr[b]) * group, tq);
    return n;
}

/* The work list of the batch's n query tiles of tq packed rows, longest
 * first (work_item_cmp): request[i] and tile[i]; items: room for n. */
static void build_work_list(const fi_batch_prefill_plan_args *a, int paged, int group, int tq,
                            int causal, int end_aligned, struct work_item *items, int n,
                            int32_t *request, int32_t *tile)
{
    int k = 0;
    for (int b = 0; b < a->batch_size; b++) {
        const int qo = a->qo_indptr[b + 1] - a->qo_indptr[b];
        const int kv = request_kv_len(a, paged, b);
        for (int t = (int)fi__prefill_ceil_div((int64_t)qo * group, tq) - 1; t >= 0; t--) {
            items[k].request = b;
            items[k].tile = t;
            items[k].keys = work_keys(kv, qo, group, tq, t, causal, end_aligned);
            k++;
        }
    }
    qsort(items, (size_t)n, sizeof *items, work_item_cmp);
    for (k = 0; k < n; k++) {
        request[k] = items[k].request;
        tile[k] = items[k].tile;
    }
}

int fi_batch_prefill_plan_new(fi_batch_prefill_plan **out, fi_jit_ctx *ctx,
                              const fi_jit_spec *spec, const fi_batch_prefill_plan_args *a)
{
    int rc = 0, sm_count = 0;
    int64_t max_rows = 0, bound = 0;
    fi_batch_prefill_plan *plan = NULL;
    struct work_item *items = NULL;
    workspace_layout layout;
    const fi_jit_kernel *kernel = NULL;
    const char *who = fi__prefill_batch_who(spec);
    const int paged = spec && spec->kind == FI_KIND_BATCH_PREFILL_PAGED;

    if (!out) FI_FAIL(FI_EINVALID, "fi_batch_prefill_plan_new: out is NULL");
    *out = NULL;
    if (!ctx) FI_FAIL(FI_EINVALID, "fi_batch_prefill_plan_new: ctx is NULL");
    FI_TRY(check_plan_args(spec, a, &max_rows, &bound));
    FI_TRY(layout_workspace(spec, a, bound, &layout));
    if (!(plan = fi__calloc(1, sizeof *plan))) FI_FAIL(FI_ENOMEM, "out of memory");
    fi__launch_keep_spec(&plan->spec, plan->variant, sizeof plan->variant, spec);
    plan->batch_size = a->batch_size;
    plan->num_qo_heads = a->num_qo_heads;
    plan->num_kv_heads = a->num_kv_heads;
    plan->page_size = a->page_size;
    plan->window_left = a->window_left;
    plan->claims_off = layout.claims_off;
    plan->rot_k_off = layout.rot_k_off;
    plan->starts_off = layout.starts_off;
    plan->workspace_bytes = layout.total;

    const int group = a->num_qo_heads / a->num_kv_heads;
    int64_t tiles[FI_PREFILL_NUM_TILES] = {0};
    for (int i = 0; i < FI_PREFILL_NUM_TILES; i++)
        tiles[i] = count_tiles(a, group, FI_PREFILL_TILE_Q(i));
    if (a->cta_tile_q) {
        FI_TRY(fi__prefill_tile_index(who, a->cta_tile_q, &plan->tile));
    } else {
        sm_count = a->sm_count;
        if (!sm_count) FI_TRY(fi__cuda_sm_count(&sm_count));
        plan->tile = fi__prefill_choose_tile(tiles, a->num_kv_heads, sm_count, max_rows);
    }
    plan->num_work = (int)tiles[plan->tile];
    int64_t kv_tokens = 0;
    double row_keys = 0; /* keys all query rows see */
    for (int b = 0; b < a->batch_size; b++) {
        const int64_t qo = a->qo_indptr[b + 1] - a->qo_indptr[b], kv = request_kv_len(a, paged, b);
        kv_tokens += kv;
        row_keys += (double)qo * fi__prefill_row_mean_keys(spec, qo, kv);
    }
    plan->heads_per_section = fi__prefill_heads_per_section(kv_tokens, spec, a->num_kv_heads);
    plan->kv_tokens = paged ? 0 : a->kv_indptr[a->batch_size];
    plan->qo_tokens = a->qo_indptr[a->batch_size];
    /* Compile or load now, so that runs (maybe under graph capture) never do. */
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));
    plan->ws = (int)fi__prefill_ws_mode_for(
        kernel, spec, plan->tile, 1, paged ? a->page_size : 0,
        plan->qo_tokens > 0 ? row_keys / (double)plan->qo_tokens : 0, 1);
    if (plan->ws == WS_PERSISTENT || plan->ws == WS_STATIC) {
        if (!sm_count) sm_count = a->sm_count;
        FI_TRY(fi__prefill_persistent_ctas(&sm_count));
    }
    plan->sm_count = sm_count;
    /* The Hopper loop's own list when its tiles are not the tile kernel's. */
    const int tq = FI_PREFILL_TILE_Q(plan->tile);
    const int ws_tq = plan->ws != WS_OFF ? fi__prefill_ws_tile_q(spec) : tq;
    plan->ws_list = ws_tq != tq;
    plan->num_ws_work = plan->ws_list ? (int)count_tiles(a, group, ws_tq) : plan->num_work;
    if (plan->num_work > 0) {
        const int n = plan->num_work, m = plan->ws_list ? plan->num_ws_work : 0;
        const int causal = fi__prefill_mask_is_causal(spec);
        if (!(plan->list = fi__malloc(sizeof(int32_t) * 2 * (size_t)(n + m))) ||
            !(items = fi__malloc(sizeof *items * (size_t)(n > m ? n : m))))
            FI_FAIL(FI_ENOMEM, "out of memory");
        /* The tile kernels' list; the Hopper loop's own where its tile differs
         * (where it does not, it walks this one, whose order differs from its
         * own only by the keys of each request's partial tile). */
        build_work_list(a, paged, group, tq, causal, 0, items, n, plan->list, plan->list + n);
        if (m > 0)
            build_work_list(a, paged, group, ws_tq, causal, 1, items, m, plan->list + 2 * n,
                            plan->list + 2 * n + m);
        if (spec->pos == FI_POS_ROPE_LLAMA) {
            plan->kv_rows = (int)layout.kv_rows;
            if (paged) {
                if (!(plan->starts = fi__malloc(sizeof(int32_t) * ((size_t)a->batch_size + 1))))
                    FI_FAIL(FI_ENOMEM, "out of memory");
                plan->starts[0] = 0;
                for (int b = 0; b < a->batch_size; b++)
                    plan->starts[b + 1] = plan->starts[b] + request_kv_len(a, 1, b);
            }
        }
    }
    *out = plan;
    plan = NULL;
out:
    fi__free(items);
    fi_batch_prefill_plan_free(plan);
    return rc;
}

int fi_batch_prefill_plan_workspace_size(size_t *out, const fi_batch_prefill_plan *plan)
{
    if (!out) return fi__error(FI_EINVALID, "fi_batch_prefill_plan_workspace_size: out is NULL");
    *out = 0;
    if (!plan) return fi__error(FI_EINVALID, "fi_batch_prefill_plan_workspace_size: plan is NULL");
    *out = plan->workspace_bytes;
    return 0;
}

/* A failed driver call of the upload, named by the plan's kind and the step. */
static int upload_failed(CUresult res, const char *who, const char *step)
{
    char what[96];
    snprintf(what, sizeof what, "%s: %s", who, step);
    return fi__cuda_error(FI_ECUDA, res, what);
}

int fi_batch_prefill_plan_upload(fi_batch_prefill_plan *plan, void *workspace,
                                 size_t workspace_bytes)
{
    int rc = 0;
    const fi_cuda_api *cu = NULL;
    CUresult res;
    if (!plan) FI_FAIL(FI_EINVALID, "fi_batch_prefill_plan_upload: plan is NULL");
    const char *who = fi__prefill_batch_who(&plan->spec);
    if (workspace_bytes < plan->workspace_bytes)
        FI_FAIL(FI_EINVALID, "%s: workspace has %zu bytes, this batch needs %zu (see "
                "fi_batch_prefill_plan_workspace_size)", who, workspace_bytes,
                plan->workspace_bytes);
    if (plan->workspace_bytes > 0) FI_TRY(fi__check_ptr(who, "workspace", workspace, 16));
    FI_TRY(fi__cuda_load(&cu));
    plan->uploaded = 0;
    if (plan->num_work > 0) {
        const int n = plan->num_work, m = plan->ws_list ? plan->num_ws_work : 0;
        plan->work_request = (int *)workspace;
        plan->work_tile = (int *)workspace + n;
        plan->ws_work_request = m ? (int *)workspace + 2 * n : plan->work_request;
        plan->ws_work_tile = m ? (int *)workspace + 2 * n + m : plan->work_tile;
        res = cu->MemcpyHtoD((CUdeviceptr)(uintptr_t)workspace, plan->list,
                             sizeof(int32_t) * 2 * (size_t)(n + m));
        if (res != CUDA_SUCCESS)
            CU_FAIL(upload_failed(res, who, "cuMemcpyHtoD (work list)"));
        /* Launches leave the counter at 0 (prefill/params.h); it starts there. */
        plan->claims = (unsigned int *)((char *)workspace + plan->claims_off);
        res = cu->MemsetD8((CUdeviceptr)(uintptr_t)plan->claims, 0, sizeof(unsigned int));
        if (res != CUDA_SUCCESS)
            CU_FAIL(upload_failed(res, who, "cuMemsetD8 (block claims)"));
        if (plan->spec.pos == FI_POS_ROPE_LLAMA) {
            plan->rot_k = (char *)workspace + plan->rot_k_off;
            if (plan->starts) {
                plan->kv_token_start = (int *)((char *)workspace + plan->starts_off);
                res = cu->MemcpyHtoD((CUdeviceptr)(uintptr_t)plan->kv_token_start, plan->starts,
                                     sizeof(int32_t) * ((size_t)plan->batch_size + 1));
                if (res != CUDA_SUCCESS)
                    CU_FAIL(upload_failed(res, who, "cuMemcpyHtoD (key rows)"));
            }
        }
        /* cuMemcpyHtoD from pageable memory may return before the DMA lands,
         * and a run on a non-blocking stream is not ordered after it: wait
         * here, as batch decode's upload does, so a run right after the
         * upload reads the list it wrote. */
        if ((res = cu->CtxSynchronize()) != CUDA_SUCCESS)
            CU_FAIL(upload_failed(res, who, "cuCtxSynchronize (work list)"));
    }
    plan->uploaded = 1;
out:
    return rc;
}

void fi_batch_prefill_plan_free(fi_batch_prefill_plan *plan)
{
    if (!plan) return;
    fi__free(plan->starts);
    fi__free(plan->list);
    fi__free(plan);
}
