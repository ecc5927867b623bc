/*
 * Run-time opened libraries (see dynlib.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "common/dynlib.h"

int fi__dynlib_load(void *table, const fi_dynlib_sym *syms, size_t count,
                    const char *const *names, char *why, size_t why_size)
{
    void *lib = NULL;
    const char *name = NULL;
    char first_error[256] = "";
    for (size_t i = 0; names[i] && !lib; i++) {
        name = names[i];
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib && i == 0) snprintf(first_error, sizeof first_error, "%s", dlerror());
    }
    if (!lib) {
        /* The first name's error: the later ones are fallbacks. */
        snprintf(why, why_size, "%s", first_error[0] ? first_error : "no library name given");
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        void *fn = dlsym(lib, syms[i].symbol);
        if (!fn && syms[i].required) {
            snprintf(why, why_size, "%s lacks %s", name, syms[i].symbol);
            dlclose(lib);
            return -1;
        }
        memcpy((char *)table + syms[i].offset, &fn, sizeof fn);
    }
    return 0;
}
