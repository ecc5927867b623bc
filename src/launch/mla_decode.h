/* What the tests reach of the MLA decode launch code (src/launch/mla_decode.c):
 * a plan's work list. */
#ifndef FI_MLA_DECODE_H
#define FI_MLA_DECODE_H

#include "fijit_mla.h"

/* The work list of a plan (tests): `*out` points into the plan. */
struct fi_mla_decode_work;
int fi__mla_decode_plan_work(const fi_batch_mla_decode_plan *plan,
                             const struct fi_mla_decode_work **out, int *count);

#endif
