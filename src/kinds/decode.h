/* What the decode units (kinds/decode.c) share with the decode launch code. */
#ifndef FI_KINDS_DECODE_H
#define FI_KINDS_DECODE_H

#include "fijit.h"

/* Bytes per KV element of the spec: 1 for fp8, else 2. */
int fi__decode_kv_bytes(const fi_jit_spec *spec);

#endif
