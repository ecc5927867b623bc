/*
 * The registry of kernel kinds, the one place that lists them: spec strings,
 * messages and the CLI take a kind's name from here. Each kind is a unit in
 * src/kinds/ (kinds/kind.h says what a unit holds); this registry only
 * finds units by value or name and walks the tuple space they accept.
 */
#ifndef FI_KINDS_H
#define FI_KINDS_H

#include "kinds/kind.h"

/* NULL when the kind is unknown. */
const fi_kind_info *fi__kind_info(fi_kernel_kind kind);

/* The kind's name in spec strings ("batch_decode"); NULL when unknown. */
const char *fi__kind_name(int kind);

/* `*out` = the kind `text` names; else FI_EINVALID listing the kinds. */
int fi__kind_parse(int *out, const char *text);

/* Number of non-NULL entries. */
int fi__kind_entry_count(const fi_kind_info *kind);

#endif
