/*
 * The operator's settings (fi_settings in fijit_cache.h): the environment
 * (FIJIT_*) over the cache's configuration file <cache dir>/fijit.conf over
 * the defaults, each value checked and remembered with where it came from.
 * The program's own choices (fi_jit_options, CLI options) are laid over the
 * result by the caller.
 *
 * The configuration file, one setting per line:
 *
 *     # comment
 *     max_size = 5G        a size as FIJIT_MAX_CACHE_SIZE takes it; 0: no limit
 *     remote = redis://cache-host:6379/0
 *     log_level = info     as FIJIT_LOG
 *     umask = 007          octal; a group-shared cache (docs/configuration.md)
 *     jit = false          as FIJIT_JIT
 *
 * Blank lines and lines starting with '#' are skipped; spaces around the
 * key and the value are not part of them. An unknown key, a repeated key or
 * a bad value is FI_EINVALID naming the file and line.
 */
#ifndef FI_SETTINGS_H
#define FI_SETTINGS_H

#include <stdint.h>

#include "common/parse.h"
#include "fijit_cache.h"

/* The configuration file's name inside the cache directory. */
#define FI_CONFIG_FILE_NAME "fijit.conf"
/* Larger than any honest configuration file. */
#define FI_CONFIG_FILE_MAX (64 * 1024)

/* Fill `out` from the environment and `cache_dir`'s configuration file
 * (cache_dir NULL or "": the environment and the defaults only). With
 * `strict_log` 0 a FIJIT_LOG that is no level is logged and ignored (the
 * library: a typo must not silence the warnings it was meant to show); with
 * 1 it is FI_EINVALID like every other bad value. */
int fi__settings_load(fi_settings *out, const char *cache_dir, int strict_log);

/* The FIJIT_* variables with no fijit.conf line, each read where it acts:
 * FIJIT_FAST_COMPILE (jit.c), FIJIT_LOAD (load.c), FIJIT_PREFILL_WS
 * (launch/prefill_ws.c), FIJIT_TEMPLATE_DIR (expand.c). fi__settings_load
 * refuses a bad value of any of them, so fi_jit_ctx_new and the CLI do.
 * 0 when `value` (NULL or "": unset) is one that variable `name` accepts;
 * FI_EINVALID "NAME: 'value' is not <what it accepts>" otherwise, and for a
 * name that is none of them. */
int fi__env_choice_check(const char *name, const char *value);

/* FIJIT_PREFILL_WS: "0", "grid", or "persistent"/"static" with an optional
 * ":N" count of CTAs (N > 0). */
typedef enum fi_prefill_ws_choice {
    FI_PREFILL_WS_DEFAULT = 0, /* unset or "": chosen per tuple and launch */
    FI_PREFILL_WS_OFF,
    FI_PREFILL_WS_GRID,
    FI_PREFILL_WS_PERSISTENT,
    FI_PREFILL_WS_STATIC,
} fi_prefill_ws_choice;

/* `value` (NULL: unset) parsed into *out and *out_ctas (the N of ":N", 0
 * without one); -1 for a value it does not accept, setting no error. */
int fi__prefill_ws_choice_parse(fi_prefill_ws_choice *out, int *out_ctas, const char *value);

/* Parse the text of a configuration file (NUL-terminated; cut up in place)
 * into `out`, over what it holds; `path` names the file in messages. */
int fi__config_parse(fi_settings *out, const char *path, char *text);

#endif
