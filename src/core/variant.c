/* Parsing and checking of user variant snippets (see variant.h). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/error.h"
#include "common/params.h"
#include "kinds/spec.h"
#include "common/sys.h"
#include "core/variant.h"

static const struct {
    const char *spelling; /* spaces removed */
    const char *c_type;
    fi_variant_param_type type;
    unsigned size;
} param_types[] = {
    {"float", "float", FI_VPARAM_FLOAT, 4},
    {"int", "int", FI_VPARAM_INT, 4},
    {"constfloat*", "const float*", FI_VPARAM_PTR, 8},
    {"constint*", "const int*", FI_VPARAM_PTR, 8},
    {"float*", "float*", FI_VPARAM_PTR, 8},
    {"int*", "int*", FI_VPARAM_PTR, 8},
};

/* Where a snippet's messages point: the file as the user gave it, else "<name>.cuh". */
static const char *origin_of(const fi_variant *v) { return v->origin; }

static int identifier_ok(const char *s)
{
    if (!*s || strlen(s) >= 32 || !(isalpha((unsigned char)*s) || *s == '_')) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return 0;
    return 1;
}

/* "//! param <type> <name>": the type may contain spaces and '*'. */
static int parse_param(fi_variant *v, const char *text, int line)
{
    char type[64] = "", name[64] = "";
    size_t n = strlen(text), end = n;
    while (end > 0 && isspace((unsigned char)text[end - 1])) end--;
    size_t start = end;
    while (start > 0 && (isalnum((unsigned char)text[start - 1]) || text[start - 1] == '_')) start--;
    if (start == end || end - start >= sizeof name)
        return fi__error(FI_EINVALID, "%s:%d: parameter declaration needs a name", origin_of(v), line);
    memcpy(name, text + start, end - start);
    for (size_t i = 0, t = 0; i < start && t + 1 < sizeof type; i++)
        if (!isspace((unsigned char)text[i])) type[t++] = text[i];
    if (!identifier_ok(name))
        return fi__error(FI_EINVALID, "%s:%d: bad parameter name '%s'", origin_of(v), line, name);
    for (int i = 0; i < v->param_count; i++)
        if (strcmp(v->params[i].name, name) == 0)
            return fi__error(FI_EINVALID, "%s:%d: parameter '%s' declared twice", origin_of(v), line, name);
    if (v->param_count == FI_VARIANT_MAX_PARAMS)
        return fi__error(FI_EINVALID, "%s:%d: more than %d parameters", origin_of(v), line,
                         FI_VARIANT_MAX_PARAMS);
    for (size_t i = 0; i < sizeof param_types / sizeof param_types[0]; i++) {
        if (strcmp(param_types[i].spelling, type) != 0) continue;
        fi_variant_param *p = &v->params[v->param_count++];
        snprintf(p->name, sizeof p->name, "%.31s", name); /* identifier_ok: < 32 */
        snprintf(p->c_type, sizeof p->c_type, "%s", param_types[i].c_type);
        p->type = param_types[i].type;
        p->size = param_types[i].size;
        p->offset = (v->params_bytes + p->size - 1) / p->size * p->size;
        v->params_bytes = p->offset + p->size;
        return 0;
    }
    return fi__error(FI_EINVALID,
                     "%s:%d: parameter '%s' has unsupported type '%s' (float, int, const float*, const int*, float*, int*)",
                     origin_of(v), line, name, type);
}

/* Directives a snippet may use. Everything else is refused: #include and its
 * kin (#include_next, #import, #embed) would compile a file whose bytes are
 * not in the key (an edit would reuse a stale cubin) and could copy its text
 * into error messages; #line would misplace messages. */
static const char *const allowed_directives[] = {
    "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
    "error", "warning", "pragma",
};

/* Pragmas that only steer code generation or diagnostics. */
static int pragma_allowed(const char *name)
{
    return strcmp(name, "unroll") == 0 || strcmp(name, "nounroll") == 0 ||
           strncmp(name, "nv_diag_", 8) == 0 || strncmp(name, "diag_", 5) == 0;
}

