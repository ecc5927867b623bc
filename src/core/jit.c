/*
 * fi_jit_get_kernel and friends: the path from a spec to a loaded function.
 *
 *   hot:  spec key → in-memory table (no expansion, no hashing of source)
 *   miss: expand → key → store (disk, then remote) → (per-key lock, check
 *         again) → NVRTC → store → load (load.h) → publish in the table
 *
 * Single flight: threads of one process that miss on the same spec serialise
 * on one of FI_BUILD_STRIPES mutexes chosen by the spec's hash; processes
 * serialise on the store's per-key file lock, and hosts on its lease in the
 * remote tier (both taken by fi_store_lock_key).
 *
 * The context's variants are in registry.c; an object is loaded in load.c.
 */
#include <ctype.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toolchain/cuda_drv.h"
#include "common/error.h"
#include "core/expand.h"
#include "core/key.h"
#include "core/jit.h"
#include "kinds/registry.h"
#include "core/load.h"
#include "core/registry.h"
#include "toolchain/nvrtc.h"
#include "kinds/spec.h"
#include "store/remote/remote.h"
#include "store/store.h"
#include "core/settings.h"
#include "common/sys.h"
#include "core/table.h"
#include "core/variant.h"

#define FI_BUILD_STRIPES 64
#define FI_COUNTER_SLOTS 16
#define FI_DEFAULT_ARCH "sm_90a"

/* A counter per statistic of FI_JIT_STATS_COUNTERS, in its order; this
 * process counts the events (hits, misses, compiles ...), the store the rest. */
enum {
#define FI_COUNTER_ENUM_(name, unit, label) C_##name,
    FI_JIT_STATS_COUNTERS(FI_COUNTER_ENUM_)
#undef FI_COUNTER_ENUM_
    C_COUNT
};
#define C_MEMORY_HITS C_memory_hits
#define C_DISK_HITS C_disk_hits
#define C_MISSES C_misses
#define C_COMPILES C_compiles
#define C_COMPILE_FAILURES C_compile_failures
#define C_COMPILE_NS C_compile_ns
#define C_BYTES_WRITTEN C_bytes_written

/* One cache line per slot so threads counting hits do not contend. */
typedef struct counter_slot {
    _Alignas(64) atomic_llong value[C_COUNT];
} counter_slot;

struct fi_jit_ctx {
    char cache_dir[4096];
    char arch[16];          /* override for compile-only use; "" = from the device */
    /* FIJIT_FAST_COMPILE's NVRTC option ("--Ofast-compile=mid"), "" for none:
     * quicker builds of slower code, under keys of their own (the option is
     * in the key like every other). */
    char fast_compile_option[32];
    int jit;
    int disk_wanted;        /* use_disk_cache: a NULL store then means it failed to open */
    int64_t max_bytes;
    fi_store *store;        /* NULL: memory only */
    atomic_int store_write_warned;
    atomic_int stats_warned; /* "could not save statistics" was logged */
    fi_table table;
    pthread_mutex_t build_stripes[FI_BUILD_STRIPES];
    fi_registry variants;
    counter_slot counters[FI_COUNTER_SLOTS];
};

static void count(fi_jit_ctx *ctx, int counter, long long n)
{
    static atomic_uint next_slot;
    static _Thread_local unsigned slot = ~0u;
    if (slot == ~0u) slot = atomic_fetch_add(&next_slot, 1) % FI_COUNTER_SLOTS;
    atomic_fetch_add_explicit(&ctx->counters[slot].value[counter], n, memory_order_relaxed);
}

/* Sum the counts not yet written to the index; `take` zeroes them. */
static void sum_counts(fi_jit_ctx *ctx, fi_jit_stats *delta, int take)
{
    long long sum[C_COUNT] = {0};
    for (int s = 0; s < FI_COUNTER_SLOTS; s++)
        for (int c = 0; c < C_COUNT; c++)
            sum[c] += take ? atomic_exchange(&ctx->counters[s].value[c], 0)
                           : atomic_load(&ctx->counters[s].value[c]);
    memset(delta, 0, sizeof *delta);
    delta->version = FI_JIT_STATS_VERSION;
#define FI_COUNTER_GET_(name, unit, label) delta->name = sum[C_##name];
    FI_JIT_STATS_COUNTERS(FI_COUNTER_GET_)
#undef FI_COUNTER_GET_
}

static void flush_counts(fi_jit_ctx *ctx)
{
    fi_jit_stats delta;
    /* Memory only or read-only: the counters in memory are all there is. */
    if (!ctx->store || fi_store_read_only(ctx->store)) return;
    sum_counts(ctx, &delta, 1);
    /* A failed flush is only logged (once: this runs after every miss, and a
     * cache that refuses writes must not warn per kernel), and the caller's
     * message (the first failure, if any) is what fi_last_error() must
     * still say. What was taken is kept for the next flush (a full disk may
     * free up). */
    char *first = fi__strdup(fi_last_error());
    if (fi_store_stats_add(ctx->store, &delta) < 0) {
        if (!atomic_exchange(&ctx->stats_warned, 1))
            fi__log(FI_LOG_WARN, "could not save statistics (said once): %s", fi_last_error());
#define FI_COUNTER_BACK_(name, unit, label) if (delta.name) count(ctx, C_##name, delta.name);
        FI_JIT_STATS_COUNTERS(FI_COUNTER_BACK_)
#undef FI_COUNTER_BACK_
        if (first) fi__error(0, "%s", first);
    }
    fi__free(first);
}

/* Bytes of fi_jit_options a caller of each version has (index: version). */
static const size_t options_size[FI_JIT_OPTIONS_VERSION + 1] = {
    0, offsetof(fi_jit_options, remote), offsetof(fi_jit_options, log_fn),
    sizeof(fi_jit_options)};

/* The remote tiers behind the store, in the order listed: the options'
 * URLs, else the settings'. */
