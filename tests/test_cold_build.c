/*
 * Cold builds: what a compile's speed settings may and may not change.
 * The cubin a key names is the same bytes whichever cache builds it; a
 * tuple built in parts side by side (src/kinds/prefill.c parts) has each
 * kernel's code exactly as the whole module has it, and prewarm stores every
 * part; FIJIT_FAST_COMPILE (NVRTC -Ofast-compile: other code, built sooner)
 * builds under keys of its own, so that no default build is served its
 * kernels and none of its kernels is served to a default build.
 */
#include <dlfcn.h>
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/error.h"
#include "common/sys.h"
#include "fake_cuda.h"
#include "core/expand.h"
#include "kinds/registry.h"
#include "store/object.h"
#include "store/store.h"
#include "toolchain/nvrtc.h"

/* The cheapest tuple to compile (decode's one kernel, at head_dim 64). */
#define COLD_SPEC "decode q=fp16 hd=64"

static void append(void *user, const char *text) { strcat(user, text); }

/* The key fi_jit_explain reports for `spec` on ctx's arch ("key <hex>"). */
static int explained_key(fi_jit_ctx *ctx, const fi_jit_spec *spec, char *text, uint8_t key[16])
{
    text[0] = '\0';
    int rc = fi_jit_explain(ctx, spec, NULL, append, text);
    if (rc < 0) return rc;
    const char *line = strstr(text, "\nkey ");
    char hex[33] = "";
    if (line) snprintf(hex, sizeof hex, "%.32s", line + 5);
    return fi_key_from_hex(hex, key) == 0 ? 0 : fi__error(FI_EINVALID, "no key in the explain output");
}

/* The object cached under `key` in `dir`, read and verified by the store
 * (fi__free). */
static int cached_object(const char *dir, const uint8_t key[16], void **out, size_t *out_size)
{
    fi_store *store = NULL;
    int rc = fi_store_open(&store, dir, 0, 0);
    if (rc == 0) rc = fi_store_get(store, key, out, out_size, NULL);
    fi_store_close(store);
    return rc;
}

TEST(cold_build_same_key_same_cubin_bytes)
{
    /* Two empty caches build one tuple: the same key, byte for byte the same
     * cubin (what lets a fleet share entries, and what any speed-up that
     * keeps the key must keep). */
    fi_jit_spec spec = parse_or_die(COLD_SPEC);
    char dirs[2][4200], text[2][16384];
    uint8_t keys[2][16];
    void *objects[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    fi_build_outcome outcome;
    for (int i = 0; i < 2; i++) {
        fi_jit_ctx *ctx = NULL;
        snprintf(dirs[i], sizeof dirs[i], "%s/cache%d", check_tmpdir, i);
        CHECK_OK(check_ctx_in(&ctx, dirs[i], "sm_90a"));
        int rc = fi_jit_prewarm(&outcome, ctx, &spec, NULL);
        if (rc == 0) rc = explained_key(ctx, &spec, text[i], keys[i]);
        fi_jit_ctx_free(ctx);
        CHECK_OK(rc);
        CHECK(outcome == FI_BUILD_COMPILED);
        CHECK_OK(cached_object(dirs[i], keys[i], &objects[i], &sizes[i]));
    }
    const int same_key = memcmp(keys[0], keys[1], 16) == 0;
    const int same_bytes = sizes[0] == sizes[1] && memcmp(objects[0], objects[1], sizes[0]) == 0;
    fi__free(objects[0]);
    fi__free(objects[1]);
    CHECK(same_key);
    CHECK_MSG(same_bytes, "two cold builds of one key gave cubins of %zu and %zu bytes that differ",
              sizes[0], sizes[1]);
}

TEST(fast_compile_level_refused_unless_known)
{
    static const char *const bad[] = {"fast", "MID", "mid ", "1", "max,min"};
    fi_jit_ctx *ctx = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FIJIT_FAST_COMPILE", bad[i], 1);
        int rc = check_ctx_new(&ctx, "sm_90a");
        unsetenv("FIJIT_FAST_COMPILE");
        CHECK_MSG(rc == FI_EINVALID && !ctx, "FIJIT_FAST_COMPILE='%s' gave %d", bad[i], rc);
        CHECK_MSG(strstr(fi_last_error(), "FIJIT_FAST_COMPILE") &&
                      strstr(fi_last_error(), "off, min, mid or max"),
                  "message: %s", fi_last_error());
    }
    static const char *const good[] = {"", "off", "min", "mid", "max"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("FIJIT_FAST_COMPILE", good[i], 1);
        int rc = check_ctx_new(&ctx, "sm_90a");
        unsetenv("FIJIT_FAST_COMPILE");
        fi_jit_ctx_free(ctx);
        ctx = NULL;
        CHECK_MSG(rc == 0, "FIJIT_FAST_COMPILE='%s': %s", good[i], fi_last_error());
    }
}

