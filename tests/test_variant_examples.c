/*
 * CPU test of the shipped example variants (examples/variants/ *.cuh): every
 * file registers (fi_jit_variant_register_file, name = file name up to its
 * first '.'), declares as many parameters as it has "//! param" lines, and
 * compiles through NVRTC for sm_90a in every kernel kind -- decode,
 * batch_decode, prefill, batch_prefill_ragged, batch_prefill_paged -- at fp16
 * and bf16, head_dim 128 (plus one head_dim 64 tuple), with FI_BUILD_COMPILED
 * on the first fi_jit_prewarm and FI_BUILD_CACHED on the second. The tuples
 * also vary mask and position encoding so that the examples' calls into
 * fijit::DefaultVariant compose with ALiBi, RoPE, soft-cap and windows.
 *
 * Run from the repository root (as `make test` does). FIJIT_TEST_QUICK=1
 * (sanitizer runs) compiles one tuple per example, the kinds rotating over the
 * examples. FIJIT_TEST_JOBS (default 2) bounds the compiling threads.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define EXAMPLES_DIR "examples/variants"
#define MAX_EXAMPLES 32

typedef struct example {
    char name[64];  /* variant name: file name up to the first '.' */
    char path[512];
    int declared;   /* "//! param " lines in the file */
} example;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const example *)a)->name, ((const example *)b)->name);
}

static int count_params(const char *path)
{
    char line[1024];
    int n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "//! param ", 10) == 0) n++;
    fclose(f);
    return n;
}

/* The *.cuh files of EXAMPLES_DIR, sorted by name; -1 if the directory is missing. */
static int find_examples(example *out, int max)
{
    DIR *d = opendir(EXAMPLES_DIR);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL && n < max) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".cuh") != 0 || e->d_name[0] == '.') continue;
        example *x = &out[n++];
        snprintf(x->path, sizeof x->path, "%s/%.400s", EXAMPLES_DIR, e->d_name);
        snprintf(x->name, sizeof x->name, "%.*s", (int)strcspn(e->d_name, "."), e->d_name);
        x->declared = count_params(x->path);
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, by_name);
    return n;
}

/* The tuples every example compiles for: 5 kinds x fp16/bf16 at head_dim 128,
 * then one head_dim 64 tuple. Decode kinds use mask none, prefill kinds
 * causal (the mask language models use); the bf16 tuples add ALiBi, the
 * head_dim 64 one a window, RoPE and the built-in soft-cap. */
#define TUPLES_PER_EXAMPLE 11
static const fi_kernel_kind kinds[] = {FI_KIND_DECODE, FI_KIND_BATCH_DECODE, FI_KIND_PREFILL,
                                       FI_KIND_BATCH_PREFILL_RAGGED, FI_KIND_BATCH_PREFILL_PAGED};

static fi_jit_spec tuple(int i, const char *variant)
{
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.variant = variant;
    if (i < 10) {
        const int decode = i / 2 < 2;
        s.kind = kinds[i / 2];
        s.q_dtype = s.kv_dtype = s.o_dtype = i % 2 ? FI_DTYPE_BF16 : FI_DTYPE_FP16;
        s.mask = decode ? FI_MASK_NONE : FI_MASK_CAUSAL;
        s.pos = i % 2 ? FI_POS_ALIBI : FI_POS_NONE;
    } else {
        s.kind = FI_KIND_BATCH_DECODE;
        s.head_dim = 64;
        s.mask = FI_MASK_WINDOW;
        s.pos = FI_POS_ROPE_LLAMA;
        s.soft_cap = 1;
    }
    return s;
}

static void append(void *user, const char *text)
{
    size_t used = strlen(user);
    if (used < 32000) strncat(user, text, 32000 - used);
}

/* Register every example in ctx and check its declared parameter count
 * against fi_jit_explain; 0 or -1 with a message in err. */
static int register_examples(fi_jit_ctx *ctx, const example *ex, int n, char *err, size_t err_size)
{
    static char text[32768];
    for (int k = 0; k < n; k++) {
        int rc = fi_jit_variant_register_file(ctx, NULL, ex[k].path, 0);
        if (rc < 0) {
            snprintf(err, err_size, "register %s: %s: %.3000s", ex[k].path, fi_error_name(rc),
                     fi_last_error());
            return -1;
        }
        fi_jit_spec s = tuple(0, ex[k].name);
        char want[64];
        text[0] = '\0';
        if ((rc = fi_jit_explain(ctx, &s, "sm_90a", append, text)) < 0) {
            snprintf(err, err_size, "explain %s: %s: %.3000s", ex[k].name, fi_error_name(rc),
                     fi_last_error());
            return -1;
        }
        snprintf(want, sizeof want, ", %d parameters", ex[k].declared);
        if (!strstr(text, want)) {
            snprintf(err, err_size, "%s has %d '//! param' lines, but fi_jit_explain says:\n%.3000s",
                     ex[k].path, ex[k].declared, text);
            return -1;
        }
    }
    return 0;
}

