/*
 * CPU tests of user variants: registration rules, the key following the
 * snippet's bytes, compile errors reported in the snippet's own lines,
 * nothing cached when a snippet does not compile, every hook compiling into
 * every kind, and the checks and layout of launch-time parameter values.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/sys.h"
#include "core/jit.h"
#include "core/registry.h"
#include "core/variant.h"

static const char *const doubled_output =
    "// Output scaled by two: a hook override that compiles in every kernel.\n"
    "struct Variant : fijit::DefaultVariant {\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float output_transform(const P &p, float o, int h, int d, float lse)\n"
    "    {\n"
    "        return 2.0f * o;\n"
    "    }\n"
    "};\n";

static fi_jit_ctx *open_ctx(void)
{
    fi_jit_ctx *ctx = NULL;
    if (check_ctx_new(&ctx, "sm_90a") < 0) abort();
    return ctx;
}

static fi_jit_spec variant_spec(const char *name)
{
    fi_jit_spec spec = FI_JIT_SPEC_INIT;
    spec.head_dim = 64;
    spec.variant = name;
    return spec;
}

static void append(void *user, const char *text) { strncat(user, text, 16000 - strlen(user)); }

/* The key line of fi_jit_explain for `spec` in `ctx`. */
static int key_of(fi_jit_ctx *ctx, const fi_jit_spec *spec, char out[33])
{
    static char text[16384];
    text[0] = '\0';
    int rc = fi_jit_explain(ctx, spec, NULL, append, text);
    if (rc < 0) return rc;
    const char *key = strstr(text, "\nkey ");
    if (!key) return -100;
    memcpy(out, key + 5, 32);
    out[32] = '\0';
    return 0;
}

