/*
 * The user variants registered in one context, by name (fi_jit_variant_register).
 *
 * Readers never lock: records are immutable and a registration pushes a new
 * one at the head with a release store, so a reader sees the old head or a
 * whole record; replacing a name pushes a newer record in front of the old,
 * which stays (a reader or a build may still hold it) until the registry is
 * destroyed with its context. Registrations serialise on one mutex.
 * jit.c holds one per context and offers it as fi_jit_variant_register*.
 */
#ifndef FI_REGISTRY_H
#define FI_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>

#include "kinds/spec.h"
#include "core/variant.h"
#include "fijit.h"

typedef struct fi_registry {
    _Atomic(fi_variant *) head; /* newest first */
    pthread_mutex_t lock;       /* serialises registrations */
} fi_registry;

void fi__registry_init(fi_registry *r);
/* Free every record; no reader may be left. */
void fi__registry_destroy(fi_registry *r);

/* The newest record named `name`, or NULL; lives as long as the registry. */
const fi_variant *fi__registry_find(fi_registry *r, const char *name);

/* The variant `key` names into `*out` (NULL for the built-in one), its
 * content hash into key->variant_hash; FI_ENOTFOUND when not registered. */
int fi__registry_resolve(fi_registry *r, fi_spec_key *key, const fi_variant **out);

/* fi_jit_variant_register into `r` (NULL: the caller had no context),
 * messages naming `origin` (NULL: "<name>.cuh"): the same text again is a
 * no-op, other text under a registered name needs FI_VARIANT_REPLACE. */
int fi__registry_add(fi_registry *r, const char *name, const char *source, unsigned flags,
                     const char *origin);
/* fi_jit_variant_register_file into `r`. */
int fi__registry_add_file(fi_registry *r, const char *name, const char *path, unsigned flags);

/* fi__variant_pack for the variant `spec` names in `r` (FI_ENOTFOUND if none). */
int fi__registry_pack(fi_registry *r, const fi_jit_spec *spec, const char *who,
                      const fi_variant_arg *args, int count, unsigned long long *out);

#endif