static int remote_attach(fi_store *store, const fi_jit_options *opts, const fi_settings *settings)
{
    int rc = 0;
    char url[2048];
    const char *list = opts->remote ? opts->remote : settings->remote;
    const char *secret = opts->remote_secret ? opts->remote_secret : getenv("FIJIT_REMOTE_SECRET");
    if (!list || (rc = fi_remote_list_check(list)) <= 0) return rc;
    if (secret && *secret) FI_TRY(fi_store_set_secret(store, secret));
    for (const char *cursor = list; fi_remote_list_next(url, sizeof url, &cursor) > 0;) {
        fi_remote *remote = NULL;
        FI_TRY(fi_remote_open(&remote, url));
        FI_TRY(fi_store_add_remote(store, remote)); /* takes it over */
    }
out:
    return rc;
}

/* The cache directory: the options', else the default rule's ("" for a
 * memory-only context that has none). */
static int cache_dir_resolve(fi_jit_ctx *ctx, const fi_jit_options *opts)
{
    int rc;
    if (opts->cache_dir) {
        if (!*opts->cache_dir || strlen(opts->cache_dir) >= sizeof ctx->cache_dir - 64)
            return fi__error(FI_EINVALID, "cache dir is empty or too long");
        strcpy(ctx->cache_dir, opts->cache_dir);
        return 0;
    }
    if ((rc = fi__default_cache_dir(ctx->cache_dir, sizeof ctx->cache_dir - 64)) < 0) {
        if (opts->use_disk_cache) return rc;
        /* Memory only needs no directory (a service without HOME). */
        ctx->cache_dir[0] = '\0';
        fi__error_clear();
    }
    return 0;
}

/* The program's options over the operator's settings (FIJIT_*, fijit.conf):
 * the options win where they say something (a cache size, a remote); the
 * operator's log level and JIT switch win over the options' (FIJIT_JIT=0 is
 * a safety switch). */
static int settings_apply(fi_jit_ctx *ctx, const fi_jit_options *opts, fi_settings *settings)
{
    int rc = 0;
    settings->version = FI_SETTINGS_VERSION;
    if (opts->log_fn) fi__log_set_callback(opts->log_fn, opts->log_user); /* hears the loader too */
    FI_TRY(fi__settings_load(settings, ctx->cache_dir, 0));
    fi__log_set_level(settings->log_level_from != FI_SETTING_DEFAULT ? settings->log_level
                                                                     : (int)opts->log_level);
    ctx->jit = settings->jit_from != FI_SETTING_DEFAULT ? settings->jit : opts->jit;
    fi__cache_umask_set(settings->umask);
    /* 0 in the options defers to the settings; < 0 asks for no limit (0 in the store). */
    ctx->max_bytes = opts->max_cache_bytes > 0 ? opts->max_cache_bytes
                     : opts->max_cache_bytes < 0 ? 0 : settings->max_cache_bytes;
out:
    return rc;
}

/* FIJIT_FAST_COMPILE: NVRTC's -Ofast-compile level, which trades the
 * kernels' speed for compile time (docs/cold-start.md has the figures).
 * Unset, empty or "off": the full optimisation every default build gets.
 * The accepted levels are settings.c's. */
static int fast_compile_resolve(fi_jit_ctx *ctx, const char *level)
{
    int rc = 0;
    ctx->fast_compile_option[0] = '\0';
    FI_TRY(fi__env_choice_check("FIJIT_FAST_COMPILE", level));
    if (level && *level && strcmp(level, "off") != 0)
        snprintf(ctx->fast_compile_option, sizeof ctx->fast_compile_option,
                 "--Ofast-compile=%s", level);
out:
    return rc;
}

int fi_jit_ctx_new(fi_jit_ctx **out, const fi_jit_options *opts)
{
    int rc = 0;
    fi_jit_options defaults = FI_JIT_OPTIONS_INIT;
    fi_settings settings;
    fi_jit_ctx *ctx = NULL;
    if (!out) return fi__error(FI_EINVALID, "no place for the context (out is NULL)");
    *out = NULL;
    if (opts && (opts->version < 1 || opts->version > FI_JIT_OPTIONS_VERSION))
        return fi__error(FI_EINVALID, "options.version is %u, this library expects 1 to %d",
                         opts->version, FI_JIT_OPTIONS_VERSION);
    /* An older caller's struct ends before the fields its version lacks. */
    if (opts) memcpy(&defaults, opts, options_size[opts->version]);
    defaults.version = FI_JIT_OPTIONS_VERSION;
    opts = &defaults;
    if (!(ctx = fi__calloc(1, sizeof *ctx))) return fi__error(FI_ENOMEM, "out of memory");
    fi__table_init(&ctx->table);
    fi__registry_init(&ctx->variants);
    for (int i = 0; i < FI_BUILD_STRIPES; i++) pthread_mutex_init(&ctx->build_stripes[i], NULL);

    FI_TRY(cache_dir_resolve(ctx, opts));
    FI_TRY(settings_apply(ctx, opts, &settings));
    ctx->disk_wanted = opts->use_disk_cache;
    const char *arch = opts->arch ? opts->arch : getenv("FIJIT_ARCH");
    if (arch && *arch) {
        FI_TRY(fi__arch_check(arch));
        snprintf(ctx->arch, sizeof ctx->arch, "%s", arch);
    }
    FI_TRY(fast_compile_resolve(ctx, getenv("FIJIT_FAST_COMPILE")));
    if (opts->use_disk_cache) {
        unsigned flags = FI_STORE_READ_ONLY_FALLBACK |
                         (opts->allow_unsafe_dir ? FI_STORE_ALLOW_UNSAFE_DIR : 0);
        rc = fi_store_open(&ctx->store, ctx->cache_dir, flags, ctx->max_bytes);
        if (rc == FI_EPERM || rc == FI_EINVALID) goto out; /* never use a dir we must not trust */
        fi_store_set_lock_timeout(ctx->store, settings.lock_timeout_ms);
        if (rc < 0) {
            /* Read-only or full disk: keep serving kernels, compiled in memory. */
            fi__log(FI_LOG_WARN, "disk cache disabled: %s", fi_last_error());
            ctx->store = NULL;
            rc = 0;
        }
        if (ctx->store) FI_TRY(remote_attach(ctx->store, opts, &settings));
    } else if (opts->remote && *opts->remote) {
        fi__log(FI_LOG_WARN, "the remote cache is not used: it needs the disk cache");
    } else if (!opts->remote && settings.remote[0]) {
        /* The operator's remote (FIJIT_REMOTE, fijit.conf) is for every
         * program on the host; one that chose memory only (explain, a
         * check) did nothing wrong. */
        fi__log(FI_LOG_INFO, "the remote cache is not used: it needs the disk cache");
    }
    *out = ctx;
    ctx = NULL;
out:
    fi_jit_ctx_free(ctx);
    return rc;
}