/* Identifiers that reach files from inside an expression. */
static int identifier_refused(const char *id)
{
    return strcmp(id, "__has_include") == 0 || strcmp(id, "__has_include_next") == 0 ||
           strcmp(id, "__has_embed") == 0 || strcmp(id, "_Pragma") == 0 ||
           strcmp(id, "__pragma") == 0;
}

/* A backslash-newline (line splice) at p: its length, else 0. */
static int splice_at(const char *p)
{
    if (p[0] != '\\') return 0;
    if (p[1] == '\n') return 2;
    if (p[1] == '\r' && p[2] == '\n') return 3;
    return 0;
}

/* Skip spaces, tabs, block comments and line splices inside a directive line. */
static const char *skip_directive_space(const char *p, int *line)
{
    for (;;) {
        int n = splice_at(p);
        if (n) {
            p += n;
            ++*line;
        } else if (*p == ' ' || *p == '\t' || *p == '\f' || *p == '\v' || *p == '\r') {
            p++;
        } else if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                if (*p == '\n') ++*line;
            if (*p) p += 2;
        } else {
            return p;
        }
    }
}

/* Read an identifier at p (line splices inside it are part of it, as for
 * the compiler) into out (truncated to size-1). Returns the end. */
static const char *read_identifier(const char *p, char *out, size_t size, int *line)
{
    size_t n = 0;
    for (;;) {
        int sp = splice_at(p);
        if (sp) {
            p += sp;
            ++*line;
            continue;
        }
        if (!isalnum((unsigned char)*p) && *p != '_') break;
        if (n + 1 < size) out[n++] = *p;
        p++;
    }
    out[n] = '\0';
    return p;
}

/* A directive starts at p (after its '#', '%:' or '??='): refuse what a
 * snippet may not use. */
static int check_directive(const fi_variant *v, const char *p, int line)
{
    char name[64], sub[64] = "";
    int at = line;
    p = skip_directive_space(p, &at);
    if (!isalpha((unsigned char)*p) && *p != '_') return 0; /* the null directive, or a number */
    p = read_identifier(p, name, sizeof name, &at);
    if (strcmp(name, "line") == 0)
        return fi__error(FI_ECOMPILE, "%s:%d: #line is not allowed in a variant", origin_of(v), line);
    if (strcmp(name, "pragma") == 0) {
        p = skip_directive_space(p, &at);
        read_identifier(p, sub, sizeof sub, &at);
        if (sub[0] && !pragma_allowed(sub))
            return fi__error(FI_ECOMPILE,
                             "%s:%d: #pragma %s is not allowed in a variant (allowed: unroll, "
                             "nounroll, nv_diag_*)", origin_of(v), line, sub);
        return 0;
    }
    for (size_t i = 0; i < sizeof allowed_directives / sizeof *allowed_directives; i++)
        if (strcmp(name, allowed_directives[i]) == 0) return 0;
    if (strncmp(name, "include", 7) == 0 || strcmp(name, "import") == 0 ||
        strcmp(name, "embed") == 0)
        return fi__error(FI_ECOMPILE,
                         "%s:%d: #%s is not allowed in a variant: a snippet is one self-contained "
                         "text (fijit's headers are already included; the bytes of any other "
                         "file would not be part of the cache key)", origin_of(v), line, name);
    return fi__error(FI_ECOMPILE, "%s:%d: #%s is not allowed in a variant", origin_of(v), line,
                     name);
}

/* Find "//! param" directives; check that (), [] and {} balance outside
 * comments, string and character literals; refuse preprocessor access to
 * files; and find the definition of Variant. */
