/* The operator's settings: defaults, then fijit.conf, then FIJIT_* (settings.h). In
 * core/: it checks a remote URL and a fleet secret with the store's own rules. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/error.h"
#include "core/settings.h"
#include "common/sys.h"
#include "store/seal.h"
#include "store/remote/remote.h"
#include "store/store.h"

#define BOOL_HELP "1, true, yes, on or 0, false, no, off"

static int parse_lock_timeout(int64_t *out, const char *text)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || errno || *end || v < -1)
        return fi__error(FI_EINVALID, "'%.32s' is not a number of milliseconds (-1: wait "
                         "forever)", text);
    *out = v;
    return 0;
}

/* One setting, as the file and the environment spell it. */
typedef enum setting_id { S_JIT, S_LOG, S_SIZE, S_REMOTE, S_UMASK, S_COUNT } setting_id;

static const struct {
    const char *key;
    const char *env;
} names[S_COUNT] = {
    [S_JIT] = {"jit", "FIJIT_JIT"},
    [S_LOG] = {"log_level", "FIJIT_LOG"},
    [S_SIZE] = {"max_size", "FIJIT_MAX_CACHE_SIZE"},
    [S_REMOTE] = {"remote", "FIJIT_REMOTE"},
    [S_UMASK] = {"umask", "FIJIT_UMASK"},
};

/* ---- variables with no fijit.conf line (settings.h) ---------------------------- */

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

int fi__prefill_ws_choice_parse(fi_prefill_ws_choice *out, int *out_ctas, const char *value)
{
    static const struct {
        const char *word;
        fi_prefill_ws_choice choice;
        int takes_count;
    } modes[] = {{"0", FI_PREFILL_WS_OFF, 0},
                 {"grid", FI_PREFILL_WS_GRID, 0},
                 {"persistent", FI_PREFILL_WS_PERSISTENT, 1},
                 {"static", FI_PREFILL_WS_STATIC, 1}};
    *out = FI_PREFILL_WS_DEFAULT;
    *out_ctas = 0;
    if (!value || !*value) return 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const size_t n = strlen(modes[i].word);
        if (strncmp(value, modes[i].word, n) != 0) continue;
        if (value[n] == '\0') {
            *out = modes[i].choice;
            return 0;
        }
        if (value[n] != ':' || !modes[i].takes_count) return -1;
        char *end;
        errno = 0;
        const long ctas = strtol(value + n + 1, &end, 10);
        if (!isdigit((unsigned char)value[n + 1]) || errno || *end || ctas <= 0 ||
            ctas > INT_MAX)
            return -1;
        *out = modes[i].choice;
        *out_ctas = (int)ctas;
        return 0;
    }
    return -1;
}

static int prefill_ws_ok(const char *value)
{
    fi_prefill_ws_choice choice;
    int ctas;
    return fi__prefill_ws_choice_parse(&choice, &ctas, value) == 0;
}

/* Follows a link: a templates folder may be one. */
static int directory_ok(const char *value)
{
    struct stat st;
    return stat(value, &st) == 0 && S_ISDIR(st.st_mode);
}

static const struct {
    const char *name;
    const char *accepted; /* what a bad value's message says it is not */
    int (*ok)(const char *value);
} env_choices[] = {
    {"FIJIT_FAST_COMPILE", "off, min, mid or max", fast_compile_ok},
    {"FIJIT_LOAD", "auto, library or module", load_ok},
    {"FIJIT_PREFILL_WS", "0, grid, persistent[:N] or static[:N]", prefill_ws_ok},
    {"FIJIT_TEMPLATE_DIR", "an existing directory", directory_ok},
};

int fi__env_choice_check(const char *name, const char *value)
{
    for (size_t i = 0; i < sizeof env_choices / sizeof env_choices[0]; i++) {
        if (strcmp(name, env_choices[i].name) != 0) continue;
        if (!value || !*value || env_choices[i].ok(value)) return 0;
        return fi__error(FI_EINVALID, "%s: '%.64s' is not %s", name, value,
                         env_choices[i].accepted);
    }
    return fi__error(FI_EINVALID, "%.64s is no variable fijit checks", name);
}

/* ---- the settings ------------------------------------------------------------ */

/* Set setting `id` of `out` from `value`, marked as coming from `from`.
 * FI_EINVALID with words about the value (the caller says where it was). */
static int setting_apply(fi_settings *out, setting_id id, const char *value,
                         fi_setting_origin from)
{
    int v;
    switch (id) {
    case S_JIT:
        if ((v = fi__parse_bool(value)) < 0)
            return fi__error(FI_EINVALID, "'%.32s' is not a boolean (" BOOL_HELP ")", value);
        out->jit = v;
        out->jit_from = from;
        return 0;
    case S_LOG:
        if ((v = fi__parse_log_level(value)) < 0)
            return fi__error(FI_EINVALID, "'%.32s' is not a log level (" FI_LOG_LEVEL_HELP ")",
                             value);
        out->log_level = v;
        out->log_level_from = from;
        return 0;
    case S_SIZE:
        if (fi__parse_size(&out->max_cache_bytes, value) < 0) return FI_EINVALID;
        out->max_cache_bytes_from = from;
        return 0;
    case S_REMOTE:
        if (strlen(value) >= sizeof out->remote)
            return fi__error(FI_EINVALID, "the remote URL is longer than %zu bytes",
                             sizeof out->remote - 1);
        if (fi_remote_list_check(value) < 0) return FI_EINVALID;
        snprintf(out->remote, sizeof out->remote, "%s", value);
        out->remote_from = from;
        return 0;
    case S_UMASK:
        if ((v = fi__parse_umask(value)) < 0) return v;
        out->umask = v;
        out->umask_from = from;
        return 0;
    default:
        return fi__error(FI_EINVALID, "no such setting");
    }
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
    return s;
}

