/*
 * Tests of how templates are named and found (src/core/expand.c,
 * tools/embed): names are paths relative to templates/, so templates live in
 * folders and include each other as "decode/params.h"; a name that could
 * reach outside templates/ (a '..' part, an absolute path) is refused, from
 * the embedded copies and from FIJIT_TEMPLATE_DIR alike; a kind's key
 * hashes only the headers its translation unit includes; and the Hopper
 * loop's trace hooks compile from a copy that enables them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "common/embedded.h"
#include "common/error.h"
#include "common/sys.h"
#include "core/expand.h"
#include "core/key.h"
#include "kinds/registry.h"
#include "kinds/spec.h"

static int write_file(const char *dir, const char *name, const char *text, const char *mode)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (char *slash = path + strlen(dir) + 1; (slash = strchr(slash, '/')); *slash++ = '/') {
        *slash = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST) return -1;
    }
    FILE *f = fopen(path, mode);
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Every embedded template, verbatim, into `dir`, folders included. */
static int copy_templates(const char *dir)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) return -1;
    for (int i = 0; i < fi__template_count; i++) {
        char *text = NULL;
        if (fi__template_load(fi__templates[i].name, &text) < 0) return -1;
        int rc = write_file(dir, fi__templates[i].name, text, "w");
        fi__free(text);
        if (rc < 0) return -1;
    }
    return 0;
}

/* Key of `spec` for sm_90a with the templates in effect now. */
static int key_of(uint8_t out[16], const fi_jit_spec *spec)
{
    fi_translation_unit tu;
    const char *options[] = {"-std=c++17", "--gpu-architecture=sm_90a"};
    int rc = fi__expand(&tu, spec, NULL);
    if (rc < 0) return rc;
    const fi_kind_info *kind = fi__kind_info(spec->kind);
    fi_key_input in = {&tu, "sm_90a", 13, 0, 2, options, fi__kind_entry_count(kind), kind->entries};
    rc = fi__key_compute(out, &in, NULL, NULL);
    fi__tu_free(&tu);
    return rc;
}

static int tu_has(const fi_translation_unit *tu, const char *name)
{
    for (int i = 0; i < tu->header_count; i++)
        if (strcmp(tu->header_names[i], name) == 0) return 1;
    return 0;
}

TEST(template_names_are_relative_paths_inside_templates)
{
    static const char *const good[] = {"decode/decode.cuh", "prefill/params.h", "a.cuh",
                                       "a/b/c-d_e.v1.h"};
    static const char *const bad[] = {"",           "/etc/passwd",  "../x.cuh",  "decode/../x.cuh",
                                      "decode/..",  "./x.cuh",      "a//b.cuh",  "a/",
                                      ".hidden.h",  "a/.b.cuh",     "a\\b.cuh",  "a b.cuh",
                                      "x\n.cuh"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_MSG(fi__template_name_ok(good[i]), "'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(!fi__template_name_ok(bad[i]), "'%s' accepted", bad[i]);
    char longer[FI_TEMPLATE_NAME_MAX + 2];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    CHECK(!fi__template_name_ok(longer));

    /* The embedded copies are named the same way, folders included. */
    int in_folder = 0;
    for (int i = 0; i < fi__template_count; i++) {
        CHECK_MSG(fi__template_name_ok(fi__templates[i].name), "embedded as '%s'",
                  fi__templates[i].name);
        in_folder += strchr(fi__templates[i].name, '/') != NULL;
    }
    CHECK(in_folder > 0);
    char *text = NULL;
    CHECK_OK(fi__template_load("decode/params.h", &text));
    CHECK(strstr(text, "fi_decode_params") != NULL);
    fi__free(text);
}

TEST(dotdot_and_absolute_names_are_refused_even_where_the_file_exists)
{
    char dir[4200], outside[4300];
    snprintf(dir, sizeof dir, "%s/templates", check_tmpdir);
    CHECK(copy_templates(dir) == 0);
    CHECK(write_file(check_tmpdir, "outside.cuh", "// not a template\n", "w") == 0);
    snprintf(outside, sizeof outside, "%s/outside.cuh", check_tmpdir);
    char *text = NULL;
    CHECK_RC(fi__template_load("../templates/decode/params.h", &text), FI_EINVALID);
    CHECK_RC(fi__template_load(outside, &text), FI_EINVALID);
    CHECK(text == NULL);
    setenv("FIJIT_TEMPLATE_DIR", dir, 1);
    CHECK_RC(fi__template_load("../outside.cuh", &text), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "../outside.cuh") && strstr(fi_last_error(), "relative to templates/"));
    CHECK_RC(fi__template_load(outside, &text), FI_EINVALID);
    CHECK_RC(fi__template_load("decode/../decode/params.h", &text), FI_EINVALID);
    CHECK(text == NULL);
    CHECK_OK(fi__template_load("decode/params.h", &text));
    fi__free(text);

    /* The same from an #include in a template. */
    fi_jit_spec spec = parse_or_die("decode q=fp16 hd=128");
    fi_translation_unit tu;
    CHECK(write_file(dir, "decode/decode.cuh", "#include \"../outside.cuh\"\n", "a") == 0);
    int rc = fi__expand(&tu, &spec, NULL);
    unsetenv("FIJIT_TEMPLATE_DIR");
    CHECK_RC(rc, FI_EINVALID);
    CHECK(strstr(fi_last_error(), "bad template name '../outside.cuh'"));
    setenv("FIJIT_TEMPLATE_DIR", dir, 1);
    CHECK(copy_templates(dir) == 0);
    char line[4400];
    snprintf(line, sizeof line, "#include \"%s\"\n", outside);
    CHECK(write_file(dir, "decode/decode.cuh", line, "a") == 0);
    rc = fi__expand(&tu, &spec, NULL);
    unsetenv("FIJIT_TEMPLATE_DIR");
    CHECK_RC(rc, FI_EINVALID);
}

TEST(a_relative_include_in_a_subfolder_is_found_and_hashed)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/templates", check_tmpdir);
    CHECK(copy_templates(dir) == 0);
    /* decode/decode.cuh includes a header of another folder, which includes one
     * of a third: names are relative to templates/, whoever includes them. */
    CHECK(write_file(dir, "decode/decode.cuh", "#include \"extra/a.cuh\"\n", "a") == 0);
    CHECK(write_file(dir, "extra/a.cuh", "#pragma once\n#include \"extra/deeper/b.h\"\n", "w") == 0);
    CHECK(write_file(dir, "extra/deeper/b.h", "#pragma once\n// b\n", "w") == 0);
    setenv("FIJIT_TEMPLATE_DIR", dir, 1);
    fi_jit_spec spec = parse_or_die("decode q=fp16 hd=128");
    fi_translation_unit tu;
    int rc = fi__expand(&tu, &spec, NULL);
    unsetenv("FIJIT_TEMPLATE_DIR");
    CHECK_OK(rc);
    int found = tu_has(&tu, "extra/a.cuh") && tu_has(&tu, "extra/deeper/b.h") &&
                tu_has(&tu, "decode/params.h") && !tu_has(&tu, "prefill/params.h");
    fi__tu_free(&tu);
    CHECK(found);

    /* And the key covers it: one byte more in the deepest header changes it. */
    uint8_t a[16], b[16];
    setenv("FIJIT_TEMPLATE_DIR", dir, 1);
    rc = key_of(a, &spec);
    if (rc == 0 && write_file(dir, "extra/deeper/b.h", " ", "a") == 0) rc = key_of(b, &spec);
    unsetenv("FIJIT_TEMPLATE_DIR");
    CHECK_OK(rc);
    CHECK(memcmp(a, b, 16) != 0);
}

