/*
 * CPU tests of the JIT path: specs, expansion, keys, NVRTC compiles with no
 * GPU, the disk cache seen from new processes, single flight, and recovery
 * from a truncated object. Statistics are the oracle.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/dynlib.h"
#include "common/embedded.h"
#include "common/error.h"
#include "core/settings.h"
#include "core/expand.h"
#include "core/key.h"
#include "kinds/registry.h"
#include "kinds/spec.h"
#include "common/sys.h"

/* The decode kind's 16-bit tuples (kv = q), from the library's tuple space. */
static int decode_tuples(fi_jit_spec *out, int max)
{
    static fi_jit_spec all[1024];
    int total = fi_jit_spec_enumerate(all, 1024, FI_KIND_DECODE), n = 0;
    if (total > 1024) total = 1024; /* the round trip test counts what it gets */
    for (int i = 0; i < total && n < max; i++)
        if (all[i].kv_dtype == all[i].q_dtype) out[n++] = all[i];
    return n;
}

/* The tuple space, counted by hand from each kind's documented limits:
 * decode kinds: q = o in {fp16, bf16} x kv in {q, e4m3, e5m2} x hd 3 x mask
 * {none, window} x pos 3 x soft-cap 2 = 216 each; prefill kinds: 16-bit
 * 2 x hd 3 x mask 4 x pos 3 x soft-cap 2 = 144 each, 16 more at hd 192 with
 * v and o of 128 (2 x mask 4 x pos none x soft-cap 2), single prefill 4
 * more in fp8 (o fp16/bf16 x mask none/causal at hd 128); mla_decode: q = o
 * in {fp16, bf16} x kv in {q, e4m3} x soft-cap 2 = 8 (hd 512, no mask or pos). */
TEST(spec_enumerate_is_the_accepted_tuple_space)
{
    static const struct {
        int kind, count;
    } expected[] = {{FI_KIND_DECODE, 216},
                    {FI_KIND_BATCH_DECODE, 216},
                    {FI_KIND_PREFILL, 164},
                    {FI_KIND_BATCH_PREFILL_RAGGED, 160},
                    {FI_KIND_BATCH_PREFILL_PAGED, 160},
                    {FI_KIND_MLA_DECODE, 8}};
    static fi_jit_spec all[4096];
    int sum = 0;
    for (size_t k = 0; k < sizeof expected / sizeof expected[0]; k++) {
        int n = fi_jit_spec_enumerate(NULL, 0, expected[k].kind);
        CHECK_MSG(n == expected[k].count, "kind %d: %d tuples, want %d", expected[k].kind, n,
                  expected[k].count);
        sum += n;
    }
    int total = fi_jit_spec_enumerate(all, 4096, 0);
    CHECK(total >= sum); /* kinds not in the table above add to it */
    CHECK(strcmp(fi_last_error(), "") == 0); /* the checks' refusals are not the call's */
    for (int i = 0; i < total; i++) {
        char text[256];
        CHECK_OK(fi_jit_spec_check(&all[i]));
        CHECK(fi_jit_spec_format(text, sizeof text, &all[i]) > 0);
        for (int j = 0; j < i; j++) CHECK(memcmp(&all[i], &all[j], sizeof all[i]) != 0);
    }
    /* A tuple a kind refuses is not listed: decode has no causal mask. */
    for (int i = 0; i < total; i++)
        CHECK(!(all[i].kind == FI_KIND_DECODE && all[i].mask == FI_MASK_CAUSAL));
    /* A short array gets the first tuples and the full count. */
    fi_jit_spec few[3];
    CHECK(fi_jit_spec_enumerate(few, 3, FI_KIND_PREFILL) == 164);
    /* The registry lists decode, batch decode, then prefill. */
    const int prefill_first = expected[0].count + expected[1].count;
    CHECK(memcmp(few, all + prefill_first, sizeof few) == 0);
    CHECK(fi_jit_spec_enumerate(few, 3, 99) == FI_EINVALID);
    CHECK(fi_jit_spec_enumerate(NULL, 3, FI_KIND_DECODE) == FI_EINVALID);
}

TEST(spec_round_trip_over_decode_tuples)
{
    fi_jit_spec tuples[128];
    int n = decode_tuples(tuples, 128);
    CHECK(n == 72);
    for (int i = 0; i < n; i++) {
        char text[256], again[256], variant[64];
        fi_jit_spec parsed;
        CHECK(fi_jit_spec_format(text, sizeof text, &tuples[i]) > 0);
        CHECK_OK(fi_jit_spec_parse(&parsed, variant, sizeof variant, text));
        CHECK(fi_jit_spec_format(again, sizeof again, &parsed) > 0);
        CHECK_MSG(strcmp(text, again) == 0, "'%s' became '%s'", text, again);
    }
}

TEST(every_kind_is_named_by_the_kind_table_and_round_trips)
{
    int kinds = 0;
    for (int k = 0; k <= 16; k++) {
        const fi_kind_info *info = fi__kind_info((fi_kernel_kind)k);
        CHECK_MSG(!info == !fi__kind_name(k), "kind %d", k);
        if (!info) continue;
        kinds++;
        int parsed = -1;
        CHECK_OK(fi__kind_parse(&parsed, info->name));
        CHECK(parsed == k && strcmp(fi__kind_name(k), info->name) == 0);
        fi_jit_spec spec = parse_or_die(info->name);
        CHECK(spec.kind == (fi_kernel_kind)k);
    }
    CHECK(kinds == 6);
    int parsed = -1;
    CHECK_RC(fi__kind_parse(&parsed, "prefil"), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "decode, batch_decode, prefill, batch_prefill_ragged, "
                                  "batch_prefill_paged, mla_decode"));
}

TEST(spec_parse_defaults_and_order)
{
    char text[256], variant[64];
    fi_jit_spec spec;
    CHECK_OK(fi_jit_spec_parse(&spec, variant, sizeof variant, "decode softcap=1 hd=64 q=bf16"));
    CHECK(spec.kv_dtype == FI_DTYPE_BF16 && spec.o_dtype == FI_DTYPE_BF16);
    CHECK(fi_jit_spec_format(text, sizeof text, &spec) > 0);
    CHECK(strcmp(text, "decode q=bf16 kv=bf16 o=bf16 hd=64 mask=none pos=none softcap=1") == 0);
}

