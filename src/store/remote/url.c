/*
 * Remote URLs (see remote.h for the grammar): parsed into a
 * fi_remote_config, masked for messages, and opened by their scheme. A URL
 * comes from the environment or a command line, so every part is checked
 * and a bad one is named; nothing is guessed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "store/object.h"
#include "store/remote/remote.h"

#define MAX_URL 2048

/* A decimal integer in [lo, hi] that is all of text[0, n). */
static int parse_int(const char *text, size_t n, long long lo, long long hi, long long *out)
{
    char buf[24];
    char *end;
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    if (buf[0] < '0' || buf[0] > '9') return -1;
    long long v = strtoll(buf, &end, 10);
    if (*end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Copy text[0, n) into out (size bytes) decoding %XX; -1 if it does not fit
 * or a %XX is malformed or decodes to a NUL. */
static int copy_decoded(char *out, size_t size, const char *text, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)text[i];
        if (c == '%') {
            if (i + 2 >= n) return -1;
            int hi = fi_hex_digit((char)(text[i + 1] | 0x20));
            int lo = fi_hex_digit((char)(text[i + 2] | 0x20));
            if (hi < 0 || lo < 0 || (hi | lo) == 0) return -1;
            c = hi << 4 | lo;
            i += 2;
        }
        if (o + 1 >= size) return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

static int name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}

/* One "name[=value]" of the query string. */
static int parse_option(fi_remote_config *c, const char *opt, size_t n, const char *url)
{
    const char *eq = memchr(opt, '=', n);
    size_t name_n = eq ? (size_t)(eq - opt) : n;
    const char *value = eq ? eq + 1 : "";
    size_t value_n = eq ? n - name_n - 1 : 0;
    long long v;
#define IS(name) (name_n == strlen(name) && memcmp(opt, name, name_n) == 0)
#define MS_OPTION(name, field, lo, hi)                                                       \
    if (IS(name)) {                                                                          \
        if (parse_int(value, value_n, lo, hi, &v) < 0)                                       \
            return fi__error(FI_EINVALID, "remote URL %s: " name "= wants milliseconds "     \
                             "from %d to %d", url, lo, hi);                                  \
        c->field = (int)v;                                                                   \
        return 0;                                                                            \
    }
    if (IS("readonly")) {
        if (eq && !(value_n == 1 && (*value == '0' || *value == '1')))
            return fi__error(FI_EINVALID, "remote URL %s: readonly takes no value, or 0 or 1", url);
        c->read_only = !eq || *value == '1';
        return 0;
    }
    if (IS("prefix")) {
        if (value_n == 0 || value_n >= sizeof c->prefix)
            return fi__error(FI_EINVALID, "remote URL %s: prefix= wants 1 to %zu characters", url,
                             sizeof c->prefix - 1);
        for (size_t i = 0; i < value_n; i++)
            if (!name_char_ok(value[i]))
                return fi__error(FI_EINVALID, "remote URL %s: prefix= may hold letters, digits, "
                                 "'_', '-' and '.' only", url);
        memcpy(c->prefix, value, value_n);
        c->prefix[value_n] = '\0';
        return 0;
    }
    if (IS("db")) {
        if (parse_int(value, value_n, 0, 1 << 20, &v) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: db= wants a database number", url);
        c->db = (int)v;
        return 0;
    }
    if (IS("ttl")) {
        if (parse_int(value, value_n, 0, 100LL * 365 * 86400, &v) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: ttl= wants seconds (0: no expiry)", url);
        c->ttl_s = v;
        return 0;
    }
    MS_OPTION("connect_timeout", connect_timeout_ms, 1, 60000)
    MS_OPTION("timeout", timeout_ms, 1, 600000)
    MS_OPTION("backoff", backoff_ms, 1, 3600000)
    MS_OPTION("lease", lease_ms, 30, 3600000)
    MS_OPTION("wait", wait_ms, 0, 86400000)
#undef MS_OPTION
#undef IS
    return fi__error(FI_EINVALID, "remote URL %s: unknown option '%.*s' (known: readonly, db, "
                     "prefix, ttl, connect_timeout, timeout, backoff, lease, wait)", url,
                     (int)(name_n > 64 ? 64 : name_n), opt);
}

/* "[[user]:password@]host[:port][/db]" of a redis:// URL. */
static int parse_server(fi_remote_config *c, const char *p, const char *end, const char *url)
{
    long long v;
    const char *at = NULL;
    /* Credentials end at the last '@' before the path (a password may hold
     * an '@', encoded or not; a '/' only encoded, as %2F). */
    for (const char *q = p; q < end && *q != '/'; q++)
        if (*q == '@') at = q;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon)
            return fi__error(FI_EINVALID, "remote URL %s: write credentials as "
                             "redis://:PASSWORD@host or redis://USER:PASSWORD@host", url);
        if (copy_decoded(c->user, sizeof c->user, p, (size_t)(colon - p)) < 0 ||
            copy_decoded(c->password, sizeof c->password, colon + 1, (size_t)(at - colon - 1)) < 0 ||
            !c->password[0])
            return fi__error(FI_EINVALID, "remote URL %s: bad or empty user or password", url);
        p = at + 1;
    }
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *host_end = slash ? slash : end;
    if (slash && parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1 << 20, &v) == 0) c->db = (int)v;
    else if (slash && end > slash + 1)
        return fi__error(FI_EINVALID, "remote URL %s: the path must be a database number", url);
    const char *colon = NULL;
    if (*p == '[') { /* [IPv6]:port */
        const char *close = memchr(p, ']', (size_t)(host_end - p));
        if (!close) return fi__error(FI_EINVALID, "remote URL %s: unclosed '[' in the host", url);
        if ((size_t)(close - p - 1) >= sizeof c->host || close == p + 1)
            return fi__error(FI_EINVALID, "remote URL %s: bad host", url);
        memcpy(c->host, p + 1, (size_t)(close - p - 1));
        c->host[close - p - 1] = '\0';
        if (close + 1 < host_end && close[1] != ':')
            return fi__error(FI_EINVALID, "remote URL %s: bad host", url);
        colon = close + 1 < host_end ? close + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(host_end - p));
        const char *name_end = colon ? colon : host_end;
        if (name_end == p || (size_t)(name_end - p) >= sizeof c->host)
            return fi__error(FI_EINVALID, "remote URL %s: no host", url);
        for (const char *q = p; q < name_end; q++)
            if (!name_char_ok(*q))
                return fi__error(FI_EINVALID, "remote URL %s: bad character in the host", url);
        memcpy(c->host, p, (size_t)(name_end - p));
        c->host[name_end - p] = '\0';
    }
    if (colon) {
        if (parse_int(colon + 1, (size_t)(host_end - colon - 1), 1, 65535, &v) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: the port must be 1 to 65535", url);
        c->port = (int)v;
    }
    return 0;
}

