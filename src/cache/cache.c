/*
 * The cache half of fijit_cache.h: a cache directory opened for maintenance
 * (a handle over the tier front, store.h, whose maintenance is the local
 * tier's) and its bundles (store/bundle.c).
 *
 * src/cache/ holds the implementation of fijit_cache.h, the advanced API the
 * `fijit` CLI is written against: cache.c (cache directories), remote.c
 * (remote tiers), advanced.c (toolchain, variants, errors), settings.c (the
 * operator's settings). It is a folder of its own, above store/, core/,
 * toolchain/ and common/, because the header fronts all of them: in store/
 * it would make the store call core, in core/ the core would grow the
 * store's maintenance. Nothing in the library calls into it. The one
 * exception is fi_cache_size_parse, in common/size.c beside the parser it
 * names, which FIJIT_MAX_CACHE_SIZE and the settings file use too.
 */
#include <string.h>

#include "common/error.h"
#include "core/settings.h"
#include "common/sys.h"
#include "fijit_cache.h"
#include "store/bundle.h"
#include "store/store.h"

_Static_assert((unsigned)FI_CACHE_READ_ONLY == (unsigned)FI_STORE_READ_ONLY &&
                   (unsigned)FI_CACHE_READ_ONLY_FALLBACK == (unsigned)FI_STORE_READ_ONLY_FALLBACK,
               "fi_cache_flags are fi_store_flags");

struct fi_cache {
    fi_store *store;
};

int fi_cache_open(fi_cache **out, const char *dir, unsigned flags)
{
    int rc = 0;
    fi_cache *cache = NULL;
    if (!out) return fi__error(FI_EINVALID, "fi_cache_open: out is NULL");
    *out = NULL;
    if (flags & ~(unsigned)(FI_CACHE_READ_ONLY | FI_CACHE_READ_ONLY_FALLBACK))
        return fi__error(FI_EINVALID, "fi_cache_open: unknown flags 0x%x", flags);
    if (!(cache = fi__calloc(1, sizeof *cache))) return fi__error(FI_ENOMEM, "out of memory");
    /* What maintenance writes (import, repair) gets the cache's modes. Bad
     * settings are the commands' to report: here they leave the cache private. */
    fi_settings settings = FI_SETTINGS_INIT;
    fi__cache_umask_set(fi__settings_load(&settings, dir, 1) == 0 ? settings.umask : -1);
    fi__error_clear();
    FI_TRY(fi_store_open(&cache->store, dir, flags, 0));
    *out = cache;
    cache = NULL;
out:
    fi_cache_close(cache);
    return rc;
}

void fi_cache_close(fi_cache *cache)
{
    if (!cache) return;
    fi_store_close(cache->store);
    fi__free(cache);
}

int fi_cache_default_dir(char *out, size_t out_size)
{
    if (!out || !out_size) return fi__error(FI_EINVALID, "fi_cache_default_dir: no buffer");
    return fi__default_cache_dir(out, out_size);
}

int fi_cache_foreach(fi_cache *cache, int (*fn)(void *user, const fi_cache_entry *entry),
                     void *user)
{
    if (!cache || !fn) return fi__error(FI_EINVALID, "fi_cache_foreach: NULL argument");
    return fi_store_foreach(cache->store, fn, user); /* fi_store_row is fi_cache_entry */
}

void fi_cache_key_hex(char out[33], const uint8_t key[16]) { fi_key_hex(out, key); }

int fi_cache_stats_get(fi_jit_stats *out, fi_cache *cache)
{
    if (!cache) return fi__error(FI_EINVALID, "fi_cache_stats_get: NULL argument");
    return fi_store_stats_get(cache->store, out);
}

int fi_cache_remote_stats_foreach(fi_cache *cache,
                                  int (*fn)(void *user, const char *remote,
                                            const fi_jit_stats *counts),
                                  void *user)
{
    if (!cache) return fi__error(FI_EINVALID, "fi_cache_remote_stats_foreach: NULL argument");
    return fi_store_remote_stats_foreach(cache->store, fn, user);
}

int fi_cache_stats_zero(fi_cache *cache)
{
    if (!cache) return fi__error(FI_EINVALID, "fi_cache_stats_zero: NULL argument");
    return fi_store_stats_zero(cache->store);
}

int fi_cache_verify(fi_cache *cache, int repair, void (*report)(void *user, const char *problem),
                    void *user)
{
    if (!cache) return fi__error(FI_EINVALID, "fi_cache_verify: NULL argument");
    return fi_store_verify(cache->store, repair, report, user);
}

int fi_cache_clear(fi_cache *cache)
{
    if (!cache) return fi__error(FI_EINVALID, "fi_cache_clear: NULL argument");
    return fi_store_clear(cache->store);
}

int fi_cache_gc(fi_cache *cache, int64_t max_bytes, int64_t older_than)
{
    if (!cache) return fi__error(FI_EINVALID, "fi_cache_gc: NULL argument");
    return fi_store_gc(cache->store, max_bytes, older_than);
}

int fi_cache_export(fi_bundle_counts *out, fi_cache *cache, const char *path,
                    int (*want)(void *user, const fi_cache_entry *entry), void *user,
                    const char *secret)
{
    if (!out || !cache || !path) return fi__error(FI_EINVALID, "fi_cache_export: NULL argument");
    return fi_bundle_export(out, cache->store, path, want, user, secret);
}

int fi_cache_import(fi_bundle_counts *out, fi_cache *cache, const char *path, const char *secret,
                    void (*report)(void *user, const char *problem), void *user)
{
    if (!out || !cache || !path) return fi__error(FI_EINVALID, "fi_cache_import: NULL argument");
    return fi_bundle_import(out, cache->store, path, secret, report, user);
}
