/*
 * Several CUDA contexts and several processes, against the fake driver
 * (tests/fake_cuda.c, two devices): fijit promises a kernel's code in each
 * CUDA context that asks (one library for all of them, or with
 * FIJIT_LOAD=module one module each: the last test runs the others again
 * that way), a kernel handle that works in the context that asked for it,
 * built once per process however many devices ask, and once per cache
 * however many ranks start together. The fake binds each function to its
 * context, so a handle of the wrong context fails its launch here as it
 * would on a GPU. Nothing executes.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda.h"

#define DEVICES 2
#define RANKS 8        /* a tensor-parallel server's processes */
#define THREADS 4      /* two per device */
#define THREAD_ROUNDS 50
#define RANK_ENV "FIJIT_TEST_RANK_CACHE" /* set: this process is a rank (see rank_main) */
#define START_FD_ENV "FIJIT_TEST_RANK_START_FD"

/* Two decode kernels: the smallest head dim, so each compiles in about a second. */
static const char *const spec_texts[] = {
    "decode q=fp16 kv=fp16 o=fp16 hd=64",
    "decode q=bf16 kv=bf16 o=bf16 hd=64",
};
#define SPECS 2

/* Whether kernels load as a module per context (FIJIT_LOAD=module; the
 * fake has the library calls, so a library otherwise). */
static int module_per_context(void)
{
    const char *way = getenv("FIJIT_LOAD");
    return way && strcmp(way, "module") == 0;
}

/* ---- the fake driver -------------------------------------------------------- */

static struct {
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*create)(CUcontext *, unsigned, CUdevice);
    CUresult (*destroy)(CUcontext);
    fake_cuda_set_device_count_fn set_device_count;
    fake_cuda_function_context_fn function_context;
    fake_cuda_modules_in_fn modules_in;
    fake_cuda_calls_fn calls;
    CUcontext primary[DEVICES];
} fake;

/* Loads the fake with two devices and retains their primary contexts; 0 on failure. */
static int fake_ready(void)
{
    if (fake.primary[0]) return 1;
    void *lib = check_fake_cuda();
    if (!lib) return 0;
    *(void **)&fake.primary_retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&fake.set_current = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&fake.create = dlsym(lib, "cuCtxCreate_v2");
    *(void **)&fake.destroy = dlsym(lib, "cuCtxDestroy_v2");
    *(void **)&fake.set_device_count = dlsym(lib, "fake_cuda_set_device_count");
    *(void **)&fake.function_context = dlsym(lib, "fake_cuda_function_context");
    *(void **)&fake.modules_in = dlsym(lib, "fake_cuda_modules_in");
    *(void **)&fake.calls = dlsym(lib, "fake_cuda_calls");
    if (!fake.primary_retain || !fake.set_current || !fake.create || !fake.destroy ||
        !fake.set_device_count || !fake.function_context || !fake.modules_in || !fake.calls)
        return 0;
    fake.set_device_count(DEVICES);
    for (int d = 0; d < DEVICES; d++)
        if (fake.primary_retain(&fake.primary[d], d) != CUDA_SUCCESS) return 0;
    return fake.primary[0] != fake.primary[1];
}

static fi_jit_spec spec_number(int i)
{
    return parse_or_die(spec_texts[i]);
}

/* ---- one process, two contexts ------------------------------------------------ */

TEST(two_devices_get_two_modules_from_one_compile)
{
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k[DEVICES] = {NULL}, *again = NULL;
    fi_jit_stats st = FI_JIT_STATS_INIT;
    fi_jit_spec s = spec_number(0);
    char dir[4200];
    CHECK(fake_ready());
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    for (int use_disk = 1; use_disk >= 0; use_disk--) {
        const int before[DEVICES] = {fake.modules_in(fake.primary[0]),
                                     fake.modules_in(fake.primary[1])};
        CHECK_OK(check_ctx_on(&ctx, dir, use_disk));
        for (int d = 0; d < DEVICES; d++) {
            CHECK(fake.set_current(fake.primary[d]) == CUDA_SUCCESS);
            CHECK_OK(fi_jit_get_kernel(&k[d], ctx, &s));
            CHECK(fake.function_context(k[d]->function) == fake.primary[d]);
            CHECK(fake.modules_in(fake.primary[d]) == before[d] + 1);
            CHECK_OK(check_fake_decode(ctx, &s));
        }
        CHECK(k[0] != k[1] && k[0]->function != k[1]->function);
        CHECK(memcmp(k[0]->key, k[1]->key, sizeof k[0]->key) == 0);
        /* The second device loaded the first one's object: no second compile,
         * and (with a disk cache) no read of the entry just written. */
        CHECK_OK(fi_jit_stats_get(&st, ctx));
        CHECK_MSG(st.compiles == 1 && st.disk_hits == 0 && st.misses == 1,
                  "use_disk %d: compiles %lld, disk hits %lld, misses %lld", use_disk,
                  (long long)st.compiles, (long long)st.disk_hits, (long long)st.misses);
        /* Later calls are lookups that keep each context's own kernel. */
        for (int d = DEVICES - 1; d >= 0; d--) {
            CHECK(fake.set_current(fake.primary[d]) == CUDA_SUCCESS);
            CHECK_OK(fi_jit_get_kernel(&again, ctx, &s));
            CHECK(again == k[d]);
        }
        fi_jit_ctx_free(ctx);
        ctx = NULL;
        CHECK(fake.modules_in(fake.primary[0]) == before[0] &&
              fake.modules_in(fake.primary[1]) == before[1]);
    }
}