TEST(spec_rejects_bad_input_with_named_field)
{
    static const struct {
        const char *text;
        int code;
        const char *says;
    } cases[] = {
        {"", FI_EINVALID, "empty"},
        {"decoder q=fp16", FI_EINVALID, "decode"},
        {"decode q=fp32", FI_EINVALID, "fp16, bf16"},
        {"decode hd=abc", FI_EINVALID, "hd"},
        {"decode hd=99999999999", FI_EINVALID, "hd"},
        {"decode mask=diagonal", FI_EINVALID, "none, causal, window, custom"},
        {"decode pos=yarn", FI_EINVALID, "rope"},
        {"decode colour=red", FI_EINVALID, "unknown field"},
        {"decode hd=64 hd=128", FI_EINVALID, "twice"},
        {"decode hd", FI_EINVALID, "name=value"},
        {"decode softcap=2", FI_EINVALID, "softcap"},
        {"decode variant=../etc", FI_EINVALID, "variant"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fi_jit_spec spec;
        char variant[64];
        CHECK_RC(fi_jit_spec_parse(&spec, variant, sizeof variant, cases[i].text), cases[i].code);
        CHECK_MSG(strstr(fi_last_error(), cases[i].says), "'%s': message '%s' lacks '%s'",
                  cases[i].text, fi_last_error(), cases[i].says);
    }
}

TEST(spec_check_names_unsupported_field_and_values)
{
    fi_jit_spec spec = parse_or_die("decode hd=96");
    CHECK_RC(fi_jit_spec_check(&spec), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "head_dim 96") && strstr(fi_last_error(), "64, 128, 256"));
    spec = parse_or_die("decode mask=causal");
    CHECK_RC(fi_jit_spec_check(&spec), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "mask 'causal'") && strstr(fi_last_error(), "none, window"));
    spec = parse_or_die("prefill q=fp8_e4m3"); /* o follows q: fp8 output is refused */
    CHECK_RC(fi_jit_spec_check(&spec), FI_EUNSUPPORTED);
    spec = parse_or_die("decode q=fp16 kv=bf16");
    CHECK_RC(fi_jit_spec_check(&spec), FI_EUNSUPPORTED);
    spec.version = 99;
    CHECK_RC(fi_jit_spec_check(&spec), FI_EINVALID);
    CHECK_RC(fi_jit_spec_check(NULL), FI_EINVALID);
    CHECK_RC(fi__arch_check("sm_9"), FI_EINVALID);
    CHECK_RC(fi__arch_check("compute_90"), FI_EINVALID);
    CHECK_OK(fi__arch_check("sm_90a"));
    CHECK_OK(fi__arch_check("sm_100"));
}

TEST(an_arch_runs_on_devices_of_its_major_version_and_a_higher_minor)
{
    static const struct {
        const char *arch, *device;
        int runs;
    } cases[] = {
        {"sm_90", "sm_90a", 1},   {"sm_90a", "sm_90a", 1}, {"sm_80", "sm_86", 1},
        {"sm_86", "sm_80", 0},    {"sm_80", "sm_90a", 0},  {"sm_90a", "sm_90", 0},
        {"sm_90a", "sm_100a", 0}, {"sm_100", "sm_103", 1}, {"sm_100a", "sm_103a", 0},
        {"sm_89", "sm_89", 1},    {"sm_120", "sm_100", 0}, {"sm_100", "sm_90a", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(fi__arch_runs_on(cases[i].arch, cases[i].device) == cases[i].runs,
                  "%s on %s: want %d", cases[i].arch, cases[i].device, cases[i].runs);
}

/* Key of `spec` on `arch` with the templates in effect now. */
static int key_of(uint8_t out[16], const char *text, const char *arch, const char *extra_option)
{
    fi_jit_spec spec = parse_or_die(text);
    fi_translation_unit tu;
    const char *options[] = {"-std=c++17", "--gpu-architecture=sm_90a", extra_option};
    int rc = fi__expand(&tu, &spec, NULL);
    if (rc < 0) return rc;
    const fi_kind_info *kind = fi__kind_info(spec.kind);
    fi_key_input in = {&tu, arch, 13, 0, extra_option ? 3 : 2, options,
                       fi__kind_entry_count(kind), kind->entries};
    rc = fi__key_compute(out, &in, NULL, NULL);
    fi__tu_free(&tu);
    return rc;
}

/* Every embedded template, verbatim, into `to_dir` (its folders too). */
static int copy_templates(const char *to_dir)
{
    char *text = NULL;
    mkdir(to_dir, 0700);
    for (int i = 0; i < fi__template_count; i++) {
        char path[4300];
        const char *name = fi__templates[i].name;
        if (fi__template_load(name, &text) < 0) return -1;
        snprintf(path, sizeof path, "%s/%s", to_dir, name);
        for (char *slash = path + strlen(to_dir) + 1; (slash = strchr(slash, '/')); *slash++ = '/') {
            *slash = '\0';
            mkdir(path, 0700);
        }
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        fputs(text, f);
        fclose(f);
        fi__free(text);
    }
    return 0;
}

TEST(key_is_deterministic_and_covers_every_input)
{
    uint8_t a[16], b[16], c[16];
    const char *base = "decode q=fp16 hd=128";
    CHECK_OK(key_of(a, base, "sm_90a", NULL));
    CHECK_OK(key_of(b, base, "sm_90a", NULL));
    CHECK(memcmp(a, b, 16) == 0);
    CHECK_OK(key_of(c, base, "sm_80", NULL));
    CHECK(memcmp(a, c, 16) != 0);
    CHECK_OK(key_of(c, base, "sm_90a", "-lineinfo"));
    CHECK(memcmp(a, c, 16) != 0);
    CHECK_OK(key_of(c, "decode q=fp16 hd=128 softcap=1", "sm_90a", NULL));
    CHECK(memcmp(a, c, 16) != 0);

    /* One changed byte in any template header changes the key. */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/templates", check_tmpdir);
    CHECK(copy_templates(dir) == 0);
    setenv("FIJIT_TEMPLATE_DIR", dir, 1);
    CHECK_OK(key_of(c, base, "sm_90a", NULL));
    CHECK_MSG(memcmp(a, c, 16) == 0, "a verbatim template copy must give the same key");
    /* Every file a decode module is built from (variant layers included). */
    static const char *const names[] = {
        "common/fijit_common.cuh", "common/params.h",        "common/variant.cuh",
        "variants/alibi.cuh",      "variants/softcap.cuh",   "variants/window.cuh",
        "common/mma_sm80.cuh",     "decode/params.h",        "decode/common.cuh",
        "decode/kv_source.cuh",    "decode/staging.cuh",     "decode/tile_loop.cuh",
        "decode/split_merge.cuh",  "decode/decode.cuh"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "a");
        fputs(" ", f);
        fclose(f);
        int rc = key_of(c, base, "sm_90a", NULL);
        CHECK_OK(rc);
        CHECK_MSG(memcmp(a, c, 16) != 0, "a byte appended to %s did not change the key", names[i]);
        copy_templates(dir);
    }
    unsetenv("FIJIT_TEMPLATE_DIR");
}

TEST(explain_lists_every_hashed_field)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec spec = parse_or_die("decode q=bf16 hd=64 pos=rope");
    char text[16384] = "";
    CHECK_OK(check_ctx_new(&ctx, "sm_80"));
    int rc = fi_jit_explain(ctx, &spec, NULL, (void (*)(void *, const char *))(void (*)(void))strcat, text);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    static const char *const expected[] = {"schema", "sm_80", "nvrtc-version", "option",
                                           "--gpu-architecture=sm_80", "header:decode/decode.cuh",
                                           "header:common/fijit_common.cuh", "source", "key "};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        CHECK_MSG(strstr(text, expected[i]), "explain output lacks '%s':\n%s", expected[i], text);
}

