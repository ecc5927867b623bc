/*
 * Remote URLs (see remote.h for the grammar): parsed into a
 * fi_remote_config, masked for messages, and opened by their scheme. A URL
 * comes from the environment or a command line, so every part is checked
 * and a bad one is named; nothing is guessed.
 *
 * A URL may hold a password, so no message shows it as given: every
 * message, log line and listing shows fi_remote_url_masked's form, which
 * keeps only the parts it recognises as not secret (scheme, host, port,
 * database, socket path, the values of known options) and writes "***"
 * for everything else, whatever the URL's shape.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "common/error.h"
#include "store/object.h"
#include "store/remote/remote.h"

#define MAX_URL 2048
/* The longest socket path the kernel takes: sun_path less its NUL. A longer
 * one would be cut short, and the cut path may be another server's socket. */
#define MAX_SOCKET_PATH (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* The options a URL may carry; none of their values is secret. */
static const char *const OPTIONS[] = {
    "readonly", "db", "prefix", "ttl", "connect_timeout", "timeout", "backoff", "lease", "wait",
    "cafile",
};
#define OPTIONS_HELP "readonly, db, prefix, ttl, connect_timeout, timeout, backoff, lease, " \
                     "wait; http(s): readonly, prefix, connect_timeout, timeout, backoff, cafile"
/* The options only a Redis server can follow: an HTTP store has no
 * databases, no expiry per value and no lease. */
static const char *const REDIS_ONLY_OPTIONS[] = {"db", "ttl", "lease", "wait"};

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

static int all_of(const char *text, size_t n, int (*ok)(char c))
{
    for (size_t i = 0; i < n; i++)
        if (!ok(text[i])) return 0;
    return 1;
}

static int digit_ok(char c) { return c >= '0' && c <= '9'; }
static int ipv6_char_ok(char c) { return fi_hex_digit((char)(c | 0x20)) >= 0 || c == ':' || c == '.'; }
static int path_char_ok(char c) { return c > ' ' && c < 0x7f; }
/* An HTTP path or a CA file's path, as shown and as sent: unreserved
 * characters and '/' (nothing to encode, nothing that reads as a query,
 * a fragment or credentials). */
static int url_path_char_ok(char c) { return name_char_ok(c) || c == '/' || c == '~'; }

/* text[0, n) into out when it fits and is all url_path_char_ok; else -1. */
static int copy_url_path(char *out, size_t size, const char *text, size_t n)
{
    if (n >= size || !all_of(text, n, url_path_char_ok)) return -1;
    memcpy(out, text, n);
    out[n] = '\0';
    return 0;
}

/* ---- where the parts are ---------------------------------------------------- */

/* A URL cut into its parts, as both the parser and the masker see it (so
 * what one takes for a password the other hides). Ranges are [begin, end). */
typedef struct url_parts {
    int scheme;              /* SCHEME_*, or 0: none of them */
    const char *creds;       /* "[user]:password", or NULL */
    const char *creds_end;   /* the '@' after them */
    const char *server;      /* redis: "host[:port][/db]"; unix: the socket path;
                                http(s): "host[:port][/path]" */
    const char *server_end;  /* the '?' or the end */
    const char *query;       /* after the '?', or NULL */
    const char *end;
} url_parts;

enum { SCHEME_REDIS = 1, SCHEME_UNIX = 2, SCHEME_HTTP = 3, SCHEME_HTTPS = 4 };

static const struct {
    const char *prefix;
    int scheme;
} SCHEMES[] = {
    {"redis://", SCHEME_REDIS},
    {"unix://", SCHEME_UNIX},
    {"http://", SCHEME_HTTP},
    {"https://", SCHEME_HTTPS},
};

static const char *scheme_text(int scheme)
{
    for (size_t i = 0; i < sizeof SCHEMES / sizeof *SCHEMES; i++)
        if (SCHEMES[i].scheme == scheme) return SCHEMES[i].prefix;
    return "";
}

/* Credentials end at the last '@' of a redis:// or http(s):// URL (its
 * host, database, path and options hold none; a password may hold '@', '/'
 * or '?', encoded or not).
 * A unix:// URL has them when its path does not follow the scheme at once,
 * up to the last "@/" (a socket path may hold an '@'). */
