/*
 * What the launchers of every kernel kind share (decode, batch decode, the
 * prefill kinds, merge_states): checks of device pointers, strides and the
 * scalar arguments, the sm_scale default and the 16-byte alignment of
 * workspace parts. Each check returns 0 or FI_EINVALID with a message that
 * begins with `who`, the caller's kind name ("decode", "batch_decode", ...),
 * and names the argument. The kernels load rows with 16-byte vector copies,
 * hence the alignment rules.
 */
#ifndef FI_LAUNCH_COMMON_H
#define FI_LAUNCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "fijit.h"

/* The spec: valid (fi_jit_spec_check) and of kind `kind` (`kind_name` its
 * enum name, for the message). */
int fi__check_kind(const char *who, const fi_jit_spec *spec, fi_kernel_kind kind,
                   const char *kind_name);
/* A versioned args struct: `args` not NULL and its `version` (read by the
 * caller) from `oldest` to `newest`; versions below `oldest` had another
 * layout (the message says to rebuild). `name` names the struct ("args",
 * "plan args"). */
int fi__check_version(const char *who, const char *name, const void *args, unsigned version,
                      unsigned oldest, unsigned newest);
/* A device pointer: not NULL and `align`-byte aligned. */
int fi__check_ptr(const char *who, const char *name, const void *p, int align);
/* An optional device pointer (lse, rope_offsets): NULL, or `align`-byte aligned. */
int fi__check_opt_ptr(const char *who, const char *name, const void *p, int align);
/* The tensors every kind takes: q and o, and k and v where `kv_read` (some
 * key is read), device pointers 16-byte aligned; lse optional, 4-byte aligned. */
int fi__check_tensors(const char *who, const void *q, const void *k, const void *v,
                      const void *o, const float *lse, int kv_read);
/* A stride in elements of `elem_bytes` bytes: >= 0 and a multiple of 16
 * bytes, so that every row starts 16-byte aligned. used 0: the kernel never
 * steps by it (one row or head), anything passes. */
int fi__check_stride(const char *who, const char *name, int64_t stride, int used, int elem_bytes);
/* A K/V stride whose byte offsets (stride * rows * elem_bytes) do not fit the
 * kernels' 32-bit offsets is refused (rows 0: the stride is not used; rows > 1
 * are a page's rows, named page_size in the message). */
int fi__check_offset32(const char *who, const char *name, int64_t stride, int64_t rows,
                       int elem_bytes);
/* Head counts: both > 0, num_qo_heads a multiple of num_kv_heads (GQA). */
int fi__check_heads(const char *who, int num_qo_heads, int num_kv_heads);
/* window_left as the spec uses it: with FI_MASK_WINDOW it must be given
 * (>= 0; the *_INIT default -1 means none); other masks ignore it. */
int fi__check_window(const char *who, const fi_jit_spec *spec, int window_left);
/* The scalars every kind takes: sm_scale finite; logits_soft_cap finite and
 * > 0 when spec.soft_cap; alibi_slopes given and 4-byte aligned with ALiBi;
 * rope_scale and rope_theta finite and >= 0 with RoPE. */
int fi__check_scalars(const char *who, const fi_jit_spec *spec, float sm_scale,
                      float logits_soft_cap, float rope_scale, float rope_theta,
                      const float *alibi_slopes);

/* Copy `spec` into a plan, its variant name into `buf` (a plan outlives the
 * caller's string). */
void fi__launch_keep_spec(fi_jit_spec *dst, char *buf, size_t size, const fi_jit_spec *spec);
/* sm_scale as the kernels take it: 0 means 1/sqrt(head_dim). */
float fi__launch_sm_scale(float sm_scale, int head_dim);
/* An fp8 tensor's scale as the kernels take it (decode's KV, prefill's q, k
 * and v): 0 means 1. */
float fi__launch_fp8_scale(float scale);
/* logits_soft_cap as the kernels take it: 0 unless the spec caps. */
float fi__launch_soft_cap(const fi_jit_spec *spec, float logits_soft_cap);
/* window_left as the kernels take it: -1 unless the spec's mask is a window. */
int fi__launch_window(const fi_jit_spec *spec, int window_left);
/* `bytes` rounded up to whole 16-byte units: every part of a workspace
 * starts 16-byte aligned. */
size_t fi__align16(size_t bytes);

#endif
