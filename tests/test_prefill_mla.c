/*
 * CPU tests of MLA's prefill tuples (q and k of head_dim 192, v and o of
 * head_dim_vo 128): the spec field's text, key and checks, a version 1 spec
 * read only as far as it reaches, the translation units of other tuples
 * unchanged, and the float64 reference the GPU suites hold the kernels to
 * (tests/gpu/test_mla_prefill.py writes the same in torch): attention with
 * a narrower V, and chunked context (the new tokens against each cached
 * chunk, then a merge of the (o, lse) states as fi_merge_states defines
 * it) equal to attention over the whole context.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kinds/spec.h"
#include "fijit_cache.h"
#include "fijit_prefill.h"

/* ---- the spec field ------------------------------------------------------------ */

TEST(mla_spec_text_round_trips_and_prints_hd_vo_only_where_it_differs)
{
    char text[256], again[256];
    fi_jit_spec s = parse_or_die("batch_prefill_paged q=bf16 hd=192 hd_vo=128 mask=causal");
    CHECK(s.head_dim == 192 && s.head_dim_vo == 128);
    CHECK(fi_jit_spec_format(text, sizeof text, &s) > 0);
    CHECK_MSG(strcmp(text, "batch_prefill_paged q=bf16 kv=bf16 o=bf16 hd=192 mask=causal "
                           "pos=none softcap=0 hd_vo=128") == 0, "%s", text);
    fi_jit_spec back = parse_or_die(text);
    CHECK(fi_jit_spec_format(again, sizeof again, &back) > 0 && strcmp(text, again) == 0);

    /* hd_vo equal to hd, or 0, is the spec without it: same text, same key. */
    fi_jit_spec plain = parse_or_die("prefill hd=128"), equal = parse_or_die("prefill hd=128 hd_vo=128");
    fi_jit_spec zero = parse_or_die("prefill hd=128 hd_vo=0");
    char a[256], b[256], c[256];
    CHECK(fi_jit_spec_format(a, sizeof a, &plain) > 0 && fi_jit_spec_format(b, sizeof b, &equal) > 0 &&
          fi_jit_spec_format(c, sizeof c, &zero) > 0);
    CHECK_MSG(strcmp(a, b) == 0 && strcmp(a, c) == 0 && !strstr(a, "hd_vo"), "%s / %s / %s", a, b, c);
    fi_spec_key ka, kb, kmla;
    CHECK_OK(fi__spec_key(&ka, &plain));
    CHECK_OK(fi__spec_key(&kb, &equal));
    CHECK_OK(fi__spec_key(&kmla, &s));
    CHECK(memcmp(&ka, &kb, sizeof ka) == 0);
    CHECK(kmla.head_dim_vo == 128 && ka.head_dim_vo == 0);

    fi_jit_spec bad;
    char variant[64];
    CHECK_RC(fi_jit_spec_parse(&bad, variant, sizeof variant, "prefill hd=192 hd_vo=x"), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "hd_vo"));
    CHECK_RC(fi_jit_spec_parse(&bad, variant, sizeof variant, "prefill hd_vo=128 hd_vo=128"),
             FI_EINVALID);
    CHECK(strstr(fi_last_error(), "twice"));
}

