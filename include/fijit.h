/*
 * fijit — runtime JIT generator and cache for LLM attention kernels.
 *
 * A host program describes the kernel it needs with an fi_jit_spec and calls
 * fi_jit_get_kernel(). fijit expands the CUDA C++ templates for that tuple,
 * compiles them with NVRTC, keeps the cubin in an SQLite-indexed on-disk cache
 * and loads it into the calling thread's current CUDA context.
 *
 * Conventions
 *  - Every function returns 0 (FI_OK) on success and a negative fi_error code
 *    on failure; fi_last_error() then returns a message for this thread.
 *  - Out-parameters come first and are named `out` (`out_<what>` where a
 *    function has more than one); then the context or plan, then the inputs.
 *    Every workspace-size query has one shape:
 *      fi_<kind>_workspace_size(size_t *out, const fi_jit_spec *spec, const <args> *args)
 *  - Objects returned through `**out` belong to the caller and are released
 *    with the matching _free function, which accepts NULL.
 *  - Pointers returned inside other objects (fi_jit_kernel) are borrowed and
 *    live as long as the fi_jit_ctx they came from.
 *  - Options and argument structs begin with `unsigned version`; initialise
 *    them with the matching *_INIT macro (FI__INIT below: C and C++ alike),
 *    which gives safe defaults (page_size = 16; window_left = -1, which
 *    means "not set": a spec with mask=window refuses it, so give
 *    window_left >= 0 there) and 0 / NULL elsewhere. Fields are only appended: a library accepts the
 *    versions its header lists as still accepted (0.2 changed the layout of
 *    fi_batch_decode_args and fi_batch_prefill_args: their old versions are
 *    refused with a message).
 *  - Both batch kinds have one plan lifecycle:
 *      fi_batch_<kind>_workspace_size(&bytes, &spec, &plan_args)   (or _plan_workspace_size)
 *      fi_batch_<kind>_plan_new(&plan, ctx, &spec, &plan_args)     gets the kernel (compiles or
 *                                                                  loads it: needs a current
 *                                                                  CUDA context), outside any
 *                                                                  CUDA-graph capture
 *      fi_batch_<kind>_plan_upload(plan, workspace, bytes)         once, synchronous
 *      fi_batch_<kind>_run(ctx, plan, &args, stream)               any number of times, one
 *                                                                  launch each: capturable
 *      fi_batch_<kind>_plan_free(plan)
 *    Everything fixed for a batch layout (lengths, head counts, page size,
 *    window_left) is given to the plan; tensors and per-run scalars to the run.
 *
 * Semantics shared by every kernel kind, for query i and key j:
 *   s    = (q_i . k_j) * sm_scale                 after RoPE on q_i and k_j
 *        + slope[h] * (pos(j) - pos(i))           FI_POS_ALIBI (the bias is part of the logit)
 *   s    = logits_soft_cap * tanh(s / logits_soft_cap)   spec.soft_cap
 * so the cap bounds the final logit, |s| <= logits_soft_cap, ALiBi included.
 * This differs from FlashInfer, which computes cap * tanh(s / cap + bias) and
 * so does not bound the logit. sm_scale 0 means 1/sqrt(head_dim).
 */
#ifndef FIJIT_H
#define FIJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FIJIT_BUILDING) && defined(__GNUC__)
#define FI_API __attribute__((visibility("default")))
#else
#define FI_API
#endif

/* The *_INIT macros: FI__INIT(type, FI__SET(field, value) ...) names only the
 * fields whose default is not 0 / NULL. In C it is a designated initializer
 * (every other field 0); C++ before C++20 has none, so there it is a
 * value-initialised (all-zero) struct with those fields set. Either way
 * `type x = FI_..._INIT;` compiles under -Wall -Wextra -pedantic. */