TEST(fast_compile_builds_under_its_own_key)
{
    fi_jit_spec spec = parse_or_die(COLD_SPEC);
    char dir[4200], text[16384];
    uint8_t default_key[16], fast_key[16];
    fi_jit_ctx *plain = NULL, *fast = NULL;
    fi_build_outcome outcome[4];
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    CHECK_OK(check_ctx_in(&plain, dir, "sm_90a"));
    setenv("FIJIT_FAST_COMPILE", "max", 1);
    int rc = check_ctx_in(&fast, dir, "sm_90a");
    unsetenv("FIJIT_FAST_COMPILE");
    if (rc < 0) fi_jit_ctx_free(plain);
    CHECK_OK(rc);
    /* Default, fast, fast again, default again, into one cache. */
    if ((rc = fi_jit_prewarm(&outcome[0], plain, &spec, NULL)) == 0 &&
        (rc = fi_jit_prewarm(&outcome[1], fast, &spec, NULL)) == 0 &&
        (rc = fi_jit_prewarm(&outcome[2], fast, &spec, NULL)) == 0 &&
        (rc = fi_jit_prewarm(&outcome[3], plain, &spec, NULL)) == 0 &&
        (rc = explained_key(fast, &spec, text, fast_key)) == 0 &&
        !strstr(text, "\"--Ofast-compile=max\""))
        rc = -1000;
    if (rc == 0 && (rc = explained_key(plain, &spec, text, default_key)) == 0 &&
        strstr(text, "Ofast-compile"))
        rc = -1001;
    fi_jit_ctx_free(plain);
    fi_jit_ctx_free(fast);
    CHECK_MSG(rc == 0, "rc %d (-1000: the fast key lacks its option, -1001: the default key "
              "has it): %.2000s", rc, rc < -999 ? text : fi_last_error());
    CHECK(outcome[0] == FI_BUILD_COMPILED);
    CHECK_MSG(outcome[1] == FI_BUILD_COMPILED, "a fast build was served the default build's entry");
    CHECK(outcome[2] == FI_BUILD_CACHED);
    CHECK(outcome[3] == FI_BUILD_CACHED);
    CHECK(memcmp(default_key, fast_key, 16) != 0);
}

/* The bytes of section `name` of an ELF64 image (a cubin): 0, or -1 when the
 * image has no such section or is not one. */
static int elf_section(const unsigned char *image, size_t size, const char *name,
                       const unsigned char **out, size_t *out_size)
{
    const Elf64_Ehdr *eh = (const void *)image;
    if (size < sizeof *eh || memcmp(image, ELFMAG, SELFMAG) != 0 || eh->e_shoff > size ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shstrndx >= eh->e_shnum ||
        (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
        return -1;
    const Elf64_Shdr *sh = (const void *)(image + eh->e_shoff);
    const Elf64_Shdr *names = &sh[eh->e_shstrndx];
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_name >= names->sh_size || names->sh_offset + names->sh_size > size) return -1;
        const char *n = (const char *)image + names->sh_offset + sh[i].sh_name;
        if (strncmp(n, name, names->sh_size - sh[i].sh_name) != 0) continue;
        const size_t bytes = sh[i].sh_type == SHT_NOBITS ? 0 : sh[i].sh_size;
        if (sh[i].sh_offset > size || bytes > size - sh[i].sh_offset) return -1;
        *out = image + sh[i].sh_offset;
        *out_size = bytes;
        return 0;
    }
    return -1;
}

