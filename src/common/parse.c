/* The values an operator writes (FIJIT_* and fijit.conf alike): booleans,
 * sizes and umasks, each checked with words that say what is expected. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>

#include "common/error.h"
#include "common/parse.h"

#define SIZE_HELP "bytes with an optional K, M, G or T suffix, e.g. 500M, 2G or 4GiB; 0: no limit"
#define UMASK_HELP "an octal umask such as 077 (private), 027 or 007 (group-shared)"

int fi__parse_bool(const char *text)
{
    static const char *const no[] = {"0", "false", "no", "off"};
    static const char *const yes[] = {"1", "true", "yes", "on"};
    for (int i = 0; text && i < 4; i++) {
        if (strcasecmp(text, no[i]) == 0) return 0;
        if (strcasecmp(text, yes[i]) == 0) return 1;
    }
    return -1;
}

int fi__parse_size(int64_t *out, const char *text)
{
    char *end;
    if (!isdigit((unsigned char)text[0])) goto bad; /* no sign, space, "inf" or "nan" */
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text) goto bad;
    double scale = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': scale = 1024.0; end++; break;
    case 'M': scale = 1024.0 * 1024; end++; break;
    case 'G': scale = 1024.0 * 1024 * 1024; end++; break;
    case 'T': scale = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (scale > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) goto bad;
    double bytes = v * scale;
    if (!(bytes >= 0) || bytes > 9.0e18) goto bad;
    *out = (int64_t)llround(bytes);
    return 0;
bad:
    return fi__error(FI_EINVALID, "'%.32s' is not a size: expected " SIZE_HELP, text);
}

int fi__parse_umask(const char *text)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 8);
    if (!*text || !isdigit((unsigned char)text[0]) || errno || *end || v < 0 || v > 0777)
        return fi__error(FI_EINVALID, "'%.32s' is not a umask: expected " UMASK_HELP, text);
    /* Others may never write: whoever could plant an object there runs code in us. */
    if (!(v & 002))
        return fi__error(FI_EINVALID, "umask %03lo lets others write to the cache; "
                         "expected " UMASK_HELP, v);
    return (int)v;
}
