/*
 * The interface a remote tier implements (redis.c is the one built; tests
 * add a fake). A remote stores values under entry keys: an entry in the
 * codec's form (store/object.h), sealed with a MAC when the fleet has a
 * secret (store/seal.h). It answers each verb with one of the results
 * below: it never fails the caller and never aborts. The tier front
 * (store.h) verifies every value a remote returns before it writes it back
 * to the local tier or hands it out: a remote is input from another machine.
 *
 * A remote that answers FI_REMOTE_ERROR or FI_REMOTE_TIMEOUT is skipped for
 * its back-off period, then asked again; each failure is counted, and said
 * once per back-off period. A sick tier costs one bounded wait per period,
 * not one per kernel.
 *
 * Configuration is a URL (url.c):
 *   redis://[[user]:password@]host[:port][/db][?option&...]
 *   unix://[[user]:password@]/path/to/redis.sock[?option&...]
 *   http[s]://[user:password@]host[:port][/path][?option&...]
 * options: readonly, db=N (unix), prefix=NAME, ttl=SECONDS,
 * connect_timeout=MS, timeout=MS, backoff=MS, lease=MS, wait=MS;
 * http(s): readonly, prefix, connect_timeout, timeout, backoff and
 * cafile=/path (https: the CAs to verify the server with).
 * Credentials end at the URL's last '@' (unix: its last "@/"), so a
 * password may hold '/', '?' and '@' unencoded; '%' is written %25.
 * Several remotes are a list of URLs separated by spaces (a URL holds
 * none), asked in that order.
 */
#ifndef FI_STORE_REMOTE_H
#define FI_STORE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

/* Defaults of the URL's options. A remote must never cost more than a
 * compile: a connect is at most 50 ms, one verb at most 500 ms. */
#define FI_REMOTE_CONNECT_TIMEOUT_MS 50
#define FI_REMOTE_OPERATION_TIMEOUT_MS 500
/* An HTTP(S) store is often a site or a region away, and its connect
 * includes the TLS handshake: still far below a compile. */
#define FI_REMOTE_HTTP_CONNECT_TIMEOUT_MS 300
#define FI_REMOTE_HTTP_OPERATION_TIMEOUT_MS 2000
/* The most remotes one list names (each one is asked on a miss). */
#define FI_REMOTE_LIST_MAX 8
/* After a failure the remote is skipped this long, doubling on each failure
 * in a row up to FI_REMOTE_BACKOFF_MAX_MS. */
#define FI_REMOTE_BACKOFF_MS 1000
#define FI_REMOTE_BACKOFF_MAX_MS 30000
/* A build lease lives this long unless its holder renews it (every third
 * of it, while it compiles): a holder that dies frees the key this fast. */
#define FI_REMOTE_LEASE_MS 3000
/* How long a host waits for another host's build of a key before it
 * compiles the key itself. */
#define FI_REMOTE_WAIT_MS 120000
#define FI_REMOTE_PREFIX "fijit"
/* The largest value a remote holds. An entry (header and cubin, sealed or
 * not) is far smaller: fijit's cubins are tens to hundreds of KiB. A larger
 * value under an entry's key is refused before any of it is read, and a
 * larger entry is kept in the local tier only. */
#define FI_REMOTE_VALUE_MAX ((size_t)16 << 20)

typedef enum fi_remote_result {
    FI_REMOTE_OK = 0,
    FI_REMOTE_NOT_FOUND = 1, /* get, has, remove: no value for the key */
    FI_REMOTE_ERROR = 2,     /* anything else that went wrong (words in fi_last_error()) */
    FI_REMOTE_TIMEOUT = 3,   /* the backend did not answer in time */
    FI_REMOTE_HELD = 4,      /* lease: another holder has it */
    /* get: the value under the key cannot be an entry (another Redis type,
     * larger than FI_REMOTE_VALUE_MAX): a bad entry, not a sick server;
     * put: the value is larger than FI_REMOTE_VALUE_MAX and was not stored. */
    FI_REMOTE_BAD = 5,
} fi_remote_result;

/* A remote's configuration, as its URL gives it. */
typedef struct fi_remote_config {
    char url[512];         /* fi_remote_url_masked's form: the only one messages show */
    int unix_socket;       /* 1: `path` is a unix socket; 0: host and port */
    int http;              /* 1: an HTTP(S) object store (http.c); 0: Redis */
    int tls;               /* https:// */
    char host[256];
    int port;
    char path[256];        /* unix: the socket; http: the base path ("" or "/a/b") */
    char cafile[256];      /* https: CAs to verify the server with; "": the system's */
    char user[128];        /* "" with a password: AUTH password */
    char password[256];    /* "": no AUTH */
    int db;
    int read_only;         /* never put, remove or lease */
    char prefix[65];       /* names of this fleet's keys: PREFIX:obj:<hex> (http:
                              PATH/PREFIX/<hex>) */
    int64_t ttl_s;         /* expiry of pushed values; 0: none */
    int connect_timeout_ms;
    int timeout_ms;
    int backoff_ms;
    int lease_ms;
    int wait_ms;
} fi_remote_config;