/* The decode tuples compile for every arch in test_batch_decode_compile.c. */

/* Run `fn` in a child process; returns its exit status. */
static int in_child(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

static int prewarm_once(void *arg)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec spec = parse_or_die(arg);
    fi_build_outcome outcome = FI_BUILD_COMPILED;
    if (check_ctx_new(&ctx, "sm_90a") < 0 || fi_jit_prewarm(&outcome, ctx, &spec, NULL) < 0) {
        fprintf(stderr, "prewarm: %s\n", fi_last_error());
        return 50;
    }
    fi_jit_ctx_free(ctx);
    return outcome == FI_BUILD_COMPILED ? 10 : 11;
}

static int read_stats(fi_jit_stats *out)
{
    fi_jit_ctx *ctx = NULL;
    int rc = check_ctx_new(&ctx, "sm_90a");
    if (rc == 0) rc = fi_jit_stats_get(out, ctx);
    fi_jit_ctx_free(ctx);
    return rc;
}

TEST(second_process_is_a_disk_hit_with_no_compile)
{
    char spec[] = "decode q=fp16 hd=64";
    CHECK(in_child(prewarm_once, spec) == 10);
    CHECK(in_child(prewarm_once, spec) == 11);
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    CHECK_OK(read_stats(&stats));
    CHECK_MSG(stats.compiles == 1 && stats.disk_hits == 1 && stats.misses == 1 && stats.entries == 1,
              "compiles %lld disk_hits %lld misses %lld entries %lld", (long long)stats.compiles,
              (long long)stats.disk_hits, (long long)stats.misses, (long long)stats.entries);
}

typedef struct flight_arg {
    fi_jit_ctx *ctx;
    fi_jit_spec spec;
    int failed;
} flight_arg;

static void *prewarm_thread(void *p)
{
    flight_arg *arg = p;
    if (fi_jit_prewarm(NULL, arg->ctx, &arg->spec, NULL) < 0) arg->failed = 1;
    return NULL;
}

/* 8 threads in this process ask for one spec at once. */
static int eight_threads(void *text)
{
    fi_jit_ctx *ctx = NULL;
    flight_arg args[8];
    pthread_t threads[8];
    if (check_ctx_new(&ctx, "sm_90a") < 0) return 50;
    for (int i = 0; i < 8; i++) {
        args[i] = (flight_arg){ctx, parse_or_die(text), 0};
        pthread_create(&threads[i], NULL, prewarm_thread, &args[i]);
    }
    int failed = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(threads[i], NULL);
        failed |= args[i].failed;
    }
    fi_jit_ctx_free(ctx);
    return failed ? 51 : 0;
}

TEST(eight_threads_and_four_processes_compile_one_key_once)
{
    char spec[] = "decode q=bf16 hd=128 mask=window";
    pid_t pids[4];
    for (int p = 0; p < 4; p++)
        if ((pids[p] = fork()) == 0) _exit(eight_threads(spec));
    for (int p = 0; p < 4; p++) {
        int status = 0;
        waitpid(pids[p], &status, 0);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d status %d", p, status);
    }
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    CHECK_OK(read_stats(&stats));
    CHECK_MSG(stats.compiles == 1, "compiles %lld", (long long)stats.compiles);
    CHECK_MSG(stats.misses + stats.disk_hits + stats.memory_hits >= 4, "lookups %lld",
              (long long)(stats.misses + stats.disk_hits + stats.memory_hits));
}

static int find_object(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (flag == FTW_F && strstr(path, ".fo") && !strstr(path, ".tmp"))
        return truncate(path, 100) == 0 ? 1 : -1; /* stop the walk at the first object */
    return 0;
}

TEST(truncated_object_is_detected_and_rebuilt)
{
    char spec[] = "decode q=fp16 hd=256 pos=alibi";
    char objects[4300];
    CHECK(in_child(prewarm_once, spec) == 10);
    snprintf(objects, sizeof objects, "%s/cache/objects", check_tmpdir);
    CHECK_MSG(nftw(objects, find_object, 8, FTW_PHYS) == 1, "no object file under %s", objects);
    CHECK(in_child(prewarm_once, spec) == 10);
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    CHECK_OK(read_stats(&stats));
    CHECK_MSG(stats.corrupt == 1 && stats.compiles == 2 && stats.entries == 1,
              "corrupt %lld compiles %lld entries %lld", (long long)stats.corrupt,
              (long long)stats.compiles, (long long)stats.entries);
    CHECK(in_child(prewarm_once, spec) == 11);
}

