/*
 * The HTTP(S) remote tier (remote.h), through libcurl (opened at run time,
 * curl_api.h): the object stores large fleets already run in front of
 * their object storage (nginx with WebDAV, bazel-remote, sccache's WebDAV,
 * Artifactory, S3 gateways). An entry lives at
 *   <scheme>://<host>[:port]<path>/<prefix>/<32 hex>
 * read with GET, probed with HEAD, written with PUT and removed with DELETE.
 * Nothing else is asked of the server: it has no lease (the fleet's single
 * flight needs a Redis remote beside it) and no listing.
 *
 * Credentials: user:password in the URL (basic auth), else a bearer token
 * from FIJIT_REMOTE_TOKEN; neither is ever in a message. TLS verifies the
 * server's certificate and name (the system's CAs, or cafile=); there is no
 * switch to turn that off. Redirects are not followed, and only http and
 * https are spoken.
 *
 * Threads: easy handles (each with its open connection) are kept in a
 * small pool; a call takes one, uses it alone and gives it back. Every call
 * is bounded by the connect and operation timeouts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/remote/curl_api.h"
#include "store/remote/remote.h"
#include "store/remote/sigpipe.h"

/* Idle handles kept for the next call; more threads than this at once still
 * work, their extra handles are closed after the call. */
#define POOL_MAX 8
#define URL_MAX 1024
#define TOKEN_MAX 4096

typedef enum http_auth { AUTH_NONE, AUTH_BASIC, AUTH_BEARER } http_auth;

typedef struct http_remote {
    fi_remote base;
    pthread_mutex_t mu; /* guards idle */
    CURL *idle[POOL_MAX];
    int idle_count;
    http_auth auth;
    struct curl_slist *headers; /* sent with every request */
    char objects[URL_MAX];      /* scheme://host:port/path/prefix/ */
} http_remote;

typedef enum http_verb { VERB_GET, VERB_HEAD, VERB_PUT, VERB_DELETE } http_verb;
static const char *const VERB_NAMES[] = {"GET", "HEAD", "PUT", "DELETE"};

/* A response body, as much of it as may be kept. */
typedef struct body_in {
    uint8_t *data;
    size_t size, capacity, limit;
    int too_large, nomem;
} body_in;

/* A request body. */
typedef struct body_out {
    const uint8_t *data;
    size_t size, sent;
} body_out;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user)
{
    body_in *in = user;
    size_t n = size * nmemb;
    if (!in) return n; /* a body nobody reads (an error page, a DELETE's) */
    if (n > in->limit - in->size) {
        in->too_large = 1;
        return 0; /* curl stops: CURLE_WRITE_ERROR */
    }
    if (in->size + n > in->capacity) {
        size_t capacity = in->capacity ? in->capacity : 64 << 10;
        while (capacity < in->size + n) capacity *= 2;
        if (capacity > in->limit) capacity = in->limit;
        uint8_t *grown = fi__realloc(in->data, capacity);
        if (!grown) {
            in->nomem = 1;
            return 0;
        }
        in->data = grown;
        in->capacity = capacity;
    }
    memcpy(in->data + in->size, ptr, n);
    in->size += n;
    return n;
}

static size_t on_upload(char *ptr, size_t size, size_t nmemb, void *user)
{
    body_out *out = user;
    size_t n = size * nmemb;
    if (n > out->size - out->sent) n = out->size - out->sent;
    memcpy(ptr, out->data + out->sent, n);
    out->sent += n;
    return n;
}

/* A handle for one call: an idle one (reset: its connection stays open), or a new one. */
static CURL *take(http_remote *r)
{
    pthread_mutex_lock(&r->mu);
    CURL *c = r->idle_count ? r->idle[--r->idle_count] : NULL;
    pthread_mutex_unlock(&r->mu);
    if (c) fi__curl()->easy_reset(c);
    else c = fi__curl()->easy_init();
    return c;
}