int fi__config_parse(fi_settings *out, const char *path, char *text)
{
    int seen[S_COUNT] = {0}, line_no = 0;
    char *next = text;
    while (next) {
        char *line = next;
        line_no++;
        if ((next = strchr(line, '\n'))) *next++ = '\0';
        line = trim(line);
        if (!*line || *line == '#') continue;
        char *eq = strchr(line, '=');
        if (!eq)
            return fi__error(FI_EINVALID, "%s:%d: expected 'key = value', got '%.64s'", path,
                             line_no, line);
        *eq = '\0';
        char *key = trim(line), *value = trim(eq + 1);
        int id = 0;
        while (id < S_COUNT && strcmp(names[id].key, key) != 0) id++;
        if (id == S_COUNT)
            return fi__error(FI_EINVALID, "%s:%d: unknown setting '%.64s' (known: jit, "
                             "log_level, max_size, remote, umask)", path, line_no, key);
        if (seen[id]++)
            return fi__error(FI_EINVALID, "%s:%d: %s is set twice", path, line_no, key);
        if (setting_apply(out, (setting_id)id, value, FI_SETTING_FILE) < 0) {
            char why[1024];
            snprintf(why, sizeof why, "%s", fi_last_error());
            return fi__error(FI_EINVALID, "%s:%d: %s: %s", path, line_no, key, why);
        }
    }
    return 0;
}

/* Read `cache_dir`/fijit.conf into `out`, if there is one. */
static int config_read(fi_settings *out, const char *cache_dir)
{
    int rc = 0;
    void *data = NULL;
    size_t size = 0;
    struct stat sb;
    char path[sizeof out->file];
    if ((size_t)snprintf(path, sizeof path, "%s/" FI_CONFIG_FILE_NAME, cache_dir) >= sizeof path)
        return fi__error(FI_EINVALID, "the cache directory's name is too long");
    if (fi__lstat(path, &sb) < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0; /* no file: the defaults */
        return fi__error(FI_EIO, "cannot read %s: %s", path, strerror(errno));
    }
    /* Whoever can write it chooses the remote fijit trusts and the modes that
     * make the directory acceptable: only this user or root may. */
    if (S_ISREG(sb.st_mode) && sb.st_uid != geteuid() && sb.st_uid != 0)
        return fi__error(FI_EPERM, "%s belongs to uid %u, not to this user (uid %u) or root; "
                         "refusing it", path, (unsigned)sb.st_uid, (unsigned)geteuid());
    if (S_ISREG(sb.st_mode) && (sb.st_mode & (S_IWGRP | S_IWOTH)))
        return fi__error(FI_EPERM, "%s is writable by group or others (mode %03o); refusing it "
                         "(chmod go-w)", path, (unsigned)(sb.st_mode & 0777));
    FI_TRY(fi__read_file(path, &data, &size, FI_CONFIG_FILE_MAX));
    if (memchr(data, '\0', size))
        FI_FAIL(FI_EINVALID, "%s is not a text file (it holds a NUL byte)", path);
    snprintf(out->file, sizeof out->file, "%s", path);
    FI_TRY(fi__config_parse(out, path, data));
out:
    fi__free(data);
    return rc;
}

int fi__settings_load(fi_settings *out, const char *cache_dir, int strict_log)
{
    int rc = 0;
    const char *env;
    const unsigned version = out->version;
    memset(out, 0, sizeof *out);
    out->version = version;
    out->jit = 1;
    out->log_level = FI_LOG_WARN;
    out->max_cache_bytes = FI_DEFAULT_MAX_CACHE_BYTES;
    out->umask = -1;
    out->lock_timeout_ms = FI_STORE_LOCK_TIMEOUT_MS;
    if (cache_dir && *cache_dir) FI_TRY(config_read(out, cache_dir));
    for (int id = 0; id < S_COUNT; id++) {
        if (!(env = getenv(names[id].env)) || !*env) continue;
        if (setting_apply(out, (setting_id)id, env, FI_SETTING_ENV) == 0) continue;
        if (id == S_LOG && !strict_log) { /* a typo must not silence the warnings it was meant to show */
            fi__log(FI_LOG_WARN, "FIJIT_LOG='%.32s' is not a log level (" FI_LOG_LEVEL_HELP
                    "); ignoring it", env);
            continue;
        }
        char why[1024];
        snprintf(why, sizeof why, "%s", fi_last_error());
        FI_FAIL(FI_EINVALID, "%s: %s", names[id].env, why);
    }
    if ((env = getenv("FIJIT_LOCK_TIMEOUT_MS")) && *env) {
        if (parse_lock_timeout(&out->lock_timeout_ms, env) < 0) {
            char why[256];
            snprintf(why, sizeof why, "%s", fi_last_error());
            FI_FAIL(FI_EINVALID, "FIJIT_LOCK_TIMEOUT_MS: %s", why);
        }
        out->lock_timeout_ms_from = FI_SETTING_ENV;
    }
    if ((env = getenv("FIJIT_REMOTE_SECRET")) && *env) {
        if (strlen(env) < FI_SEAL_SECRET_MIN)
            FI_FAIL(FI_EINVALID, "FIJIT_REMOTE_SECRET is %zu characters; a fleet secret needs at "
                    "least %d (e.g. 32 random hex digits)", strlen(env), FI_SEAL_SECRET_MIN);
        out->remote_secret_set = 1;
    }
    for (size_t i = 0; i < sizeof env_choices / sizeof env_choices[0]; i++)
        FI_TRY(fi__env_choice_check(env_choices[i].name, getenv(env_choices[i].name)));
out:
    return rc;
}
