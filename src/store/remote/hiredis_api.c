/*
 * hiredis opened at run time (see hiredis_api.h).
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "common/dynlib.h"
#include "common/error.h"
#include "store/remote/hiredis_api.h"

#define FI_STR2(x) #x
#define FI_STR(x) FI_STR2(x)
#define HIREDIS_LIBRARY "libhiredis.so." FI_STR(HIREDIS_SONAME)

static fi_hiredis_api api;
static int api_ok;
static char api_error[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void load_api(void)
{
#define ROW(ret, name, symbol, params) {symbol, offsetof(fi_hiredis_api, name), 1},
    static const fi_dynlib_sym syms[] = {FI_HIREDIS_API(ROW)};
#undef ROW
    static const char *const names[] = {HIREDIS_LIBRARY, NULL};
    char why[320];
    if (fi__dynlib_load(&api, syms, sizeof syms / sizeof syms[0], names, why, sizeof why) < 0) {
        snprintf(api_error, sizeof api_error,
                 "the Redis remote tier needs hiredis %d.%d (%s), which cannot be opened: %s "
                 "(Debian: apt-get install libhiredis0.14)",
                 HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_LIBRARY, why);
        return;
    }
    api_ok = 1;
}

int fi__hiredis_load(void)
{
    pthread_once(&api_once, load_api);
    return api_ok ? 0 : fi__error(FI_EUNSUPPORTED, "%s", api_error);
}

const fi_hiredis_api *fi__hiredis(void)
{
    return &api;
}
