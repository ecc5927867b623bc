/*
 * Covering subsets of a kernel tuple space, for the compile tests.
 *
 * A translation unit is specialised by a few fields (kind, q/kv/o dtype,
 * head_dim, mask, pos encoding, soft-cap) and compiled for one arch. Each
 * value of a field selects template code (a trait specialisation, an
 * `if constexpr` branch), and two fields together select more (the paged
 * kind's producer at head_dim 256, RoPE inside a custom mask, ...). Compiling
 * every accepted tuple for every arch takes hours on a CI machine, so the
 * compile tests take, per arch, a subset chosen by this rule:
 *
 *   COVER_PAIRS (`make test`): every pair of values of two fields that some
 *     accepted tuple has is in at least one chosen tuple (a pairwise covering
 *     array), so every value of every field is compiled with every kind, every
 *     head_dim, every mask, ... on every arch the test names;
 *   COVER_VALUES (FIJIT_TEST_QUICK=1, the sanitizer runs): every value of
 *     every field at least once; always a prefix of the COVER_PAIRS choice;
 *   COVER_ALL (FIJIT_TEST_SWEEP=1, `make test-sweep`): every tuple.
 *
 * The choice is greedy and deterministic (AETG-style): again and again the
 * first candidate that adds the most values not yet covered, then the most
 * pairs not yet covered. The candidates are the accepted tuples only, so the
 * space's constraints (fp8 prefill only with hd 128, ...) need no special case.
 */
#ifndef FI_TEST_COVER_H
#define FI_TEST_COVER_H

#include "fijit.h"

typedef enum cover_strength {
    COVER_VALUES = 1, /* each value of each field */
    COVER_PAIRS = 2,  /* each pair of values of two fields */
    COVER_ALL = 3     /* every candidate */
} cover_strength;

/* At most this many fields per row and distinct values per field. */
#define COVER_MAX_FIELDS 16
#define COVER_MAX_VALUES 64

/* The strength this run asks for: COVER_ALL with $FIJIT_TEST_SWEEP set,
 * COVER_VALUES with $FIJIT_TEST_QUICK set, else COVER_PAIRS. */
cover_strength cover_strength_of_run(void);

/* Choose from the n candidate rows (rows[i * fields + f] is field f's value
 * in row i, any int) a subset covering `strength`: writes the chosen rows'
 * indices, in the order chosen, to out[0..) (room for n) and returns their
 * count, or -1 when fields or the distinct values of a field exceed the
 * limits above. */
int cover_pick(int *out, const int *rows, int n, int fields, cover_strength strength);

/* Keep in specs[0..n) the subset cover_pick chooses at `strength`, in the
 * order chosen; returns its count, or -1. The fields are the words of the
 * specs' canonical text (fi_jit_spec_format: the kind, then each
 * "key=value"), so every field the library writes is covered, one it adds
 * later included; a field some texts lack (a variant) is a value of its own. */
int cover_specs(fi_jit_spec *specs, int n, cover_strength strength);

/* The compile test of a tuple space on one arch: checks that every
 * candidate in specs[0..n) is accepted (fi_jit_spec_check), drops those the
 * arch refuses (fi_jit_explain says FI_EUNSUPPORTED before expanding: fp8
 * prefill off sm_90a, ...), keeps the cover of this run's strength, and
 * compiles it on a fresh context for `arch` (check_prewarm_all). Prints
 * "  LABEL ARCH: K of N tuples, ..." with the mean NVRTC time. Returns K, or
 * -1 with what failed in `err`. specs[] is reordered. */
int cover_compile(const char *label, const char *arch, fi_jit_spec *specs, int n, char *err,
                  size_t err_size);

#endif
