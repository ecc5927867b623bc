/*
 * Host side of single-request decode: argument validation, the split-KV plan,
 * the kernel parameter struct and the launches (templates/decode.cuh holds the
 * kernels, templates/decode/params.h the struct both sides share).
 *
 * Split plan. One block serves one KV head (or a slice of a large GQA group)
 * over one chunk of keys. A single request has few KV heads, so the keys are
 * cut into num_splits chunks until the grid holds about one wave of resident
 * blocks; each split writes a normalised partial output and its log-sum-exp
 * into the caller's workspace, and the last block of each kv head to finish
 * merges them in the same launch (templates/decode/; the counters'
 * epoch scheme in decode/params.h means the workspace needs no zeroing). The
 * plan depends only on the shapes and the device's SM count, so
 * fi_decode_workspace_size and fi_decode_run agree for the same arguments.
 *
 * fp8 KV (kv=fp8_e4m3 / fp8_e5m2): args version 2 carries k_scale and
 * v_scale; strides must then be multiples of 16 elements (16 bytes).
 * The tuning constants (DECODE_*) are in decode.h, next to batch decode's.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "launch/launch_common.h"
#include "toolchain/cuda_drv.h"
#include "launch/decode.h"
#include "common/error.h"
#include "launch/rope.h"
#include "core/jit.h"
#include "decode/params.h"
#include "common/sys.h"

typedef struct decode_plan {
    int group_size, head_chunks, heads_per_block, head_blocks;
    int kv_begin, kv_chunk, num_splits;
    size_t workspace_bytes; /* needed for num_splits > 1, else 0 */
} decode_plan;

unsigned fi__decode_next_epoch(void)
{
    /* Starts from the clock, so that two processes sharing a workspace's
     * memory (one after the other) do not reuse epochs; 0 is never handed out. */
    static atomic_uint next;
    unsigned e = 0;
    if (atomic_load(&next) == 0) {
        unsigned expected = 0;
        atomic_compare_exchange_strong(&next, &expected, (unsigned)(fi__now_ns() / 1000) | 1u);
    }
    while (e == 0) e = atomic_fetch_add(&next, 1u);
    return e;
}

/* The caller's SM count (args version 4), 0: from the device. */
static int sm_count_of(const fi_decode_args *a) { return a->version >= 4 ? a->sm_count : 0; }

/* Everything about the arguments that does not need a GPU. */
static int check_args(const fi_jit_spec *spec, const fi_decode_args *a)
{
    int rc = 0;
    const char *who = "decode";
    FI_TRY(fi__check_kind(who, spec, FI_KIND_DECODE, "FI_KIND_DECODE"));
    FI_TRY(fi__check_version(who, "args", a, a ? a->version : 0, 1, FI_DECODE_ARGS_VERSION));
    if (fi__decode_kv_bytes(spec) == 1 && a->version < 2)
        FI_FAIL(FI_EINVALID, "decode: fp8 kv needs args.version 2 (k_scale, v_scale)");
    if (a->version >= 2 && (!isfinite(a->k_scale) || !isfinite(a->v_scale)))
        FI_FAIL(FI_EINVALID, "decode: k_scale and v_scale must be finite (0: 1)");
    FI_TRY(fi__check_heads(who, a->num_qo_heads, a->num_kv_heads));
    if (a->kv_len < 0) FI_FAIL(FI_EINVALID, "decode: kv_len is %d, must be >= 0", a->kv_len);
    if (a->max_splits < 0)
        FI_FAIL(FI_EINVALID, "decode: max_splits is %d (0: automatic, 1: no split)",
                a->max_splits);
    if (sm_count_of(a) < 0)
        FI_FAIL(FI_EINVALID, "decode: sm_count is %d (0: from the device)", sm_count_of(a));
    FI_TRY(fi__check_tensors(who, a->q, a->k, a->v, a->o, a->lse, a->kv_len > 0));
    /* q and o are 16-bit whatever the kv dtype. */
    FI_TRY(fi__check_stride(who, "q_stride_h", a->q_stride_h, a->num_qo_heads > 1, 2));
    FI_TRY(fi__check_stride(who, "o_stride_h", a->o_stride_h, a->num_qo_heads > 1, 2));
    {
        const int kvb = fi__decode_kv_bytes(spec);
        /* k_stride_n and v_stride_n are stepped by only past the first key. */
        const int n_used = a->kv_len > 1;
        FI_TRY(fi__check_stride(who, "k_stride_h", a->k_stride_h, a->num_kv_heads > 1, kvb));
        FI_TRY(fi__check_stride(who, "v_stride_h", a->v_stride_h, a->num_kv_heads > 1, kvb));
        FI_TRY(fi__check_stride(who, "k_stride_n", a->k_stride_n, n_used, kvb));
        FI_TRY(fi__check_stride(who, "v_stride_n", a->v_stride_n, n_used, kvb));
        FI_TRY(fi__check_offset32(who, "k_stride_n", a->k_stride_n, n_used, kvb));
        FI_TRY(fi__check_offset32(who, "v_stride_n", a->v_stride_n, n_used, kvb));
    }
    if (a->num_qo_heads > 1 && a->q_stride_h < spec->head_dim)
        FI_FAIL(FI_EINVALID, "decode: q_stride_h (%lld) is smaller than head_dim (%d)",
                (long long)a->q_stride_h, spec->head_dim);
    if (a->num_qo_heads > 1 && a->o_stride_h < spec->head_dim)
        FI_FAIL(FI_EINVALID, "decode: o_stride_h (%lld) is smaller than head_dim (%d): heads "
                "would overlap", (long long)a->o_stride_h, spec->head_dim);
    FI_TRY(fi__check_scalars(who, spec, a->sm_scale, a->logits_soft_cap, a->rope_scale,
                             a->rope_theta, a->alibi_slopes));
    FI_TRY(fi__check_window(who, spec, a->window_left));
    if (spec->pos == FI_POS_ROPE_LLAMA &&
        ((int64_t)a->rope_offset + a->kv_len > INT32_MAX || a->rope_offset < 0))
        FI_FAIL(FI_EINVALID, "decode: rope_offset %d must be >= 0 and rope_offset + kv_len "
                "must fit in an int", a->rope_offset);
out:
    return rc;
}

