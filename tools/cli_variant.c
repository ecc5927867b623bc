/*
 * Variant snippets named on the command line (`--variant-file FILE`, used by
 * prewarm and explain): each file is read once, named like
 * fi_jit_variant_register_file names it (the file name up to its first '.'),
 * and checked by registering it in a memory-only context, so a snippet the
 * library refuses (bad name, unbalanced braces, #line, bad parameter lines)
 * stops the command before anything is compiled. Worker processes register
 * the same bytes from memory, so every process compiles the text that was
 * checked even if the file changes meanwhile.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The text of `path` in a fresh NUL-terminated buffer, or NULL with the
 * reason in `why`. */
static char *read_snippet(const char *path, char *why, size_t why_size)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t size = 0;
    int ok = 0;
    if (!f) {
        snprintf(why, why_size, "cannot read it: %s", strerror(errno));
        goto out;
    }
    if (!(text = malloc(FI_VARIANT_MAX_SOURCE + 2))) {
        snprintf(why, why_size, "out of memory");
        goto out;
    }
    size = fread(text, 1, FI_VARIANT_MAX_SOURCE + 1, f);
    if (ferror(f))
        snprintf(why, why_size, "cannot read it: %s", strerror(errno));
    else if (size > FI_VARIANT_MAX_SOURCE)
        snprintf(why, why_size, "larger than the %d KiB a variant may have",
                 FI_VARIANT_MAX_SOURCE / 1024);
    else if (memchr(text, '\0', size))
        snprintf(why, why_size, "contains a NUL byte (a variant is CUDA C++ text)");
    else
        ok = 1;
out:
    if (ok) {
        text[size] = '\0';
    } else {
        free(text);
        text = NULL;
    }
    if (f) fclose(f);
    return text;
}

/* "dir/sigmoid.v2.cuh" → "sigmoid". 0, or -1 when nothing usable is left. */
static int name_of_path(char *out, size_t size, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t len = strcspn(base, ".");
    if (len == 0 || len >= size) return -1;
    memcpy(out, base, len);
    out[len] = '\0';
    return 0;
}

const cli_variant *cli_variants_find(const cli_variant_set *set, const char *name)
{
    for (int i = 0; set && i < set->count; i++)
        if (strcmp(set->items[i].name, name) == 0) return &set->items[i];
    return NULL;
}

int cli_variant_not_registered(const char *name)
{
    return fi_error_set(FI_ENOTFOUND, "variant '%s' is not registered: give its snippet with "
                     "--variant-file FILE (the name is the file name up to its first '.', "
                     "e.g. %s.cuh)", name, name);
}

int cli_variants_register(fi_jit_ctx *ctx, const cli_variant_set *set, int *failed)
{
    for (int i = 0; set && i < set->count; i++) {
        /* Messages name the file as the user gave it (the key does not). */
        int rc = fi_jit_variant_register_as(ctx, set->items[i].name, set->items[i].source, 0,
                                             set->items[i].path);
        if (rc < 0) {
            if (failed) *failed = i;
            return rc;
        }
    }
    return 0;
}

/* Read `path` into the next item of `set`; a second file with the same name
 * and text is dropped, with other text refused. -1 to go on, or an exit code. */
static int load_one(const cli_command *cmd, const char *path, cli_variant_set *set)
{
    char name[FI_VARIANT_NAME_MAX + 1], why[160];
    if (name_of_path(name, sizeof name, path) < 0)
        return cli_usage_error(cmd, "--variant-file %s: cannot derive a variant name from it "
                               "(the name is the file name up to its first '.', at most %d "
                               "characters)", path, FI_VARIANT_NAME_MAX);
    char *source = read_snippet(path, why, sizeof why);
    if (!source) return cli_usage_error(cmd, "--variant-file %s: %s", path, why);
    const cli_variant *same = cli_variants_find(set, name);
    if (same) {
        int identical = strcmp(same->source, source) == 0;
        free(source);
        if (identical) return -1;
        return cli_usage_error(cmd, "--variant-file %s: its variant name '%s' is taken by %s, "
                               "which has other text (a variant is named after its file, "
                               "up to the first '.')", path, name, same->path);
    }
    cli_variant *item = &set->items[set->count];
    if (!(item->path = strdup(path))) {
        free(source);
        return cli_usage_error(cmd, "out of memory");
    }
    snprintf(item->name, sizeof item->name, "%s", name);
    item->source = source;
    set->count++;
    return -1;
}

/* Register the whole set in a context that never touches the disk. */
static int check_set(const cli_command *cmd, const cli_variant_set *set)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    int failed = 0, rc = -1;
    opts.use_disk_cache = 0;
    opts.jit = 0;
    opts.cache_dir = "."; /* never opened: memory only */
    opts.arch = "sm_90a"; /* registration does not depend on it */
    if (fi_jit_ctx_new(&ctx, &opts) < 0) {
        rc = cli_runtime_error(cmd, "cannot create a context to check the variants");
        goto out;
    }
    if (cli_variants_register(ctx, set, &failed) < 0) {
        const char *path = set->items[failed].path, *why = fi_last_error();
        if (strncmp(why, path, strlen(path)) == 0) /* "FILE:LINE: ..." names it already */
            rc = cli_usage_error(cmd, "--variant-file %s", why);
        else
            rc = cli_usage_error(cmd, "--variant-file %s: %s", path, why);
    }
out:
    fi_jit_ctx_free(ctx);
    return rc;
}

int cli_variants_load(const cli_command *cmd, const char *paths, cli_variant_set *out)
{
    char **items = NULL;
    int count = 0, rc = -1;
    memset(out, 0, sizeof *out);
    if (!paths) return -1;
    if (cli_split_list(paths, &items, &count) < 0)
        return cli_usage_error(cmd, "--variant-file '%s': expected file names", paths);
    if (!(out->items = calloc((size_t)count, sizeof *out->items))) {
        rc = cli_usage_error(cmd, "out of memory");
        goto out;
    }
    for (int i = 0; i < count && rc < 0; i++) rc = load_one(cmd, items[i], out);
    if (rc < 0) rc = check_set(cmd, out);
out:
    cli_free_list(items, count);
    if (rc >= 0) cli_variants_free(out);
    return rc;
}

char *cli_variants_names(const cli_variant_set *set)
{
    size_t size = 1;
    for (int i = 0; i < set->count; i++) size += strlen(set->items[i].name) + 1;
    char *names = malloc(size);
    if (!names) return NULL;
    names[0] = '\0';
    for (int i = 0; i < set->count; i++) {
        if (i) strcat(names, ",");
        strcat(names, set->items[i].name);
    }
    return names;
}

void cli_variants_free(cli_variant_set *set)
{
    for (int i = 0; set && i < set->count; i++) {
        free(set->items[i].path);
        free(set->items[i].source);
    }
    if (set) {
        free(set->items);
        set->items = NULL;
        set->count = 0;
    }
}
