/*
 * fi_merge_states (include/fijit_batch_decode.h): the merge of partial
 * attention states, (v_n, lse_n) over disjoint key sets, into the state over
 * their union. Split-KV decode merges its splits this way inside its launch;
 * callers merge cascades and chunked prefill (each cached chunk attended
 * separately, then merged: MLA's 128-wide outputs of a 192-wide Q.K^T).
 * The kernel is the second entry of the batch_decode module of (dtype,
 * head_dim of v) with nothing else (templates/decode/split_merge.cuh).
 */
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "core/jit.h"
#include "kinds/spec.h"
#include "decode/params.h"
#include "fijit_batch_decode.h"
#include "launch/launch_common.h"
#include "toolchain/cuda_drv.h"

/* The (dtype, head dim) of the states: the args' own (version 2), else the
 * spec's o dtype and v/o head dim (any kind: a batch decode spec, or the
 * prefill spec whose outputs these are). */
static int merge_shape(const fi_jit_spec *spec, const fi_merge_states_args *a, fi_dtype *dtype,
                       int *head_dim)
{
    *dtype = a->version >= 2 ? a->dtype : (fi_dtype)0;
    *head_dim = a->version >= 2 ? a->head_dim : 0;
    if ((!*dtype || !*head_dim) && !spec)
        return fi__error(FI_EINVALID, "merge_states: spec is NULL and args give no %s (version 2 "
                         "args: dtype and head_dim, or a spec)", *dtype ? "head_dim" : "dtype");
    if (!*dtype || !*head_dim) {
        int rc = fi_jit_spec_check(spec);
        if (rc < 0) return rc;
    }
    if (!*dtype) *dtype = spec->o_dtype;
    if (!*head_dim) *head_dim = fi__spec_head_dim_vo(spec);
    if (*dtype != FI_DTYPE_FP16 && *dtype != FI_DTYPE_BF16)
        return fi__error(FI_EUNSUPPORTED, "merge_states: dtype %d is not supported (supported: "
                         "fp16, bf16)", (int)*dtype);
    if (*head_dim != 64 && *head_dim != 128 && *head_dim != 256)
        return fi__error(FI_EUNSUPPORTED, "merge_states: head_dim %d of v is not supported "
                         "(supported: 64, 128, 256)", *head_dim);
    return 0;
}

int fi_merge_states(fi_jit_ctx *ctx, const fi_jit_spec *spec, const fi_merge_states_args *a,
                    struct CUstream_st *stream)
{
    int rc = 0;
    const fi_jit_kernel *kernel = NULL;
    fi_merge_states_params p;
    fi_jit_spec merge = FI_JIT_SPEC_INIT;
    fi_dtype dtype;
    int head_dim;
    if (!ctx || !a) FI_FAIL(FI_EINVALID, "merge_states: NULL argument");
    FI_TRY(fi__check_version("merge_states", "args", a, a->version, 1,
                             FI_MERGE_STATES_ARGS_VERSION));
    FI_TRY(merge_shape(spec, a, &dtype, &head_dim));
    if (a->seq_len < 0 || a->num_states < 0 || a->num_heads <= 0)
        FI_FAIL(FI_EINVALID, "merge_states: seq_len (%d) and num_states (%d) must be >= 0, "
                "num_heads (%d) > 0", a->seq_len, a->num_states, a->num_heads);
    if ((int64_t)a->seq_len * a->num_heads > INT32_MAX)
        FI_FAIL(FI_EINVALID, "merge_states: seq_len x num_heads exceeds the grid");
    if (a->seq_len == 0) goto out;
    if (!a->v_out || (uintptr_t)a->v_out % 8 || (a->num_states > 0 && (!a->v || !a->lse)) ||
        (a->v && (uintptr_t)a->v % 8))
        FI_FAIL(FI_EINVALID, "merge_states: v, lse, v_out must be non-NULL and v, v_out 8-byte "
                "aligned");
    if ((a->v_stride_n | a->v_stride_state | a->v_stride_h | a->v_out_stride_n |
         a->v_out_stride_h) % 4 ||
        a->v_stride_n < 0 || a->v_stride_state < 0 || a->v_stride_h < 0 ||
        a->v_out_stride_n < 0 || a->v_out_stride_h < 0 || a->lse_stride_n < 0 ||
        a->lse_stride_state < 0)
        FI_FAIL(FI_EINVALID, "merge_states: strides must be >= 0 and those of v and v_out "
                "multiples of 4");
    /* The module of (dtype, head_dim) with nothing else, whatever else the
     * caller's spec asks for: the merge does not depend on it. */
    merge.kind = FI_KIND_BATCH_DECODE;
    merge.q_dtype = merge.kv_dtype = merge.o_dtype = dtype;
    merge.head_dim = head_dim;
    FI_TRY(fi_jit_spec_check(&merge));
    FI_TRY(fi_jit_get_kernel(&kernel, ctx, &merge));
    if (!kernel->functions[1]) FI_FAIL(FI_ELOAD, "merge_states: the module has no merge kernel");
    memset(&p, 0, sizeof p);
    p.v = a->v;
    p.s = a->lse;
    p.v_out = a->v_out;
    p.s_out = a->lse_out;
    p.v_stride_seq = a->v_stride_n;
    p.v_stride_state = a->v_stride_state;
    p.v_stride_h = a->v_stride_h;
    p.s_stride_seq = a->lse_stride_n;
    p.s_stride_state = a->lse_stride_state;
    p.o_stride_seq = a->v_out_stride_n;
    p.o_stride_h = a->v_out_stride_h;
    p.seq_len = a->seq_len;
    p.num_states = a->num_states;
    p.num_heads = a->num_heads;
    FI_TRY(fi__cuda_launch(kernel->functions[1], (unsigned)(a->seq_len * a->num_heads), 1,
                           kernel->merge_block_dim, 0, (CUstream)stream, &p, "merge_states"));
out:
    return rc;
}
