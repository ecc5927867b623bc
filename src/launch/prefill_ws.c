/*
 * The Hopper main loop of prefill (templates/prefill/ws/kernel.cuh) on the
 * host: how tile kernel 0's blocks launch (a CTA per block, persistent,
 * the tile kernel), the TMA maps of its tensors, its block claims, and the
 * launch of tile kernel `idx` or the Hopper main loop in its place.
 *
 * Claims. The Hopper main loop's persistent CTAs take their next block from
 * a counter in the workspace (batch kinds: zeroed by the plan upload; single
 * prefill: by a memset on the stream before each launch), so a CTA that
 * finishes early takes the next longest block; every run leaves it at 0.
 * Without a counter they walk their blocks in a fixed order, which at the
 * end of a causal grid leaves SMs idle (single prefill, 32/8 seq 15.5k: see
 * docs/performance.md).
 */
#include <stdlib.h>

#include "core/settings.h"
#include "launch/prefill.h"

static int gcd(int a, int b)
{
    while (b != 0) {
        const int r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Keys a query row sees on average, at most, beyond which causal head_dim
 * 256 keeps a CTA per block (ws_default). */
#define WS_SHORT_KEYS 3072

/* FI_PREFILL_WS_LEAN of the spec (the template computes it from the same fields). */
static int ws_lean(const fi_jit_spec *spec)
{
    return FI_PREFILL_WS_LEAN(spec->soft_cap, spec->pos == FI_POS_ALIBI, fi__spec_has_variant(spec));
}

/* Packed rows of the Hopper main loop's query tiles for the spec. */
int fi__prefill_ws_tile_q(const fi_jit_spec *spec)
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
    if (spec->head_dim <= 128 || !fi__prefill_mask_is_causal(spec)) return WS_PERSISTENT;
    const int fixed_order = spec->kind == FI_KIND_BATCH_PREFILL_PAGED &&
                            (spec->pos == FI_POS_ROPE_LLAMA || !ws_lean(spec));
    return spec->mask == FI_MASK_CAUSAL && can_claim && !fixed_order && mean_keys <= WS_SHORT_KEYS
               ? WS_PERSISTENT
               : WS_GRID;
}

/* Keys a query row sees on average in a request of qo queries over kv keys
 * (the queries the last ones): kv, or with a causal mask kv - qo + (qo + 1) / 2. */
double fi__prefill_row_mean_keys(const fi_jit_spec *spec, int64_t qo, int64_t kv)
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
 * measurements, else ws_default (mean_keys, can_claim). fi_jit_ctx_new
 * refuses any other value; one set later is taken as unset. Batch kinds
 * decide once, in the plan. */
enum ws_mode fi__prefill_ws_mode_for(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int idx,
                                     int rot_k, int page_size, double mean_keys, int can_claim)
{
    fi_prefill_ws_choice choice;
    int ctas;
    const int paged = spec->kind == FI_KIND_BATCH_PREFILL_PAGED;
    if (fi__prefill_ws_choice_parse(&choice, &ctas, getenv("FIJIT_PREFILL_WS")) < 0)
        choice = FI_PREFILL_WS_DEFAULT;
    if (idx != 0 || !fi__prefill_is_sm90a(kernel->arch) || !kernel->functions[WS_ENTRY] ||
        !FI_PREFILL_WS_TUPLE((int)spec->kind, spec->mask == FI_MASK_CUSTOM) ||
        (paged && !FI_PREFILL_WS_PAGE_OK(page_size, ws_tile_kv(spec))) ||
        (spec->pos == FI_POS_ROPE_LLAMA && !rot_k) || choice == FI_PREFILL_WS_OFF)
        return WS_OFF;
    switch (choice) {
    case FI_PREFILL_WS_GRID: return WS_GRID;
    case FI_PREFILL_WS_PERSISTENT: return WS_PERSISTENT;
    case FI_PREFILL_WS_STATIC: return WS_STATIC;
    default: return ws_default(spec, mean_keys, can_claim);
    }
}

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
    int rc = fi__cuda_tma_map_3d(&ws->k, p->k, fi__prefill_in_bytes(spec), hd, heads, rows->k,
                                 p->k_stride_h, p->k_stride_n, 1, box);
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
    if (fi__cuda_tma_map_3d(&ws->q, p->q, fi__prefill_in_bytes(spec), spec->head_dim,
                            p->num_qo_heads, q_rows, p->q_stride_h, p->q_stride_n, group,
                            box_rows / group) == 0)
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
int fi__prefill_persistent_ctas(int *sm_count)
{
    fi_prefill_ws_choice choice;
    int ctas;
    if (fi__prefill_ws_choice_parse(&choice, &ctas, getenv("FIJIT_PREFILL_WS")) == 0 && ctas > 0) {
        *sm_count = ctas;
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
        const int laid = fi__prefill_launch_fp8_v(kernel, p, stream);
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
 * fi__prefill_ws_mode_for); sm_count and rows as launch_ws takes them. */
int fi__prefill_launch(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int idx,
                       enum ws_mode ws, int sm_count, const struct work_grid *tiles,
                       const struct work_grid *ws_tiles, int heads, fi_prefill_params *p,
                       const struct ws_rows *rows, CUstream stream, const char *who)
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
