/* Runner for tests/check.h: runs every registered test (or those whose names
 * contain argv[1]) and prints "N passed, N failed". */
#include "check.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sys.h"
#include "store/remote/remote.h"
#include "store/store.h"

#define CHECK_MAX_CASES 512

static check_case cases[CHECK_MAX_CASES];
static int case_count;
char check_tmpdir[4096];
int check_current_failed;

void check_register(const char *name, check_fn fn)
{
    if (case_count < CHECK_MAX_CASES) cases[case_count++] = (check_case){name, fn};
}

void check_fail(const char *file, int line, const char *expr, const char *detail)
{
    fprintf(stderr, "  FAIL %s:%d: %s%s%s\n", file, line, expr, detail ? ": " : "",
            detail ? detail : "");
    check_current_failed = 1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int check_main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int passed = 0, failed = 0;
    for (int i = 0; i < case_count; i++) {
        if (filter && !strstr(cases[i].name, filter)) continue;
        snprintf(check_tmpdir, sizeof check_tmpdir, "%s/fijit-test-XXXXXX", base);
        if (!mkdtemp(check_tmpdir)) {
            perror("mkdtemp");
            return 2;
        }
        check_current_failed = 0;
        cases[i].fn();
        remove_tree(check_tmpdir);
        if (check_current_failed) {
            failed++;
            fprintf(stderr, "not ok %s\n", cases[i].name);
        } else {
            passed++;
            printf("ok %s\n", cases[i].name);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }

/* ---- fixtures (check.h) ------------------------------------------------------ */
int check_quick(void) { return getenv("FIJIT_TEST_QUICK") != NULL; }

int check_ctx_in(fi_jit_ctx **out, const char *dir, const char *arch)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = dir;
    opts.arch = arch;
    opts.log_level = FI_LOG_OFF;
    return fi_jit_ctx_new(out, &opts);
}

int check_ctx_on(fi_jit_ctx **out, const char *dir, int use_disk)
{
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = dir;
    opts.use_disk_cache = use_disk;
    opts.log_level = FI_LOG_OFF;
    return fi_jit_ctx_new(out, &opts);
}

static char shared_cache[4096];

static void remove_shared_cache(void) { remove_tree(shared_cache); }

const char *check_shared_cache(const char *const *specs, int n)
{
    fi_jit_ctx *ctx = NULL;
    if (shared_cache[0]) return shared_cache;
    const char *given = getenv(CHECK_SHARED_CACHE_ENV);
    if (given && *given) {
        snprintf(shared_cache, sizeof shared_cache, "%s", given);
        return shared_cache;
    }
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(shared_cache, sizeof shared_cache, "%s/fijit-shared-XXXXXX", base);
    if (!mkdtemp(shared_cache)) {
        shared_cache[0] = '\0';
        return NULL;
    }
    atexit(remove_shared_cache);
    int rc = check_ctx_on(&ctx, shared_cache, 1);
    for (int i = 0; i < n && rc == 0; i++) {
        fi_jit_spec s = parse_or_die(specs[i]);
        rc = fi_jit_prewarm(NULL, ctx, &s, "sm_90a");
    }
    if (rc < 0) fprintf(stderr, "warming %s: %s\n", shared_cache, fi_last_error());
    fi_jit_ctx_free(ctx);
    return rc == 0 ? shared_cache : NULL;
}

static void count_keys(void *user, const char *text)
{
    if (strncmp(text, "key ", 4) == 0) ++*(int *)user;
}

int check_modules_of(fi_jit_ctx *ctx, const fi_jit_spec *specs, int n, const char *arch)
{
    int modules = 0;
    for (int i = 0; i < n; i++) {
        int rc = fi_jit_explain(ctx, &specs[i], arch, count_keys, &modules);
        if (rc < 0) return rc;
    }
    return modules;
}

int check_ctx_new(fi_jit_ctx **out, const char *arch)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    return check_ctx_in(out, dir, arch);
}

/* ---- parallel compile sweeps (check.h) ------------------------------------ */

