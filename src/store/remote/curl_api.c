/*
 * libcurl opened at run time (see curl_api.h).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "common/dynlib.h"
#include "common/error.h"
#include "store/remote/curl_api.h"

static fi_curl_api api;
static int api_ok;
static char api_error[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void load_api(void)
{
#define ROW(ret, name, symbol, params) {symbol, offsetof(fi_curl_api, name), 1},
    static const fi_dynlib_sym syms[] = {FI_CURL_API(ROW)};
#undef ROW
    /* OpenSSL's build first (Debian's libcurl4), then GnuTLS's: both take
     * the same options, a CA file included. */
    static const char *const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4", NULL};
    char why[320];
    if (fi__dynlib_load(&api, syms, sizeof syms / sizeof syms[0], names, why, sizeof why) < 0) {
        snprintf(api_error, sizeof api_error,
                 "the HTTP remote tier needs libcurl (libcurl.so.4), which cannot be opened: %s "
                 "(Debian: apt-get install libcurl4)", why);
        return;
    }
    const curl_version_info_data *v = api.version_info(CURLVERSION_NOW);
    if (!v || v->version_num < 0x075500) { /* 7.85.0: CURLOPT_PROTOCOLS_STR */
        snprintf(api_error, sizeof api_error, "the HTTP remote tier needs libcurl 7.85 or later; "
                 "this one is %s", v && v->version ? v->version : "of unknown version");
        return;
    }
    /* Once per process, before any handle: curl_global_init is not safe to
     * race with other threads' handles, and this is the only caller here. */
    CURLcode rc = api.global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) {
        snprintf(api_error, sizeof api_error, "libcurl cannot start: %s", api.easy_strerror(rc));
        return;
    }
    api_ok = 1;
}

int fi__curl_load(void)
{
    pthread_once(&api_once, load_api);
    return api_ok ? 0 : fi__error(FI_EUNSUPPORTED, "%s", api_error);
}

const fi_curl_api *fi__curl(void)
{
    return &api;
}