static int next_pow2(int x)
{
    int p = 1;
    while (p < x) p *= 2;
    return p;
}

int fi__decode_head_chunks(int group_size)
{
    /* A block's heads are the 8 columns of its mma tiles. */
    const int cap = FI_DECODE_MMA_HEADS / FI_DECODE_HEADS_PER_THREAD;
    const int chunks =
        next_pow2((group_size + FI_DECODE_HEADS_PER_THREAD - 1) / FI_DECODE_HEADS_PER_THREAD);
    return chunks < cap ? chunks : cap;
}

/* The split plan for these arguments on a device with `sm_count` SMs. */
static int make_plan(const fi_jit_spec *spec, const fi_decode_args *a, int sm_count,
                     decode_plan *plan)
{
    int rc = 0;
    const int hd = spec->head_dim;
    const int tile = FI_DECODE_TILE_TOKENS(hd);

    memset(plan, 0, sizeof *plan);
    plan->group_size = a->num_qo_heads / a->num_kv_heads;
    /* Row groups per block that split the group's heads, HEADS_PER_THREAD
     * each; the rest of the row groups share the tokens of each tile. */
    plan->head_chunks = fi__decode_head_chunks(plan->group_size);
    plan->heads_per_block = FI_DECODE_HEADS_PER_THREAD * plan->head_chunks;
    plan->head_blocks = (plan->group_size + plan->heads_per_block - 1) / plan->heads_per_block;
    if ((int64_t)a->num_kv_heads * plan->head_blocks > 65535)
        FI_FAIL(FI_EINVALID, "decode: %d kv heads x %d blocks per group exceed the grid's y "
                "limit of 65535", a->num_kv_heads, plan->head_blocks);

    /* A sliding window makes the keys before its start invisible: no split
     * reads them. */
    if (spec->mask == FI_MASK_WINDOW && a->window_left >= 0 &&
        (int64_t)a->kv_len - 1 - a->window_left > 0)
        plan->kv_begin = a->kv_len - 1 - a->window_left;
    const int keys = a->kv_len - plan->kv_begin;

    int splits = a->max_splits;
    if (splits == 0) {
        /* At most one wave: blocks beyond the resident ones would form a
         * second, mostly idle wave. */
        const int base = a->num_kv_heads * plan->head_blocks;
        const int max_by_size = keys / (tile * DECODE_MIN_SPLIT_TILES(keys));
        /* DECODE_BLOCKS_PER_SM, else one block per SM, else what the length
         * allows: a grid between one and two blocks per SM gives some SMs
         * a second block that the rest wait for (H100, GQA 32/8, kv 4k: 25
         * splits 17.9 us, 16 splits 16.5 us, 33 splits 16.8 us). */
        splits = sm_count * DECODE_BLOCKS_PER_SM / base;
        if (splits > max_by_size) splits = sm_count / base;
        if (splits > max_by_size) splits = max_by_size;
        if (splits < 1) splits = 1;
    }
    if (keys <= 0) {
        plan->num_splits = 1;
        plan->kv_chunk = tile;
    } else {
        /* Chunks are whole tiles; recount so that no split is empty. */
        int64_t chunk = ((int64_t)keys + splits - 1) / splits;
        chunk = (chunk + tile - 1) / tile * tile;
        plan->kv_chunk = (int)chunk;
        plan->num_splits = (int)(((int64_t)keys + chunk - 1) / chunk);
    }
    if (plan->num_splits > FI_DECODE_MAX_SPLITS)
        FI_FAIL(FI_EINVALID, "decode: %d splits; at most %d (raise max_splits' chunk: pass a "
                "smaller max_splits)", plan->num_splits, FI_DECODE_MAX_SPLITS);
    if (plan->num_splits > 1) {
        /* partial_o, partial_lse, then 8-byte aligned counters (one per block row). */
        size_t floats = (size_t)plan->num_splits * (size_t)a->num_qo_heads * (size_t)(hd + 1);
        floats = (floats + 1) / 2 * 2;
        plan->workspace_bytes = floats * sizeof(float) +
                                (size_t)a->num_kv_heads * plan->head_blocks * 8;
    }
out:
    return rc;
}