#ifndef __cplusplus
#define FI__SET(field, value) .field = (value),
#define FI__INIT(type, sets) { sets }
#else
#define FI__SET(field, value) fi__v.field = (value);
#define FI__INIT(type, sets) ([]() { type fi__v = type(); sets return fi__v; }())
#endif

#define FIJIT_VERSION_MAJOR 0
#define FIJIT_VERSION_MINOR 3
#define FIJIT_VERSION_PATCH 0
#define FIJIT_VERSION_NUMBER \
    (FIJIT_VERSION_MAJOR * 10000 + FIJIT_VERSION_MINOR * 100 + FIJIT_VERSION_PATCH)

/* Version of the linked library, as FIJIT_VERSION_NUMBER; compare with the header's. */
FI_API int fi_version_number(void);
FI_API const char *fi_version_string(void);

/* Error codes. Values are pinned: they never change between releases. */
typedef enum fi_error {
    FI_OK = 0,
    FI_EINVALID = -1,     /* an argument or spec field is invalid */
    FI_ENOTFOUND = -2,    /* no such entry, variant or file */
    FI_ECOMPILE = -3,     /* NVRTC rejected the generated source */
    FI_ELOAD = -4,        /* the driver could not load the module or function */
    FI_EIO = -5,          /* a file or database operation failed */
    FI_ENOMEM = -6,       /* an allocation failed */
    FI_EUNSUPPORTED = -7, /* the tuple is valid but not implemented, or a feature's
                             library (hiredis, libsodium) is missing */
    FI_ENODEVICE = -8,    /* no CUDA driver, device or current context */
    FI_ECORRUPT = -9,     /* a cache object or the index failed its checks */
    FI_ECUDA = -10,       /* a CUDA driver call failed at launch */
    FI_EPERM = -11        /* the cache directory is not safe to use */
} fi_error;

/* Message of the last failed fijit call on this thread ("" before the first
 * failure). A successful call does not clear it (as libgit2's
 * git_error_last), so read it only after a call returned an error. Valid
 * until the next fijit call on this thread. */
FI_API const char *fi_last_error(void);
/* Short, static name of an error code ("FI_EINVALID"). */
FI_API const char *fi_error_name(int code);

/* ---- Spec ----------------------------------------------------------------
 * Enum values are stable and also used in the cache index; only append. */
typedef enum fi_kernel_kind {
    FI_KIND_DECODE = 1,            /* single-request decode (one query token): fi_decode_run */
    FI_KIND_BATCH_DECODE = 2,      /* paged batch decode: fijit_batch_decode.h */
    FI_KIND_PREFILL = 3,           /* single-request prefill: fijit_prefill.h */
    FI_KIND_BATCH_PREFILL_RAGGED = 4, /* batch prefill over ragged K/V: fijit_prefill.h */
    FI_KIND_BATCH_PREFILL_PAGED = 5,  /* batch prefill over a paged K/V cache: fijit_prefill.h */
    FI_KIND_MLA_DECODE = 6,        /* absorbed MLA decode over a paged latent cache: fijit_mla.h */
} fi_kernel_kind;

typedef enum fi_dtype {
    FI_DTYPE_FP16 = 1,
    FI_DTYPE_BF16 = 2,
    FI_DTYPE_FP8_E4M3 = 3, /* kv_dtype of the decode kinds, or q and kv of single prefill on
                              sm_90a (fijit_prefill.h); with per-tensor scales */
    FI_DTYPE_FP8_E5M2 = 4, /* kv_dtype of the decode kinds only, with per-tensor scales */
} fi_dtype;

typedef enum fi_mask {
    FI_MASK_NONE = 0,
    FI_MASK_CAUSAL = 1, /* prefill kinds; aligned bottom-right when qo_len < kv_len */
    FI_MASK_WINDOW = 2, /* sliding window: keys with index >= last - window_left */
    FI_MASK_CUSTOM = 3, /* prefill kinds: one bit per (query, key), see fijit_prefill.h */
} fi_mask;

