/*
 * Spec strings: "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0"
 * (plus " variant=NAME" for a user variant, and " hd_vo=N" where v and o have
 * a head dim other than q and k's). The first word is the kind; the fields
 * follow in any order, each at most once. Formatting writes every field in
 * the order above, hd_vo only when it differs from hd, so the formatted text
 * is canonical, round-trips, and is the same as before hd_vo existed for
 * every spec without one.
 */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kinds/registry.h"
#include "kinds/names.h"
#include "kinds/spec.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int parse_int(int *out, const char *field, const char *value, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (!*value || *end || errno || n < lo || n > hi)
        return fi__error(FI_EINVALID, "bad value '%.64s' for %s (expected an integer %ld..%ld)",
                         value, field, lo, hi);
    *out = (int)n;
    return 0;
}

int fi__variant_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > FI_VARIANT_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-') return 0;
    return 1;
}

/* Compute capability of a checked arch ("sm_90a" -> 90, "sm_100" -> 100) and
 * whether it is the arch-specific target. */
static int arch_number(const char *arch, int *specific)
{
    int n = 0;
    const char *p = arch + 3;
    while (isdigit((unsigned char)*p)) n = n * 10 + (*p++ - '0');
    *specific = *p == 'a';
    return n;
}

int fi__arch_runs_on(const char *arch, const char *device)
{
    int arch_specific, device_specific;
    const int a = arch_number(arch, &arch_specific), d = arch_number(device, &device_specific);
    if (arch_specific) return a == d && device_specific;
    return a / 10 == d / 10 && a % 10 <= d % 10;
}

/* Fields of a spec string, in canonical order; `seen` bits catch repeats. */
enum {
    F_Q = 1, F_KV = 2, F_O = 4, F_HD = 8, F_MASK = 16, F_POS = 32, F_SOFTCAP = 64, F_VARIANT = 128,
    F_HD_VO = 256
};

static int parse_field(fi_jit_spec *spec, unsigned *seen, char *out_variant,
                       size_t out_variant_size, const char *key, const char *value)
{
    static const struct {
        const char *name;
        unsigned bit;
    } fields[] = {{"q", F_Q},       {"kv", F_KV},   {"o", F_O},
                  {"hd", F_HD},     {"mask", F_MASK}, {"pos", F_POS},
                  {"softcap", F_SOFTCAP}, {"variant", F_VARIANT}, {"hd_vo", F_HD_VO}};
    unsigned bit = 0;
    for (int i = 0; i < COUNT(fields); i++)
        if (strcmp(fields[i].name, key) == 0) bit = fields[i].bit;
    if (!bit)
        return fi__error(FI_EINVALID,
                         "unknown field '%.32s' (fields: q, kv, o, hd, mask, pos, softcap, "
                         "variant, hd_vo)",
                         key);
    if (*seen & bit) return fi__error(FI_EINVALID, "field '%s' given twice", key);
    *seen |= bit;
    switch (bit) {
    case F_Q: return fi__dtype_parse((int *)&spec->q_dtype, key, value);
    case F_KV: return fi__dtype_parse((int *)&spec->kv_dtype, key, value);
    case F_O: return fi__dtype_parse((int *)&spec->o_dtype, key, value);
    case F_HD: return parse_int(&spec->head_dim, key, value, 1, 4096);
    case F_MASK: return fi__mask_parse((int *)&spec->mask, key, value);
    case F_POS: return fi__pos_parse((int *)&spec->pos, key, value);
    case F_SOFTCAP: return parse_int(&spec->soft_cap, key, value, 0, 1);
    case F_HD_VO: return parse_int(&spec->head_dim_vo, key, value, 0, 4096); /* 0: = hd */
    default:
        if (!fi__variant_name_ok(value))
            return fi__error(FI_EINVALID,
                             "bad variant name '%.64s' (1-%d letters, digits, '_' or '-')", value,
                             FI_VARIANT_NAME_MAX);
        if (!out_variant || strlen(value) >= out_variant_size)
            return fi__error(FI_EINVALID, "no room for variant name '%s'", value);
        strcpy(out_variant, value);
        spec->variant = strcmp(value, "default") == 0 ? NULL : out_variant;
        return 0;
    }
}

int fi_jit_spec_parse(fi_jit_spec *out, char *out_variant, size_t out_variant_size,
                      const char *text)
{
    int rc = 0;
    char words[1024];
    char *save = NULL;
    unsigned seen = 0;
    fi_jit_spec spec = FI_JIT_SPEC_INIT;
    if (!out || !text) return fi__error(FI_EINVALID, "fi_jit_spec_parse: NULL argument");
    if (strlen(text) >= sizeof words)
        return fi__error(FI_EINVALID, "spec string too long (%zu bytes)", strlen(text));
    strcpy(words, text);
    char *word = strtok_r(words, " \t\r\n", &save);
    if (!word) return fi__error(FI_EINVALID, "empty spec string");
    FI_TRY(fi__kind_parse((int *)&spec.kind, word));
    /* A kind of one head dim (mla_decode's 512) needs no hd=. */
    const int *dims = fi__kind_info(spec.kind)->head_dims;
    if (dims[0] && !dims[1]) spec.head_dim = dims[0];
    while ((word = strtok_r(NULL, " \t\r\n", &save))) {
        char *eq = strchr(word, '=');
        if (!eq || eq == word || !eq[1])
            FI_FAIL(FI_EINVALID, "bad spec field '%.64s' (expected name=value)", word);
        *eq = '\0';
        FI_TRY(parse_field(&spec, &seen, out_variant, out_variant_size, word, eq + 1));
    }
    if (!(seen & F_KV)) spec.kv_dtype = spec.q_dtype;
    if (!(seen & F_O)) spec.o_dtype = spec.q_dtype;
    *out = spec;
out:
    return rc;
}

