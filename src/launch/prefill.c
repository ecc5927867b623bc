/*
 * Host side of the prefill kinds (single, batch ragged, batch paged):
 * argument validation, the choice of query tile, the batch plan (work list)
 * and the launches. templates/prefill/ holds the kernels,
 * templates/prefill/params.h the parameter struct both sides share, and
 * include/fijit_prefill.h the public API.
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
 *
 * RoPE. Every CTA that reads a K tile would rotate it again; instead a
 * pre-pass (fi_prefill_rope_k_kernel) rotates each key once into a
 * workspace and the tile kernels read it there (prefill/params.h: rot_k).
 * Batch kinds: after the work list (paged: then the requests' first rows).
 * Single prefill: the caller's optional workspace; without one, the tile
 * loop rotates K tiles.
 *
 * Claims. The Hopper main loop's persistent CTAs take their next block from
 * a counter in the workspace (batch kinds: zeroed by the plan upload; single
 * prefill: by a memset on the stream before each launch), so a CTA that
 * finishes early takes the next longest block; every run leaves it at 0.
 * Without a counter they walk their blocks in a fixed order, which at the
 * end of a causal grid leaves SMs idle (single prefill, 32/8 seq 15.5k: see
 * docs/performance.md).
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/launch_common.h"
#include "toolchain/cuda_drv.h"
#include "common/error.h"
#include "launch/rope.h"
#include "fijit_prefill.h"
#include "core/kinds.h"
#include "kinds/prefill.h"
#include "core/jit.h"
#include "prefill/params.h"
#include "core/spec.h"
#include "common/sys.h"

/* A failed driver call: fi__cuda_error has already written the message. */
#define CU_FAIL(expr)                                                          \
    do {                                                                       \
        rc = (expr);                                                           \
        goto out;                                                              \
    } while (0)

/* ---- shared checks ------------------------------------------------------------- */

/* Bytes of a q, k, v or o element of the 16-bit tuples (the batch kinds'
 * only ones: fi__prefill_check); fp8's q, k and v take 1 (in_bytes). */
#define PREFILL_ELEM_BYTES 2

/* Bytes of a q, k or v element of the spec. */
static int in_bytes(const fi_jit_spec *spec) { return fi__prefill_is_fp8(spec) ? 1 : PREFILL_ELEM_BYTES; }
/* Grid x bound of the RoPE pre-pass: a few waves of blocks per kv head. */
#define ROPE_MAX_BLOCKS 1024

static int check_heads(const char *who, int qo_heads, int kv_heads)
{
    int rc = fi__check_heads(who, qo_heads, kv_heads);
    if (rc == 0 && kv_heads > 65535)
        rc = fi__error(FI_EINVALID, "%s: num_kv_heads %d exceeds the grid's y limit of 65535",
                       who, kv_heads);
    return rc;
}

/* The scalar arguments both launch kinds share (window_left: the batch
 * kinds check it in the plan). */