/* 1 when section `name` is as long in both images and, with `bytes`, holds
 * the same bytes. */
static int same_section(const void *a, size_t a_size, const void *b, size_t b_size,
                        const char *name, int bytes)
{
    const unsigned char *x, *y;
    size_t x_size, y_size;
    return elf_section(a, a_size, name, &x, &x_size) == 0 &&
           elf_section(b, b_size, name, &y, &y_size) == 0 && x_size == y_size &&
           (!bytes || memcmp(x, y, x_size) == 0);
}

/* Bytes of kernel `entry`'s code in `image`, -1 when it has none. */
static long text_bytes(const void *image, size_t size, const char *entry)
{
    char name[160];
    const unsigned char *text;
    size_t bytes;
    snprintf(name, sizeof name, ".text.%s", entry);
    return elf_section(image, size, name, &text, &bytes) == 0 ? (long)bytes : -1;
}

/* The whole module of `spec` (every kernel, as before parts), compiled with
 * the options the explain listing `text` names. */
static int compile_whole(const fi_jit_spec *spec, const char *text, fi_compile_output *out)
{
    const char *options[16], *names[FI_TU_MAX_HEADERS], *sources[FI_TU_MAX_HEADERS];
    char copy[16384];
    int option_count = 0;
    fi_translation_unit tu;
    snprintf(copy, sizeof copy, "%s", text);
    /* Lines: option <spaces> N bytes  "value" (the first part's listing). */
    for (char *line = strtok(copy, "\n"); line && !strstr(line, "key "); line = strtok(NULL, "\n")) {
        char *open = strchr(line, '"'), *close = strrchr(line, '"');
        if (strncmp(line, "option ", 7) != 0 || !open || close == open || option_count == 16) continue;
        *close = '\0';
        options[option_count++] = open + 1;
    }
    int rc = fi__expand(&tu, spec, NULL);
    if (rc < 0) return rc;
    for (int i = 0; i < tu.header_count; i++) {
        names[i] = tu.header_names[i];
        sources[i] = tu.header_texts[i];
    }
    fi_compile_input in = {tu.text, tu.name, tu.header_count, names, sources, option_count, options, 0};
    rc = option_count ? fi__nvrtc_compile(&in, out) : fi__error(FI_EINVALID, "no options listed");
    fi__tu_free(&tu);
    return rc;
}

/* The keys of a tuple's parts, in the order explain lists them. */
static int part_keys(const char *text, uint8_t keys[][16], int max)
{
    int n = 0;
    for (const char *p = strstr(text, "\nkey "); p && n < max; p = strstr(p + 1, "\nkey ")) {
        char hex[33];
        snprintf(hex, sizeof hex, "%.32s", p + 5);
        if (fi_key_from_hex(hex, keys[n++]) < 0) return -1;
    }
    return n;
}

