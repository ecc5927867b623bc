/*
 * Environment variables that change how kernels are built, loaded or
 * launched and have no line in fijit.conf (no fi_settings field): the lines
 * `fijit --help` and `fijit show-config` print for them. What each accepts
 * is the library's: fi_settings_load refuses a bad value, naming the
 * variable, before a command does anything (cli_check_env), so it is a
 * usage error like a bad FIJIT_JIT.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct cli_env_choice {
    const char *name;
    const char *label; /* show-config's name for it */
    const char *help;  /* `fijit --help`'s description, one line */
    const char *unset; /* what show-config says of an unset variable */
} cli_env_choice;

static const cli_env_choice choices[] = {
    {"FIJIT_FAST_COMPILE", "fast compile",
     "NVRTC -Ofast-compile: off, min, mid, max (default off)",
     "off: NVRTC's default optimisation"},
    {"FIJIT_LOAD", "kernel loading",
     "auto, library (cuLibraryLoadData) or module (default auto)",
     "auto: a library per process where the driver has it, else a module per context"},
    {"FIJIT_PREFILL_WS", "prefill ws launch",
     "sm_90a prefill tiles: 0, grid, persistent[:N], static[:N]",
     "chosen per tuple and launch"},
    {"FIJIT_TEMPLATE_DIR", "templates",
     "read the templates from this directory (development)",
     "the templates built into the library"},
};

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