static int check_scalars(const char *who, const fi_jit_spec *spec, float sm_scale, float soft_cap,
                         float rope_scale, float rope_theta, int rope_offset,
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

static int tile_index_of(const char *who, int cta_tile_q, int *out)
{
    for (int i = 0; i < FI_PREFILL_NUM_TILES; i++)
        if (FI_PREFILL_TILE_Q(i) == cta_tile_q) {
            *out = i;
            return 0;
        }
    return fi__error(FI_EINVALID, "%s: cta_tile_q is %d (0: automatic, or 128, 64, 16)", who,
                     cta_tile_q);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* fp8's vt (templates/prefill/params.h): keys per head_dim row, whole K/V
 * tiles, so that no box of it reads past its end. */
static int fp8_vt_keys(int kv_len)
{
    return (int)ceil_div(kv_len, FI_PREFILL_FP8_TILE_KV) * FI_PREFILL_FP8_TILE_KV;
}

static int gcd(int a, int b)
{
    while (b != 0) {
        const int r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Heads per block-order section: as many kv heads as keep the K/V they read
 * (kv_tokens keys of K and V per head, all requests) within the L2 budget. */
static int heads_per_section(int64_t kv_tokens, const fi_jit_spec *spec, int kv_heads)
{
    const int64_t per_head = kv_tokens * (spec->head_dim + fi__spec_head_dim_vo(spec)) * 2;
    const int64_t n = per_head > 0 ? (int64_t)FI_PREFILL_L2_BUDGET / per_head : kv_heads;
    return (int)(n < 1 ? 1 : n > kv_heads ? kv_heads : n);
}

/* The automatic tile: `tiles[i]` CTAs per kv head with tile i. */
static int choose_tile(const int64_t tiles[FI_PREFILL_NUM_TILES], int kv_heads, int sm_count,
                       int64_t max_rows)
{
    if (tiles[0] * kv_heads >= sm_count) return 0;
    return max_rows > 16 ? 1 : 2;
}

static void fill_scalars(fi_prefill_params *p, const fi_jit_spec *spec, float sm_scale,
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

/* What fi_prefill_args and fi_batch_prefill_args give alike (the same field
 * names in both): tensors, strides, variant parameters and scalars; the
 * window comes from the args (single) or the plan (batch). */
#define PREFILL_FILL_COMMON(p, a, spec, variant_params, window_left)                              \
    do {                                                                                      \
        (p)->q = (a)->q;                                                                      \
        (p)->k = (a)->k;                                                                      \
        (p)->v = (a)->v;                                                                      \
        (p)->o = (a)->o;                                                                      \
        (p)->lse = (a)->lse;                                                                  \
        (p)->alibi_slopes = (a)->alibi_slopes;                                                \
        (p)->custom_mask = (a)->custom_mask;                                                  \
        (p)->q_stride_n = (a)->q_stride_n;                                                    \
        (p)->q_stride_h = (a)->q_stride_h;                                                    \
        (p)->o_stride_n = (a)->o_stride_n;                                                    \
        (p)->o_stride_h = (a)->o_stride_h;                                                    \
        (p)->k_stride_n = (a)->k_stride_n;                                                    \
        (p)->k_stride_h = (a)->k_stride_h;                                                    \
        (p)->v_stride_n = (a)->v_stride_n;                                                    \
        (p)->v_stride_h = (a)->v_stride_h;                                                    \
        memcpy((p)->variant_params, (variant_params), sizeof(p)->variant_params);             \
        fill_scalars((p), (spec), (a)->sm_scale, (a)->logits_soft_cap, (a)->rope_scale,       \
                     (a)->rope_theta, (a)->rope_offset, (window_left));                       \
    } while (0)

/* The kernels' kind values are fi_kernel_kind's (prefill/params.h). */
_Static_assert(FI_PREFILL_KIND_SINGLE == FI_KIND_PREFILL &&
                   FI_PREFILL_KIND_RAGGED == FI_KIND_BATCH_PREFILL_RAGGED &&
                   FI_PREFILL_KIND_PAGED == FI_KIND_BATCH_PREFILL_PAGED,
               "prefill kind values");

/* Index of the Hopper main loop among the module's entries (src/core/kinds.c). */
#define WS_ENTRY (FI_PREFILL_NUM_TILES + 1)
/* Keys a query row sees on average, at most, beyond which causal head_dim
 * 256 keeps a CTA per block (ws_default). */
#define WS_SHORT_KEYS 3072

/* How tile kernel 0's blocks are launched on sm_90a. */
enum ws_mode {
    WS_OFF = 0,        /* the tile kernel */
    WS_GRID = 1,       /* the Hopper main loop, a CTA per block */
    WS_PERSISTENT = 2, /* the Hopper main loop, a CTA per SM walking the blocks: each
                        * claims the next unclaimed one where the launch has a
                        * counter (batch kinds), else every gridDim.x-th */
    WS_STATIC = 3,     /* as WS_PERSISTENT, every gridDim.x-th block always (A/B) */
};

static int mask_is_causal(const fi_jit_spec *spec)
{
    return spec->mask == FI_MASK_CAUSAL || spec->mask == FI_MASK_WINDOW;
}

/* FI_PREFILL_WS_LEAN of the spec (the template computes it from the same fields). */
static int ws_lean(const fi_jit_spec *spec)
{
    return FI_PREFILL_WS_LEAN(spec->soft_cap, spec->pos == FI_POS_ALIBI, fi__spec_has_variant(spec));
}

/* Packed rows of the Hopper main loop's query tiles for the spec. */
static int ws_tile_q(const fi_jit_spec *spec)
{
    return FI_PREFILL_WS_TILE_Q(spec->head_dim, ws_lean(spec));
}

/* The causal-mask flag the template's shape takes (a window is not a causal
 * mask here). */
static int ws_causal(const fi_jit_spec *spec) { return spec->mask == FI_MASK_CAUSAL; }

/* Keys of its K/V tiles and its dynamic shared memory. */
static int ws_tile_kv(const fi_jit_spec *spec)
{
    return fi__prefill_is_fp8(spec) ? FI_PREFILL_FP8_TILE_KV
                        : FI_PREFILL_WS_TILE_KV(spec->head_dim, ws_lean(spec), ws_causal(spec));
}

static unsigned ws_smem_bytes(const fi_jit_spec *spec)
{
    return (unsigned)(fi__prefill_is_fp8(spec)
                          ? FI_PREFILL_FP8_SMEM_BYTES(spec->head_dim, ws_lean(spec))
                          : FI_PREFILL_WS_SMEM_BYTES_VO(spec->head_dim, fi__spec_head_dim_vo(spec),
                                                        ws_lean(spec), ws_causal(spec)));
}

/* The blocks of a launch per kv head: `items` query tiles; batch kinds: the
 * plan's list of them in the workspace (device). Tile kernel 0 and the
 * Hopper main loop each have theirs (their tiles may differ in size). */
struct work_grid {
    int items;
    const int *request, *tile;
    unsigned int *claims; /* the Hopper loop's claimed-block counter (device), or NULL */
    int zero_claims;      /* 1: zero it before a launch that claims (single prefill, which
                           * has no plan upload to zero it once; a run leaves it at 0) */
};

/* How the Hopper main loop launches by default, for launches whose query
 * rows see `mean_keys` keys on average and that can claim blocks (a counter;
 * paged K/V whose consumers load Q, RoPE or a hook on every logit, walks a
 * fixed order, having no feed). Measured
 * on H100 (docs/performance.md): persistent CTAs, which load the next block's Q while
 * finishing this one, win at head_dim <= 128 (1.00-1.10x a CTA per block at
 * seq 4k-8k, 1.11-1.27x at 1k; bench_prefill.py, batch 4) and at 256 without
 * a causal mask (0.96-1.13x, most >= 1.0). At 256 with one (one Q buffer,
 * freed once a block's last S has run), claiming CTAs win where rows see few
 * keys and lose where they see many: batch 4 seq 1k (mean 512) 1.01x, 4k
 * (2048) 1.01-1.05x, bench_batch_prefill.py's batch (16 requests of
 * 975-7931, mean 1830) ragged 1.02-1.07x; seq 8k 0.92-0.94x, 16k
 * 0.93-0.98x, single seq 15.5k 0.95-0.99x; in a fixed order (single
 * prefill without a workspace, paged K/V when it loaded Q in its consumers)
 * 0.84-0.95x. A window keeps a CTA per block at 256 (not measured). MLA's
 * head_dim 192 (one Q buffer too) takes 256's rule (not measured). */
static enum ws_mode ws_default(const fi_jit_spec *spec, double mean_keys, int can_claim)
{
    if (spec->head_dim <= 128 || !mask_is_causal(spec)) return WS_PERSISTENT;
    const int fixed_order = spec->kind == FI_KIND_BATCH_PREFILL_PAGED &&
                            (spec->pos == FI_POS_ROPE_LLAMA || !ws_lean(spec));
    return spec->mask == FI_MASK_CAUSAL && can_claim && !fixed_order && mean_keys <= WS_SHORT_KEYS
               ? WS_PERSISTENT
               : WS_GRID;
}

/* Keys a query row sees on average in a request of qo queries over kv keys
 * (the queries the last ones): kv, or with a causal mask kv - qo + (qo + 1) / 2. */
static double row_mean_keys(const fi_jit_spec *spec, int64_t qo, int64_t kv)
{
    if (spec->mask != FI_MASK_CAUSAL) return (double)kv;
    const double m = (double)(kv - qo) + (double)(qo + 1) / 2.0;
    return m < 0 ? 0 : m > (double)kv ? (double)kv : m;
}

/* The Hopper main loop (templates/prefill/ws/kernel.cuh) takes a launch of tile
 * kernel `idx` when the module was compiled for sm_90a for a tuple it serves,
 * the keys are read as they are or rotated once into a workspace (`rot_k`)
 * and, paged, `page_size` suits its K/V tiles (FI_PREFILL_WS_PAGE_OK);
 * FIJIT_PREFILL_WS=0|grid|persistent[:N]|static[:N] chooses for A/B
 * measurements, else ws_default (mean_keys, can_claim). Batch kinds decide
 * once, in the plan. */
static enum ws_mode ws_mode_for(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int idx,
                                int rot_k, int page_size, double mean_keys, int can_claim)
{
    const char *env = getenv("FIJIT_PREFILL_WS");
    const int paged = spec->kind == FI_KIND_BATCH_PREFILL_PAGED;
    if (idx != 0 || !fi__prefill_is_sm90a(kernel->arch) || !kernel->functions[WS_ENTRY] ||
        !FI_PREFILL_WS_TUPLE((int)spec->kind, spec->mask == FI_MASK_CUSTOM) ||
        (paged && !FI_PREFILL_WS_PAGE_OK(page_size, ws_tile_kv(spec))) ||
        (spec->pos == FI_POS_ROPE_LLAMA && !rot_k) || (env && strcmp(env, "0") == 0))
        return WS_OFF;
    if (env && strcmp(env, "grid") == 0) return WS_GRID;
    if (env && strncmp(env, "persistent", 10) == 0) return WS_PERSISTENT;
    if (env && strncmp(env, "static", 6) == 0) return WS_STATIC;
    return ws_default(spec, mean_keys, can_claim);
}

/* Rows of the tensors the Hopper main loop's TMA maps describe: q's tokens,
 * and the contiguous keys of k and v (0: none, no map is read). */
struct ws_rows {
    int q, k, v;
};

/* TMA maps of p's K and V (prefill/params.h): rows->k and rows->v rows of
 * contiguous keys, paged: the page pools, K contiguous when rotated. 0, or
 * <0 when the tensors do not suit TMA. */
static int encode_kv_maps(fi_prefill_ws *ws, const fi_jit_spec *spec, const fi_prefill_params *p,
                          const struct ws_rows *rows)
{
    const int hd = spec->head_dim, hd_vo = fi__spec_head_dim_vo(spec), heads = p->num_kv_heads;
    const int box = ws_tile_kv(spec);
    if (spec->kind == FI_KIND_BATCH_PREFILL_PAGED) {
        ws->page_box = gcd(p->page_size, box);
        int rc = p->rot_k ? (rows->k > 0 ? fi__cuda_tma_map_3d(&ws->k, p->k, PREFILL_ELEM_BYTES, hd,
                                                               heads, rows->k, p->k_stride_h,
                                                               p->k_stride_n, 1, box)
                                         : 0)
                          : fi__cuda_tma_map_paged(&ws->k, p->k, hd, heads, p->page_size,
                                                   ws->page_box, p->k_stride_h, p->k_stride_n,
                                                   p->k_stride_page, ws->k_coords);
        return rc < 0 ? rc
                      : fi__cuda_tma_map_paged(&ws->v, p->v, hd_vo, heads, p->page_size,
                                               ws->page_box, p->v_stride_h, p->v_stride_n,
                                               p->v_stride_page, ws->v_coords);
    }
    if (rows->k <= 0) return 0;
    int rc = fi__cuda_tma_map_3d(&ws->k, p->k, in_bytes(spec), hd, heads, rows->k, p->k_stride_h,
                                 p->k_stride_n, 1, box);
    if (rc < 0) return rc;
    /* fp8: the pre-pass's vt {vt_keys, head_dim, kv heads}, a box a 128-key
     * row of every head_dim row (templates/prefill/fp8.cuh). */
    if (fi__prefill_is_fp8(spec))
        return fi__cuda_tma_map_3d(&ws->v, p->vt, 1, p->vt_keys, hd, heads, p->vt_keys,
                                   (long long)hd * p->vt_keys, hd, 1);
    return fi__cuda_tma_map_3d(&ws->v, p->v, PREFILL_ELEM_BYTES, hd_vo, heads, rows->v,
                               p->v_stride_h, p->v_stride_n, 1, box);
}

/* The map of q (prefill/params.h) when a box's packed rows (a tile's, or a
 * consumer's: FI_PREFILL_WS_Q_BOX_ROWS) hold whole groups and sm_scale is
 * positive: the loop then loads Q through it where its tuple takes Q so
 * (ws/config.cuh: kRawQTuple; the softmax applies sm_scale, after the
 * maxima), and paged prefetches the rows the consumers load. Otherwise, or
 * when q does not suit TMA, ws->q_rows stays 0 and the consumers load Q
 * themselves. */
static void encode_q_map(fi_prefill_ws *ws, const fi_jit_spec *spec, const fi_prefill_params *p,
                         int q_rows)
{
    const int group = p->group_size;
    const int box_rows = FI_PREFILL_WS_Q_BOX_ROWS(spec->head_dim, ws_lean(spec));
    if (q_rows <= 0 || box_rows % group != 0 || !(p->sm_scale > 0.f)) return;
    if (fi__cuda_tma_map_3d(&ws->q, p->q, in_bytes(spec), spec->head_dim, p->num_qo_heads, q_rows,
                            p->q_stride_h, p->q_stride_n, group, box_rows / group) == 0)
        ws->q_rows = q_rows;
}

/* The map of o (prefill/params.h) when a consumer's 64 packed rows are one
 * box (the group divides 64): the loop then stores the output it stages in
 * shared memory through it. Otherwise, or when o does not suit TMA,
 * ws->o_rows stays 0 and the consumers store the rows themselves. */
static void encode_o_map(fi_prefill_ws *ws, const fi_jit_spec *spec, const fi_prefill_params *p,
                         int o_rows)
{
    const int group = p->group_size;
    if (o_rows <= 0 || 64 % group != 0) return;
    if (fi__cuda_tma_map_3d(&ws->o, p->o, PREFILL_ELEM_BYTES, fi__spec_head_dim_vo(spec),
                            p->num_qo_heads, o_rows, p->o_stride_h, p->o_stride_n, group,
                            64 / group) == 0)
        ws->o_rows = o_rows;
}

/* How many CTAs a persistent launch has, into *sm_count: N with
 * FIJIT_PREFILL_WS=persistent:N or static:N (so that tests walk several
 * blocks per CTA on grids smaller than the device), else *sm_count as
 * given, from the device when 0. Read where the launch mode is chosen, not
 * per launch. */
static int persistent_ctas(int *sm_count)
{
    const char *env = getenv("FIJIT_PREFILL_WS");
    const char *colon = env ? strchr(env, ':') : NULL;
    if (colon && atoi(colon + 1) > 0) {
        *sm_count = atoi(colon + 1);
        return 0;
    }
    return *sm_count ? 0 : fi__cuda_sm_count(sm_count);
}

/* Zero the claimed-block counter on the launch's stream: 1 when done, 0
 * when the driver lacks cuMemsetD32Async (the CTAs then walk their blocks in
 * a fixed order), <0 on error. */
static int zero_claims(unsigned int *claims, CUstream stream)
{
    int rc = 0;
    const fi_cuda_api *cu;
    FI_TRY(fi__cuda_load(&cu));
    if (!cu->MemsetD32Async) return 0;
    const CUresult res = cu->MemsetD32Async((CUdeviceptr)(uintptr_t)claims, 0, 1, stream);
    if (res != CUDA_SUCCESS)
        CU_FAIL(fi__cuda_error(FI_ECUDA, res, "prefill: cuMemsetD32Async (block claims)"));
    rc = 1;
out:
    return rc;
}

/* Index of fp8's V pre-pass among the module's entries (src/core/kinds.c). */
#define FP8_V_ENTRY (WS_ENTRY + 1)

/* fp8's V pre-pass (fp8_scale_and_place_v), ahead of the main loop on its
 * stream. */
static int launch_fp8_v(const fi_jit_kernel *kernel, fi_prefill_params *p, CUstream stream)
{
    CUfunction f = kernel->functions[FP8_V_ENTRY];
    if (!f) return fi__error(FI_ELOAD, "prefill: the loaded module lacks fp8's V pre-pass kernel");
    if (p->vt_keys <= 0) return 0;
    const unsigned block[3] = {FI_PREFILL_FP8_V_THREADS, 1, 1};
    return fi__cuda_launch(f, (unsigned)(p->vt_keys / FI_PREFILL_FP8_V_KEYS),
                           (unsigned)p->num_kv_heads, block, 0, stream, p, "prefill");
}

/* Launch the Hopper main loop over `grid` x `heads` blocks, with TMA maps of
 * p's tensors (see encode_kv_maps, encode_q_map), fp8's V pre-pass before
 * it; WS_PERSISTENT and WS_STATIC: on at most sm_count CTAs. 1: launched;
 * 0: the tensors do not suit TMA, nothing was launched. */
static int launch_ws(const fi_jit_kernel *kernel, const fi_jit_spec *spec, enum ws_mode mode,
                     int sm_count, const struct work_grid *grid, int heads, fi_prefill_params *p,
                     const struct ws_rows *rows, CUstream stream, const char *who)
{
    const int items = grid->items;
    fi_prefill_ws ws;
    memset(&ws, 0, sizeof ws);
    if (encode_kv_maps(&ws, spec, p, rows) < 0) return 0;
    encode_q_map(&ws, spec, p, rows->q);
    if (fi__prefill_is_fp8(spec) && ws.q_rows == 0) return 0; /* fp8 reads Q only by TMA (launch) */
    encode_o_map(&ws, spec, p, rows->q); /* o has q's tokens */
    if (fi__prefill_is_fp8(spec)) { /* the maps suit: V is laid out now, not on a launch refused */
        const int laid = launch_fp8_v(kernel, p, stream);
        if (laid < 0) return laid;
    }
    ws.work_items = items;
    ws.kv_heads = heads;
    const int64_t blocks = (int64_t)items * heads;
    const int persistent = mode == WS_PERSISTENT || mode == WS_STATIC;
    const int64_t ctas = persistent && sm_count > 0 && blocks > sm_count ? sm_count : blocks;
    if (mode == WS_PERSISTENT && ctas < blocks && grid->claims) {
        const int zeroed = grid->zero_claims ? zero_claims(grid->claims, stream) : 1;
        if (zeroed < 0) return zeroed;
        if (zeroed) ws.claims = grid->claims;
    }
    void *args[] = {p, &ws};
    const unsigned block[3] = {(unsigned)FI_PREFILL_WS_THREADS(spec->head_dim, ws_lean(spec)), 1, 1};
    int rc = fi__cuda_launch_args(kernel->functions[WS_ENTRY], (unsigned)ctas, 1, block,
                                  ws_smem_bytes(spec), stream, args, who);
    return rc < 0 ? rc : 1;
}

/* Launch tile kernel `idx` of `kernel` over `tiles` x `heads` blocks, or the
 * Hopper main loop in its place over `ws_tiles` x `heads` (`ws`, see
 * ws_mode_for); sm_count and rows as launch_ws takes them. */
static int launch(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int idx, enum ws_mode ws,
                  int sm_count, const struct work_grid *tiles, const struct work_grid *ws_tiles,
                  int heads, fi_prefill_params *p, const struct ws_rows *rows, CUstream stream,
                  const char *who)
{
    const int hd = spec->head_dim;
    if (ws != WS_OFF) {
        p->work_request = ws_tiles->request;
        p->work_tile = ws_tiles->tile;
        int rc = launch_ws(kernel, spec, ws, sm_count, ws_tiles, heads, p, rows, stream, who);
        if (rc != 0) return rc < 0 ? rc : 0;
    }
    if (fi__prefill_is_fp8(spec))
        return fi__error(FI_EINVALID, "%s: q=fp8_e4m3 runs on the Hopper main loop alone, which "
                         "these tensors do not suit: it needs 16-byte aligned q, k, v and o, "
                         "sm_scale x q_scale x k_scale > 0 and a GQA group dividing %d (and not "
                         "FIJIT_PREFILL_WS=0)", who,
                         FI_PREFILL_WS_Q_BOX_ROWS(spec->head_dim, ws_lean(spec)));
    p->work_request = tiles->request;
    p->work_tile = tiles->tile;
    const unsigned gx = (unsigned)tiles->items, gy = (unsigned)heads;
    CUfunction f = kernel->functions[idx];
    const int sm90a = fi__prefill_tiles_sm90a(spec, kernel->arch);
    const unsigned block[3] = {(unsigned)FI_PREFILL_WARPS(idx, hd, sm90a) * 32u, 1, 1};
    const unsigned smem = (unsigned)FI_PREFILL_SMEM_BYTES_VO(idx, hd, fi__spec_head_dim_vo(spec), sm90a);
    if (!f) return fi__error(FI_ELOAD, "%s: the loaded module lacks tile kernel %d", who, idx);
    return fi__cuda_launch(f, gx, gy, block, smem, stream, p, who);
}

/* Launch the RoPE pre-pass (the module entry after the tile kernels) that
 * writes the kv_rows keys rotated into rot_k (prefill/params.h), then point
 * p's keys at them for the tile kernel. kv_token_start: the requests' first
 * rows (device), NULL for single prefill. */
static int rotate_keys(const fi_jit_kernel *kernel, int hd, void *rot_k, const int *kv_token_start,
                       int kv_rows, int batch_size, fi_prefill_params *p, CUstream stream,
                       const char *who)
{
    int rc = 0;
    CUfunction f = kernel->functions[FI_PREFILL_NUM_TILES];
    if (!f) FI_FAIL(FI_ELOAD, "%s: the loaded module lacks the RoPE pre-pass kernel", who);
    p->rot_k = rot_k;
    p->kv_token_start = kv_token_start;
    p->kv_tokens = kv_rows;
    p->batch_size = batch_size;
    if (kv_rows > 0) {
        /* A thread per pair of 16-byte chunks of a row; the kernel loops over any
         * rows beyond the grid. */
        const int64_t blocks = ceil_div((int64_t)kv_rows * (hd / 16), FI_PREFILL_ROPE_THREADS);
        const unsigned block[3] = {FI_PREFILL_ROPE_THREADS, 1, 1};
        FI_TRY(fi__cuda_launch(f, (unsigned)(blocks < ROPE_MAX_BLOCKS ? blocks : ROPE_MAX_BLOCKS),
                               (unsigned)p->num_kv_heads, block, 0, stream, p, who));
    }
    p->k = rot_k;
    p->k_stride_n = (long long)p->num_kv_heads * hd;
    p->k_stride_h = hd;
out:
    return rc;
}

/* fp8: the scales into p (the logits' into sm_scale, V's onto O), and where
 * the V pre-pass writes V as P.V reads it (vt, templates/prefill/fp8.cuh):
 * the caller's workspace. launch_ws runs the pre-pass, once the launch is
 * sure to go ahead. */
static void fp8_scale_and_place_v(const fi_prefill_args *a, fi_prefill_params *p)
{
    p->sm_scale *= fi__launch_fp8_scale(a->q_scale) * fi__launch_fp8_scale(a->k_scale);
    p->v_scale = fi__launch_fp8_scale(a->v_scale);
    p->vt = a->workspace;
    p->vt_keys = fp8_vt_keys(a->kv_len);
}

/* Bytes of rows x kv heads rotated keys. */
static size_t rotated_keys_bytes(int64_t rows, int kv_heads, int hd)
{
    return fi__align16((size_t)(rows * kv_heads * hd * PREFILL_ELEM_BYTES));
}

/* ---- single prefill --------------------------------------------------------------- */

/* Single prefill's workspace: what a pre-pass writes (RoPE's rotated keys,
 * or fp8's V laid out for P.V), then the Hopper main loop's claimed-block
 * counter (optional: without room for it, the CTAs walk their blocks in a
 * fixed order, as with no workspace at all). */
#define SINGLE_CLAIMS_BYTES 16

static size_t single_pre_bytes(const fi_jit_spec *spec, const fi_prefill_args *a)
{
    if (fi__prefill_is_fp8(spec))
        return fi__align16((size_t)a->num_kv_heads * (size_t)spec->head_dim *
                           (size_t)fp8_vt_keys(a->kv_len));
    return spec->pos == FI_POS_ROPE_LLAMA ? rotated_keys_bytes(a->kv_len, a->num_kv_heads,
                                                                spec->head_dim)
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
    FI_TRY(check_heads(who, a->num_qo_heads, a->num_kv_heads));
    if (a->qo_len < 0 || a->kv_len < 0)
        FI_FAIL(FI_EINVALID, "prefill: qo_len (%d) and kv_len (%d) must be >= 0", a->qo_len,
                a->kv_len);
    if ((int64_t)a->qo_len * (a->num_qo_heads / a->num_kv_heads) > INT_MAX - 128)
        FI_FAIL(FI_EINVALID, "prefill: qo_len %d x group size %d is too large", a->qo_len,
                a->num_qo_heads / a->num_kv_heads);
    if (a->cta_tile_q != 0) {
        int idx;
        FI_TRY(tile_index_of(who, a->cta_tile_q, &idx));
    }
    if (a->qo_len == 0) goto out; /* nothing to compute, nothing is read */
    FI_TRY(fi__check_tensors(who, a->q, a->k, a->v, a->o, a->lse, a->kv_len > 0));
    const int eb = in_bytes(spec);
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
    FI_TRY(check_scalars(who, spec, a->sm_scale, a->logits_soft_cap, a->rope_scale, a->rope_theta,
                         a->rope_offset, a->alibi_slopes, a->custom_mask));
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
    FI_TRY(check_heads("prefill", a->num_qo_heads, a->num_kv_heads));
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
    for (int i = 0; i < FI_PREFILL_NUM_TILES; i++) tiles[i] = ceil_div(rows, FI_PREFILL_TILE_Q(i));
    if (a->cta_tile_q) {
        FI_TRY(tile_index_of("prefill", a->cta_tile_q, &idx));
    } else if (!fi__prefill_is_fp8(spec)) { /* fp8 has only the Hopper loop, in tile 0's place */
        FI_TRY(fi__cuda_sm_count(&sm_count));
        idx = choose_tile(tiles, a->num_kv_heads, sm_count, rows);
    }
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));

    memset(&p, 0, sizeof p);
    PREFILL_FILL_COMMON(&p, a, spec, variant_params, a->window_left);
    p.num_qo_heads = a->num_qo_heads;
    p.num_kv_heads = a->num_kv_heads;
    p.group_size = group;
    p.heads_per_section = heads_per_section(a->kv_len, spec, a->num_kv_heads);
    p.qo_len = a->qo_len;
    p.kv_len = a->kv_len;
    if (single_rotates_keys(spec, a))
        FI_TRY(rotate_keys(kernel, spec->head_dim, a->workspace, NULL, a->kv_len, 1, &p,
                           (CUstream)stream, "prefill"));
    if (fi__prefill_is_fp8(spec)) fp8_scale_and_place_v(a, &p);
    unsigned int *claims = single_claims(spec, a);
    const enum ws_mode ws = ws_mode_for(kernel, spec, idx, p.rot_k != NULL, 0,
                                        row_mean_keys(spec, a->qo_len, a->kv_len), claims != NULL);
    if (ws == WS_PERSISTENT || ws == WS_STATIC) FI_TRY(persistent_ctas(&sm_count));
    const struct ws_rows ws_rows = {a->qo_len, a->kv_len, a->kv_len};
    const struct work_grid tile_grid = {(int)tiles[idx], NULL, NULL, NULL};
    const struct work_grid ws_grid = {(int)ceil_div(rows, ws_tile_q(spec)), NULL, NULL, claims, 1};
    FI_TRY(launch(kernel, spec, idx, ws, sm_count, &tile_grid, &ws_grid, a->num_kv_heads, &p,
                  &ws_rows, (CUstream)stream, "prefill"));
out:
    return rc;
}

/* ---- batch prefill ------------------------------------------------------------------ */

/* A plan holds the host copies of what its upload writes to the workspace
 * (list, starts) and, once uploaded, the device pointers into it. */
struct fi_batch_prefill_plan {
    fi_jit_spec spec;
    char variant[64];
    int batch_size, num_qo_heads, num_kv_heads, page_size, window_left;
    int tile;          /* index of the tile kernel */
    int num_work;      /* grid x of the tile kernel */
    int num_ws_work;   /* grid x of the Hopper main loop */
    int ws_list;       /* 1: the Hopper main loop's tiles differ, it has its own list */
    int heads_per_section;
    /* host: work_request[num_work], work_tile[num_work], then, when the Hopper
     * main loop's tiles differ from the tile kernel's, its own two arrays of
     * num_ws_work */
    int32_t *list;
    int32_t *starts;   /* host, paged RoPE: the requests' first rows [batch_size + 1]; else NULL */
    size_t claims_off, rot_k_off, starts_off, workspace_bytes; /* the workspace's layout */
    int uploaded;      /* 1: the upload wrote the workspace */
    int *work_request; /* device, in the caller's workspace */
    int *work_tile;
    int *ws_work_request;
    int *ws_work_tile;
    unsigned int *claims; /* device: the Hopper loop's claimed-block counter */
    void *rot_k;         /* RoPE: the rotated keys, in the workspace; else NULL */
    int *kv_token_start; /* paged RoPE: requests' first rows of rot_k; else NULL */
    int kv_rows;         /* rows of rot_k */
    int kv_tokens;       /* ragged: rows of k and v (kv_indptr[batch]) */
    int qo_tokens;       /* rows of q (qo_indptr[batch]) */
    int ws;              /* enum ws_mode: how runs launch tile kernel 0 */
    int sm_count;        /* 0: the plan did not need it */
};

static const char *batch_who(const fi_jit_spec *spec)
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
    const char *who = batch_who(spec);
    const int paged = spec->kind == FI_KIND_BATCH_PREFILL_PAGED;
    if (spec->kind != FI_KIND_BATCH_PREFILL_RAGGED && !paged)
        FI_FAIL(FI_EINVALID, "batch prefill: spec.kind is %d, expected FI_KIND_BATCH_PREFILL_RAGGED "
                "or FI_KIND_BATCH_PREFILL_PAGED", (int)spec->kind);
    FI_TRY(fi__check_version(who, "plan args", a, a ? a->version : 0,
                             FI_BATCH_PREFILL_PLAN_ARGS_VERSION, FI_BATCH_PREFILL_PLAN_ARGS_VERSION));
    if (a->batch_size <= 0)
        FI_FAIL(FI_EINVALID, "%s: batch_size is %d, must be >= 1", who, a->batch_size);
    FI_TRY(check_heads(who, a->num_qo_heads, a->num_kv_heads));
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
        FI_TRY(tile_index_of(who, a->cta_tile_q, &idx));
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
        *bound += ceil_div(rows, FI_PREFILL_TILE_Q(FI_PREFILL_NUM_TILES - 1)) +
                  ceil_div(rows, FI_PREFILL_TILE_Q(0));
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
                         "rotated keys' rows are int)", batch_who(spec), (long long)rows, INT_MAX);
    l->kv_rows = rows;
    l->rot_k_off = l->total;
    l->total += rotated_keys_bytes(rows, a->num_kv_heads, spec->head_dim);
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
    if (!out) FI_FAIL(FI_EINVALID, "batch prefill: out is NULL");
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
    const int64_t pad = end_aligned ? ceil_div(rows, tq) * tq - rows : 0;
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
        n += ceil_div((int64_t)(a->qo_indptr[b + 1] - a->qo_indptr[b]) * group, tq);
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
        for (int t = (int)ceil_div((int64_t)qo * group, tq) - 1; t >= 0; t--) {
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
    const char *who = batch_who(spec);
    const int paged = spec && spec->kind == FI_KIND_BATCH_PREFILL_PAGED;

    if (!out) FI_FAIL(FI_EINVALID, "batch prefill: out is NULL");
    *out = NULL;
    if (!ctx) FI_FAIL(FI_EINVALID, "batch prefill: ctx is NULL");
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
        FI_TRY(tile_index_of(who, a->cta_tile_q, &plan->tile));
    } else {
        sm_count = a->sm_count;
        if (!sm_count) FI_TRY(fi__cuda_sm_count(&sm_count));
        plan->tile = choose_tile(tiles, a->num_kv_heads, sm_count, max_rows);
    }
    plan->num_work = (int)tiles[plan->tile];
    int64_t kv_tokens = 0;
    double row_keys = 0; /* keys all query rows see */
    for (int b = 0; b < a->batch_size; b++) {
        const int64_t qo = a->qo_indptr[b + 1] - a->qo_indptr[b], kv = request_kv_len(a, paged, b);
        kv_tokens += kv;
        row_keys += (double)qo * row_mean_keys(spec, qo, kv);
    }
    plan->heads_per_section = heads_per_section(kv_tokens, spec, a->num_kv_heads);
    plan->kv_tokens = paged ? 0 : a->kv_indptr[a->batch_size];
    plan->qo_tokens = a->qo_indptr[a->batch_size];
    /* Compile or load now, so that runs (maybe under graph capture) never do. */
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, spec));
    plan->ws = (int)ws_mode_for(kernel, spec, plan->tile, 1, paged ? a->page_size : 0,
                                plan->qo_tokens > 0 ? row_keys / (double)plan->qo_tokens : 0, 1);
    if (plan->ws == WS_PERSISTENT || plan->ws == WS_STATIC) {
        if (!sm_count) sm_count = a->sm_count;
        FI_TRY(persistent_ctas(&sm_count));
    }
    plan->sm_count = sm_count;
    /* The Hopper loop's own list when its tiles are not the tile kernel's. */
    const int tq = FI_PREFILL_TILE_Q(plan->tile);
    const int ws_tq = plan->ws != WS_OFF ? ws_tile_q(spec) : tq;
    plan->ws_list = ws_tq != tq;
    plan->num_ws_work = plan->ws_list ? (int)count_tiles(a, group, ws_tq) : plan->num_work;
    if (plan->num_work > 0) {
        const int n = plan->num_work, m = plan->ws_list ? plan->num_ws_work : 0;
        const int causal = mask_is_causal(spec);
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
    if (!out) return fi__error(FI_EINVALID, "batch prefill: out is NULL");
    *out = 0;
    if (!plan) return fi__error(FI_EINVALID, "batch prefill: plan is NULL");
    *out = plan->workspace_bytes;
    return 0;
}

