/*
 * Helpers shared by the `fijit` subcommands: the option parser, error
 * reporting with the usage, parsers and printers for sizes and durations,
 * comma lists, the cache directory rule and GPU arch detection.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


#include "fijit_cache.h"

const char *cli_cache_dir_option;
const char *cli_remote_option;
fi_settings cli_settings = FI_SETTINGS_INIT;

static void print_usage(FILE *f, const cli_command *cmd)
{
    fprintf(f, "%s", cmd->synopsis);
    fprintf(f, "Run 'fijit %s --help' for the options.\n", cmd->name);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fijit %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_usage(stderr, cmd);
    return CLI_EXIT_USAGE;
}

int cli_runtime_error(const cli_command *cmd, const char *what)
{
    const char *msg = fi_last_error();
    fprintf(stderr, "fijit %s: %s: %s\n", cmd->name, what, msg && *msg ? msg : "unknown error");
    return CLI_EXIT_FAILED;
}

/* Append `value` to a list option's earlier values: "--dtype fp16 --dtype bf16"
 * means the same as "--dtype fp16,bf16". The joined strings live until exit;
 * keeping them here says so to leak checkers. */
static char *joined_values[64];
static int joined_count;

static const char *join_list_value(const char *earlier, const char *value)
{
    size_t n = strlen(earlier) + strlen(value) + 2;
    if (joined_count == (int)(sizeof joined_values / sizeof *joined_values)) return NULL;
    char *joined = malloc(n);
    if (!joined) return NULL;
    snprintf(joined, n, "%s,%s", earlier, value);
    joined_values[joined_count++] = joined;
    return joined;
}

static int set_option(const cli_command *cmd, cli_option *opt, const char *value)
{
    if (opt->takes_value && value && !*value)
        return cli_usage_error(cmd, "option --%s needs a non-empty value", opt->name);
    if (opt->list && opt->value && value) {
        if (!(opt->value = join_list_value(opt->value, value)))
            return cli_usage_error(cmd, "option --%s is repeated too often", opt->name);
    } else
        opt->value = value ? value : "";
    return -1;
}

int cli_parse(const cli_command *cmd, cli_option *options, int argc, char **argv,
              cli_args *out)
{
    static char *positional[64];
    out->positional = positional;
    out->positional_count = 0;
    int only_positional = 0;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (only_positional || arg[0] != '-' || arg[1] == '\0') {
            if (out->positional_count == (int)(sizeof positional / sizeof *positional))
                return cli_usage_error(cmd, "too many arguments");
            positional[out->positional_count++] = argv[i];
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_positional = 1;
            continue;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fprintf(stdout, "%s%s", cmd->synopsis, cmd->help);
            return CLI_EXIT_OK;
        }

        /* Find the option: "--name", "--name=value", "-x", "-xVALUE". */
        char name[64];
        const char *inline_value = NULL;
        cli_option *opt = NULL;
        int is_cache_dir = 0;
        if (arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
            if (len >= sizeof name) len = sizeof name - 1;
            memcpy(name, arg + 2, len);
            name[len] = '\0';
            if (eq) inline_value = eq + 1;
            if (strcmp(name, "cache-dir") == 0) is_cache_dir = 1;
            for (cli_option *o = options; o && o->name; o++)
                if (strcmp(o->name, name) == 0) opt = o;
        } else {
            snprintf(name, sizeof name, "%c", arg[1]);
            if (arg[2]) inline_value = arg + 2;
            for (cli_option *o = options; o && o->name; o++)
                if (o->short_name && o->short_name == arg[1]) opt = o;
        }
        /* An option is named without its value: that may be a secret given by mistake. */
        int name_len = arg[1] == '-' ? (int)strcspn(arg, "=") : 2;
        if (!opt && !is_cache_dir)
            return cli_usage_error(cmd, "unknown option '%.*s'", name_len, arg);

        int takes_value = is_cache_dir || opt->takes_value;
        const char *value = NULL;
        if (takes_value) {
            if (inline_value) {
                value = inline_value;
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                return cli_usage_error(cmd, "option '%s' needs a value", arg);
            }
        } else if (inline_value) {
            return cli_usage_error(cmd, "option '%.*s' takes no value", name_len, arg);
        }

        if (is_cache_dir) {
            if (!*value) return cli_usage_error(cmd, "option --cache-dir needs a non-empty value");
            cli_cache_dir_option = value;
            continue;
        }
        int rc = set_option(cmd, opt, value);
        if (rc >= 0) return rc;
    }
    return -1;
}

int cli_parse_options(const cli_command *cmd, cli_option *options, int argc, char **argv)
{
    cli_args args;
    int rc = cli_parse(cmd, options, argc, argv, &args);
    if (rc < 0 && args.positional_count)
        rc = cli_usage_error(cmd, "unexpected argument '%s'", args.positional[0]);
    return rc;
}

