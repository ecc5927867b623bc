/*
 * fi_cache_size_parse of fijit_cache.h: the public name of the one size
 * parser (settings.c's fi__parse_size) that FIJIT_MAX_CACHE_SIZE, the
 * settings file and the CLI share. In common/ beside the parser, so that
 * neither the store nor the CLI reaches into another layer for it.
 */
#include <stdint.h>

#include "common/error.h"
#include "common/parse.h"
#include "fijit_cache.h"

int fi_cache_size_parse(int64_t *out, const char *text)
{
    if (!out || !text) return fi__error(FI_EINVALID, "no size to parse");
    return fi__parse_size(out, text);
}
