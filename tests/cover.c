/* Covering subsets of a tuple space (see cover.h). */
#include "cover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

cover_strength cover_strength_of_run(void)
{
    if (getenv("FIJIT_TEST_SWEEP")) return COVER_ALL;
    if (getenv("FIJIT_TEST_QUICK")) return COVER_VALUES;
    return COVER_PAIRS;
}

/* What the greedy choice keeps: each row's fields as value numbers (dense,
 * per field), which values and pairs the chosen rows hold, and where each
 * pair of fields' table starts in `pair_seen`. */
typedef struct cover_state {
    int n, fields;
    int *value_of;  /* [n * fields] */
    int value_count[COVER_MAX_FIELDS];
    unsigned char value_seen[COVER_MAX_FIELDS][COVER_MAX_VALUES];
    int pair_base[COVER_MAX_FIELDS][COVER_MAX_FIELDS];
    unsigned char *pair_seen;
    unsigned char *chosen; /* [n] */
} cover_state;

static int number_values(cover_state *s, const int *rows)
{
    int values[COVER_MAX_FIELDS][COVER_MAX_VALUES];
    for (int i = 0; i < s->n; i++)
        for (int f = 0; f < s->fields; f++) {
            const int v = rows[i * s->fields + f];
            int k = 0;
            while (k < s->value_count[f] && values[f][k] != v) k++;
            if (k == s->value_count[f]) {
                if (k == COVER_MAX_VALUES) return -1;
                values[f][s->value_count[f]++] = v;
            }
            s->value_of[i * s->fields + f] = k;
        }
    return 0;
}

static unsigned char *pair_cell(cover_state *s, int row, int a, int b)
{
    const int *v = &s->value_of[row * s->fields];
    return &s->pair_seen[s->pair_base[a][b] + v[a] * s->value_count[b] + v[b]];
}

/* New values, then new pairs, that choosing `row` would add, as one score. */
static long gain(cover_state *s, int row)
{
    long values = 0, pairs = 0;
    for (int a = 0; a < s->fields; a++) {
        values += !s->value_seen[a][s->value_of[row * s->fields + a]];
        for (int b = a + 1; b < s->fields; b++) pairs += !*pair_cell(s, row, a, b);
    }
    return values * (COVER_MAX_FIELDS * COVER_MAX_FIELDS) + pairs;
}

static void choose(cover_state *s, int row)
{
    s->chosen[row] = 1;
    for (int a = 0; a < s->fields; a++) {
        s->value_seen[a][s->value_of[row * s->fields + a]] = 1;
        for (int b = a + 1; b < s->fields; b++) *pair_cell(s, row, a, b) = 1;
    }
}

int cover_pick(int *out, const int *rows, int n, int fields, cover_strength strength)
{
    if (fields < 1 || fields > COVER_MAX_FIELDS) return -1;
    if (strength >= COVER_ALL) {
        for (int i = 0; i < n; i++) out[i] = i;
        return n;
    }
    cover_state s = {.n = n, .fields = fields};
    int picked = -1;
    size_t pair_cells = 0;
    s.value_of = malloc(sizeof *s.value_of * (size_t)(n > 0 ? n : 1) * (size_t)fields);
    s.chosen = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!s.value_of || !s.chosen || number_values(&s, rows) < 0) goto out;
    for (int a = 0; a < fields; a++)
        for (int b = a + 1; b < fields; b++) {
            s.pair_base[a][b] = (int)pair_cells;
            pair_cells += (size_t)s.value_count[a] * (size_t)s.value_count[b];
        }
    if (!(s.pair_seen = calloc(pair_cells ? pair_cells : 1, 1))) goto out;
    picked = 0;
    for (;;) {
        int best = -1;
        long best_gain = 0;
        for (int i = 0; i < n; i++) {
            if (s.chosen[i]) continue;
            const long g = gain(&s, i);
            if (g > best_gain) best = i, best_gain = g;
        }
        /* Pairs only count once every value is in: then gain < one value's weight. */
        if (best < 0 || (strength == COVER_VALUES && best_gain < COVER_MAX_FIELDS * COVER_MAX_FIELDS))
            break;
        choose(&s, best);
        out[picked++] = best;
    }
out:
    free(s.value_of);
    free(s.chosen);
    free(s.pair_seen);
    return picked;
}

/* The fields of a set of specs, read from their canonical text
 * (fi_jit_spec_format): the kind, then each "key=value" word, so a field the
 * library adds to the spec is covered with no change here. Names and values
 * are numbered as first seen. */
typedef struct spec_fields {
    int count;
    char names[COVER_MAX_FIELDS][32];
    int value_count[COVER_MAX_FIELDS];
    char values[COVER_MAX_FIELDS][COVER_MAX_VALUES][64];
} spec_fields;

static int field_number(spec_fields *t, const char *name, size_t len)
{
    for (int f = 0; f < t->count; f++)
        if (strlen(t->names[f]) == len && strncmp(t->names[f], name, len) == 0) return f;
    if (t->count == COVER_MAX_FIELDS || len >= sizeof t->names[0]) return -1;
    snprintf(t->names[t->count], sizeof t->names[0], "%.*s", (int)len, name);
    return t->count++;
}

