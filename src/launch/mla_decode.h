/* The absorbed MLA decode kind's pieces that the kind table (core/kinds.c)
 * and the tests reach: its limits, arch check and launch shape, and the
 * plan's work list. The kind itself is src/launch/mla_decode.c. */
#ifndef FI_MLA_DECODE_H
#define FI_MLA_DECODE_H

#include "core/kinds.h"
#include "fijit_mla.h"

/* Limits of the spec: q = o fp16/bf16, kv = q or fp8_e4m3, hd 512, mask
 * none, pos none; the message names the field and the supported values. */
int fi__mla_decode_check(const fi_jit_spec *spec);
/* The arch has mma.sync and the kernel's shared memory (sm_80, sm_87,
 * sm_90(a), sm_100, sm_103). */
int fi__mla_decode_check_arch(const fi_jit_spec *spec, const char *arch);
void fi__mla_decode_launch_shape(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out);
/* Bytes of a ckv / kpe element: 1 for fp8, else 2. */
int fi__mla_decode_kv_bytes(const fi_jit_spec *spec);

/* The work list of a plan (tests): `*out` points into the plan. */
struct fi_mla_decode_work;
int fi__mla_decode_plan_work(const fi_batch_mla_decode_plan *plan,
                             const struct fi_mla_decode_work **out, int *count);

#endif
