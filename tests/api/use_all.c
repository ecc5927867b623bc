/*
 * A host program of the public API: it calls every public function and
 * initialises every public struct with its *_INIT macro (where it has one).
 * `make test-api` compiles it as C11 and as C++17, each under -Wall -Wextra
 * -Werror -pedantic, links it against build/libfijit.so and runs it, which
 * needs no GPU: the calls that would launch or load are made with arguments
 * that fail before the device, and those error paths are checked.
 *
 * A public function or struct added to the headers belongs here too.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fijit.h"
#include "fijit_cache.h" /* fi_settings_init */

static int failures;

#define EXPECT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "use_all.c:%d: %s failed (last error: %s)\n",      \
                    __LINE__, #cond, fi_last_error());                         \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static void collect(void *user, const char *text)
{
    size_t *n = (size_t *)user;
    *n += strlen(text);
}

static void count_log(void *user, fi_log_level level, const char *message)
{
    (void)level;
    *(size_t *)user += strlen(message);
}

/* Every *_INIT at file scope too (static initialisation in C). */
static fi_jit_spec g_spec = FI_JIT_SPEC_INIT;

/* fi_<struct>_init(&x, FI_<STRUCT>_VERSION) gives what FI_<STRUCT>_INIT does,
 * every byte of it in C (static objects: padding is zero on both sides); an
 * unknown version is refused and leaves the struct alone. */