typedef enum fi_pos_encoding {
    FI_POS_NONE = 0,
    FI_POS_ROPE_LLAMA = 1, /* rotary, applied to q and k on the fly */
    FI_POS_ALIBI = 2,      /* per-head linear bias, slopes passed at launch */
} fi_pos_encoding;

#define FI_JIT_SPEC_VERSION 2 /* 2 added head_dim_vo; 1 is still accepted */

typedef struct fi_jit_spec {
    unsigned version;            /* FI_JIT_SPEC_VERSION */
    fi_kernel_kind kind;
    fi_dtype q_dtype;
    fi_dtype kv_dtype;
    fi_dtype o_dtype;
    int head_dim;                /* 64, 128 or 256 */
    fi_mask mask;
    fi_pos_encoding pos;
    int soft_cap;                /* 1: logits = cap * tanh(logits / cap), with the cap
                                    given at launch as logits_soft_cap (a float) */
    const char *variant;         /* NULL or "default": built-in behaviour */
    /* Version 2: head dim of v and o when it differs from the q/k head_dim
     * (0: equal). The prefill kinds take 128 with head_dim 192, the
     * non-absorbed attention of MLA models (DeepSeek-V3/R1, Kimi K2):
     * fijit_prefill.h lists the tuples. Spec text "hd_vo=128". */
    int head_dim_vo;
} fi_jit_spec;

#define FI_JIT_SPEC_INIT                                                       \
    FI__INIT(fi_jit_spec, FI__SET(version, FI_JIT_SPEC_VERSION)               \
             FI__SET(kind, FI_KIND_DECODE) FI__SET(q_dtype, FI_DTYPE_FP16)     \
             FI__SET(kv_dtype, FI_DTYPE_FP16) FI__SET(o_dtype, FI_DTYPE_FP16)  \
             FI__SET(head_dim, 128))

/* The *_INIT defaults from the library, for bindings that cannot use the
 * macros: fi_<struct>_init(&s, FI_<STRUCT>_VERSION) sets `version` and the
 * defaults of that version's fields and zeroes the rest of them, writing
 * only the bytes a struct of that version has. FI_EINVALID, with a
 * message, for a version this library does not accept. */
FI_API int fi_jit_spec_init(fi_jit_spec *out, unsigned version);

/* Parse a canonical spec string such as
 *   "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0"
 * Fields after the kind may come in any order; kv and o default to q, the rest
 * to the values in FI_JIT_SPEC_INIT. A variant's name is written to
 * `out_variant` (out_variant_size at least FI_VARIANT_NAME_MAX + 1) and
 * `out->variant` points there. Parsing checks the grammar only:
 * fi_jit_spec_check says whether fijit builds the tuple. */
FI_API int fi_jit_spec_parse(fi_jit_spec *out, char *out_variant, size_t out_variant_size,
                             const char *text);
/* Write the canonical form of `spec` into `out` (NUL-terminated). Returns the
 * length, or a negative code if the spec is invalid or `out` is too small. */
FI_API int fi_jit_spec_format(char *out, size_t out_size, const fi_jit_spec *spec);
/* Check that fijit can build this tuple; the message names the field. */
FI_API int fi_jit_spec_check(const fi_jit_spec *spec);
/* The tuples fijit builds: writes the first `out_count` specs that
 * fi_jit_spec_check accepts for `kind` (0: every kind) into `out`, in a fixed
 * order, and returns how many there are in all (call with out_count 0 to size
 * the array). Each accepts a custom variant too; arch limits (fp8 prefill is
 * sm_90a only: fi_jit_prewarm says so) are not applied here. */
FI_API int fi_jit_spec_enumerate(fi_jit_spec *out, size_t out_count, int kind);

/* ---- Context --------------------------------------------------------------- */
typedef struct fi_jit_ctx fi_jit_ctx;