int check_jobs(void)
{
    const char *s = getenv("FIJIT_TEST_JOBS");
    int n = s ? atoi(s) : 2;
    return n < 1 ? 1 : n > CHECK_MAX_JOBS ? CHECK_MAX_JOBS : n;
}

typedef struct job {
    fi_jit_ctx *ctx;
    const fi_jit_spec *specs;
    int count, stride, first;
    int want; /* an fi_build_outcome, or < 0: any */
    int failures;
    char first_error[3000];
} job;

static void *prewarm_some(void *arg)
{
    job *j = arg;
    for (int i = j->first; i < j->count; i += j->stride) {
        fi_build_outcome outcome = (fi_build_outcome)-1;
        int rc = fi_jit_prewarm(&outcome, j->ctx, &j->specs[i], NULL);
        if (rc == 0 && (j->want < 0 || (int)outcome == j->want)) continue;
        if (!j->failures++) {
            char spec[256];
            fi_jit_spec_format(spec, sizeof spec, &j->specs[i]);
            if (rc < 0)
                snprintf(j->first_error, sizeof j->first_error, "%s: %s: %.2500s", spec,
                         fi_error_name(rc), fi_last_error());
            else
                snprintf(j->first_error, sizeof j->first_error, "%s: outcome %d, want %s", spec,
                         (int)outcome,
                         j->want == FI_BUILD_COMPILED ? "FI_BUILD_COMPILED" : "FI_BUILD_CACHED");
        }
    }
    return NULL;
}

int check_prewarm_all(fi_jit_ctx *ctx, const fi_jit_spec *specs, int n, int want, char *err,
                      size_t err_size)
{
    pthread_t threads[CHECK_MAX_JOBS];
    int started[CHECK_MAX_JOBS];
    job js[CHECK_MAX_JOBS];
    int t_count = check_jobs(), failures = 0;
    err[0] = '\0';
    if (t_count > n) t_count = n > 0 ? n : 1;
    for (int t = 0; t < t_count; t++) {
        memset(&js[t], 0, sizeof js[t]);
        js[t].ctx = ctx;
        js[t].specs = specs;
        js[t].count = n;
        js[t].stride = t_count;
        js[t].first = t;
        js[t].want = want;
        started[t] = pthread_create(&threads[t], NULL, prewarm_some, &js[t]) == 0;
        if (!started[t]) prewarm_some(&js[t]);
    }
    for (int t = 0; t < t_count; t++) {
        if (started[t]) pthread_join(threads[t], NULL);
        if (js[t].failures && !failures) snprintf(err, err_size, "%s", js[t].first_error);
        failures += js[t].failures;
    }
    return failures;
}

fi_jit_spec parse_or_die(const char *text)
{
    fi_jit_spec spec;
    static char variant[64];
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) {
        fprintf(stderr, "cannot parse '%s': %s\n", text, fi_last_error());
        abort();
    }
    return spec;
}

void *check_fake_cuda(void)
{
    static void *lib;
    char path[PATH_MAX];
    if (lib) return lib;
    /* A test may run itself again on another build of the fake (test_load:
     * a driver without context-independent loading). */
    const char *chosen = getenv("FIJIT_TEST_FAKE_CUDA");
    if (chosen && *chosen) {
        if (!(lib = dlopen(chosen, RTLD_NOW | RTLD_GLOBAL)))
            fprintf(stderr, "cannot load the fake driver %s: %s\n", chosen, dlerror());
        return lib;
    }
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) return NULL;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    strcpy(slash + 1, "libcuda.so.1");
    if (!(lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL)))
        fprintf(stderr, "cannot load the fake driver %s: %s\n", path, dlerror());
    return lib;
}

/* Device addresses the launch code passes on but never reads. */
static _Alignas(256) unsigned char fake_arena[4 * 4096];

