/*
 * The in-process table of loaded kernels, keyed by (spec, CUDA context id).
 * The context is named by its id (cuCtxGetId), not its handle: a driver
 * gives a destroyed context's handle to the next context made, which must
 * not find the dead one's functions. Readers never lock: entries are
 * immutable once published and are pushed at the head of a bucket's list
 * with a release store, so a reader sees either the old head or a fully
 * built entry. Writers serialise on one mutex. Entries live until the table
 * is destroyed, and so does the object (cubin) each kernel was loaded from:
 * another context asking for the same kernel loads it from memory, with no
 * expansion, hashing, disk read or compile.
 */
#ifndef FI_TABLE_H
#define FI_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kinds/spec.h"

#define FI_TABLE_BUCKETS 1024 /* a process rarely holds more than a few hundred kernels */

typedef struct fi_table_entry {
    struct fi_table_entry *next;
    uint64_t hash;
    fi_spec_key spec;
    uint64_t device_id;     /* id of the CUDA context the module was loaded into */
    void *device_ctx;       /* its handle, to unload in it (while its id is still this one) */
    void *module;           /* CUmodule (the module path) */
    void *library;          /* load.c's library, shared by entries of one key (the
                               library path); NULL on the module path */
    const void *object;     /* the cubin loaded; NULL: none kept */
    int owns_object;        /* 1: this entry frees it; 0: borrowed from an entry of
                               another context, which lives as long */
    fi_jit_kernel kernel;
} fi_table_entry;

typedef struct fi_table {
    _Atomic(fi_table_entry *) buckets[FI_TABLE_BUCKETS];
    pthread_mutex_t insert_lock;
} fi_table;

void fi__table_init(fi_table *t);
/* Call `release` on every entry, then free them and the objects they own. */
void fi__table_destroy(fi_table *t, void (*release)(fi_table_entry *entry));

uint64_t fi__table_hash(const fi_spec_key *spec, uint64_t device_id);
fi_table_entry *fi__table_find(fi_table *t, uint64_t hash, const fi_spec_key *spec,
                               uint64_t device_id);
/* An entry of `spec` built for `arch` in any context that kept its object,
 * or NULL. Walks the whole table: for a miss, not the hot path. */
fi_table_entry *fi__table_find_object(fi_table *t, const fi_spec_key *spec, const char *arch);
/* Publish a filled entry (allocated with fi__malloc); the table owns it. */
void fi__table_insert(fi_table *t, fi_table_entry *entry);

#endif