int fi_batch_prefill_plan_upload(fi_batch_prefill_plan *plan, void *workspace,
                                 size_t workspace_bytes)
{
    int rc = 0;
    const fi_cuda_api *cu = NULL;
    CUresult res;
    if (!plan) FI_FAIL(FI_EINVALID, "batch prefill: plan is NULL");
    const char *who = batch_who(&plan->spec);
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
            CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch prefill: cuMemcpyHtoD (work list)"));
        /* Launches leave the counter at 0 (prefill/params.h); it starts there. */
        plan->claims = (unsigned int *)((char *)workspace + plan->claims_off);
        res = cu->MemsetD8((CUdeviceptr)(uintptr_t)plan->claims, 0, sizeof(unsigned int));
        if (res != CUDA_SUCCESS)
            CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch prefill: cuMemsetD8 (block claims)"));
        if (plan->spec.pos == FI_POS_ROPE_LLAMA) {
            plan->rot_k = (char *)workspace + plan->rot_k_off;
            if (plan->starts) {
                plan->kv_token_start = (int *)((char *)workspace + plan->starts_off);
                res = cu->MemcpyHtoD((CUdeviceptr)(uintptr_t)plan->kv_token_start, plan->starts,
                                     sizeof(int32_t) * ((size_t)plan->batch_size + 1));
                if (res != CUDA_SUCCESS)
                    CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch prefill: cuMemcpyHtoD (key rows)"));
            }
        }
        /* cuMemcpyHtoD from pageable memory may return before the DMA lands,
         * and a run on a non-blocking stream is not ordered after it: wait
         * here, as batch decode's upload does, so a run right after the
         * upload reads the list it wrote. */
        if ((res = cu->CtxSynchronize()) != CUDA_SUCCESS)
            CU_FAIL(fi__cuda_error(FI_ECUDA, res, "batch prefill: cuCtxSynchronize (work list)"));
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

    if (!ctx) FI_FAIL(FI_EINVALID, "batch prefill: ctx is NULL");
    if (!plan) FI_FAIL(FI_EINVALID, "batch prefill: plan is NULL");
    const fi_jit_spec *spec = &plan->spec;
    const char *who = batch_who(spec);
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
    FI_TRY(check_scalars(who, spec, a->sm_scale, a->logits_soft_cap, a->rope_scale, a->rope_theta,
                         a->rope_offset, a->alibi_slopes, a->custom_mask));
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
        FI_TRY(rotate_keys(kernel, spec->head_dim, plan->rot_k,
                           plan->kv_token_start ? plan->kv_token_start : a->kv_indptr,
                           plan->kv_rows, plan->batch_size, &p, (CUstream)stream, who));
    const struct ws_rows rows = {plan->qo_tokens, paged ? plan->kv_rows : plan->kv_tokens,
                                 plan->kv_tokens};
    const struct work_grid tile_grid = {plan->num_work, plan->work_request, plan->work_tile, NULL};
    const struct work_grid ws_grid = {plan->num_ws_work, plan->ws_work_request, plan->ws_work_tile,
                                      plan->claims};
    FI_TRY(launch(kernel, spec, plan->tile, (enum ws_mode)plan->ws, plan->sm_count, &tile_grid,
                  &ws_grid, plan->num_kv_heads, &p, &rows, (CUstream)stream, who));
out:
    return rc;
}
