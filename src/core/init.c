/*
 * fi_<struct>_init: the defaults of each versioned public struct, for
 * bindings that cannot expand the *_INIT macros (ctypes, cffi, other
 * languages). The defaults are the macros themselves, expanded here once, so
 * the header stays the one place they are written.
 *
 * A caller built against an older header has a shorter struct: each struct's
 * row says how many bytes a struct of each version has, and init writes no
 * more than that. A size of 0 marks a version this library refuses (its
 * layout changed), as the functions that take the struct refuse it.
 */
#include <stddef.h>
#include <string.h>

#include "common/error.h"
#include "fijit.h"
#include "fijit_cache.h"

enum { MAX_VERSION = 4 };

typedef struct versioned_struct {
    const char *name;                /* "fi_decode_args" */
    const void *defaults;            /* the *_INIT value, at the newest version */
    size_t size[MAX_VERSION + 1];    /* bytes of each version; 0: not accepted */
} versioned_struct;

static int init_struct(void *out, unsigned version, const versioned_struct *s)
{
    unsigned newest = 0;
    for (unsigned v = 1; v <= MAX_VERSION; v++)
        if (s->size[v]) newest = v;
    if (!out) return fi__error(FI_EINVALID, "%s_init: out is NULL", s->name);
    if (version > MAX_VERSION || !s->size[version])
        return fi__error(FI_EINVALID, "%s_init: version %u is not one this library accepts "
                         "(the newest is %u)", s->name, version, newest);
    memcpy(out, s->defaults, s->size[version]);
    memcpy(out, &version, sizeof version); /* every versioned struct begins with it */
    return 0;
}

/* One versioned struct: its *_INIT, its *_VERSION (which must be the last
 * size given: a version bump in the header without a row here fails to
 * build) and the bytes of versions 1, 2, ... */
#define VERSIONED(type, init_macro, newest, ...)                               \
    _Static_assert(sizeof((size_t[]){0, __VA_ARGS__}) / sizeof(size_t) ==      \
                       (newest) + 1 && (newest) <= MAX_VERSION,                \
                   #type ": one size per version up to " #newest);             \
    static const type type##_defaults = init_macro;                            \
    static const versioned_struct type##_row = {#type, &type##_defaults,      \
                                                {0, __VA_ARGS__}};             \
    int type##_init(type *out, unsigned version)                               \
    {                                                                          \
        return init_struct(out, version, &type##_row);                         \
    }

VERSIONED(fi_jit_spec, FI_JIT_SPEC_INIT, FI_JIT_SPEC_VERSION, sizeof(fi_jit_spec))
VERSIONED(fi_jit_options, FI_JIT_OPTIONS_INIT, FI_JIT_OPTIONS_VERSION,
          offsetof(fi_jit_options, remote), offsetof(fi_jit_options, log_fn),
          sizeof(fi_jit_options))
VERSIONED(fi_jit_stats, FI_JIT_STATS_INIT, FI_JIT_STATS_VERSION,
          offsetof(fi_jit_stats, remote_hits), sizeof(fi_jit_stats))
VERSIONED(fi_decode_args, FI_DECODE_ARGS_INIT, FI_DECODE_ARGS_VERSION,
          offsetof(fi_decode_args, k_scale), offsetof(fi_decode_args, variant_args),
          offsetof(fi_decode_args, sm_count), sizeof(fi_decode_args))
VERSIONED(fi_batch_decode_plan_args, FI_BATCH_DECODE_PLAN_ARGS_INIT,
          FI_BATCH_DECODE_PLAN_ARGS_VERSION, sizeof(fi_batch_decode_plan_args))
/* Versions 1 and 2 had another layout and are refused. */
VERSIONED(fi_batch_decode_args, FI_BATCH_DECODE_ARGS_INIT, FI_BATCH_DECODE_ARGS_VERSION,
          0, 0, sizeof(fi_batch_decode_args))
VERSIONED(fi_merge_states_args, FI_MERGE_STATES_ARGS_INIT, FI_MERGE_STATES_ARGS_VERSION,
          sizeof(fi_merge_states_args))
VERSIONED(fi_prefill_args, FI_PREFILL_ARGS_INIT, FI_PREFILL_ARGS_VERSION,
          offsetof(fi_prefill_args, variant_args), offsetof(fi_prefill_args, workspace),
          offsetof(fi_prefill_args, q_scale), sizeof(fi_prefill_args))
/* Version 1 held window_left in the run arguments: refused. */
VERSIONED(fi_batch_prefill_plan_args, FI_BATCH_PREFILL_PLAN_ARGS_INIT,
          FI_BATCH_PREFILL_PLAN_ARGS_VERSION, 0, sizeof(fi_batch_prefill_plan_args))
/* Versions 1 and 2 are refused; 3 ends before rope_offsets. */
VERSIONED(fi_batch_prefill_args, FI_BATCH_PREFILL_ARGS_INIT, FI_BATCH_PREFILL_ARGS_VERSION,
          0, 0, offsetof(fi_batch_prefill_args, rope_offsets), sizeof(fi_batch_prefill_args))
VERSIONED(fi_settings, FI_SETTINGS_INIT, FI_SETTINGS_VERSION, sizeof(fi_settings))
VERSIONED(fi_batch_mla_decode_plan_args, FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT,
          FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION, sizeof(fi_batch_mla_decode_plan_args))
VERSIONED(fi_batch_mla_decode_args, FI_BATCH_MLA_DECODE_ARGS_INIT,
          FI_BATCH_MLA_DECODE_ARGS_VERSION, sizeof(fi_batch_mla_decode_args))