static void url_split(url_parts *p, const char *url)
{
    memset(p, 0, sizeof *p);
    p->end = url + strlen(url);
    const char *rest = NULL;
    for (size_t i = 0; i < sizeof SCHEMES / sizeof *SCHEMES && !rest; i++)
        if (strncmp(url, SCHEMES[i].prefix, strlen(SCHEMES[i].prefix)) == 0) {
            p->scheme = SCHEMES[i].scheme;
            rest = url + strlen(SCHEMES[i].prefix);
        }
    if (!rest) return;
    if (p->scheme != SCHEME_UNIX) {
        for (const char *q = rest; q < p->end; q++)
            if (*q == '@') p->creds_end = q;
    } else if (*rest != '/') {
        for (const char *q = rest; q + 1 < p->end; q++)
            if (q[0] == '@' && q[1] == '/') p->creds_end = q;
    }
    if (p->creds_end) {
        p->creds = rest;
        rest = p->creds_end + 1;
    }
    p->server = rest;
    const char *q = strchr(rest, '?');
    p->server_end = q ? q : p->end;
    p->query = q ? q + 1 : NULL;
}

/* ---- masking ------------------------------------------------------------------- */

/* Text appended to a fixed buffer; what does not fit is cut (a cut can only
 * hide more). */
typedef struct masked_text {
    char *out;
    size_t size, n;
} masked_text;

static void put(masked_text *t, const char *text, size_t n)
{
    for (size_t i = 0; i < n && t->n + 1 < t->size; i++) t->out[t->n++] = text[i];
    t->out[t->n] = '\0';
}

static void put_str(masked_text *t, const char *text) { put(t, text, strlen(text)); }

/* "host", "host:port", "[v6]" or "[v6]:port": a host part that holds nothing else. */
static int host_port_ok(const char *s, size_t n)
{
    size_t i = 0;
    if (n && s[0] == '[') {
        while (i < n && s[i] != ']') i++;
        if (i == n || !all_of(s + 1, i - 1, ipv6_char_ok)) return 0;
        i++;
    } else {
        while (i < n && name_char_ok(s[i])) i++;
    }
    if (i < n && s[i] == ':') /* a port: digits, at least one */
        return n - i > 1 && all_of(s + i + 1, n - i - 1, digit_ok);
    return i == n;
}

static void put_server(masked_text *t, const url_parts *p)
{
    const char *s = p->server;
    size_t n = (size_t)(p->server_end - s);
    if (p->scheme == SCHEME_UNIX) {
        if (n && s[0] == '/' && all_of(s, n, path_char_ok)) put(t, s, n);
        else put_str(t, "***");
        return;
    }
    const char *slash = memchr(s, '/', n);
    size_t host_n = slash ? (size_t)(slash - s) : n;
    if (host_port_ok(s, host_n)) put(t, s, host_n);
    else put_str(t, "***");
    if (!slash) return;
    size_t db_n = n - host_n - 1;
    put_str(t, "/");
    int (*ok)(char c) = p->scheme == SCHEME_REDIS ? digit_ok : url_path_char_ok;
    if (all_of(slash + 1, db_n, ok)) put(t, slash + 1, db_n);
    else put_str(t, "***");
}

static int known_option(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof OPTIONS / sizeof *OPTIONS; i++)
        if (strlen(OPTIONS[i]) == n && memcmp(OPTIONS[i], name, n) == 0) return 1;
    return 0;
}

/* Known options as given when their values look like theirs (numbers; a
 * prefix: a name); any other value, and every unknown option, as "***". */
static void put_query(masked_text *t, const char *q, const char *end)
{
    put_str(t, "?");
    for (int first = 1; q <= end; first = 0) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *opt_end = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(opt_end - q));
        size_t name_n = (size_t)((eq ? eq : opt_end) - q);
        if (!first) put_str(t, "&");
        if (!known_option(q, name_n)) {
            if (opt_end > q) put_str(t, "***");
        } else {
            put(t, q, name_n);
            if (eq) {
                size_t value_n = (size_t)(opt_end - eq - 1);
                put_str(t, "=");
                int is_prefix = name_n == 6 && memcmp(q, "prefix", 6) == 0;
                int is_path = name_n == 6 && memcmp(q, "cafile", 6) == 0;
                if (all_of(eq + 1, value_n,
                           is_prefix ? name_char_ok : is_path ? url_path_char_ok : digit_ok))
                    put(t, eq + 1, value_n);
                else put_str(t, "***");
            }
        }
        if (!amp) break;
        q = amp + 1;
    }
}

