/*
 * Text from a cache entry's header, made safe to print: an index or a remote
 * filled by another program could hold terminal escapes or a fake line.
 */
#include "cli.h"

void cli_text_printable(char *text)
{
    for (unsigned char *p = (unsigned char *)text; *p; p++)
        if (*p < 0x20 || *p >= 0x7f) *p = '?';
}
