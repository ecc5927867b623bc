/*
 * Tests of the covering rule the compile tests choose their tuples by
 * (tests/cover.c): on full and constrained spaces, every value and every
 * pair of values that a candidate has is in a chosen row; COVER_VALUES is a
 * prefix of COVER_PAIRS; COVER_ALL keeps every row; the choice is far
 * smaller than the space, and the same on every run.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cover.h"

/* Every pair (field a = x, field b = y) present in rows[0..n) is present
 * in one of the picked rows (and, for pairs = 0, every single value). */
static int covers(const int *rows, int n, int fields, const int *picked, int count, int pairs)
{
    for (int i = 0; i < n; i++)
        for (int a = 0; a < fields; a++)
            for (int b = pairs ? a + 1 : a; b < (pairs ? fields : a + 1); b++) {
                int found = 0;
                for (int k = 0; k < count && !found; k++) {
                    const int *r = &rows[picked[k] * fields];
                    found = r[a] == rows[i * fields + a] && r[b] == rows[i * fields + b];
                }
                if (!found) return 0;
            }
    return 1;
}

/* The full product of fields with `sizes` values each (values 10 * f + v). */
static int product(int *rows, const int *sizes, int fields)
{
    int n = 1;
    for (int f = 0; f < fields; f++) n *= sizes[f];
    for (int i = 0; i < n; i++)
        for (int f = 0, rest = i; f < fields; rest /= sizes[f], f++)
            rows[i * fields + f] = 10 * f + rest % sizes[f];
    return n;
}

TEST(cover_pairs_holds_every_pair_of_a_full_product)
{
    static const int sizes[] = {3, 2, 3, 4, 3, 2}; /* the prefill kinds' space */
    static int rows[432 * 6];
    int picked[432];
    const int n = product(rows, sizes, 6);
    CHECK(n == 432);
    const int count = cover_pick(picked, rows, n, 6, COVER_PAIRS);
    CHECK(count > 0);
    CHECK(covers(rows, n, 6, picked, count, 1));
    /* At least 4 masks x 3 head dims; a greedy choice stays near that. */
    CHECK_MSG(count >= 12 && count <= 20, "%d rows", count);
    for (int k = 0; k < count; k++)
        for (int j = 0; j < k; j++) CHECK(picked[j] != picked[k]);
}

TEST(cover_values_is_a_prefix_of_cover_pairs)
{
    static const int sizes[] = {3, 2, 3, 4, 3, 2};
    static int rows[432 * 6];
    int values[432], pairs[432];
    const int n = product(rows, sizes, 6);
    const int few = cover_pick(values, rows, n, 6, COVER_VALUES);
    const int all = cover_pick(pairs, rows, n, 6, COVER_PAIRS);
    CHECK(few >= 4 && few < all);
    CHECK(covers(rows, n, 6, values, few, 0));
    CHECK(!covers(rows, n, 6, values, few, 1));
    CHECK(memcmp(values, pairs, sizeof values[0] * (size_t)few) == 0);
}

/* A constrained space: field 1 = 2 only with field 0 = 0 (as fp8 kv only
 * with one kind). Pairs no candidate has are not asked for. */
TEST(cover_pairs_takes_only_accepted_rows)
{
    static const int sizes[] = {3, 3, 3, 2};
    static int all[54 * 4], rows[54 * 4];
    int picked[54], n = 0;
    const int total = product(all, sizes, 4);
    for (int i = 0; i < total; i++)
        if (all[i * 4 + 1] != 12 || all[i * 4] == 0) memcpy(&rows[4 * n++], &all[4 * i], sizeof(int) * 4);
    CHECK(n == 42);
    const int count = cover_pick(picked, rows, n, 4, COVER_PAIRS);
    CHECK(count > 0 && count < n);
    CHECK(covers(rows, n, 4, picked, count, 1));
    for (int k = 0; k < count; k++) {
        const int *r = &rows[picked[k] * 4];
        CHECK(r[1] != 12 || r[0] == 0);
    }
}