TEST(prefill_parts_hold_each_kernel_as_the_whole_module_does)
{
    /* The cheapest tuple split on sm_90a: its two parts built by prewarm,
     * then each kernel compared with the whole module's (one NVRTC program,
     * as a tuple was built before parts): in the part that builds it the
     * same code, byte for byte, and metadata of the same length (its bytes
     * differ in the symbol numbers, each module's own); in the other a stub
     * (no more code). */
    fi_jit_spec spec = parse_or_die("batch_prefill_ragged q=fp16 hd=64 mask=causal");
    const fi_kind_info *kind = fi__kind_info(spec.kind);
    char dir[4200], text[16384];
    uint8_t keys[2][16];
    void *parts[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    fi_compile_output whole = {0};
    fi_build_outcome first, again;
    fi_jit_stats st = FI_JIT_STATS_INIT;
    fi_jit_ctx *ctx = NULL;
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    CHECK_OK(check_ctx_in(&ctx, dir, "sm_90a"));
    int rc = fi_jit_prewarm(&first, ctx, &spec, NULL);
    if (rc == 0) rc = fi_jit_prewarm(&again, ctx, &spec, NULL);
    if (rc == 0) rc = fi_jit_stats_get(&st, ctx);
    if (rc == 0) {
        text[0] = '\0';
        rc = fi_jit_explain(ctx, &spec, NULL, append, text);
    }
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    CHECK(first == FI_BUILD_COMPILED && again == FI_BUILD_CACHED);
    CHECK_MSG(st.compiles == 2 && st.entries == 2, "compiles %lld, entries %lld",
              (long long)st.compiles, (long long)st.entries);
    CHECK_MSG(part_keys(text, keys, 2) == 2 && strstr(text, "part 2 of 2"), "%.3000s", text);
    for (int p = 0; p < 2 && rc == 0; p++) rc = cached_object(dir, keys[p], &parts[p], &sizes[p]);
    if (rc == 0) rc = compile_whole(&spec, text, &whole);
    int bad = rc < 0 ? -1 : 0;
    char what[512] = "";
    const char *second = strstr(text, "part 2 of 2, building");
    for (int e = 0; bad == 0 && second && e < fi__kind_entry_count(kind); e++) {
        char text_name[160], info_name[160], listed[160];
        const char *entry = kind->entries[e];
        snprintf(text_name, sizeof text_name, ".text.%s", entry);
        snprintf(info_name, sizeof info_name, ".nv.info.%s", entry);
        snprintf(listed, sizeof listed, " %s", entry);
        /* The part whose "building" line names the entry. */
        const char *at = strstr(text, listed);
        const int p = at && at > second ? 1 : 0;
        const long full = text_bytes(whole.cubin, whole.cubin_size, entry);
        const long stub = text_bytes(parts[1 - p], sizes[1 - p], entry);
        if (!at || !same_section(whole.cubin, whole.cubin_size, parts[p], sizes[p], text_name, 1) ||
            !same_section(whole.cubin, whole.cubin_size, parts[p], sizes[p], info_name, 0) ||
            stub < 0 || stub > full) {
            bad = 1;
            snprintf(what, sizeof what, "%s (built in part %d): whole module %ld bytes of code, "
                     "parts %ld and %ld", entry, p + 1, full, text_bytes(parts[0], sizes[0], entry),
                     text_bytes(parts[1], sizes[1], entry));
        }
    }
    fi__free(parts[0]);
    fi__free(parts[1]);
    fi__compile_output_free(&whole);
    CHECK_MSG(rc == 0, "%s", fi_last_error());
    CHECK_MSG(bad == 0, "%s", what);
}

/* The fake driver's context current on this thread, and its module count. */
static int fake_context(fake_cuda_modules_in_fn *modules_in, CUcontext *here)
{
    void *fake = check_fake_cuda();
    if (!fake || check_fake_cuda_current() < 0) return -1;
    *(void **)modules_in = dlsym(fake, "fake_cuda_modules_in");
    CUresult (*current)(CUcontext *) = (CUresult(*)(CUcontext *))dlsym(fake, "cuCtxGetCurrent");
    return *modules_in && current && current(here) == CUDA_SUCCESS ? 0 : -1;
}

TEST(prefill_parts_load_as_one_kernel)
{
    /* On the fake driver: a miss builds the parts on threads of their own
     * and loads each as a module; a context that may not compile (jit off)
     * then loads what prewarm stored, with no compile; later calls are
     * lookups. */
    fi_jit_spec spec = parse_or_die("batch_prefill_ragged q=fp16 hd=64 mask=causal");
    const fi_kind_info *kind = fi__kind_info(spec.kind);
    fake_cuda_modules_in_fn modules_in = NULL;
    CUcontext here = NULL;
    CHECK(fake_context(&modules_in, &here) == 0);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    fi_jit_ctx *built = NULL, *served = NULL;
    const fi_jit_kernel *k = NULL, *again = NULL;
    fi_jit_stats st = FI_JIT_STATS_INIT, start = FI_JIT_STATS_INIT;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_OFF;
    opts.jit = 0;
    const int before = modules_in(here);
    CHECK_OK(check_ctx_in(&built, dir, "sm_90a"));
    int rc = fi_jit_get_kernel(&k, built, &spec);
    const int loaded = modules_in(here) - before;
    if (rc == 0) rc = fi_jit_ctx_new(&served, &opts);
    fi_jit_ctx_free(built);
    CHECK_OK(rc);
    CHECK_MSG(loaded == 2, "%d modules loaded for a tuple of two parts", loaded);
    rc = fi_jit_stats_get(&start, served); /* the cache's counts so far */
    if (rc == 0) rc = fi_jit_get_kernel(&k, served, &spec);
    if (rc == 0) rc = fi_jit_get_kernel(&again, served, &spec);
    if (rc == 0) rc = fi_jit_stats_get(&st, served);
    int missing = rc == 0 ? 0 : -1;
    for (int i = 0; rc == 0 && i < fi__kind_entry_count(kind); i++) missing += !k->functions[i];
    const int function_is_main = rc == 0 && k->function == k->functions[0];
    const int same = k == again;
    fi_jit_ctx_free(served);
    CHECK_MSG(rc == 0, "%s", fi_last_error());
    CHECK_MSG(missing == 0 && function_is_main && same, "missing %d, main %d, same %d", missing,
              function_is_main, same);
    st.compiles -= start.compiles;
    st.disk_hits -= start.disk_hits;
    st.memory_hits -= start.memory_hits;
    CHECK_MSG(st.compiles == 0 && st.disk_hits == 2 && st.memory_hits == 1,
              "compiles %lld, disk hits %lld, memory hits %lld", (long long)st.compiles,
              (long long)st.disk_hits, (long long)st.memory_hits);
}

TEST(prefill_parts_cover_the_hopper_tuples_and_only_them)
{
    /* Every 16-bit prefill tuple without a custom mask is built in two parts
     * on sm_90a (the kind's parts hold each entry once, or it would be built
     * whole); fp8, custom masks, other archs and other kinds in one. */
    static const int kinds[] = {FI_KIND_PREFILL, FI_KIND_BATCH_PREFILL_RAGGED,
                                FI_KIND_BATCH_PREFILL_PAGED, FI_KIND_DECODE, FI_KIND_BATCH_DECODE};
    static fi_jit_spec specs[1024];
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    int wrong = 0, split = 0;
    char first[256] = "";
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const int n = fi_jit_spec_enumerate(specs, sizeof specs / sizeof specs[0], kinds[k]);
        for (int i = 0; i < n && n <= (int)(sizeof specs / sizeof specs[0]); i++) {
            const fi_jit_spec *s = &specs[i];
            const int prefill = kinds[k] != FI_KIND_DECODE && kinds[k] != FI_KIND_BATCH_DECODE;
            const int hopper = prefill && s->q_dtype != FI_DTYPE_FP8_E4M3 && s->mask != FI_MASK_CUSTOM;
            const int on_90a = check_modules_of(ctx, s, 1, "sm_90a");
            const int on_80 = s->q_dtype == FI_DTYPE_FP8_E4M3 ? 1 : check_modules_of(ctx, s, 1, "sm_80");
            split += on_90a == 2;
            if (on_90a != (hopper ? 2 : 1) || on_80 != 1) {
                if (!wrong++) fi_jit_spec_format(first, sizeof first, s);
            }
        }
    }
    fi_jit_ctx_free(ctx);
    CHECK_MSG(wrong == 0 && split > 0, "%d tuples built in the wrong number of parts, first %s",
              wrong, first);
}

