/*
 * fijit_cache.h: the advanced API, for tools that manage a cache and its
 * toolchain rather than serve kernels: the `fijit` CLI uses nothing else of
 * the library. Applications need only fijit.h. (libgit2's include/git2/sys/
 * is the precedent: public and stable, but for a narrower audience.)
 *
 * Conventions are fijit.h's: functions return 0 (or a count) on success and a
 * negative fi_error on failure, with the words in fi_last_error();
 * out-parameters come first; what is returned through `**out` belongs to the
 * caller and has a _close/_free that accepts NULL.
 */
#ifndef FIJIT_CACHE_H
#define FIJIT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "fijit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the cache directory -------------------------------------------------- */

/* A cache directory opened for maintenance (list, statistics, verify, gc,
 * clear). Safe to use from one thread at a time. */
typedef struct fi_cache fi_cache;

typedef enum fi_cache_flags {
    FI_CACHE_READ_ONLY = 1u << 1, /* never write */
    /* When the cache cannot be written (read-only mount, no permission, a
     * full disk), open it read-only instead of failing. */
    FI_CACHE_READ_ONLY_FALLBACK = 1u << 2,
} fi_cache_flags;

/* Open (creating it if needed, unless read-only) the cache at `dir`, with
 * the checks fi_jit_ctx_new makes: FI_EPERM for a directory of another user
 * or writable by group/others, FI_ENOTFOUND when a read-only open finds none.
 * What it creates gets the cache's modes (FIJIT_UMASK, fijit.conf's umask;
 * a group-writable directory is accepted when that umask lets the group
 * write). Close with fi_cache_close. */
FI_API int fi_cache_open(fi_cache **out, const char *dir, unsigned flags);
FI_API void fi_cache_close(fi_cache *cache);

/* The directory the library uses when none is given: $FIJIT_CACHE_DIR,
 * $XDG_CACHE_HOME/fijit (absolute only), $HOME/.cache/fijit; creates nothing. */
FI_API int fi_cache_default_dir(char *out, size_t out_size);

/* One entry of the cache, as fi_cache_foreach shows it. */
typedef struct fi_cache_entry {
    unsigned char key[16]; /* XXH3-128 of everything that shaped the object */
    char spec[256];        /* canonical spec text */
    char arch[16];         /* "sm_90a" */
    int registers;         /* per thread, as ptxas reported */
    int spill_bytes;
    int64_t compile_ns;
    int64_t size;      /* object bytes */
    int64_t created;   /* unix seconds */
    int64_t last_used; /* unix seconds */
    int64_t hits;
} fi_cache_entry;

/* Call `fn` for each entry, ordered by spec; stop early when it returns
 * nonzero. `entry` lives for the call. `fn` may call into the cache. */
FI_API int fi_cache_foreach(fi_cache *cache, int (*fn)(void *user, const fi_cache_entry *entry),
                            void *user);

/* The hex form of a key (32 lower-case digits and a NUL). */
FI_API void fi_cache_key_hex(char out[33], const uint8_t key[16]);

/* The persisted counters plus the current entries and bytes. */
FI_API int fi_cache_stats_get(fi_jit_stats *out, fi_cache *cache);
/* Zero the persisted counters. */
FI_API int fi_cache_stats_zero(fi_cache *cache);
/* Each remote's persisted counters (the remote_* fields of `counts`; the
 * totals of fi_cache_stats_get count every remote), by its URL as fijit
 * shows it, in the order of those texts. `fn` returns nonzero to stop. */
FI_API int fi_cache_remote_stats_foreach(fi_cache *cache,
                                         int (*fn)(void *user, const char *remote,
                                                   const fi_jit_stats *counts),
                                         void *user);

/* Check the index and every object; `report` (may be NULL) hears of each
 * problem, and of harmless leftovers as text starting "note: ". With
 * `repair`, one run fixes everything found. Returns the number of problems
 * (notes not counted) or an error code. `report` must not call into the cache. */
FI_API int fi_cache_verify(fi_cache *cache, int repair,
                           void (*report)(void *user, const char *problem), void *user);

/* Remove every entry (statistics stay). */
FI_API int fi_cache_clear(fi_cache *cache);

/* Evict least-recently-used entries until the cache holds at most
 * `max_bytes` (< 0: no size limit) and nothing last used before `older_than`
 * (unix seconds; 0: no age limit), then remove leftover temp and lock files.
 * Returns the number of entries removed. */
FI_API int fi_cache_gc(fi_cache *cache, int64_t max_bytes, int64_t older_than);

/* A size as FIJIT_MAX_CACHE_SIZE and `fijit gc --max-size` take it: a
 * decimal number ("123", "1.5") with an optional K, M, G or T (powers of
 * 1024, any case), then an optional "iB" or "B": "500M", "2G", "4GiB",
 * "1.5g". FI_EINVALID for anything else. */
