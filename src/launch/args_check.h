/*
 * Checks of launch arguments that the kernel kinds share (decode, batch
 * decode, the prefill kinds): device pointers and strides. Each returns 0 or
 * FI_EINVALID with a message that begins with `who`, the caller's kind name
 * ("decode", "batch_decode", ...), and names the argument.
 */
#ifndef FI_ARGS_CHECK_H
#define FI_ARGS_CHECK_H

#include <stdint.h>

/* A device pointer: not NULL and `align`-byte aligned. */
int fi__check_ptr(const char *who, const char *name, const void *p, int align);
/* A stride in elements of `elem_bytes` bytes: >= 0 and a multiple of 16
 * bytes, so that every row starts 16-byte aligned. used 0: the kernel never
 * steps by it (one row or head), anything passes. */
int fi__check_stride(const char *who, const char *name, int64_t stride, int used, int elem_bytes);
/* A K/V stride whose byte offsets (stride * rows * elem_bytes) do not fit the
 * kernels' 32-bit offsets is refused (rows 0: the stride is not used; rows > 1
 * are a page's rows, named page_size in the message). */
int fi__check_offset32(const char *who, const char *name, int64_t stride, int64_t rows,
                       int elem_bytes);

#endif
