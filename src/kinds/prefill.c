/*
 * The prefill kinds: single prefill, batch prefill over ragged K/V and over a
 * paged K/V cache. They share templates/prefill/ (each kind's entry file
 * includes the same kernels) and src/launch/prefill_*.c. A module holds one
 * kernel per query tile (128, 64, 16 rows; templates/prefill/params.h), the
 * RoPE pre-pass, the Hopper main loop (empty but for sm_90a) and fp8's V
 * pre-pass (empty but for fp8).
 *
 * Tuples: q = kv = o of one 16-bit type at head_dim 64/128/256 with every
 * mask, pos encoding and soft-cap; MLA's head_dim 192 with v and o of 128
 * (head_dim_vo) with every mask and soft-cap and no pos encoding (RoPE would
 * rotate all 192 columns, not MLA's 64-column rope part, which the model
 * rotates; ALiBi is no MLA model's, and its tile kernels with a custom mask
 * and soft-cap spilled 8 B at 255 registers), on the Hopper main loop on
 * sm_90a and the mma.sync tile kernels elsewhere; or fp8 (q = kv = e4m3, o 16-bit) for
 * single prefill at head_dim 128, no mask or causal, nothing else on the
 * logits, on sm_90a only.
 */
#include <string.h>

#include "common/error.h"
#include "kinds/names.h"
#include "kinds/spec.h"
#include "kinds/prefill.h"
#include "kinds/units.h"
#include "prefill/params.h"

/* head_dim 64, 128, 256 (v and o the same), and MLA's 192 with v and o of 128. */
#define PREFILL_HEAD_DIMS .head_dims = {64, 128, 192, 256}, .head_dims_vo = {0, 0, 128, 0}

#define PREFILL_ENTRIES                                                        \
    {"fi_prefill_kernel_q128", "fi_prefill_kernel_q64", "fi_prefill_kernel_q16",      \
     "fi_prefill_rope_k_kernel", "fi_prefill_kernel_ws", "fi_prefill_fp8_v_kernel"}

/* fp8 prefill: q = kv = e4m3, o fp16 or bf16, single prefill at head_dim 128
 * with no mask or a causal one, and nothing else on the logits (the Hopper
 * main loop with Q as it is in q). */
static int check_fp8(const fi_jit_spec *spec, const char *kind)
{
    if (spec->kv_dtype != FI_DTYPE_FP8_E4M3)
        return fi__error(FI_EUNSUPPORTED, "kv dtype '%s' is not supported with q=fp8_e4m3 for %s "
                         "(supported: kv=fp8_e4m3)", fi__dtype_name(spec->kv_dtype), kind);
    if (spec->o_dtype != FI_DTYPE_FP16 && spec->o_dtype != FI_DTYPE_BF16)
        return fi__error(FI_EUNSUPPORTED, "o dtype '%s' is not supported with q=fp8_e4m3 for %s "
                         "(supported: fp16, bf16)", fi__dtype_name(spec->o_dtype), kind);
    if (spec->kind != FI_KIND_PREFILL)
        return fi__error(FI_EUNSUPPORTED, "q=fp8_e4m3 is not supported for %s (supported: prefill)",
                         kind);
    if (spec->head_dim != 128)
        return fi__error(FI_EUNSUPPORTED, "head_dim %d is not supported with q=fp8_e4m3 for %s "
                         "(supported: 128)", spec->head_dim, kind);
    if (spec->mask != FI_MASK_NONE && spec->mask != FI_MASK_CAUSAL)
        return fi__error(FI_EUNSUPPORTED, "mask '%s' is not supported with q=fp8_e4m3 for %s "
                         "(supported: none, causal)", fi__mask_name(spec->mask), kind);
    if (spec->pos != FI_POS_NONE || spec->soft_cap || fi__spec_has_variant(spec))
        return fi__error(FI_EUNSUPPORTED, "q=fp8_e4m3 for %s supports no pos encoding, soft-cap or "
                         "custom variant (got pos '%s', soft_cap %d, variant '%s')", kind,
                         fi__pos_name(spec->pos), spec->soft_cap,
                         fi__spec_has_variant(spec) ? spec->variant : "default");
    return 0;
}

static int check_prefill(const fi_jit_spec *spec, const fi_kind_info *unit)
{
    if (fi__prefill_is_fp8(spec) && spec->head_dim_vo)
        return fi__error(FI_EUNSUPPORTED, "head_dim_vo %d is not supported with q=fp8_e4m3 for %s "
                         "(supported: v and o of head_dim)", spec->head_dim_vo, unit->name);
    if (fi__prefill_is_fp8(spec)) return check_fp8(spec, unit->name);
    if (spec->q_dtype != FI_DTYPE_FP16 && spec->q_dtype != FI_DTYPE_BF16)
        return fi__error(FI_EUNSUPPORTED, "q dtype '%s' is not supported for %s (supported: %s)",
                         fi__dtype_name(spec->q_dtype), unit->name,
                         spec->kind == FI_KIND_PREFILL ? "fp16, bf16, fp8_e4m3 on sm_90a"
                                                       : "fp16, bf16");
    int rc = fi__check_same_16bit_dtypes(spec, unit->name);
    if (rc < 0) return rc;
    if (spec->head_dim_vo && spec->pos != FI_POS_NONE)
        return fi__error(FI_EUNSUPPORTED, "pos '%s' is not supported with head_dim_vo %d for %s "
                         "(supported: none; MLA's rope part is rotated by the caller)",
                         fi__pos_name(spec->pos), spec->head_dim_vo, unit->name);
    /* Every mask (none, causal, window, custom), pos encoding and soft-cap. */
    return fi__check_head_dim(spec, unit);
}