int cli_parse_positive_int(const char *text, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v <= 0 || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_duration(const char *text, int64_t *out_seconds)
{
    char *end;
    if (!isdigit((unsigned char)text[0])) return -1;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || v < 0) return -1;
    long long unit = 1;
    switch (*end) {
    case '\0': break;
    case 's': unit = 1; end++; break;
    case 'm': unit = 60; end++; break;
    case 'h': unit = 3600; end++; break;
    case 'd': unit = 86400; end++; break;
    case 'w': unit = 7 * 86400; end++; break;
    default: return -1;
    }
    if (*end) return -1;
    if (v > LLONG_MAX / unit) return -1;
    *out_seconds = (int64_t)(v * unit);
    return 0;
}

void cli_format_size(char *buf, size_t size, int64_t bytes)
{
    static const char units[] = "KMGTP";
    if (bytes < 1024) {
        snprintf(buf, size, "%lld B", (long long)bytes);
        return;
    }
    double v = (double)bytes;
    int u = -1;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, "%.1f %ciB", v, units[u]);
}

void cli_format_age(char *buf, size_t size, int64_t seconds)
{
    if (seconds < 0) seconds = 0;
    if (seconds < 120)
        snprintf(buf, size, "%llds", (long long)seconds);
    else if (seconds < 2 * 3600)
        snprintf(buf, size, "%lldm", (long long)(seconds / 60));
    else if (seconds < 2 * 86400)
        snprintf(buf, size, "%lldh", (long long)(seconds / 3600));
    else
        snprintf(buf, size, "%lldd", (long long)(seconds / 86400));
}

void cli_free_list(char **items, int count)
{
    for (int i = 0; i < count; i++) free(items[i]);
    free(items);
}

int cli_split_list(const char *text, char ***out, int *out_count)
{
    int count = 1;
    for (const char *p = text; *p; p++) count += *p == ',';
    char **items = calloc((size_t)count, sizeof *items);
    if (!items) return -1;
    const char *start = text;
    for (int i = 0; i < count; i++) {
        const char *comma = strchr(start, ',');
        size_t len = comma ? (size_t)(comma - start) : strlen(start);
        /* Surrounding spaces are allowed ("fp16, bf16" from a shell variable). */
        while (len && isspace((unsigned char)*start)) start++, len--;
        while (len && isspace((unsigned char)start[len - 1])) len--;
        if (!len || !(items[i] = strndup(start, len))) {
            cli_free_list(items, count);
            return -1;
        }
        start = comma ? comma + 1 : start + len;
    }
    *out = items;
    *out_count = count;
    return 0;
}

int cli_resolve_cache_dir(char *out, size_t size)
{
    if (cli_cache_dir_option) {
        if ((size_t)snprintf(out, size, "%s", cli_cache_dir_option) >= size)
            return fi_error_set(FI_EINVALID, "--cache-dir is too long");
        return 0;
    }
    /* The library's own rule, without a context: no arch, no store opened. */
    return fi_cache_default_dir(out, size);
}

int cli_open_store(const cli_command *cmd, fi_cache **out, char dir[4096])
{
    struct stat sb;
    *out = NULL;
    if (cli_resolve_cache_dir(dir, 4096) < 0)
        return cli_runtime_error(cmd, "cannot find the cache directory");
    /* Nothing there yet: an empty cache, and looking at it creates nothing. */
    if (stat(dir, &sb) < 0 && errno == ENOENT) return CLI_EXIT_OK;
    /* Reading a read-only cache (an image layer, another user's) works. */
    if (fi_cache_open(out, dir, FI_CACHE_READ_ONLY_FALLBACK) < 0) {
        char what[4200];
        snprintf(what, sizeof what, "cannot open the cache at %s", dir);
        return cli_runtime_error(cmd, what);
    }
    return CLI_EXIT_OK;
}

const char *cli_remote_url(void)
{
    const char *env = getenv("FIJIT_REMOTE");
    if (cli_remote_option) return cli_remote_option;
    if (env && *env) return env;
    return cli_settings.remote[0] ? cli_settings.remote : NULL; /* fijit.conf's */
}

int cli_remote_list(char urls[][2048], const char *list)
{
    int count = 0;
    for (const char *p = list; *p && count < CLI_REMOTE_LIST_MAX;) {
        size_t skip = strspn(p, " \t\r\n"), n = strcspn(p + skip, " \t\r\n");
        p += skip;
        if (n == 0 || n >= 2048) break; /* the end, or a URL the check refused */
        memcpy(urls[count], p, n);
        urls[count++][n] = '\0';
        p += n;
    }
    return count;
}

