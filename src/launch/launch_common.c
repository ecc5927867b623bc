/*
 * Launch-argument checks and defaults shared by the kernel kinds (see
 * launch_common.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "launch/launch_common.h"
#include "common/error.h"
#include "kinds/spec.h"

int fi__check_kind(const char *who, const fi_jit_spec *spec, fi_kernel_kind kind,
                   const char *kind_name)
{
    int rc = fi_jit_spec_check(spec);
    if (rc == 0 && spec->kind != kind)
        rc = fi__error(FI_EINVALID, "%s: spec.kind is %d, expected %s", who, (int)spec->kind,
                       kind_name);
    return rc;
}

int fi__check_version(const char *who, const char *name, const void *args, unsigned version,
                      unsigned oldest, unsigned newest)
{
    if (!args) return fi__error(FI_EINVALID, "%s: %s is NULL", who, name);
    if (version >= oldest && version <= newest) return 0;
    if (version >= 1 && version < oldest)
        return fi__error(FI_EINVALID, "%s: %s.version is %u, this library expects %u (its "
                         "layout changed in fijit 0.2: rebuild against this library's headers)",
                         who, name, version, newest);
    if (oldest == newest)
        return fi__error(FI_EINVALID, "%s: %s.version is %u, this library expects %u (initialise "
                         "with its *_INIT macro)", who, name, version, newest);
    return fi__error(FI_EINVALID, "%s: %s.version is %u, this library expects %u to %u "
                     "(initialise with its *_INIT macro)", who, name, version, oldest, newest);
}

int fi__check_ptr(const char *who, const char *name, const void *p, int align)
{
    if (!p) return fi__error(FI_EINVALID, "%s: %s is NULL", who, name);
    return fi__check_opt_ptr(who, name, p, align);
}

int fi__check_opt_ptr(const char *who, const char *name, const void *p, int align)
{
    if (p && (uintptr_t)p % (uintptr_t)align != 0)
        return fi__error(FI_EINVALID, "%s: %s (%p) is not %d-byte aligned", who, name, p, align);
    return 0;
}

int fi__check_tensors(const char *who, const void *q, const void *k, const void *v,
                      const void *o, const float *lse, int kv_read)
{
    int rc = 0;
    FI_TRY(fi__check_ptr(who, "q", q, 16));
    FI_TRY(fi__check_ptr(who, "o", o, 16));
    if (kv_read) {
        FI_TRY(fi__check_ptr(who, "k", k, 16));
        FI_TRY(fi__check_ptr(who, "v", v, 16));
    }
    FI_TRY(fi__check_opt_ptr(who, "lse", lse, 4));
out:
    return rc;
}

int fi__check_stride(const char *who, const char *name, int64_t stride, int used, int elem_bytes)
{
    if (!used) return 0;
    if (stride < 0)
        return fi__error(FI_EINVALID, "%s: %s is %lld; strides must be >= 0", who, name,
                         (long long)stride);
    if (stride % (16 / elem_bytes) != 0)
        return fi__error(FI_EINVALID,
                         "%s: %s is %lld elements; it must be a multiple of %d so that every row "
                         "starts 16-byte aligned",
                         who, name, (long long)stride, 16 / elem_bytes);
    return 0;
}

int fi__check_offset32(const char *who, const char *name, int64_t stride, int64_t rows,
                       int elem_bytes)
{
    /* Divided rather than multiplied: the product of a bad stride overflows. */
    if (stride > 0 && rows > 0 && stride > INT32_MAX / elem_bytes / rows)
        return fi__error(FI_EINVALID,
                         "%s: %s is %lld elements; the kernel addresses K and V with 32-bit byte "
                         "offsets, so %s%s times %d bytes must stay below 2 GiB",
                         who, name, (long long)stride, name, rows > 1 ? " times page_size" : "",
                         elem_bytes);
    return 0;
}

int fi__check_heads(const char *who, int num_qo_heads, int num_kv_heads)
{
    if (num_qo_heads <= 0 || num_kv_heads <= 0)
        return fi__error(FI_EINVALID, "%s: num_qo_heads (%d) and num_kv_heads (%d) must be > 0",
                         who, num_qo_heads, num_kv_heads);
    if (num_qo_heads % num_kv_heads != 0)
        return fi__error(FI_EINVALID,
                         "%s: num_qo_heads (%d) must be a multiple of num_kv_heads (%d) for GQA",
                         who, num_qo_heads, num_kv_heads);
    return 0;
}

int fi__check_window(const char *who, const fi_jit_spec *spec, int window_left)
{
    if (spec->mask == FI_MASK_WINDOW && window_left < 0)
        return fi__error(FI_EINVALID, "%s: window_left is %d with mask=window; give the window "
                         "(>= 0 keys before the query), or use another mask", who, window_left);
    return 0;
}

int fi__check_scalars(const char *who, const fi_jit_spec *spec, float sm_scale,
                      float logits_soft_cap, float rope_scale, float rope_theta,
                      const float *alibi_slopes)
{
    if (!isfinite(sm_scale)) return fi__error(FI_EINVALID, "%s: sm_scale is not finite", who);
    if (spec->soft_cap && !(logits_soft_cap > 0.f && isfinite(logits_soft_cap)))
        return fi__error(FI_EINVALID, "%s: logits_soft_cap is %g; the spec asks for "
                         "soft-capping, which needs a finite cap > 0", who,
                         (double)logits_soft_cap);
    if (spec->pos == FI_POS_ALIBI && !alibi_slopes)
        return fi__error(FI_EINVALID, "%s: alibi_slopes is NULL with pos=alibi", who);
    if (spec->pos == FI_POS_ALIBI && (uintptr_t)alibi_slopes % sizeof(float) != 0)
        return fi__error(FI_EINVALID, "%s: alibi_slopes is not 4-byte aligned", who);
    if (spec->pos == FI_POS_ROPE_LLAMA &&
        (!(rope_scale >= 0.f && isfinite(rope_scale)) || !(rope_theta >= 0.f && isfinite(rope_theta))))
        return fi__error(FI_EINVALID, "%s: rope_scale (%g) and rope_theta (%g) must be >= 0 "
                         "(0: defaults 1 and 1e4)", who, (double)rope_scale, (double)rope_theta);
    return 0;
}

void fi__launch_keep_spec(fi_jit_spec *dst, char *buf, size_t size, const fi_jit_spec *spec)
{
    fi__spec_copy(dst, spec);
    if (spec->variant) {
        snprintf(buf, size, "%s", spec->variant);
        dst->variant = buf;
    }
}

float fi__launch_sm_scale(float sm_scale, int head_dim)
{
    return sm_scale != 0.f ? sm_scale : (float)(1.0 / sqrt((double)head_dim));
}

float fi__launch_fp8_scale(float scale) { return scale != 0.f ? scale : 1.f; }

float fi__launch_soft_cap(const fi_jit_spec *spec, float logits_soft_cap)
{
    return spec->soft_cap ? logits_soft_cap : 0.f;
}

int fi__launch_window(const fi_jit_spec *spec, int window_left)
{
    return spec->mask == FI_MASK_WINDOW ? window_left : -1;
}

size_t fi__align16(size_t bytes) { return (bytes + 15) / 16 * 16; }
