/* Thread-local error message and the check macros every module uses. */
#ifndef FI_ERROR_H
#define FI_ERROR_H

#include "fijit.h"

/* Record `code` with a printf-style message for fi_last_error(); returns code,
 * so callers can write `return fi__error(FI_EINVALID, "...")`. */
int fi__error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append text (e.g. a compile log) to the current message. */
void fi__error_append(const char *text);
void fi__error_clear(void);

/* Leveled logging to stderr or the host's function (fi__log_set_callback,
 * NULL: stderr), filtered by the level set with fi__log_set_level. Both are
 * process-wide. */
void fi__log_set_level(int level);
void fi__log_set_callback(fi_log_fn fn, void *user);
void fi__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Single-exit helpers: `int rc = 0; FI_TRY(step()); ... out: cleanup; return rc;` */
#define FI_TRY(expr)                                                           \
    do {                                                                       \
        if ((rc = (expr)) < 0) goto out;                                       \
    } while (0)

#define FI_FAIL(code, ...)                                                     \
    do {                                                                       \
        rc = fi__error((code), __VA_ARGS__);                                   \
        goto out;                                                              \
    } while (0)

#define FI_UNUSED(x) ((void)(x))

#endif
