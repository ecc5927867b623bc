/*
 * The table of kernel kinds, the one place that names them: spec strings,
 * messages and the CLI take a kind's name from here. Adding a kind means one
 * template file, one entry here (kinds.c) and its launch code and tests:
 * nothing else in the runtime changes.
 */
#ifndef FI_KINDS_H
#define FI_KINDS_H

#include "fijit.h"

typedef struct fi_launch_shape {
    unsigned block_dim[3];
    unsigned merge_block_dim[3];
    unsigned smem_bytes;   /* dynamic shared memory of the main kernel */
    unsigned param_bytes;  /* sizeof the main kernel's parameter struct */
} fi_launch_shape;

typedef struct fi_kind_info {
    fi_kernel_kind kind;
    const char *name;          /* in spec strings: "decode" */
    const char *template_name; /* file in templates/: "decode/decode.cuh" */
    /* extern "C" names of the module's kernels, [0] the main one, NULL-padded. */
    const char *entries[FI_JIT_MAX_FUNCTIONS];
    /* Limits of this kind beyond the enum checks; the message names the field
     * and the supported values. */
    int (*check)(const fi_jit_spec *spec);
    /* Fill the launch shape a caller needs for this spec compiled for `arch`. */
    void (*launch_shape)(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out);
    /* Optional (NULL: every arch): limits of this spec on `arch`, checked
     * before anything is expanded or compiled for it. */
    int (*check_arch)(const fi_jit_spec *spec, const char *arch);
    /* head_dim of a spec string without hd= (0: FI_JIT_SPEC_INIT's): a kind
     * with one width (mla_decode: 512) needs no hd= to be named. */
    int default_head_dim;
} fi_kind_info;

/* NULL when the kind is unknown. */
const fi_kind_info *fi__kind_info(fi_kernel_kind kind);

/* The kind's name in spec strings ("batch_decode"); NULL when unknown. */
const char *fi__kind_name(int kind);

/* `*out` = the kind `text` names; else FI_EINVALID listing the kinds. */
int fi__kind_parse(int *out, const char *text);

/* q, kv and o all fp16 or all bf16; FI_EUNSUPPORTED naming the field otherwise.
 * `kind` is the kind's name for the message. */
int fi__check_same_16bit_dtypes(const fi_jit_spec *spec, const char *kind);

/* Number of non-NULL entries. */
int fi__kind_entry_count(const fi_kind_info *kind);

/* Provided by src/launch/decode.c: limits of the decode kinds (single and batch:
 * q = o fp16/bf16, kv the same or fp8; hd 64/128/256; mask none/window). */
void fi__decode_launch_shape(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out);
/* Provided by src/launch/batch_decode.c. */
void fi__batch_decode_launch_shape(const fi_jit_spec *spec, const char *arch,
                                   fi_launch_shape *out);

/* Provided by src/launch/prefill.c (all three prefill kinds). */
int fi__prefill_check(const fi_jit_spec *spec);
void fi__prefill_launch_shape(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out);
int fi__prefill_check_arch(const fi_jit_spec *spec, const char *arch);

#endif
