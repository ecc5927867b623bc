/*
 * The cache key: XXH3-128 over tagged fields (a schema prefix, the
 * translation unit, every header it includes, the sorted compile options, the
 * NVRTC version, the target arch, the kernel entry names). Each field is fed
 * as tag, NUL, 8-byte length, bytes, so adjacent fields cannot run into each
 * other. Bump FI_KEY_SCHEMA to invalidate every existing entry.
 */
#ifndef FI_KEY_H
#define FI_KEY_H

#include <stdint.h>

#include "core/expand.h"

#define FI_KEY_SCHEMA "fijit-key-v1"

typedef struct fi_key_input {
    const fi_translation_unit *tu;
    const char *arch;
    int nvrtc_major, nvrtc_minor;
    int option_count;
    const char *const *options; /* any order: hashed sorted */
    int entry_count;
    const char *const *entries; /* kernel names the module must hold */
} fi_key_input;

/* `explain` (may be NULL) receives one line per field, then the key. */
int fi__key_compute(uint8_t out[16], const fi_key_input *in,
                    void (*explain)(void *user, const char *text), void *user);

#endif