static int scan_source(fi_variant *v)
{
    char open_stack[256];
    int open_line[256], depth = 0, braces = 0, line = 1, rc = 0;
    int line_start = 1;      /* only spaces and comments so far on this (logical) line */
    int defines_variant = 0; /* `struct|class|using Variant`, or a typedef naming it, at file scope */
    int typedef_open = 0;    /* a file-scope typedef whose ';' has not come yet */
    char previous[64] = "";  /* the last identifier */
    const char *s = v->source;
    for (const char *p = s; *p; p++) {
        int splice = splice_at(p);
        if (splice) {
            p += splice - 1;
            line++;
            continue;
        }
        if (*p == '\n') {
            line++;
            line_start = 1;
            continue;
        }
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v') continue;
        if (p[0] == '/' && p[1] == '/') {
            if (strncmp(p, "//! param ", 10) == 0) {
                char text[128];
                const char *eol = strchr(p, '\n');
                size_t len = eol ? (size_t)(eol - p - 10) : strlen(p + 10);
                if (len >= sizeof text)
                    return fi__error(FI_EINVALID, "%s:%d: parameter declaration too long", origin_of(v), line);
                memcpy(text, p + 10, len);
                text[len] = '\0';
                if ((rc = parse_param(v, text, line)) < 0) return rc;
            }
            while (p[1] && p[1] != '\n') p++;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                if (*p == '\n') line++;
            if (!*p) return fi__error(FI_ECOMPILE, "%s:%d: unterminated comment", origin_of(v), line);
            p++;
            continue;
        }
        /* Token pasting could assemble __has_include (or a pragma's words)
         * out of pieces no check can see. */
        const char *next = p + 1;
        while (splice_at(next)) next += splice_at(next);
        if ((*p == '#' && *next == '#') || (strncmp(p, "%:", 2) == 0 && strncmp(p + 2, "%:", 2) == 0))
            return fi__error(FI_ECOMPILE, "%s:%d: token pasting (##) is not allowed in a variant",
                             origin_of(v), line);
        /* The length of '#', its digraph '%:' or its trigraph, first on a line. */
        int directive = !line_start ? 0 : *p == '#' ? 1 : strncmp(p, "%:", 2) == 0 ? 2
                      : strncmp(p, "?" "?=", 3) == 0 ? 3 : 0;
        line_start = 0;
        if (directive) {
            if ((rc = check_directive(v, p + directive, line)) < 0) return rc;
            p += directive - 1;
            continue;
        }
        if (*p == '"' || *p == '\'') {
            char quote = *p;
            for (p++; *p && *p != quote && *p != '\n'; p++)
                if (*p == '\\' && p[1]) {
                    if (p[1] == '\n') line++;
                    p++;
                }
            if (*p != quote)
                return fi__error(FI_ECOMPILE, "%s:%d: unterminated %s literal", origin_of(v), line,
                                 quote == '"' ? "string" : "character");
            continue;
        }
        if (isalpha((unsigned char)*p) || *p == '_') {
            char id[64];
            int at = line;
            const char *end = read_identifier(p, id, sizeof id, &line);
            if (identifier_refused(id))
                return fi__error(FI_ECOMPILE, "%s:%d: %s is not allowed in a variant (a snippet may "
                                 "not reach other files)", origin_of(v), at, id);
            if (braces == 0) {
                if (strcmp(id, "typedef") == 0) typedef_open = 1;
                if (strcmp(id, "Variant") == 0 &&
                    (strcmp(previous, "struct") == 0 || strcmp(previous, "class") == 0 ||
                     strcmp(previous, "using") == 0 || typedef_open))
                    defines_variant = 1;
            }
            snprintf(previous, sizeof previous, "%s", id);
            p = end - 1;
            continue;
        }
        previous[0] = '\0';
        if (*p == ';' && braces == 0) typedef_open = 0;
        if (*p == '(' || *p == '[' || *p == '{') {
            if (depth == (int)sizeof open_stack)
                return fi__error(FI_ECOMPILE, "%s:%d: nesting too deep", origin_of(v), line);
            open_line[depth] = line;
            open_stack[depth++] = *p;
            braces += *p == '{';
        } else if (*p == ')' || *p == ']' || *p == '}') {
            char want = *p == ')' ? '(' : *p == ']' ? '[' : '{';
            if (depth == 0 || open_stack[depth - 1] != want)
                return fi__error(FI_ECOMPILE, "%s:%d: unbalanced '%c' (no matching '%c' in the variant)",
                                 origin_of(v), line, *p, want);
            depth--;
            braces -= *p == '}';
        }
    }
    if (depth > 0)
        return fi__error(FI_ECOMPILE, "%s:%d: unbalanced '%c' (not closed in the variant)", origin_of(v),
                         open_line[depth - 1], open_stack[depth - 1]);
    if (!defines_variant)
        return fi__error(FI_ECOMPILE,
                         "%s: the snippet defines no struct Variant (a variant defines "
                         "`struct Variant : fijit::DefaultVariant { ... };` and overrides the hooks "
                         "it needs)", origin_of(v));
    return 0;
}