typedef enum fi_log_level {
    FI_LOG_OFF = 0, FI_LOG_ERROR = 1, FI_LOG_WARN = 2, FI_LOG_INFO = 3, FI_LOG_DEBUG = 4
} fi_log_level;

/* Receives each message fijit logs at or above the log level: its level and
 * its text (one line or more, no trailing newline, valid during the call).
 * Called from whichever thread logs, so it must be thread-safe; it must not
 * call back into fijit. */
typedef void (*fi_log_fn)(void *user, fi_log_level level, const char *message);

/* Route fijit's messages to `fn` (with `user`), process-wide; NULL restores
 * the default, stderr ("fijit warning: ..."). fi_jit_options.log_fn does the
 * same when a context is created. */
FI_API void fi_log_set_callback(fi_log_fn fn, void *user);

#define FI_JIT_OPTIONS_VERSION 3 /* 2 added remote, remote_secret; 3 log_fn, log_user;
                                    1 and 2 are still accepted */

typedef struct fi_jit_options {
    unsigned version;        /* FI_JIT_OPTIONS_VERSION */
    const char *cache_dir;   /* NULL: $FIJIT_CACHE_DIR, $XDG_CACHE_HOME/fijit, ~/.cache/fijit */
    const char *arch;        /* NULL: from the device; "sm_90a", "sm_80", ...: what prewarm
                                builds, and what fi_jit_get_kernel builds where the device
                                runs it (same major, minor <=; "a" only on its own device) */
    int jit;                 /* 1: compile on miss; 0: serve only what the cache holds */
    int use_disk_cache;      /* 1: read and write the on-disk cache; 0: memory only */
    fi_log_level log_level;  /* messages go to stderr (or log_fn) at or above this level;
                                FIJIT_LOG and fijit.conf's log_level override it */
    int64_t max_cache_bytes; /* 0: $FIJIT_MAX_CACHE_SIZE, else fijit.conf's max_size, else
                                5 GiB (FI_DEFAULT_MAX_CACHE_BYTES); < 0: no limit. In the
                                environment and the file, 0 means no limit */
    int allow_unsafe_dir;    /* 1: accept a cache dir writable by group/others */
    /* Version 2: a remote tier shared by a fleet, behind the disk cache (NULL:
     * $FIJIT_REMOTE, else none): redis://[[user]:password@]host[:port][/db]
     * or unix://[[user]:password@]/path/to/redis.sock (the password ends at
     * the last '@'; '%' as %25), with options after '?' joined by '&':
     * readonly (never write), prefix=NAME (keys PREFIX:obj:<key>; default
     * fijit), ttl=SECONDS, connect_timeout=MS (50), timeout=MS (500),
     * backoff=MS (1000), lease=MS (3000), wait=MS (120000), db=N. What it
     * returns is verified before it is stored or loaded; a sick remote costs
     * its timeouts, then is skipped for its back-off. Needs use_disk_cache.
     * hiredis is opened when a remote is first given: without it (Debian:
     * libhiredis0.14) fi_jit_ctx_new fails with FI_EUNSUPPORTED.
     * Also http[s]://[user:password@]host[:port][/path] (an HTTP object store,
     * entries at PATH/PREFIX/<key>; options readonly, prefix, connect_timeout
     * (300), timeout (2000), backoff, cafile=/path; libcurl opened then; a
     * bearer token from $FIJIT_REMOTE_TOKEN), and a list of URLs separated by
     * spaces, asked in that order (docs/fleet-http.md). */
    const char *remote;
    /* Version 2: the fleet secret (NULL: $FIJIT_REMOTE_SECRET, else none), at
     * least 16 characters: entries pushed to the remote carry a keyed MAC
     * (BLAKE2b) over key and bytes, and only entries with a valid MAC are
     * taken from it. Needs libsodium (libsodium.so.23, opened then; without
     * it fi_jit_ctx_new fails with FI_EUNSUPPORTED). */
    const char *remote_secret;
    /* Version 3: where messages go (NULL: stderr), as fi_log_set_callback:
     * process-wide, set when the context is created. */
    fi_log_fn log_fn;
    void *log_user;
} fi_jit_options;