TEST(get_kernel_without_gpu_says_so)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *kernel = NULL;
    fi_jit_spec spec = parse_or_die("decode");
    CHECK_OK(check_ctx_new(&ctx, NULL));
    int rc = fi_jit_get_kernel(&kernel, ctx, &spec);
    fi_jit_ctx_free(ctx);
    if (rc == 0) return; /* a machine with a GPU: the GPU suite covers it */
    CHECK_RC(rc, FI_ENODEVICE);
    CHECK(kernel == NULL);
    CHECK(strstr(fi_last_error(), "CUDA") != NULL);
}

TEST(jit_off_serves_only_cached_kernels)
{
    char dir[4200];
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec spec = parse_or_die("decode q=fp16 hd=64");
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    opts.cache_dir = dir;
    opts.jit = 0;
    opts.arch = "sm_90a";
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    int rc = fi_jit_prewarm(NULL, ctx, &spec, NULL);
    fi_jit_ctx_free(ctx);
    CHECK_RC(rc, FI_ENOTFOUND);
    CHECK(strstr(fi_last_error(), "JIT is disabled"));
}

TEST(unsafe_cache_dir_is_refused)
{
    char dir[4200];
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    snprintf(dir, sizeof dir, "%s/shared", check_tmpdir);
    CHECK(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
    opts.cache_dir = dir;
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EPERM);
    CHECK(ctx == NULL);
    opts.allow_unsafe_dir = 1;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    fi_jit_ctx_free(ctx);
}

TEST(options_and_environment_are_validated)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    opts.cache_dir = dir;
    opts.arch = "gfx90a";
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    opts.arch = NULL;
    opts.version = 7;
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    opts.version = FI_JIT_OPTIONS_VERSION;
    setenv("FIJIT_MAX_CACHE_SIZE", "lots", 1);
    int rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_MAX_CACHE_SIZE");
    CHECK_RC(rc, FI_EINVALID);
    CHECK(fi_version_number() == FIJIT_VERSION_NUMBER);
    /* A bad remote URL or a short fleet secret is refused, with words. */
    opts.remote = "redis://cache-host:http";
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "port") != NULL);
    opts.remote = "redis://cache-host";
    opts.remote_secret = "short";
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "at least 16") != NULL);
    /* Every FIJIT_* value is checked, the lock timeout and the secret too. */
    opts.remote = NULL;
    opts.remote_secret = NULL;
    setenv("FIJIT_LOCK_TIMEOUT_MS", "x", 1);
    rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_LOCK_TIMEOUT_MS");
    CHECK_RC(rc, FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "FIJIT_LOCK_TIMEOUT_MS") != NULL, "%s", fi_last_error());
    setenv("FIJIT_REMOTE_SECRET", "short", 1);
    rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_REMOTE_SECRET");
    CHECK_RC(rc, FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "FIJIT_REMOTE_SECRET") != NULL, "%s", fi_last_error());
    /* Messages speak of arguments, not of the library's functions. */
    CHECK(fi_jit_ctx_new(NULL, &opts) == FI_EINVALID && !strstr(fi_last_error(), "fi_"));
}

/* A caller built against version 1 of the options and the statistics (no
 * remote fields) keeps working: nothing past its structs is read or written. */
TEST(version_1_options_and_stats_are_still_accepted)
{
    struct {
        fi_jit_options v1;
        char guard[64];
    } old;
    fi_jit_ctx *ctx = NULL;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    memset(&old, 0xa5, sizeof old);
    fi_jit_options init = FI_JIT_OPTIONS_INIT;
    memcpy(&old.v1, &init, offsetof(fi_jit_options, remote));
    old.v1.version = 1;
    old.v1.cache_dir = dir;
    old.v1.log_level = FI_LOG_OFF;
    CHECK_OK(fi_jit_ctx_new(&ctx, &old.v1)); /* remote's bytes are 0xa5: never read */
    struct {
        fi_jit_stats v1;
    } stats;
    memset(&stats, 0x5a, sizeof stats);
    stats.v1.version = 1;
    int rc = fi_jit_stats_get(&stats.v1, ctx);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    CHECK(stats.v1.entries == 0 && stats.v1.remote_hits == 0x5a5a5a5a5a5a5a5aLL);
}

TEST(memory_only_context_counts_and_serves)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    fi_build_outcome outcome = FI_BUILD_CACHED;
    fi_jit_spec spec = parse_or_die("decode q=fp16 hd=64");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/never-created", check_tmpdir);
    opts.cache_dir = dir;
    opts.use_disk_cache = 0;
    opts.arch = "sm_90a";
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    int rc = fi_jit_prewarm(&outcome, ctx, &spec, NULL);
    if (rc == 0) rc = fi_jit_stats_get(&stats, ctx);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    CHECK(outcome == FI_BUILD_COMPILED);
    CHECK(stats.compiles == 1 && stats.misses == 1 && stats.entries == 0);
    struct stat st;
    CHECK_MSG(stat(dir, &st) != 0, "a memory-only context created %s", dir);
}

/* Prewarm's job is to store: a kernel that compiled but could not be written
 * (a full disk) is an error, not FI_BUILD_COMPILED, and the compile counts. */
TEST(prewarm_fails_when_the_cache_cannot_store_the_kernel)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_stats stats = FI_JIT_STATS_INIT;
    fi_build_outcome outcome = FI_BUILD_CACHED;
    fi_jit_spec a = parse_or_die("decode q=fp16 hd=64"), b = parse_or_die("decode q=bf16 hd=64");
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    int rc_a = fi_jit_prewarm(NULL, ctx, &a, NULL); /* loads NVRTC, opens the index */
    fi__fault_arm(FI_FAULT_DISK_FULL, 1, 1);
    int rc_b = fi_jit_prewarm(&outcome, ctx, &b, NULL);
    char message[2048];
    snprintf(message, sizeof message, "%s", fi_last_error());
    fi__fault_arm(0, 0, 0);
    int rc_s = fi_jit_stats_get(&stats, ctx);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc_a);
    CHECK_MSG(rc_b == FI_EIO, "prewarm on a full disk gave %d (outcome %d): %s", rc_b, outcome,
              message);
    CHECK_MSG(strstr(message, "decode q=bf16") && strstr(message, "not stored"), "%s", message);
    CHECK_OK(rc_s);
    CHECK_MSG(stats.compiles == 2 && stats.entries == 1, "compiles %lld entries %lld",
              (long long)stats.compiles, (long long)stats.entries);
}

