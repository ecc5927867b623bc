/*
 * Loading a kernel for several CUDA contexts (src/core/load.h), against the
 * fake driver (tests/fake_cuda.c, two devices): with context-independent
 * loading one library per kernel serves every context, device and
 * fi_jit_ctx of the process, each context getting its own function and each
 * device its shared memory opt-in once; FIJIT_LOAD=module, and a driver
 * without the library calls (the fake built without them, which this test
 * runs itself again on), load a module per context as before. The fake
 * counts the driver calls, binds each function to its context and refuses
 * a launch elsewhere. Nothing executes. Threads on two devices loading the
 * same kernels are test_multi_context's (one library load per kernel there).
 */
#include <dlfcn.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda.h"

#define DEVICES 2
#define OLD_DRIVER_TEST "a_driver_without_libraries_loads_a_module_per_context"

/* A decode kernel, and one whose ring (56 KiB with the RoPE staging tile)
 * needs the dynamic shared memory opt-in. */
static const char *const spec_texts[] = {
    "decode q=fp16 hd=64",
    "decode q=bf16 hd=64 pos=rope",
};
#define SPECS 2
#define SPEC_PLAIN 0
#define SPEC_OPT_IN 1

/* ---- the fake driver -------------------------------------------------------- */

static struct {
    void *lib;
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*create)(CUcontext *, unsigned, CUdevice);
    CUresult (*destroy)(CUcontext);
    CUresult (*func_get_attribute)(int *, CUfunction_attribute, CUfunction);
    fake_cuda_set_device_count_fn set_device_count;
    fake_cuda_function_context_fn function_context;
    fake_cuda_modules_in_fn modules_in;
    fake_cuda_libraries_loaded_fn libraries_loaded;
    fake_cuda_calls_fn calls;
    fake_cuda_fail_next_fn fail_next;
    CUcontext primary[DEVICES];
} fake;

/* Loads the fake with two devices and retains their primary contexts; 0 on failure. */
static int fake_ready(void)
{
    if (fake.primary[0]) return 1;
    if (!(fake.lib = check_fake_cuda())) return 0;
    *(void **)&fake.primary_retain = dlsym(fake.lib, "cuDevicePrimaryCtxRetain");
    *(void **)&fake.set_current = dlsym(fake.lib, "cuCtxSetCurrent");
    *(void **)&fake.create = dlsym(fake.lib, "cuCtxCreate_v2");
    *(void **)&fake.destroy = dlsym(fake.lib, "cuCtxDestroy_v2");
    *(void **)&fake.func_get_attribute = dlsym(fake.lib, "cuFuncGetAttribute");
    *(void **)&fake.set_device_count = dlsym(fake.lib, "fake_cuda_set_device_count");
    *(void **)&fake.function_context = dlsym(fake.lib, "fake_cuda_function_context");
    *(void **)&fake.modules_in = dlsym(fake.lib, "fake_cuda_modules_in");
    *(void **)&fake.libraries_loaded = dlsym(fake.lib, "fake_cuda_libraries_loaded");
    *(void **)&fake.calls = dlsym(fake.lib, "fake_cuda_calls");
    *(void **)&fake.fail_next = dlsym(fake.lib, "fake_cuda_fail_next");
    if (!fake.primary_retain || !fake.set_current || !fake.create || !fake.destroy ||
        !fake.func_get_attribute || !fake.set_device_count || !fake.function_context ||
        !fake.modules_in || !fake.libraries_loaded || !fake.calls || !fake.fail_next)
        return 0;
    fake.set_device_count(DEVICES);
    for (int d = 0; d < DEVICES; d++)
        if (fake.primary_retain(&fake.primary[d], d) != CUDA_SUCCESS) return 0;
    return fake.set_current(fake.primary[0]) == CUDA_SUCCESS;
}

/* Successful calls of the driver entry points a load makes. */
typedef struct load_calls {
    int library_loads, library_unloads, kernels, functions, kernel_attributes;
    int module_loads, module_unloads;
} load_calls;

