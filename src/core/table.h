/*
 * The in-process table of loaded kernels, keyed by (spec, CUDA context).
 * Readers never lock: entries are immutable once published and are pushed at
 * the head of a bucket's list with a release store, so a reader sees either
 * the old head or a fully built entry. Writers serialise on one mutex.
 * Entries live until the table is destroyed.
 */
#ifndef FI_TABLE_H
#define FI_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/spec.h"

#define FI_TABLE_BUCKETS 1024 /* a process rarely holds more than a few hundred kernels */

typedef struct fi_table_entry {
    struct fi_table_entry *next;
    uint64_t hash;
    fi_spec_key spec;
    void *device_ctx;       /* CUcontext the module was loaded into */
    void *module;           /* CUmodule */
    fi_jit_kernel kernel;
} fi_table_entry;

typedef struct fi_table {
    _Atomic(fi_table_entry *) buckets[FI_TABLE_BUCKETS];
    pthread_mutex_t insert_lock;
} fi_table;

void fi__table_init(fi_table *t);
/* Call `release` on every entry, then free them. */
void fi__table_destroy(fi_table *t, void (*release)(fi_table_entry *entry));

uint64_t fi__table_hash(const fi_spec_key *spec, const void *device_ctx);
fi_table_entry *fi__table_find(fi_table *t, uint64_t hash, const fi_spec_key *spec,
                               const void *device_ctx);
/* Publish a filled entry (allocated with fi__malloc); the table owns it. */
void fi__table_insert(fi_table *t, fi_table_entry *entry);

#endif