FI_API int fi_cache_size_parse(int64_t *out, const char *text);

/* ---- bundles: a file of entries for hosts without a network ------------------
 * A bundle is one SQLite database file (the layout is described in
 * src/store/bundle.c): each entry's key, spec, arch, size, checksum, MAC
 * (with a fleet secret) and bytes in the cache's own entry format. */
typedef struct fi_bundle_counts {
    int64_t entries; /* in the bundle (export: written) */
    int64_t added;   /* import: verified and stored */
    int64_t present; /* import: already in the cache, skipped */
    int64_t refused; /* import: failed a check, not stored */
} fi_bundle_counts;

/* Write the entries `want` accepts (NULL: all) to a new bundle at `path`
 * (refused when it exists). Each is read and verified first. With `secret`
 * (NULL: none) every entry carries its keyed MAC. */
FI_API int fi_cache_export(fi_bundle_counts *out, fi_cache *cache, const char *path,
                           int (*want)(void *user, const fi_cache_entry *entry), void *user,
                           const char *secret);
/* Verify every entry of the bundle at `path` (header, checksum, key; its MAC
 * when `secret` is given, and then entries without one are refused) and
 * store the good ones the cache lacks. `report` (may be NULL) hears of each
 * refused entry. FI_EINVALID for a file that is no bundle or one of another
 * schema; FI_ECORRUPT when the file itself is damaged. */
FI_API int fi_cache_import(fi_bundle_counts *out, fi_cache *cache, const char *path,
                           const char *secret, void (*report)(void *user, const char *problem),
                           void *user);

/* ---- the remote tier: a fleet's shared cache ------------------------------ */

/* Check a remote URL, or a list of them (the grammar of fi_jit_options.remote), and write it
 * into `out` as fijit shows it: credentials, unknown options and any part
 * it cannot recognise as not secret masked as "***" (written for a bad URL
 * too). FI_EINVALID with words naming the bad part. */
FI_API int fi_cache_remote_url_check(char *out, size_t out_size, const char *url);

/* A remote opened for an operator (ping, describe, list). */
typedef struct fi_cache_remote fi_cache_remote;
/* Nothing is sent before the first call. */
FI_API int fi_cache_remote_open(fi_cache_remote **out, const char *url);
FI_API void fi_cache_remote_close(fi_cache_remote *remote);
/* One round trip; its time in `*out_ns`. */
FI_API int fi_cache_remote_ping(int64_t *out_ns, fi_cache_remote *remote);
/* What the server says of itself: version, memory used and allowed, eviction
 * policy, evictions, hits and misses, as name/value pairs. */
FI_API int fi_cache_remote_describe(fi_cache_remote *remote,
                                    void (*line)(void *user, const char *name, const char *value),
                                    void *user);

typedef struct fi_cache_remote_entry {
    fi_cache_entry entry; /* from the entry's header; size is the stored value's;
                             created, last_used and hits are 0 (unknown) */
    int sealed;           /* it carries a MAC */
    int header_ok;        /* its header is well formed and holds its key */
} fi_cache_remote_entry;
/* Call `fn` for every value under the remote's prefix (in no order); stop
 * when it returns nonzero. Reads headers only. */
FI_API int fi_cache_remote_foreach(fi_cache_remote *remote,
                                   int (*fn)(void *user, const fi_cache_remote_entry *entry),
                                   void *user);

/* ---- the toolchain ---------------------------------------------------------- */

/* FI_EINVALID unless `arch` is "sm_" + 2 or 3 digits + an optional 'a'. */
FI_API int fi_arch_check(const char *arch);

/* The NVRTC the library compiles with (loaded on first use). */
FI_API int fi_nvrtc_version(int *out_major, int *out_minor);
/* The real archs NVRTC compiles for, as numbers (90 for sm_90): writes the
 * first `out_count` into `out` and returns how many there are (call with
 * out_count 0 to size the array), as every list query does
 * (fi_jit_spec_enumerate). */
FI_API int fi_nvrtc_supported_archs(int *out, size_t out_count);

/* The arch of the current CUDA context's device ("sm_90a" for 9.0) into
 * `out`; returns its length (out_size 16 is always enough). */
FI_API int fi_cuda_current_arch(char *out, size_t out_size);

/* ---- translation units, errors, logging ------------------------------------ */

/* The translation unit `spec` expands to on `arch` (NULL: the context's),
 * byte for byte what the key hashes and NVRTC compiles (ptx 0), or the PTX
 * NVRTC makes of it (ptx 1, compiled now, not cached). A tuple built in
 * parts (prefill on sm_90a; fi_jit_explain lists them) is this unit with a
 * "#define FIJIT_ENTRY_MASK" line before its last #include in each part.
 * `*out` is NUL-terminated (`*out_size` excludes the NUL); free it with
 * fi_free. */
