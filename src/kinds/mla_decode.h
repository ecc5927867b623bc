/* What the MLA decode unit (kinds/mla_decode.c) shares with its launch code
 * (src/launch/mla_decode.c). */
#ifndef FI_KINDS_MLA_DECODE_H
#define FI_KINDS_MLA_DECODE_H

#include "fijit.h"

/* Bytes of a ckv / kpe element: 1 for fp8, else 2. */
int fi__mla_decode_kv_bytes(const fi_jit_spec *spec);

#endif
