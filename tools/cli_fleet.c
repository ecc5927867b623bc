/*
 * The fleet's commands: `fijit remote ping|stats|list` (what a shared remote
 * cache holds and how it is doing), and `fijit export` / `fijit import`
 * (bundles of entries for hosts the remote cannot reach). The fleet secret
 * comes from FIJIT_REMOTE_SECRET, never from the command line (which other
 * users can read in the process list).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *fleet_secret(void)
{
    const char *secret = getenv("FIJIT_REMOTE_SECRET");
    return secret && *secret ? secret : NULL;
}

/* ---- remote ------------------------------------------------------------------ */

typedef struct remote_rows {
    fi_cache_remote_entry *rows;
    int count, capacity;
    int64_t bytes;
    int sealed, bad;
    int nomem;
} remote_rows;

static int remote_collect(void *user, const fi_cache_remote_entry *e)
{
    remote_rows *rows = user;
    if (rows->count == rows->capacity) {
        int capacity = rows->capacity ? rows->capacity * 2 : 64;
        fi_cache_remote_entry *grown = realloc(rows->rows, (size_t)capacity * sizeof *grown);
        if (!grown) {
            rows->nomem = 1;
            return 1;
        }
        rows->rows = grown;
        rows->capacity = capacity;
    }
    fi_cache_remote_entry *kept = &rows->rows[rows->count++];
    *kept = *e;
    cli_text_printable(kept->entry.spec);
    cli_text_printable(kept->entry.arch);
    rows->bytes += e->entry.size;
    rows->sealed += e->sealed;
    rows->bad += !e->header_ok;
    return 0;
}

static int by_spec(const void *a, const void *b)
{
    const fi_cache_remote_entry *x = a, *y = b;
    int c = strcmp(x->entry.spec, y->entry.spec);
    if (!c) c = strcmp(x->entry.arch, y->entry.arch);
    return c ? c : memcmp(x->entry.key, y->entry.key, 16);
}

static void describe_line(void *user, const char *name, const char *value)
{
    (void)user;
    printf("  %-20s %s\n", name, value);
}

/* One verb on one remote of the list; `titled`: say which remote first
 * (a list of several). */
static int remote_one(const cli_command *cmd, const char *verb, const char *url, int keys,
                      int titled)
{
    int rc;
    fi_cache_remote *remote = NULL;
    remote_rows rows = {0};
    cli_parts *parts = NULL;
    char masked[512];
    fi_cache_remote_url_check(masked, sizeof masked, url);
    if (titled && strcmp(verb, "ping") != 0) printf("== %s\n", masked);
    if (fi_cache_remote_open(&remote, url) < 0) return cli_runtime_error(cmd, "cannot open the remote");
    if (strcmp(verb, "ping") == 0) {
        int64_t ns = 0;
        if (fi_cache_remote_ping(&ns, remote) < 0) {
            rc = cli_runtime_error(cmd, "no answer");
            goto out;
        }
        printf("remote %s answers in %.2f ms\n", masked, (double)ns / 1e6);
        rc = CLI_EXIT_OK;
        goto out;
    }
    /* A store that cannot be listed (HTTP) still answers stats. */
    int listed = fi_cache_remote_foreach(remote, remote_collect, &rows);
    if ((listed < 0 && (listed != FI_EUNSUPPORTED || strcmp(verb, "list") == 0)) || rows.nomem) {
        rc = cli_runtime_error(cmd, rows.nomem ? "out of memory" : "cannot list the remote");
        goto out;
    }
    if (strcmp(verb, "stats") == 0) {
        char size[32];
        cli_format_size(size, sizeof size, rows.bytes);
        printf("remote               %s\n", masked);
        if (listed < 0) {
            printf("entries              ? (the server cannot list what it holds)\n");
        } else {
            printf("entries              %d\n", rows.count);
            printf("size                 %s\n", size);
            printf("sealed (with a MAC)  %d\n", rows.sealed);
            printf("bad headers          %d\n", rows.bad);
        }
        printf("server\n");
        if (fi_cache_remote_describe(remote, describe_line, NULL) < 0) {
            rc = cli_runtime_error(cmd, "cannot ask the server");
            goto out;
        }
        rc = CLI_EXIT_OK;
        goto out;
    }
    qsort(rows.rows, (size_t)rows.count, sizeof *rows.rows, by_spec);
    if (rows.count && cli_parts_new(&parts) < 0) {
        rc = cli_runtime_error(cmd, "out of memory");
        goto out;
    }
    for (int i = 0; i < rows.count; i++) {
        const fi_cache_remote_entry *e = &rows.rows[i];
        char size[32], hex[33], part[48];
        cli_format_size(size, sizeof size, e->entry.size);
        if (keys) {
            fi_cache_key_hex(hex, e->entry.key);
            printf("%s  ", hex);
        }
        /* Entries of one tuple's parts say which part they are, as in `fijit list`. */
        cli_parts_note(part, sizeof part, parts, &e->entry, i ? &e[-1].entry : NULL,
                       i + 1 < rows.count ? &e[1].entry : NULL);
        if (e->header_ok)
            printf("%-64s %-7s %10s%s%s\n", e->entry.spec, e->entry.arch, size,
                   e->sealed ? "  sealed" : "", part);
        else
            printf("%-64s %-7s %10s\n", "(bad header: refused by every reader)", "?", size);
    }
    rc = CLI_EXIT_OK;
out:
    cli_parts_free(parts);
    free(rows.rows);
    fi_cache_remote_close(remote);
    return rc;
}

