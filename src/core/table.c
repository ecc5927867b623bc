/* Lock-free-read hash table of loaded kernels (see table.h). */
#include <string.h>
#include <xxhash.h>

#include "common/sys.h"
#include "core/table.h"

void fi__table_init(fi_table *t)
{
    for (int i = 0; i < FI_TABLE_BUCKETS; i++) atomic_init(&t->buckets[i], NULL);
    pthread_mutex_init(&t->insert_lock, NULL);
}

void fi__table_destroy(fi_table *t, void (*release)(fi_table_entry *entry))
{
    for (int i = 0; i < FI_TABLE_BUCKETS; i++) {
        fi_table_entry *e = atomic_load(&t->buckets[i]);
        while (e) {
            fi_table_entry *next = e->next;
            if (release) release(e);
            if (e->owns_object) fi__free((void *)e->object);
            fi__free(e);
            e = next;
        }
        atomic_store(&t->buckets[i], NULL);
    }
    pthread_mutex_destroy(&t->insert_lock);
}

uint64_t fi__table_hash(const fi_spec_key *spec, uint64_t device_id)
{
    return XXH3_64bits_withSeed(spec, sizeof *spec, device_id);
}

fi_table_entry *fi__table_find(fi_table *t, uint64_t hash, const fi_spec_key *spec,
                               uint64_t device_id)
{
    fi_table_entry *e =
        atomic_load_explicit(&t->buckets[hash % FI_TABLE_BUCKETS], memory_order_acquire);
    for (; e; e = e->next)
        if (e->hash == hash && e->device_id == device_id &&
            memcmp(&e->spec, spec, sizeof *spec) == 0)
            return e;
    return NULL;
}

fi_table_entry *fi__table_find_object(fi_table *t, const fi_spec_key *spec, const char *arch)
{
    for (int i = 0; i < FI_TABLE_BUCKETS; i++)
        for (fi_table_entry *e = atomic_load_explicit(&t->buckets[i], memory_order_acquire); e;
             e = e->next)
            if (e->object && strcmp(e->kernel.arch, arch) == 0 &&
                memcmp(&e->spec, spec, sizeof *spec) == 0)
                return e;
    return NULL;
}

void fi__table_insert(fi_table *t, fi_table_entry *entry)
{
    _Atomic(fi_table_entry *) *bucket = &t->buckets[entry->hash % FI_TABLE_BUCKETS];
    pthread_mutex_lock(&t->insert_lock);
    entry->next = atomic_load_explicit(bucket, memory_order_relaxed);
    atomic_store_explicit(bucket, entry, memory_order_release);
    pthread_mutex_unlock(&t->insert_lock);
}