const char *fi_jit_ctx_cache_dir(const fi_jit_ctx *ctx) { return ctx ? ctx->cache_dir : NULL; }

void fi_jit_ctx_free(fi_jit_ctx *ctx)
{
    if (!ctx) return;
    flush_counts(ctx);
    fi__table_destroy(&ctx->table, fi__load_release);
    for (int i = 0; i < FI_BUILD_STRIPES; i++) pthread_mutex_destroy(&ctx->build_stripes[i]);
    fi_store_close(ctx->store);
    fi__registry_destroy(&ctx->variants);
    fi__free(ctx);
}

/* ---- variants -------------------------------------------------------------- */

fi_registry *fi__jit_registry(fi_jit_ctx *ctx) { return &ctx->variants; }

int fi_jit_variant_register(fi_jit_ctx *ctx, const char *name, const char *source, unsigned flags)
{
    return fi__registry_add(ctx ? &ctx->variants : NULL, name, source, flags, NULL);
}

int fi__jit_variant_register_as(fi_jit_ctx *ctx, const char *name, const char *source,
                                unsigned flags, const char *origin)
{
    return fi__registry_add(ctx ? &ctx->variants : NULL, name, source, flags, origin);
}

int fi_jit_variant_register_file(fi_jit_ctx *ctx, const char *name, const char *path, unsigned flags)
{
    return fi__registry_add_file(ctx ? &ctx->variants : NULL, name, path, flags);
}

int fi__jit_variant_pack(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *who,
                         const fi_variant_arg *args, int count, unsigned long long *out)
{
    return fi__registry_pack(&ctx->variants, spec, who, args, count, out);
}

/* The registered variant `key` names (NULL for the built-in one); fills key->variant_hash. */
static int variant_resolve(fi_jit_ctx *ctx, fi_spec_key *key, const fi_variant **out)
{
    return fi__registry_resolve(&ctx->variants, key, out);
}

/* ---- building objects ------------------------------------------------------ */

typedef struct fi_build {
    fi_translation_unit tu;
    const fi_kind_info *kind;
    const fi_variant *variant;   /* NULL: built-in */
    char arch[16];
    char arch_option[48];
    const char *options[8];
    int option_count;
    unsigned entry_mask;         /* the part of the kernels built (kind.h parts); 0: all */
    uint8_t key[16];
    fi_object_meta meta;
    void *object;      /* the cubin */
    size_t object_size;
    int from_local;    /* the object came from the disk cache */
} fi_build;

static void build_free(fi_build *b)
{
    fi__tu_free(&b->tu);
    fi__free(b->object);
    b->object = NULL;
}

/* Expand the templates for `spec` on `arch` and compute its key. */
static int build_prepare(fi_build *b, const fi_jit_ctx *ctx, const fi_jit_spec *spec,
                         const fi_variant *variant, const char *arch, unsigned entry_mask,
                         void (*explain)(void *, const char *), void *user)
{
    int rc = 0, major = 0, minor = 0;
    memset(b, 0, sizeof *b);
    b->entry_mask = entry_mask;
    FI_TRY(fi__arch_check(arch));
    b->variant = variant;
    b->kind = fi__kind_info(spec->kind);
    if (b->kind->check_arch) FI_TRY(b->kind->check_arch(spec, arch));
    snprintf(b->arch, sizeof b->arch, "%s", arch);
    snprintf(b->arch_option, sizeof b->arch_option, "--gpu-architecture=%s", arch);
    b->options[b->option_count++] = b->arch_option;
    b->options[b->option_count++] = "-std=c++17";
    b->options[b->option_count++] = "--modify-stack-limit=false";
    b->options[b->option_count++] = "-default-device";
    b->options[b->option_count++] = "--ptxas-options=--verbose"; /* registers and spills into the log */
    FI_TRY(fi_jit_spec_format(b->meta.spec, sizeof b->meta.spec, spec));
    snprintf(b->meta.arch, sizeof b->meta.arch, "%s", arch);
    FI_TRY(fi__expand_part(&b->tu, spec, variant, entry_mask));
    FI_TRY(fi__nvrtc_version(&major, &minor));
    if (ctx->fast_compile_option[0]) {
        if (major * 100 + minor < 1208)
            FI_FAIL(FI_EUNSUPPORTED, "FIJIT_FAST_COMPILE needs NVRTC 12.8 or later (this one is "
                    "%d.%d)", major, minor);
        b->options[b->option_count++] = ctx->fast_compile_option;
    }
    fi_key_input in = {&b->tu, arch, major, minor, b->option_count, b->options,
                       fi__kind_entry_count(b->kind), b->kind->entries};
    FI_TRY(fi__key_compute(b->key, &in, explain, user));
out:
    return rc;
}