static load_calls calls_now(void)
{
    return (load_calls){fake.calls("cuLibraryLoadData"),   fake.calls("cuLibraryUnload"),
                        fake.calls("cuLibraryGetKernel"),  fake.calls("cuKernelGetFunction"),
                        fake.calls("cuKernelSetAttribute"), fake.calls("cuModuleLoadData"),
                        fake.calls("cuModuleUnload")};
}

static load_calls calls_since(load_calls before)
{
    load_calls now = calls_now();
    return (load_calls){now.library_loads - before.library_loads,
                        now.library_unloads - before.library_unloads,
                        now.kernels - before.kernels,
                        now.functions - before.functions,
                        now.kernel_attributes - before.kernel_attributes,
                        now.module_loads - before.module_loads,
                        now.module_unloads - before.module_unloads};
}

static fi_jit_spec spec_number(int i) { return parse_or_die(spec_texts[i]); }

static const char *warm_cache(void) { return check_shared_cache(spec_texts, SPECS); }

/* A new fi_jit_ctx on the warm cache, device 0's primary context current; 0 on failure. */
static int fresh_ctx_on_device_0(fi_jit_ctx **out)
{
    const char *dir = warm_cache();
    return fake_ready() && dir && fake.set_current(fake.primary[0]) == CUDA_SUCCESS &&
           check_ctx_on(out, dir, 1) == 0;
}

/* ---- kernels ------------------------------------------------------------------- */

/* How many entry points (functions) the kernel has. */
static int entries_of(const fi_jit_kernel *k)
{
    int n = 0;
    while (n < FI_JIT_MAX_FUNCTIONS && k->functions[n]) n++;
    return n;
}

/* ---- one library for every context -------------------------------------------- */

TEST(one_library_serves_every_context_and_device)
{
    fi_jit_ctx *ctx = NULL;
    CUcontext created = NULL;
    const fi_jit_kernel *k[3] = {NULL}, *again = NULL;
    fi_jit_spec s = spec_number(SPEC_PLAIN);
    const char *dir = warm_cache();
    CHECK(fake_ready() && dir);
    CHECK(fake.libraries_loaded() == 0);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    CHECK(fake.create(&created, 0, 0) == CUDA_SUCCESS);
    const CUcontext contexts[3] = {fake.primary[0], fake.primary[1], created};
    const load_calls before = calls_now();
    for (int c = 0; c < 3; c++) {
        CHECK(fake.set_current(contexts[c]) == CUDA_SUCCESS);
        CHECK_OK(fi_jit_get_kernel(&k[c], ctx, &s));
        CHECK(fake.function_context(k[c]->function) == contexts[c]);
        CHECK(fake.modules_in(contexts[c]) == 1);
        CHECK_OK(check_fake_decode(ctx, &s));
    }
    const int entries = entries_of(k[0]);
    load_calls n = calls_since(before);
    CHECK_MSG(n.library_loads == 1 && n.kernels == entries && n.module_loads == 0,
              "library loads %d, kernels %d (entries %d), module loads %d", n.library_loads,
              n.kernels, entries, n.module_loads);
    CHECK_MSG(n.functions == 3 * entries, "functions %d, want %d", n.functions, 3 * entries);
    CHECK(fake.libraries_loaded() == 1);
    CHECK(k[0]->function != k[1]->function && k[0]->function != k[2]->function);
    /* Later calls are lookups: no driver call at all. */
    for (int c = 2; c >= 0; c--) {
        CHECK(fake.set_current(contexts[c]) == CUDA_SUCCESS);
        CHECK_OK(fi_jit_get_kernel(&again, ctx, &s));
        CHECK(again == k[c]);
    }
    n = calls_since(before);
    CHECK(n.library_loads == 1 && n.functions == 3 * entries);
    /* Freeing the fi_jit_ctx unloads the library from every context, with
     * no context current or switched to. */
    CHECK(fake.set_current(NULL) == CUDA_SUCCESS);
    fi_jit_ctx_free(ctx);
    CHECK(fake.libraries_loaded() == 0 && calls_since(before).library_unloads == 1);
    for (int c = 0; c < 3; c++) CHECK(fake.modules_in(contexts[c]) == 0);
    CHECK(fake.destroy(created) == CUDA_SUCCESS);
}