int fi_remote_config_parse(fi_remote_config *out, const char *url)
{
    int rc = 0;
    fi_remote_config c;
    if (!out || !url) return fi__error(FI_EINVALID, "fi_remote_config_parse: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    size_t len = strlen(url);
    if (len == 0 || len >= MAX_URL)
        return fi__error(FI_EINVALID, "remote URL is empty or longer than %d bytes", MAX_URL - 1);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= ' ' || (unsigned char)url[i] >= 0x7f)
            return fi__error(FI_EINVALID, "remote URL holds a space, control or non-ASCII byte");
    char masked[512];
    if ((rc = fi_remote_url_masked(masked, sizeof masked, url)) < 0) return rc;
    snprintf(c.url, sizeof c.url, "%s", masked);
    c.port = 6379;
    snprintf(c.prefix, sizeof c.prefix, "%s", FI_REMOTE_PREFIX);
    c.connect_timeout_ms = FI_REMOTE_CONNECT_TIMEOUT_MS;
    c.timeout_ms = FI_REMOTE_OPERATION_TIMEOUT_MS;
    c.backoff_ms = FI_REMOTE_BACKOFF_MS;
    c.lease_ms = FI_REMOTE_LEASE_MS;
    c.wait_ms = FI_REMOTE_WAIT_MS;

    const char *query = strchr(url, '?');
    const char *end = query ? query : url + len;
    if (strncmp(url, "redis://", 8) == 0) {
        if ((rc = parse_server(&c, url + 8, end, c.url)) < 0) return rc;
    } else if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        if (*path != '/' || (size_t)(end - path) >= sizeof c.path)
            return fi__error(FI_EINVALID, "remote URL %s: write a socket as unix:///absolute/path",
                             c.url);
        c.unix_socket = 1;
        memcpy(c.path, path, (size_t)(end - path));
        c.path[end - path] = '\0';
    } else {
        return fi__error(FI_EINVALID, "remote URL '%.64s': expected redis://host[:port][/db] or "
                         "unix:///path/to/redis.sock", c.url);
    }
    for (const char *p = query ? query + 1 : end; p < url + len;) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n && (rc = parse_option(&c, p, n, c.url)) < 0) return rc;
        p += n + (amp != NULL);
    }
    *out = c;
    return 0;
}

int fi_remote_url_masked(char *out, size_t size, const char *url)
{
    if (!out || !size || !url) return fi__error(FI_EINVALID, "fi_remote_url_masked: NULL argument");
    out[0] = '\0';
    const char *scheme_end = strstr(url, "://");
    const char *query = strchr(url, '?');
    const char *end = query ? query : url + strlen(url);
    const char *at = NULL;
    if (scheme_end && scheme_end < end)
        for (const char *q = scheme_end + 3; q < end && *q != '/'; q++)
            if (*q == '@') at = q;
    const char *colon = at ? memchr(scheme_end + 3, ':', (size_t)(at - scheme_end - 3)) : NULL;
    int n = colon ? snprintf(out, size, "%.*s:***%s", (int)(colon - url), url, at)
                  : snprintf(out, size, "%s", url);
    if (n < 0 || (size_t)n >= size) {
        out[0] = '\0';
        return fi__error(FI_EINVALID, "remote URL is too long");
    }
    return 0;
}

int fi_remote_open(fi_remote **out, const char *url)
{
    fi_remote_config config;
    if (!out) return fi__error(FI_EINVALID, "fi_remote_open: out is NULL");
    *out = NULL;
    int rc = fi_remote_config_parse(&config, url);
    if (rc < 0) return rc;
    return fi_redis_open(out, &config);
}
