/* The syntax check of an arch name (arch.h). */
#include <ctype.h>
#include <string.h>

#include "common/arch.h"
#include "common/error.h"

int fi__arch_check(const char *arch)
{
    size_t n = arch ? strlen(arch) : 0;
    size_t digits = 0;
    if (n < 5 || strncmp(arch, "sm_", 3) != 0) goto bad;
    while (isdigit((unsigned char)arch[3 + digits])) digits++;
    if (digits < 2 || digits > 3) goto bad;
    if (arch[3 + digits] == '\0' || (arch[3 + digits] == 'a' && arch[4 + digits] == '\0'))
        return 0;
bad:
    return fi__error(FI_EINVALID,
                     "bad arch '%.32s' (expected sm_ + compute capability, e.g. sm_80, sm_89, sm_90a)",
                     arch ? arch : "(null)");
}