FI_API int fi_jit_unit(char **out, size_t *out_size, fi_jit_ctx *ctx, const fi_jit_spec *spec,
                       const char *arch, int ptx);

/* Free memory the library handed out (fi_jit_unit). Accepts NULL. */
FI_API void fi_free(void *p);

/* Set fi_last_error() (printf-style) and return `code`: for a tool whose own
 * failure should read like the library's. */
FI_API int fi_error_set(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A log level as FIJIT_LOG writes it: 0-4, or off, error, warn(ing), info,
 * debug (any case). The level (>= 0), or FI_EINVALID. */
FI_API int fi_log_level_parse(const char *text);
#define FI_LOG_LEVEL_HELP "0-4, or off, error, warn, info, debug"

/* ---- settings --------------------------------------------------------------
 * What an operator configures, and where each value came from. Highest
 * first: the program (fi_jit_options, a CLI option), the environment
 * (FIJIT_*), the configuration file <cache dir>/fijit.conf, the default.
 * docs/configuration.md describes every setting and the file's format. */
typedef enum fi_setting_origin {
    FI_SETTING_DEFAULT = 0,
    FI_SETTING_FILE = 1,    /* <cache dir>/fijit.conf */
    FI_SETTING_ENV = 2,     /* a FIJIT_* variable */
    FI_SETTING_PROGRAM = 3, /* fi_jit_options or a command-line option */
} fi_setting_origin;

/* The size limit of a cache when nothing sets one (ccache's default is 5 GB too). */
#define FI_DEFAULT_MAX_CACHE_BYTES ((int64_t)5 << 30)

#define FI_SETTINGS_VERSION 1

typedef struct fi_settings {
    unsigned version;        /* FI_SETTINGS_VERSION */
    char file[4096];         /* the configuration file that was read; "" if none */
    int jit;                 /* FIJIT_JIT / jit: 0 serve only what the cache holds */
    int log_level;           /* FIJIT_LOG / log_level */
    int64_t max_cache_bytes; /* FIJIT_MAX_CACHE_SIZE / max_size; 0: no limit */
    char remote[1024];       /* FIJIT_REMOTE / remote; "": none. May hold a password:
                                show it through fi_remote_url_check */
    int umask;               /* FIJIT_UMASK / umask; -1: a private cache (0700, 0600) */
    int64_t lock_timeout_ms; /* FIJIT_LOCK_TIMEOUT_MS; -1: wait forever */
    int remote_secret_set;   /* FIJIT_REMOTE_SECRET is set (and long enough) */
    fi_setting_origin jit_from, log_level_from, max_cache_bytes_from, remote_from, umask_from,
        lock_timeout_ms_from;
} fi_settings;

#define FI_SETTINGS_INIT FI__INIT(fi_settings, FI__SET(version, FI_SETTINGS_VERSION))
/* FI_SETTINGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_settings_init(fi_settings *out, unsigned version);

/* Read the settings for the cache at `cache_dir` (NULL: the environment and
 * defaults only) from the environment and that cache's fijit.conf, checking
 * every value: FI_EINVALID naming the variable, or the file and line, of the
 * first bad one. The variables that have no field here are checked too, as
 * fi_jit_ctx_new checks them (FIJIT_FAST_COMPILE, FIJIT_LOAD,
 * FIJIT_PREFILL_WS, FIJIT_TEMPLATE_DIR: docs/configuration.md). Creates
 * nothing. */
FI_API int fi_settings_load(fi_settings *out, const char *cache_dir);
/* "default", "fijit.conf", "environment", "program". */
FI_API const char *fi_setting_origin_name(fi_setting_origin origin);

/* ---- the device: a small window on the CUDA driver --------------------------
 * For programs with no CUDA runtime of their own (the CLI's demo, the quick
 * start): the primary context of a device, device memory and copies. The
 * driver is the one fijit opens at run time (no -lcuda). FI_ENODEVICE without
 * a driver or device; FI_ECUDA with the driver's words when a call fails. */

/* Number of devices the driver sees. */
FI_API int fi_device_count(int *out);
/* Retain device `ordinal`'s primary context and make it current on this
 * thread (fijit loads kernels into the thread's current context). */
FI_API int fi_device_use(int ordinal);
/* `bytes` of device memory of the current context into `*out`; free with
 * fi_device_free, which accepts NULL. */
FI_API int fi_device_alloc(void **out, size_t bytes);
FI_API void fi_device_free(void *ptr);
/* Synchronous copies between host and device memory. */
FI_API int fi_device_upload(void *device_dst, const void *host_src, size_t bytes);
FI_API int fi_device_download(void *host_dst, const void *device_src, size_t bytes);
/* Wait for every launch in the current context. */
FI_API int fi_device_synchronize(void);
/* The driver's CUDA version (12040 for 12.4). */
FI_API int fi_cuda_driver_version(int *out);

#ifdef __cplusplus
}
#endif

#endif