TEST(variant_registration_rules)
{
    fi_jit_ctx *ctx = open_ctx();
    static const char *const bad_names[] = {"", "default", "../etc", "a b", "x/y",
                                            "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++)
        CHECK_RC(fi_jit_variant_register(ctx, bad_names[i], doubled_output, 0), FI_EINVALID);
    CHECK_RC(fi_jit_variant_register(ctx, "twice", NULL, 0), FI_EINVALID);
    CHECK_RC(fi_jit_variant_register(ctx, "twice", doubled_output, 0x80), FI_EINVALID);
    CHECK_OK(fi_jit_variant_register(ctx, "twice", doubled_output, 0));
    CHECK_OK(fi_jit_variant_register(ctx, "twice", doubled_output, 0)); /* same text: fine */
    CHECK_RC(fi_jit_variant_register(ctx, "twice", "struct Variant : fijit::DefaultVariant {};", 0),
             FI_EINVALID);
    CHECK(strstr(fi_last_error(), "FI_VARIANT_REPLACE"));
    CHECK_OK(fi_jit_variant_register(ctx, "twice", "struct Variant : fijit::DefaultVariant {};",
                                     FI_VARIANT_REPLACE));
    fi_jit_spec spec = variant_spec("unknown");
    CHECK_RC(fi_jit_prewarm(NULL, ctx, &spec, NULL), FI_ENOTFOUND);
    CHECK(strstr(fi_last_error(), "not registered"));

    char path[4300];
    snprintf(path, sizeof path, "%s/my-variant.v1.cuh", check_tmpdir);
    FILE *f = fopen(path, "w");
    fputs(doubled_output, f);
    fclose(f);
    CHECK_OK(fi_jit_variant_register_file(ctx, NULL, path, 0));
    spec = variant_spec("my-variant");
    char key[33];
    CHECK_OK(key_of(ctx, &spec, key));
    CHECK_RC(fi_jit_variant_register_file(ctx, "other", "/nonexistent/x.cuh", 0), FI_ENOTFOUND);
    fi_jit_ctx_free(ctx);
}

TEST(variant_key_follows_the_snippet_bytes)
{
    fi_jit_ctx *a = open_ctx(), *b = open_ctx();
    fi_jit_spec spec = variant_spec("scaled"), plain = variant_spec(NULL);
    char key_a[33], key_b[33], key_plain[33], key_edit[33];
    CHECK_OK(fi_jit_variant_register(a, "scaled", doubled_output, 0));
    CHECK_OK(fi_jit_variant_register(b, "scaled", doubled_output, 0));
    CHECK_OK(key_of(a, &spec, key_a));
    CHECK_OK(key_of(b, &spec, key_b));
    CHECK_OK(key_of(a, &plain, key_plain));
    CHECK_MSG(strcmp(key_a, key_b) == 0, "same text in two contexts: %s vs %s", key_a, key_b);
    CHECK(strcmp(key_a, key_plain) != 0);
    char edited[1024];
    snprintf(edited, sizeof edited, "%s", doubled_output);
    *strstr(edited, "2.0f") = '3';
    CHECK_OK(fi_jit_variant_register(b, "scaled", edited, FI_VARIANT_REPLACE));
    CHECK_OK(key_of(b, &spec, key_edit));
    CHECK(strcmp(key_a, key_edit) != 0);
    fi_jit_ctx_free(a);
    fi_jit_ctx_free(b);
}

TEST(variant_compiles_into_decode_and_is_cached_under_its_own_key)
{
    fi_jit_ctx *ctx = open_ctx();
    fi_jit_spec spec = variant_spec("scaled");
    fi_build_outcome outcome;
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    CHECK_OK(fi_jit_variant_register(ctx, "scaled", doubled_output, 0));
    CHECK_OK(fi_jit_prewarm(&outcome, ctx, &spec, NULL));
    CHECK(outcome == FI_BUILD_COMPILED);
    CHECK_OK(fi_jit_prewarm(&outcome, ctx, &spec, NULL));
    CHECK(outcome == FI_BUILD_CACHED);
    CHECK_OK(fi_jit_stats_get(&stats, ctx));
    CHECK(stats.entries == 1 && stats.compiles == 1);
    fi_jit_ctx_free(ctx);
}

typedef struct broken_case {
    const char *what, *source;
    int at_register;   /* rejected before compiling */
    const char *says[3];
} broken_case;

TEST(variant_errors_point_at_the_snippet_lines)
{
    static const broken_case cases[] = {
        {"syntax error",
         "struct Variant : fijit::DefaultVariant {\n"
         "    static constexpr int broken = ;\n"
         "};\n",
         0, {"bad.cuh(2)", "   2 |     static constexpr int broken = ;", "variant 'bad'"}},
        {"unknown identifier",
         "struct Variant : fijit::DefaultVariant {\n"
         "    template <class P>\n"
         "    static __device__ float output_transform(const P &p, float o, int h, int d, float lse)\n"
         "    { return o * not_declared_anywhere; }\n"
         "};\n",
         0, {"bad.cuh(4)", "not_declared_anywhere", "   4 |"}},
        {"wrong hook signature",
         "struct Variant : fijit::DefaultVariant {\n"
         "    static __device__ float logits_transform(float logit) { return logit; }\n"
         "};\n",
         0, {"variant 'bad'", "logits_transform", NULL}},
        {"unbalanced brace",
         "struct Variant : fijit::DefaultVariant {\n"
         "    static constexpr int x = 1;\n"
         "}; }  // tries to close fijit's namespace\n",
         1, {"bad.cuh:3", "unbalanced '}'", NULL}},
        {"unclosed brace",
         "struct Variant : fijit::DefaultVariant {\n"
         "    static constexpr int x = 1;\n",
         1, {"bad.cuh:1", "unbalanced '{'", NULL}},
        {"#line directive", "#line 1 \"decode.cuh\"\nstruct Variant : fijit::DefaultVariant {};\n", 1,
         {"bad.cuh:1", "#line", NULL}},
        {"unknown parameter type", "//! param double scale\nstruct Variant : fijit::DefaultVariant {};\n",
         1, {"bad.cuh:1", "double", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fi_jit_ctx *ctx = open_ctx();
        fi_jit_spec spec = variant_spec("bad");
        fi_jit_stats stats = FI_JIT_STATS_INIT;
        int rc = fi_jit_variant_register(ctx, "bad", cases[i].source, 0);
        if (cases[i].at_register) {
            CHECK_MSG(rc == FI_ECOMPILE || rc == FI_EINVALID, "%s: register gave %d", cases[i].what, rc);
        } else {
            CHECK_MSG(rc == 0, "%s: register gave %d: %s", cases[i].what, rc, fi_last_error());
            rc = fi_jit_prewarm(NULL, ctx, &spec, NULL);
            CHECK_MSG(rc == FI_ECOMPILE, "%s: prewarm gave %d", cases[i].what, rc);
        }
        char message[16384];
        snprintf(message, sizeof message, "%s", fi_last_error());
        for (int s = 0; s < 3 && cases[i].says[s]; s++)
            CHECK_MSG(strstr(message, cases[i].says[s]), "%s: message lacks '%s':\n%.6000s", cases[i].what,
                      cases[i].says[s], message);
        CHECK_OK(fi_jit_stats_get(&stats, ctx));
        CHECK_MSG(stats.entries == 0, "%s: a failed variant left %lld entries", cases[i].what,
                  (long long)stats.entries);
        fi_jit_ctx_free(ctx);
    }
}

TEST(variant_parameters_are_declared_and_laid_out)
{
    fi_jit_ctx *ctx = open_ctx();
    static const char *const with_params =
        "//! param float scale\n"
        "//! param int window\n"
        "//! param const float* sinks\n"
        "struct Variant : fijit::DefaultVariant {};\n";
    static char text[16384];
    fi_jit_spec spec = variant_spec("params");
    CHECK_OK(fi_jit_variant_register(ctx, "params", with_params, 0));
    text[0] = '\0';
    CHECK_OK(fi_jit_explain(ctx, &spec, NULL, append, text));
    CHECK_MSG(strstr(text, "3 parameters"), "%s", text);
    CHECK_OK(fi_jit_prewarm(NULL, ctx, &spec, NULL)); /* the generated VariantParams compiles */
    CHECK_RC(fi_jit_variant_register(ctx, "dup", "//! param float a\n//! param int a\nstruct Variant : fijit::DefaultVariant {};\n", 0),
             FI_EINVALID);
    CHECK(strstr(fi_last_error(), "dup.cuh:2") && strstr(fi_last_error(), "twice"));
    fi_jit_ctx_free(ctx);
}

/* Every hook a variant may override, declared parameters read on the device,
 * softmax off and the mask on every tile: compiles into every kernel kind. */
static const char *const every_hook =
    "//! param float scale\n"
    "//! param int shift\n"
    "//! param const float* bias\n"
    "struct Variant : fijit::DefaultVariant {\n"
    "    static constexpr bool use_softmax = false;\n"
    "    static constexpr bool mask_every_tile = true;\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float query_transform(const P &p, float q, int h, int d)\n"
    "    { return q * p.sm_scale * fijit::variant_params(p).scale; }\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float logits_transform(const P &p, float s, int h, int kv, int qo)\n"
    "    { return 1.0f / (1.0f + expf(-(s + fijit::variant_params(p).bias[h]))); }\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ bool logits_mask(const P &p, int h, int kv, int qo)\n"
    "    { return ((kv + fijit::variant_params(p).shift) & 3) != 0 || kv == qo; }\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float output_transform(const P &p, float o, int h, int d, float lse)\n"
    "    { return o + 0.0f * lse; }\n"
    "};\n";

TEST(variant_hooks_compile_into_every_kind)
{
    static const fi_kernel_kind kinds[] = {FI_KIND_DECODE, FI_KIND_PREFILL, FI_KIND_BATCH_DECODE,
                                           FI_KIND_BATCH_PREFILL_RAGGED, FI_KIND_BATCH_PREFILL_PAGED};
    fi_jit_ctx *ctx = open_ctx();
    CHECK_OK(fi_jit_variant_register(ctx, "every_hook", every_hook, 0));
    for (size_t k = 0; k < (check_quick() ? 2 : sizeof kinds / sizeof kinds[0]); k++) {
        fi_jit_spec spec = variant_spec("every_hook");
        fi_build_outcome outcome;
        spec.kind = kinds[k];
        spec.head_dim = 128;
        spec.mask = k == 1 ? FI_MASK_CAUSAL : FI_MASK_NONE;
        int rc = fi_jit_prewarm(&outcome, ctx, &spec, NULL);
        CHECK_MSG(rc == 0 && outcome == FI_BUILD_COMPILED, "kind %d: %d %.4000s", kinds[k], rc,
                  fi_last_error());
    }
    fi_jit_ctx_free(ctx);
}

/* Registrations race with lookups: readers never lock and never see a
 * half-made record (run under TSan too: build/tsan/tests/test_variant). */
#define RACE_THREADS 4
#define RACE_NAMES 24

typedef struct race_arg {
    fi_jit_ctx *ctx;
    int index, failures;
} race_arg;

static void *race_register(void *p)
{
    race_arg *a = p;
    char name[32];
    for (int i = 0; i < RACE_NAMES; i++) {
        /* Every thread registers every name with the same text: all but one
         * of each are no-ops; "scaled" alternates text with REPLACE. */
        snprintf(name, sizeof name, "v%d", i);
        if (fi_jit_variant_register(a->ctx, name, doubled_output, 0) < 0) a->failures++;
        if (fi_jit_variant_register(a->ctx, "scaled", i % 2 ? doubled_output : "struct Variant : fijit::DefaultVariant {};\n",
                                    FI_VARIANT_REPLACE) < 0)
            a->failures++;
    }
    return NULL;
}

static void *race_lookup(void *p)
{
    race_arg *a = p;
    char name[32];
    unsigned long long words[16];
    for (int round = 0; round < 200; round++) {
        snprintf(name, sizeof name, "v%d", round % RACE_NAMES);
        fi_jit_spec spec = variant_spec(name);
        int rc = fi__jit_variant_pack(a->ctx, &spec, "race", NULL, 0, words);
        if (rc < 0 && rc != FI_ENOTFOUND) a->failures++;
        spec = variant_spec("scaled");
        if (fi__jit_variant_pack(a->ctx, &spec, "race", NULL, 0, words) < 0) a->failures++;
    }
    return NULL;
}

TEST(variant_registry_serves_lookups_while_registering)
{
    fi_jit_ctx *ctx = open_ctx();
    pthread_t threads[2 * RACE_THREADS];
    race_arg args[2 * RACE_THREADS];
    CHECK_OK(fi_jit_variant_register(ctx, "scaled", doubled_output, 0));
    for (int t = 0; t < 2 * RACE_THREADS; t++) {
        args[t] = (race_arg){ctx, t, 0};
        CHECK(pthread_create(&threads[t], NULL, t % 2 ? race_lookup : race_register, &args[t]) == 0);
    }
    int failures = 0;
    for (int t = 0; t < 2 * RACE_THREADS; t++) {
        pthread_join(threads[t], NULL);
        failures += args[t].failures;
    }
    CHECK_MSG(failures == 0, "%d failed calls; last error: %s", failures, fi_last_error());
    fi_registry *registry = fi__jit_registry(ctx);
    for (int i = 0; i < RACE_NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "v%d", i);
        const fi_variant *v = fi__registry_find(registry, name);
        CHECK_MSG(v && strcmp(v->source, doubled_output) == 0, "%s", name);
        /* One record per name: the same text again added nothing. */
        int records = 0;
        for (const fi_variant *r = atomic_load(&registry->head); r; r = r->next)
            records += strcmp(r->name, name) == 0;
        CHECK_MSG(records == 1, "%s: %d records", name, records);
    }
    fi_jit_ctx_free(ctx);
}

TEST(variant_launch_arguments_are_checked)
{
    fi_jit_ctx *ctx = open_ctx();
    CHECK_OK(fi_jit_variant_register(ctx, "every_hook", every_hook, 0));
    fi_jit_spec spec = variant_spec("every_hook");
    static const float device_floats[4] __attribute__((aligned(16)));
    fi_variant_arg good[3] = {{"bias", FI_VARG_PTR, {.ptr = device_floats}},
                              {"scale", FI_VARG_FLOAT, {.f = 1.5f}},
                              {"shift", FI_VARG_INT, {.i = -7}}};
    unsigned long long words[16];

    /* The layout: scale at 0, shift at 4, bias at 8 (declaration order, natural alignment). */
    CHECK_OK(fi__jit_variant_pack(ctx, &spec, "test", good, 3, words));
    float scale;
    int shift;
    const void *bias;
    memcpy(&scale, (char *)words + 0, 4);
    memcpy(&shift, (char *)words + 4, 4);
    memcpy(&bias, (char *)words + 8, 8);
    CHECK(scale == 1.5f && shift == -7 && bias == device_floats);

    struct {
        const char *what;
        int count;
        fi_variant_arg args[3];
        const char *says;
    } bad[] = {
        {"too few", 2, {good[0], good[1]}, "declares 3 parameters: scale (float), shift (int), bias (const float*)"},
        {"unknown name", 3, {good[0], good[1], {"shfit", FI_VARG_INT, {.i = 1}}}, "no parameter 'shfit'"},
        {"wrong type", 3, {good[0], good[1], {"shift", FI_VARG_FLOAT, {.f = 1}}}, "declared 'int' but given as FI_VARG_FLOAT"},
        {"twice", 3, {good[0], good[1], good[1]}, "'scale' is given twice"},
        {"misaligned", 3, {{"bias", FI_VARG_PTR, {.ptr = (const char *)device_floats + 2}}, good[1], good[2]},
         "not 4-byte aligned"},
        {"null name", 3, {good[0], good[1], {NULL, FI_VARG_INT, {.i = 1}}}, "name is NULL"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(fi__jit_variant_pack(ctx, &spec, "test", bad[i].args, bad[i].count, words), FI_EINVALID);
        CHECK_MSG(strstr(fi_last_error(), bad[i].says), "%s: %s", bad[i].what, fi_last_error());
    }
    CHECK_RC(fi__jit_variant_pack(ctx, &spec, "test", NULL, 3, words), FI_EINVALID);

    /* The built-in variant takes none; an unregistered one is not found. */
    fi_jit_spec plain = FI_JIT_SPEC_INIT;
    CHECK_OK(fi__jit_variant_pack(ctx, &plain, "test", NULL, 0, words));
    CHECK_RC(fi__jit_variant_pack(ctx, &plain, "test", good, 1, words), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "built-in variant"));
    fi_jit_spec missing = variant_spec("nobody");
    CHECK_RC(fi__jit_variant_pack(ctx, &missing, "test", NULL, 0, words), FI_ENOTFOUND);

    /* The launch functions refuse bad arguments before touching a GPU. */
    fi_decode_args d = FI_DECODE_ARGS_INIT;
    d.q = d.k = d.v = d.o = (void *)(uintptr_t)0x10000;
    d.num_qo_heads = d.num_kv_heads = 1;
    d.kv_len = 16;
    d.k_stride_n = d.v_stride_n = 64;
    d.max_splits = 1; /* no device query for the split count */
    d.variant_args = good;
    d.num_variant_args = 2;
    CHECK_RC(fi_decode_run(ctx, &spec, &d, NULL), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "decode: variant 'every_hook' declares 3"), "%s", fi_last_error());
    fi_prefill_args pa = FI_PREFILL_ARGS_INIT;
    pa.q = pa.k = pa.v = pa.o = (void *)(uintptr_t)0x10000;
    pa.num_qo_heads = pa.num_kv_heads = 1;
    pa.qo_len = pa.kv_len = 16;
    pa.q_stride_n = pa.o_stride_n = pa.k_stride_n = pa.v_stride_n = 64;
    pa.variant_args = good;
    pa.num_variant_args = 1;
    fi_jit_spec prefill = variant_spec("every_hook");
    prefill.kind = FI_KIND_PREFILL;
    CHECK_RC(fi_prefill_run(ctx, &prefill, &pa, NULL), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "prefill: variant 'every_hook' declares 3"), "%s", fi_last_error());
    fi_jit_ctx_free(ctx);
}