/* One URL of a list, masked. */
static void put_masked(masked_text *t, const char *url)
{
    url_parts p;
    url_split(&p, url);
    if (!p.scheme) {
        /* Another scheme is named (when it looks like one); the rest is not shown. */
        size_t n = 0;
        while (n < 16 && ((url[n] >= 'a' && url[n] <= 'z') || (url[n] >= '0' && url[n] <= '9')))
            n++;
        if (n && strncmp(url + n, "://", 3) == 0) put(t, url, n + 3);
        put_str(t, "***");
        return;
    }
    put_str(t, scheme_text(p.scheme));
    if (p.creds) put_str(t, "***@");
    put_server(t, &p);
    if (p.query) put_query(t, p.query, p.end);
}

int fi_remote_url_masked(char *out, size_t size, const char *url)
{
    char one[MAX_URL];
    if (!out || !size || !url) return fi__error(FI_EINVALID, "fi_remote_url_masked: NULL argument");
    masked_text t = {out, size, 0};
    out[0] = '\0';
    /* A list: each URL masked on its own (a URL as a whole is one of them). */
    int rc;
    for (const char *cursor = url; (rc = fi_remote_list_next(one, sizeof one, &cursor)) != 0;) {
        if (t.n) put_str(&t, " ");
        if (rc > 0) put_masked(&t, one);
        else put_str(&t, "***"); /* longer than any URL may be */
    }
    return 0;
}

/* ---- lists ----------------------------------------------------------------------- */

static int list_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int fi_remote_list_next(char *out, size_t out_size, const char **cursor)
{
    const char *p = *cursor;
    while (list_space(*p)) p++;
    size_t n = 0;
    while (p[n] && !list_space(p[n])) n++;
    *cursor = p + n;
    if (n == 0) return 0;
    if (n >= out_size) return FI_EINVALID; /* no message: callers name the list masked */
    memcpy(out, p, n);
    out[n] = '\0';
    return 1;
}

int fi_remote_list_check(const char *list)
{
    char one[MAX_URL];
    fi_remote_config config;
    int rc, count = 0;
    if (!list) return fi__error(FI_EINVALID, "fi_remote_list_check: NULL argument");
    for (const char *cursor = list; (rc = fi_remote_list_next(one, sizeof one, &cursor)) != 0;) {
        if (rc < 0) return fi__error(FI_EINVALID, "remote URL is longer than %d bytes", MAX_URL - 1);
        if ((rc = fi_remote_config_parse(&config, one)) < 0) return rc;
        count++;
    }
    if (count > FI_REMOTE_LIST_MAX)
        return fi__error(FI_EINVALID, "%d remotes are listed; at most %d are asked",
                         count, FI_REMOTE_LIST_MAX);
    return count;
}

/* ---- parsing -------------------------------------------------------------------- */

/* One "name[=value]" of the query string. Messages show `masked` and never
 * the option as given: its name is shown only when it is a known one. */
