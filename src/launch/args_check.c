/*
 * Launch-argument checks shared by the kernel kinds (see args_check.h). The
 * kernels load rows with 16-byte vector copies, hence the alignment rules.
 */
#include <stdint.h>

#include "launch/args_check.h"
#include "common/error.h"

int fi__check_ptr(const char *who, const char *name, const void *p, int align)
{
    if (!p) return fi__error(FI_EINVALID, "%s: %s is NULL", who, name);
    if ((uintptr_t)p % (uintptr_t)align != 0)
        return fi__error(FI_EINVALID, "%s: %s (%p) is not %d-byte aligned", who, name, p, align);
    return 0;
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