TEST(two_jit_contexts_share_one_library)
{
    fi_jit_ctx *a = NULL, *b = NULL;
    const fi_jit_kernel *ka = NULL, *kb = NULL;
    fi_jit_spec s = spec_number(SPEC_PLAIN);
    const char *dir = warm_cache();
    CHECK(fake_ready() && dir);
    CHECK(fake.set_current(fake.primary[0]) == CUDA_SUCCESS);
    CHECK_OK(check_ctx_on(&a, dir, 1));
    CHECK_OK(check_ctx_on(&b, dir, 1));
    const load_calls before = calls_now();
    CHECK_OK(fi_jit_get_kernel(&ka, a, &s));
    CHECK_OK(fi_jit_get_kernel(&kb, b, &s));
    CHECK(ka != kb && ka->function == kb->function); /* one kernel, one context: one function */
    CHECK(calls_since(before).library_loads == 1 && fake.libraries_loaded() == 1);
    fi_jit_ctx_free(a);
    CHECK(fake.libraries_loaded() == 1); /* b still holds it */
    CHECK_OK(check_fake_decode(b, &s));
    fi_jit_ctx_free(b);
    CHECK(fake.libraries_loaded() == 0);
}

TEST(the_shared_memory_opt_in_is_set_once_per_device)
{
    fi_jit_ctx *ctx = NULL;
    CUcontext created = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(SPEC_OPT_IN);
    const char *dir = warm_cache();
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    CHECK(fake.create(&created, 0, 0) == CUDA_SUCCESS);
    /* Two contexts on device 0, one on device 1. */
    const CUcontext contexts[3] = {fake.primary[0], created, fake.primary[1]};
    const load_calls before = calls_now();
    for (int c = 0; c < 3; c++) {
        int opt_in = 0;
        CHECK(fake.set_current(contexts[c]) == CUDA_SUCCESS);
        CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
        CHECK_MSG(k->smem_bytes > 48 * 1024, "smem %u: the test needs a kernel above 48 KiB",
                  k->smem_bytes);
        CHECK(fake.func_get_attribute(&opt_in, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      k->function) == CUDA_SUCCESS);
        CHECK_MSG(opt_in == (int)k->smem_bytes, "context %d: opt-in %d, smem %u", c, opt_in,
                  k->smem_bytes);
        CHECK_OK(check_fake_decode(ctx, &s));
    }
    load_calls n = calls_since(before);
    CHECK_MSG(n.kernel_attributes == DEVICES, "cuKernelSetAttribute %d times, want %d",
              n.kernel_attributes, DEVICES);
    fi_jit_ctx_free(ctx);
    CHECK(fake.destroy(created) == CUDA_SUCCESS);
}

/* Destroy `gone` and make a new context on device 0, current; 1 when it got
 * gone's handle back (else handle reuse would go untested). */
static int destroy_and_recreate(CUcontext gone, CUcontext *reborn)
{
    return fake.destroy(gone) == CUDA_SUCCESS && fake.create(reborn, 0, 0) == CUDA_SUCCESS &&
           *reborn == gone;
}

TEST(a_context_destroyed_and_made_again_gets_a_function_of_its_own)
{
    fi_jit_ctx *ctx = NULL;
    CUcontext gone = NULL, reborn = NULL;
    const fi_jit_kernel *k = NULL, *first = NULL;
    fi_jit_spec s = spec_number(SPEC_PLAIN);
    const char *dir = warm_cache();
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    CHECK(fake.create(&gone, 0, 0) == CUDA_SUCCESS);
    CHECK_OK(fi_jit_get_kernel(&first, ctx, &s));
    CHECK_OK(check_fake_decode(ctx, &s));
    const load_calls before = calls_now();
    /* The library outlives the context; the function the table holds for
     * the dead context must not be handed to the one with its handle. */
    CHECK(destroy_and_recreate(gone, &reborn));
    CHECK(fake.libraries_loaded() == 1 && fake.function_context(first->function) == NULL);
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
    CHECK(k != first && fake.function_context(k->function) == reborn);
    CHECK_OK(check_fake_decode(ctx, &s));
    load_calls n = calls_since(before);
    CHECK_MSG(n.library_loads == 0 && n.module_loads == 0 && n.functions == entries_of(k),
              "library loads %d, module loads %d, functions %d", n.library_loads, n.module_loads,
              n.functions);
    /* The other device never noticed. */
    CHECK(fake.set_current(fake.primary[1]) == CUDA_SUCCESS);
    CHECK_OK(check_fake_decode(ctx, &s));
    /* Freed with another context current: the library still goes, from
     * every context (no per-context unload to leave behind). */
    fi_jit_ctx_free(ctx);
    CHECK(fake.libraries_loaded() == 0 && fake.modules_in(reborn) == 0);
    CHECK(fake.destroy(reborn) == CUDA_SUCCESS);
}