int fi__decode_stages(const fi_jit_spec *spec, long long blocks, long long tiles, int min_tiles,
                      int sm_count)
{
    const int kvb = fi__decode_kv_bytes(spec);
    int stages = kvb == 1 ? FI_DECODE_STAGES_FP8 : FI_DECODE_STAGES;
    /* A deeper ring pays where blocks are few and their ranges of middling
     * length: shorter ones are in flight at once anyway, longer ones are
     * bandwidth-bound with the default depth (H100 sweep, hd 128, see
     * DECODE_BLOCKS_PER_SM). */
    if (kvb == 2 && sm_count > 0 && tiles >= min_tiles && tiles <= DECODE_DEEP_MAX_TILES) {
        if (blocks <= 2LL * sm_count) stages = FI_DECODE_STAGES_DEEP2;
        else if (blocks <= 3LL * sm_count) stages = FI_DECODE_STAGES_DEEP3;
    }
    return stages;
}

int fi__decode_launch(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int stages,
                      unsigned grid_x, unsigned grid_y, void *params, struct CUstream_st *stream,
                      int batch)
{
    const int smem = FI_DECODE_SMEM_BYTES(spec->head_dim, fi__decode_kv_bytes(spec),
                                          spec->pos == FI_POS_ROPE_LLAMA, stages);
    return fi__cuda_launch(kernel->function, grid_x, grid_y, kernel->block_dim, (unsigned)smem,
                           (CUstream)stream, params, batch ? "batch_decode" : "decode");
}

static int plan_for(const fi_jit_spec *spec, const fi_decode_args *a, decode_plan *plan,
                    int *sm_count)
{
    int rc = 0;
    *sm_count = 0;
    FI_TRY(check_args(spec, a));
    *sm_count = sm_count_of(a);
    if (a->max_splits == 0 && *sm_count == 0) FI_TRY(fi__cuda_sm_count(sm_count));
    FI_TRY(make_plan(spec, a, *sm_count, plan));
out:
    return rc;
}

int fi_decode_workspace_size(size_t *out, const fi_jit_spec *spec, const fi_decode_args *args)
{
    int rc = 0;
    decode_plan plan;
    int sm_count;
    if (!out) FI_FAIL(FI_EINVALID, "decode: out is NULL");
    *out = 0;
    FI_TRY(plan_for(spec, args, &plan, &sm_count));
    *out = plan.workspace_bytes;
out:
    return rc;
}

int fi_decode_run(fi_jit_ctx *ctx, const fi_jit_spec *spec, const fi_decode_args *a,
                  struct CUstream_st *stream)
{
    int rc = 0;
    decode_plan plan;
    const fi_jit_kernel *kernel = NULL;
    fi_decode_params p;
    unsigned long long variant_params[FI_VARIANT_PARAM_WORDS];
    int sm_count;