/* Registers and spill bytes of `entry` from ptxas' verbose lines in the log. */
static void parse_resource_usage(const char *log, const char *entry, fi_object_meta *meta)
{
    char pattern[160];
    meta->registers = -1;
    meta->spill_bytes = -1;
    if (!log) return;
    snprintf(pattern, sizeof pattern, "Function properties for %s\n", entry);
    const char *p = strstr(log, pattern);
    if (!p) return;
    p += strlen(pattern);
    /* The next line: "ptxas         .     0 bytes stack frame, 0 bytes spill stores, ..." */
    while (*p && *p != '\n' && !isdigit((unsigned char)*p)) p++;
    int stack = 0, spill_stores = 0;
    if (sscanf(p, "%d bytes stack frame, %d bytes spill stores", &stack, &spill_stores) == 2)
        meta->spill_bytes = spill_stores;
    const char *used = strstr(p, "Used ");
    if (used) sscanf(used, "Used %d registers", &meta->registers);
}

/* Registers and spills of b's main kernel, entries[0]; of a part, of the
 * kernel it builds with the most registers (the others are stubs there). */
static void main_resource_usage(const char *log, const fi_build *b, fi_object_meta *meta)
{
    if (!b->entry_mask) {
        parse_resource_usage(log, b->kind->entries[0], meta);
        return;
    }
    meta->registers = meta->spill_bytes = -1;
    for (int i = 0; i < fi__kind_entry_count(b->kind); i++) {
        fi_object_meta usage;
        if (!(b->entry_mask >> i & 1u)) continue;
        parse_resource_usage(log, b->kind->entries[i], &usage);
        if (usage.registers > meta->registers) {
            meta->registers = usage.registers;
            meta->spill_bytes = usage.spill_bytes;
        }
    }
}

/* NVRTC on b's unit with `options` (cubin, or PTX with `ptx`); a variant's
 * errors are mapped to the snippet's file and lines. */
static int nvrtc_run(const fi_build *b, const char *const *options, int option_count, int ptx,
                     fi_compile_output *result)
{
    const char *names[FI_TU_MAX_HEADERS], *texts[FI_TU_MAX_HEADERS];
    for (int i = 0; i < b->tu.header_count; i++) {
        names[i] = b->tu.header_names[i];
        texts[i] = b->tu.header_texts[i];
    }
    fi_compile_input in = {b->tu.text, b->tu.name, b->tu.header_count, names, texts,
                           option_count, options, ptx};
    int rc = fi__nvrtc_compile(&in, result);
    char *annotated = NULL;
    if (rc == FI_ECOMPILE && b->variant && result->log &&
        fi__variant_annotate_log(b->variant, result->log, &annotated) == 0) {
        rc = fi__error(FI_ECOMPILE, "variant '%s' does not compile for %s on %s:\n",
                       b->variant->name, b->meta.spec, b->arch);
        fi__error_append(annotated);
        fi__free(annotated);
    }
    return rc;
}

static int build_compile(fi_jit_ctx *ctx, fi_build *b)
{
    int rc = 0;
    fi_compile_output result = {0};
    int64_t start = fi__now_ns();
    rc = nvrtc_run(b, b->options, b->option_count, 0, &result);
    b->meta.compile_ns = fi__now_ns() - start;
    count(ctx, C_COMPILE_NS, b->meta.compile_ns);
    if (rc < 0) {
        count(ctx, C_COMPILE_FAILURES, 1);
        goto out;
    }
    count(ctx, C_COMPILES, 1);
    /* Every entry's registers and spills, for kernel developers (FIJIT_LOG=4);
     * a part names the entries it builds (the others are stubs there). */
    if (result.log) {
        char built[512] = "";
        for (int i = 0, used = 0; b->entry_mask && i < fi__kind_entry_count(b->kind); i++)
            if (b->entry_mask >> i & 1u && used < (int)sizeof built)
                used += snprintf(built + used, sizeof built - (size_t)used, "%s%s",
                                 used ? " " : ", building ", b->kind->entries[i]);
        fi__log(FI_LOG_DEBUG, "%s on %s%s, ptxas:\n%s", b->meta.spec, b->arch, built, result.log);
    }
    main_resource_usage(result.log, b, &b->meta);
    b->object = result.cubin;
    b->object_size = result.cubin_size;
    result.cubin = NULL;
out:
    fi__compile_output_free(&result);
    return rc;
}

/* 0 stored, or the store's error code with fi_last_error() saying why. */
static int store_put_or_warn(fi_jit_ctx *ctx, fi_build *b)
{
    if (fi_store_read_only(ctx->store))
        return fi__error(FI_EIO, "the cache %s is read-only", fi_store_dir(ctx->store));
    int rc = fi_store_put(ctx->store, b->key, b->object, b->object_size, &b->meta);
    if (rc == 0) return 0; /* the store counts bytes_written itself */
    /* Full disk or read-only dir: serve from memory and say so once. */
    if (!atomic_exchange(&ctx->store_write_warned, 1))
        fi__log(FI_LOG_WARN, "cannot write to the cache (kernels are still served): %s",
                fi_last_error());
    return rc;
}

/* b's object from the store's tiers; a disk hit is counted here, a remote
 * one by the store. `again`: the look under the build lock, after a miss. */
static int store_lookup(fi_jit_ctx *ctx, fi_build *b, int again)
{
    fi_store_tier tier;
    int rc = (again ? fi_store_lookup_again : fi_store_lookup)(ctx->store, b->key, &b->object,
                                                               &b->object_size, &b->meta, &tier);
    if (rc == 0 && tier == FI_STORE_TIER_LOCAL) {
        count(ctx, C_DISK_HITS, 1);
        b->from_local = 1;
    }
    return rc;
}

/* Fill b->object from the disk cache or by compiling; *compiled says which.
 * `not_stored` (may be NULL; FI_NOT_STORED_MAX bytes) receives why a compiled
 * object could not be written to the disk cache; it stays "" when it was. */