static int check_single(const fi_jit_spec *spec) { return check_prefill(spec, &fi__kind_prefill); }
static int check_ragged(const fi_jit_spec *spec)
{
    return check_prefill(spec, &fi__kind_batch_prefill_ragged);
}
static int check_paged(const fi_jit_spec *spec)
{
    return check_prefill(spec, &fi__kind_batch_prefill_paged);
}

static int check_arch(const fi_jit_spec *spec, const char *arch)
{
    if (fi__prefill_is_fp8(spec) && !fi__prefill_is_sm90a(arch))
        return fi__error(FI_EUNSUPPORTED, "q=fp8_e4m3 prefill runs on the Hopper main loop only: "
                         "arch %s is not supported (supported: sm_90a)", arch);
    return 0;
}

/* Entries of PREFILL_ENTRIES by index (their order in the module). */
enum { ENTRY_Q128, ENTRY_Q64, ENTRY_Q16, ENTRY_ROPE_K, ENTRY_WS, ENTRY_FP8_V };
#define ENTRY_BIT(e) (1u << (e))

/* On sm_90a a 16-bit tuple's module holds the Hopper main loop and three
 * tile kernels (the main loop's fallbacks, and the shapes that fill the SMs
 * with short queries: src/launch/prefill_ws.c), which NVRTC compiles one
 * after another: 1.2 s at head_dim 128, of which the main loop 0.6 s and
 * each tile kernel 0.2 s (docs/cold-start.md). Built as two modules side by
 * side, the first request waits for the slower one: the main loop with the
 * pre-passes, and the tile kernels; at head_dim above 128 (tile kernels of
 * 0.3 s each) the 16-row tiles join the main loop. Elsewhere one module. */
static int parts(const fi_jit_spec *spec, const char *arch, unsigned out[FI_KIND_MAX_PARTS])
{
    if (!fi__prefill_is_sm90a(arch) || fi__prefill_is_fp8(spec) ||
        !FI_PREFILL_WS_TUPLE((int)spec->kind, spec->mask == FI_MASK_CUSTOM))
        return 1;
    out[0] = ENTRY_BIT(ENTRY_WS) | ENTRY_BIT(ENTRY_ROPE_K) | ENTRY_BIT(ENTRY_FP8_V);
    out[1] = ENTRY_BIT(ENTRY_Q128) | ENTRY_BIT(ENTRY_Q64) | ENTRY_BIT(ENTRY_Q16);
    if (spec->head_dim > 128) {
        out[0] |= ENTRY_BIT(ENTRY_Q16);
        out[1] &= ~ENTRY_BIT(ENTRY_Q16);
    }
    return 2;
}

static void launch_shape(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out)
{
    /* Of functions[0] (128-row tiles); the launch code computes the others. */
    const int sm90a = fi__prefill_tiles_sm90a(spec, arch);
    memset(out, 0, sizeof *out);
    out->block_dim[0] = (unsigned)FI_PREFILL_WARPS(0, spec->head_dim, sm90a) * 32u;
    out->block_dim[1] = out->block_dim[2] = 1;
    out->smem_bytes = (unsigned)FI_PREFILL_SMEM_BYTES_VO(0, spec->head_dim,
                                                         fi__spec_head_dim_vo(spec), sm90a);
    out->param_bytes = (unsigned)sizeof(fi_prefill_params);
}

const fi_kind_info fi__kind_prefill = {
    .kind = FI_KIND_PREFILL,
    .name = "prefill",
    .template_name = "prefill/single.cuh",
    .entries = PREFILL_ENTRIES,
    PREFILL_HEAD_DIMS,
    .check = check_single,
    .launch_shape = launch_shape,
    .check_arch = check_arch,
    .parts = parts,
};

const fi_kind_info fi__kind_batch_prefill_ragged = {
    .kind = FI_KIND_BATCH_PREFILL_RAGGED,
    .name = "batch_prefill_ragged",
    .template_name = "prefill/ragged.cuh",
    .entries = PREFILL_ENTRIES,
    PREFILL_HEAD_DIMS,
    .check = check_ragged,
    .launch_shape = launch_shape,
    .check_arch = check_arch,
    .parts = parts,
};

const fi_kind_info fi__kind_batch_prefill_paged = {
    .kind = FI_KIND_BATCH_PREFILL_PAGED,
    .name = "batch_prefill_paged",
    .template_name = "prefill/paged.cuh",
    .entries = PREFILL_ENTRIES,
    PREFILL_HEAD_DIMS,
    .check = check_paged,
    .launch_shape = launch_shape,
    .check_arch = check_arch,
    .parts = parts,
};
