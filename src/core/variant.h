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
 * Registered variants are immutable records in a list that readers walk
 * without locks; replacing a name pushes a newer record in front.
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
/* fi_jit_variant_register with messages naming `origin` (the CLI registers
 * the bytes of --variant-file FILE from memory and names FILE). */
int fi__jit_variant_register_as(fi_jit_ctx *ctx, const char *name, const char *source,
                                unsigned flags, const char *origin);
void fi__variant_free(fi_variant *v);

/* Check the values a launch gives for `v`'s declared parameters (`v` NULL:
 * the built-in variant, which declares none) and pack them in the layout of
 * fijit_cfg::VariantParams into `out` (FI_VARIANT_PARAM_WORDS words, zeroed
 * first). Every declared parameter exactly once, by name, with its declared
 * type; typed pointers aligned to their element. `who` prefixes errors. */
int fi__variant_pack(const fi_variant *v, const char *who, const fi_variant_arg *args, int count,
                     unsigned long long *out);

/* The translation unit `spec` expands to on `arch` (NULL: the context's),
 * byte for byte what the key hashes and NVRTC compiles (ptx 0), or the PTX
 * NVRTC makes of it for the virtual arch (ptx 1, compiled now, not cached).
 * `*out` (fi__free) is NUL-terminated; `*out_size` excludes the NUL. For
 * `fijit explain --source / --ptx`. */
int fi__jit_unit(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *arch, int ptx, char **out,
                 size_t *out_size);

/* fi__variant_pack for the variant `spec` names in `ctx` (launch code). */
int fi__jit_variant_pack(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *who,
                         const fi_variant_arg *args, int count, unsigned long long *out);

/* Rewrite an NVRTC log for a failed variant compile: "<name>.cuh(N)" becomes
 * "<origin>(N)", and such lines are followed by the snippet's line N.
 * `*out` is fi__free'd. */
int fi__variant_annotate_log(const fi_variant *v, const char *log, char **out);

#endif
