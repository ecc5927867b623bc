/*
 * The pre-passes of a prefill launch: RoPE's keys rotated once into a
 * workspace, and fp8's V laid out for P.V (templates/prefill/fp8.cuh).
 *
 * RoPE. Every CTA that reads a K tile would rotate it again; instead a
 * pre-pass (fi_prefill_rope_k_kernel) rotates each key once into a
 * workspace and the tile kernels read it there (prefill/params.h: rot_k).
 * Batch kinds: after the work list (paged: then the requests' first rows).
 * Single prefill: the caller's optional workspace; without one, the tile
 * loop rotates K tiles.
 */

#include "launch/prefill.h"

/* Grid x bound of the RoPE pre-pass: a few waves of blocks per kv head. */
#define ROPE_MAX_BLOCKS 1024

/* fp8's vt (templates/prefill/params.h): keys per head_dim row, whole K/V
 * tiles, so that no box of it reads past its end. */
int fi__prefill_fp8_vt_keys(int kv_len)
{
    return (int)fi__prefill_ceil_div(kv_len, FI_PREFILL_FP8_TILE_KV) * FI_PREFILL_FP8_TILE_KV;
}

/* fp8's V pre-pass (fi__prefill_fp8_scale_and_place_v), ahead of the main
 * loop on its stream. */
int fi__prefill_launch_fp8_v(const fi_jit_kernel *kernel, fi_prefill_params *p, CUstream stream)
{
    CUfunction f = kernel->functions[FP8_V_ENTRY];
    if (!f) return fi__error(FI_ELOAD, "prefill: the loaded module lacks fp8's V pre-pass kernel");
    if (p->vt_keys <= 0) return 0;
    const unsigned block[3] = {FI_PREFILL_FP8_V_THREADS, 1, 1};
    return fi__cuda_launch(f, (unsigned)(p->vt_keys / FI_PREFILL_FP8_V_KEYS),
                           (unsigned)p->num_kv_heads, block, 0, stream, p, "prefill");
}

/* Launch the RoPE pre-pass (the module entry after the tile kernels) that
 * writes the kv_rows keys rotated into rot_k (prefill/params.h), then point
 * p's keys at them for the tile kernel. kv_token_start: the requests' first
 * rows (device), NULL for single prefill. */
int fi__prefill_rotate_keys(const fi_jit_kernel *kernel, int hd, void *rot_k,
                            const int *kv_token_start, int kv_rows, int batch_size,
                            fi_prefill_params *p, CUstream stream, const char *who)
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
        const int64_t blocks = fi__prefill_ceil_div((int64_t)kv_rows * (hd / 16), FI_PREFILL_ROPE_THREADS);
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
 * the caller's workspace. launch_ws (prefill_ws.c) runs the pre-pass, once
 * the launch is sure to go ahead. */
void fi__prefill_fp8_scale_and_place_v(const fi_prefill_args *a, fi_prefill_params *p)
{
    p->sm_scale *= fi__launch_fp8_scale(a->q_scale) * fi__launch_fp8_scale(a->k_scale);
    p->v_scale = fi__launch_fp8_scale(a->v_scale);
    p->vt = a->workspace;
    p->vt_keys = fi__prefill_fp8_vt_keys(a->kv_len);
}

/* Bytes of rows x kv heads rotated keys. */
size_t fi__prefill_rotated_keys_bytes(int64_t rows, int kv_heads, int hd)
{
    return fi__align16((size_t)(rows * kv_heads * hd * PREFILL_ELEM_BYTES));
}
