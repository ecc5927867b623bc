/*
 * `fijit` — the command-line tool for fijit's kernel cache: prewarm it for a
 * set of specs and arches, list, inspect, verify, clean and size it, show the
 * configuration, explain a key, and run a GPU smoke test.
 *
 * This file holds the command table, the help texts and the small commands;
 * prewarm (worker processes) and demo (a GPU launch) live in cli_prewarm.c
 * and cli_demo.c. Exit codes: 0 success, 1 runtime failure, 2 bad arguments.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#include "cli.h"

#define CACHE_DIR_HELP "  --cache-dir DIR    cache directory (default: $FIJIT_CACHE_DIR,\n" \
                       "                     $XDG_CACHE_HOME/fijit if absolute, ~/.cache/fijit)\n"

/* ---- list ------------------------------------------------------------------ */

/* Which rows `fijit list` shows: each filter is a list of accepted values. */
typedef struct list_filter {
    int kinds[16], kind_count;
    int dtypes[16], dtype_count;
    char **arches;
    int arch_count;
    char **variants; /* "default" stands for entries without a variant */
    int variant_count;
} list_filter;

/* 1 if `list` holds `name`. */
static int list_has(char **list, int count, const char *name)
{
    for (int i = 0; i < count; i++)
        if (strcmp(list[i], name) == 0) return 1;
    return 0;
}

typedef struct list_rows {
    fi_cache_entry *rows;
    int count, capacity;
    const list_filter *filter;
} list_rows;

static int list_row_matches(const list_filter *f, const fi_cache_entry *row)
{
    if (f->arch_count && !list_has(f->arches, f->arch_count, row->arch)) return 0;
    if (!f->kind_count && !f->dtype_count && !f->variant_count) return 1;
    fi_jit_spec spec;
    char variant[64];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, row->spec) < 0) return 0;
    if (f->variant_count &&
        !list_has(f->variants, f->variant_count, spec.variant ? spec.variant : "default"))
        return 0;
    if (f->kind_count) {
        int ok = 0;
        for (int i = 0; i < f->kind_count; i++) ok |= (int)spec.kind == f->kinds[i];
        if (!ok) return 0;
    }
    if (f->dtype_count) {
        int ok = 0;
        for (int i = 0; i < f->dtype_count; i++)
            ok |= (int)spec.q_dtype == f->dtypes[i] || (int)spec.kv_dtype == f->dtypes[i] ||
                  (int)spec.o_dtype == f->dtypes[i];
        if (!ok) return 0;
    }
    return 1;
}

static int list_collect(void *user, const fi_cache_entry *row)
{
    list_rows *rows = user;
    if (!list_row_matches(rows->filter, row)) return 0;
    if (rows->count == rows->capacity) {
        int capacity = rows->capacity ? rows->capacity * 2 : 64;
        fi_cache_entry *grown = realloc(rows->rows, (size_t)capacity * sizeof *grown);
        if (!grown) return 1;
        rows->rows = grown;
        rows->capacity = capacity;
    }
    fi_cache_entry *kept = &rows->rows[rows->count++];
    *kept = *row;
    cli_text_printable(kept->spec);
    cli_text_printable(kept->arch);
    return 0;
}

/* Turn "--kernel decode,..." / "--dtype fp16,..." into enum values through the
 * library's own spec parser, so names always match spec strings. */
static int list_parse_filter(const cli_command *cmd, const char *flag, const char *values,
                             int *out, int *out_count)
{
    char **items;
    int count;
    if (cli_split_list(values, &items, &count) < 0 || count > 16)
        return cli_usage_error(cmd, "--%s '%s': expected a comma-separated list", flag, values);
    for (int i = 0; i < count; i++) {
        char text[128];
        fi_jit_spec spec;
        char variant[64];
        if (strcmp(flag, "kernel") == 0)
            snprintf(text, sizeof text, "%s", items[i]);
        else
            snprintf(text, sizeof text, "decode q=%s", items[i]);
        if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) {
            int rc = cli_usage_error(cmd, "--%s %s: %s", flag, items[i], fi_last_error());
            cli_free_list(items, count);
            return rc;
        }
        out[i] = strcmp(flag, "kernel") == 0 ? (int)spec.kind : (int)spec.q_dtype;
    }
    *out_count = count;
    cli_free_list(items, count);
    return -1;
}

/* "--variant default,sigmoid": names as spec strings write them. */
static int list_parse_variants(const cli_command *cmd, const char *values, list_filter *f)
{
    if (cli_split_list(values, &f->variants, &f->variant_count) < 0)
        return cli_usage_error(cmd, "--variant '%s': expected a comma-separated list", values);
    for (int i = 0; i < f->variant_count; i++)
        if (fi_jit_variant_name_check(f->variants[i]) < 0)
            return cli_usage_error(cmd, "--variant %s: not a variant name (default, or 1-63 "
                                   "letters, digits, '_' or '-')", f->variants[i]);
    return -1;
}