int cli_check_remote(const cli_command *cmd, const char *option)
{
    char masked[512];
    cli_remote_option = option;
    const char *url = cli_remote_url();
    if (url && fi_cache_remote_url_check(masked, sizeof masked, url) < 0)
        return cli_usage_error(cmd, "%s: %s", option ? "--remote" : "FIJIT_REMOTE", fi_last_error());
    /* An HTTP remote's credentials come from the environment or fijit.conf
     * only: a command line is readable by every user of the machine. (A
     * Redis URL with a password is still taken there, as it always was.) */
    if (option && (strstr(masked, "http://***@") || strstr(masked, "https://***@")))
        return cli_usage_error(cmd, "--remote: an HTTP remote's user and password belong in "
                               "FIJIT_REMOTE or fijit.conf, not on a command line that every "
                               "user can read (docs/security.md)");
    return -1;
}

int cli_check_env(const cli_command *cmd, unsigned which)
{
    const char *v;
    char dir[4096];
    if (which & CLI_ENV_SETTINGS) {
        /* Without a cache directory there is no fijit.conf: the environment alone. */
        int have_dir = cli_resolve_cache_dir(dir, sizeof dir) == 0;
        cli_settings = (fi_settings)FI_SETTINGS_INIT;
        if (fi_settings_load(&cli_settings, have_dir ? dir : NULL) < 0)
            return cli_usage_error(cmd, "%s", fi_last_error());
    }
    if ((which & CLI_ENV_ARCH) && (v = getenv("FIJIT_ARCH")) && *v)
        return cli_check_arch(cmd, "FIJIT_ARCH", v);
    return -1;
}

int cli_check_arch(const cli_command *cmd, const char *what, const char *arch)
{
    int archs[128], number = 0, major = 0, minor = 0;
    if (fi_arch_check(arch) < 0) return cli_usage_error(cmd, "%s %s: %s", what, arch, fi_last_error());
    /* Without NVRTC (or one that cannot list them) the compile says what is wrong. */
    int count = fi_nvrtc_supported_archs(archs, 128);
    if (count <= 0) return -1;
    if (count > 128) count = 128;
    fi_nvrtc_version(&major, &minor);
    sscanf(arch + 3, "%d", &number);
    int specific = arch[strlen(arch) - 1] == 'a', known = 0;
    for (int i = 0; i < count; i++) known |= archs[i] == number;
    if (known && (!specific || number >= 90)) return -1;
    char list[1024] = "";
    size_t used = 0;
    for (int i = 0; i < count && used < sizeof list - 16; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%ssm_%d", i ? ", " : "", archs[i]);
    if (known)
        return cli_usage_error(cmd, "%s %s: the 'a' (arch-specific) targets start at sm_90a", what, arch);
    return cli_usage_error(cmd, "%s %s: NVRTC %d.%d does not compile for it (it compiles for %s; "
                           "add 'a' for the arch-specific target from sm_90a)", what, arch, major,
                           minor, list);
}

/* Ask the driver in this process: retain device 0's primary context, make it
 * current and let the library name its arch. */
static int detect_here(char out[16])
{
    int found = fi_device_use(0) == 0 && fi_cuda_current_arch(out, 16) > 0;
    /* The primary context stays retained: callers (demo, show-config) go on
     * using it, and the process ends soon after. */
    return found;
}

int cli_detect_gpu_arch(char out[16], int in_child)
{
    if (!in_child) return detect_here(out);

    /* A process that initialised CUDA cannot use it in forked children, and
     * prewarm forks workers; so a short-lived child asks instead. */
    int fds[2];
    if (pipe(fds) < 0) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return 0;
    }
    if (pid == 0) {
        close(fds[0]);
        char arch[16] = "";
        if (detect_here(arch)) (void)!write(fds[1], arch, strlen(arch));
        _exit(0);
    }
    close(fds[1]);
    char arch[16] = "";
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fds[0], arch + got, sizeof arch - 1 - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
        if (got == sizeof arch - 1) break;
    }
    arch[got] = '\0';
    close(fds[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (!got) return 0;
    memcpy(out, arch, got + 1);
    return 1;
}

void cli_default_arch(char out[16], int in_child, const char **source)
{
    const char *env = getenv("FIJIT_ARCH");
    if (env && *env) {
        snprintf(out, 16, "%s", env);
        if (source) *source = "FIJIT_ARCH";
    } else if (cli_detect_gpu_arch(out, in_child)) {
        if (source) *source = "CUDA device 0";
    } else {
        snprintf(out, 16, "sm_90a");
        if (source) *source = "built-in default, no CUDA device";
    }
}