/* Counts a context could not write to the index (its statistics write failed)
 * are kept and written by a later flush, not dropped: find the first SQLite
 * fault point after the compile, fail every SQLite call from there on, then
 * read the statistics with faults off. */
TEST(compiles_are_counted_when_a_statistics_write_fails)
{
    fi_jit_spec a = parse_or_die("decode q=fp16 hd=64"), b = parse_or_die("decode q=bf16 hd=64");
    for (long n = 1; n < 200; n++) {
        fi_jit_ctx *ctx = NULL;
        fi_jit_stats stats = FI_JIT_STATS_INIT;
        CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
        int rc = fi_jit_prewarm(NULL, ctx, &a, NULL); /* cached after the first round */
        if (rc < 0) fi_jit_ctx_free(ctx);
        CHECK_OK(rc);
        fi__fault_arm(FI_FAULT_SQL, n, 1);
        rc = fi_jit_prewarm(NULL, ctx, &b, NULL);
        int compiled = rc == 0 || strstr(fi_last_error(), "not stored") != NULL;
        long fired = fi__fault_count();
        fi__fault_arm(0, 0, 0);
        int rc_s = compiled ? fi_jit_stats_get(&stats, ctx) : 0;
        fi_jit_ctx_free(ctx);
        if (!compiled) continue; /* the fault came before the compile */
        CHECK_MSG(fired > 0, "fault point %ld: the compile ran past every SQLite call", n);
        CHECK_OK(rc_s);
        CHECK_MSG(stats.compiles == 2 && stats.entries == 1,
                  "fault point %ld: compiles %lld entries %lld", n, (long long)stats.compiles,
                  (long long)stats.entries);
        CHECK_MSG(rc == FI_EIO, "fault point %ld: prewarm gave %d", n, rc);
        return;
    }
    CHECK_MSG(0, "no SQLite fault point reached the compile");
}

/* Send stderr to `path`; returns what stderr_restore takes back, or -1. */
static int stderr_to(const char *path)
{
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved >= 0 && fd >= 0) dup2(fd, 2);
    if (fd >= 0) close(fd);
    if (fd < 0 && saved >= 0) {
        close(saved);
        saved = -1;
    }
    return saved;
}

static void stderr_restore(int saved)
{
    fflush(stderr);
    if (saved < 0) return;
    dup2(saved, 2);
    close(saved);
}

/* Past the 1 KiB line buffer (ptxas' log of a module): "xxx...<end>". */
static void long_message(char *out, size_t size)
{
    memset(out, 'x', size - 6);
    memcpy(out + size - 6, "<end>", 6);
}

/* Configuration from the environment: a relative XDG_CACHE_HOME is ignored
 * (XDG base-directory spec), and a FIJIT_LOG that is not a level warns and
 * keeps the level the options ask for instead of silencing the library. */