static int cmd_list(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_KERNEL, OPT_ARCH, OPT_DTYPE, OPT_VARIANT, OPT_KEYS };
    cli_option options[] = {
        [OPT_KERNEL] = {"kernel", 0, 1, 1, NULL},
        [OPT_ARCH] = {"arch", 0, 1, 1, NULL},
        [OPT_DTYPE] = {"dtype", 0, 1, 1, NULL},
        [OPT_VARIANT] = {"variant", 0, 1, 1, NULL},
        [OPT_KEYS] = {"keys", 0, 0, 0, NULL},
        {0},
    };
    int rc = cli_parse_options(cmd, options, argc, argv);
    if (rc >= 0) return rc;

    list_filter filter = {0};
    if (options[OPT_KERNEL].value &&
        (rc = list_parse_filter(cmd, "kernel", options[OPT_KERNEL].value, filter.kinds,
                                &filter.kind_count)) >= 0)
        return rc;
    if (options[OPT_DTYPE].value &&
        (rc = list_parse_filter(cmd, "dtype", options[OPT_DTYPE].value, filter.dtypes,
                                &filter.dtype_count)) >= 0)
        return rc;
    fi_cache *st = NULL;
    list_rows rows = {NULL, 0, 0, &filter};
    if (options[OPT_ARCH].value &&
        cli_split_list(options[OPT_ARCH].value, &filter.arches, &filter.arch_count) < 0) {
        rc = cli_usage_error(cmd, "--arch '%s': expected a comma-separated list",
                             options[OPT_ARCH].value);
        goto out;
    }
    if (options[OPT_VARIANT].value &&
        (rc = list_parse_variants(cmd, options[OPT_VARIANT].value, &filter)) >= 0)
        goto out;
    char dir[4096];
    if ((rc = cli_open_store(cmd, &st, dir)) != 0) goto out;
    if (st && fi_cache_foreach(st, list_collect, &rows) < 0) {
        rc = cli_runtime_error(cmd, "cannot read the cache index");
        goto out;
    }

    int spec_width = 4;
    for (int i = 0; i < rows.count; i++) {
        int w = (int)strlen(rows.rows[i].spec);
        if (w > spec_width) spec_width = w;
    }
    /* A header helps a person; scripts reading a pipe get rows only. */
    if (isatty(STDOUT_FILENO) && rows.count) {
        if (options[OPT_KEYS].value) printf("%-32s  ", "KEY");
        printf("%-*s  %-8s %10s %6s %6s\n", spec_width, "SPEC", "ARCH", "SIZE", "AGE", "HITS");
    }
    int64_t now = (int64_t)time(NULL);
    cli_parts *parts = NULL;
    if (rows.count && cli_parts_new(&parts) < 0) {
        rc = cli_runtime_error(cmd, "out of memory");
        goto out;
    }
    for (int i = 0; i < rows.count; i++) {
        const fi_cache_entry *row = &rows.rows[i];
        char size[32], age[32], part[48];
        cli_format_size(size, sizeof size, row->size);
        cli_format_age(age, sizeof age, now - row->created);
        /* Rows of one tuple's parts say which part they are. */
        cli_parts_note(part, sizeof part, parts, row, i ? row - 1 : NULL,
                       i + 1 < rows.count ? row + 1 : NULL);
        if (options[OPT_KEYS].value) {
            char hex[33];
            fi_cache_key_hex(hex, row->key);
            printf("%s  ", hex);
        }
        printf("%-*s  %-8s %10s %6s %6" PRId64 "%s\n", spec_width, row->spec, row->arch,
               size, age, row->hits, part);
    }
    cli_parts_free(parts);
    rc = CLI_EXIT_OK;
out:
    free(rows.rows);
    cli_free_list(filter.arches, filter.arch_count);
    cli_free_list(filter.variants, filter.variant_count);
    fi_cache_close(st);
    return rc;
}

/* ---- stats ----------------------------------------------------------------- */

/* How the text of `fijit stats` shows a statistic (FI_JIT_STATS_COUNTERS' units). */
enum { STAT_UNIT_COUNT, STAT_UNIT_NS, STAT_UNIT_BYTES };

static void print_stat(const char *label, int unit, int64_t value)
{
    char text[32];
    if (unit == STAT_UNIT_NS) snprintf(text, sizeof text, "%.2f s", (double)value / 1e9);
    else if (unit == STAT_UNIT_BYTES) cli_format_size(text, sizeof text, value);
    else snprintf(text, sizeof text, "%" PRId64, value);
    printf("%-20s %s\n", label, text);
}

