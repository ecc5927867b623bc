/*
 * Libraries opened at run time instead of linked: the CUDA driver, NVRTC,
 * and the fleet tier's hiredis and libsodium. fijit then loads, and works
 * without them, on every machine; each is opened the first time a feature
 * needs it, and its absence is that feature's clear error.
 *
 * A library's entry points are a struct of function pointers, described by
 * rows of fi_dynlib_sym (symbol, offset in the struct, required), which its
 * module makes from the same X-macro list as the struct.
 */
#ifndef FI_DYNLIB_H
#define FI_DYNLIB_H

#include <stddef.h>

typedef struct fi_dynlib_sym {
    const char *symbol;
    size_t offset;    /* of its function pointer in the table */
    int required;     /* 0: left NULL where the library lacks it */
} fi_dynlib_sym;

/* Open the first of `names` (NULL-terminated) that loads, then fill `table`
 * from `syms`. 0, or -1 with `why` saying what failed: "<names[0]>: <the
 * loader's words>" when none loads, "<name> lacks <symbol>" when a
 * required entry is missing (the library is closed again). */
int fi__dynlib_load(void *table, const fi_dynlib_sym *syms, size_t count,
                    const char *const *names, char *why, size_t why_size);

#endif
