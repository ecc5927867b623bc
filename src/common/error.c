/* Thread-local error messages (fi_last_error) and leveled logging, to stderr
 * or to the host program's log function (fi_log_set_callback). */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Large enough for an NVRTC log of a broken snippet; longer text is cut. */
#define FI_ERROR_CAPACITY 16384

static _Thread_local char error_text[FI_ERROR_CAPACITY];
static atomic_int log_level = FI_LOG_WARN;
/* The host's log function and its pointer, read together under the lock:
 * messages are rare, and a half-updated pair would call one with the other's data. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static fi_log_fn log_fn;
static void *log_user;

int fi__error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
    return code;
}

void fi__error_append(const char *text)
{
    size_t used = strlen(error_text);
    if (text && used + 1 < sizeof error_text)
        snprintf(error_text + used, sizeof error_text - used, "%s", text);
}

void fi__error_clear(void) { error_text[0] = '\0'; }

const char *fi_last_error(void) { return error_text; }

const char *fi_error_name(int code)
{
    switch (code) {
    case FI_OK: return "FI_OK";
    case FI_EINVALID: return "FI_EINVALID";
    case FI_ENOTFOUND: return "FI_ENOTFOUND";
    case FI_ECOMPILE: return "FI_ECOMPILE";
    case FI_ELOAD: return "FI_ELOAD";
    case FI_EIO: return "FI_EIO";
    case FI_ENOMEM: return "FI_ENOMEM";
    case FI_EUNSUPPORTED: return "FI_EUNSUPPORTED";
    case FI_ENODEVICE: return "FI_ENODEVICE";
    case FI_ECORRUPT: return "FI_ECORRUPT";
    case FI_ECUDA: return "FI_ECUDA";
    case FI_EPERM: return "FI_EPERM";
    default: return "FI_E?";
    }
}

void fi__log_set_level(int level) { atomic_store(&log_level, level); }

void fi__log_set_callback(fi_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    pthread_mutex_unlock(&log_lock);
}

void fi_log_set_callback(fi_log_fn fn, void *user) { fi__log_set_callback(fn, user); }

/* Hand one message to the host's function, else to stderr. */
static void log_emit(int level, const char *text)
{
    static const char *const names[] = {"", "error", "warning", "info", "debug"};
    pthread_mutex_lock(&log_lock);
    fi_log_fn fn = log_fn;
    void *user = log_user;
    pthread_mutex_unlock(&log_lock);
    if (fn)
        fn(user, (fi_log_level)level, text);
    else
        fprintf(stderr, "fijit %s: %s\n", names[level], text);
}

void fi__log(int level, const char *fmt, ...)
{
    if (level > atomic_load(&log_level) || level <= FI_LOG_OFF || level > FI_LOG_DEBUG) return;
    char line[1024], *text = line, *longer = NULL;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* A long message (ptxas' log of a module) is printed whole: cut at the
     * buffer, its resource lines were lost behind ptxas' notes. */
    if (n >= (int)sizeof line && (longer = malloc((size_t)n + 1))) {
        vsnprintf(longer, (size_t)n + 1, fmt, again);
        text = longer;
    }
    va_end(again);
    log_emit(level, text);
    free(longer);
}