/* One remote's own counters, after the totals (which count every remote). */
static int print_remote_stats(void *user, const char *remote, const fi_jit_stats *counts)
{
    (void)user;
    printf("remote cache         %s\n", remote);
#define STAT_REMOTE_(name, unit, label)                                         \
    if (strncmp(#name, "remote_", 7) == 0) {                                   \
        printf("  ");                                                          \
        print_stat(label, STAT_UNIT_##unit, counts->name);                     \
    }
    FI_JIT_STATS_COUNTERS(STAT_REMOTE_)
#undef STAT_REMOTE_
    return 0;
}

static int cmd_stats(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_JSON, OPT_ZERO };
    cli_option options[] = {
        [OPT_JSON] = {"json", 0, 0, 0, NULL},
        [OPT_ZERO] = {"zero", 'z', 0, 0, NULL},
        {0},
    };
    int rc = cli_parse_options(cmd, options, argc, argv);
    if (rc >= 0) return rc;

    fi_cache *st = NULL;
    fi_jit_stats s = {0}; /* no cache yet: all zero */
    char dir[4096];
    if ((rc = cli_open_store(cmd, &st, dir)) != 0) return rc;
    if (st && options[OPT_ZERO].value && fi_cache_stats_zero(st) < 0) {
        rc = cli_runtime_error(cmd, "cannot zero the statistics");
        goto out;
    }
    if (st && fi_cache_stats_get(&s, st) < 0) {
        rc = cli_runtime_error(cmd, "cannot read the statistics");
        goto out;
    }
    if (options[OPT_JSON].value) {
        const char *sep = "{";
#define STAT_JSON_(name, unit, label)                                           \
        printf("%s\"" #name "\":%" PRId64, sep, s.name);                         \
        sep = ",";
        FI_JIT_STATS_COUNTERS(STAT_JSON_)
#undef STAT_JSON_
        printf("}\n");
    } else {
        if (options[OPT_ZERO].value) printf("statistics zeroed\n");
        printf("cache dir            %s%s\n", dir, st ? "" : " (does not exist yet)");
#define STAT_TEXT_(name, unit, label) print_stat(label, STAT_UNIT_##unit, s.name);
        FI_JIT_STATS_COUNTERS(STAT_TEXT_)
#undef STAT_TEXT_
        if (st && fi_cache_remote_stats_foreach(st, print_remote_stats, NULL) < 0) {
            rc = cli_runtime_error(cmd, "cannot read the statistics");
            goto out;
        }
    }
    rc = CLI_EXIT_OK;
out:
    fi_cache_close(st);
    return rc;
}

/* ---- verify ---------------------------------------------------------------- */

static void verify_report(void *user, const char *problem)
{
    (void)user;
    /* Notes (temp files killed writers left) come with their own "note: "
     * and do not fail verify. */
    if (strncmp(problem, "note: ", 6) == 0) printf("%s\n", problem);
    else printf("problem: %s\n", problem);
}

static int cmd_verify(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_REPAIR };
    cli_option options[] = {
        [OPT_REPAIR] = {"repair", 0, 0, 0, NULL},
        {0},
    };
    int rc = cli_parse_options(cmd, options, argc, argv);
    if (rc >= 0) return rc;

    fi_cache *st = NULL;
    fi_jit_stats s;
    int repair = options[OPT_REPAIR].value != NULL;
    char dir[4096];
    if ((rc = cli_open_store(cmd, &st, dir)) != 0) return rc;
    if (!st) {
        printf("verify: no cache at %s yet, nothing to check\n", dir);
        return CLI_EXIT_OK;
    }
    int problems = fi_cache_verify(st, repair, verify_report, NULL);
    if (problems < 0) {
        rc = cli_runtime_error(cmd, "cannot check the cache");
        goto out;
    }
    if (problems && repair) {
        printf("verify: %d problem%s found and repaired\n", problems, problems == 1 ? "" : "s");
        /* Trust but check: a second pass must come back clean. */
        problems = fi_cache_verify(st, 0, verify_report, NULL);
        if (problems < 0) {
            rc = cli_runtime_error(cmd, "cannot check the cache after repair");
            goto out;
        }
    }
    if (fi_cache_stats_get(&s, st) < 0) {
        rc = cli_runtime_error(cmd, "cannot read the statistics");
        goto out;
    }
    if (problems) {
        printf("verify: %" PRId64 " entr%s, %d problem%s%s\n", s.entries,
               s.entries == 1 ? "y" : "ies", problems, problems == 1 ? "" : "s",
               repair ? " left after repair" : "; run 'fijit verify --repair' to fix");
        rc = CLI_EXIT_FAILED;
    } else {
        printf("verify: %" PRId64 " entr%s, all good\n", s.entries, s.entries == 1 ? "y" : "ies");
        rc = CLI_EXIT_OK;
    }
out:
    fi_cache_close(st);
    return rc;
}

/* ---- clear, gc --------------------------------------------------------------- */

static int cmd_clear(const cli_command *cmd, int argc, char **argv)
{
    int rc = cli_parse_options(cmd, NULL, argc, argv);
    if (rc >= 0) return rc;

    fi_cache *st = NULL;
    fi_jit_stats before = {0};
    char dir[4096];
    if ((rc = cli_open_store(cmd, &st, dir)) != 0) return rc;
    if (st && fi_cache_stats_get(&before, st) < 0) {
        rc = cli_runtime_error(cmd, "cannot read the statistics");
    } else if (st && fi_cache_clear(st) < 0) {
        rc = cli_runtime_error(cmd, "cannot clear the cache");
    } else {
        char size[32];
        cli_format_size(size, sizeof size, before.bytes);
        printf("clear: removed %" PRId64 " entr%s (%s)\n", before.entries,
               before.entries == 1 ? "y" : "ies", size);
        rc = CLI_EXIT_OK;
    }
    fi_cache_close(st);
    return rc;
}

static int cmd_gc(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_MAX_SIZE, OPT_OLDER_THAN };
    cli_option options[] = {
        [OPT_MAX_SIZE] = {"max-size", 0, 1, 0, NULL},
        [OPT_OLDER_THAN] = {"older-than", 0, 1, 0, NULL},
        {0},
    };
    int rc = cli_parse_options(cmd, options, argc, argv);
    if (rc >= 0) return rc;

    int64_t max_bytes, older_than = 0;
    const char *size_text = options[OPT_MAX_SIZE].value;
    if (size_text && fi_cache_size_parse(&max_bytes, size_text) < 0)
        return cli_usage_error(cmd, "--max-size '%s': expected bytes with an optional K, M, G or T "
                               "suffix, e.g. 500M or 2G (0: no limit)", size_text);
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS)) >= 0) return rc;
    if (!size_text) max_bytes = cli_settings.max_cache_bytes;
    if (max_bytes == 0) max_bytes = -1; /* 0 is "no limit" everywhere, as in ccache */
    if (options[OPT_OLDER_THAN].value) {
        int64_t seconds;
        if (cli_parse_duration(options[OPT_OLDER_THAN].value, &seconds) < 0)
            return cli_usage_error(cmd, "--older-than '%s': expected a number with s, m, h, d "
                                   "or w, e.g. 30d or 12h", options[OPT_OLDER_THAN].value);
        older_than = (int64_t)time(NULL) - seconds;
        if (older_than < 1) older_than = 1; /* 0 would mean "no age limit" */
    }

    fi_cache *st = NULL;
    fi_jit_stats after = {0};
    char dir[4096];
    if ((rc = cli_open_store(cmd, &st, dir)) != 0) return rc;
    int removed = st ? fi_cache_gc(st, max_bytes, older_than) : 0;
    if (removed < 0) {
        rc = cli_runtime_error(cmd, "cannot collect the cache");
    } else if (st && fi_cache_stats_get(&after, st) < 0) {
        rc = cli_runtime_error(cmd, "cannot read the statistics");
    } else {
        char size[32];
        cli_format_size(size, sizeof size, after.bytes);
        printf("gc: removed %d entr%s; the cache holds %" PRId64 " entr%s (%s)\n", removed,
               removed == 1 ? "y" : "ies", after.entries, after.entries == 1 ? "y" : "ies",
               size);
        rc = CLI_EXIT_OK;
    }
    fi_cache_close(st);
    return rc;
}