/* Which tuples take a v/o head dim, each refusal naming the field at fault. */
TEST(mla_spec_checks_name_the_field)
{
    static const struct {
        const char *text;
        int rc;
        const char *says;
    } cases[] = {
        {"prefill hd=192 hd_vo=128", 0, NULL},
        {"batch_prefill_ragged q=bf16 hd=192 hd_vo=128 mask=window softcap=1", 0, NULL},
        {"batch_prefill_ragged hd=192 hd_vo=128 mask=custom pos=alibi", FI_EUNSUPPORTED, "pos 'alibi'"},
        {"batch_prefill_paged hd=192 hd_vo=128 mask=custom", 0, NULL},
        {"prefill hd=192", FI_EUNSUPPORTED, "192/128"},
        {"prefill hd=128 hd_vo=64", FI_EUNSUPPORTED, "head_dim_vo 64"},
        {"prefill hd=256 hd_vo=128", FI_EUNSUPPORTED, "head_dim_vo 128"},
        {"prefill hd=192 hd_vo=64", FI_EUNSUPPORTED, "head_dim_vo 64"},
        {"prefill hd=96 hd_vo=128", FI_EUNSUPPORTED, "head_dim 96"},
        {"decode hd=192 hd_vo=128", FI_EUNSUPPORTED, "head_dim"},
        {"batch_decode hd=128 hd_vo=64", FI_EUNSUPPORTED, "head_dim_vo 64"},
        {"prefill hd=192 hd_vo=128 pos=rope", FI_EUNSUPPORTED, "pos 'rope'"},
        {"prefill q=fp8_e4m3 o=bf16 hd=192 hd_vo=128", FI_EUNSUPPORTED, "head_dim_vo"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fi_jit_spec s = parse_or_die(cases[i].text);
        const int rc = fi_jit_spec_check(&s);
        CHECK_MSG(rc == cases[i].rc, "%s: %d %s", cases[i].text, rc, fi_last_error());
        if (cases[i].says)
            CHECK_MSG(strstr(fi_last_error(), cases[i].says), "%s: %s", cases[i].text,
                      fi_last_error());
    }
    fi_jit_spec s = parse_or_die("prefill hd=192 hd_vo=128");
    s.head_dim_vo = -128;
    CHECK_RC(fi_jit_spec_check(&s), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "head_dim_vo"));
}

/* A caller built against the version 1 header hands a struct that ends
 * after `variant`: what lies beyond (here 128 where head_dim_vo would be) is
 * not its, and is never read. */
TEST(a_version_1_spec_is_read_only_as_far_as_it_reaches)
{
    const size_t v1_size = offsetof(fi_jit_spec, variant) + sizeof(const char *);
    fi_jit_spec holder = parse_or_die("prefill hd=128 mask=causal");
    holder.version = 1;
    holder.head_dim_vo = 64; /* beyond a version 1 struct: must not count */
    char text[256];
    CHECK_OK(fi_jit_spec_check(&holder));
    CHECK(fi_jit_spec_format(text, sizeof text, &holder) > 0 && !strstr(text, "hd_vo"));
    fi_jit_spec copy;
    fi__spec_copy(&copy, &holder);
    CHECK(copy.version == FI_JIT_SPEC_VERSION && copy.head_dim_vo == 0 && copy.head_dim == 128);
    CHECK(fi__spec_head_dim_vo(&holder) == 128);
    /* On the heap, exactly the version 1 size (ASan reports a read past it). */
    fi_jit_spec *v1 = malloc(v1_size);
    CHECK(v1 != NULL);
    if (!v1) return;
    memcpy(v1, &holder, v1_size);
    CHECK_OK(fi_jit_spec_check(v1));
    CHECK(fi_jit_spec_format(text, sizeof text, v1) > 0 && !strstr(text, "hd_vo"));
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_80"));
    char *unit = NULL;
    size_t size = 0;
    CHECK_OK(fi_jit_unit(&unit, &size, ctx, v1, "sm_80", 0));
    CHECK(unit && !strstr(unit, "kHeadDimVO"));
    fi_free(unit);
    fi_jit_ctx_free(ctx);
    free(v1);
    holder.version = 3;
    CHECK_RC(fi_jit_spec_check(&holder), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "spec.version"));
}

/* The prelude states kHeadDimVO only for the tuples that have one of their
 * own, so that no other tuple's unit, and so key, changed with the field. */
TEST(only_tuples_with_a_vo_head_dim_have_it_in_their_unit)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    static const char *const texts[] = {"decode hd=128", "prefill hd=192 hd_vo=128 mask=causal",
                                        "batch_prefill_paged hd=128 mask=causal"};
    for (int i = 0; i < 3; i++) {
        fi_jit_spec s = parse_or_die(texts[i]);
        char *unit = NULL;
        size_t size = 0;
        CHECK_OK(fi_jit_unit(&unit, &size, ctx, &s, "sm_90a", 0));
        const int has = unit && strstr(unit, "constexpr int kHeadDimVO = 128;") != NULL;
        CHECK_MSG(has == (i == 1), "%s: %s", texts[i], has ? "states kHeadDimVO" : "does not");
        fi_free(unit);
    }
    fi_jit_ctx_free(ctx);
}

/* ---- the float64 reference -------------------------------------------------------- */

