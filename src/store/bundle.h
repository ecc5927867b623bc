/*
 * Bundles: a single file of cache entries (fijit export / import), read and
 * written through the store and checked by the entry codec and the seal
 * code like every tier. The file's layout is described in bundle.c; the
 * public face is fi_cache_export / fi_cache_import (fijit_cache.h).
 */
#ifndef FI_STORE_BUNDLE_H
#define FI_STORE_BUNDLE_H

#include "fijit_cache.h"
#include "store/store.h"

int fi_bundle_export(fi_bundle_counts *out, fi_store *store, const char *path,
                     int (*want)(void *user, const fi_cache_entry *entry), void *user,
                     const char *secret);
int fi_bundle_import(fi_bundle_counts *out, fi_store *store, const char *path,
                     const char *secret, void (*report)(void *user, const char *problem),
                     void *user);

#endif