int cli_cmd_remote(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_REMOTE, OPT_KEYS };
    cli_option options[] = {
        [OPT_REMOTE] = {"remote", 0, 1, 0, NULL},
        [OPT_KEYS] = {"keys", 0, 0, 0, NULL},
        {0},
    };
    cli_args args;
    int rc = cli_parse(cmd, options, argc, argv, &args);
    if (rc >= 0) return rc;
    if (args.positional_count != 1)
        return cli_usage_error(cmd, "expected one of ping, stats, list");
    const char *verb = args.positional[0];
    if (strcmp(verb, "ping") && strcmp(verb, "stats") && strcmp(verb, "list"))
        return cli_usage_error(cmd, "unknown verb '%s' (ping, stats or list)", verb);
    /* The settings first: the remote may be fijit.conf's. */
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS)) >= 0) return rc;
    if ((rc = cli_check_remote(cmd, options[OPT_REMOTE].value)) >= 0) return rc;
    const char *list = cli_remote_url();
    char urls[CLI_REMOTE_LIST_MAX][2048];
    int count = list ? cli_remote_list(urls, list) : 0;
    if (count == 0)
        return cli_usage_error(cmd, "no remote: give --remote URL, set FIJIT_REMOTE or remote "
                               "in the cache's fijit.conf");
    /* Each remote of a list in turn; the command fails if any does. */
    rc = CLI_EXIT_OK;
    for (int i = 0; i < count; i++) {
        if (i && strcmp(verb, "ping") != 0) printf("\n");
        int one = remote_one(cmd, verb, urls[i], options[OPT_KEYS].value != NULL, count > 1);
        if (one != CLI_EXIT_OK) rc = one;
    }
    return rc;
}

/* The library takes the fleet's build leases in the first writable remote
 * that has them: Redis (redis://, unix://); an HTTP store has none. */
static int takes_leases(const char *masked)
{
    const char *query = strchr(masked, '?');
    int read_only = 0;
    for (const char *q = query; q; q = strchr(q + 1, '&'))
        read_only = strncmp(q + 1, "readonly", 8) == 0 &&
                    (q[9] == '\0' || q[9] == '&' || strncmp(q + 9, "=1", 2) == 0);
    return !read_only && (strncmp(masked, "redis://", 8) == 0 || strncmp(masked, "unix://", 7) == 0);
}

void cli_show_remotes(const char *list, const char *source)
{
    char urls[CLI_REMOTE_LIST_MAX][2048], masked[512], lease[512] = "";
    int count = cli_remote_list(urls, list);
    for (int i = 0; i < count; i++) {
        fi_cache_remote_url_check(masked, sizeof masked, urls[i]);
        printf("remote cache         %s%s%s%s\n", masked, i ? "" : " (", i ? "" : source,
               i ? "" : ")");
        if (!lease[0] && takes_leases(masked)) snprintf(lease, sizeof lease, "%s", masked);
    }
    if (lease[0])
        printf("fleet single flight  build leases in %s\n", lease);
    else
        printf("fleet single flight  none: no writable Redis remote (an HTTP store has no lease), "
               "so hosts that miss the same kernel at once each compile it\n");
}

/* ---- export ------------------------------------------------------------------ */

/* Which entries go into a bundle: canonical spec texts (from SPEC arguments
 * or a manifest) and arches; none of a kind: all. */
typedef struct export_filter {
    char (*specs)[256];
    int spec_count, spec_capacity;
    char **arches;
    int arch_count;
} export_filter;