#ifdef __cplusplus
#define SAME_BYTES(a, b) ((a).version == (b).version) /* C++ copies need not keep padding */
#else
#define SAME_BYTES(a, b) (memcmp(&(a), &(b), sizeof(a)) == 0)
#endif
#define CHECK_INIT(type, init_macro, version_macro)                            \
    do {                                                                       \
        static type from_macro = init_macro, from_library, untouched;         \
        memset(&from_library, 0x5a, sizeof from_library);                     \
        EXPECT(type##_init(&from_library, version_macro) == 0 &&              \
               SAME_BYTES(from_macro, from_library));                         \
        memset(&untouched, 0x5a, sizeof untouched);                           \
        from_library = untouched;                                              \
        EXPECT(type##_init(&from_library, (version_macro) + 1) == FI_EINVALID && \
               strstr(fi_last_error(), #type) != NULL &&                      \
               memcmp(&from_library, &untouched, sizeof untouched) == 0);     \
        EXPECT(type##_init(&from_library, 0) == FI_EINVALID);                  \
        EXPECT(type##_init(NULL, version_macro) == FI_EINVALID);               \
    } while (0)

static void check_struct_inits(void)
{
    CHECK_INIT(fi_jit_spec, FI_JIT_SPEC_INIT, FI_JIT_SPEC_VERSION);
    CHECK_INIT(fi_jit_options, FI_JIT_OPTIONS_INIT, FI_JIT_OPTIONS_VERSION);
    CHECK_INIT(fi_settings, FI_SETTINGS_INIT, FI_SETTINGS_VERSION);
    CHECK_INIT(fi_batch_mla_decode_plan_args, FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT,
               FI_BATCH_MLA_DECODE_PLAN_ARGS_VERSION);
    CHECK_INIT(fi_batch_mla_decode_args, FI_BATCH_MLA_DECODE_ARGS_INIT,
               FI_BATCH_MLA_DECODE_ARGS_VERSION);
    CHECK_INIT(fi_jit_stats, FI_JIT_STATS_INIT, FI_JIT_STATS_VERSION);
    CHECK_INIT(fi_decode_args, FI_DECODE_ARGS_INIT, FI_DECODE_ARGS_VERSION);
    CHECK_INIT(fi_batch_decode_plan_args, FI_BATCH_DECODE_PLAN_ARGS_INIT,
               FI_BATCH_DECODE_PLAN_ARGS_VERSION);
    CHECK_INIT(fi_batch_decode_args, FI_BATCH_DECODE_ARGS_INIT, FI_BATCH_DECODE_ARGS_VERSION);
    CHECK_INIT(fi_merge_states_args, FI_MERGE_STATES_ARGS_INIT, FI_MERGE_STATES_ARGS_VERSION);
    CHECK_INIT(fi_prefill_args, FI_PREFILL_ARGS_INIT, FI_PREFILL_ARGS_VERSION);
    CHECK_INIT(fi_batch_prefill_plan_args, FI_BATCH_PREFILL_PLAN_ARGS_INIT,
               FI_BATCH_PREFILL_PLAN_ARGS_VERSION);
    CHECK_INIT(fi_batch_prefill_args, FI_BATCH_PREFILL_ARGS_INIT, FI_BATCH_PREFILL_ARGS_VERSION);

    /* The defaults themselves, in both languages. */
    fi_decode_args da;
    fi_batch_prefill_plan_args ppa;
    fi_jit_options opts;
    EXPECT(fi_decode_args_init(&da, FI_DECODE_ARGS_VERSION) == 0 && da.window_left == -1 &&
           da.version == FI_DECODE_ARGS_VERSION && da.q == NULL && da.sm_count == 0);
    EXPECT(fi_batch_prefill_plan_args_init(&ppa, FI_BATCH_PREFILL_PLAN_ARGS_VERSION) == 0 &&
           ppa.page_size == 16 && ppa.window_left == -1);
    EXPECT(fi_jit_options_init(&opts, FI_JIT_OPTIONS_VERSION) == 0 && opts.jit == 1 &&
           opts.use_disk_cache == 1 && opts.log_level == FI_LOG_WARN && opts.remote == NULL);

    /* An older version is accepted and written only as far as it reaches:
     * version 3 of fi_decode_args ends before sm_count. */
    memset(&da, 0x5a, sizeof da);
    EXPECT(fi_decode_args_init(&da, 3) == 0 && da.version == 3 && da.window_left == -1 &&
           da.num_variant_args == 0);
    const unsigned char *tail = (const unsigned char *)&da + offsetof(fi_decode_args, sm_count);
    EXPECT(tail[0] == 0x5a && tail[sizeof da.sm_count - 1] == 0x5a);
    /* Versions whose layout changed are refused, as the calls that take them refuse them. */
    fi_batch_decode_args bda;
    EXPECT(fi_batch_decode_args_init(&bda, 2) == FI_EINVALID &&
           strstr(fi_last_error(), "version 2") != NULL);
}

int main(void)
{
    /* ---- version, errors ---- */
    EXPECT(fi_version_number() == FIJIT_VERSION_NUMBER);
#define STR2(x) #x
#define STR(x) STR2(x)
    EXPECT(strcmp(fi_version_string(), STR(FIJIT_VERSION_MAJOR) "." STR(FIJIT_VERSION_MINOR) "."
                                            STR(FIJIT_VERSION_PATCH)) == 0);
    EXPECT(strcmp(fi_error_name(FI_EINVALID), "FI_EINVALID") == 0);
    EXPECT(fi_last_error() != NULL);

    /* ---- fi_<struct>_init: every *_INIT from the library ---- */
    check_struct_inits();

    /* ---- spec ---- */
    fi_jit_spec spec = FI_JIT_SPEC_INIT;
    EXPECT(spec.version == FI_JIT_SPEC_VERSION && spec.head_dim == 128 && spec.variant == NULL &&
           g_spec.kind == FI_KIND_DECODE);
    char variant_buf[64];
    char text[256];
    EXPECT(fi_jit_spec_parse(&spec, variant_buf, sizeof variant_buf,
                             "decode q=fp16 hd=128 mask=window") == 0);
    EXPECT(fi_jit_spec_format(text, sizeof text, &spec) > 0);
    EXPECT(fi_jit_spec_check(&spec) == 0);
    fi_jit_spec space[4];
    EXPECT(fi_jit_spec_enumerate(space, 4, FI_KIND_DECODE) > 4 && space[0].kind == FI_KIND_DECODE &&
           fi_jit_spec_check(&space[3]) == 0);

    /* ---- context (memory only: nothing is written) ---- */
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    EXPECT(opts.jit == 1 && opts.use_disk_cache == 1 && opts.log_level == FI_LOG_WARN &&
           opts.remote == NULL && opts.remote_secret == NULL && opts.log_fn == NULL);
    size_t logged = 0;
    fi_log_set_callback(count_log, &logged);
    fi_log_set_callback(NULL, NULL);
    opts.log_fn = count_log;
    opts.log_user = &logged;
    opts.use_disk_cache = 0;
    opts.log_level = FI_LOG_OFF;
    opts.arch = "sm_90a";
    fi_jit_ctx *ctx = NULL;
    EXPECT(fi_jit_ctx_new(&ctx, &opts) == 0 && ctx != NULL);
    EXPECT(fi_jit_ctx_cache_dir(ctx) != NULL);

    /* ---- kernels: no device here ---- */
    const fi_jit_kernel *kernel = NULL;
    EXPECT(fi_jit_get_kernel(&kernel, NULL, &spec) == FI_EINVALID);
    fi_jit_spec bad = FI_JIT_SPEC_INIT;
    bad.head_dim = 96;
    fi_build_outcome outcome = FI_BUILD_CACHED;
    EXPECT(fi_jit_prewarm(&outcome, ctx, &bad, "sm_90a") == FI_EUNSUPPORTED);
    size_t explained = 0;
    int rc = fi_jit_explain(ctx, &spec, "sm_90a", collect, &explained);
    EXPECT(rc == 0 ? explained > 0 : rc < 0);
    EXPECT(fi_jit_explain(ctx, &spec, "sm_90a", NULL, NULL) == FI_EINVALID);

    /* ---- variants ---- */
    EXPECT(fi_jit_variant_register(ctx, "bad", "#include <x.h>\n", 0) == FI_ECOMPILE);
    EXPECT(fi_jit_variant_register_file(ctx, NULL, "/nonexistent/v.cuh", FI_VARIANT_REPLACE) < 0);
    fi_variant_arg vargs[1];
    memset(vargs, 0, sizeof vargs);
    vargs[0].name = "scale";
    vargs[0].type = FI_VARG_FLOAT;
    vargs[0].value.f = 1.f;

    /* ---- statistics ---- */
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    EXPECT(fi_jit_stats_get(&stats, ctx) == 0 && stats.version == FI_JIT_STATS_VERSION);
    fi_jit_stats unversioned;
    memset(&unversioned, 0, sizeof unversioned);
    EXPECT(fi_jit_stats_get(&unversioned, ctx) == FI_EINVALID);
    int64_t counted = 0;
#define SUM_STAT(name, unit, label) counted += stats.name;
    FI_JIT_STATS_COUNTERS(SUM_STAT)
#undef SUM_STAT
    EXPECT(counted >= 0);

    /* ---- single decode: sizing needs no device with sm_count ---- */
    fi_decode_args da = FI_DECODE_ARGS_INIT;
    EXPECT(da.version == FI_DECODE_ARGS_VERSION && da.window_left == -1 && da.max_splits == 0);
    da.q = da.k = da.v = (const void *)(size_t)0x10000;
    da.o = (void *)(size_t)0x10000;
    da.num_qo_heads = 32;
    da.num_kv_heads = 8;
    da.kv_len = 8192;
    da.q_stride_h = da.o_stride_h = 128;
    da.k_stride_n = da.v_stride_n = 8 * 128;
    da.k_stride_h = da.v_stride_h = 128;
    da.sm_count = 132;
    da.variant_args = vargs;
    da.num_variant_args = 0;
    size_t bytes = 0;
    EXPECT(fi_decode_workspace_size(&bytes, &spec, &da) == FI_EINVALID); /* window not given */
    EXPECT(strstr(fi_last_error(), "window_left") != NULL);
    da.window_left = 1024;
    EXPECT(fi_decode_workspace_size(&bytes, &spec, &da) == 0 && bytes > 0);
    EXPECT(fi_decode_run(NULL, &spec, &da, NULL) == FI_EINVALID);

    /* ---- batch decode ---- */
    fi_jit_spec bds = FI_JIT_SPEC_INIT;
    bds.kind = FI_KIND_BATCH_DECODE;
    const int32_t indptr[3] = {0, 300, 310}, last[2] = {7, 16};
    fi_batch_decode_plan_args bpa = FI_BATCH_DECODE_PLAN_ARGS_INIT;
    EXPECT(bpa.page_size == 16 && bpa.window_left == -1);
    bpa.batch_size = 2;
    bpa.kv_indptr = indptr;
    bpa.kv_last_page_len = last;
    bpa.num_qo_heads = 32;
    bpa.num_kv_heads = 8;
    bpa.sm_count = 132;
    size_t planned = 0;
    EXPECT(fi_batch_decode_workspace_size(&bytes, &bds, &bpa) == 0 && bytes > 0);
    fi_batch_decode_plan *bplan = NULL;
    EXPECT(fi_batch_decode_plan_new(&bplan, NULL, &bds, &bpa) == FI_EINVALID && bplan == NULL);
    /* A plan gets its kernel, loaded into the current context: without a
     * GPU (this test's usual machine) that is FI_ENODEVICE. */
    const int plan_rc = fi_batch_decode_plan_new(&bplan, ctx, &bds, &bpa);
    EXPECT(plan_rc == FI_ENODEVICE ? bplan == NULL : plan_rc == 0 && bplan != NULL);
    if (bplan) {
        EXPECT(fi_batch_decode_plan_workspace_size(&planned, bplan) == 0 && planned == bytes);
        int items = 0, most = 0;
        EXPECT(fi_batch_decode_plan_describe(&items, &most, bplan) == 0 && items >= 2 &&
               most >= 1);
        EXPECT(fi_batch_decode_plan_upload(bplan, NULL, bytes) == FI_EINVALID);
    }
    fi_batch_decode_args ba = FI_BATCH_DECODE_ARGS_INIT;
    EXPECT(ba.version == FI_BATCH_DECODE_ARGS_VERSION);
    EXPECT(fi_batch_decode_run(ctx, NULL, &ba, NULL) == FI_EINVALID);
    fi_batch_decode_plan_free(bplan);
    fi_batch_decode_plan_free(NULL);

    fi_merge_states_args ma = FI_MERGE_STATES_ARGS_INIT;
    EXPECT(ma.version == FI_MERGE_STATES_ARGS_VERSION && ma.lse == NULL && ma.lse_out == NULL);
    EXPECT(fi_merge_states(ctx, &spec, &ma, NULL) == FI_EINVALID); /* a decode spec */

    /* ---- prefill ---- */
    fi_jit_spec ps = FI_JIT_SPEC_INIT;
    ps.kind = FI_KIND_PREFILL;
    ps.pos = FI_POS_ROPE_LLAMA;
    fi_prefill_args pa = FI_PREFILL_ARGS_INIT;
    EXPECT(pa.version == FI_PREFILL_ARGS_VERSION && pa.window_left == -1);
    pa.num_qo_heads = 32;
    pa.num_kv_heads = 8;
    pa.qo_len = pa.kv_len = 100;
    /* RoPE's rotated keys, then the 16 bytes of the block claims' counter. */
    EXPECT(fi_prefill_workspace_size(&bytes, &ps, &pa) == 0 && bytes == 100 * 8 * 128 * 2 + 16);
    EXPECT(fi_prefill_run(NULL, &ps, &pa, NULL) == FI_EINVALID);

    fi_jit_spec bps = FI_JIT_SPEC_INIT;
    bps.kind = FI_KIND_BATCH_PREFILL_PAGED;
    const int32_t qo_indptr[3] = {0, 100, 130};
    fi_batch_prefill_plan_args bppa = FI_BATCH_PREFILL_PLAN_ARGS_INIT;
    EXPECT(bppa.page_size == 16 && bppa.window_left == -1);
    bppa.batch_size = 2;
    bppa.qo_indptr = qo_indptr;
    bppa.kv_indptr = indptr;
    bppa.kv_last_page_len = last;
    bppa.num_qo_heads = 32;
    bppa.num_kv_heads = 8;
    bppa.sm_count = 132;
    EXPECT(fi_batch_prefill_workspace_size(&bytes, &bps, &bppa) == 0 && bytes > 0);
    bps.mask = FI_MASK_WINDOW;
    EXPECT(fi_batch_prefill_workspace_size(&bytes, &bps, &bppa) == FI_EINVALID);
    bps.mask = FI_MASK_NONE;
    fi_batch_prefill_plan *pplan = NULL;
    EXPECT(fi_batch_prefill_plan_new(&pplan, NULL, &bps, &bppa) == FI_EINVALID && pplan == NULL);
    EXPECT(fi_batch_prefill_plan_workspace_size(&planned, NULL) == FI_EINVALID);
    EXPECT(fi_batch_prefill_plan_upload(NULL, NULL, 0) == FI_EINVALID);
    fi_batch_prefill_args bpr = FI_BATCH_PREFILL_ARGS_INIT;
    EXPECT(bpr.version == FI_BATCH_PREFILL_ARGS_VERSION && bpr.custom_mask_offsets == NULL &&
           bpr.rope_offsets == NULL);
    EXPECT(fi_batch_prefill_run(ctx, NULL, &bpr, NULL) == FI_EINVALID);
    fi_batch_prefill_plan_free(pplan);

    /* ---- the device (fijit_cache.h): FI_ENODEVICE without a driver ---- */
    int devices = -1, driver = -1;
    const int drc = fi_device_count(&devices);
    EXPECT(drc == FI_ENODEVICE ? devices == 0 : drc == 0 && devices >= 0);
    EXPECT(fi_cuda_driver_version(&driver) == (drc == FI_ENODEVICE ? FI_ENODEVICE : 0));
    EXPECT(fi_device_use(-1) == FI_ENODEVICE);
    void *dmem = NULL;
    EXPECT(fi_device_alloc(NULL, 16) == FI_EINVALID);
    EXPECT(drc == 0 || (fi_device_alloc(&dmem, 16) == FI_ENODEVICE && dmem == NULL));
    EXPECT(fi_device_upload(NULL, "x", 1) == FI_EINVALID);
    EXPECT(fi_device_download(NULL, NULL, 1) == FI_EINVALID);
    EXPECT(drc == 0 || fi_device_synchronize() == FI_ENODEVICE);
    fi_device_free(NULL);

    /* ---- MLA decode (fijit_mla.h) ---- */
    fi_jit_spec ms;
    char mla_variant[64];
    EXPECT(fi_jit_spec_parse(&ms, mla_variant, sizeof mla_variant, "mla_decode q=bf16") == 0 &&
           ms.head_dim == FI_MLA_HEAD_DIM);
    const int32_t mla_qo[3] = {0, 1, 3};
    fi_batch_mla_decode_plan_args mpa = FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT;
    EXPECT(mpa.page_size == 64 && mpa.max_splits == 0);
    mpa.batch_size = 2;
    mpa.qo_indptr = mla_qo;
    mpa.kv_indptr = indptr;
    mpa.kv_last_page_len = last;
    mpa.page_size = 16;
    mpa.num_heads = 128;
    mpa.sm_count = 132;
    EXPECT(fi_batch_mla_decode_workspace_size(&bytes, &ms, &mpa) == 0 && bytes > 0);
    fi_batch_mla_decode_plan *mplan = NULL;
    EXPECT(fi_batch_mla_decode_plan_new(&mplan, NULL, &ms, &mpa) == FI_EINVALID && mplan == NULL);
    EXPECT(fi_batch_mla_decode_plan_workspace_size(&planned, NULL) == FI_EINVALID);
    int mla_items = 0, mla_most = 0;
    EXPECT(fi_batch_mla_decode_plan_describe(&mla_items, &mla_most, NULL) == FI_EINVALID);
    EXPECT(fi_batch_mla_decode_plan_upload(NULL, NULL, 0) == FI_EINVALID);
    fi_batch_mla_decode_args mra = FI_BATCH_MLA_DECODE_ARGS_INIT;
    EXPECT(mra.version == FI_BATCH_MLA_DECODE_ARGS_VERSION && mra.kv_scale == 0.f);
    EXPECT(fi_batch_mla_decode_run(ctx, NULL, &mra, NULL) == FI_EINVALID);
    fi_batch_mla_decode_plan_free(mplan);

    (void)kernel;
    (void)outcome;
    fi_jit_ctx_free(ctx);
    fi_jit_ctx_free(NULL);
    printf("use_all (%s): %s\n",
#ifdef __cplusplus
           "C++",
#else
           "C",
#endif
           failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