TEST(cover_all_keeps_every_row_and_limits_are_refused)
{
    int rows[6] = {1, 2, 3, 4, 5, 6}, picked[3];
    CHECK(cover_pick(picked, rows, 3, 2, COVER_ALL) == 3);
    CHECK(picked[0] == 0 && picked[1] == 1 && picked[2] == 2);
    CHECK(cover_pick(picked, rows, 0, 2, COVER_PAIRS) == 0);
    CHECK(cover_pick(picked, rows, 3, 0, COVER_PAIRS) == -1);
    CHECK(cover_pick(picked, rows, 3, COVER_MAX_FIELDS + 1, COVER_PAIRS) == -1);
    static int many[(COVER_MAX_VALUES + 1) * 2];
    static int out[COVER_MAX_VALUES + 1];
    for (int i = 0; i <= COVER_MAX_VALUES; i++) many[2 * i] = i, many[2 * i + 1] = 0;
    CHECK(cover_pick(out, many, COVER_MAX_VALUES, 2, COVER_PAIRS) == COVER_MAX_VALUES);
    CHECK(cover_pick(out, many, COVER_MAX_VALUES + 1, 2, COVER_PAIRS) == -1);
}

TEST(cover_specs_keeps_the_chosen_specs_in_order)
{
    static const char *const texts[] = {
        "prefill q=fp16 hd=64",           "prefill q=bf16 hd=64",
        "prefill q=fp16 hd=128",          "prefill q=bf16 hd=128 mask=causal",
        "batch_prefill_paged q=fp16 hd=64", "batch_prefill_paged q=bf16 hd=128 mask=causal",
    };
    fi_jit_spec specs[6], again[6];
    for (int i = 0; i < 6; i++) specs[i] = again[i] = parse_or_die(texts[i]);
    const int count = cover_specs(specs, 6, COVER_PAIRS);
    CHECK(count > 0 && count <= 6);
    CHECK(cover_specs(again, 6, COVER_PAIRS) == count);
    for (int i = 0; i < count; i++) {
        CHECK(memcmp(&specs[i], &again[i], sizeof specs[i]) == 0);
        char kept[256], orig[256];
        int found = 0;
        CHECK(fi_jit_spec_format(kept, sizeof kept, &specs[i]) > 0);
        for (int j = 0; j < 6 && !found; j++) {
            fi_jit_spec s = parse_or_die(texts[j]);
            found = fi_jit_spec_format(orig, sizeof orig, &s) > 0 && strcmp(kept, orig) == 0;
        }
        CHECK_MSG(found, "%s is not a candidate", kept);
    }
    /* Both kinds, both dtypes, both head dims and both masks are in. */
    int seen_paged = 0, seen_bf16 = 0, seen_128 = 0, seen_causal = 0;
    for (int i = 0; i < count; i++) {
        seen_paged |= specs[i].kind == FI_KIND_BATCH_PREFILL_PAGED;
        seen_bf16 |= specs[i].q_dtype == FI_DTYPE_BF16;
        seen_128 |= specs[i].head_dim == 128;
        seen_causal |= specs[i].mask == FI_MASK_CAUSAL;
    }
    CHECK(seen_paged && seen_bf16 && seen_128 && seen_causal);
}

/* The fields are read from the spec's text, so one that only some specs
 * write (a variant here) is covered too: both of two specs that differ in it
 * alone are kept. */
TEST(cover_specs_covers_every_field_the_text_has)
{
    fi_jit_spec specs[3];
    static char variant[64];
    specs[0] = parse_or_die("decode q=fp16 hd=64");
    CHECK_OK(fi_jit_spec_parse(&specs[1], variant, sizeof variant, "decode q=fp16 hd=64 variant=sink"));
    specs[2] = specs[0];
    CHECK(cover_specs(specs, 3, COVER_PAIRS) == 2);
    CHECK((specs[0].variant == NULL) != (specs[1].variant == NULL));
}

/* cover_compile refuses a candidate the library does not accept, and a space
 * the arch builds none of, before compiling anything. */
TEST(cover_compile_refuses_bad_candidates_without_compiling)
{
    char err[2600] = "";
    fi_jit_spec specs[2] = {parse_or_die("decode q=fp16 hd=64"), parse_or_die("decode q=fp16 hd=96")};
    CHECK(cover_compile("decode", "sm_90a", specs, 2, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "candidate 1") && strstr(err, "head_dim 96"), "%s", err);
    fi_jit_spec fp8 = parse_or_die("prefill q=fp8_e4m3 o=fp16");
    CHECK_OK(fi_jit_spec_check(&fp8));
    CHECK(cover_compile("prefill", "sm_80", &fp8, 1, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "no cover of 1 candidates (0 accepted on the arch)"), "%s", err);
}