static int parse_option(fi_remote_config *c, const char *opt, size_t n, const char *masked)
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
                             "from %d to %d", masked, lo, hi);                               \
        c->field = (int)v;                                                                   \
        return 0;                                                                            \
    }
    if (c->http)
        for (size_t i = 0; i < sizeof REDIS_ONLY_OPTIONS / sizeof *REDIS_ONLY_OPTIONS; i++)
            if (IS(REDIS_ONLY_OPTIONS[i]))
                return fi__error(FI_EINVALID, "remote URL %s: %s= is an option of a Redis "
                                 "remote; an HTTP remote takes readonly, prefix, "
                                 "connect_timeout, timeout, backoff and cafile",
                                 masked, REDIS_ONLY_OPTIONS[i]);
    if (IS("cafile")) {
        if (!c->tls)
            return fi__error(FI_EINVALID, "remote URL %s: cafile= is for https:// URLs", masked);
        if (value_n == 0 || *value != '/' ||
            copy_url_path(c->cafile, sizeof c->cafile, value, value_n) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: cafile= wants an absolute path of "
                             "letters, digits, '_', '-', '.', '~' and '/' (at most %zu)",
                             masked, sizeof c->cafile - 1);
        return 0;
    }
    if (IS("readonly")) {
        if (eq && !(value_n == 1 && (*value == '0' || *value == '1')))
            return fi__error(FI_EINVALID, "remote URL %s: readonly takes no value, or 0 or 1",
                             masked);
        c->read_only = !eq || *value == '1';
        return 0;
    }
    if (IS("prefix")) {
        if (value_n == 0 || value_n >= sizeof c->prefix)
            return fi__error(FI_EINVALID, "remote URL %s: prefix= wants 1 to %zu characters",
                             masked, sizeof c->prefix - 1);
        for (size_t i = 0; i < value_n; i++)
            if (!name_char_ok(value[i]))
                return fi__error(FI_EINVALID, "remote URL %s: prefix= may hold letters, digits, "
                                 "'_', '-' and '.' only", masked);
        memcpy(c->prefix, value, value_n);
        c->prefix[value_n] = '\0';
        return 0;
    }
    if (IS("db")) {
        if (parse_int(value, value_n, 0, 1 << 20, &v) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: db= wants a database number", masked);
        c->db = (int)v;
        return 0;
    }
    if (IS("ttl")) {
        if (parse_int(value, value_n, 0, 100LL * 365 * 86400, &v) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: ttl= wants seconds (0: no expiry)",
                             masked);
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
    if ((name_n == 8 && memcmp(opt, "password", 8) == 0) ||
        (name_n == 4 && memcmp(opt, "user", 4) == 0))
        return fi__error(FI_EINVALID, "remote URL %s: credentials go before the host or socket "
                         "path, not in an option: redis://[USER]:PASSWORD@host or "
                         "unix://[USER]:PASSWORD@/path", masked);
    return fi__error(FI_EINVALID, "remote URL %s: an unknown option, shown as *** (known: "
                     OPTIONS_HELP ")", masked);
}

/* "[user]:password" (percent-encoding decoded). */
static int parse_credentials(fi_remote_config *c, const char *p, const char *end,
                             const char *masked)
{
    const char *colon = memchr(p, ':', (size_t)(end - p));
    if (!colon)
        return fi__error(FI_EINVALID, "remote URL %s: write credentials as :PASSWORD@ or "
                         "USER:PASSWORD@ before the host or socket path", masked);
    if (copy_decoded(c->user, sizeof c->user, p, (size_t)(colon - p)) < 0 ||
        copy_decoded(c->password, sizeof c->password, colon + 1, (size_t)(end - colon - 1)) < 0 ||
        !c->password[0])
        return fi__error(FI_EINVALID, "remote URL %s: bad or empty user or password (encode "
                         "'%%' as %%25)", masked);
    return 0;
}

/* "host[:port]", up to host_end. */
static int parse_server_host(fi_remote_config *c, const char *p, const char *host_end,
                             const char *masked)
{
    long long v;
    const char *colon = NULL;
    if (*p == '[') { /* [IPv6]:port */
        const char *close = memchr(p, ']', (size_t)(host_end - p));
        if (!close) return fi__error(FI_EINVALID, "remote URL %s: unclosed '[' in the host", masked);
        if ((size_t)(close - p - 1) >= sizeof c->host || close == p + 1)
            return fi__error(FI_EINVALID, "remote URL %s: bad host", masked);
        memcpy(c->host, p + 1, (size_t)(close - p - 1));
        c->host[close - p - 1] = '\0';
        if (close + 1 < host_end && close[1] != ':')
            return fi__error(FI_EINVALID, "remote URL %s: bad host", masked);
        colon = close + 1 < host_end ? close + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(host_end - p));
        const char *name_end = colon ? colon : host_end;
        if (name_end == p || (size_t)(name_end - p) >= sizeof c->host)
            return fi__error(FI_EINVALID, "remote URL %s: no host", masked);
        for (const char *q = p; q < name_end; q++)
            if (!name_char_ok(*q))
                return fi__error(FI_EINVALID, "remote URL %s: bad character in the host", masked);
        memcpy(c->host, p, (size_t)(name_end - p));
        c->host[name_end - p] = '\0';
    }
    if (colon) {
        if (parse_int(colon + 1, (size_t)(host_end - colon - 1), 1, 65535, &v) < 0)
            return fi__error(FI_EINVALID, "remote URL %s: the port must be 1 to 65535", masked);
        c->port = (int)v;
    }
    return 0;
}

/* "host[:port][/db]" of a redis:// URL. */
static int parse_server(fi_remote_config *c, const char *p, const char *end, const char *masked)
{
    long long v;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (slash && parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1 << 20, &v) == 0) c->db = (int)v;
    else if (slash && end > slash + 1)
        return fi__error(FI_EINVALID, "remote URL %s: the path must be a database number", masked);
    return parse_server_host(c, p, slash ? slash : end, masked);
}

/* "host[:port][/path]" of an http(s):// URL: objects live under
 * /path/PREFIX/<key hex>. */