#define FI_NOT_STORED_MAX 1024
static int build_obtain(fi_jit_ctx *ctx, fi_build *b, int *compiled, char *not_stored)
{
    int rc = 0;
    fi_store_lock *lock = NULL;
    *compiled = 0;
    if (not_stored) not_stored[0] = '\0';
    if (ctx->store) {
        rc = store_lookup(ctx, b, 0);
        if (rc == 0) goto out;
        if (rc != FI_ENOTFOUND) goto out;
        rc = 0;
    }
    count(ctx, C_MISSES, 1);
    if (!ctx->jit)
        FI_FAIL(FI_ENOTFOUND, "%s for %s is not in the cache and JIT is disabled", b->meta.spec,
                b->arch);
    /* Prewarm stores what it builds: into a read-only cache a compile is wasted. */
    if (not_stored && ctx->store && fi_store_read_only(ctx->store))
        FI_FAIL(FI_EIO, "%s for %s is not in the cache, and the cache %s is read-only",
                b->meta.spec, b->arch, fi_store_dir(ctx->store));
    if (ctx->store) {
        /* Another process may be building it: wait for its lock, then look again. */
        FI_TRY(fi_store_lock_key(ctx->store, b->key, &lock));
        rc = store_lookup(ctx, b, 1);
        if (rc == 0) goto out;
        if (rc != FI_ENOTFOUND) goto out;
        rc = 0;
    }
    FI_TRY(build_compile(ctx, b));
    *compiled = 1;
    if (ctx->store && store_put_or_warn(ctx, b) < 0 && not_stored)
        snprintf(not_stored, FI_NOT_STORED_MAX, "%s", fi_last_error());
    if (!ctx->store && ctx->disk_wanted && not_stored)
        snprintf(not_stored, FI_NOT_STORED_MAX,
                 "the disk cache is disabled (it could not be opened at %.900s)", ctx->cache_dir);
out:
    fi_store_unlock(lock);
    flush_counts(ctx);
    return rc;
}

static pthread_mutex_t *stripe_for(fi_jit_ctx *ctx, uint64_t hash)
{
    return &ctx->build_stripes[(hash >> 32) % FI_BUILD_STRIPES];
}

/* ---- parts: one tuple's kernels in modules built side by side --------------- */

/* The parts of `spec`'s kernels on `arch` (kinds/kind.h parts) into out[];
 * 1 with out[0] = 0 (every kernel) where the kind does not split it, or
 * where its parts would not hold each entry exactly once (a kernel served
 * from a part that has only its stub would run and do nothing). */
static int spec_parts(const fi_jit_spec *spec, const char *arch, unsigned out[FI_KIND_MAX_PARTS])
{
    const fi_kind_info *kind = fi__kind_info(spec->kind);
    int n = kind && kind->parts ? kind->parts(spec, arch, out) : 1;
    unsigned seen = 0, twice = 0;
    for (int i = 0; i < n && n <= FI_KIND_MAX_PARTS; i++) {
        twice |= seen & out[i];
        seen |= out[i];
    }
    if (n <= 1 || n > FI_KIND_MAX_PARTS || twice || seen != (1u << fi__kind_entry_count(kind)) - 1) {
        out[0] = 0;
        return 1;
    }
    return n;
}

/* One part's build (expand, key, store or compile), on a thread of its own. */
typedef struct part_build {
    fi_jit_ctx *ctx;
    const fi_jit_spec *spec;
    const fi_variant *variant;
    const char *arch;
    unsigned entry_mask;
    fi_build b;
    int compiled;
    int rc;
    char not_stored[FI_NOT_STORED_MAX];
    char error[2048]; /* the thread's fi_last_error() where rc < 0 */
} part_build;

static void *part_build_run(void *arg)
{
    part_build *p = arg;
    p->rc = build_prepare(&p->b, p->ctx, p->spec, p->variant, p->arch, p->entry_mask, NULL, NULL);
    if (p->rc == 0) p->rc = build_obtain(p->ctx, &p->b, &p->compiled, p->not_stored);
    if (p->rc < 0) snprintf(p->error, sizeof p->error, "%s", fi_last_error());
    return NULL;
}

/* Obtain the parts[i] with bit i of `todo` set, side by side: each on a
 * thread of its own but the last, which runs on the caller's (as does any
 * whose thread cannot start). The first failure's code and words, else 0. */
static int parts_obtain(part_build *parts, int n, unsigned todo)
{
    pthread_t threads[FI_KIND_MAX_PARTS];
    int started[FI_KIND_MAX_PARTS] = {0}, last = -1, rc = 0;
    for (int i = 0; i < n; i++)
        if (todo >> i & 1u) last = i;
    for (int i = 0; i < n; i++) {
        if (!(todo >> i & 1u)) continue;
        if (i != last && pthread_create(&threads[i], NULL, part_build_run, &parts[i]) == 0)
            started[i] = 1;
        else
            part_build_run(&parts[i]);
    }
    for (int i = 0; i < n; i++)
        if (started[i]) pthread_join(threads[i], NULL);
    for (int i = 0; i < n && rc == 0; i++)
        if ((todo >> i & 1u) && parts[i].rc < 0) rc = fi__error(parts[i].rc, "%s", parts[i].error);
    return rc;
}

static void parts_init(part_build *parts, int n, fi_jit_ctx *ctx, const fi_jit_spec *spec,
                       const fi_variant *variant, const char *arch, const unsigned *masks)
{
    memset(parts, 0, sizeof *parts * (size_t)n);
    for (int i = 0; i < n; i++) {
        parts[i].ctx = ctx;
        parts[i].spec = spec;
        parts[i].variant = variant;
        parts[i].arch = arch;
        parts[i].entry_mask = masks[i];
    }
}

static void parts_free(part_build *parts, int n)
{
    for (int i = 0; i < n; i++) build_free(&parts[i].b);
}