int fi_jit_spec_format(char *out, size_t out_size, const fi_jit_spec *spec)
{
    int rc = fi_jit_spec_check(spec);
    if (rc < 0) return rc;
    char hd_vo[24] = "";
    if (fi__spec_head_dim_vo(spec) != spec->head_dim)
        snprintf(hd_vo, sizeof hd_vo, " hd_vo=%d", fi__spec_head_dim_vo(spec));
    int n = snprintf(out, out_size, "%s q=%s kv=%s o=%s hd=%d mask=%s pos=%s softcap=%d%s%s%s",
                     fi__kind_name(spec->kind), fi__dtype_name(spec->q_dtype),
                     fi__dtype_name(spec->kv_dtype), fi__dtype_name(spec->o_dtype),
                     spec->head_dim, fi__mask_name(spec->mask), fi__pos_name(spec->pos),
                     spec->soft_cap, spec->variant ? " variant=" : "",
                     spec->variant ? spec->variant : "", hd_vo);
    if (n < 0 || (size_t)n >= out_size)
        return fi__error(FI_EINVALID, "spec text needs %d bytes, buffer has %zu", n + 1, out_size);
    return n;
}

int fi_jit_spec_check(const fi_jit_spec *spec)
{
    char names[160];
    fi_jit_spec full;
    if (!spec) return fi__error(FI_EINVALID, "spec is NULL");
    if (spec->version < 1 || spec->version > FI_JIT_SPEC_VERSION)
        return fi__error(FI_EINVALID, "spec.version is %u, this library accepts 1 to %d",
                         spec->version, FI_JIT_SPEC_VERSION);
    const fi_kind_info *kind = fi__kind_info(spec->kind);
    if (!kind) return fi__error(FI_EINVALID, "unknown kernel kind %d", (int)spec->kind);
    if (!fi__dtype_name(spec->q_dtype) || !fi__dtype_name(spec->kv_dtype) ||
        !fi__dtype_name(spec->o_dtype))
        return fi__error(FI_EINVALID, "unknown dtype in q/kv/o (%d/%d/%d; expected %s)",
                         (int)spec->q_dtype, (int)spec->kv_dtype, (int)spec->o_dtype,
                         fi__dtype_names(names, sizeof names));
    if (!fi__mask_name(spec->mask))
        return fi__error(FI_EINVALID, "mask %d is not valid (%s)", (int)spec->mask,
                         fi__mask_names(names, sizeof names));
    if (!fi__pos_name(spec->pos))
        return fi__error(FI_EINVALID, "pos encoding %d is not valid (supported: %s)",
                         (int)spec->pos, fi__pos_names(names, sizeof names));
    if (spec->soft_cap != 0 && spec->soft_cap != 1)
        return fi__error(FI_EINVALID, "soft_cap is %d (expected 0 or 1)", spec->soft_cap);
    if (fi__spec_has_variant(spec) && !fi__variant_name_ok(spec->variant))
        return fi__error(FI_EINVALID, "bad variant name '%.64s' (1-%d letters, digits, '_' or '-')",
                         spec->variant, FI_VARIANT_NAME_MAX);
    fi__spec_copy(&full, spec);
    if (full.head_dim_vo < 0)
        return fi__error(FI_EINVALID, "head_dim_vo is %d (expected 0: equal to head_dim, or a "
                         "head dim)", full.head_dim_vo);
    return kind->check(&full);
}

void fi__spec_copy(fi_jit_spec *out, const fi_jit_spec *spec)
{
    /* A version 1 caller's struct ends before head_dim_vo: read no further. */
    const size_t v1_size = offsetof(fi_jit_spec, variant) + sizeof spec->variant;
    if (spec->version >= 2) {
        *out = *spec;
    } else {
        memset(out, 0, sizeof *out);
        memcpy(out, spec, v1_size);
    }
    if (out->head_dim_vo == out->head_dim) out->head_dim_vo = 0;
    out->version = FI_JIT_SPEC_VERSION;
}

int fi__spec_head_dim_vo(const fi_jit_spec *spec)
{
    return spec->version >= 2 && spec->head_dim_vo > 0 ? spec->head_dim_vo : spec->head_dim;
}

int fi__spec_has_variant(const fi_jit_spec *spec)
{
    return spec->variant && strcmp(spec->variant, "default") != 0;
}

int fi__spec_key(fi_spec_key *out, const fi_jit_spec *spec)
{
    int rc = fi_jit_spec_check(spec);
    if (rc < 0) return rc;
    memset(out, 0, sizeof *out);
    out->kind = spec->kind;
    out->q_dtype = spec->q_dtype;
    out->kv_dtype = spec->kv_dtype;
    out->o_dtype = spec->o_dtype;
    out->head_dim = spec->head_dim;
    out->mask = spec->mask;
    out->pos = spec->pos;
    out->soft_cap = spec->soft_cap;
    if (fi__spec_head_dim_vo(spec) != spec->head_dim) out->head_dim_vo = fi__spec_head_dim_vo(spec);
    if (fi__spec_has_variant(spec)) strcpy(out->variant, spec->variant);
    return 0;
}