static int filter_add_spec(export_filter *f, const char *text, char *err, size_t err_size)
{
    fi_jit_spec spec;
    char variant[64];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) {
        snprintf(err, err_size, "'%s': %s", text, fi_last_error());
        return -1;
    }
    if (f->spec_count == f->spec_capacity) {
        int capacity = f->spec_capacity ? f->spec_capacity * 2 : 32;
        void *grown = realloc(f->specs, (size_t)capacity * sizeof *f->specs);
        if (!grown) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        f->specs = grown;
        f->spec_capacity = capacity;
    }
    if (fi_jit_spec_format(f->specs[f->spec_count], sizeof f->specs[0], &spec) < 0) {
        snprintf(err, err_size, "'%s': %s", text, fi_last_error());
        return -1;
    }
    f->spec_count++;
    return 0;
}

typedef struct manifest_ctx {
    export_filter *filter;
    char *err;
    size_t err_size;
} manifest_ctx;

static int manifest_line(void *user, int line_no, const char *spec)
{
    manifest_ctx *m = user;
    char why[512];
    if (filter_add_spec(m->filter, spec, why, sizeof why) == 0) return 0;
    snprintf(m->err, m->err_size, "line %d: %s", line_no, why);
    return 1;
}

static int export_wants(void *user, const fi_cache_entry *e)
{
    const export_filter *f = user;
    int ok = f->arch_count == 0;
    for (int i = 0; i < f->arch_count && !ok; i++) ok = strcmp(f->arches[i], e->arch) == 0;
    if (!ok || f->spec_count == 0) return ok;
    for (int i = 0; i < f->spec_count; i++)
        if (strcmp(f->specs[i], e->spec) == 0) return 1;
    return 0;
}

static int read_manifest(const cli_command *cmd, const char *path, export_filter *f)
{
    FILE *file = fopen(path, "rb");
    char *data = NULL, err[1024] = "";
    size_t size = 0, cap = 0, n;
    if (!file) return cli_usage_error(cmd, "--manifest %s: cannot open it", path);
    for (;;) {
        if (size == cap) {
            char *grown = realloc(data, cap = cap ? cap * 2 : 4096);
            if (!grown) break;
            data = grown;
        }
        if ((n = fread(data + size, 1, cap - size, file)) == 0) break;
        size += n;
    }
    fclose(file);
    manifest_ctx m = {f, err, sizeof err};
    int rc = -1;
    if (!data || cli_manifest_parse(data, size, manifest_line, &m, err, sizeof err) < 0)
        rc = cli_usage_error(cmd, "--manifest %s: %s", path, err[0] ? err : "cannot read it");
    free(data);
    return rc;
}

/* Marks which asked-for specs the cache holds (for the arches given). */
typedef struct export_found {
    const export_filter *filter;
    char *found; /* one flag per filter spec */
} export_found;

static int export_mark(void *user, const fi_cache_entry *e)
{
    export_found *f = user;
    for (int i = 0; i < f->filter->spec_count; i++)
        if (export_wants(&(export_filter){f->filter->specs + i, 1, 1, f->filter->arches,
                                          f->filter->arch_count}, e))
            f->found[i] = 1;
    return 0;
}

/* A bundle short of what was asked for is not written: name each spec the
 * cache lacks. -1 to go on, else an exit code. */
static int export_check_found(const cli_command *cmd, fi_cache *cache, const export_filter *filter)
{
    export_found f = {filter, calloc((size_t)filter->spec_count + 1, 1)};
    int missing = 0;
    if (!f.found) return cli_usage_error(cmd, "out of memory");
    if (fi_cache_foreach(cache, export_mark, &f) < 0) {
        free(f.found);
        return cli_runtime_error(cmd, "cannot read the cache index");
    }
    for (int i = 0; i < filter->spec_count; i++) {
        if (f.found[i]) continue;
        fprintf(stderr, "fijit export: not in the cache%s: %s\n",
                filter->arch_count ? " for the arches given" : "", filter->specs[i]);
        missing++;
    }
    free(f.found);
    if (!missing) return -1;
    fprintf(stderr, "fijit export: %d of %d spec%s missing; no bundle written (prewarm them "
            "first)\n", missing, filter->spec_count, filter->spec_count == 1 ? "" : "s");
    return CLI_EXIT_FAILED;
}

