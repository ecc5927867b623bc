/*
 * User attention variants: CUDA C++ snippets registered under a name and
 * compiled into the kernels in place of fijit::DefaultVariant.
 *
 * A snippet defines `struct Variant : fijit::DefaultVariant { ... };` and may
 * declare extra launch parameters with directive lines of its own:
 *     //! param float sigmoid_scale
 *     //! param const float* sink_logits
 * (types: float, int, const float*, const int*, float*, int*). fijit lays the
 * parameters out in declaration order (natural alignment) as
 * fijit_cfg::VariantParams and validates launch arguments against it.
 *
 * A context keeps its registered variants in a registry (core/registry.h).
 */
#ifndef FI_VARIANT_H
#define FI_VARIANT_H

#include <stddef.h>
#include <stdint.h>

#include "fijit.h"
#include "fijit_cache.h" /* FI_VARIANT_MAX_SOURCE */

#define FI_VARIANT_MAX_PARAMS 16

typedef enum fi_variant_param_type {
    FI_VPARAM_FLOAT = FI_VARG_FLOAT, /* equal to the public fi_variant_arg_type */
    FI_VPARAM_INT = FI_VARG_INT,
    FI_VPARAM_PTR = FI_VARG_PTR, /* a device pointer */
} fi_variant_param_type;

typedef struct fi_variant_param {
    char name[32];
    char c_type[24];  /* as written in the generated struct: "const float*" */
    fi_variant_param_type type;
    unsigned offset, size;
} fi_variant_param;

typedef struct fi_variant {
    struct fi_variant *next;
    char name[64];
    char *source;        /* the snippet as given */
    char *origin;        /* where messages point: the file as given, else "<name>.cuh"
                            (not part of any key: the #line in the unit names <name>.cuh) */
    uint64_t hash;       /* XXH3-64 of source: part of the in-memory key */
    int param_count;
    fi_variant_param params[FI_VARIANT_MAX_PARAMS];
    unsigned params_bytes;
} fi_variant;

/* Check and parse a snippet: name rules, size, directive lines, balanced
 * braces/brackets/parentheses outside comments and literals (so a snippet
 * cannot close the namespace it is placed in). Errors name the snippet's
 * own file and line. */
int fi__variant_new(fi_variant **out, const char *name, const char *source);
/* The same, with messages naming `origin` (the file as the user gave it;
 * NULL: "<name>.cuh") instead of "<name>.cuh". */
int fi__variant_new_as(fi_variant **out, const char *name, const char *source, const char *origin);
void fi__variant_free(fi_variant *v);

/* Check the values a launch gives for `v`'s declared parameters (`v` NULL:
 * the built-in variant, which declares none) and pack them in the layout of
 * fijit_cfg::VariantParams into `out` (FI_VARIANT_PARAM_WORDS words, zeroed
 * first). Every declared parameter exactly once, by name, with its declared
 * type; typed pointers aligned to their element. `who` prefixes errors. */
int fi__variant_pack(const fi_variant *v, const char *who, const fi_variant_arg *args, int count,
                     unsigned long long *out);

/* Rewrite an NVRTC log for a failed variant compile: "<name>.cuh(N)" becomes
 * "<origin>(N)", and such lines are followed by the snippet's line N.
 * `*out` is fi__free'd. */
int fi__variant_annotate_log(const fi_variant *v, const char *log, char **out);

#endif
