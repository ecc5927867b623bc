/*
 * The interface a remote tier implements (a Redis tier comes later; none is
 * built today). A remote stores entries, the bytes store/object.h encodes,
 * under their key, and answers each verb with one of four results: it never
 * fails the caller and never aborts. The tier front (store.h) verifies every
 * entry a remote returns with the codec before it writes it back to the
 * local tier or hands it out: a remote is input from another machine.
 *
 * A remote that answers FI_REMOTE_ERROR or FI_REMOTE_TIMEOUT is skipped for
 * the rest of the store's life (ccache's model): a sick tier costs one bounded
 * wait, not one per kernel.
 */
#ifndef FI_STORE_REMOTE_H
#define FI_STORE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

/* What a backend waits for at most: connecting, and one verb. */
#define FI_REMOTE_CONNECT_TIMEOUT_MS 100
#define FI_REMOTE_OPERATION_TIMEOUT_MS 10000

typedef enum fi_remote_result {
    FI_REMOTE_OK = 0,
    FI_REMOTE_NOT_FOUND = 1, /* get, remove: no entry for the key */
    FI_REMOTE_ERROR = 2,     /* anything else that went wrong (words in fi_last_error()) */
    FI_REMOTE_TIMEOUT = 3,   /* the backend did not answer in time */
} fi_remote_result;

typedef struct fi_remote fi_remote;

/* A backend's verbs. Each is called with the remote it belongs to; calls may
 * come from several threads at once, so a backend serialises what it must. */
typedef struct fi_remote_ops {
    const char *name; /* "redis": for messages */
    /* The entry for `key` in `*out` (allocated with fi__malloc, the caller
     * frees it with fi__free), its size in `*out_size`. */
    fi_remote_result (*get)(fi_remote *r, const uint8_t key[16], void **out, size_t *out_size);
    /* Store `entry` under `key`, replacing any. */
    fi_remote_result (*put)(fi_remote *r, const uint8_t key[16], const void *entry, size_t size);
    /* Remove the entry for `key` (a bad one a reader found). */
    fi_remote_result (*remove)(fi_remote *r, const uint8_t key[16]);
    /* Free the remote and everything it holds. */
    void (*close)(fi_remote *r);
} fi_remote_ops;

/* A backend's struct starts with this one (C's inheritance). */
struct fi_remote {
    const fi_remote_ops *ops;
    const char *url; /* where it is, for messages (owned by the backend) */
};

#endif
