/*
 * CPU tests of user variants: registration rules, the key following the
 * snippet's bytes, compile errors reported in the snippet's own lines, and
 * nothing cached when a snippet does not compile.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *const doubled_output =
    "// Output scaled by two: a hook override that compiles in every kernel.\n"
    "struct Variant : fijit::DefaultVariant {\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float output_transform(const P &p, float o, int h, int d)\n"
    "    {\n"
    "        return 2.0f * o;\n"
    "    }\n"
    "};\n";

static fi_jit_ctx *open_ctx(void)
{
    char dir[4200];
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_OFF;
    if (fi_jit_ctx_new(&ctx, &opts) < 0) abort();
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
    CHECK_RC(fi_jit_prewarm(ctx, &spec, NULL, NULL), FI_ENOTFOUND);
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
    fi_jit_stats stats;
    CHECK_OK(fi_jit_variant_register(ctx, "scaled", doubled_output, 0));
    CHECK_OK(fi_jit_prewarm(ctx, &spec, NULL, &outcome));
    CHECK(outcome == FI_BUILD_COMPILED);
    CHECK_OK(fi_jit_prewarm(ctx, &spec, NULL, &outcome));
    CHECK(outcome == FI_BUILD_CACHED);
    CHECK_OK(fi_jit_stats_get(ctx, &stats));
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
         "    static __device__ float output_transform(const P &p, float o, int h, int d)\n"
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
        fi_jit_stats stats;
        int rc = fi_jit_variant_register(ctx, "bad", cases[i].source, 0);
        if (cases[i].at_register) {
            CHECK_MSG(rc == FI_ECOMPILE || rc == FI_EINVALID, "%s: register gave %d", cases[i].what, rc);
        } else {
            CHECK_MSG(rc == 0, "%s: register gave %d: %s", cases[i].what, rc, fi_last_error());
            rc = fi_jit_prewarm(ctx, &spec, NULL, NULL);
            CHECK_MSG(rc == FI_ECOMPILE, "%s: prewarm gave %d", cases[i].what, rc);
        }
        char message[16384];
        snprintf(message, sizeof message, "%s", fi_last_error());
        for (int s = 0; s < 3 && cases[i].says[s]; s++)
            CHECK_MSG(strstr(message, cases[i].says[s]), "%s: message lacks '%s':\n%.6000s", cases[i].what,
                      cases[i].says[s], message);
        CHECK_OK(fi_jit_stats_get(ctx, &stats));
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
    CHECK_OK(fi_jit_prewarm(ctx, &spec, NULL, NULL)); /* the generated VariantParams compiles */
    CHECK_RC(fi_jit_variant_register(ctx, "dup", "//! param float a\n//! param int a\nstruct Variant : fijit::DefaultVariant {};\n", 0),
             FI_EINVALID);
    CHECK(strstr(fi_last_error(), "dup.cuh:2") && strstr(fi_last_error(), "twice"));
    fi_jit_ctx_free(ctx);
}
