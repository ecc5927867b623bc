/*
 * Shared pieces of the `fijit` command-line tool: exit codes, the option
 * parser every subcommand uses, value parsers (durations, lists) and
 * the entry points of subcommands that live in their own files
 * (cli_prewarm.c, cli_demo.c).
 */
#ifndef FIJIT_CLI_H
#define FIJIT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fijit.h"
#include "fijit_cache.h"

/* Exit codes: scripts tell "you called me wrong" from "it did not work". */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILED = 1, CLI_EXIT_USAGE = 2 };

/* One option of a subcommand. The parser fills `value`: NULL when absent,
 * "" for a flag that was given, the argument for an option that takes one.
 * A `list` option may repeat; its values are joined with commas. */
typedef struct cli_option {
    const char *name; /* long name without "--" */
    char short_name;  /* 0: none */
    int takes_value;
    int list;
    const char *value;
} cli_option;

typedef struct cli_command {
    const char *name;
    const char *synopsis; /* "fijit list [options]" lines, shown on errors too */
    const char *help;     /* everything else --help prints */
    int (*run)(const struct cli_command *cmd, int argc, char **argv);
} cli_command;

/* Parsed positional arguments of a subcommand. */
typedef struct cli_args {
    char **positional;
    int positional_count;
} cli_args;

/* Parse argv[1..] of a subcommand against `options` (terminated by a zero
 * entry). Every subcommand also takes --cache-dir DIR and --help/-h, which the
 * parser handles itself. Returns -1 to go on, or an exit code to return now
 * (0 after printing help, CLI_EXIT_USAGE after printing what is wrong). */
int cli_parse(const cli_command *cmd, cli_option *options, int argc, char **argv,
              cli_args *out);
/* cli_parse for a subcommand that takes options only: a positional argument
 * is a usage error. */
int cli_parse_options(const cli_command *cmd, cli_option *options, int argc, char **argv);

/* Print "fijit CMD: <message>" and the usage to stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Print "fijit CMD: <what>: <fi_last_error()>" to stderr; returns CLI_EXIT_FAILED. */
int cli_runtime_error(const cli_command *cmd, const char *what);

/* --cache-dir as given (here or before the subcommand), or NULL. */
extern const char *cli_cache_dir_option;
/* --remote as given to a command that takes it, or NULL ($FIJIT_REMOTE). */
extern const char *cli_remote_option;
/* Take a command's --remote URL (may be NULL) and check it, or else
 * FIJIT_REMOTE: -1 to go on, or CLI_EXIT_USAGE for a bad URL. */
int cli_check_remote(const cli_command *cmd, const char *option);
/* The remote URL in use (--remote, else FIJIT_REMOTE), or NULL. */
const char *cli_remote_url(void);
/* The URLs of a checked remote list (separated by spaces), at most
 * CLI_REMOTE_LIST_MAX (what the library takes): how many. */
#define CLI_REMOTE_LIST_MAX 8
int cli_remote_list(char urls[][2048], const char *list);
/* show-config's lines for a checked remote list: each remote, masked, in
 * the order they are asked (`source` says where the list came from), and
 * which one holds the fleet's build leases. */
void cli_show_remotes(const char *list, const char *source);
#define CLI_REMOTE_HELP "  --remote URL       the fleet's remote cache (default: $FIJIT_REMOTE), e.g.\n" \
                        "                     redis://cache-host:6379/0, unix:///run/redis.sock or\n" \
                        "                     https://cache-host/fijit; several: separated by spaces\n" \
                        "                     (options after '?': README). A URL with a password\n" \
                        "                     belongs in $FIJIT_REMOTE: every user can read a\n" \
                        "                     command line (docs/security.md)\n"


/* The cache directory the library would use (--cache-dir, FIJIT_CACHE_DIR,
 * XDG_CACHE_HOME/fijit if absolute, ~/.cache/fijit), copied into `out`, found
 * without a context (so without FIJIT_ARCH, and creating nothing). fi_error code. */
int cli_resolve_cache_dir(char *out, size_t size);
/* Open the cache the command works on, its directory in `dir`. A directory
 * that does not exist is an empty cache: 0 with *out NULL, nothing created.
 * Prints the error; returns an exit code (0 on success). */
int cli_open_store(const cli_command *cmd, fi_cache **out, char dir[4096]);

/* Environment values a command uses, checked before it does anything: a bad
 * one is a usage error (exit 2) like a bad option. CLI_ENV_SETTINGS: every
 * setting the library reads (FIJIT_* and the cache's fijit.conf), into
 * cli_settings; CLI_ENV_LOG and CLI_ENV_SIZE are older names for it. */
enum {
    CLI_ENV_SETTINGS = 1u << 0,
    CLI_ENV_ARCH = 1u << 2,
    CLI_ENV_LOG = CLI_ENV_SETTINGS,
    CLI_ENV_SIZE = CLI_ENV_SETTINGS,
};
/* -1 to go on, or CLI_EXIT_USAGE after printing which value is wrong. */
int cli_check_env(const cli_command *cmd, unsigned which);
/* The lines in `fijit --help` and in `fijit show-config` of the variables
 * of cli_env.c (FIJIT_FAST_COMPILE, FIJIT_LOAD, ...), which
 * cli_check_env(CLI_ENV_SETTINGS) checks through fi_settings_load. */
