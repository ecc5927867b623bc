/*
 * A kernel kind as one unit. Each kind (src/kinds/<kind>.c) describes itself
 * here: its name in spec strings, its template and kernels, the tuples it
 * accepts, the launch shape of its main kernel and, optionally, what it needs
 * of an arch. The registry (kinds/registry.c) lists the units and nothing else;
 * adding a kind is one unit, one template folder and its launch code, with
 * no edit to spec parsing, the key, expansion, the store or the CLI.
 *
 * A unit depends on its templates' parameter header (shared with the
 * kernels), common/ and this folder's spec grammar (spec.h, names.h); never on
 * src/launch/, so that the launch code builds on the unit and not the other
 * way round.
 */
#ifndef FI_KINDS_KIND_H
#define FI_KINDS_KIND_H

#include "fijit.h"

typedef struct fi_launch_shape {
    unsigned block_dim[3];
    unsigned merge_block_dim[3]; /* of the merge kernel, where the kind has one */
    unsigned smem_bytes;         /* dynamic shared memory of the main kernel */
    unsigned param_bytes;        /* sizeof the main kernel's parameter struct */
} fi_launch_shape;

/* Longest list of head dims a unit offers (see head_dims). */
#define FI_KIND_MAX_HEAD_DIMS 8
/* Most modules one tuple's kernels are split into (see parts). */
#define FI_KIND_MAX_PARTS 4

typedef struct fi_kind_info {
    fi_kernel_kind kind;
    const char *name;          /* in spec strings: "decode" */
    const char *template_name; /* file in templates/: "decode/decode.cuh" */
    /* extern "C" names of the module's kernels, [0] the main one, NULL-padded. */
    const char *entries[FI_JIT_MAX_FUNCTIONS];
    /* Every head_dim `check` may accept, ascending, 0-terminated. The accepted
     * tuple space (fi_jit_spec_enumerate) is the product of these with every
     * dtype, mask, pos encoding and soft-cap, filtered by `check`: the limits
     * are written once, in `check`. */
    int head_dims[FI_KIND_MAX_HEAD_DIMS];
    /* The head dim of v and o that goes with each of head_dims (0: head_dim
     * itself; MLA's prefill: 128 with 192). A spec's (head_dim, head_dim_vo)
     * must be one of these pairs. */
    int head_dims_vo[FI_KIND_MAX_HEAD_DIMS];
    /* Limits of this kind beyond the enum checks; the message names the field
     * and the supported values. */
    int (*check)(const fi_jit_spec *spec);
    /* Fill the launch shape a caller needs for this spec compiled for `arch`. */
    void (*launch_shape)(const fi_jit_spec *spec, const char *arch, fi_launch_shape *out);
    /* Optional (NULL: every arch): limits of this spec on `arch`, checked
     * before anything is expanded or compiled for it. */
    int (*check_arch)(const fi_jit_spec *spec, const char *arch);
    /* Optional (NULL: one module): the kernels of `spec` on `arch` split into
     * modules that are compiled side by side, because one NVRTC program
     * compiles its kernels one after another. Fills out[p] with part p's
     * entries (bit i: entries[i] is built in full there and an empty stub in
     * the others, so that every part has every symbol; each entry in exactly
     * one part) and returns the number of parts, 1 for no split. */
    int (*parts)(const fi_jit_spec *spec, const char *arch, unsigned out[FI_KIND_MAX_PARTS]);
} fi_kind_info;

/* ---- checks several units share (kinds/checks.c) ---------------------------- */

/* q, kv and o all fp16 or all bf16; FI_EUNSUPPORTED naming the field otherwise.
 * `kind` is the kind's name for the message. */
int fi__check_same_16bit_dtypes(const fi_jit_spec *spec, const char *kind);

/* (head_dim, head_dim_vo) one of the unit's pairs (head_dims, head_dims_vo);
 * FI_EUNSUPPORTED listing them otherwise ("64, 128, 192/128, 256"). `spec`
 * is as fi_jit_spec_check hands it to `check`: head_dim_vo 0 where equal. */
int fi__check_head_dim(const fi_jit_spec *spec, const fi_kind_info *unit);

#endif