int fi_jit_prewarm(fi_build_outcome *out, fi_jit_ctx *ctx, const fi_jit_spec *spec,
                   const char *arch)
{
    int rc = 0, compiled = 0, n_parts = 0;
    const char *not_stored = "";
    part_build *parts = NULL;
    unsigned masks[FI_KIND_MAX_PARTS];
    fi_spec_key key;
    fi_jit_spec full;
    char device_arch[16];
    if (!ctx) return fi__error(FI_EINVALID, "fi_jit_prewarm: ctx is NULL");
    const fi_variant *variant = NULL;
    FI_TRY(fi__spec_key(&key, spec));
    FI_TRY(variant_resolve(ctx, &key, &variant));
    fi__spec_copy(&full, spec); /* a version 1 caller's spec, read as far as it reaches */
    spec = &full;
    if (!arch || !*arch) {
        arch = ctx->arch[0] ? ctx->arch : FI_DEFAULT_ARCH;
        if (!ctx->arch[0] && fi__cuda_current_arch(device_arch, NULL, NULL) == 0) arch = device_arch;
    }
    n_parts = spec_parts(spec, arch, masks);
    if (!(parts = fi__calloc((size_t)n_parts, sizeof *parts))) FI_FAIL(FI_ENOMEM, "out of memory");
    parts_init(parts, n_parts, ctx, spec, variant, arch, masks);
    pthread_mutex_t *stripe = stripe_for(ctx, fi__table_hash(&key, 0)); /* as get_kernel_slow */
    pthread_mutex_lock(stripe);
    rc = parts_obtain(parts, n_parts, (1u << n_parts) - 1);
    for (int i = 0; rc == 0 && i < n_parts; i++) {
        const fi_build *b = &parts[i].b;
        /* Prewarm fills the remote too: an entry the disk held may be new to it. */
        if (b->from_local) fi_store_publish(ctx->store, b->key, b->object, b->object_size, &b->meta);
        compiled |= parts[i].compiled;
        if (!not_stored[0]) not_stored = parts[i].not_stored;
    }
    pthread_mutex_unlock(stripe);
    if (rc == 0 && not_stored[0]) /* prewarm's job is to store: say what was lost, and why */
        rc = fi__error(FI_EIO, "%s for %s compiled but not stored in the cache: %s",
                       parts[0].b.meta.spec, parts[0].b.arch, not_stored);
    if (rc == 0 && out) *out = compiled ? FI_BUILD_COMPILED : FI_BUILD_CACHED;
out:
    if (parts) parts_free(parts, n_parts);
    fi__free(parts);
    return rc;
}

int fi_jit_explain(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *arch,
                   void (*write)(void *user, const char *text), void *user)
{
    int rc = 0;
    fi_build b;
    fi_spec_key key;
    fi_jit_spec full;
    char line[400];
    if (!ctx || !write) return fi__error(FI_EINVALID, "fi_jit_explain: NULL argument");
    const fi_variant *variant = NULL;
    FI_TRY(fi__spec_key(&key, spec));
    FI_TRY(variant_resolve(ctx, &key, &variant));
    fi__spec_copy(&full, spec); /* a version 1 caller's spec, read as far as it reaches */
    spec = &full;
    if (!arch || !*arch) arch = ctx->arch[0] ? ctx->arch : FI_DEFAULT_ARCH;
    char text[256];
    FI_TRY(fi_jit_spec_format(text, sizeof text, spec));
    snprintf(line, sizeof line, "spec %s\narch %s\n", text, arch);
    write(user, line);
    if (variant) {
        snprintf(line, sizeof line, "variant %s: %zu bytes, xxh3-64 %016llx, %d parameters\n",
                 variant->name, strlen(variant->source), (unsigned long long)variant->hash,
                 variant->param_count);
        write(user, line);
    }
    /* A tuple built in parts has a key per part, each listed after the
     * kernels it builds in full. */
    unsigned masks[FI_KIND_MAX_PARTS];
    const int n_parts = spec_parts(spec, arch, masks);
    rc = 0; /* fi_jit_spec_format's length */
    for (int i = 0; rc == 0 && i < n_parts; i++) {
        if (n_parts > 1) {
            const fi_kind_info *kind = fi__kind_info(spec->kind);
            int used = snprintf(line, sizeof line, "part %d of %d, building", i + 1, n_parts);
            for (int e = 0; e < fi__kind_entry_count(kind) && used < (int)sizeof line; e++)
                if (masks[i] >> e & 1u)
                    used += snprintf(line + used, sizeof line - (size_t)used, " %s", kind->entries[e]);
            if (used < (int)sizeof line - 1) strcat(line, "\n");
            write(user, line);
        }
        rc = build_prepare(&b, ctx, spec, variant, arch, masks[i], write, user);
        build_free(&b);
    }
out:
    return rc;
}