/* Parse `url` into `out` (the defaults above fill what it leaves out).
 * FI_EINVALID with words naming the part that is wrong. */
int fi_remote_config_parse(fi_remote_config *out, const char *url);
/* The next URL of the space-separated list at `*cursor` into `out`,
 * moving the cursor past it: 1, 0 at the end of the list, or FI_EINVALID
 * (no words) for a URL that does not fit. */
int fi_remote_list_next(char *out, size_t out_size, const char **cursor);
/* Parse every URL of a list: how many it names (0: none), or FI_EINVALID
 * with the first bad one's words (or too many of them). */
int fi_remote_list_check(const char *list);
/* `url` as messages show it, whatever its shape (a bad URL too): scheme,
 * host, port, database, socket path and the values of known options as
 * given; credentials, anything unrecognised and any unknown option as
 * "***"; cut to fit `size`. 0, or FI_EINVALID for a NULL argument. */
int fi_remote_url_masked(char *out, size_t size, const char *url);

typedef struct fi_remote fi_remote;

/* What fi_remote_ops.scan reports for each value. */
typedef struct fi_remote_item {
    uint8_t key[16];
    const uint8_t *head; /* the value's first bytes (at most head_size) */
    size_t head_size;
    int64_t size;        /* the value's size in bytes */
} fi_remote_item;

/* A backend's verbs. Each is called with the remote it belongs to; calls may
 * come from several threads at once, so a backend serialises what it must.
 * A failing verb leaves words in fi_last_error() that name the command, not
 * the remote: callers prefix its URL.
 * The optional ones (NULL in a backend without them) serve operators' tools. */
typedef struct fi_remote_ops {
    const char *name; /* "redis", "http": for messages */
    /* The value for `key` in `*out` (allocated with fi__malloc, the caller
     * frees it with fi__free), its size in `*out_size`. */
    fi_remote_result (*get)(fi_remote *r, const uint8_t key[16], void **out, size_t *out_size);
    /* OK when a value for `key` is there, else NOT_FOUND. */
    fi_remote_result (*has)(fi_remote *r, const uint8_t key[16]);
    /* Store `value` under `key`, replacing any. */
    fi_remote_result (*put)(fi_remote *r, const uint8_t key[16], const void *value, size_t size);
    /* Remove the value for `key` (a bad one a reader found). */
    fi_remote_result (*remove)(fi_remote *r, const uint8_t key[16]);
    /* Optional (lease and release; NULL: the backend has no lease, so the
     * fleet's single flight needs another remote that has one).
     * Take the build lease of `key` for `ttl_ms` under `token`, or extend it
     * when `token` holds it already: OK, or HELD when another token does.
     * A lease no live holder can have made (no expiry, an expiry beyond
     * `ttl_ms`, not a token) is stale: it is taken over. */
    fi_remote_result (*lease)(fi_remote *r, const uint8_t key[16], const uint8_t token[16],
                              int ttl_ms);
    /* Give the lease back if `token` still holds it. */
    fi_remote_result (*release)(fi_remote *r, const uint8_t key[16], const uint8_t token[16]);
    /* Optional: round trip; words about the server for an operator (one
     * "name value" pair per call of `line`); every value under the prefix. */
    fi_remote_result (*ping)(fi_remote *r);
    fi_remote_result (*describe)(fi_remote *r, void (*line)(void *user, const char *name,
                                                            const char *value), void *user);
    fi_remote_result (*scan)(fi_remote *r, size_t head_size,
                             int (*fn)(void *user, const fi_remote_item *item), void *user);
    /* Free the remote and everything it holds. */
    void (*close)(fi_remote *r);
} fi_remote_ops;

/* A backend's struct starts with this one (C's inheritance). */
struct fi_remote {
    const fi_remote_ops *ops;
    fi_remote_config config; /* filled by the backend's open */
};

/* Open the backend `url` names (the connection is made on first use, so an
 * unreachable server is not an error here). FI_EINVALID for a bad URL. */
int fi_remote_open(fi_remote **out, const char *url);
/* The Redis backend (redis.c). */
int fi_redis_open(fi_remote **out, const fi_remote_config *config);
/* The HTTP(S) backend (http.c). */
int fi_http_open(fi_remote **out, const fi_remote_config *config);

#endif