static void give_back(http_remote *r, CURL *c)
{
    pthread_mutex_lock(&r->mu);
    if (r->idle_count < POOL_MAX) {
        r->idle[r->idle_count++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    if (c) fi__curl()->easy_cleanup(c);
}

/* The options every request carries. Any that curl refuses is an error:
 * a request without its timeout, CA file or credentials must not go out. */
static CURLcode set_common(http_remote *r, CURL *c, const char *url, char *errbuf)
{
    const fi_curl_api *cu = fi__curl();
    const fi_remote_config *cfg = &r->base.config;
    CURLcode rc = CURLE_OK;
#define SET(option, value) if (rc == CURLE_OK) rc = cu->easy_setopt(c, option, value)
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_URL, url);
    SET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM for timeouts: a library must not use signals */
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->connect_timeout_ms);
    SET(CURLOPT_TIMEOUT_MS, (long)cfg->timeout_ms);
    SET(CURLOPT_HTTPHEADER, r->headers);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, (void *)NULL);
    if (cfg->cafile[0]) SET(CURLOPT_CAINFO, cfg->cafile);
    if (r->auth == AUTH_BASIC) {
        SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        SET(CURLOPT_USERNAME, cfg->user);
        SET(CURLOPT_PASSWORD, cfg->password);
    }
#undef SET
    return rc;
}

/* What a status other than success means, with the words set. */
static fi_remote_result status_failed(http_verb verb, long status)
{
    const char *why = status == 401 || status == 403 ? " (the server refused the credentials)"
                      : status == 405               ? " (the server does not take this method)"
                      : status == 507               ? " (the server's storage is full)"
                                                    : "";
    fi__error(FI_EIO, "%s: HTTP %ld%s", VERB_NAMES[verb], status, why);
    return FI_REMOTE_ERROR;
}

/* One request for `key` (NULL: the objects' folder). `in` receives a GET's
 * body; `out` is a PUT's. `*status` is the HTTP status when the server
 * answered. A transport failure is ERROR or TIMEOUT with curl's words (they
 * name the host and port, never credentials). */
static fi_remote_result request(http_remote *r, http_verb verb, const uint8_t key[16],
                                body_in *in, body_out *out, long *status)
{
    const fi_curl_api *cu = fi__curl();
    char url[URL_MAX + 40], hex[33] = "", errbuf[CURL_ERROR_SIZE] = "";
    fi_remote_result res = FI_REMOTE_OK;
    fi_sigpipe_guard guard;
    *status = 0;
    if (fi__fault(FI_FAULT_REMOTE)) {
        fi__error(FI_EIO, "%s: injected fault", VERB_NAMES[verb]);
        return FI_REMOTE_ERROR;
    }
    if (key) fi_key_hex(hex, key);
    snprintf(url, sizeof url, "%s%s", r->objects, hex);
    CURL *c = take(r);
    if (!c) {
        fi__error(FI_ENOMEM, "%s: out of memory for a request", VERB_NAMES[verb]);
        return FI_REMOTE_ERROR;
    }
    CURLcode rc = set_common(r, c, url, errbuf);
    if (rc == CURLE_OK) switch (verb) {
        case VERB_GET:
            rc = cu->easy_setopt(c, CURLOPT_WRITEDATA, in);
            /* A declared length above the cap is refused before a byte is read. */
            if (rc == CURLE_OK)
                rc = cu->easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)in->limit);
            break;
        case VERB_HEAD: rc = cu->easy_setopt(c, CURLOPT_NOBODY, 1L); break;
        case VERB_PUT:
            rc = cu->easy_setopt(c, CURLOPT_UPLOAD, 1L);
            if (rc == CURLE_OK) rc = cu->easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
            if (rc == CURLE_OK) rc = cu->easy_setopt(c, CURLOPT_READDATA, out);
            if (rc == CURLE_OK)
                rc = cu->easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)out->size);
            break;
        case VERB_DELETE: rc = cu->easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE"); break;
        }
    if (rc != CURLE_OK) {
        fi__error(FI_EIO, "%s: libcurl refused an option: %s", VERB_NAMES[verb],
                  cu->easy_strerror(rc));
        cu->easy_cleanup(c);
        return FI_REMOTE_ERROR;
    }
    fi__sigpipe_block(&guard); /* OpenSSL writes with write(2) */
    rc = cu->easy_perform(c);
    fi__sigpipe_restore(&guard);
    if (rc == CURLE_OK) cu->easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (rc == CURLE_OK) {
        res = FI_REMOTE_OK;
    } else if (in && (in->too_large || rc == CURLE_FILESIZE_EXCEEDED)) {
        /* Words that follow "entry <key>" in the tier front's message. */
        fi__error(FI_EIO, "is larger than a remote value may be (%zu bytes)", in->limit);
        res = FI_REMOTE_BAD;
    } else if (in && in->nomem) {
        fi__error(FI_ENOMEM, "GET: out of memory reading the value");
        res = FI_REMOTE_ERROR;
    } else {
        fi__error(FI_EIO, "%s: %s", VERB_NAMES[verb], errbuf[0] ? errbuf : cu->easy_strerror(rc));
        res = rc == CURLE_OPERATION_TIMEDOUT ? FI_REMOTE_TIMEOUT : FI_REMOTE_ERROR;
    }
    give_back(r, c);
    return res;
}