static int value_number(spec_fields *t, int f, const char *value, size_t len)
{
    for (int v = 0; v < t->value_count[f]; v++)
        if (strlen(t->values[f][v]) == len && strncmp(t->values[f][v], value, len) == 0) return v;
    if (t->value_count[f] == COVER_MAX_VALUES || len >= sizeof t->values[0][0]) return -1;
    snprintf(t->values[f][t->value_count[f]], sizeof t->values[0][0], "%.*s", (int)len, value);
    return t->value_count[f]++;
}

/* Numbers the fields of `text` into t and, when row is not NULL, writes each
 * field's value number to row[field] (a field the text lacks stays -1). */
static int read_fields(spec_fields *t, const char *text, int *row)
{
    for (const char *word = text; *word;) {
        const size_t len = strcspn(word, " ");
        const char *eq = memchr(word, '=', len);
        /* The first word is the kind: a field named "kind". */
        const char *name = eq ? word : "kind", *value = eq ? eq + 1 : word;
        const size_t name_len = eq ? (size_t)(eq - word) : 4;
        const size_t value_len = eq ? len - name_len - 1 : len;
        const int f = field_number(t, name, name_len);
        if (f < 0) return -1;
        if (row) {
            const int v = value_number(t, f, value, value_len);
            if (v < 0) return -1;
            row[f] = v;
        }
        word += len;
        while (*word == ' ') word++;
    }
    return 0;
}

int cover_specs(fi_jit_spec *specs, int n, cover_strength strength)
{
    if (n <= 0) return n == 0 ? 0 : -1;
    spec_fields *fields = calloc(1, sizeof *fields);
    char(*texts)[256] = calloc((size_t)n, sizeof *texts);
    int *rows = calloc((size_t)n * COVER_MAX_FIELDS, sizeof *rows);
    int *picked = calloc((size_t)n, sizeof *picked);
    fi_jit_spec *copy = calloc((size_t)n, sizeof *copy);
    int count = -1;
    if (!fields || !texts || !rows || !picked || !copy) goto out;
    for (int i = 0; i < n; i++)
        if (fi_jit_spec_format(texts[i], sizeof texts[i], &specs[i]) < 0 ||
            read_fields(fields, texts[i], NULL) < 0)
            goto out;
    for (int i = 0; i < n * fields->count; i++) rows[i] = -1;
    for (int i = 0; i < n; i++)
        if (read_fields(fields, texts[i], &rows[i * fields->count]) < 0) goto out;
    count = cover_pick(picked, rows, n, fields->count, strength);
    memcpy(copy, specs, sizeof *copy * (size_t)n);
    for (int i = 0; i < count; i++) specs[i] = copy[picked[i]];
out:
    free(fields);
    free(texts);
    free(rows);
    free(picked);
    free(copy);
    return count;
}

static void ignore_text(void *user, const char *text) { (void)user, (void)text; }

int cover_compile(const char *label, const char *arch, fi_jit_spec *specs, int n, char *err,
                  size_t err_size)
{
    int result = -1, kept = 0, count = 0, modules = 0;
    fi_jit_ctx *ctx = NULL;
    if (check_ctx_new(&ctx, arch) < 0) {
        snprintf(err, err_size, "context for %s: %s", arch, fi_last_error());
        goto out;
    }
    for (int i = 0; i < n; i++) {
        int rc = fi_jit_spec_check(&specs[i]);
        if (rc == 0) {
            rc = fi_jit_explain(ctx, &specs[i], arch, ignore_text, NULL);
            if (rc == FI_EUNSUPPORTED) continue; /* not built for this arch */
        }
        if (rc < 0) {
            snprintf(err, err_size, "candidate %d on %s: %s", i, arch, fi_last_error());
            goto out;
        }
        specs[kept++] = specs[i];
    }
    if (kept == 0 || (count = cover_specs(specs, kept, cover_strength_of_run())) <= 0) {
        snprintf(err, err_size, "%s: no cover of %d candidates (%d accepted on the arch)", arch, n,
                 kept);
        goto out;
    }
    if ((modules = check_modules_of(ctx, specs, count, arch)) < 0) {
        snprintf(err, err_size, "explain on %s: %s", arch, fi_last_error());
        goto out;
    }
    /* The cache (check_tmpdir's) may hold another arch's modules already. */
    char first[2400];
    fi_jit_stats before = FI_JIT_STATS_INIT, after = FI_JIT_STATS_INIT;
    int rc = fi_jit_stats_get(&before, ctx);
    const int failures = check_prewarm_all(ctx, specs, count, -1, first, sizeof first);
    if (rc == 0) rc = fi_jit_stats_get(&after, ctx);
    const long long compiles = after.compiles - before.compiles;
    const long long entries = after.entries - before.entries;
    printf("  %s %s: %d of %d tuples (%d refused on the arch) in %d modules, %d failed, NVRTC "
           "%.2f s per module (%d threads)\n", label, arch, count, kept, n - kept, modules, failures,
           compiles > 0 ? (double)(after.compile_ns - before.compile_ns) / 1e9 / (double)compiles
                        : 0.0,
           check_jobs());
    if (failures)
        snprintf(err, err_size, "%s: %d of %d failed; first: %s", arch, failures, count, first);
    else if (rc < 0 || compiles != modules || entries != modules)
        snprintf(err, err_size, "%s: %lld compiles and %lld new entries for %d tuples in %d "
                 "modules", arch, compiles, entries, count, modules);
    else
        result = count;
out:
    fi_jit_ctx_free(ctx);
    return result;
}