TEST(a_kernel_is_only_returned_to_the_context_it_was_loaded_in)
{
    fi_jit_ctx *ctx = NULL;
    CUcontext created = NULL;
    const char *dir = check_shared_cache(spec_texts, SPECS);
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    /* The primary contexts of both devices and a second context on device 0
     * (what cuCtxCreate next to a framework's primary one gives). */
    CHECK(fake.create(&created, 0, 0) == CUDA_SUCCESS);
    const CUcontext contexts[3] = {fake.primary[0], fake.primary[1], created};
    const fi_jit_kernel *first[3][SPECS] = {{NULL}};
    for (int round = 0; round < 3; round++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < SPECS; i++) {
                const fi_jit_kernel *k = NULL;
                fi_jit_spec s = spec_number(i);
                CHECK(fake.set_current(contexts[c]) == CUDA_SUCCESS);
                CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
                CHECK_MSG(fake.function_context(k->function) == contexts[c],
                          "round %d, context %d, spec %d", round, c, i);
                if (round == 0) first[c][i] = k;
                CHECK(k == first[c][i]);
            }
    CHECK(fake.modules_in(created) == SPECS);
    fi_jit_ctx_free(ctx);
    CHECK(fake.modules_in(created) == 0);
    CHECK(fake.destroy(created) == CUDA_SUCCESS);
}

/* Destroy `gone` (its modules go with it) and make a new context on device
 * 0, current; 1 when it got gone's handle back, as on real drivers (else
 * the tests that use it would not test handle reuse). */
static int destroy_and_recreate(CUcontext gone, CUcontext *reborn)
{
    return fake.destroy(gone) == CUDA_SUCCESS && fake.modules_in(gone) == 0 &&
           fake.create(reborn, 0, 0) == CUDA_SUCCESS && *reborn == gone;
}

TEST(a_destroyed_context_whose_handle_comes_back_gets_new_modules)
{
    fi_jit_ctx *ctx = NULL;
    CUcontext gone = NULL, reborn = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(0);
    const char *dir = check_shared_cache(spec_texts, SPECS);
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    CHECK(fake.create(&gone, 0, 0) == CUDA_SUCCESS);
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
    CHECK(fake.set_current(fake.primary[1]) == CUDA_SUCCESS);
    CHECK_OK(check_fake_decode(ctx, &s));
    /* The caller destroys its context and makes another, with the same
     * handle: a table keyed by the handle would return a dead function. */
    CHECK(destroy_and_recreate(gone, &reborn));
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
    CHECK(fake.function_context(k->function) == reborn);
    CHECK_OK(check_fake_decode(ctx, &s));
    /* The other device never noticed. */
    CHECK(fake.set_current(fake.primary[1]) == CUDA_SUCCESS);
    CHECK_OK(check_fake_decode(ctx, &s));
    /* Freed while another context is current: fijit leaves the created
     * context's module to it (it cannot tell a live created context's handle
     * from a dangling one), and destroying the context takes the module; a
     * library, which no context owns, goes with the fi_jit_ctx. */
    fi_jit_ctx_free(ctx);
    CHECK(fake.modules_in(reborn) == module_per_context());
    CHECK(fake.destroy(reborn) == CUDA_SUCCESS && fake.modules_in(reborn) == 0);
}

TEST(freeing_after_a_context_went_leaves_its_successor_alone)
{
    fi_jit_ctx *early = NULL, *late = NULL;
    CUcontext gone = NULL, reborn = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_number(0);
    const char *dir = check_shared_cache(spec_texts, SPECS);
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&early, dir, 1));
    CHECK_OK(check_ctx_on(&late, dir, 1));
    CHECK(fake.create(&gone, 0, 0) == CUDA_SUCCESS);
    CHECK_OK(fi_jit_get_kernel(&k, early, &s));
    CHECK(destroy_and_recreate(gone, &reborn));
    CHECK_OK(fi_jit_get_kernel(&k, late, &s)); /* likely in the module slot `early` had */
    /* `early` must not unload anything in the context that took its old
     * context's handle: its modules went with that context. */
    fi_jit_ctx_free(early);
    CHECK(fake.set_current(reborn) == CUDA_SUCCESS);
    CHECK(fake.modules_in(reborn) == 1);
    CHECK_OK(check_fake_decode(late, &s));
    fi_jit_ctx_free(late);
    CHECK(fake.modules_in(reborn) == 0);
    CHECK(fake.destroy(reborn) == CUDA_SUCCESS);
}