int fi__variant_new(fi_variant **out, const char *name, const char *source)
{
    return fi__variant_new_as(out, name, source, NULL);
}

int fi__variant_new_as(fi_variant **out, const char *name, const char *source, const char *origin)
{
    int rc = 0;
    fi_variant *v = NULL;
    *out = NULL;
    if (!fi__variant_name_ok(name) || strcmp(name, "default") == 0)
        return fi__error(FI_EINVALID,
                         "bad variant name '%.64s' (1-%d letters, digits, '_' or '-'; 'default' is built in)",
                         name ? name : "(null)", FI_VARIANT_NAME_MAX);
    if (!source) return fi__error(FI_EINVALID, "variant '%s': source is NULL", name);
    size_t size = strlen(source);
    if (size > FI_VARIANT_MAX_SOURCE)
        return fi__error(FI_EINVALID, "variant '%s' is %zu bytes (limit %d)", name, size,
                         FI_VARIANT_MAX_SOURCE);
    if (!(v = fi__calloc(1, sizeof *v)) || !(v->source = fi__strdup(source)))
        FI_FAIL(FI_ENOMEM, "out of memory registering variant '%s'", name);
    snprintf(v->name, sizeof v->name, "%s", name);
    if (origin && *origin) {
        v->origin = fi__strdup(origin);
    } else if ((v->origin = fi__malloc(strlen(name) + 5))) {
        snprintf(v->origin, strlen(name) + 5, "%s.cuh", name);
    }
    if (!v->origin) FI_FAIL(FI_ENOMEM, "out of memory registering variant '%s'", name);
    v->hash = XXH3_64bits(source, size);
    FI_TRY(scan_source(v));
    *out = v;
    v = NULL;
out:
    fi__variant_free(v);
    return rc;
}

void fi__variant_free(fi_variant *v)
{
    if (!v) return;
    fi__free(v->source);
    fi__free(v->origin);
    fi__free(v);
}

_Static_assert(FI_VARIANT_MAX_PARAMS * 8 <= FI_VARIANT_PARAM_WORDS * 8,
               "the params structs hold every declared parameter");

static const char *arg_type_name(int type)
{
    return type == FI_VARG_FLOAT ? "FI_VARG_FLOAT" : type == FI_VARG_INT ? "FI_VARG_INT"
           : type == FI_VARG_PTR ? "FI_VARG_PTR" : "an unknown type";
}

/* "a (float), b (const int*)" into buf. */
static void describe_params(const fi_variant *v, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->param_count && used < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%s (%s)", i ? ", " : "", v->params[i].name,
                         v->params[i].c_type);
        if (n < 0) break;
        used += (size_t)n;
    }
}