/* One miss of `spec` in a fresh context on `dir` with the Nth call of
 * `mask`'s class failing once, then the same call again: how each went, the
 * modules loaded in all, and the compiles the cache has counted. */
typedef struct fault_run {
    int first, second, loaded;
    long fired;
    long long compiles;
    char message[256];
} fault_run;

static fault_run miss_with_fault(const char *dir, const fi_jit_spec *spec, unsigned mask, long nth,
                                 fake_cuda_modules_in_fn modules_in, CUcontext here)
{
    fault_run r = {-1, -1, 0, 0, -1, ""};
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_stats st = FI_JIT_STATS_INIT;
    if (check_ctx_in(&ctx, dir, "sm_90a") < 0) return r;
    const int before = modules_in(here);
    fi__fault_arm(mask, nth, 0);
    r.first = fi_jit_get_kernel(&k, ctx, spec);
    r.fired = fi__fault_count();
    fi__fault_arm(0, 0, 0);
    snprintf(r.message, sizeof r.message, "%s", fi_last_error());
    r.second = fi_jit_get_kernel(&k, ctx, spec);
    r.loaded = modules_in(here) - before;
    if (fi_jit_stats_get(&st, ctx) == 0) r.compiles = st.compiles;
    fi_jit_ctx_free(ctx);
    return r;
}