TEST(prefill_translation_units_hash_no_decode_header)
{
    static const char *const kinds[] = {"prefill q=fp16 hd=128 mask=causal",
                                        "batch_prefill_ragged q=bf16 hd=64",
                                        "batch_prefill_paged q=fp16 hd=256 pos=rope"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        fi_jit_spec spec = parse_or_die(kinds[i]);
        fi_translation_unit tu;
        CHECK_OK(fi__expand(&tu, &spec, NULL));
        int ok = tu_has(&tu, "prefill/params.h") && tu_has(&tu, "common/params.h");
        for (int h = 0; h < tu.header_count; h++)
            if (strncmp(tu.header_names[h], "decode/", 7) == 0) ok = 0;
        fi__tu_free(&tu);
        CHECK_MSG(ok, "%s: a decode header in its unit, or its params missing", kinds[i]);
    }
    fi_jit_spec spec = parse_or_die("batch_decode q=fp16 hd=128");
    fi_translation_unit tu;
    CHECK_OK(fi__expand(&tu, &spec, NULL));
    int ok = tu_has(&tu, "decode/params.h") && !tu_has(&tu, "prefill/params.h");
    fi__tu_free(&tu);
    CHECK(ok);
}

/* The Hopper loop's cycle trace (prefill/ws/trace.cuh, bench/ws_trace.py)
 * compiles where a template copy defines FIJIT_WS_TRACE, as the tool makes
 * it (1: every phase, on two tuples; 2: the waits alone, on one), so that
 * its hooks do not rot while no build uses them; and the define changes the
 * key, so such a copy never shares a cache entry with the real kernels. */
TEST(hopper_trace_hooks_compile_from_a_template_copy)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/templates_traced", check_tmpdir);
    CHECK(copy_templates(dir) == 0);
    char *text = NULL;
    CHECK_OK(fi__template_load("prefill/ws/trace.cuh", &text));
    char *once = strstr(text, "#pragma once\n");
    CHECK(once != NULL);
    size_t head = (size_t)(once - text) + strlen("#pragma once\n");
    CHECK(strlen(text) + 64 < 16384);

    static const struct {
        int mode;
        const char *spec;
    } cases[] = {{1, "batch_prefill_ragged q=fp16 hd=64 mask=causal"},
                 {1, "batch_prefill_paged q=fp16 hd=128"},
                 {2, "batch_prefill_ragged q=fp16 hd=64 mask=causal"}};
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char traced[16384];
        snprintf(traced, sizeof traced, "%.*s#define FIJIT_WS_TRACE %d\n%s", (int)head, text,
                 cases[i].mode, text + head);
        CHECK(write_file(dir, "prefill/ws/trace.cuh", traced, "w") == 0);
        fi_jit_spec spec = parse_or_die(cases[i].spec);
        uint8_t plain[16], with_trace[16];
        CHECK_OK(key_of(plain, &spec));
        setenv("FIJIT_TEMPLATE_DIR", dir, 1);
        int rc = key_of(with_trace, &spec);
        if (rc == 0) rc = fi_jit_prewarm(NULL, ctx, &spec, "sm_90a");
        unsetenv("FIJIT_TEMPLATE_DIR");
        CHECK_MSG(rc == 0, "%s with FIJIT_WS_TRACE %d: %s", cases[i].spec, cases[i].mode,
                  fi_last_error());
        CHECK(memcmp(plain, with_trace, 16) != 0);
    }
    fi__free(text);
    fi_jit_stats st = FI_JIT_STATS_INIT;
    CHECK_OK(fi_jit_stats_get(&st, ctx));
    fi_jit_ctx_free(ctx);
    /* Each in its two parts on sm_90a (src/kinds/prefill.c parts): the
     * define is in both, so both build anew. */
    CHECK(st.compiles == 3 * 2);
}
