/*
 * What the host side of the prefill kinds (single, batch ragged, batch
 * paged) shares between its files, one job each:
 *   prefill_args.c     the argument checks both launch kinds share, and the
 *                      scalars both fill into the params
 *   prefill_plan.c     the tile choice, the block order and the batch plan
 *                      (work list, workspace layout, upload)
 *   prefill_prepass.c  the pre-passes: RoPE's rotated keys, fp8's V layout
 *   prefill_ws.c       the Hopper main loop: launch modes, TMA maps, block
 *                      claims, and the launch (a tile kernel, or the Hopper
 *                      main loop in its place)
 *   prefill_single.c   single prefill (fi_prefill_*)
 *   prefill_batch.c    batch prefill's run (fi_batch_prefill_run)
 * templates/prefill/ holds the kernels, templates/prefill/params.h the
 * parameter struct both sides share, and include/fijit_prefill.h the public
 * API.
 */
#ifndef FI_LAUNCH_PREFILL_H
#define FI_LAUNCH_PREFILL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "launch/launch_common.h"
#include "toolchain/cuda_drv.h"
#include "common/error.h"
#include "launch/rope.h"
#include "fijit_prefill.h"
#include "kinds/registry.h"
#include "kinds/prefill.h"
#include "core/jit.h"
#include "prefill/params.h"
#include "kinds/spec.h"
#include "common/sys.h"

/* A failed driver call: fi__cuda_error has already written the message. */
#define CU_FAIL(expr)                                                          \
    do {                                                                       \
        rc = (expr);                                                           \
        goto out;                                                              \
    } while (0)

/* Bytes of a q, k, v or o element of the 16-bit tuples (the batch kinds'
 * only ones: fi__prefill_check); fp8's q, k and v take 1
 * (fi__prefill_in_bytes). */
#define PREFILL_ELEM_BYTES 2

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
        fi__prefill_fill_scalars((p), (spec), (a)->sm_scale, (a)->logits_soft_cap,            \
                                 (a)->rope_scale, (a)->rope_theta, (a)->rope_offset,          \
                                 (window_left));                                              \
    } while (0)

/* Index of the Hopper main loop among the module's entries (src/kinds/registry.c). */
#define WS_ENTRY (FI_PREFILL_NUM_TILES + 1)

/* Index of fp8's V pre-pass among the module's entries (src/kinds/registry.c). */
#define FP8_V_ENTRY (WS_ENTRY + 1)

/* How tile kernel 0's blocks are launched on sm_90a. */
enum ws_mode {
    WS_OFF = 0,        /* the tile kernel */
    WS_GRID = 1,       /* the Hopper main loop, a CTA per block */
    WS_PERSISTENT = 2, /* the Hopper main loop, a CTA per SM walking the blocks: each
                        * claims the next unclaimed one where the launch has a
                        * counter (batch kinds), else every gridDim.x-th */
    WS_STATIC = 3,     /* as WS_PERSISTENT, every gridDim.x-th block always (A/B) */
};

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

/* Rows of the tensors the Hopper main loop's TMA maps describe: q's tokens,
 * and the contiguous keys of k and v (0: none, no map is read). */
struct ws_rows {
    int q, k, v;
};

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

static inline int64_t fi__prefill_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Whether keys past a query's own are masked (causal, or a window, which is
 * causal too). */
static inline int fi__prefill_mask_is_causal(const fi_jit_spec *spec)
{
    return spec->mask == FI_MASK_CAUSAL || spec->mask == FI_MASK_WINDOW;
}

/* ---- argument checks (prefill_args.c) ------------------------------------------ */

/* Bytes of a q, k or v element of the spec. */
int fi__prefill_in_bytes(const fi_jit_spec *spec);
/* fi__check_heads, and kv heads within the grid's y limit. */
int fi__prefill_check_heads(const char *who, int qo_heads, int kv_heads);
/* The scalar arguments both launch kinds share (window_left: the batch
 * kinds check it in the plan). */
int fi__prefill_check_scalars(const char *who, const fi_jit_spec *spec, float sm_scale,
                              float soft_cap, float rope_scale, float rope_theta,
                              int rope_offset, const float *alibi_slopes,
                              const void *custom_mask);
/* The index of the tile kernel of cta_tile_q query rows into *out. */
int fi__prefill_tile_index(const char *who, int cta_tile_q, int *out);
/* The scalars of p (PREFILL_FILL_COMMON). */
void fi__prefill_fill_scalars(fi_prefill_params *p, const fi_jit_spec *spec, float sm_scale,
                              float soft_cap, float rope_scale, float rope_theta,
                              int rope_offset, int window_left);

/* ---- tile choice and batch plan (prefill_plan.c) -------------------------------- */

/* Heads per block-order section for kv_tokens keys per head. */
int fi__prefill_heads_per_section(int64_t kv_tokens, const fi_jit_spec *spec, int kv_heads);
/* The automatic tile: `tiles[i]` CTAs per kv head with tile i. */
int fi__prefill_choose_tile(const int64_t tiles[FI_PREFILL_NUM_TILES], int kv_heads,
                            int sm_count, int64_t max_rows);
/* The batch kind's name in messages. */
const char *fi__prefill_batch_who(const fi_jit_spec *spec);

/* ---- pre-passes (prefill_prepass.c) --------------------------------------------- */

/* fp8's vt keys per head_dim row for kv_len keys. */
int fi__prefill_fp8_vt_keys(int kv_len);
/* fp8's V pre-pass, ahead of the main loop on its stream. */
int fi__prefill_launch_fp8_v(const fi_jit_kernel *kernel, fi_prefill_params *p, CUstream stream);
/* The RoPE pre-pass into rot_k, then p's keys pointed at them. */
int fi__prefill_rotate_keys(const fi_jit_kernel *kernel, int hd, void *rot_k,
                            const int *kv_token_start, int kv_rows, int batch_size,
                            fi_prefill_params *p, CUstream stream, const char *who);
/* fp8: the scales into p, and where the V pre-pass writes V. */
void fi__prefill_fp8_scale_and_place_v(const fi_prefill_args *a, fi_prefill_params *p);
/* Bytes of rows x kv heads rotated keys. */
size_t fi__prefill_rotated_keys_bytes(int64_t rows, int kv_heads, int hd);

/* ---- the Hopper main loop and the launch (prefill_ws.c) ------------------------- */

/* Packed rows of the Hopper main loop's query tiles for the spec. */
int fi__prefill_ws_tile_q(const fi_jit_spec *spec);
/* Keys a query row sees on average in a request of qo queries over kv keys. */
double fi__prefill_row_mean_keys(const fi_jit_spec *spec, int64_t qo, int64_t kv);
/* How tile kernel `idx`'s blocks launch (WS_OFF: the tile kernel). */
enum ws_mode fi__prefill_ws_mode_for(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int idx,
                                     int rot_k, int page_size, double mean_keys, int can_claim);
/* How many CTAs a persistent launch has, into *sm_count. */
int fi__prefill_persistent_ctas(int *sm_count);
/* Launch tile kernel `idx`, or the Hopper main loop in its place. */
int fi__prefill_launch(const fi_jit_kernel *kernel, const fi_jit_spec *spec, int idx,
                       enum ws_mode ws, int sm_count, const struct work_grid *tiles,
                       const struct work_grid *ws_tiles, int heads, fi_prefill_params *p,
                       const struct ws_rows *rows, CUstream stream, const char *who);

#endif
