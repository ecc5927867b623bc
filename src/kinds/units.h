/*
 * Every kind unit, for the registry (kinds/registry.c). A new kind adds its
 * descriptor here and to the registry's table.
 */
#ifndef FI_KINDS_UNITS_H
#define FI_KINDS_UNITS_H

#include "kinds/kind.h"

extern const fi_kind_info fi__kind_decode;              /* kinds/decode.c */
extern const fi_kind_info fi__kind_batch_decode;        /* kinds/decode.c */
extern const fi_kind_info fi__kind_prefill;             /* kinds/prefill.c */
extern const fi_kind_info fi__kind_batch_prefill_ragged; /* kinds/prefill.c */
extern const fi_kind_info fi__kind_batch_prefill_paged;  /* kinds/prefill.c */
extern const fi_kind_info fi__kind_mla_decode;          /* kinds/mla_decode.c */

#endif