/* ---- show-config --------------------------------------------------------------- */

/* Where a setting came from, as show-config prints it: the variable, the file, or "default". */
static const char *setting_source(fi_setting_origin from, const char *env)
{
    if (from == FI_SETTING_ENV) return env;
    if (from == FI_SETTING_FILE) return cli_settings.file;
    return fi_setting_origin_name(from);
}

/* The settings of cli_settings, each with its source. */
static void show_settings(const char *dir)
{
    const fi_settings *s = &cli_settings;
    char size[32];
    if (s->file[0])
        printf("config file          %s\n", s->file);
    else if (dir[0])
        printf("config file          none (%s/fijit.conf does not exist)\n", dir);
    else
        printf("config file          none (no cache directory)\n");
    if (s->max_cache_bytes)
        cli_format_size(size, sizeof size, s->max_cache_bytes);
    else
        snprintf(size, sizeof size, "no limit");
    printf("max cache size       %s (%s)\n", size,
           setting_source(s->max_cache_bytes_from, "FIJIT_MAX_CACHE_SIZE"));
    printf("jit                  %s (%s)\n", s->jit ? "on: compile on a miss"
           : "off: serve only what the cache holds", setting_source(s->jit_from, "FIJIT_JIT"));
    static const char *const levels[] = {"off", "error", "warn", "info", "debug"};
    printf("log level            %s (%s)\n", levels[s->log_level],
           setting_source(s->log_level_from, "FIJIT_LOG"));
    if (s->umask < 0)
        printf("cache modes          private: directories 0700, files 0600 (%s)\n",
               setting_source(s->umask_from, "FIJIT_UMASK"));
    else
        printf("cache modes          umask %03o: directories %04o, files %04o (%s)\n", s->umask,
               0777 & ~s->umask, 0666 & ~s->umask, setting_source(s->umask_from, "FIJIT_UMASK"));
    if (s->lock_timeout_ms < 0)
        printf("lock timeout         none: wait forever (%s)\n",
               setting_source(s->lock_timeout_ms_from, "FIJIT_LOCK_TIMEOUT_MS"));
    else
        printf("lock timeout         %lld ms (%s)\n", (long long)s->lock_timeout_ms,
               setting_source(s->lock_timeout_ms_from, "FIJIT_LOCK_TIMEOUT_MS"));
}

static int cmd_show_config(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_REMOTE };
    cli_option options[] = {
        [OPT_REMOTE] = {"remote", 0, 1, 0, NULL},
        {0},
    };
    int rc = cli_parse_options(cmd, options, argc, argv);
    if (rc >= 0) return rc;
    /* What it shows is what the library would use: a bad value is exit 2 here too. */
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS | CLI_ENV_ARCH)) >= 0) return rc;
    if ((rc = cli_check_remote(cmd, options[OPT_REMOTE].value)) >= 0) return rc;

    printf("fijit version        %s (header %d.%d.%d)\n", fi_version_string(),
           FIJIT_VERSION_MAJOR, FIJIT_VERSION_MINOR, FIJIT_VERSION_PATCH);

    int major = 0, minor = 0;
    if (fi_nvrtc_version(&major, &minor) == 0)
        printf("nvrtc                %d.%d\n", major, minor);
    else
        printf("nvrtc                not found (%s)\n", fi_last_error());

    int driver = 0;
    const int have_driver = fi_cuda_driver_version(&driver) == 0;
    if (have_driver)
        printf("cuda driver          %d.%d\n", driver / 1000, driver % 1000 / 10);
    else
        printf("cuda driver          no driver (%s)\n", fi_last_error());

    char gpu_arch[16];
    if (have_driver && cli_detect_gpu_arch(gpu_arch, 0))
        printf("gpu arch             %s (device 0)\n", gpu_arch);
    else
        printf("gpu arch             none (compile-only, default sm_90a)\n");

    char arch[16];
    const char *arch_source = NULL;
    cli_default_arch(arch, 0, &arch_source);
    printf("prewarm arch         %s (%s)\n", arch, arch_source);

    char dir[4096] = "";
    if (cli_resolve_cache_dir(dir, sizeof dir) == 0)
        printf("cache dir            %s%s\n", dir, cli_cache_dir_option ? " (--cache-dir)" : "");
    else
        printf("cache dir            unusable: %s\n", fi_last_error());

    show_settings(dir);

    /* The remote's password and the fleet secret are never printed. */
    char masked[512];
    const char *remote = cli_remote_url();
    if (remote && fi_cache_remote_url_check(masked, sizeof masked, remote) == 0)
        cli_show_remotes(remote, cli_remote_option ? "--remote"
                                 : getenv("FIJIT_REMOTE") && *getenv("FIJIT_REMOTE")
                                     ? "FIJIT_REMOTE"
                                     : cli_settings.file);
    else
        printf("remote cache         none\n");
    const char *secret = getenv("FIJIT_REMOTE_SECRET");
    printf("fleet secret         %s\n", secret && *secret ? "set (FIJIT_REMOTE_SECRET): entries "
           "from the remote must carry its MAC" : "none");
    cli_env_choices_show();

    static const char *const env_names[] = {
        "FIJIT_CACHE_DIR", "FIJIT_ARCH", "FIJIT_JIT", "FIJIT_LOG", "FIJIT_MAX_CACHE_SIZE",
        "FIJIT_LOCK_TIMEOUT_MS", "FIJIT_TEMPLATE_DIR", "FIJIT_REMOTE", "FIJIT_REMOTE_SECRET",
        "FIJIT_UMASK", "FIJIT_REMOTE_TOKEN",
        "FIJIT_FAST_COMPILE", "FIJIT_LOAD", "FIJIT_PREFILL_WS",
        "XDG_CACHE_HOME", "CUDA_HOME", "CUDA_CACHE_DISABLE",
    };
    printf("environment\n");
    for (size_t i = 0; i < sizeof env_names / sizeof *env_names; i++) {
        const char *value = getenv(env_names[i]);
        if (value && strcmp(env_names[i], "FIJIT_REMOTE") == 0) {
            fi_cache_remote_url_check(masked, sizeof masked, value); /* masked even when bad */
            value = masked;
        }
        else if (value && (strcmp(env_names[i], "FIJIT_REMOTE_SECRET") == 0 ||
                           strcmp(env_names[i], "FIJIT_REMOTE_TOKEN") == 0))
            value = "(set)";
        printf("  %-20s %s\n", env_names[i], value ? value : "(unset)");
    }
    return CLI_EXIT_OK;
}