TEST(prefill_parts_recover_from_a_failed_part)
{
    /* A miss whose parts fail one at a time: an NVRTC call of either part's
     * compile, or the Nth driver call of loading them. The call says why;
     * the next one builds or loads only what is missing and serves the
     * kernel from two modules; nothing leaks (ASan). */
    fi_jit_spec spec = parse_or_die("batch_prefill_ragged q=fp16 hd=64 mask=causal");
    fake_cuda_modules_in_fn modules_in = NULL;
    CUcontext here = NULL;
    CHECK(fake_context(&modules_in, &here) == 0);
    /* NVRTC: a call early in one part's build and one late (the parts run
     * side by side, so which part is not fixed); a fresh cache each. */
    static const long nvrtc_calls[] = {1, 6};
    for (size_t i = 0; i < sizeof nvrtc_calls / sizeof nvrtc_calls[0]; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/nvrtc-%ld", check_tmpdir, nvrtc_calls[i]);
        fault_run r = miss_with_fault(dir, &spec, FI_FAULT_NVRTC, nvrtc_calls[i], modules_in, here);
        CHECK_MSG(r.fired == 1 && r.first == FI_ENOMEM && *r.message,
                  "NVRTC fault %ld (fired %ld): rc %d, '%s'", nvrtc_calls[i], r.fired, r.first,
                  r.message);
        CHECK_MSG(r.second == 0 && r.loaded == 2 && r.compiles == 2,
                  "after NVRTC fault %ld: rc %d, %d modules, %lld compiles", nvrtc_calls[i],
                  r.second, r.loaded, r.compiles);
    }
    /* The driver: every call in turn, on a cache that holds both parts. */
    char dir[4200];
    fi_jit_ctx *ctx = NULL;
    snprintf(dir, sizeof dir, "%s/driver", check_tmpdir);
    CHECK_OK(check_ctx_in(&ctx, dir, "sm_90a"));
    int rc = fi_jit_prewarm(NULL, ctx, &spec, NULL);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    for (long nth = 1; nth < 64; nth++) {
        fault_run r = miss_with_fault(dir, &spec, FI_FAULT_DRIVER, nth, modules_in, here);
        CHECK_MSG(r.fired ? r.first < 0 && *r.message : r.first == 0,
                  "driver fault %ld (fired %ld): rc %d, '%s'", nth, r.fired, r.first, r.message);
        CHECK_MSG(r.second == 0 && r.loaded == 2 && r.compiles == 2,
                  "after driver fault %ld: rc %d, %d modules, %lld compiles", nth, r.second,
                  r.loaded, r.compiles);
        if (!r.fired) break; /* past the miss's last driver call */
    }
}