int cli_cmd_export(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_OUTPUT, OPT_MANIFEST, OPT_ALL, OPT_ARCH };
    cli_option options[] = {
        [OPT_OUTPUT] = {"output", 'o', 1, 0, NULL},
        [OPT_MANIFEST] = {"manifest", 0, 1, 0, NULL},
        [OPT_ALL] = {"all", 0, 0, 0, NULL},
        [OPT_ARCH] = {"arch", 0, 1, 1, NULL},
        {0},
    };
    cli_args args;
    export_filter filter = {0};
    fi_cache *cache = NULL;
    char dir[4096], err[1024];
    int rc = cli_parse(cmd, options, argc, argv, &args);
    if (rc >= 0) return rc;
    const char *output = options[OPT_OUTPUT].value;
    int given = (options[OPT_MANIFEST].value != NULL) + (options[OPT_ALL].value != NULL) +
                (args.positional_count > 0);
    if (!output || !*output) return cli_usage_error(cmd, "-o FILE is required");
    if (given != 1)
        return cli_usage_error(cmd, "give exactly one of --manifest FILE, SPEC..., --all");
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS)) >= 0) return rc; /* the secret among them */
    if (options[OPT_ARCH].value &&
        cli_split_list(options[OPT_ARCH].value, &filter.arches, &filter.arch_count) < 0)
        return cli_usage_error(cmd, "--arch '%s': expected a comma-separated list",
                               options[OPT_ARCH].value);
    for (int i = 0; i < filter.arch_count; i++)
        if (fi_arch_check(filter.arches[i]) < 0) {
            rc = cli_usage_error(cmd, "--arch %s: %s", filter.arches[i], fi_last_error());
            goto out;
        }
    for (int i = 0; i < args.positional_count; i++)
        if (filter_add_spec(&filter, args.positional[i], err, sizeof err) < 0) {
            rc = cli_usage_error(cmd, "%s", err);
            goto out;
        }
    if (options[OPT_MANIFEST].value &&
        (rc = read_manifest(cmd, options[OPT_MANIFEST].value, &filter)) >= 0)
        goto out;
    if ((rc = cli_open_store(cmd, &cache, dir)) != 0) goto out;
    if (!cache) { /* the library said nothing: there is nothing to open */
        fprintf(stderr, "fijit export: no cache at %s to export (it does not exist yet)\n", dir);
        rc = CLI_EXIT_FAILED;
        goto out;
    }
    if (filter.spec_count && (rc = export_check_found(cmd, cache, &filter)) >= 0) goto out;
    fi_bundle_counts counts;
    if (fi_cache_export(&counts, cache, output, export_wants, &filter, fleet_secret()) < 0) {
        rc = cli_runtime_error(cmd, "cannot write the bundle");
        goto out;
    }
    printf("export: %" PRId64 " entr%s to %s%s\n", counts.entries,
           counts.entries == 1 ? "y" : "ies", output,
           fleet_secret() ? ", each with its MAC (FIJIT_REMOTE_SECRET)" : "");
    if (filter.spec_count && counts.entries < filter.spec_count)
        fprintf(stderr, "fijit export: %d spec%s asked for, %" PRId64 " found in the cache%s\n",
                filter.spec_count, filter.spec_count == 1 ? "" : "s", counts.entries,
                filter.arch_count ? " for the arches given" : "");
    rc = CLI_EXIT_OK;
out:
    fi_cache_close(cache);
    free(filter.specs);
    cli_free_list(filter.arches, filter.arch_count);
    return rc;
}

/* ---- import ------------------------------------------------------------------ */

static void import_report(void *user, const char *problem)
{
    (void)user;
    fprintf(stderr, "fijit import: %s\n", problem);
}

int cli_cmd_import(const cli_command *cmd, int argc, char **argv)
{
    cli_args args;
    fi_cache *cache = NULL;
    char dir[4096];
    int rc = cli_parse(cmd, NULL, argc, argv, &args);
    if (rc >= 0) return rc;
    if (args.positional_count != 1) return cli_usage_error(cmd, "expected one bundle FILE");
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS)) >= 0) return rc; /* the secret among them */
    if (cli_resolve_cache_dir(dir, sizeof dir) < 0)
        return cli_runtime_error(cmd, "cannot find the cache directory");
    if (fi_cache_open(&cache, dir, 0) < 0) {
        char what[4200];
        snprintf(what, sizeof what, "cannot open the cache at %s", dir);
        return cli_runtime_error(cmd, what);
    }
    fi_bundle_counts counts;
    if (fi_cache_import(&counts, cache, args.positional[0], fleet_secret(), import_report, NULL) < 0) {
        rc = cli_runtime_error(cmd, "cannot import the bundle");
    } else {
        printf("import: %" PRId64 " entr%s: %" PRId64 " added, %" PRId64 " already present, "
               "%" PRId64 " refused\n", counts.entries, counts.entries == 1 ? "y" : "ies",
               counts.added, counts.present, counts.refused);
        rc = counts.refused ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    }
    fi_cache_close(cache);
    return rc;
}