/* ---- explain ---------------------------------------------------------------- */

static void write_stdout(void *user, const char *text)
{
    (void)user;
    fputs(text, stdout);
}

/* A context for explain, with the snippets of --variant-file registered. */
static int explain_context(const cli_command *cmd, const char *arch,
                           const cli_variant_set *variants, fi_jit_ctx **out)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = cli_cache_dir_option;
    opts.arch = arch;
    opts.use_disk_cache = 0; /* the key needs no cache: explaining creates nothing */
    int rc = CLI_EXIT_OK;
    if (fi_jit_ctx_new(out, &opts) < 0) return cli_runtime_error(cmd, "cannot create a context");
    if (cli_variants_register(*out, variants, NULL) < 0) {
        rc = cli_runtime_error(cmd, "cannot register the variants");
        fi_jit_ctx_free(*out);
        *out = NULL;
    }
    return rc;
}

static int cmd_explain(const cli_command *cmd, int argc, char **argv)
{
    enum { OPT_ARCH, OPT_VARIANT_FILE, OPT_SOURCE, OPT_PTX };
    cli_option options[] = {
        [OPT_ARCH] = {"arch", 0, 1, 0, NULL},
        [OPT_VARIANT_FILE] = {"variant-file", 0, 1, 1, NULL},
        [OPT_SOURCE] = {"source", 0, 0, 0, NULL},
        [OPT_PTX] = {"ptx", 0, 0, 0, NULL},
        {0},
    };
    cli_args args;
    int rc = cli_parse(cmd, options, argc, argv, &args);
    if (rc >= 0) return rc;
    if (!args.positional_count) return cli_usage_error(cmd, "missing the spec to explain");
    if (options[OPT_SOURCE].value && options[OPT_PTX].value)
        return cli_usage_error(cmd, "--source and --ptx: give one of them");

    /* `fijit explain decode hd=64` works unquoted too: the words are joined. */
    char text[512] = "";
    for (int i = 0; i < args.positional_count; i++) {
        size_t used = strlen(text);
        if ((size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? " " : "",
                             args.positional[i]) >= sizeof text - used)
            return cli_usage_error(cmd, "the spec is longer than %zu bytes (a spec is a few "
                                   "words, e.g. \"decode q=fp16 hd=128\")", sizeof text - 1);
    }
    fi_jit_spec spec;
    char variant[64];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0 || fi_jit_spec_check(&spec) < 0)
        return cli_usage_error(cmd, "bad spec '%s': %s", text, fi_last_error());

    char arch[16];
    const char *arch_text = options[OPT_ARCH].value;
    if ((rc = cli_check_env(cmd, CLI_ENV_SETTINGS | (arch_text ? 0 : CLI_ENV_ARCH))) >= 0)
        return rc;
    if (arch_text) {
        if ((rc = cli_check_arch(cmd, "--arch", arch_text)) >= 0) return rc;
        snprintf(arch, sizeof arch, "%s", arch_text);
    } else {
        cli_default_arch(arch, 0, NULL);
    }

    /* The snippet's bytes are part of the key: without them there is no key. */
    cli_variant_set variants;
    fi_jit_ctx *ctx = NULL;
    if ((rc = cli_variants_load(cmd, options[OPT_VARIANT_FILE].value, &variants)) >= 0)
        return rc;
    if (spec.variant && !cli_variants_find(&variants, spec.variant)) {
        cli_variant_not_registered(spec.variant);
        rc = cli_usage_error(cmd, "%s", fi_last_error());
        goto out;
    }
    if ((rc = explain_context(cmd, arch, &variants, &ctx)) != CLI_EXIT_OK) goto out;
    if (options[OPT_SOURCE].value || options[OPT_PTX].value) {
        /* Exactly the bytes, so that they can be saved, diffed or fed to other tools. */
        int ptx = options[OPT_PTX].value != NULL;
        char *unit = NULL;
        size_t size = 0;
        if (fi_jit_unit(&unit, &size, ctx, &spec, arch, ptx) < 0)
            rc = cli_runtime_error(cmd, ptx ? "cannot compile to PTX" : "cannot expand the spec");
        else if (fwrite(unit, 1, size, stdout) != size || fflush(stdout) != 0)
            rc = cli_runtime_error(cmd, "cannot write the output");
        fi_free(unit);
    } else if (fi_jit_explain(ctx, &spec, arch, write_stdout, NULL) < 0) {
        rc = cli_runtime_error(cmd, "cannot explain the key");
    }
