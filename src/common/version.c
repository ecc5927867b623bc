/*
 * The library's version as linked (fi_version_number, fi_version_string of
 * fijit.h), for callers that compare it with the header's FIJIT_VERSION_*
 * and for the store, which writes it into the bundles it exports. In common/
 * because it depends on nothing, so every layer may call it.
 */
#include "fijit.h"

int fi_version_number(void) { return FIJIT_VERSION_NUMBER; }

const char *fi_version_string(void)
{
#define FI_STR2(x) #x
#define FI_STR(x) FI_STR2(x)
    return FI_STR(FIJIT_VERSION_MAJOR) "." FI_STR(FIJIT_VERSION_MINOR) "." FI_STR(FIJIT_VERSION_PATCH);
}
