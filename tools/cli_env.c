/*
 * Environment variables that change how kernels are built, loaded or
 * launched and have no line in fijit.conf (no fi_settings): what each
 * accepts, checked before a command does anything, and the lines
 * `fijit --help` and `fijit show-config` print for them. The library reads
 * each where it acts (jit.c, load.c, prefill_ws.c) and refuses a bad value
 * there only when it gets that far; checking up front makes a bad value a
 * usage error that names the variable, like a bad FIJIT_JIT.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct cli_env_choice {
    const char *name;
    const char *label;    /* show-config's name for it */
    const char *accepted; /* the words a bad value's message lists */
    const char *help;     /* `fijit --help`'s description, one line */
    const char *unset;    /* what show-config says of an unset variable */
    int (*ok)(const char *value);
} cli_env_choice;

static int is_one_of(const char *value, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(value, *words) == 0) return 1;
    return 0;
}

static int fast_compile_ok(const char *value)
{
    static const char *const levels[] = {"off", "min", "mid", "max", NULL};
    return is_one_of(value, levels);
}

static int load_ok(const char *value)
{
    static const char *const ways[] = {"auto", "library", "module", NULL};
    return is_one_of(value, ways);
}

/* "0", "grid", or "persistent"/"static" with an optional ":N" count of CTAs. */
static int prefill_ws_ok(const char *value)
{
    static const char *const modes[] = {"0", "grid", "persistent", "static", NULL};
    const char *colon = strchr(value, ':');
    int ctas = 0;
    if (!colon) return is_one_of(value, modes);
    if ((strncmp(value, "persistent:", 11) != 0 || colon != value + 10) &&
        (strncmp(value, "static:", 7) != 0 || colon != value + 6))
        return 0;
    return cli_parse_positive_int(colon + 1, &ctas) == 0;
}

static int directory_ok(const char *value)
{
    struct stat st;
    return stat(value, &st) == 0 && S_ISDIR(st.st_mode);
}

static const cli_env_choice choices[] = {
    {"FIJIT_FAST_COMPILE", "fast compile", "off, min, mid or max",
     "NVRTC -Ofast-compile: off, min, mid, max (default off)",
     "off: NVRTC's default optimisation", fast_compile_ok},
    {"FIJIT_LOAD", "kernel loading", "auto, library or module",
     "auto, library (cuLibraryLoadData) or module (default auto)",
     "auto: a library per process where the driver has it, else a module per context",
     load_ok},
    {"FIJIT_PREFILL_WS", "prefill ws launch", "0, grid, persistent[:N] or static[:N]",
     "sm_90a prefill tiles: 0, grid, persistent[:N], static[:N]",
     "chosen per tuple and launch", prefill_ws_ok},
    {"FIJIT_TEMPLATE_DIR", "templates", "an existing directory",
     "read the templates from this directory (development)",
     "the templates built into the library", directory_ok},
};

int cli_check_env_choices(const cli_command *cmd)
{
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++) {
        const char *value = getenv(choices[i].name);
        if (value && *value && !choices[i].ok(value))
            return cli_usage_error(cmd, "%s: '%.64s' is not %s", choices[i].name, value,
                                   choices[i].accepted);
    }
    return -1;
}

void cli_env_choices_help(FILE *f)
{
    fprintf(f, "\nkernel building, loading and launching (environment only; docs/cli.md):\n");
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++)
        fprintf(f, "  %-22s %s\n", choices[i].name, choices[i].help);
}

void cli_env_choices_show(void)
{
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++) {
        const char *value = getenv(choices[i].name);
        if (value && *value)
            printf("%-20s %s (%s)\n", choices[i].label, value, choices[i].name);
        else
            printf("%-20s %s (default)\n", choices[i].label, choices[i].unset);
    }
}