out:
    fi_jit_ctx_free(ctx);
    cli_variants_free(&variants);
    return rc;
}

/* ---- command table ------------------------------------------------------------- */

static const cli_command commands[] = {
    {"prewarm",
     "usage: fijit prewarm [--kernel K] [--dtype D,..] [--head-dim N,..] [--mask M,..]\n"
     "                     [--pos P,..] [--softcap 0,1] [--variant V,..] [--arch A,..]\n"
     "                     [--variant-file FILE].. [--manifest FILE] [-j N]\n"
     "                     [--remote URL] [--cache-dir DIR]\n",
     "\n"
     "Compile specs into the cache so that later processes only load them. Needs no GPU.\n"
     "The specs are the cartesian product of the list options below, and/or the lines\n"
     "of a manifest (with --manifest alone, only the manifest).\n"
     "\n"
     "  --kernel K,..      kernel kinds (default: decode)\n"
     "  --dtype D,..       q/kv/o dtype (default: fp16,bf16)\n"
     "  --head-dim N,..    head dims (default: 64,128,256; mla_decode: 512)\n"
     "  --head-dim-vo N,.. head dims of v and o where they differ from q and k's\n"
     "                     (default: 0, equal): prefill kinds --head-dim 192\n"
     "                     --head-dim-vo 128 (MLA's prefill)\n"
     "  --mask M,..        masks: none, window (default: none)\n"
     "  --pos P,..         position encodings: none, rope, alibi (default: none)\n"
     "  --softcap S,..     logits soft-cap off/on: 0, 1 (default: 0)\n"
     "  --variant V,..     variants: default (built in) or the name of a --variant-file\n"
     "                     snippet (default: the variants of --variant-file if given,\n"
     "                     else default)\n"
     "  --variant-file FILE\n"
     "                     register the variant snippet in FILE, named after the file\n"
     "                     up to its first '.' (dir/sigmoid.cuh: variant=sigmoid), in\n"
     "                     every worker; repeatable. A snippet the library refuses\n"
     "                     (no struct Variant, unbalanced brackets, #include or #line)\n"
     "                     stops prewarm before anything is compiled; one that does not\n"
     "                     compile fails its specs, its errors naming FILE and its lines.\n"
     "  --arch A,..        target arches, e.g. sm_80,sm_90a (default: $FIJIT_ARCH, else\n"
     "                     the arch of CUDA device 0, else sm_90a)\n"
     "  --manifest FILE    one canonical spec per line, e.g.\n"
     "                       decode q=bf16 hd=128 mask=window pos=rope softcap=1\n"
     "                     '#' starts a comment; blank lines are skipped. A bad line,\n"
     "                     or one naming a variant=NAME no --variant-file registers,\n"
     "                     stops prewarm before anything is compiled.\n"
     "  -j, --jobs N       worker processes (default: number of online CPUs; at most\n"
     "                     twice that)\n"
     CLI_REMOTE_HELP
     "                     With a remote, specs it holds are fetched instead of\n"
     "                     compiled, and what is compiled or cached here is pushed\n"
     "                     to it (unless it is ?readonly): prewarm fills the fleet.\n"
     CACHE_DIR_HELP
     "\n"
     "Prints one line per spec (compiled / cached / FAILED) or, on a terminal, a\n"
     "progress bar; then a summary (with a remote, a second line: entries fetched\n"
     "from it, bytes pushed to it, its errors), and each failed spec again on\n"
     "stderr. A read-only cache is used as it is: what it holds is 'already\n"
     "cached', and only specs it would have to store fail.\n"
     "Exit status: 0 all built, 1 some failed or the --remote given failed to\n"
     "answer, 2 bad arguments, manifest, variant file or setting.\n",
     cli_cmd_prewarm},
    {"list",
     "usage: fijit list [--kernel K,..] [--arch A,..] [--dtype D,..] [--variant V,..]\n"
     "                  [--keys] [--cache-dir DIR]\n",
     "\n"
     "One line per cache entry: canonical spec (ending in variant=NAME for a custom\n"
     "variant), arch, size, age (since it was built), hits (loads from disk). A header\n"
     "line is added when stdout is a terminal. Each edit of a variant's snippet builds\n"
     "a new entry with the same spec; --keys tells them apart.\n"
     "\n"
     "  --kernel K,..      only these kernel kinds\n"
     "  --arch A,..        only these arches\n"
     "  --dtype D,..       only entries with one of these dtypes (q, kv or o)\n"
     "  --variant V,..     only these variants (default: entries without a custom one)\n"
     "  --keys             start each line with the entry's key (its object file name)\n"
     CACHE_DIR_HELP,
     cmd_list},
    {"stats",
     "usage: fijit stats [--json] [--zero] [--cache-dir DIR]\n",
     "\n"
     "Cache statistics, summed over every process that used the cache.\n"
     "\n"
     "  --json             one JSON object on one line, integer values: memory_hits,\n"
     "                     disk_hits, misses, compiles, compile_failures, compile_ns,\n"
     "                     bytes_written, corrupt, entries, bytes, remote_hits,\n"
     "                     remote_misses, remote_errors, remote_corrupt,\n"
     "                     remote_bytes_in, remote_bytes_out\n"
     "  -z, --zero         zero the counters first (entries and bytes are the cache's\n"
     "                     content and stay)\n"
     CACHE_DIR_HELP,
     cmd_stats},
    {"verify",
     "usage: fijit verify [--repair] [--cache-dir DIR]\n",
     "\n"
     "Check every entry: object file present, header and checksum good, no objects\n"
     "missing from the index. Each problem is printed on its own line.\n"
     "\n"
     "  --repair           remove bad entries and re-index or delete stray objects\n"
     "                     (a removed kernel is rebuilt on its next use or prewarm)\n"
     CACHE_DIR_HELP
     "\n"
     "Exit status: 0 the cache is clean (also after a successful --repair); 1 problems\n"
     "were found and not repaired, or the check itself failed.\n",
     cmd_verify},
    {"clear",
     "usage: fijit clear [--cache-dir DIR]\n",
     "\n"
     "Remove every entry and object from the cache. Statistics are kept\n"
     "(see 'fijit stats --zero').\n"
     "\n"
     CACHE_DIR_HELP,
     cmd_clear},
    {"gc",
     "usage: fijit gc [--max-size SIZE] [--older-than DURATION] [--cache-dir DIR]\n",
     "\n"
     "Evict least-recently-used entries.\n"
     "\n"
     "  --max-size SIZE    shrink the cache to at most SIZE: bytes, or with a suffix\n"
     "                     K, M, G, T (powers of 1024), e.g. 500M, 2G; 0: no limit\n"
     "                     (default: $FIJIT_MAX_CACHE_SIZE, else max_size in the\n"
     "                     cache's fijit.conf, else 5 GiB)\n"
     "  --older-than AGE   remove entries not used for AGE: a number with s, m, h, d or\n"
     "                     w, e.g. 30d, 12h, 90m, 45s\n"
     CACHE_DIR_HELP,
     cmd_gc},
    {"show-config",
     "usage: fijit show-config [--remote URL] [--cache-dir DIR]\n",
     "\n"
     "Print versions (fijit, NVRTC, CUDA driver), the GPU arch, the cache directory,\n"
     "its configuration file, each setting (size limit, JIT, log level, cache modes,\n"
     "lock timeout, the remote cache with its password masked) with where it came\n"
     "from (--remote, a FIJIT_* variable, the file, or the default), and the\n"
     "environment variables fijit reads. A bad value is an error (exit 2), as for\n"
     "the commands that use it.\n"
     "\n"
     CLI_REMOTE_HELP
     CACHE_DIR_HELP,
     cmd_show_config},
    {"explain",
     "usage: fijit explain SPEC [--arch A] [--variant-file FILE].. [--source | --ptx]\n"
     "                     [--cache-dir DIR]\n",
     "\n"
     "Print what the cache key of SPEC is made of (every tagged field and the hash of\n"
     "every source text) and the key itself, to understand a surprising cache miss.\n"
     "SPEC is a canonical spec, quoted or not: \"decode q=fp16 hd=128 mask=window\".\n"
     "Needs no GPU, and creates no cache directory.\n"
     "\n"
     "  --arch A           target arch (default as for prewarm)\n"
     "  --source           print instead the translation unit NVRTC compiles for SPEC,\n"
     "                     byte for byte (the 'source' the key hashes; the headers it\n"
     "                     includes are fijit's templates, hashed as 'header:NAME')\n"
     "  --ptx              print instead the PTX NVRTC makes of that unit for the\n"
     "                     virtual arch (compute_90a for sm_90a): compiled now, never\n"
     "                     cached (the cache holds cubins)\n"
     "  --variant-file FILE\n"
     "                     the snippet of the variant=NAME that SPEC names, as for\n"
     "                     prewarm (its bytes are part of the key, so explain needs\n"
     "                     it; the output gives its size and xxh3-64 hash); repeatable\n"
     CACHE_DIR_HELP,
     cmd_explain},
    {"remote",
     "usage: fijit remote ping|stats|list [--keys] [--remote URL]\n",
     "\n"
     "Look at the fleet's remote cache.\n"
     "  ping               one round trip, and its time\n"
     "  stats              entries and bytes under this fleet's prefix, how many carry\n"
     "                     a MAC, and what the server says of its memory, eviction\n"
     "                     policy, evictions, hits and misses\n"
     "  list               one line per entry (from its header): spec, arch, size,\n"
     "                     'sealed' when it carries a MAC\n"
     "\n"
     "  --keys             list: start each line with the entry's key\n"
     CLI_REMOTE_HELP
     "\n"
     "Exit status: 0 answered, 1 the remote failed, 2 bad arguments or no remote.\n",
     cli_cmd_remote},
    {"export",
     "usage: fijit export -o FILE (--manifest M | SPEC... | --all) [--arch A,..]\n"
     "                    [--cache-dir DIR]\n",
     "\n"
     "Write cache entries to a bundle, one file (SQLite) to carry to hosts that cannot\n"
     "reach the remote cache: each entry's bytes, key, spec, arch, checksum and, with\n"
     "FIJIT_REMOTE_SECRET set, its MAC. Each entry is verified as it is read.\n"
     "\n"
     "  -o, --output FILE  the bundle to create (refused if it exists)\n"
     "  --manifest M       the entries of the specs in manifest M (as for prewarm)\n"
     "  SPEC...            the entries of these canonical specs\n"
     "  --all              every entry\n"
     "  --arch A,..        only entries built for these arches\n"
     CACHE_DIR_HELP,
     cli_cmd_export},
    {"import",
     "usage: fijit import FILE [--cache-dir DIR]\n",
     "\n"
     "Add the entries of a bundle to the cache. Every entry is verified first (header,\n"
     "checksum, key; with FIJIT_REMOTE_SECRET set, its MAC, and a bundle without MACs\n"
     "is refused); entries the cache holds already are skipped. Prints the counts, and\n"
     "each refused entry on stderr.\n"
     "\n"
     CACHE_DIR_HELP
     "\n"
     "Exit status: 0 every entry added or present, 1 some refused or the bundle is\n"
     "unreadable, of another schema or damaged, 2 bad arguments.\n",
     cli_cmd_import},
    {"demo",
     "usage: fijit demo [--kv-len N] [--remote URL] [--cache-dir DIR]\n",
     "\n"
     "GPU smoke test: run decode fp16 hd128 (32 query heads, 8 KV heads, NHD) on CUDA\n"
     "device 0 with random inputs and compare with a float64 CPU reference.\n"
     "Without a CUDA device it says so and exits 0.\n"
     "\n"
     "  --kv-len N         keys in the KV cache (default: 4096)\n"
     CACHE_DIR_HELP
     "\n"
     "Exit status: 0 passed or no device; 1 the error is above 1e-2 or a call failed.\n",
     cli_cmd_demo},
};