TEST(environment_cache_dir_and_log_level_rules)
{
    char dir[4200], log[4300];
    const char *home = getenv("HOME");
    char saved_home[4096];
    snprintf(saved_home, sizeof saved_home, "%s", home ? home : "");
    unsetenv("FIJIT_CACHE_DIR");
    setenv("HOME", "/home/someone", 1);
    setenv("XDG_CACHE_HOME", "relative/cache", 1);
    int rc_rel = fi__default_cache_dir(dir, sizeof dir);
    char rel[4200];
    snprintf(rel, sizeof rel, "%s", dir);
    setenv("XDG_CACHE_HOME", "/var/cache/me", 1);
    int rc_abs = fi__default_cache_dir(dir, sizeof dir);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", saved_home, 1);
    CHECK_OK(rc_rel);
    CHECK_MSG(strcmp(rel, "/home/someone/.cache/fijit") == 0, "relative XDG_CACHE_HOME gave %s", rel);
    CHECK_OK(rc_abs);
    CHECK_MSG(strcmp(dir, "/var/cache/me/fijit") == 0, "%s", dir);

    CHECK(fi__parse_log_level("3") == FI_LOG_INFO && fi__parse_log_level("debug") == FI_LOG_DEBUG &&
          fi__parse_log_level("OFF") == FI_LOG_OFF && fi__parse_log_level("Warn") == FI_LOG_WARN);
    CHECK(fi__parse_log_level("abc") < 0 && fi__parse_log_level("5") < 0 &&
          fi__parse_log_level("") < 0 && fi__parse_log_level("33") < 0);

    /* FIJIT_LOG=abc: one warning naming it, and warnings still shown. The
     * level is the process's, which an earlier test's context may have set:
     * start from the default, as a fresh process does. */
    fi__log_set_level(FI_LOG_WARN);
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    snprintf(log, sizeof log, "%s/stderr.txt", check_tmpdir);
    opts.cache_dir = dir;
    opts.use_disk_cache = 0;
    int saved = stderr_to(log);
    CHECK(saved >= 0);
    setenv("FIJIT_LOG", "abc", 1);
    int rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_LOG");
    fi__log(FI_LOG_WARN, "a later warning");
    fi__log(FI_LOG_INFO, "an info line");
    /* A long message is printed whole. */
    char longer[2001];
    long_message(longer, sizeof longer);
    fi__log(FI_LOG_WARN, "long: %s", longer);
    stderr_restore(saved);
    fi_jit_ctx_free(ctx);
    fi__log_set_level(FI_LOG_WARN);
    CHECK_OK(rc);
    char text[4096] = "";
    FILE *f = fopen(log, "r");
    CHECK(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    CHECK_MSG(strstr(text, "FIJIT_LOG='abc' is not a log level") && strstr(text, "a later warning") &&
              !strstr(text, "an info line"), "stderr was: %s", text);
    CHECK_MSG(strstr(text, longer), "the long warning was cut: %zu bytes of stderr", n);
}

/* ---- libraries opened at run time (common/dynlib.h) ----------------------------- */

typedef struct math_api {
    double (*cos)(double);
    double (*missing)(double);
} math_api;

TEST(dynlib_fills_a_table_and_leaves_optional_entries_null)
{
    static const fi_dynlib_sym syms[] = {{"cos", offsetof(math_api, cos), 1},
                                         {"fijit_no_such_symbol", offsetof(math_api, missing), 0}};
    static const char *const names[] = {"libfijit-no-such-library.so.9", "libm.so.6", NULL};
    math_api api;
    char why[400] = "";
    memset(&api, 0xab, sizeof api);
    CHECK_MSG(fi__dynlib_load(&api, syms, 2, names, why, sizeof why) == 0, "%s", why);
    CHECK(api.cos && api.cos(0.0) == 1.0); /* the fallback name loaded */
    CHECK(api.missing == NULL);
}

TEST(dynlib_names_the_library_or_the_symbol_that_is_missing)
{
    static const fi_dynlib_sym required[] = {{"cos", offsetof(math_api, cos), 1},
                                             {"fijit_no_such_symbol", offsetof(math_api, missing), 1}};
    static const char *const absent[] = {"libfijit-no-such-library.so.9", NULL};
    static const char *const libm[] = {"libm.so.6", NULL};
    math_api api;
    char why[400] = "";
    CHECK(fi__dynlib_load(&api, required, 1, absent, why, sizeof why) == -1);
    CHECK_MSG(strstr(why, "libfijit-no-such-library.so.9") != NULL, "%s", why);
    CHECK(fi__dynlib_load(&api, required, 2, libm, why, sizeof why) == -1);
    CHECK_MSG(strcmp(why, "libm.so.6 lacks fijit_no_such_symbol") == 0, "%s", why);
}

/* ---- the log callback and the operator's settings -------------------------------- */

typedef struct log_record {
    int count;
    int levels[8];
    char texts[8][2100];
} log_record;

static void record_log(void *user, fi_log_level level, const char *message)
{
    log_record *r = user;
    if (r->count < 8) {
        r->levels[r->count] = (int)level;
        snprintf(r->texts[r->count], sizeof r->texts[0], "%s", message);
    }
    r->count++;
}

TEST(log_callback_receives_each_message_with_its_level_and_stderr_stays_quiet)
{
    char log[4300], longer[2001];
    log_record r;
    memset(&r, 0, sizeof r);
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    opts.use_disk_cache = 0;
    opts.log_level = FI_LOG_INFO;
    opts.log_fn = record_log;
    opts.log_user = &r;
    snprintf(log, sizeof log, "%s/stderr.txt", check_tmpdir);
    unsetenv("FIJIT_LOG");
    int saved = stderr_to(log);
    CHECK(saved >= 0);
    int rc = fi_jit_ctx_new(&ctx, &opts);
    fi__log(FI_LOG_WARN, "a warning %d", 7);
    fi__log(FI_LOG_INFO, "an info line");
    fi__log(FI_LOG_DEBUG, "a debug line"); /* below the level: nobody hears it */
    long_message(longer, sizeof longer);
    fi__log(FI_LOG_ERROR, "long: %s", longer);
    stderr_restore(saved);
    fi_jit_ctx_free(ctx);
    fi_log_set_callback(NULL, NULL);
    fi__log_set_level(FI_LOG_WARN);
    CHECK_OK(rc);
    CHECK_MSG(r.count == 3, "%d messages", r.count);
    CHECK(r.levels[0] == FI_LOG_WARN && strcmp(r.texts[0], "a warning 7") == 0);
    CHECK(r.levels[1] == FI_LOG_INFO && strcmp(r.texts[1], "an info line") == 0);
    CHECK_MSG(r.levels[2] == FI_LOG_ERROR && strstr(r.texts[2], "<end>"), "the long one was cut");
    struct stat sb;
    CHECK_MSG(stat(log, &sb) == 0 && sb.st_size == 0, "stderr got %lld bytes",
              (long long)sb.st_size);
}

TEST(options_of_version_2_never_read_the_log_fields)
{
    log_record r;
    memset(&r, 0, sizeof r);
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    opts.version = 2; /* a caller built before log_fn: what follows is not its */
    opts.use_disk_cache = 0;
    opts.log_fn = record_log;
    opts.log_user = &r;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    fi_jit_ctx_free(ctx);
    fi__log(FI_LOG_ERROR, "(expected on stderr: a version 2 caller has no log_fn)");
    CHECK(r.count == 0);
}

/* Write `text` to <dir>/fijit.conf (dir created). */
static void write_config(const char *dir, const char *text)
{
    char path[4300];
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/fijit.conf", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static const char *const setting_envs[] = {"FIJIT_JIT", "FIJIT_LOG", "FIJIT_MAX_CACHE_SIZE",
                                           "FIJIT_REMOTE", "FIJIT_UMASK", "FIJIT_LOCK_TIMEOUT_MS",
                                           "FIJIT_REMOTE_SECRET"};

TEST(settings_come_from_defaults_then_the_file_then_the_environment)
{
    char dir[4200];
    fi_settings s = FI_SETTINGS_INIT;
    for (size_t i = 0; i < sizeof setting_envs / sizeof *setting_envs; i++) unsetenv(setting_envs[i]);
    snprintf(dir, sizeof dir, "%s/conf", check_tmpdir);
    CHECK_OK(fi_settings_load(&s, dir)); /* no directory yet: the defaults */
    CHECK(s.file[0] == '\0' && s.jit == 1 && s.log_level == FI_LOG_WARN && s.umask == -1);
    CHECK(s.max_cache_bytes == FI_DEFAULT_MAX_CACHE_BYTES && s.max_cache_bytes_from == FI_SETTING_DEFAULT);

    write_config(dir, "# a comment\n\n  max_size = 0 \nlog_level=debug\njit = off\n"
                      "remote = redis://cache-host:6380/2\numask = 027\n");
    CHECK_OK(fi_settings_load(&s, dir));
    CHECK(strstr(s.file, "/conf/fijit.conf") != NULL);
    CHECK(s.max_cache_bytes == 0 && s.max_cache_bytes_from == FI_SETTING_FILE); /* 0: no limit */
    CHECK(s.log_level == FI_LOG_DEBUG && s.log_level_from == FI_SETTING_FILE);
    CHECK(s.jit == 0 && s.jit_from == FI_SETTING_FILE);
    CHECK(strcmp(s.remote, "redis://cache-host:6380/2") == 0 && s.remote_from == FI_SETTING_FILE);
    CHECK(s.umask == 027 && s.umask_from == FI_SETTING_FILE);

    setenv("FIJIT_MAX_CACHE_SIZE", "2G", 1);
    setenv("FIJIT_JIT", "Yes", 1);
    int rc = fi_settings_load(&s, dir);
    unsetenv("FIJIT_MAX_CACHE_SIZE");
    unsetenv("FIJIT_JIT");
    CHECK_OK(rc);
    CHECK(s.max_cache_bytes == (int64_t)2 << 30 && s.max_cache_bytes_from == FI_SETTING_ENV);
    CHECK(s.jit == 1 && s.jit_from == FI_SETTING_ENV);
    CHECK(strcmp(fi_setting_origin_name(FI_SETTING_FILE), "fijit.conf") == 0);

    /* The booleans' usual spellings, and nothing else. */
    static const char *const off[] = {"0", "false", "FALSE", "off", "no"};
    static const char *const bad[] = {"", "2", "nope", "falsey", " on"};
    for (int i = 0; i < 5; i++) CHECK(fi__parse_bool(off[i]) == 0);
    for (int i = 0; i < 5; i++) CHECK_MSG(fi__parse_bool(bad[i]) < 0, "'%s'", bad[i]);
    setenv("FIJIT_JIT", "maybe", 1);
    rc = fi_settings_load(&s, NULL);
    unsetenv("FIJIT_JIT");
    CHECK_RC(rc, FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "FIJIT_JIT: 'maybe' is not a boolean"), "%s", fi_last_error());
}