#define FI_JIT_OPTIONS_INIT                                                    \
    FI__INIT(fi_jit_options, FI__SET(version, FI_JIT_OPTIONS_VERSION)         \
             FI__SET(jit, 1) FI__SET(use_disk_cache, 1)                       \
             FI__SET(log_level, FI_LOG_WARN))

/* FI_JIT_OPTIONS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_jit_options_init(fi_jit_options *out, unsigned version);

/* Create a context. `opts` may be NULL for defaults. Environment variables
 * (FIJIT_CACHE_DIR, FIJIT_ARCH, FIJIT_JIT, FIJIT_LOG, FIJIT_MAX_CACHE_SIZE,
 * FIJIT_REMOTE, FIJIT_REMOTE_SECRET, FIJIT_UMASK, FIJIT_LOCK_TIMEOUT_MS) and
 * the cache's configuration file <cache dir>/fijit.conf fill fields the
 * options leave unset (docs/configuration.md); a bad value in either is
 * FI_EINVALID naming the variable, or the file and line.
 * No GPU is needed; an unreachable remote is not an error (FI_EINVALID for
 * a bad remote URL or a short secret). */
FI_API int fi_jit_ctx_new(fi_jit_ctx **out, const fi_jit_options *opts);
/* Frees the context. A kernel loaded as a library (one per process, where
 * the driver has context-independent loading; FIJIT_LOAD) is unloaded from
 * every CUDA context once no other fi_jit_ctx of the process holds it. A
 * module (one per CUDA context: FIJIT_LOAD=module, drivers before CUDA 12)
 * is unloaded in a CUDA context that is certainly live: the current one and
 * the devices' active primary contexts (when the module's context is the
 * one that handle names now). Modules in other contexts (one made with
 * cuCtxCreate and not current) are left to that context and go when it is
 * destroyed: a destroyed context's handle may dangle, and fijit never hands
 * one to the driver. Accepts NULL. */
FI_API void fi_jit_ctx_free(fi_jit_ctx *ctx);
/* The cache directory in use (borrowed); "" for a memory-only context when
 * none is configured (no FIJIT_CACHE_DIR, XDG_CACHE_HOME or HOME). */
FI_API const char *fi_jit_ctx_cache_dir(const fi_jit_ctx *ctx);

/* ---- Kernels --------------------------------------------------------------- */
struct CUfunc_st; /* CUfunction from cuda.h is `struct CUfunc_st *` */

#define FI_JIT_MAX_FUNCTIONS 6

typedef struct fi_jit_kernel {
    struct CUfunc_st *function;       /* main kernel (borrowed) = functions[0] */
    /* Every kernel of the module in the kind's order (e.g. one per tile
     * shape), NULL-padded; the launch functions pick among them. */
    struct CUfunc_st *functions[FI_JIT_MAX_FUNCTIONS];
    unsigned block_dim[3];            /* launch shape of `function` */
    unsigned merge_block_dim[3];      /* launch shape of the merge kernel (functions[1]) of
                                         the kinds that have one (batch decode); else 0 */
    unsigned smem_bytes;              /* dynamic shared memory of `function` */
    unsigned param_bytes;             /* sizeof the kernel's single parameter struct */
    int registers;                    /* per thread, from the compiled object */
    int spill_bytes;                  /* local memory per thread */
    uint8_t key[16];                  /* cache key (XXH3-128) */
    char arch[16];                    /* "sm_90a" */
} fi_jit_kernel;

/* Get the kernel for `spec`, compiled for the device of the current CUDA
 * context, loaded into that context. `*out` is borrowed from ctx. The first
 * call for a spec in a context may compile or read the disk cache; later calls
 * are a lookup in memory. Thread-safe. */