static void print_main_help(FILE *f)
{
    fprintf(f,
            "usage: fijit [--cache-dir DIR] COMMAND [options]\n"
            "       fijit --help | --version\n"
            "\n"
            "fijit %s — JIT compiler and cache for attention kernels.\n"
            "\n"
            "commands:\n"
            "  prewarm       compile a set of specs into the cache (no GPU needed)\n"
            "  list          list cache entries\n"
            "  stats         show or zero cache statistics\n"
            "  verify        check every cache entry, optionally repair\n"
            "  clear         remove every cache entry\n"
            "  gc            evict entries by size or age\n"
            "  show-config   versions, GPU, cache directory and environment\n"
            "  explain       show what a spec's cache key is made of\n"
            "  remote        ping, size up or list the fleet's remote cache\n"
            "  export        write cache entries to a bundle file\n"
            "  import        add a bundle's entries to the cache\n"
            "  demo          GPU smoke test against a CPU reference\n"
            "\n"
            "Run 'fijit COMMAND --help' for a command's options.\n"
            "Exit status: 0 success, 1 failure, 2 bad arguments or settings.\n"
            "\n"
            "settings (command line > environment > <cache dir>/fijit.conf > default;\n"
            "docs/configuration.md):\n"
            "  FIJIT_CACHE_DIR        the cache directory\n"
            "  FIJIT_MAX_CACHE_SIZE   max_size: size limit, e.g. 10G; 0: none (default 5G)\n"
            "  FIJIT_JIT              jit: 1/true/yes/on or 0/false/no/off (default on)\n"
            "  FIJIT_LOG              log_level: off, error, warn, info, debug (default warn)\n"
            "  FIJIT_REMOTE           remote: the fleet's remote cache URL (default none)\n"
            "  FIJIT_UMASK            umask: e.g. 027 or 007 to share the cache with a group\n"
            "                         (default: private, 0700 directories, 0600 files)\n"
            "  FIJIT_ARCH, FIJIT_LOCK_TIMEOUT_MS, FIJIT_REMOTE_SECRET, FIJIT_REMOTE_TOKEN:\n"
            "                         environment only\n",
            fi_version_string());
    cli_env_choices_help(f);
}