TEST(a_bad_configuration_file_is_refused_naming_file_and_line)
{
    char dir[4200], path[4300];
    fi_settings s = FI_SETTINGS_INIT;
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    for (size_t i = 0; i < sizeof setting_envs / sizeof *setting_envs; i++) unsetenv(setting_envs[i]);
    snprintf(dir, sizeof dir, "%s/conf", check_tmpdir);
    static const struct {
        const char *text, *words;
    } cases[] = {
        {"max_size = 1G\nmax_szie = 2G\n", "fijit.conf:2: unknown setting 'max_szie'"},
        {"\n\nmax_size = lots\n", "fijit.conf:3: max_size: 'lots' is not a size"},
        {"jit = off\njit = on\n", "fijit.conf:2: jit is set twice"},
        {"log_level\n", "fijit.conf:1: expected 'key = value'"},
        {"umask = 020\n", "fijit.conf:1: umask: umask 020 lets others write"},
        {"umask = 9\n", "fijit.conf:1: umask: '9' is not a umask"},
        {"remote = redis://h:http\n", "fijit.conf:1: remote: "},
        {"log_level = loud\n", "fijit.conf:1: log_level: 'loud' is not a log level"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_config(dir, cases[i].text);
        CHECK_RC(fi_settings_load(&s, dir), FI_EINVALID);
        CHECK_MSG(strstr(fi_last_error(), cases[i].words), "case %zu: %s", i, fi_last_error());
    }
    /* The library refuses it as the CLI does, and writes nothing. */
    opts.cache_dir = dir;
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    snprintf(path, sizeof path, "%s/index.sqlite", dir);
    CHECK(access(path, F_OK) != 0);
    /* Whoever may write the file chooses the remote: others must not. */
    write_config(dir, "max_size = 1G\n");
    snprintf(path, sizeof path, "%s/fijit.conf", dir);
    chmod(path, 0666);
    CHECK_RC(fi_settings_load(&s, dir), FI_EPERM);
    chmod(path, 0620); /* the group's members too: the file decides whom the dir trusts */
    CHECK_RC(fi_settings_load(&s, dir), FI_EPERM);
    chmod(path, 0644);
    CHECK_OK(fi_settings_load(&s, dir));
}

TEST(a_cache_umask_widens_private_modes_to_the_group)
{
    char path[4300];
    struct stat sb;
    snprintf(path, sizeof path, "%s/shared", check_tmpdir);
    fi__cache_umask_set(027);
    int made = fi__mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/shared/file", check_tmpdir);
    int fd = fi__open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    mode_t unsafe_shared = fi__cache_unsafe_bits();
    fi__cache_umask_set(007);
    mode_t unsafe_group_writes = fi__cache_unsafe_bits();
    fi__cache_umask_set(-1);
    CHECK(made == 0 && fd >= 0);
    fi__close(fd);
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640);
    snprintf(path, sizeof path, "%s/shared", check_tmpdir);
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0750);
    CHECK(unsafe_shared == (S_IWGRP | S_IWOTH) && unsafe_group_writes == S_IWOTH);
    CHECK(fi__cache_unsafe_bits() == (S_IWGRP | S_IWOTH));
    /* Without a umask what fijit creates stays private. */
    snprintf(path, sizeof path, "%s/private", check_tmpdir);
    CHECK(fi__mkdir(path, 0700) == 0 && stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0700);
}

/* ---- variables with no fijit.conf line --------------------------------------- */

/* fi_jit_ctx_new for a memory-only context with `name` set to `value`;
 * unset again afterwards. */
static int ctx_new_with_env(const char *name, const char *value)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    opts.use_disk_cache = 0;
    opts.arch = "sm_90a";
    setenv(name, value, 1);
    int rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv(name);
    fi_jit_ctx_free(ctx);
    return rc;
}