FI_API int fi_jit_get_kernel(const fi_jit_kernel **out, fi_jit_ctx *ctx,
                             const fi_jit_spec *spec);

/* Result of compiling without loading (prewarm, build hosts with no GPU). */
typedef enum fi_build_outcome {
    FI_BUILD_COMPILED = 0, /* compiled now and stored */
    FI_BUILD_CACHED = 1,   /* already in the cache, nothing done */
} fi_build_outcome;

/* Make sure the cache holds `spec` for `arch` (NULL: the context's arch).
 * `out` (may be NULL) says what happened. Needs no GPU. Returns FI_EIO when
 * the kernel compiled but could not be stored (full disk, read-only cache, a
 * disk cache that could not be opened): prewarm's job is to store, so 0
 * means the disk cache holds the entry. A memory-only context
 * (use_disk_cache 0) compiles and returns FI_BUILD_COMPILED. */
FI_API int fi_jit_prewarm(fi_build_outcome *out, fi_jit_ctx *ctx, const fi_jit_spec *spec,
                          const char *arch);

/* Print what the key for `spec` on `arch` is made of: every tagged field and
 * the hash of every source text, then the key. `write` receives text chunks. */
FI_API int fi_jit_explain(fi_jit_ctx *ctx, const fi_jit_spec *spec, const char *arch,
                          void (*write)(void *user, const char *text), void *user);

/* ---- Custom variants -------------------------------------------------------
 * A variant is a CUDA C++ snippet that defines
 *     struct Variant : fijit::DefaultVariant { ...hooks it overrides... };
 * (see templates/common/variant.cuh for the hooks and their contracts). It may
 * declare extra launch parameters, one per line, as
 *     //! param float sigmoid_scale
 *     //! param const float* sink_logits
 * Name a registered variant in spec.variant; its text is part of the cache
 * key, so editing it recompiles. A snippet is self-contained: #include and
 * every other way of reaching a file (#include_next, #embed, __has_include,
 * token pasting that could spell it, _Pragma, #pragma other than
 * unroll/nounroll/nv_diag_*) is refused at
 * registration (FI_ECOMPILE), as is a snippet that defines no Variant.
 * Errors are reported with the snippet's own line numbers and file name: the
 * path given to fi_jit_variant_register_file, else "<name>.cuh". */
#define FI_VARIANT_REPLACE 1u /* replace a variant registered under the same name */

/* Longest variant name, and largest snippet, fi_jit_variant_register takes. */
#define FI_VARIANT_NAME_MAX 63
#define FI_VARIANT_MAX_SOURCE (256 * 1024)

/* FI_EINVALID unless `name` is 1..FI_VARIANT_NAME_MAX of [A-Za-z0-9_-]. */
FI_API int fi_jit_variant_name_check(const char *name);

/* Register `source` under `name` (1..FI_VARIANT_NAME_MAX of [A-Za-z0-9_-],
 * not "default").
 * Registering a name again with the same text is a no-op; with different
 * text it is FI_EINVALID unless FI_VARIANT_REPLACE is given. */
FI_API int fi_jit_variant_register(fi_jit_ctx *ctx, const char *name, const char *source,
                                   unsigned flags);
/* The same from a file; `name` NULL: the file name up to its first '.'. */
FI_API int fi_jit_variant_register_file(fi_jit_ctx *ctx, const char *name, const char *path,
                                        unsigned flags);
/* fi_jit_variant_register with messages naming `origin` (a file as the user
 * gave it; NULL: "<name>.cuh"), for a caller that reads the file itself. */
FI_API int fi_jit_variant_register_as(fi_jit_ctx *ctx, const char *name, const char *source,
                                      unsigned flags, const char *origin);

/* Values for a variant's declared parameters, passed to a launch. Give every
 * declared parameter exactly once, by name, with the type it was declared
 * with (FI_VARG_PTR for any pointer type); fijit packs them into the layout
 * it computed and refuses a launch whose arguments do not match. */