int check_fake_decode(fi_jit_ctx *ctx, const fi_jit_spec *spec)
{
    fi_decode_args a = FI_DECODE_ARGS_INIT;
    a.q = fake_arena;
    a.k = fake_arena + 4096;
    a.v = fake_arena + 2 * 4096;
    a.o = fake_arena + 3 * 4096;
    a.num_qo_heads = 8;
    a.num_kv_heads = 2;
    a.kv_len = 100;
    a.q_stride_h = a.o_stride_h = spec->head_dim;
    a.k_stride_n = a.v_stride_n = 2 * spec->head_dim; /* NHD */
    a.k_stride_h = a.v_stride_h = spec->head_dim;
    a.max_splits = 1;
    return fi_decode_run(ctx, spec, &a, NULL);
}

int check_fake_cuda_current(void)
{
    void *lib = check_fake_cuda();
    if (!lib) return -1;
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
    CUcontext context = NULL;
    if (!retain || !set_current || retain(&context, 0) != CUDA_SUCCESS ||
        set_current(context) != CUDA_SUCCESS) {
        fprintf(stderr, "the fake driver has no current context\n");
        return -1;
    }
    return 0;
}

/* ---- a private redis-server (check.h) --------------------------------------- */

/* The server answers PING: OK, or, when it wants a password, NOAUTH. The
 * socket file alone is not enough: it exists from bind(), and a connect
 * before listen() is refused. */
static int redis_answers(const char *url)
{
    fi_remote *remote = NULL;
    if (fi_remote_open(&remote, url) < 0) return 0;
    int ok = remote->ops->ping(remote) == FI_REMOTE_OK || strstr(fi_last_error(), "NOAUTH");
    remote->ops->close(remote);
    return ok;
}