/* A snippet is one self-contained text: every way of reaching another file
 * through the preprocessor is refused at registration, with the snippet's
 * line, and the file's text never shows up in a message. */
TEST(variant_may_not_reach_other_files)
{
    char secret[4300];
    snprintf(secret, sizeof secret, "%s/secret.h", check_tmpdir);
    FILE *f = fopen(secret, "w");
    CHECK(f);
    fputs("#error SECRET_TEXT_OF_ANOTHER_FILE\n", f);
    fclose(f);
    static const char *const body = "struct Variant : fijit::DefaultVariant {};\n";
    struct {
        const char *what, *first, *says;
        int line;
    } refused[] = {
        {"absolute include", "#include \"%s\"\n", "#include is not allowed", 2},
        {"angle include", "#include <%s>\n", "#include is not allowed", 2},
        {"relative include", "#include \"common/fijit_common.cuh\"%.0s\n", "#include is not allowed", 2},
        {"spaced include", "  #   include \"%s\"\n", "#include is not allowed", 2},
        {"comment before it", "/* a */ # /* b */ include \"%s\"\n", "#include is not allowed", 2},
        {"digraph", "%%:include \"%s\"\n", "#include is not allowed", 2},
        {"spliced name", "#inc\\\nlude \"%s\"\n", "#include is not allowed", 2},
        {"include_next", "#include_next \"%s\"\n", "#include_next is not allowed", 2},
        {"import", "#import \"%s\"\n", "#import is not allowed", 2},
        {"embed", "constexpr char data[] = {\n#embed \"%s\"\n};\n", "#embed is not allowed", 3},
        {"__has_include", "#if __has_include(\"%s\")\n#endif\n", "__has_include is not allowed", 2},
        {"_Pragma", "_Pragma(\"GCC dependency \\\"%s\\\"\")\n", "_Pragma is not allowed", 2},
        {"pragma dependency", "#pragma GCC dependency \"%s\"\n", "#pragma GCC is not allowed", 2},
        {"unknown directive", "#ident \"%s\"\n", "#ident is not allowed", 2},
        {"pasted __has_include", "#define CAT(a, b) a##b\n#if CAT(__has_, include)(\"%s\")\n#endif\n",
         "token pasting (##) is not allowed", 2},
        {"spliced paste", "#define CAT(a, b) a#\\\n#b\n// %s\n", "token pasting (##) is not allowed", 2},
    };
    fi_jit_ctx *ctx = open_ctx();
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char source[16384], first[4600], where[32];
        snprintf(first, sizeof first, refused[i].first, secret);
        snprintf(source, sizeof source, "// line 1\n%s%s", first, body);
        snprintf(where, sizeof where, "bad.cuh:%d: ", refused[i].line);
        int rc = fi_jit_variant_register(ctx, "bad", source, 0);
        CHECK_MSG(rc == FI_ECOMPILE, "%s: register gave %d: %s", refused[i].what, rc, fi_last_error());
        CHECK_MSG(strstr(fi_last_error(), where) && strstr(fi_last_error(), refused[i].says) &&
                      !strstr(fi_last_error(), "SECRET_TEXT"),
                  "%s: want '%s%s', got: %.3000s", refused[i].what, where, refused[i].says,
                  fi_last_error());
    }
    /* Directives that stay inside the snippet are fine; so is the word
     * "include" where it is not a directive. */
    static const char *const allowed =
        "#define SCALE 2.0f\n"
        "#if defined(SCALE) && SCALE > 1\n"
        "#pragma nv_diag_suppress 177\n"
        "#endif\n"
        "// #include <this is a comment>\n"
        "static constexpr const char *include = \"#include <x>\";\n"
        "struct Variant : fijit::DefaultVariant {\n"
        "    template <class P>\n"
        "    static __device__ float output_transform(const P &p, float o, int h, int d, float lse)\n"
        "    {\n"
        "#pragma unroll\n"
        "        for (int i = 0; i < 1; i++) o *= SCALE;\n"
        "        return o;\n"
        "    }\n"
        "};\n";
    CHECK_MSG(fi_jit_variant_register(ctx, "fine", allowed, 0) == 0, "%s", fi_last_error());
    fi_jit_ctx_free(ctx);
}

