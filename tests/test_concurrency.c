/*
 * Concurrency of the in-process parts, run under TSan by `make test`: the
 * lock-free kernel table and the per-spec single flight.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "kinds/spec.h"
#include "common/sys.h"
#include "core/table.h"

#define KEYS 64
#define THREADS 8

typedef struct table_run {
    fi_table table;
    pthread_mutex_t build_lock;
    atomic_int inserted;
    atomic_int wrong;
} table_run;

static fi_spec_key key_number(int i)
{
    fi_spec_key key;
    memset(&key, 0, sizeof key);
    key.kind = FI_KIND_DECODE;
    key.head_dim = 64 + i;
    return key;
}

/* What fi_jit_get_kernel does: find; on a miss lock, find again, insert. */
static void *hammer_table(void *p)
{
    table_run *run = p;
    const uint64_t device_id = 0x1234;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < KEYS; i++) {
            fi_spec_key key = key_number(i);
            uint64_t hash = fi__table_hash(&key, device_id);
            fi_table_entry *e = fi__table_find(&run->table, hash, &key, device_id);
            if (!e) {
                pthread_mutex_lock(&run->build_lock);
                if (!(e = fi__table_find(&run->table, hash, &key, device_id))) {
                    e = fi__calloc(1, sizeof *e);
                    e->hash = hash;
                    e->spec = key;
                    e->device_id = device_id;
                    e->kernel.registers = 64 + i;
                    fi__table_insert(&run->table, e);
                    atomic_fetch_add(&run->inserted, 1);
                }
                pthread_mutex_unlock(&run->build_lock);
            }
            if (e->kernel.registers != 64 + i) atomic_fetch_add(&run->wrong, 1);
        }
    }
    return NULL;
}

TEST(table_readers_and_writers_agree)
{
    static table_run run;
    pthread_t threads[THREADS];
    fi__table_init(&run.table);
    pthread_mutex_init(&run.build_lock, NULL);
    atomic_store(&run.inserted, 0);
    atomic_store(&run.wrong, 0);
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, hammer_table, &run);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    int inserted = atomic_load(&run.inserted), wrong = atomic_load(&run.wrong);
    fi__table_destroy(&run.table, NULL);
    pthread_mutex_destroy(&run.build_lock);
    CHECK_MSG(inserted == KEYS, "inserted %d entries for %d keys", inserted, KEYS);
    CHECK(wrong == 0);
}

typedef struct flight {
    fi_jit_ctx *ctx;
    fi_jit_spec spec;
    atomic_int failures;
} flight;

static void *prewarm_same_spec(void *p)
{
    flight *f = p;
    if (fi_jit_prewarm(NULL, f->ctx, &f->spec, "sm_90a") < 0) atomic_fetch_add(&f->failures, 1);
    return NULL;
}

TEST(threads_missing_one_spec_compile_it_once)
{
    static flight f;
    char dir[4200];
    pthread_t threads[THREADS];
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    opts.cache_dir = dir;
    CHECK_OK(fi_jit_ctx_new(&f.ctx, &opts));
    fi_jit_spec spec = FI_JIT_SPEC_INIT;
    spec.head_dim = 64;
    f.spec = spec;
    atomic_store(&f.failures, 0);
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, prewarm_same_spec, &f);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    int rc = fi_jit_stats_get(&stats, f.ctx);
    fi_jit_ctx_free(f.ctx);
    CHECK_OK(rc);
    CHECK(atomic_load(&f.failures) == 0);
    CHECK_MSG(stats.compiles == 1 && stats.disk_hits == THREADS - 1,
              "compiles %lld disk hits %lld", (long long)stats.compiles, (long long)stats.disk_hits);
}