int fi__variant_pack(const fi_variant *v, const char *who, const fi_variant_arg *args, int count,
                     unsigned long long *out)
{
    char declared[FI_VARIANT_MAX_PARAMS * 64];
    unsigned char *bytes = (unsigned char *)out;
    memset(out, 0, FI_VARIANT_PARAM_WORDS * sizeof *out);
    if (count < 0 || (count > 0 && !args))
        return fi__error(FI_EINVALID, "%s: variant_args is %s with num_variant_args %d", who,
                         args ? "set" : "NULL", count);
    if (!v) {
        if (count == 0) return 0;
        return fi__error(FI_EINVALID,
                         "%s: %d variant_args given, but the spec uses the built-in variant, which declares no parameters",
                         who, count);
    }
    describe_params(v, declared, sizeof declared);
    if (count != v->param_count)
        return fi__error(FI_EINVALID, "%s: variant '%s' declares %d parameters%s%s; %d values given", who,
                         v->name, v->param_count, v->param_count ? ": " : "", declared, count);
    for (int i = 0; i < count; i++) {
        const fi_variant_arg *a = &args[i];
        const fi_variant_param *param = NULL;
        if (!a->name) return fi__error(FI_EINVALID, "%s: variant_args[%d].name is NULL", who, i);
        for (int j = 0; j < v->param_count && !param; j++)
            if (strcmp(v->params[j].name, a->name) == 0) param = &v->params[j];
        if (!param)
            return fi__error(FI_EINVALID, "%s: variant '%s' has no parameter '%.40s' (it declares: %s)", who,
                             v->name, a->name, declared);
        for (int j = 0; j < i; j++)
            if (strcmp(args[j].name, a->name) == 0)
                return fi__error(FI_EINVALID, "%s: variant parameter '%s' is given twice", who, a->name);
        if ((int)a->type != (int)param->type)
            return fi__error(FI_EINVALID, "%s: variant parameter '%s' is declared '%s' but given as %s", who,
                             param->name, param->c_type, arg_type_name(a->type));
        switch (param->type) {
        case FI_VPARAM_FLOAT:
            memcpy(bytes + param->offset, &a->value.f, sizeof a->value.f);
            break;
        case FI_VPARAM_INT:
            memcpy(bytes + param->offset, &a->value.i, sizeof a->value.i);
            break;
        case FI_VPARAM_PTR:
            if ((uintptr_t)a->value.ptr % 4 != 0)
                return fi__error(FI_EINVALID, "%s: variant parameter '%s' (%s) = %p is not 4-byte aligned", who,
                                 param->name, param->c_type, a->value.ptr);
            memcpy(bytes + param->offset, &a->value.ptr, sizeof a->value.ptr);
            break;
        }
    }
    return 0;
}

int fi__variant_annotate_log(const fi_variant *v, const char *log, char **out)
{
    char tag[80];
    snprintf(tag, sizeof tag, "%s.cuh(", v->name);
    size_t tags = 0, tag_len = strlen(tag), origin_len = strlen(v->origin);
    for (const char *t = strstr(log, tag); t; t = strstr(t + 1, tag)) tags++;
    /* Room for the log, a quoted line under each, and the origin for each tag. */
    size_t cap = strlen(log) * 2 + 256 + tags * (origin_len + 1), used = 0;
    char *text = fi__malloc(cap);
    *out = NULL;
    if (!text) return fi__error(FI_ENOMEM, "out of memory");
    for (const char *line = log; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        int number = 0;
        const char *at = strstr(line, tag);
        if (at && at >= line + len) at = NULL;
        if (used + len + origin_len + 2 >= cap) break;
        if (at) {
            /* "name.cuh(N)" becomes "<the file as given>(N)". */
            size_t before = (size_t)(at - line), after = len - before - (tag_len - 1);
            memcpy(text + used, line, before);
            memcpy(text + used + before, v->origin, origin_len);
            memcpy(text + used + before + origin_len, at + tag_len - 1, after);
            used += before + origin_len + after;
        } else {
            memcpy(text + used, line, len);
            used += len;
        }
        text[used++] = '\n';
        if (at && sscanf(at + tag_len, "%d", &number) == 1 && number > 0) {
            /* Quote the snippet's own line under the message. */
            const char *src = v->source;
            for (int n = 1; n < number && src; n++) src = strchr(src, '\n'), src = src ? src + 1 : NULL;
            if (src) {
                const char *src_end = strchr(src, '\n');
                int src_len = src_end ? (int)(src_end - src) : (int)strlen(src);
                int wrote = snprintf(text + used, cap - used, "  %4d | %.*s\n", number,
                                     src_len > 200 ? 200 : src_len, src);
                if (wrote > 0 && (size_t)wrote < cap - used) used += (size_t)wrote;
            }
        }
        line += len + (eol ? 1 : 0);
    }
    text[used] = '\0';
    *out = text;
    return 0;
}