    if (!ctx) FI_FAIL(FI_EINVALID, "decode: ctx is NULL");
    FI_TRY(plan_for(spec, a, &plan, &sm_count));
    FI_TRY(fi__jit_variant_pack(ctx, spec, "decode", a->version >= 3 ? a->variant_args : NULL,
                                a->version >= 3 ? a->num_variant_args : 0, variant_params));
    if (plan.num_splits > 1) {
        if (!a->workspace)
            FI_FAIL(FI_EINVALID, "decode: %d splits need a workspace of %zu bytes; workspace is "
                    "NULL (see fi_decode_workspace_size, or set max_splits = 1)",
                    plan.num_splits, plan.workspace_bytes);
        if ((uintptr_t)a->workspace % 16 != 0)
            FI_FAIL(FI_EINVALID, "decode: workspace (%p) is not 16-byte aligned", a->workspace);
        if (a->workspace_bytes < plan.workspace_bytes)
            FI_FAIL(FI_EINVALID, "decode: workspace has %zu bytes, %d splits need %zu (see "
                    "fi_decode_workspace_size)", a->workspace_bytes, plan.num_splits,
                    plan.workspace_bytes);
    }
    /* Arguments are all checked: only now ask the device (the ring depth needs its SM count). */
    if (sm_count == 0) FI_TRY(fi__cuda_sm_count(&sm_count));
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));

    memset(&p, 0, sizeof p);
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.o = a->o;
    p.lse = a->lse;
    p.alibi_slopes = a->alibi_slopes;
    if (plan.num_splits > 1) {
        p.partial_o = (float *)a->workspace;
        /* partial_o is 16-byte aligned rows of hd floats; partial_lse follows. */
        p.partial_lse = p.partial_o + (size_t)plan.num_splits * a->num_qo_heads * spec->head_dim;
        size_t floats = (size_t)plan.num_splits * (size_t)a->num_qo_heads * (size_t)(spec->head_dim + 1);
        floats = (floats + 1) / 2 * 2;
        p.counters = (unsigned long long *)((char *)a->workspace + floats * sizeof(float));
        p.epoch = fi__decode_next_epoch();
    }
    p.k_scale = a->version >= 2 ? fi__launch_fp8_scale(a->k_scale) : 1.f;
    p.v_scale = a->version >= 2 ? fi__launch_fp8_scale(a->v_scale) : 1.f;
    memcpy(p.variant_params, variant_params, sizeof p.variant_params);
    p.q_stride_h = a->q_stride_h;
    p.o_stride_h = a->o_stride_h;
    p.k_stride_n = a->k_stride_n;
    p.k_stride_h = a->k_stride_h;
    p.v_stride_n = a->v_stride_n;
    p.v_stride_h = a->v_stride_h;
    p.num_qo_heads = a->num_qo_heads;
    p.num_kv_heads = a->num_kv_heads;
    p.kv_len = a->kv_len;
    p.group_size = plan.group_size;
    p.head_chunks = plan.head_chunks;
    p.heads_per_block = plan.heads_per_block;
    p.head_blocks = plan.head_blocks;
    p.num_splits = plan.num_splits;
    p.kv_begin = plan.kv_begin;
    p.kv_chunk = plan.kv_chunk;
    p.stages = fi__decode_stages(spec,
                                 (long long)plan.num_splits * a->num_kv_heads * plan.head_blocks,
                                 plan.kv_chunk / FI_DECODE_TILE_TOKENS(spec->head_dim),
                                 DECODE_DEEP_MIN_TILES, sm_count);
    p.sm_scale = fi__launch_sm_scale(a->sm_scale, spec->head_dim);
    p.soft_cap = fi__launch_soft_cap(spec, a->logits_soft_cap);
    p.rope_offset = a->rope_offset;
    p.window_left = fi__launch_window(spec, a->window_left);
    if (spec->pos == FI_POS_ROPE_LLAMA)
        fi__rope_fill(p.rope_freq, spec->head_dim, a->rope_scale, a->rope_theta);

    FI_TRY(fi__decode_launch(kernel, spec, p.stages, (unsigned)plan.num_splits,
                             (unsigned)(a->num_kv_heads * plan.head_blocks), &p, stream, 0));
out:
    return rc;
}