typedef enum fi_variant_arg_type {
    FI_VARG_FLOAT = 1,
    FI_VARG_INT = 2,
    FI_VARG_PTR = 3, /* a device pointer */
} fi_variant_arg_type;

typedef struct fi_variant_arg {
    const char *name;
    fi_variant_arg_type type;
    union {
        float f;
        int i;
        const void *ptr;
    } value;
} fi_variant_arg;

/* ---- Statistics ------------------------------------------------------------
 * The one list of the statistics, in storage order: X(name, unit, label),
 * unit one of COUNT, NS (nanoseconds) or BYTES, label a few words for
 * people. The struct, the library's counting and the CLI's printing are
 * generated from it. Statistics are only appended, each addition bumping
 * FI_JIT_STATS_VERSION. entries and bytes are the cache's content now; the
 * others count events since the statistics were last zeroed. */
#define FI_JIT_STATS_COUNTERS(X)                                               \
    X(memory_hits, COUNT, "memory hits")                                       \
    X(disk_hits, COUNT, "disk hits")                                           \
    X(misses, COUNT, "misses")                                                 \
    X(compiles, COUNT, "compiles")                                             \
    X(compile_failures, COUNT, "compile failures")                             \
    X(compile_ns, NS, "compile time")                                          \
    X(bytes_written, BYTES, "bytes written")                                   \
    X(corrupt, COUNT, "corrupt objects")                                       \
    X(entries, COUNT, "entries")                                               \
    X(bytes, BYTES, "cache size")                                              \
    /* Version 2: the remote tier (fi_jit_options.remote). */                  \
    X(remote_hits, COUNT, "remote hits")                                       \
    X(remote_misses, COUNT, "remote misses")                                   \
    X(remote_errors, COUNT, "remote errors")                                   \
    X(remote_corrupt, COUNT, "remote corrupt")                                 \
    X(remote_bytes_in, BYTES, "remote bytes in")                               \
    X(remote_bytes_out, BYTES, "remote bytes out")

#define FI_JIT_STATS_VERSION 2 /* 2 added the remote_* counters; 1 is still accepted */

typedef struct fi_jit_stats {
    unsigned version; /* FI_JIT_STATS_VERSION: the counters the caller has room for */
#define FI_JIT_STATS_FIELD_(name, unit, label) int64_t name;
    FI_JIT_STATS_COUNTERS(FI_JIT_STATS_FIELD_)
#undef FI_JIT_STATS_FIELD_
} fi_jit_stats;

#define FI_JIT_STATS_INIT FI__INIT(fi_jit_stats, FI__SET(version, FI_JIT_STATS_VERSION))

/* FI_JIT_STATS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_jit_stats_init(fi_jit_stats *out, unsigned version);

/* Statistics persisted in the cache index (all processes), plus this
 * context's not yet flushed counts. out->version (1 to FI_JIT_STATS_VERSION,
 * set by FI_JIT_STATS_INIT) says which counters the caller's struct holds;
 * only those are written, so a caller built against an older header keeps
 * working when counters are added. */
FI_API int fi_jit_stats_get(fi_jit_stats *out, fi_jit_ctx *ctx);

/* ---- Decode launch --------------------------------------------------------- */
struct CUstream_st; /* CUstream from cuda.h */

#define FI_DECODE_ARGS_VERSION 4 /* 2 added k_scale, v_scale; 3 variant_args; 4 sm_count;
                                    1 to 3 are still accepted */