TEST(every_variable_without_a_setting_is_refused_at_context_creation)
{
    char not_dir[4300], missing[4300];
    snprintf(missing, sizeof missing, "%s/no-such-dir", check_tmpdir);
    write_config(check_tmpdir, "# a file, not a directory\n");
    snprintf(not_dir, sizeof not_dir, "%s/fijit.conf", check_tmpdir);
    const struct {
        const char *name, *value, *accepted;
    } bad[] = {
        {"FIJIT_PREFILL_WS", "persistentXYZ", "0, grid, persistent[:N] or static[:N]"},
        {"FIJIT_PREFILL_WS", "persistent:", "persistent[:N]"},
        {"FIJIT_PREFILL_WS", "persistent:0", "persistent[:N]"},
        {"FIJIT_PREFILL_WS", "static:-2", "static[:N]"},
        {"FIJIT_PREFILL_WS", "static:+2", "static[:N]"},
        {"FIJIT_PREFILL_WS", "static:3x", "static[:N]"},
        {"FIJIT_PREFILL_WS", "grid:3", "grid"},
        {"FIJIT_PREFILL_WS", "0:3", "grid"},
        {"FIJIT_PREFILL_WS", "off", "grid"},
        {"FIJIT_LOAD", "lazy", "auto, library or module"},
        {"FIJIT_LOAD", "Module", "auto, library or module"},
        {"FIJIT_FAST_COMPILE", "fast", "off, min, mid or max"},
        {"FIJIT_TEMPLATE_DIR", missing, "an existing directory"},
        {"FIJIT_TEMPLATE_DIR", not_dir, "an existing directory"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ctx_new_with_env(bad[i].name, bad[i].value);
        CHECK_MSG(rc == FI_EINVALID, "%s='%s' gave %d", bad[i].name, bad[i].value, rc);
        CHECK_MSG(strncmp(fi_last_error(), bad[i].name, strlen(bad[i].name)) == 0 &&
                      strstr(fi_last_error(), bad[i].accepted),
                  "%s='%s': %s", bad[i].name, bad[i].value, fi_last_error());
        /* fi_settings_load, which the CLI checks the environment with, says the same. */
        fi_settings s = FI_SETTINGS_INIT;
        setenv(bad[i].name, bad[i].value, 1);
        rc = fi_settings_load(&s, NULL);
        unsetenv(bad[i].name);
        CHECK_MSG(rc == FI_EINVALID && strstr(fi_last_error(), bad[i].name), "%s='%s': %d %s",
                  bad[i].name, bad[i].value, rc, fi_last_error());
    }
    const struct {
        const char *name, *value;
    } good[] = {
        {"FIJIT_PREFILL_WS", ""},          {"FIJIT_PREFILL_WS", "0"},
        {"FIJIT_PREFILL_WS", "grid"},      {"FIJIT_PREFILL_WS", "persistent"},
        {"FIJIT_PREFILL_WS", "static:12"}, {"FIJIT_PREFILL_WS", "persistent:3"},
        {"FIJIT_LOAD", "auto"},            {"FIJIT_LOAD", "library"},
        {"FIJIT_LOAD", "module"},          {"FIJIT_FAST_COMPILE", "off"},
        {"FIJIT_TEMPLATE_DIR", check_tmpdir},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = ctx_new_with_env(good[i].name, good[i].value);
        CHECK_MSG(rc == 0, "%s='%s': %s", good[i].name, good[i].value, fi_last_error());
    }
}

TEST(prefill_ws_values_parse_into_a_mode_and_a_count)
{
    fi_prefill_ws_choice choice;
    int ctas = -1;
    CHECK(fi__prefill_ws_choice_parse(&choice, &ctas, NULL) == 0 &&
          choice == FI_PREFILL_WS_DEFAULT && ctas == 0);
    CHECK(fi__prefill_ws_choice_parse(&choice, &ctas, "0") == 0 && choice == FI_PREFILL_WS_OFF);
    CHECK(fi__prefill_ws_choice_parse(&choice, &ctas, "grid") == 0 && choice == FI_PREFILL_WS_GRID);
    CHECK(fi__prefill_ws_choice_parse(&choice, &ctas, "persistent:3") == 0 &&
          choice == FI_PREFILL_WS_PERSISTENT && ctas == 3);
    CHECK(fi__prefill_ws_choice_parse(&choice, &ctas, "static") == 0 &&
          choice == FI_PREFILL_WS_STATIC && ctas == 0);
    /* A bad value sets no error: a launch that meets one takes the default. */
    fi__error(FI_EIO, "before");
    CHECK(fi__prefill_ws_choice_parse(&choice, &ctas, "persistentXYZ") < 0 &&
          choice == FI_PREFILL_WS_DEFAULT && ctas == 0);
    CHECK(strcmp(fi_last_error(), "before") == 0);
    CHECK_RC(fi__env_choice_check("FIJIT_NO_SUCH", "x"), FI_EINVALID);
}

/* The operator's FIJIT_REMOTE with a program that chose memory only (fijit
 * explain) is no warning; a program that asks for a remote and no disk cache
 * is warned. */
TEST(a_memory_only_context_warns_of_an_unused_remote_only_when_the_program_asked)
{
    log_record r;
    memset(&r, 0, sizeof r);
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_ctx *ctx = NULL;
    opts.use_disk_cache = 0;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_WARN;
    opts.log_fn = record_log;
    opts.log_user = &r;
    unsetenv("FIJIT_LOG");
    setenv("FIJIT_REMOTE", "redis://127.0.0.1:1", 1);
    int env_rc = fi_jit_ctx_new(&ctx, &opts);
    fi_jit_ctx_free(ctx);
    ctx = NULL;
    const int env_count = r.count;
    opts.log_level = FI_LOG_INFO;
    int info_rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_REMOTE");
    fi_jit_ctx_free(ctx);
    ctx = NULL;
    const int info_count = r.count;
    opts.log_level = FI_LOG_WARN;
    opts.remote = "redis://127.0.0.1:1";
    int opt_rc = fi_jit_ctx_new(&ctx, &opts);
    fi_jit_ctx_free(ctx);
    fi_log_set_callback(NULL, NULL);
    fi__log_set_level(FI_LOG_WARN);
    CHECK_OK(env_rc);
    CHECK_OK(info_rc);
    CHECK_OK(opt_rc);
    CHECK_MSG(env_count == 0, "%d messages, the first: %s", env_count, r.texts[0]);
    CHECK_MSG(info_count == 1 && r.levels[0] == FI_LOG_INFO &&
                  strstr(r.texts[0], "remote cache is not used"),
              "%d messages", info_count);
    CHECK_MSG(r.count == 2 && r.levels[1] == FI_LOG_WARN &&
                  strstr(r.texts[1], "remote cache is not used"),
              "%d messages", r.count);
}
