/* The table of implemented kernel kinds (see kinds.h). */
#include <stddef.h>

#include "kinds.h"

static const fi_kind_info kinds[] = {
    {FI_KIND_DECODE, "decode", "decode.cuh", "fi_decode_kernel", "fi_decode_merge_kernel",
     fi__decode_launch_shape},
};

const fi_kind_info *fi__kind_info(fi_kernel_kind kind)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == kind) return &kinds[i];
    return NULL;
}