/* Single-request decode: one query token (per head) against kv_len keys.
 * Semantics as at the top of this file, with the query at position
 * rope_offset + kv_len - 1 and key j at rope_offset + j: rope_offset shifts
 * q and k together (the absolute RoPE angles; scores depend on positions only
 * through pos(j) - pos(i), up to rounding) and ALiBi's bias, slope *
 * (j - (kv_len - 1)), not at all.
 * kv_len = 0 is valid: o = 0 and lse = -inf, k and v are not read.
 * FI_MASK_WINDOW sees keys j >= kv_len - 1 - window_left (window_left >= 0
 * required). Element strides (not bytes). For k and v the layout
 * is given by strides: NHD [kv_len, kv_heads, hd] has stride_n = kv_heads*hd,
 * stride_h = hd; HND [kv_heads, kv_len, hd] has stride_n = hd,
 * stride_h = kv_len*hd. The last dimension must be contiguous and 16-byte
 * aligned; k and v stride_n in bytes stay below 2 GiB. With split-KV the
 * workspace needs no initialisation; one workspace must not serve two
 * launches that may run at the same time. */
typedef struct fi_decode_args {
    unsigned version;              /* FI_DECODE_ARGS_VERSION */
    const void *q;                 /* [num_qo_heads, hd], q_dtype */
    const void *k, *v;             /* kv_dtype */
    void *o;                       /* [num_qo_heads, hd], o_dtype */
    float *lse;                    /* optional [num_qo_heads]: natural log of the softmax denominator; NULL: none */
    int num_qo_heads, num_kv_heads, kv_len;
    int64_t q_stride_h, o_stride_h;
    int64_t k_stride_n, k_stride_h, v_stride_n, v_stride_h;
    float sm_scale;                /* 0: 1/sqrt(hd) */
    float logits_soft_cap;         /* > 0, used when spec.soft_cap */
    float rope_scale, rope_theta;  /* used with FI_POS_ROPE_LLAMA; 0: 1 and 1e4 */
    int rope_offset;               /* position of key 0 (query is at offset + kv_len - 1) */
    int window_left;               /* FI_MASK_WINDOW: >= 0 (-1, the default: no window) */
    const float *alibi_slopes;     /* [num_qo_heads], with FI_POS_ALIBI */
    void *workspace;               /* device memory, fi_decode_workspace_size() bytes */
    size_t workspace_bytes;
    int max_splits;                /* chunks of the keys: 0 automatic (from the SM count),
                                      1 no split, N: N chunks of whole tiles (fewer if short) */
    /* Version 2: fp8 KV (kv=fp8_e4m3/fp8_e5m2) holds k / k_scale and v / v_scale;
     * the kernel multiplies them back. 0: 1. Ignored for 16-bit KV. */
    float k_scale, v_scale;
    /* Version 3: values of the variant's declared parameters (none: NULL, 0). */
    const fi_variant_arg *variant_args;
    int num_variant_args;
    /* Version 4: SM count the automatic split plan (max_splits 0) and the
     * ring depth assume; 0: from the device of the current context. Give it
     * to size a workspace without a device; then give the run the same. */
    int sm_count;
} fi_decode_args;

#define FI_DECODE_ARGS_INIT                                                    \
    FI__INIT(fi_decode_args, FI__SET(version, FI_DECODE_ARGS_VERSION)         \
             FI__SET(window_left, -1))

/* FI_DECODE_ARGS_INIT from the library (for bindings); see fi_jit_spec_init. */
FI_API int fi_decode_args_init(fi_decode_args *out, unsigned version);

/* Device workspace bytes needed for a launch with these shapes (0: none).
 * Needs a device only when max_splits and sm_count are both 0. */
FI_API int fi_decode_workspace_size(size_t *out, const fi_jit_spec *spec,
                                    const fi_decode_args *args);
/* Validate, get the kernel (through the cache) and launch on `stream`. */
FI_API int fi_decode_run(fi_jit_ctx *ctx, const fi_jit_spec *spec, const fi_decode_args *args,
                         struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

/* The other kernel families, each with its own header. */
#include "fijit_batch_decode.h"
#include "fijit_prefill.h"
#include "fijit_mla.h"

#endif /* FIJIT_H */