static fi_remote_result read_only(const char *verb)
{
    fi__error(FI_EINVALID, "%s: the remote is read-only", verb);
    return FI_REMOTE_ERROR;
}

static fi_remote_result http_get(fi_remote *base, const uint8_t key[16], void **out,
                                 size_t *out_size)
{
    http_remote *r = (http_remote *)base;
    body_in in = {.limit = FI_REMOTE_VALUE_MAX};
    long status;
    fi_remote_result res = request(r, VERB_GET, key, &in, NULL, &status);
    if (res == FI_REMOTE_OK) {
        if (status == 404 || status == 410) res = FI_REMOTE_NOT_FOUND;
        else if (status != 200) res = status_failed(VERB_GET, status);
        else if (in.size == 0) res = FI_REMOTE_NOT_FOUND; /* no entry: a put replaces it */
    }
    if (res != FI_REMOTE_OK) {
        fi__free(in.data);
        return res;
    }
    *out = in.data;
    *out_size = in.size;
    return FI_REMOTE_OK;
}

static fi_remote_result http_has(fi_remote *base, const uint8_t key[16])
{
    long status;
    fi_remote_result res = request((http_remote *)base, VERB_HEAD, key, NULL, NULL, &status);
    if (res != FI_REMOTE_OK) return res;
    if (status == 404 || status == 410) return FI_REMOTE_NOT_FOUND;
    return status == 200 ? FI_REMOTE_OK : status_failed(VERB_HEAD, status);
}

static fi_remote_result http_put(fi_remote *base, const uint8_t key[16], const void *value,
                                 size_t size)
{
    http_remote *r = (http_remote *)base;
    body_out out = {value, size, 0};
    long status;
    if (r->base.config.read_only) return read_only("put");
    if (size > FI_REMOTE_VALUE_MAX) {
        fi__error(FI_EIO, "PUT: is %zu bytes, more than a remote value may be (%zu)", size,
                  FI_REMOTE_VALUE_MAX);
        return FI_REMOTE_BAD;
    }
    fi_remote_result res = request(r, VERB_PUT, key, NULL, &out, &status);
    if (res != FI_REMOTE_OK) return res;
    return status == 200 || status == 201 || status == 204 ? FI_REMOTE_OK
                                                           : status_failed(VERB_PUT, status);
}

static fi_remote_result http_remove(fi_remote *base, const uint8_t key[16])
{
    http_remote *r = (http_remote *)base;
    long status;
    if (r->base.config.read_only) return read_only("remove");
    fi_remote_result res = request(r, VERB_DELETE, key, NULL, NULL, &status);
    if (res != FI_REMOTE_OK) return res;
    if (status == 404 || status == 410) return FI_REMOTE_NOT_FOUND;
    return status == 200 || status == 202 || status == 204 ? FI_REMOTE_OK
                                                           : status_failed(VERB_DELETE, status);
}

/* A round trip that checks what every call needs: the server answers, TLS
 * verifies and the credentials are taken. HEAD of a key no entry has (all
 * zeros): found or not, the server answered it. */
static fi_remote_result http_ping(fi_remote *base)
{
    static const uint8_t nobody[16];
    fi_remote_result res = http_has(base, nobody);
    return res == FI_REMOTE_NOT_FOUND ? FI_REMOTE_OK : res;
}