/* ---- failures ------------------------------------------------------------------ */

/* Make the next call of `entry` fail; get the kernel: FI_ELOAD naming the
 * call, nothing loaded or cached; then the same call again succeeds with one
 * library load. */
static void fail_once_then_retry(const char *entry, CUresult error)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(SPEC_PLAIN);
    CHECK(fresh_ctx_on_device_0(&ctx));
    const load_calls before = calls_now();
    CHECK(fake.fail_next(entry, error) == 0);
    const int rc = fi_jit_get_kernel(&k, ctx, &s);
    CHECK_MSG(rc == FI_ELOAD, "%s failing: rc %d (%s)", entry, rc, fi_last_error());
    CHECK_MSG(strstr(fi_last_error(), entry), "the message does not name %s: %s", entry,
              fi_last_error());
    CHECK(fake.libraries_loaded() == 0 && fake.modules_in(fake.primary[0]) == 0);
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
    CHECK_OK(check_fake_decode(ctx, &s));
    load_calls n = calls_since(before);
    CHECK_MSG(n.library_loads == 1 + (strcmp(entry, "cuLibraryLoadData") != 0) &&
                  n.library_unloads == (strcmp(entry, "cuLibraryLoadData") != 0),
              "%s failing: %d library loads, %d unloads", entry, n.library_loads,
              n.library_unloads);
    CHECK(fake.libraries_loaded() == 1);
    fi_jit_ctx_free(ctx);
    CHECK(fake.libraries_loaded() == 0);
}

TEST(a_failed_library_load_caches_nothing_and_the_next_call_loads)
{
    fail_once_then_retry("cuLibraryLoadData", CUDA_ERROR_OUT_OF_MEMORY);
}

TEST(a_kernel_not_found_in_the_library_unloads_it)
{
    fail_once_then_retry("cuLibraryGetKernel", CUDA_ERROR_NOT_FOUND);
}

TEST(a_failed_function_for_the_context_unloads_the_library)
{
    fail_once_then_retry("cuKernelGetFunction", CUDA_ERROR_OUT_OF_MEMORY);
}

TEST(a_refused_opt_in_is_left_to_the_launch)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    int opt_in = 0;
    fi_jit_spec s = spec_number(SPEC_OPT_IN);
    CHECK(fresh_ctx_on_device_0(&ctx));
    CHECK(fake.fail_next("cuKernelSetAttribute", CUDA_ERROR_INVALID_VALUE) == 0);
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
    CHECK(fake.func_get_attribute(&opt_in, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  k->function) == CUDA_SUCCESS);
    CHECK(opt_in == 48 * 1024);
    const int func_sets = fake.calls("cuFuncSetAttribute");
    CHECK_OK(check_fake_decode(ctx, &s)); /* the launch opts in itself */
    CHECK(fake.calls("cuFuncSetAttribute") == func_sets + 1);
    fi_jit_ctx_free(ctx);
}

/* ---- FIJIT_LOAD ------------------------------------------------------------------ */

/* Get `s` in both primary contexts of a fresh fi_jit_ctx with FIJIT_LOAD =
 * `way` and check how it loaded: one module per context, or one library. */