int main(int argc, char **argv)
{
    int i = 1;
    /* Options before the command: --help, --version and a --cache-dir that
     * applies to whatever command follows. */
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_main_help(stdout);
            return CLI_EXIT_OK;
        }
        if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0) {
            printf("fijit %s\n", fi_version_string());
            return CLI_EXIT_OK;
        }
        if (strcmp(arg, "--cache-dir") == 0 || strncmp(arg, "--cache-dir=", 12) == 0) {
            const char *value = arg[11] == '=' ? arg + 12 : i + 1 < argc ? argv[++i] : NULL;
            if (!value || !*value) {
                fprintf(stderr, "fijit: option --cache-dir needs a %s\n\n",
                        value ? "non-empty value" : "value");
                print_main_help(stderr);
                return CLI_EXIT_USAGE;
            }
            cli_cache_dir_option = value;
        } else {
            fprintf(stderr, "fijit: unknown option '%s'\n\n", arg);
            print_main_help(stderr);
            return CLI_EXIT_USAGE;
        }
    }
    if (i == argc) {
        fprintf(stderr, "fijit: missing command\n\n");
        print_main_help(stderr);
        return CLI_EXIT_USAGE;
    }
    for (size_t c = 0; c < sizeof commands / sizeof *commands; c++)
        if (strcmp(argv[i], commands[c].name) == 0)
            return commands[c].run(&commands[c], argc - i, argv + i);
    fprintf(stderr, "fijit: unknown command '%s'\n\n", argv[i]);
    print_main_help(stderr);
    return CLI_EXIT_USAGE;
}