static fi_remote_result http_describe(fi_remote *base,
                                      void (*line)(void *user, const char *name,
                                                   const char *value),
                                      void *user)
{
    http_remote *r = (http_remote *)base;
    const fi_remote_config *cfg = &r->base.config;
    fi_remote_result res = http_ping(base);
    if (res != FI_REMOTE_OK) return res;
    line(user, "protocol", cfg->tls ? "https (certificate and host name verified)" : "http");
    line(user, "certificates", !cfg->tls ? "-" : cfg->cafile[0] ? cfg->cafile : "the system's");
    line(user, "auth", r->auth == AUTH_BASIC    ? "basic (user and password in the URL)"
                       : r->auth == AUTH_BEARER ? "bearer token (FIJIT_REMOTE_TOKEN)"
                                                : "none");
    line(user, "fleet lease", "none (HTTP has none; a Redis remote in the list can hold them)");
    line(user, "listing", "none: an HTTP store cannot be listed");
    return FI_REMOTE_OK;
}

static void http_close(fi_remote *base)
{
    http_remote *r = (http_remote *)base;
    if (!r) return;
    for (int i = 0; i < r->idle_count; i++) fi__curl()->easy_cleanup(r->idle[i]);
    if (r->headers) fi__curl()->slist_free_all(r->headers);
    pthread_mutex_destroy(&r->mu);
    fi__free(r);
}

static const fi_remote_ops http_ops = {
    .name = "http",
    .get = http_get,
    .has = http_has,
    .put = http_put,
    .remove = http_remove,
    .ping = http_ping,
    .describe = http_describe,
    .close = http_close,
};

/* The headers every request sends: no "Expect: 100-continue" (a round trip
 * more per PUT), and the bearer token when there is one. */
static int headers_make(http_remote *r, const char *token)
{
    char auth[TOKEN_MAX + 32];
    struct curl_slist *h = fi__curl()->slist_append(NULL, "Expect:");
    if (h && token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        struct curl_slist *more = fi__curl()->slist_append(h, auth);
        memset(auth, 0, sizeof auth);
        if (!more) fi__curl()->slist_free_all(h);
        h = more;
    }
    if (!h) return fi__error(FI_ENOMEM, "out of memory");
    r->headers = h;
    return 0;
}

/* FIJIT_REMOTE_TOKEN, when set: a header value, so visible ASCII only (a
 * CR or LF would start a header of the token's choosing). */
static int token_get(const char **out)
{
    const char *token = getenv("FIJIT_REMOTE_TOKEN");
    *out = NULL;
    if (!token || !*token) return 0;
    size_t n = strlen(token);
    if (n >= TOKEN_MAX)
        return fi__error(FI_EINVALID, "FIJIT_REMOTE_TOKEN is %zu bytes; at most %d are taken",
                         n, TOKEN_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)token[i] <= ' ' || (unsigned char)token[i] >= 0x7f)
            return fi__error(FI_EINVALID, "FIJIT_REMOTE_TOKEN holds a space, control or "
                             "non-ASCII byte (its value is not shown)");
    *out = token;
    return 0;
}

int fi_http_open(fi_remote **out, const fi_remote_config *config)
{
    int rc = 0;
    http_remote *r = NULL;
    const char *token = NULL;
    if (!out || !config || !config->http) return fi__error(FI_EINVALID, "fi_http_open: bad argument");
    *out = NULL;
    FI_TRY(fi__curl_load()); /* every other function here runs after it */
    /* Credentials in the URL are this remote's own; the token is every
     * other HTTP remote's. */
    if (!config->password[0]) FI_TRY(token_get(&token));
    if (!(r = fi__calloc(1, sizeof *r))) FI_FAIL(FI_ENOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    r->base.ops = &http_ops;
    r->base.config = *config;
    r->auth = config->password[0] ? AUTH_BASIC : token ? AUTH_BEARER : AUTH_NONE;
    int v6 = strchr(config->host, ':') != NULL;
    snprintf(r->objects, sizeof r->objects, "%s://%s%s%s:%d%s/%s/", config->tls ? "https" : "http",
             v6 ? "[" : "", config->host, v6 ? "]" : "", config->port, config->path,
             config->prefix);
    FI_TRY(headers_make(r, token));
    *out = &r->base;
    r = NULL;
out:
    if (r) http_close(&r->base);
    return rc;
}
