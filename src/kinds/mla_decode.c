/*
 * Absorbed MLA decode over a paged latent cache (include/fijit_mla.h): q = o
 * fp16 or bf16, kv the same or fp8_e4m3 (one per-tensor scale given at run
 * time), head_dim 512 (the latent width; the 64-wide RoPE part is fixed by
 * the kind, so it is the kind's only head dim and a spec string needs no
 * hd=), no mask (causal among a request's new tokens is built in), no
 * position encoding (the engine applies RoPE to q_pe and kpe). One module
 * serves every head count. Kernels: templates/mla/; launch code:
 * src/launch/mla_decode.c.
 */
#include <string.h>

#include "common/error.h"
#include "kinds/names.h"
#include "kinds/kind.h"
#include "kinds/mla_decode.h"
#include "kinds/units.h"
#include "mla/params.h"

int fi__mla_decode_kv_bytes(const fi_jit_spec *spec)
{
    return spec->kv_dtype == FI_DTYPE_FP8_E4M3 ? 1 : 2;
}

static int check_mla_decode(const fi_jit_spec *spec)
{
    const char *kind = fi__kind_mla_decode.name;
    int rc;
    if (spec->kv_dtype == FI_DTYPE_FP8_E4M3) {
        fi_jit_spec same = *spec;
        same.kv_dtype = spec->q_dtype;
        rc = fi__check_same_16bit_dtypes(&same, kind);
    } else if (spec->kv_dtype != spec->q_dtype &&
               (spec->q_dtype == FI_DTYPE_FP16 || spec->q_dtype == FI_DTYPE_BF16)) {
        return fi__error(FI_EUNSUPPORTED,
                         "kv dtype '%s' is not supported with q=%s for %s (supported: kv equal to "
                         "q, fp8_e4m3)",
                         fi__dtype_name(spec->kv_dtype), fi__dtype_name(spec->q_dtype), kind);
    } else {
        rc = fi__check_same_16bit_dtypes(spec, kind);
    }
    if (rc < 0 || (rc = fi__check_head_dim(spec, &fi__kind_mla_decode)) < 0) return rc;
    if (spec->mask != FI_MASK_NONE)
        return fi__error(FI_EUNSUPPORTED,
                         "mask '%s' is not supported for %s (supported: none; causal among a "
                         "request's new tokens is built in)",
                         fi__mask_name(spec->mask), kind);
    if (spec->pos != FI_POS_NONE)
        return fi__error(FI_EUNSUPPORTED,
                         "pos '%s' is not supported for %s (supported: none; RoPE is applied to "
                         "q_pe and kpe by the engine)",
                         fi__pos_name(spec->pos), kind);
    return 0;
}

/* Opt-in shared memory per block by compute capability (CUDA programming
 * guide, "Technical Specifications per Compute Capability"); 0: unknown. */
static int smem_optin_bytes(int cc)
{
    switch (cc) {
    case 80: case 87: return 163 * 1024;
    case 86: case 89: case 120: case 121: return 99 * 1024;
    case 90: case 100: case 103: return 227 * 1024;
    default: return 0;
    }
}

/* Compute capability of a checked arch name ("sm_90a" -> 90). */
static int arch_cc(const char *arch)
{
    int cc = 0;
    for (const char *p = arch + 3; *p >= '0' && *p <= '9'; p++) cc = cc * 10 + (*p - '0');
    return cc;
}

static int smem_bytes(const fi_jit_spec *spec, int cc)
{
    return FI_MLA_SMEM_BYTES(fi__mla_decode_kv_bytes(spec), FI_MLA_STAGES(cc));
}

/* mma.sync and cp.async (sm_80+), and the kernel's shared memory. */
static int check_arch_mla_decode(const fi_jit_spec *spec, const char *arch)
{
    const int cc = arch_cc(arch);
    const int need = smem_bytes(spec, cc);
    if (cc < 80 || smem_optin_bytes(cc) < need)
        return fi__error(FI_EUNSUPPORTED,
                         "%s needs %d bytes of shared memory per block and mma.sync: arch %s is "
                         "not supported (supported: sm_80, sm_87, sm_90, sm_90a, sm_100, sm_103)",
                         fi__kind_mla_decode.name, need, arch);
    return 0;
}

static void mla_decode_launch_shape(const fi_jit_spec *spec, const char *arch,
                                    fi_launch_shape *out)
{
    memset(out, 0, sizeof *out);
    out->block_dim[0] = FI_MLA_THREADS;
    out->block_dim[1] = out->block_dim[2] = 1;
    out->merge_block_dim[0] = FI_MLA_MERGE_THREADS;
    out->merge_block_dim[1] = out->merge_block_dim[2] = 1;
    out->smem_bytes = (unsigned)smem_bytes(spec, arch_cc(arch)); /* the ring's depth */
    out->param_bytes = (unsigned)sizeof(fi_mla_decode_params);
}

const fi_kind_info fi__kind_mla_decode = {
    .kind = FI_KIND_MLA_DECODE,
    .name = "mla_decode",
    .template_name = "mla/mla_decode.cuh",
    /* The main kernel, then the merge of split partial states. */
    .entries = {"fi_mla_decode_kernel", "fi_mla_decode_merge_kernel"},
    .head_dims = {FI_MLA_DIM_CKV},
    .check = check_mla_decode,
    .launch_shape = mla_decode_launch_shape,
    .check_arch = check_arch_mla_decode,
};