void cli_env_choices_help(FILE *f);
void cli_env_choices_show(void);
/* Which part of its tuple an entry is, for rows that would read the same
 * (cli_parts.c): a tuple built in parts has an entry per part, each with the
 * tuple's spec and arch. */
typedef struct cli_parts cli_parts;
int cli_parts_new(cli_parts **out);
void cli_parts_free(cli_parts *parts);
/* What a row of a list adds after its columns: "" for a row whose spec
 * and arch no neighbour has (`prev`, `next`: the rows around it, ordered by
 * spec and arch; NULL at either end), else "  part 1 of 2", or "  key
 * 1a2b3c4d" for an entry this fijit would not build (other templates,
 * NVRTC or FIJIT_FAST_COMPILE, or a variant's). */
void cli_parts_note(char *out, size_t out_size, cli_parts *parts, const fi_cache_entry *row,
                    const fi_cache_entry *prev, const fi_cache_entry *next);
/* The settings cli_check_env(CLI_ENV_SETTINGS) read for the command's cache. */
extern fi_settings cli_settings;
/* An arch the command will compile for: well formed and one the NVRTC in use
 * compiles for. `what` names its source ("--arch", "FIJIT_ARCH"). -1 or
 * CLI_EXIT_USAGE. */
int cli_check_arch(const cli_command *cmd, const char *what, const char *arch);

/* Sizes ("500M", "4GiB") are parsed by the library: fi_cache_size_parse. */
/* "30d", "12h", "90m", "45s", "2w", "3600" (seconds). 0 or -1. */
int cli_parse_duration(const char *text, int64_t *out_seconds);
/* A positive decimal integer that fits in int. 0 or -1. */
int cli_parse_positive_int(const char *text, int *out);
/* Human forms: "123 B", "88.1 KiB", "3.0 GiB"; "45s", "12m", "3h", "2d". */
void cli_format_size(char *buf, size_t size, int64_t bytes);
void cli_format_age(char *buf, size_t size, int64_t seconds);

/* Split a comma-separated list into a fresh array of fresh strings (free with
 * cli_free_list). Empty items are an error (returns -1). */
int cli_split_list(const char *text, char ***out, int *out_count);
void cli_free_list(char **items, int count);

/* The arch of CUDA device 0 ("sm_90a"), found without touching the driver
 * state of this process when `in_child` (a forked helper asks the driver, so
 * that this process may still fork workers). 1 found, 0 no device/driver. */
int cli_detect_gpu_arch(char out[16], int in_child);
/* The arch compile-only work targets when none is given: $FIJIT_ARCH, else
 * device 0's, else sm_90a. `source` (may be NULL) says which rule applied. */
void cli_default_arch(char out[16], int in_child, const char **source);

/* Parse manifest text (cli_manifest.c): one spec per line, '#' comments,
 * blank lines skipped; calls `fn` with each trimmed spec line (NUL-terminated)
 * and its 1-based number. A NUL, control or non-ASCII byte, an over-long line,
 * or `fn` returning nonzero stops it: -1 with the reason in `err` (when `fn`
 * failed, `fn` may have written `err` itself). 0 when every line was taken. */
int cli_manifest_parse(const char *data, size_t size,
                       int (*fn)(void *user, int line_no, const char *spec), void *user,
                       char *err, size_t err_size);

/* Variant snippets given with --variant-file (cli_variant.c). */
typedef struct cli_variant {
    char name[64]; /* the file name up to its first '.' */
    char *path;    /* as given */
    char *source;  /* the file's text, read once */
} cli_variant;

typedef struct cli_variant_set {
    cli_variant *items; /* distinct names, in the order given */
    int count;
} cli_variant_set;

/* Read every file of the comma list `paths` (NULL: none) and check each by
 * registering it in a memory-only context. Returns -1 to go on, or an exit
 * code after printing what is wrong (unreadable file, a name that cannot be
 * derived or is taken by a file with other text, the library's message for a
 * snippet it refuses). Free `out` with cli_variants_free. */
int cli_variants_load(const cli_command *cmd, const char *paths, cli_variant_set *out);
/* Register every variant of `set` in `ctx`: 0, or the fi_error code with
 * `*failed` (may be NULL) the index of the one refused. */
int cli_variants_register(fi_jit_ctx *ctx, const cli_variant_set *set, int *failed);
/* Set fi_last_error() to "variant 'NAME' is not registered: give its snippet
 * with --variant-file ..." and return FI_ENOTFOUND. */
int cli_variant_not_registered(const char *name);
/* The variant called `name`, or NULL. */
const cli_variant *cli_variants_find(const cli_variant_set *set, const char *name);
/* "a,b,c": the names of `set`, freshly allocated (NULL when out of memory). */
char *cli_variants_names(const cli_variant_set *set);
void cli_variants_free(cli_variant_set *set);

/* Subcommands in their own files. */
int cli_cmd_prewarm(const cli_command *cmd, int argc, char **argv);
int cli_cmd_demo(const cli_command *cmd, int argc, char **argv);
int cli_cmd_remote(const cli_command *cmd, int argc, char **argv);
int cli_cmd_export(const cli_command *cmd, int argc, char **argv);
int cli_cmd_import(const cli_command *cmd, int argc, char **argv);

/* Replace every control byte and every byte outside printable ASCII in
 * `text` with '?' (as ls does on a terminal), in place (cli_text.c). */
void cli_text_printable(char *text);

#endif