static int parse_http_server(fi_remote_config *c, const char *p, const char *end,
                             const char *masked)
{
    const char *slash = memchr(p, '/', (size_t)(end - p));
    int rc = parse_server_host(c, p, slash ? slash : end, masked);
    if (rc < 0 || !slash) return rc;
    while (end > slash && end[-1] == '/') end--; /* "/cache/" is "/cache" */
    size_t n = (size_t)(end - slash);
    int dot_segment = 0; /* "/." starts ".", ".." or a hidden name: none is a cache's */
    for (size_t i = 0; i + 1 < n; i++) dot_segment |= slash[i] == '/' && slash[i + 1] == '.';
    if (dot_segment || copy_url_path(c->path, sizeof c->path, slash, n) < 0)
        return fi__error(FI_EINVALID, "remote URL %s: the path may hold letters, digits, '_', "
                         "'-', '.', '~' and '/' (no segment starting with '.'; at most %zu)",
                         masked, sizeof c->path - 1);
    return 0;
}

/* The socket path of a unix:// URL. */
static int parse_socket(fi_remote_config *c, const char *p, const char *end, const char *masked)
{
    size_t n = (size_t)(end - p);
    if (n == 0 || *p != '/')
        return fi__error(FI_EINVALID, "remote URL %s: write a socket as unix:///absolute/path "
                         "or unix://[USER]:PASSWORD@/absolute/path", masked);
    if (n > MAX_SOCKET_PATH || n >= sizeof c->path)
        return fi__error(FI_EINVALID, "remote URL %s: the socket path is %zu bytes; a unix "
                         "socket's path holds at most %zu", masked, n, (size_t)MAX_SOCKET_PATH);
    c->unix_socket = 1;
    memcpy(c->path, p, n);
    c->path[n] = '\0';
    return 0;
}

int fi_remote_config_parse(fi_remote_config *out, const char *url)
{
    int rc = 0;
    fi_remote_config c;
    url_parts p;
    if (!out || !url) return fi__error(FI_EINVALID, "fi_remote_config_parse: NULL argument");
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    size_t len = strlen(url);
    if (len == 0 || len >= MAX_URL)
        return fi__error(FI_EINVALID, "remote URL is empty or longer than %d bytes", MAX_URL - 1);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] <= ' ' || (unsigned char)url[i] >= 0x7f)
            return fi__error(FI_EINVALID, "remote URL holds a space, control or non-ASCII byte");
    fi_remote_url_masked(c.url, sizeof c.url, url);
    c.port = 6379;
    snprintf(c.prefix, sizeof c.prefix, "%s", FI_REMOTE_PREFIX);
    c.connect_timeout_ms = FI_REMOTE_CONNECT_TIMEOUT_MS;
    c.timeout_ms = FI_REMOTE_OPERATION_TIMEOUT_MS;
    c.backoff_ms = FI_REMOTE_BACKOFF_MS;
    c.lease_ms = FI_REMOTE_LEASE_MS;
    c.wait_ms = FI_REMOTE_WAIT_MS;

    url_split(&p, url);
    if (!p.scheme)
        return fi__error(FI_EINVALID, "remote URL %s: expected redis://host[:port][/db], "
                         "unix:///path/to/redis.sock or http[s]://host[:port][/path]", c.url);
    c.http = p.scheme == SCHEME_HTTP || p.scheme == SCHEME_HTTPS;
    c.tls = p.scheme == SCHEME_HTTPS;
    if (c.http) {
        c.port = c.tls ? 443 : 80;
        c.connect_timeout_ms = FI_REMOTE_HTTP_CONNECT_TIMEOUT_MS;
        c.timeout_ms = FI_REMOTE_HTTP_OPERATION_TIMEOUT_MS;
    }
    if (p.creds && (rc = parse_credentials(&c, p.creds, p.creds_end, c.url)) < 0) return rc;
    rc = p.scheme == SCHEME_REDIS  ? parse_server(&c, p.server, p.server_end, c.url)
         : p.scheme == SCHEME_UNIX ? parse_socket(&c, p.server, p.server_end, c.url)
                                   : parse_http_server(&c, p.server, p.server_end, c.url);
    if (rc < 0) return rc;
    for (const char *q = p.query; q && q < p.end;) {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        if (n && (rc = parse_option(&c, q, n, c.url)) < 0) return rc;
        q += n + (amp != NULL);
    }
    *out = c;
    return 0;
}

int fi_remote_open(fi_remote **out, const char *url)
{
    fi_remote_config config;
    if (!out) return fi__error(FI_EINVALID, "fi_remote_open: out is NULL");
    *out = NULL;
    int rc = fi_remote_config_parse(&config, url);
    if (rc < 0) return rc;
    return config.http ? fi_http_open(out, &config) : fi_redis_open(out, &config);
}