static void load_both_devices(const char *way, int want_modules)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(SPEC_OPT_IN);
    const char *dir = warm_cache();
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    const load_calls before = calls_now();
    if (way) setenv("FIJIT_LOAD", way, 1);
    for (int d = 0; d < DEVICES; d++) {
        CHECK(fake.set_current(fake.primary[d]) == CUDA_SUCCESS);
        CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
        CHECK(fake.function_context(k->function) == fake.primary[d]);
        CHECK(fake.modules_in(fake.primary[d]) == 1);
        CHECK_OK(check_fake_decode(ctx, &s));
    }
    unsetenv("FIJIT_LOAD");
    load_calls n = calls_since(before);
    CHECK_MSG(n.module_loads == (want_modules ? DEVICES : 0) &&
                  n.library_loads == (want_modules ? 0 : 1) &&
                  n.kernel_attributes == (want_modules ? 0 : DEVICES),
              "FIJIT_LOAD=%s: module loads %d, library loads %d, kernel attributes %d",
              way ? way : "(unset)", n.module_loads, n.library_loads, n.kernel_attributes);
    fi_jit_ctx_free(ctx);
    n = calls_since(before);
    /* Modules unload in their contexts (both primary, so live). */
    CHECK(n.module_unloads == n.module_loads && n.library_unloads == n.library_loads);
    for (int d = 0; d < DEVICES; d++) CHECK(fake.modules_in(fake.primary[d]) == 0);
}

TEST(fijit_load_module_loads_a_module_per_context)
{
    load_both_devices("module", 1);
}

TEST(fijit_load_library_and_auto_load_one_library)
{
    load_both_devices("library", 0);
    load_both_devices("auto", 0);
    load_both_devices(NULL, 0);
}

TEST(a_bad_fijit_load_is_refused_and_loads_nothing)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(SPEC_PLAIN);
    CHECK(fresh_ctx_on_device_0(&ctx));
    const load_calls before = calls_now();
    setenv("FIJIT_LOAD", "modules", 1);
    const int rc = fi_jit_get_kernel(&k, ctx, &s);
    unsetenv("FIJIT_LOAD");
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "FIJIT_LOAD"));
    load_calls n = calls_since(before);
    CHECK(n.library_loads == 0 && n.module_loads == 0);
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s)); /* nothing cached: loads now */
    fi_jit_ctx_free(ctx);
}

/* ---- a driver before CUDA 12 ------------------------------------------------------ */

/* The checks, in a process on the fake built without the library calls. */
static void old_driver_checks(void)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(SPEC_PLAIN);
    CHECK(fake_ready() && warm_cache());
    CHECK(!dlsym(fake.lib, "cuLibraryLoadData") && !dlsym(fake.lib, "cuKernelGetFunction"));
    load_both_devices(NULL, 1);
    load_both_devices("auto", 1);
    CHECK_OK(check_ctx_on(&ctx, warm_cache(), 1));
    setenv("FIJIT_LOAD", "library", 1);
    const int rc = fi_jit_get_kernel(&k, ctx, &s);
    unsetenv("FIJIT_LOAD");
    CHECK_MSG(rc == FI_EUNSUPPORTED && strstr(fi_last_error(), "cuLibraryLoadData"),
              "FIJIT_LOAD=library without the calls: rc %d (%s)", rc, fi_last_error());
    fi_jit_ctx_free(ctx);
}

TEST(a_driver_without_libraries_loads_a_module_per_context)
{
    if (getenv("FIJIT_TEST_FAKE_CUDA")) {
        old_driver_checks();
        return;
    }
    /* This program again, on build/tests/cuda11/libcuda.so.1, running this test alone. */
    char self[PATH_MAX], old_driver[PATH_MAX + 32];
    const char *dir = warm_cache();
    CHECK(dir);
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    snprintf(old_driver, sizeof old_driver, "%.*s/cuda11/libcuda.so.1",
             (int)(strrchr(self, '/') - self), self);
    CHECK(access(old_driver, R_OK) == 0);
    fflush(NULL);
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("FIJIT_TEST_FAKE_CUDA", old_driver, 1);
        setenv(CHECK_SHARED_CACHE_ENV, dir, 1);
        execl(self, "test_load", OLD_DRIVER_TEST, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the run on the old driver: %s %d",
              WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}
