/*
 * libcurl, opened at run time (common/dynlib.h) the first time an HTTP(S)
 * remote is opened: libfijit does not link it, so a host without an HTTP
 * tier needs no libcurl. libcurl's ABI has been stable under soname 4 since
 * 2006; fijit is built against the installed curl.h and uses only calls and
 * options that libcurl 7.85 (CURLOPT_PROTOCOLS_STR) and later have.
 */
#ifndef FI_CURL_API_H
#define FI_CURL_API_H

#include <curl/curl.h>

/* The entry points http.c calls: X(return type, name, symbol, parameters). */
#define FI_CURL_API(X)                                                                      \
    X(CURLcode, global_init, "curl_global_init", (long))                                   \
    X(CURL *, easy_init, "curl_easy_init", (void))                                         \
    X(void, easy_reset, "curl_easy_reset", (CURL *))                                       \
    X(void, easy_cleanup, "curl_easy_cleanup", (CURL *))                                   \
    X(CURLcode, easy_setopt, "curl_easy_setopt", (CURL *, CURLoption, ...))                \
    X(CURLcode, easy_perform, "curl_easy_perform", (CURL *))                               \
    X(CURLcode, easy_getinfo, "curl_easy_getinfo", (CURL *, CURLINFO, ...))                \
    X(const char *, easy_strerror, "curl_easy_strerror", (CURLcode))                       \
    X(struct curl_slist *, slist_append, "curl_slist_append",                              \
      (struct curl_slist *, const char *))                                                 \
    X(void, slist_free_all, "curl_slist_free_all", (struct curl_slist *))                  \
    X(curl_version_info_data *, version_info, "curl_version_info", (CURLversion))

typedef struct fi_curl_api {
#define FI_CURL_FIELD(ret, name, symbol, params) ret(*name) params;
    FI_CURL_API(FI_CURL_FIELD)
#undef FI_CURL_FIELD
} fi_curl_api;

/* Open libcurl and initialise it once (thread-safe): 0, or FI_EUNSUPPORTED
 * saying which library to install. */
int fi__curl_load(void);
/* Its entry points, for code that runs only after fi__curl_load succeeded
 * (a remote it opened); borrowed for the process's life. */
const fi_curl_api *fi__curl(void);

#endif