int fi__jit_unit(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *arch, int ptx, char **out,
                 size_t *out_size)
{
    int rc = 0;
    fi_build b;
    fi_spec_key key;
    fi_jit_spec full;
    fi_compile_output result = {0};
    const fi_variant *variant = NULL;
    char virtual_arch[48];
    const char *options[8];
    int option_count = 0;
    memset(&b, 0, sizeof b);
    *out = NULL;
    *out_size = 0;
    FI_TRY(fi__spec_key(&key, spec));
    FI_TRY(variant_resolve(ctx, &key, &variant));
    fi__spec_copy(&full, spec); /* a version 1 caller's spec, read as far as it reaches */
    spec = &full;
    if (!arch || !*arch) arch = ctx->arch[0] ? ctx->arch : FI_DEFAULT_ARCH;
    /* The unit and options the cache key is computed from, as a build makes them. */
    FI_TRY(build_prepare(&b, ctx, spec, variant, arch, 0, NULL, NULL));
    if (!ptx) {
        *out_size = strlen(b.tu.text);
        *out = b.tu.text;
        b.tu.text = NULL;
        goto out;
    }
    /* PTX: the same options, for the virtual arch (compute_90a for sm_90a);
     * ptxas does not run, so its options go. */
    snprintf(virtual_arch, sizeof virtual_arch, "--gpu-architecture=compute_%s", arch + 3);
    for (int i = 0; i < b.option_count; i++) {
        if (b.options[i] == b.arch_option) options[option_count++] = virtual_arch;
        else if (strncmp(b.options[i], "--ptxas-options", 15) != 0) options[option_count++] = b.options[i];
    }
    rc = nvrtc_run(&b, options, option_count, 1, &result);
    if (rc < 0) goto out;
    *out = result.cubin;
    *out_size = strnlen(result.cubin, result.cubin_size); /* NVRTC counts the NUL */
    result.cubin = NULL;
out:
    fi__compile_output_free(&result);
    build_free(&b);
    return rc;
}

/* ---- loading --------------------------------------------------------------- */

/* Fill e's kernel (launch shape for `arch`, key, arch) and load `object`
 * for the current context into it (load.h). */
static int load_entry(fi_table_entry *e, const fi_jit_spec *spec, const fi_kind_info *kind,
                      const char *arch, const void *object, const uint8_t key[16],
                      int registers, int spill_bytes, const fi_cuda_api *cu)
{
    fi_launch_shape shape;
    kind->launch_shape(spec, arch, &shape);
    memcpy(e->kernel.block_dim, shape.block_dim, sizeof shape.block_dim);
    memcpy(e->kernel.merge_block_dim, shape.merge_block_dim, sizeof shape.merge_block_dim);
    e->kernel.smem_bytes = shape.smem_bytes;
    e->kernel.param_bytes = shape.param_bytes;
    memcpy(e->kernel.key, key, sizeof e->kernel.key);
    snprintf(e->kernel.arch, sizeof e->kernel.arch, "%s", arch);
    return fi__load_object(e, object, key, kind, registers, spill_bytes, cu);
}

/* Fill `e`, the tuple's entry in this context, from its parts (`masks`),
 * each an entry of its own (spec.part = p + 1) that owns its module: loaded
 * here already, else from the object another context keeps, else obtained
 * (the missing parts side by side) and loaded. `e` owns no module: it takes
 * each function from the part that built it, the rest of its kernel (launch
 * shape, registers, key) from the part of the main function. */
static int parts_load(fi_jit_ctx *ctx, fi_table_entry *e, const fi_jit_spec *spec,
                      const fi_variant *variant, const char *arch, const unsigned *masks,
                      int n_parts, const fi_cuda_api *cu)
{
    int rc = 0, main_part = 0;
    unsigned todo = 0;
    fi_table_entry *loaded[FI_KIND_MAX_PARTS] = {NULL};
    const fi_kind_info *kind = fi__kind_info(spec->kind);
    part_build *builds = fi__calloc((size_t)n_parts, sizeof *builds);
    if (!builds) return fi__error(FI_ENOMEM, "out of memory");
    parts_init(builds, n_parts, ctx, spec, variant, arch, masks);
    for (int p = 0; p < n_parts; p++) {
        fi_spec_key key = e->spec;
        key.part = p + 1;
        loaded[p] = fi__table_find(&ctx->table, fi__table_hash(&key, e->device_id), &key,
                                   e->device_id);
        if (!loaded[p] && !fi__table_find_object(&ctx->table, &key, arch)) todo |= 1u << p;
    }
    FI_TRY(parts_obtain(builds, n_parts, todo));
    for (int p = 0; p < n_parts; p++) {
        if (loaded[p]) continue;
        fi_table_entry *part = fi__calloc(1, sizeof *part);
        if (!part) FI_FAIL(FI_ENOMEM, "out of memory");
        part->spec = e->spec;
        part->spec.part = p + 1;
        part->hash = fi__table_hash(&part->spec, e->device_id);
        part->device_id = e->device_id;
        part->device_ctx = e->device_ctx;
        const fi_table_entry *other = fi__table_find_object(&ctx->table, &part->spec, arch);
        const fi_build *b = &builds[p].b;
        if (other) { /* loaded in another context: the same object */
            count(ctx, C_MEMORY_HITS, 1);
            rc = load_entry(part, spec, kind, arch, other->object, other->kernel.key,
                            other->kernel.registers, other->kernel.spill_bytes, cu);
            part->object = other->object;
        } else {
            rc = load_entry(part, spec, kind, arch, b->object, b->key, b->meta.registers,
                            b->meta.spill_bytes, cu);
            part->object = b->object;
            part->owns_object = 1;
        }
        if (rc < 0) {
            fi__free(part);
            goto out;
        }
        if (!other) builds[p].b.object = NULL; /* the part's entry keeps it */
        fi__table_insert(&ctx->table, part);
        loaded[p] = part;
    }
    for (int p = 0; p < n_parts; p++)
        if (masks[p] & 1u) main_part = p;
    e->kernel = loaded[main_part]->kernel;
    for (int i = 0; i < fi__kind_entry_count(kind); i++)
        for (int p = 0; p < n_parts; p++)
            if (masks[p] >> i & 1u) e->kernel.functions[i] = loaded[p]->kernel.functions[i];
    e->kernel.function = e->kernel.functions[0];
out:
    parts_free(builds, n_parts);
    fi__free(builds);
    return rc;
}

/* The slow path of fi_jit_get_kernel: load the object another context of
 * this process already has, else build or read it; load, publish. Holds the
 * stripe of the spec alone, so that devices asking for one kernel at once
 * build it once and the others load that object. */
