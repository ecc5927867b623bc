/* Spec parsing, formatting, validation and the fixed-size form used as the
 * in-memory table key. The names in spec strings come from the kind table
 * (kinds/registry.h) and kinds/names.h. */
#ifndef FI_SPEC_H
#define FI_SPEC_H

#include <stdint.h>

#include "common/arch.h" /* fi__arch_check, for the users of specs */
#include "kinds/names.h" /* fi__dtype_name & co., for the users of specs */
#include "fijit.h"
#include "fijit_cache.h" /* FI_VARIANT_NAME_MAX */

/* A spec with no pointers: zero-padded so it can be hashed and compared as bytes. */
typedef struct fi_spec_key {
    int32_t kind, q_dtype, kv_dtype, o_dtype, head_dim, mask, pos, soft_cap;
    int32_t head_dim_vo; /* 0 when equal to head_dim */
    int32_t part;        /* 0: the tuple; p + 1: part p of its kernels (kind.h parts) */
    char variant[FI_VARIANT_NAME_MAX + 1]; /* "" for the built-in variant */
    uint64_t variant_hash;                 /* content of the registered snippet */
} fi_spec_key;

/* 1 if `spec` names a registered variant, 0 for the built-in one (NULL or
 * "default"). */
int fi__spec_has_variant(const fi_jit_spec *spec);

/* Validate `spec` (fi_jit_spec_check) and fill its key form. */
int fi__spec_key(fi_spec_key *out, const fi_jit_spec *spec);

/* `spec` (version 1 or 2, checked) as a spec of this version: a version 1
 * struct is read only as far as it reaches; head_dim_vo equal to head_dim
 * becomes 0. */
void fi__spec_copy(fi_jit_spec *out, const fi_jit_spec *spec);

/* The head dim of v and o: head_dim_vo, or head_dim where that is 0 or the
 * struct predates it. */
int fi__spec_head_dim_vo(const fi_jit_spec *spec);

/* 1 if `name` is a valid variant name: 1..63 of [A-Za-z0-9_-]. */
int fi__variant_name_ok(const char *name);

/* 1 when a cubin built for `arch` loads on a device whose own arch is
 * `device` (both checked): the same major version, a minor no higher, and an
 * arch-specific target ("sm_90a") only on its own device. */
int fi__arch_runs_on(const char *arch, const char *device);

#endif