static int redis_spawn(check_redis *r)
{
    char ping_url[4500];
    unlink(r->socket);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char log[4300];
        snprintf(log, sizeof log, "%s/redis.log", r->dir);
        const char *argv[24] = {"redis-server", "--port", "0", "--unixsocket", r->socket,
                                "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                                "--dir", r->dir, "--logfile", log, "--daemonize", "no"};
        int argc = 17;
        if (r->password[0]) {
            argv[argc++] = "--requirepass";
            argv[argc++] = r->password;
        }
        argv[argc] = NULL;
        /* A test that fails returns before it stops its server: the server
         * goes when the test program does, not holding its output open. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    r->pid = pid;
    snprintf(ping_url, sizeof ping_url, "unix://%s?timeout=200", r->socket);
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            r->pid = 0;
            return WIFEXITED(status) && WEXITSTATUS(status) == 127 ? 1 : -1;
        }
        if (access(r->socket, F_OK) == 0 && redis_answers(ping_url))
            return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    check_redis_stop(r);
    return -1;
}

int check_redis_start(check_redis *r, const char *dir, const char *password,
                      const char *url_options)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    snprintf(r->socket, sizeof r->socket, "%s/redis.sock", dir);
    if (password) snprintf(r->password, sizeof r->password, "%s", password);
    snprintf(r->url, sizeof r->url, "unix://%s%s", r->socket, url_options ? url_options : "");
    int rc = redis_spawn(r);
    if (rc == 1)
        printf("  SKIPPED: redis-server is not installed, so the remote tier is not tested "
               "here (run 'make deps')\n");
    return rc;
}

int check_redis_restart(check_redis *r)
{
    check_redis_stop(r);
    return redis_spawn(r);
}

void check_redis_signal(check_redis *r, int sig)
{
    if (r->pid <= 0) return;
    kill(r->pid, sig);
    if (sig == SIGKILL) {
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR) {}
        r->pid = 0;
    }
}

void check_redis_stop(check_redis *r)
{
    if (r->pid <= 0) return;
    kill(r->pid, SIGCONT); /* a paused server cannot exit */
    check_redis_signal(r, SIGKILL);
}

/* ---- remote-tier fixtures (check.h) ----------------------------------------- */

void check_key_of(uint8_t key[16], int i)
{
    memset(key, 0, 16);
    key[0] = 0xab;
    key[14] = (uint8_t)(i >> 8);
    key[15] = (uint8_t)i;
}

void check_meta_of(fi_object_meta *m, int i)
{
    memset(m, 0, sizeof *m);
    snprintf(m->spec, sizeof m->spec,
             "decode q=fp16 kv=fp16 o=fp16 hd=%d mask=none pos=none softcap=0", 64 << i % 3);
    snprintf(m->arch, sizeof m->arch, "sm_90a");
}

int check_open_store(fi_store **st, const char *name, const char *urls, const char *fleet_secret)
{
    char dir[4300], url[4600];
    snprintf(dir, sizeof dir, "%s/%s", check_tmpdir, name);
    int rc = fi_store_open(st, dir, 0, 0);
    if (rc == 0 && fleet_secret) rc = fi_store_set_secret(*st, fleet_secret);
    for (const char *cursor = urls;
         rc == 0 && urls && fi_remote_list_next(url, sizeof url, &cursor) > 0;) {
        fi_remote *remote = NULL;
        rc = fi_remote_open(&remote, url);
        if (rc == 0) rc = fi_store_add_remote(*st, remote);
    }
    return rc;
}

int64_t check_ms_since(int64_t start_ns) { return (fi__now_ns() - start_ns) / 1000000; }

int64_t check_timed_miss(fi_store *st, int i)
{
    uint8_t key[16];
    void *out = NULL;
    size_t size;
    check_key_of(key, i);
    int64_t start = fi__now_ns();
    int rc = fi_store_get(st, key, &out, &size, NULL);
    fi__free(out);
    return rc == FI_ENOTFOUND ? check_ms_since(start) : -1;
}

/* ---- fleet hosts (check.h) ------------------------------------------------- */

typedef struct host_run {
    fi_jit_ctx *ctx;
    const char *const *specs;
    int count;
    atomic_int failures;
} host_run;

static void *host_thread(void *arg)
{
    host_run *run = arg;
    for (int i = 0; i < run->count; i++) {
        fi_jit_spec spec = parse_or_die(run->specs[i]);
        if (fi_jit_prewarm(NULL, run->ctx, &spec, NULL) < 0) {
            fprintf(stderr, "  %s: %s\n", run->specs[i], fi_last_error());
            atomic_fetch_add(&run->failures, 1);
        }
    }
    return NULL;
}

pid_t check_host_start(const char *name, const char *url, int threads,
                       const char *const *specs, int count)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    static host_run run;
    char dir[4300];
    pthread_t t[4];
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    snprintf(dir, sizeof dir, "%s/%s", check_tmpdir, name);
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_OFF;
    opts.remote = url;
    run.specs = specs;
    run.count = count;
    if (threads < 1 || threads > 4 || fi_jit_ctx_new(&run.ctx, &opts) < 0) _exit(2);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, host_thread, &run);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    fi_jit_ctx_free(run.ctx);
    _exit(atomic_load(&run.failures) ? 1 : 0);
}

int check_host_wait(pid_t pid)
{
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int check_host_stats(fi_jit_stats *out, const char *name)
{
    char dir[4300];
    fi_store *st = NULL;
    snprintf(dir, sizeof dir, "%s/%s", check_tmpdir, name);
    int rc = fi_store_open(&st, dir, 0, 0);
    if (rc == 0) rc = fi_store_stats_get(st, out);
    fi_store_close(st);
    return rc;
}

/* ---- stderr captured (check.h) -------------------------------------------- */

static int saved_stderr = -1;
static char captured_path[4400];

void check_stderr_begin(const char *path)
{
    fflush(stderr);
    snprintf(captured_path, sizeof captured_path, "%s", path);
    saved_stderr = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

void check_stderr_end(char *out, size_t size)
{
    fflush(stderr);
    if (saved_stderr >= 0) {
        dup2(saved_stderr, 2);
        close(saved_stderr);
        saved_stderr = -1;
    }
    FILE *f = fopen(captured_path, "rb");
    size_t n = f ? fread(out, 1, size - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
}
