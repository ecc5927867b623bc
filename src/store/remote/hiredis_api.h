/*
 * hiredis, opened at run time (common/dynlib.h) the first time a Redis
 * remote is opened: libfijit does not link it, so a host without a remote
 * needs no libhiredis. fijit is built against the installed hiredis.h, whose
 * structs (redisContext, redisReply) it reads, so it opens the library of
 * that version: its soname, HIREDIS_SONAME.
 */
#ifndef FI_HIREDIS_API_H
#define FI_HIREDIS_API_H

#include <hiredis/hiredis.h>

/* The entry points redis.c calls: X(return type, name, symbol, parameters). */
#define FI_HIREDIS_API(X)                                                                   \
    X(redisContext *, ConnectWithTimeout, "redisConnectWithTimeout",                        \
      (const char *, int, const struct timeval))                                            \
    X(redisContext *, ConnectUnixWithTimeout, "redisConnectUnixWithTimeout",                \
      (const char *, const struct timeval))                                                 \
    X(int, SetTimeout, "redisSetTimeout", (redisContext *, const struct timeval))           \
    X(void, Free, "redisFree", (redisContext *))                                            \
    X(void *, CommandArgv, "redisCommandArgv",                                              \
      (redisContext *, int, const char **, const size_t *))                                 \
    X(int, AppendCommandArgv, "redisAppendCommandArgv",                                     \
      (redisContext *, int, const char **, const size_t *))                                 \
    X(int, GetReply, "redisGetReply", (redisContext *, void **))                            \
    X(void, FreeReplyObject, "freeReplyObject", (void *))

typedef struct fi_hiredis_api {
#define FI_HIREDIS_FIELD(ret, name, symbol, params) ret(*name) params;
    FI_HIREDIS_API(FI_HIREDIS_FIELD)
#undef FI_HIREDIS_FIELD
} fi_hiredis_api;

/* Open hiredis once (thread-safe): 0, or FI_EUNSUPPORTED saying which
 * library to install. */
int fi__hiredis_load(void);
/* Its entry points, for code that runs only after fi__hiredis_load
 * succeeded (a remote it opened); borrowed for the process's life. */
const fi_hiredis_api *fi__hiredis(void);

#endif