/* A snippet without `struct Variant` gets one message, before any compile. */
TEST(variant_without_struct_variant_is_one_clear_error)
{
    fi_jit_ctx *ctx = open_ctx();
    static const char *const missing[] = {
        "struct Varient : fijit::DefaultVariant {};\n",
        "// struct Variant : fijit::DefaultVariant {};\n",
        "namespace inner { struct Variant : fijit::DefaultVariant {}; }\n",
        "template <class P> __device__ float helper(const P &p) { return p.sm_scale; }\n",
    };
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        CHECK_RC(fi_jit_variant_register(ctx, "novariant", missing[i], 0), FI_ECOMPILE);
        CHECK_MSG(strstr(fi_last_error(), "novariant.cuh: the snippet defines no struct Variant"),
                  "case %zu: %s", i, fi_last_error());
    }
    CHECK_OK(fi_jit_variant_register(ctx, "alias", "using Variant = fijit::DefaultVariant;\n", 0));
    CHECK_OK(fi_jit_variant_register(ctx, "td", "typedef fijit::DefaultVariant Variant;\n", 0));
    CHECK_OK(fi_jit_variant_register(ctx, "cls", "class Variant : public fijit::DefaultVariant {};\n", 0));
    fi_jit_ctx_free(ctx);
}

/* Registered from a file, messages name that file as given, with the
 * snippet's own line numbers; the key does not depend on the path. */