TEST(variant_examples_are_present_and_register)
{
    static const char *const expected[] = {"attention_sink", "document_mask", "sigmoid", "tanh_softcap"};
    example ex[MAX_EXAMPLES];
    char err[4096] = "";
    int n = find_examples(ex, MAX_EXAMPLES);
    CHECK_MSG(n >= 0, "cannot open %s: run the test from the repository root", EXAMPLES_DIR);
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        int found = 0;
        for (int k = 0; k < n; k++) found |= strcmp(ex[k].name, expected[i]) == 0;
        CHECK_MSG(found, "%s/%s.cuh is missing", EXAMPLES_DIR, expected[i]);
    }
    for (int k = 0; k < n; k++)
        CHECK_MSG(ex[k].declared >= 0, "cannot read %s", ex[k].path);
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    int rc = register_examples(ctx, ex, n, err, sizeof err);
    /* Registering the same file again is a no-op (same name, same text). */
    int again = rc == 0 ? fi_jit_variant_register_file(ctx, NULL, ex[0].path, 0) : 0;
    if (again < 0) snprintf(err, sizeof err, "registering %s twice: %s", ex[0].path, fi_last_error());
    fi_jit_ctx_free(ctx);
    CHECK_MSG(rc == 0 && again == 0, "%s", err);
}

TEST(variant_examples_compile_in_every_kind_then_hit_the_cache)
{
    example ex[MAX_EXAMPLES];
    static fi_jit_spec specs[MAX_EXAMPLES * TUPLES_PER_EXAMPLE];
    char err[4096] = "";
    int n_ex = find_examples(ex, MAX_EXAMPLES), n = 0;
    CHECK_MSG(n_ex > 0, "no examples in %s (run the test from the repository root)", EXAMPLES_DIR);
    for (int k = 0; k < n_ex; k++) {
        if (check_quick()) {
            /* One tuple per example; kinds and dtypes rotate over the examples. */
            specs[n++] = tuple((2 * k + k % 2) % 10, ex[k].name);
        } else {
            for (int i = 0; i < TUPLES_PER_EXAMPLE; i++) specs[n++] = tuple(i, ex[k].name);
        }
    }
    for (int i = 0; i < n; i++) {
        char text[256] = "";
        fi_jit_spec_format(text, sizeof text, &specs[i]);
        CHECK_MSG(fi_jit_spec_check(&specs[i]) == 0, "%s is not accepted: %s", text, fi_last_error());
    }

    fi_jit_ctx *ctx = NULL;
    fi_jit_stats first = FI_JIT_STATS_INIT, second = FI_JIT_STATS_INIT;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    int failed_first = -1, failed_second = -1, rc_first = -1, rc_second = -1, modules = -1;
    char err_second[4096] = "";
    if (register_examples(ctx, ex, n_ex, err, sizeof err) == 0) {
        modules = check_modules_of(ctx, specs, n, "sm_90a"); /* a tuple each, or per part */
        failed_first = check_prewarm_all(ctx, specs, n, FI_BUILD_COMPILED, err, sizeof err);
        rc_first = fi_jit_stats_get(&first, ctx);
        if (rc_first == 0 && first.compiles > 0)
            fprintf(stderr, "  variant examples: %d files, %lld modules compiled, NVRTC %.2f s per "
                    "module (%d threads)\n", n_ex, (long long)first.compiles,
                    (double)first.compile_ns / 1e9 / (double)first.compiles, check_jobs());
        failed_second = check_prewarm_all(ctx, specs, n, FI_BUILD_CACHED, err_second, sizeof err_second);
        rc_second = fi_jit_stats_get(&second, ctx);
    }
    fi_jit_ctx_free(ctx);
    CHECK_MSG(failed_first >= 0, "%s", err);
    CHECK_MSG(failed_first == 0, "%d of %d example tuples failed the first prewarm; first: %s",
              failed_first, n, err);
    CHECK_MSG(rc_first == 0 && modules > 0 && first.compiles == modules && first.entries == modules,
              "after the first prewarm of %d tuples in %d modules: stats rc %d, compiles %lld, "
              "entries %lld", n, modules, rc_first, (long long)first.compiles,
              (long long)first.entries);
    CHECK_MSG(failed_second == 0,
              "%d of %d example tuples were not cached on the second prewarm; first: %s",
              failed_second, n, err_second);
    CHECK_MSG(rc_second == 0 && second.compiles == modules,
              "the second prewarm compiled again: %lld compiles for %d modules",
              (long long)second.compiles, modules);
}
