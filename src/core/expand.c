/*
 * Builds the translation unit for a spec (see expand.h). The prelude only
 * fills in values; all logic stays in the C++ templates behind if constexpr.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/embedded.h"
#include "common/error.h"
#include "core/expand.h"
#include "kinds/registry.h"
#include "kinds/spec.h"
#include "common/sys.h"
#include "core/variant.h"

/* Largest template file accepted from FIJIT_TEMPLATE_DIR. */
#define FI_TEMPLATE_MAX_BYTES (4 << 20)

/* A template's name is its path relative to templates/ ("decode/decode.cuh"),
 * the same from whichever template includes it: components of letters,
 * digits, '_', '-' and '.', none empty or starting with '.' (so no "..", no
 * hidden files), never absolute. A name that could reach outside the
 * templates (FIJIT_TEMPLATE_DIR/../x, /etc/x) is refused, not looked up. */
int fi__template_name_ok(const char *name)
{
    if (!*name || strlen(name) > FI_TEMPLATE_NAME_MAX) return 0;
    for (const char *p = name, *part = name; ; p++) {
        if (*p == '/' || *p == '\0') {
            if (p == part || part[0] == '.') return 0; /* "", "//", ".", "..", ".hidden" */
            if (*p == '\0') return 1;
            part = p + 1;
        } else if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '-') {
            return 0;
        }
    }
}

int fi__template_load(const char *name, char **out)
{
    *out = NULL;
    if (!fi__template_name_ok(name))
        return fi__error(FI_EINVALID,
                         "bad template name '%.96s' in #include: a path relative to templates/ "
                         "(no '..', '.' or empty parts, not absolute)",
                         name);
    const char *dir = getenv("FIJIT_TEMPLATE_DIR");
    if (dir && *dir) {
        char path[4096];
        size_t size;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        return fi__read_file(path, (void **)out, &size, FI_TEMPLATE_MAX_BYTES);
    }
    for (int i = 0; i < fi__template_count; i++) {
        if (strcmp(fi__templates[i].name, name) == 0) {
            if (!(*out = fi__malloc((size_t)fi__templates[i].size + 1)))
                return fi__error(FI_ENOMEM, "out of memory loading template %s", name);
            memcpy(*out, fi__templates[i].text, (size_t)fi__templates[i].size);
            (*out)[fi__templates[i].size] = '\0';
            return 0;
        }
    }
    return fi__error(FI_ENOTFOUND, "template '%s' is not part of this fijit build", name);
}

static const char *dtype_type(int dtype)
{
    switch (dtype) {
    case FI_DTYPE_BF16: return "fijit::bf16_t";
    case FI_DTYPE_FP8_E4M3: return "fijit::fp8_e4m3_t";
    case FI_DTYPE_FP8_E5M2: return "fijit::fp8_e5m2_t";
    default: return "fijit::half_t";
    }
}

/* Growable string with a sticky allocation failure. */
typedef struct fi_text {
    char *data;
    size_t len, cap;
    int failed;
} fi_text;

static void text_add(fi_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(fi_text *t, const char *fmt, ...)
{
    if (t->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->data && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
        char *grown = fi__realloc(t->data, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
}

static int has_header(const fi_translation_unit *tu, const char *name)
{
    for (int i = 0; i < tu->header_count; i++)
        if (strcmp(tu->header_names[i], name) == 0) return 1;
    return 0;
}

/* Add every header that `text` includes with #include "name", recursively.
 * Names are paths relative to templates/ whichever template includes them
 * (as with -Itemplates), so a header has one name and is hashed once. */
static int collect_includes(fi_translation_unit *tu, const char *text, int depth)
{
    int rc = 0;
    if (depth > 8) return fi__error(FI_EINVALID, "templates include each other too deeply");
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p++ != '#') continue;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "include", 7) != 0) continue;
        p += 7;
        while (*p == ' ' || *p == '\t') p++;
        if (*p++ != '"') continue; /* <...> includes are not ours; NVRTC resolves builtins */
        const char *end = strchr(p, '"');
        if (!end || end - p > FI_TEMPLATE_NAME_MAX) continue;
        char name[FI_TEMPLATE_NAME_MAX + 1];
        memcpy(name, p, (size_t)(end - p));
        name[end - p] = '\0';
        if (has_header(tu, name)) continue;
        if (tu->header_count == FI_TU_MAX_HEADERS)
            return fi__error(FI_EINVALID, "too many template headers (max %d)", FI_TU_MAX_HEADERS);
        char *header_text = NULL;
        FI_TRY(fi__template_load(name, &header_text));
        char *header_name = fi__strdup(name);
        if (!header_name) {
            fi__free(header_text);
            return fi__error(FI_ENOMEM, "out of memory expanding templates");
        }
        tu->header_names[tu->header_count] = header_name;
        tu->header_texts[tu->header_count++] = header_text;
        FI_TRY(collect_includes(tu, header_text, depth + 1));
    }
out:
    return rc;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sort headers by name so the key never depends on discovery order. */