enum { HQ = 4, HKV = 2, DQK = 192, DVO = 128 };

/* One request's attention in float64, as fijit_prefill.h defines it: query
 * i sees key j when `causal` is 0 or j <= i + kv_len - qo_len; q [qo, HQ,
 * DQK], k [kv, HKV, DQK], v [kv, HKV, DVO], o [qo, HQ, DVO], lse [qo, HQ]
 * (-inf and o = 0 for a query that sees no key). */
static void ref_attention(double *o, double *lse, const double *q, const double *k,
                          const double *v, int qo_len, int kv_len, int causal, double sm_scale)
{
    double *s = malloc(sizeof(double) * (size_t)(kv_len > 0 ? kv_len : 1));
    for (int i = 0; i < qo_len; i++)
        for (int h = 0; h < HQ; h++) {
            const int hk = h / (HQ / HKV);
            double m = -INFINITY, d = 0;
            const int last = causal ? i + kv_len - qo_len : kv_len - 1;
            for (int j = 0; j <= last && j < kv_len; j++) {
                double dot = 0;
                for (int c = 0; c < DQK; c++)
                    dot += q[((size_t)i * HQ + h) * DQK + c] * k[((size_t)j * HKV + hk) * DQK + c];
                s[j] = dot * sm_scale;
                if (s[j] > m) m = s[j];
            }
            double *out = &o[((size_t)i * HQ + h) * DVO];
            memset(out, 0, sizeof(double) * DVO);
            for (int j = 0; j <= last && j < kv_len; j++) {
                const double p = exp(s[j] - m);
                d += p;
                for (int c = 0; c < DVO; c++) out[c] += p * v[((size_t)j * HKV + hk) * DVO + c];
            }
            for (int c = 0; c < DVO && d > 0; c++) out[c] /= d;
            lse[(size_t)i * HQ + h] = d > 0 ? m + log(d) : -INFINITY;
        }
    free(s);
}

/* fi_merge_states of n states [n][rows][DVO] and lse [n][rows]: weights
 * e^(lse - L) over the states with a finite lse; none: 0 and -inf. */
static void ref_merge(double *o, double *lse, const double *states, const double *state_lse, int n,
                      int rows)
{
    for (int r = 0; r < rows; r++) {
        double m = -INFINITY, d = 0;
        for (int s = 0; s < n; s++)
            if (state_lse[(size_t)s * rows + r] > m) m = state_lse[(size_t)s * rows + r];
        double *out = &o[(size_t)r * DVO];
        memset(out, 0, sizeof(double) * DVO);
        for (int s = 0; s < n && m > -INFINITY; s++) {
            const double w = exp(state_lse[(size_t)s * rows + r] - m);
            d += w;
            for (int c = 0; c < DVO; c++) out[c] += w * states[((size_t)s * rows + r) * DVO + c];
        }
        for (int c = 0; c < DVO && d > 0; c++) out[c] /= d;
        lse[r] = d > 0 ? m + log(d) : -INFINITY;
    }
}

static double *random_doubles(size_t n, unsigned *seed)
{
    double *x = malloc(sizeof(double) * n);
    for (size_t i = 0; x && i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        x[i] = ((double)((*seed >> 8) & 0xffff) / 65535.0 - 0.5) * 2.0;
    }
    return x;
}

/* Chunked context as engines run it: `qo` new tokens after `cached` cached
 * keys; the new tokens attend to each cached chunk of `chunk` keys with no
 * mask and to their own keys causally, and the states merged equal causal
 * attention over all cached + qo keys (bottom-right aligned). A chunk of
 * no keys (lse -inf) weighs nothing. */