TEST(variant_errors_name_the_file_as_given)
{
    char dir[4300], path[4400], other[4400];
    snprintf(dir, sizeof dir, "%s/dir", check_tmpdir);
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof path, "%s/my.bad.cuh", dir);
    snprintf(other, sizeof other, "%s/my.cuh", check_tmpdir);
    static const char *const broken =
        "struct Variant : fijit::DefaultVariant {\n"
        "    template <class P>\n"
        "    static __device__ float output_transform(const P &p, float o, int h, int d, float lse) { return o * nope; }\n"
        "};\n";
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(i ? other : path, "w");
        CHECK(f);
        fputs(broken, f);
        fclose(f);
    }
    fi_jit_ctx *a = open_ctx(), *b = open_ctx();
    fi_jit_spec spec = variant_spec("my");
    char key_a[33], key_b[33], want[4500];
    CHECK_OK(fi_jit_variant_register_file(a, NULL, path, 0));
    CHECK_OK(fi_jit_variant_register_file(b, NULL, other, 0));
    CHECK_OK(key_of(a, &spec, key_a));
    CHECK_OK(key_of(b, &spec, key_b));
    CHECK_MSG(strcmp(key_a, key_b) == 0, "the path changed the key: %s vs %s", key_a, key_b);
    int rc = fi_jit_prewarm(NULL, a, &spec, NULL);
    char message[16384];
    snprintf(message, sizeof message, "%s", fi_last_error());
    fi_jit_ctx_free(a);
    fi_jit_ctx_free(b);
    CHECK_RC(rc, FI_ECOMPILE);
    snprintf(want, sizeof want, "\n%s(3): error", path);
    CHECK_MSG(strstr(message, want) && strstr(message, "   3 |") && !strstr(message, "my.cuh("),
              "want '%.2000s' and the line quoted:\n%.3000s", want + 1, message);
    /* Registration errors too. */
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("struct Variant : fijit::DefaultVariant {};\n#include \"x.h\"\n", f);
    fclose(f);
    fi_jit_ctx *c = open_ctx();
    rc = fi_jit_variant_register_file(c, NULL, path, 0);
    snprintf(message, sizeof message, "%s", fi_last_error());
    fi_jit_ctx_free(c);
    snprintf(want, sizeof want, "%s:2: #include is not allowed", path);
    CHECK_RC(rc, FI_ECOMPILE);
    CHECK_MSG(strstr(message, want), "want '%.3000s', got %.3000s", want, message);
}