static int get_kernel_slow(fi_jit_ctx *ctx, const fi_jit_spec *spec, const fi_spec_key *key,
                           const fi_variant *variant, uint64_t hash, CUcontext device_ctx,
                           uint64_t device_id, const fi_cuda_api *cu, const fi_jit_kernel **out)
{
    int rc = 0, compiled = 0;
    fi_build b;
    fi_table_entry *e = NULL, *loaded;
    char arch[16];
    pthread_mutex_t *stripe = stripe_for(ctx, fi__table_hash(key, 0));
    memset(&b, 0, sizeof b);
    pthread_mutex_lock(stripe);
    /* Another thread may have finished this spec while we waited. */
    if ((e = fi__table_find(&ctx->table, hash, key, device_id))) {
        count(ctx, C_MEMORY_HITS, 1);
        *out = &e->kernel;
        e = NULL;
        goto out;
    }
    FI_TRY(fi__cuda_current_arch(arch, NULL, NULL));
    /* The context's arch where this device runs it (e.g. sm_90 on an sm_90a
     * device: the portable kernels), else the device's own. */
    if (ctx->arch[0] && fi__arch_runs_on(ctx->arch, arch))
        snprintf(arch, sizeof arch, "%s", ctx->arch);
    if (!(e = fi__calloc(1, sizeof *e))) FI_FAIL(FI_ENOMEM, "out of memory");
    e->hash = hash;
    e->spec = *key;
    e->device_id = device_id;
    e->device_ctx = device_ctx;
    unsigned masks[FI_KIND_MAX_PARTS];
    const int parts = spec_parts(spec, arch, masks);
    if (parts > 1) {
        FI_TRY(parts_load(ctx, e, spec, variant, arch, masks, parts, cu));
    } else if ((loaded = fi__table_find_object(&ctx->table, key, arch))) {
        /* Loaded in another context (a second device): the same object. */
        count(ctx, C_MEMORY_HITS, 1);
        FI_TRY(load_entry(e, spec, fi__kind_info(spec->kind), arch, loaded->object,
                          loaded->kernel.key, loaded->kernel.registers,
                          loaded->kernel.spill_bytes, cu));
        e->object = loaded->object;
    } else {
        FI_TRY(build_prepare(&b, ctx, spec, variant, arch, 0, NULL, NULL));
        FI_TRY(build_obtain(ctx, &b, &compiled, NULL));
        FI_TRY(load_entry(e, spec, b.kind, arch, b.object, b.key, b.meta.registers,
                          b.meta.spill_bytes, cu));
        e->object = b.object; /* kept for the next context that asks */
        e->owns_object = 1;
        b.object = NULL;
    }
    fi__table_insert(&ctx->table, e);
    *out = &e->kernel;
    e = NULL;
out:
    pthread_mutex_unlock(stripe);
    fi__free(e);
    build_free(&b);
    return rc;
}

int fi_jit_get_kernel(const fi_jit_kernel **out, fi_jit_ctx *ctx, const fi_jit_spec *spec)
{
    int rc;
    fi_spec_key key;
    const fi_cuda_api *cu;
    CUcontext device_ctx = NULL;
    uint64_t device_id = 0;
    if (!ctx || !out) return fi__error(FI_EINVALID, "fi_jit_get_kernel: NULL argument");
    const fi_variant *variant = NULL;
    if ((rc = fi__spec_key(&key, spec)) < 0 || (rc = variant_resolve(ctx, &key, &variant)) < 0)
        return rc;
    if ((rc = fi__cuda_load(&cu)) < 0 || (rc = fi__cuda_current_context(&device_ctx, &device_id)) < 0)
        return rc;
    uint64_t hash = fi__table_hash(&key, device_id);
    fi_table_entry *e = fi__table_find(&ctx->table, hash, &key, device_id);
    if (e) {
        count(ctx, C_MEMORY_HITS, 1);
        *out = &e->kernel;
        return 0;
    }
    fi_jit_spec full;
    fi__spec_copy(&full, spec); /* a version 1 caller's spec, read as far as it reaches */
    return get_kernel_slow(ctx, &full, &key, variant, hash, device_ctx, device_id, cu, out);
}

/* Bytes of fi_jit_stats a caller of each version has (index: version). */
static const size_t stats_size[FI_JIT_STATS_VERSION + 1] = {
    0, offsetof(fi_jit_stats, remote_hits), sizeof(fi_jit_stats)};

static int stats_get(fi_jit_ctx *ctx, fi_jit_stats *out)
{
    if (!ctx->store) {
        sum_counts(ctx, out, 0);
        return 0;
    }
    if (!fi_store_read_only(ctx->store)) {
        flush_counts(ctx);
        return fi_store_stats_get(ctx->store, out);
    }
    /* A read-only cache's counters plus this process's, which it cannot store. */
    fi_jit_stats mine;
    int rc = fi_store_stats_get(ctx->store, out);
    if (rc < 0) return rc;
    sum_counts(ctx, &mine, 0);
#define FI_COUNTER_ADD_(name, unit, label) out->name += mine.name;
    FI_JIT_STATS_COUNTERS(FI_COUNTER_ADD_)
#undef FI_COUNTER_ADD_
    return 0;
}

int fi_jit_stats_get(fi_jit_stats *out, fi_jit_ctx *ctx)
{
    fi_jit_stats all;
    if (!ctx || !out) return fi__error(FI_EINVALID, "fi_jit_stats_get: NULL argument");
    const unsigned version = out->version;
    if (version < 1 || version > FI_JIT_STATS_VERSION)
        return fi__error(FI_EINVALID, "fi_jit_stats_get: out->version is %u, this library "
                         "expects 1 to %d (initialise with FI_JIT_STATS_INIT)", version,
                         FI_JIT_STATS_VERSION);
    memset(&all, 0, sizeof all);
    int rc = stats_get(ctx, &all);
    if (rc < 0) return rc;
    all.version = version;
    memcpy(out, &all, stats_size[version]); /* only what the caller's version has */
    return 0;
}
