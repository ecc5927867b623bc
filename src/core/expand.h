/*
 * Template expansion: one spec becomes one CUDA C++ translation unit (a
 * generated prelude of constexpr values and type aliases, then #includes of
 * real template files) plus the exact set of headers it includes, handed to
 * NVRTC from memory.
 */
#ifndef FI_EXPAND_H
#define FI_EXPAND_H

#include <stddef.h>

#include "fijit.h"

#define FI_TU_MAX_HEADERS 32

typedef struct fi_translation_unit {
    char *text;                       /* the generated source (fi__free) */
    char name[96];                    /* its name in diagnostics: "decode_hd128.cu" */
    int header_count;                 /* sorted by name */
    char *header_names[FI_TU_MAX_HEADERS];
    char *header_texts[FI_TU_MAX_HEADERS];
} fi_translation_unit;

struct fi_variant;

/* Expand `spec` (already checked). `variant` is the registered user variant
 * the spec names, or NULL for the built-in one. */
int fi__expand(fi_translation_unit *out, const fi_jit_spec *spec, const struct fi_variant *variant);
/* fi__expand for one part of the tuple's kernels (kinds/kind.h parts): the
 * prelude defines FIJIT_ENTRY_MASK as `entry_mask`, and the kind's template
 * builds the entries outside it as empty stubs. 0: every kernel, the text
 * of fi__expand. */
int fi__expand_part(fi_translation_unit *out, const fi_jit_spec *spec,
                    const struct fi_variant *variant, unsigned entry_mask);
void fi__tu_free(fi_translation_unit *tu);

/* Longest template name: a path relative to templates/, "prefill/kernels.cuh". */
#define FI_TEMPLATE_NAME_MAX 95

/* Source of one template file, `name` a path relative to templates/ (see
 * fi__template_name_ok): from $FIJIT_TEMPLATE_DIR/name when the variable is
 * set (for development), else the copy embedded at build time. `*out` is
 * fi__free'd. A bad name is FI_EINVALID, a missing template FI_ENOTFOUND. */
int fi__template_load(const char *name, char **out);

/* 1 when `name` is an acceptable template name: a relative path inside
 * templates/ (no '..', '.' or empty components, no leading '/'), else 0. */
int fi__template_name_ok(const char *name);

#endif
