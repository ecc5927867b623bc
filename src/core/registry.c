/* Variants registered per context (see registry.h). */
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "core/registry.h"

void fi__registry_init(fi_registry *r)
{
    atomic_init(&r->head, NULL);
    pthread_mutex_init(&r->lock, NULL);
}

void fi__registry_destroy(fi_registry *r)
{
    for (fi_variant *v = atomic_load(&r->head), *next; v; v = next) {
        next = v->next;
        fi__variant_free(v);
    }
    atomic_store(&r->head, NULL);
    pthread_mutex_destroy(&r->lock);
}

const fi_variant *fi__registry_find(fi_registry *r, const char *name)
{
    for (fi_variant *v = atomic_load_explicit(&r->head, memory_order_acquire); v; v = v->next)
        if (strcmp(v->name, name) == 0) return v;
    return NULL;
}

int fi__registry_resolve(fi_registry *r, fi_spec_key *key, const fi_variant **out)
{
    *out = NULL;
    if (!key->variant[0]) return 0;
    const fi_variant *v = fi__registry_find(r, key->variant);
    if (!v)
        return fi__error(FI_ENOTFOUND,
                         "variant '%s' is not registered in this context (fi_jit_variant_register)",
                         key->variant);
    key->variant_hash = v->hash;
    *out = v;
    return 0;
}

int fi__registry_add(fi_registry *r, const char *name, const char *source, unsigned flags,
                     const char *origin)
{
    int rc = 0;
    fi_variant *v = NULL;
    if (!r) return fi__error(FI_EINVALID, "fi_jit_variant_register: ctx is NULL");
    if (flags & ~FI_VARIANT_REPLACE)
        return fi__error(FI_EINVALID, "fi_jit_variant_register: unknown flags %#x", flags);
    if ((rc = fi__variant_new_as(&v, name, source, origin)) < 0) return rc;
    pthread_mutex_lock(&r->lock);
    const fi_variant *existing = fi__registry_find(r, name);
    if (existing && strcmp(existing->source, v->source) == 0) {
        fi__variant_free(v); /* the same text again: nothing changes */
    } else if (existing && !(flags & FI_VARIANT_REPLACE)) {
        fi__variant_free(v);
        rc = fi__error(FI_EINVALID,
                       "variant '%s' is already registered with different text (pass FI_VARIANT_REPLACE to replace it)",
                       name);
    } else {
        v->next = atomic_load_explicit(&r->head, memory_order_relaxed);
        atomic_store_explicit(&r->head, v, memory_order_release);
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int fi__registry_add_file(fi_registry *r, const char *name, const char *path, unsigned flags)
{
    char stem[FI_VARIANT_NAME_MAX + 1];
    void *text = NULL;
    size_t size = 0;
    int rc;
    if (!path) return fi__error(FI_EINVALID, "fi_jit_variant_register_file: path is NULL");
    if (!name) {
        /* "dir/sigmoid.cuh" registers as "sigmoid". */
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t len = strcspn(base, ".");
        if (len == 0 || len >= sizeof stem)
            return fi__error(FI_EINVALID, "cannot derive a variant name from '%s'", path);
        memcpy(stem, base, len);
        stem[len] = '\0';
        name = stem;
    }
    if ((rc = fi__read_file(path, &text, &size, FI_VARIANT_MAX_SOURCE)) < 0) return rc;
    if (memchr(text, '\0', size))
        rc = fi__error(FI_EINVALID, "variant file %s contains a NUL byte", path);
    else
        rc = fi__registry_add(r, name, text, flags, path);
    fi__free(text);
    return rc;
}

int fi__registry_pack(fi_registry *r, const fi_jit_spec *spec, const char *who,
                      const fi_variant_arg *args, int count, unsigned long long *out)
{
    const fi_variant *v = NULL;
    if (fi__spec_has_variant(spec) && !(v = fi__registry_find(r, spec->variant)))
        return fi__error(FI_ENOTFOUND, "%s: variant '%s' is not registered in this context", who,
                         spec->variant);
    return fi__variant_pack(v, who, args, count, out);
}