TEST(freeing_one_jit_context_leaves_the_others_kernels_working)
{
    fi_jit_ctx *a = NULL, *b = NULL;
    const fi_jit_kernel *kb[DEVICES] = {NULL}, *k = NULL;
    fi_jit_spec s = spec_number(1);
    int loaded[DEVICES];
    const char *dir = check_shared_cache(spec_texts, SPECS);
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&a, dir, 1));
    CHECK_OK(check_ctx_on(&b, dir, 1));
    for (int d = 0; d < DEVICES; d++) {
        CHECK(fake.set_current(fake.primary[d]) == CUDA_SUCCESS);
        CHECK_OK(fi_jit_get_kernel(&k, a, &s));
        CHECK_OK(fi_jit_get_kernel(&kb[d], b, &s));
        /* One module per fi_jit_ctx, or one library for the process. */
        CHECK(module_per_context() ? k->function != kb[d]->function
                                   : k->function == kb[d]->function);
        loaded[d] = fake.modules_in(fake.primary[d]);
    }
    fi_jit_ctx_free(a);
    for (int d = 0; d < DEVICES; d++) {
        CHECK(fake.modules_in(fake.primary[d]) == loaded[d] - module_per_context());
        CHECK(fake.set_current(fake.primary[d]) == CUDA_SUCCESS);
        CHECK_OK(fi_jit_get_kernel(&k, b, &s));
        CHECK(k == kb[d] && fake.function_context(k->function) == fake.primary[d]);
        CHECK_OK(check_fake_decode(b, &s));
    }
    fi_jit_ctx_free(b);
}

/* ---- threads on two devices at once (also run under TSan) ------------------- */

typedef struct device_thread {
    fi_jit_ctx *ctx;
    CUcontext context;
    pthread_barrier_t *start;
    int failures;
    char first_failure[512];
} device_thread;

static void *drive_device(void *arg)
{
    device_thread *t = arg;
    if (fake.set_current(t->context) != CUDA_SUCCESS) {
        t->failures++;
        return NULL;
    }
    pthread_barrier_wait(t->start);
    for (int round = 0; round < THREAD_ROUNDS; round++)
        for (int i = 0; i < SPECS; i++) {
            const fi_jit_kernel *k = NULL;
            fi_jit_spec s = spec_number(i);
            int rc = fi_jit_get_kernel(&k, t->ctx, &s);
            if (rc == 0) rc = check_fake_decode(t->ctx, &s);
            if (rc == 0 && fake.function_context(k->function) == t->context) continue;
            if (!t->failures++)
                snprintf(t->first_failure, sizeof t->first_failure, "round %d spec %d: %s", round,
                         i, rc < 0 ? fi_last_error() : "a function of another context");
        }
    return NULL;
}

TEST(threads_on_two_devices_each_get_their_own_kernels)
{
    fi_jit_ctx *ctx = NULL;
    device_thread threads[THREADS];
    pthread_t ids[THREADS];
    pthread_barrier_t start;
    fi_jit_stats before = FI_JIT_STATS_INIT, st = FI_JIT_STATS_INIT;
    const char *dir = check_shared_cache(spec_texts, SPECS);
    CHECK(fake_ready() && dir);
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    CHECK_OK(fi_jit_stats_get(&before, ctx)); /* the shared cache counts every test's work */
    const int library_loads = fake.calls("cuLibraryLoadData");
    const int module_loads = fake.calls("cuModuleLoadData");
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        threads[i] = (device_thread){ctx, fake.primary[i % DEVICES], &start, 0, ""};
        CHECK(pthread_create(&ids[i], NULL, drive_device, &threads[i]) == 0);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(ids[i], NULL);
        if (threads[i].failures)
            fprintf(stderr, "  thread %d: %d failures, first: %s\n", i, threads[i].failures,
                    threads[i].first_failure);
        failures += threads[i].failures;
    }
    pthread_barrier_destroy(&start);
    CHECK(failures == 0);
    /* Each kernel read from the disk once, whichever device asked first. */
    CHECK_OK(fi_jit_stats_get(&st, ctx));
    CHECK_MSG(st.disk_hits - before.disk_hits == SPECS && st.compiles == before.compiles,
              "disk hits %lld, compiles %lld", (long long)(st.disk_hits - before.disk_hits),
              (long long)(st.compiles - before.compiles));
    for (int d = 0; d < DEVICES; d++) CHECK(fake.modules_in(fake.primary[d]) == SPECS);
    /* And loaded once per process, or once per device with a module each. */
    const int libraries = fake.calls("cuLibraryLoadData") - library_loads;
    const int modules = fake.calls("cuModuleLoadData") - module_loads;
    CHECK_MSG(module_per_context() ? libraries == 0 && modules == SPECS * DEVICES
                                   : libraries == SPECS && modules == 0,
              "library loads %d, module loads %d", libraries, modules);
    fi_jit_ctx_free(ctx);
}

