/* The values an operator writes (parse.c). */
#ifndef FI_PARSE_H
#define FI_PARSE_H

#include <stdint.h>

/* "1", "true", "yes", "on" → 1; "0", "false", "no", "off" → 0 (any case);
 * anything else -1. */
int fi__parse_bool(const char *text);
/* A size: bytes with an optional K, M, G or T (powers of 1024, "iB" and "B"
 * allowed). 0 or FI_EINVALID with words. */
int fi__parse_size(int64_t *out, const char *text);
/* An octal umask 0-0777 that keeps others from writing (its 002 bit set).
 * The value, or FI_EINVALID with words. */
int fi__parse_umask(const char *text);

#endif