static double chunked_vs_full(int qo, int cached, int chunk)
{
    const int kv = cached + qo, rows = qo * HQ;
    unsigned seed = (unsigned)(qo * 131 + cached * 7 + chunk);
    double *q = random_doubles((size_t)qo * HQ * DQK, &seed);
    double *k = random_doubles((size_t)kv * HKV * DQK, &seed);
    double *v = random_doubles((size_t)kv * HKV * DVO, &seed);
    const int chunks = (cached + chunk - 1) / chunk + 1 + 1; /* + own keys + an empty one */
    double *states = calloc((size_t)chunks * rows * DVO, sizeof(double));
    double *state_lse = calloc((size_t)chunks * rows, sizeof(double));
    double *full = malloc(sizeof(double) * (size_t)rows * DVO), *full_lse = malloc(sizeof(double) * rows);
    double *merged = malloc(sizeof(double) * (size_t)rows * DVO), *merged_lse = malloc(sizeof(double) * rows);
    const double scale = 1.0 / sqrt((double)DQK);
    double worst = INFINITY;
    if (!q || !k || !v || !states || !state_lse || !full || !full_lse || !merged || !merged_lse)
        goto out;
    int n = 0;
    for (int c0 = 0; c0 < cached; c0 += chunk, n++) {
        const int len = c0 + chunk <= cached ? chunk : cached - c0;
        ref_attention(states + (size_t)n * rows * DVO, state_lse + (size_t)n * rows, q,
                      k + (size_t)c0 * HKV * DQK, v + (size_t)c0 * HKV * DVO, qo, len, 0, scale);
    }
    ref_attention(states + (size_t)n * rows * DVO, state_lse + (size_t)n * rows, q,
                  k + (size_t)cached * HKV * DQK, v + (size_t)cached * HKV * DVO, qo, qo, 1, scale);
    n++;
    ref_attention(states + (size_t)n * rows * DVO, state_lse + (size_t)n * rows, q, k, v, qo, 0, 0,
                  scale);
    n++;
    ref_merge(merged, merged_lse, states, state_lse, n, rows);
    ref_attention(full, full_lse, q, k, v, qo, kv, 1, scale);
    worst = 0;
    for (int r = 0; r < rows; r++) {
        worst = fmax(worst, fabs(merged_lse[r] - full_lse[r]));
        for (int c = 0; c < DVO; c++)
            worst = fmax(worst, fabs(merged[(size_t)r * DVO + c] - full[(size_t)r * DVO + c]));
    }
out:
    free(q), free(k), free(v), free(states), free(state_lse);
    free(full), free(full_lse), free(merged), free(merged_lse);
    return worst;
}

TEST(mla_chunked_context_merged_equals_attention_over_the_whole_context)
{
    static const int shapes[][3] = {{1, 0, 16}, {7, 5, 4}, {33, 64, 64}, {16, 100, 48}, {5, 129, 128}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const double err = chunked_vs_full(shapes[i][0], shapes[i][1], shapes[i][2]);
        CHECK_MSG(err < 1e-12, "qo %d cached %d chunk %d: %g", shapes[i][0], shapes[i][1],
                  shapes[i][2], err);
    }
}

/* The reference itself, against the definition written out for one row:
 * softmax of q.k * scale over the visible keys, applied to the narrower v. */
TEST(mla_reference_is_softmax_of_the_192_wide_logits_over_128_wide_values)
{
    unsigned seed = 7;
    const int qo = 3, kv = 5;
    double *q = random_doubles((size_t)qo * HQ * DQK, &seed);
    double *k = random_doubles((size_t)kv * HKV * DQK, &seed);
    double *v = random_doubles((size_t)kv * HKV * DVO, &seed);
    double o[3 * HQ * DVO], lse[3 * HQ];
    CHECK(q && k && v);
    if (!q || !k || !v) goto out;
    ref_attention(o, lse, q, k, v, qo, kv, 1, 0.5);
    /* Query 1, head 3 (kv head 1) sees keys 0..3 (kv - qo = 2 ahead). */
    double w[4], sum = 0;
    for (int j = 0; j < 4; j++) {
        double dot = 0;
        for (int c = 0; c < DQK; c++) dot += q[(1 * HQ + 3) * DQK + c] * k[(j * HKV + 1) * DQK + c];
        w[j] = exp(0.5 * dot);
        sum += w[j];
    }
    CHECK(fabs(lse[1 * HQ + 3] - log(sum)) < 1e-12);
    for (int c = 0; c < DVO; c++) {
        double want = 0;
        for (int j = 0; j < 4; j++) want += w[j] / sum * v[(j * HKV + 1) * DVO + c];
        CHECK_MSG(fabs(o[(1 * HQ + 3) * DVO + c] - want) < 1e-12, "column %d", c);
    }
out:
    free(q), free(k), free(v);
}