static void sort_headers(fi_translation_unit *tu)
{
    char *pairs[FI_TU_MAX_HEADERS][2];
    for (int i = 0; i < tu->header_count; i++) {
        pairs[i][0] = tu->header_names[i];
        pairs[i][1] = tu->header_texts[i];
    }
    qsort(pairs, (size_t)tu->header_count, sizeof pairs[0], compare_names);
    for (int i = 0; i < tu->header_count; i++) {
        tu->header_names[i] = pairs[i][0];
        tu->header_texts[i] = pairs[i][1];
    }
}

int fi__expand(fi_translation_unit *out, const fi_jit_spec *spec, const fi_variant *variant)
{
    return fi__expand_part(out, spec, variant, 0);
}

int fi__expand_part(fi_translation_unit *out, const fi_jit_spec *spec, const fi_variant *variant,
                    unsigned entry_mask)
{
    int rc = 0;
    fi_text t = {0};
    memset(out, 0, sizeof *out);
    const fi_kind_info *kind = fi__kind_info(spec->kind);
    if (!kind) return fi__error(FI_EUNSUPPORTED, "kernel kind %d is not implemented", spec->kind);
    snprintf(out->name, sizeof out->name, "fijit_%s_hd%d.cu", kind->name, spec->head_dim);

    text_add(&t, "// Generated by fijit for one kernel tuple; the templates hold the logic.\n");
    /* Only what every kind shares: each kind's template includes its own
     * params header, so a kind's key never hashes another kind's. */
    text_add(&t, "#include \"common/fijit_common.cuh\"\n#include \"common/params.h\"\n");
    text_add(&t, "namespace fijit_cfg {\n");
    text_add(&t, "using DTypeQ = %s;\nusing DTypeKV = %s;\nusing DTypeO = %s;\n",
             dtype_type(spec->q_dtype), dtype_type(spec->kv_dtype), dtype_type(spec->o_dtype));
    text_add(&t, "constexpr int kHeadDim = %d;\n", spec->head_dim);
    /* Only where it differs (MLA's prefill), so that no other tuple's text,
     * and so key, changes; the templates default it to kHeadDim. */
    if (fi__spec_head_dim_vo(spec) != spec->head_dim)
        text_add(&t, "constexpr int kHeadDimVO = %d;  // v and o\n", fi__spec_head_dim_vo(spec));
    text_add(&t, "enum : int { kMaskNone = %d, kMaskCausal = %d, kMaskWindow = %d, kMaskCustom = %d };\n",
             FI_MASK_NONE, FI_MASK_CAUSAL, FI_MASK_WINDOW, FI_MASK_CUSTOM);
    text_add(&t, "enum : int { kPosNone = %d, kPosRopeLlama = %d, kPosAlibi = %d };\n", FI_POS_NONE,
             FI_POS_ROPE_LLAMA, FI_POS_ALIBI);
    text_add(&t, "constexpr int kMask = %d;  // %s\n", spec->mask, fi__mask_name(spec->mask));
    text_add(&t, "constexpr int kPos = %d;  // %s\n", spec->pos, fi__pos_name(spec->pos));
    text_add(&t, "constexpr bool kSoftCap = %s;\n", spec->soft_cap ? "true" : "false");
    /* The variant's declared launch parameters, in the layout the host packs
     * (src/core/variant.c: fi__variant_pack); empty for the built-in variant. */
    text_add(&t, "struct VariantParams {\n");
    for (int i = 0; variant && i < variant->param_count; i++)
        text_add(&t, "    %s %s;  // offset %u\n", variant->params[i].c_type, variant->params[i].name,
                 variant->params[i].offset);
    text_add(&t, "};\n}  // namespace fijit_cfg\n");
    if (variant) {
        /* The snippet defines fijit_cfg::Variant inside the namespace we open
         * (its brackets were checked to balance); #line maps NVRTC's messages
         * to the snippet's own lines. */
        text_add(&t, "#define FIJIT_CUSTOM_VARIANT 1\n#include \"common/variant.cuh\"\n");
        text_add(&t, "namespace fijit_cfg {\n#line 1 \"%s.cuh\"\n%s\n", variant->name, variant->source);
        text_add(&t, "#line 1 \"fijit_after_variant\"\n}  // namespace fijit_cfg\n");
    } else {
        text_add(&t, "#include \"common/variant.cuh\"\n");
    }
    if (entry_mask)
        text_add(&t, "#define FIJIT_ENTRY_MASK 0x%xu  // kernels built here; the others are stubs\n",
                 entry_mask);
    text_add(&t, "#include \"%s\"\n", kind->template_name);
    if (t.failed) FI_FAIL(FI_ENOMEM, "out of memory generating the translation unit");
    out->text = t.data;
    t.data = NULL;
    FI_TRY(collect_includes(out, out->text, 0));
    sort_headers(out);
out:
    fi__free(t.data);
    if (rc < 0) fi__tu_free(out);
    return rc;
}

void fi__tu_free(fi_translation_unit *tu)
{
    if (!tu) return;
    fi__free(tu->text);
    for (int i = 0; i < tu->header_count; i++) {
        fi__free(tu->header_names[i]);
        fi__free(tu->header_texts[i]);
    }
    memset(tu, 0, sizeof *tu);
}