/* ---- ranks: processes starting together on one empty cache ----------------- */

/* A rank's work: wait for the start, then on each device get every kernel
 * and launch it. The exit status says what failed (0: nothing). */
static int rank_main(const char *cache_dir, int start_fd)
{
    fi_jit_ctx *ctx = NULL;
    char byte;
    while (read(start_fd, &byte, 1) > 0) {} /* EOF: the parent let every rank go */
    close(start_fd);
    if (!fake_ready()) return 10;
    if (check_ctx_on(&ctx, cache_dir, 1) < 0) return 11;
    int rc = 0;
    for (int d = 0; d < DEVICES && rc == 0; d++) {
        if (fake.set_current(fake.primary[d]) != CUDA_SUCCESS) rc = 12;
        for (int i = 0; i < SPECS && rc == 0; i++) {
            const fi_jit_kernel *k = NULL;
            fi_jit_spec s = spec_number(i);
            if (fi_jit_get_kernel(&k, ctx, &s) < 0 || check_fake_decode(ctx, &s) < 0) rc = 13;
            else if (fake.function_context(k->function) != fake.primary[d]) rc = 14;
        }
    }
    if (rc) fprintf(stderr, "rank %d: status %d: %s\n", (int)getpid(), rc, fi_last_error());
    fi_jit_ctx_free(ctx);
    return rc;
}

/* A rank is this program run again with RANK_ENV set: it does its work
 * before the test runner starts and exits. */
__attribute__((constructor)) static void run_as_rank(void)
{
    const char *cache_dir = getenv(RANK_ENV), *fd = getenv(START_FD_ENV);
    if (cache_dir && fd) _exit(rank_main(cache_dir, atoi(fd)));
}

TEST(eight_ranks_on_two_devices_compile_each_kernel_once)
{
    int start[2];
    pid_t pids[RANKS];
    char dir[4200], fd_text[16];
    fi_jit_ctx *ctx = NULL;
    fi_jit_stats st = FI_JIT_STATS_INIT;
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    CHECK(pipe(start) == 0);
    snprintf(fd_text, sizeof fd_text, "%d", start[0]);
    int started = 0;
    for (; started < RANKS; started++) {
        pids[started] = fork();
        if (pids[started] < 0) break;
        if (pids[started] == 0) {
            close(start[1]);
            setenv(RANK_ENV, dir, 1);
            setenv(START_FD_ENV, fd_text, 1);
            execl("/proc/self/exe", "test_multi_context", (char *)NULL);
            _exit(127);
        }
    }
    close(start[0]);
    close(start[1]); /* every rank reads EOF: all go at once */
    int failed = started < RANKS;
    for (int r = 0; r < started; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "  rank %d: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            failed = 1;
        }
    }
    CHECK(!failed);
    /* The index's counters are every rank's: one compile per kernel in the
     * whole job, and in each rank one compile or one disk read per kernel
     * (the second device loads the first one's object). */
    CHECK_OK(check_ctx_on(&ctx, dir, 1));
    CHECK_OK(fi_jit_stats_get(&st, ctx));
    fi_jit_ctx_free(ctx);
    CHECK_MSG(st.compiles == SPECS && st.entries == SPECS && st.compile_failures == 0,
              "compiles %lld, entries %lld, failures %lld", (long long)st.compiles,
              (long long)st.entries, (long long)st.compile_failures);
    CHECK_MSG(st.compiles + st.disk_hits == RANKS * SPECS,
              "compiles %lld + disk hits %lld, want %d", (long long)st.compiles,
              (long long)st.disk_hits, RANKS * SPECS);
}

/* ---- the module per context ----------------------------------------------------- */

TEST(every_test_passes_with_a_module_per_context)
{
    if (module_per_context()) return; /* this is that run */
    const char *dir = check_shared_cache(spec_texts, SPECS);
    CHECK(dir);
    fflush(NULL);
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("FIJIT_LOAD", "module", 1);
        setenv(CHECK_SHARED_CACHE_ENV, dir, 1);
        execl("/proc/self/exe", "test_multi_context", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "FIJIT_LOAD=module run: %s %d",
              WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}
