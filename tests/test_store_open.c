/* Tests of how the on-disk cache is opened and locked (src/store/local/: open, lock,
 * src/core/jit.c where it opens the store): symlinks above the cache, read-only
 * caches (another user over a chmod a-w copy, a root-owned image layer, a
 * read-only bind mount), a full disk, a frozen lock holder, a stale -shm,
 * long paths and memory-only contexts without a home.
 *
 * Permission cases run in a child process as uid/gid 65534 when the tests
 * run as root (CI), since root ignores file modes; EROFS needs a mount
 * namespace, so that test says "skipped" where it cannot make one. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/error.h"
#include "store/store.h"
#include "common/sys.h"

#define NOBODY 65534

/* ---- fixtures ------------------------------------------------------------------ */

static void key_n(uint8_t key[16], int n)
{
    memset(key, 0, 16);
    key[0] = 0xa5;
    key[1] = (uint8_t)(n * 41 + 3); /* spread over objects/<xx> folders */
    key[15] = (uint8_t)n;
}

/* Object n holds the text "object <n> <tag>". */
static int put_obj(fi_store *st, int n, const char *tag)
{
    uint8_t key[16];
    char text[64];
    fi_object_meta meta = {0};
    key_n(key, n);
    snprintf(meta.spec, sizeof meta.spec,
             "decode q=fp16 kv=fp16 o=fp16 hd=%d mask=none pos=none softcap=0", 64 << n % 3);
    snprintf(meta.arch, sizeof meta.arch, "sm_90a");
    int len = snprintf(text, sizeof text, "object %d %s", n, tag);
    return fi_store_put(st, key, text, (size_t)len, &meta);
}

/* 1 when object n is served with a tag in `tags` ("a|b"), 0 when not found,
 * 99 for other bytes, or the error code. */
static int get_obj(fi_store *st, int n, const char *tags)
{
    uint8_t key[16];
    void *data = NULL;
    size_t size = 0;
    char want[64], got[64];
    key_n(key, n);
    int rc = fi_store_get(st, key, &data, &size, NULL);
    if (rc == FI_ENOTFOUND) return 0;
    if (rc < 0) return rc;
    snprintf(got, sizeof got, "%.*s", (int)size, (const char *)data);
    fi__free(data);
    for (const char *t = tags; t; t = strchr(t, '|') ? strchr(t, '|') + 1 : NULL) {
        snprintf(want, sizeof want, "object %d %.*s", n, (int)strcspn(t, "|"), t);
        if (strcmp(got, want) == 0) return 1;
    }
    return 99;
}

static int64_t entries_of(fi_store *st)
{
    fi_jit_stats s = FI_JIT_STATS_INIT;
    return fi_store_stats_get(st, &s) == 0 ? s.entries : -1;
}

static int count_row(void *user, const fi_store_row *row)
{
    (void)row;
    ++*(int *)user;
    return 0;
}

static void in_tmp(char *out, const char *name) { snprintf(out, 4200, "%.4000s/%s", check_tmpdir, name); }

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* A cache at `dir` holding objects 1..n, closed cleanly (no -wal, no -shm). */
static int make_cache(const char *dir, int n)
{
    fi_store *st = NULL;
    int rc = fi_store_open(&st, dir, 0, 0);
    for (int i = 1; rc == 0 && i <= n; i++) rc = put_obj(st, i, "a");
    fi_store_close(st);
    return rc;
}

/* Leave the cache as a process killed while it had the index open leaves
 * it: object n stored, its row only in index.sqlite-wal, the -shm kept. */
static int crash_after_put(const char *dir, int n)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fi_store *st = NULL;
        int rc = fi_store_open(&st, dir, 0, 0);
        if (rc == 0) rc = put_obj(st, n, "a");
        _exit(rc == 0 ? 0 : 1); /* no close: no checkpoint */
    }
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A read-only copy of the cache as its user would have it: owned by the user
 * the child runs as, every write bit removed. */
static int read_only_copy(const char *from, const char *to)
{
    if (chmod(check_tmpdir, 0755) < 0) return -1; /* the child must reach it */
    if (sh("cp -a '%s' '%s'", from, to) != 0) return -1;
    if (geteuid() == 0 && sh("chown -R %d:%d '%s'", NOBODY, NOBODY, to) != 0) return -1;
    return sh("chmod -R a-w '%s'", to);
}

/* Everything under `dir`, with sizes and modes, into `out`. */
static int snapshot(const char *dir, const char *out)
{
    return sh("cd '%s' && find . -printf '%%p %%s %%m\\n' | sort > '%s'", dir, out);
}

enum { AS_NOBODY = 1, IN_RO_MOUNT = 2 };
#define SKIPPED 77

/* Run body(arg) in a child: as uid 65534 when root (AS_NOBODY), or in a
 * mount namespace where `mount_dir` is a read-only bind mount (IN_RO_MOUNT).
 * CHECK failures in the child print there; returns its exit status. */
static int in_child(void (*body)(void *), void *arg, int how, const char *mount_dir, int log_fd)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (log_fd >= 0) dup2(log_fd, 2);
        if ((how & IN_RO_MOUNT) &&
            (unshare(CLONE_NEWNS) < 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
             mount(mount_dir, mount_dir, NULL, MS_BIND, NULL) < 0 ||
             mount(NULL, mount_dir, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0))
            _exit(SKIPPED);
        if ((how & AS_NOBODY) && geteuid() == 0 &&
            (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0))
            _exit(3);
        check_current_failed = 0;
        body(arg);
        fflush(NULL);
        _exit(check_current_failed ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int open_log(const char *path) { return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644); }

static int occurrences(const char *path, const char *needle)
{
    void *data = NULL;
    size_t size = 0;
    int n = 0;
    if (fi__read_file(path, &data, &size, 1 << 24) < 0) return -1;
    char *text = fi__realloc(data, size + 1);
    if (!text) return fi__free(data), -1;
    text[size] = '\0';
    for (const char *p = text; (p = strstr(p, needle)); p++) n++;
    fi__free(text);
    return n;
}

/* ---- 4. symlinks ------------------------------------------------------------------- */

TEST(open_works_through_symlinked_dirs_above_the_cache)
{
    char real[4200], link[4200], dir[4300], dir_link[4300];
    fi_store *st = NULL;
    in_tmp(real, "disk2");
    in_tmp(link, "home-cache"); /* ~/.cache -> /disk2 */
    CHECK(mkdir(real, 0700) == 0 && symlink(real, link) == 0);
    snprintf(dir, sizeof dir, "%s/fijit", link);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK_OK(put_obj(st, 1, "a"));
    CHECK(get_obj(st, 1, "a") == 1 && entries_of(st) == 1);
    fi_store_close(st);
    /* The cache dir itself a link. */
    in_tmp(dir_link, "cache-link");
    snprintf(dir, sizeof dir, "%s/fijit", real);
    CHECK(symlink(dir, dir_link) == 0);
    CHECK_OK(fi_store_open(&st, dir_link, 0, 0));
    CHECK(get_obj(st, 1, "a") == 1 && entries_of(st) == 1);
    fi_store_close(st);
}

TEST(open_never_follows_a_symlinked_index_wal_or_shm)
{
    static const char *const names[] = {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"};
    for (int i = 0; i < 3; i++) {
        char dir[4200], victim[4200], path[4400], text[16] = "";
        fi_store *st = NULL;
        snprintf(dir, sizeof dir, "%.4000s/cache%d", check_tmpdir, i);
        snprintf(victim, sizeof victim, "%.4000s/victim%d", check_tmpdir, i);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        CHECK_OK(make_cache(dir, 1));
        if (i == 0) CHECK(unlink(path) == 0);
        CHECK(sh("printf keep > '%s'", victim) == 0 && symlink(victim, path) == 0);
        int rc = fi_store_open(&st, dir, FI_STORE_READ_ONLY, 0);
        fi_store_close(st);
        CHECK_MSG(rc == FI_EPERM, "%s, read-only: rc %d: %s", names[i], rc, fi_last_error());
        rc = fi_store_open(&st, dir, FI_STORE_READ_ONLY_FALLBACK, 0);
        fi_store_close(st);
        if (i == 0) {
            /* Writable: the link itself is moved aside and the index rebuilt. */
            struct stat sb;
            CHECK_MSG(rc == 0 && lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "%s: rc %d: %s",
                      names[i], rc, fi_last_error());
        } else {
            CHECK_MSG(rc == FI_EPERM && strstr(fi_last_error(), "symbolic link"),
                      "%s: rc %d: %s", names[i], rc, fi_last_error());
        }
        FILE *f = fopen(victim, "r");
        CHECK(f != NULL);
        if (!fgets(text, sizeof text, f)) text[0] = '\0';
        fclose(f);
        CHECK_MSG(strcmp(text, "keep") == 0, "%s: the link's target was written", names[i]);
    }
}

/* ---- 16. long paths, memory only without a home ------------------------------------------ */

/* A directory path of exactly `len` bytes under check_tmpdir. */
static int long_dir(char *out, size_t len)
{
    size_t n = (size_t)snprintf(out, 4096, "%s", check_tmpdir);
    while (n < len) {
        size_t part = len - n - 1 < 200 ? len - n - 1 : 200;
        if (part == 0) return -1;
        out[n++] = '/';
        memset(out + n, 'd', part);
        n += part;
        out[n] = '\0';
        if (mkdir(out, 0700) < 0 && errno != EEXIST) return -1;
    }
    return n == len ? 0 : -1;
}

TEST(long_cache_dir_works_to_sqlites_limit_and_is_refused_clearly_beyond)
{
    char dir[4096];
    fi_store *st = NULL;
    sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
    size_t max = (size_t)vfs->mxPathname - strlen("/index.sqlite-journal");
    CHECK(long_dir(dir, max) == 0);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK_OK(put_obj(st, 1, "a"));
    CHECK(get_obj(st, 1, "a") == 1 && entries_of(st) == 1);
    fi_store_close(st);

    CHECK(long_dir(dir, max + 1) == 0);
    CHECK_RC(fi_store_open(&st, dir, FI_STORE_READ_ONLY_FALLBACK, 0), FI_EINVALID);
    char want[64];
    snprintf(want, sizeof want, "at most %zu bytes", max);
    CHECK_MSG(strstr(fi_last_error(), "SQLite limits") && strstr(fi_last_error(), want), "%s",
              fi_last_error());
    /* A context says so too, rather than quietly compiling everything. */
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.cache_dir = dir;
    opts.log_level = FI_LOG_OFF;
    CHECK_RC(fi_jit_ctx_new(&ctx, &opts), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "SQLite limits") != NULL);
}

TEST(memory_only_context_needs_no_cache_dir)
{
    static const char *const vars[] = {"FIJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    fi_jit_ctx *ctx = NULL, *disk = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    opts.log_level = FI_LOG_OFF;
    opts.use_disk_cache = 0;
    int rc = fi_jit_ctx_new(&ctx, &opts);
    char err[512];
    snprintf(err, sizeof err, "%s", fi_last_error());
    opts.use_disk_cache = 1;
    int rc_disk = fi_jit_ctx_new(&disk, &opts);
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(vars[i], saved[i], 1);
        free(saved[i]);
    }
    fi_jit_stats s = FI_JIT_STATS_INIT;
    int rc_stats = ctx ? fi_jit_stats_get(&s, ctx) : -1;
    const char *dir = ctx ? fi_jit_ctx_cache_dir(ctx) : NULL;
    int empty = dir && !*dir;
    fi_jit_ctx_free(ctx);
    fi_jit_ctx_free(disk);
    CHECK_MSG(rc == 0, "memory only: %s", err);
    CHECK(empty && rc_stats == 0);
    CHECK_RC(rc_disk, FI_EINVALID); /* a disk cache still needs a place */
}

/* ---- 5. read-only caches ------------------------------------------------------------ */

typedef struct ro_case {
    const char *dir;
    int objects;        /* objects 1..n are in it */
    int64_t entries;    /* rows the index shows */
    const char *reason; /* in the message without the fallback flag */
} ro_case;

static void read_only_body(void *arg)
{
    const ro_case *c = arg;
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    int rows = 0;
    int rc = fi_store_open(&st, c->dir, 0, 0);
    fi_store_close(st);
    st = NULL;
    CHECK_MSG(rc == FI_EIO && strstr(fi_last_error(), c->reason), "without fallback: %d %s", rc,
              fi_last_error());
    CHECK_OK(fi_store_open(&st, c->dir, FI_STORE_READ_ONLY_FALLBACK, 0));
    CHECK(fi_store_read_only(st));
    for (int i = 1; i <= c->objects; i++) CHECK_MSG(get_obj(st, i, "a") == 1, "object %d", i);
    CHECK(get_obj(st, c->objects + 1, "a") == 0);
    CHECK_MSG(entries_of(st) == c->entries, "entries %lld: %s", (long long)entries_of(st),
              fi_last_error());
    CHECK_OK(fi_store_foreach(st, count_row, &rows));
    CHECK(rows == c->entries);
    CHECK_MSG(fi_store_verify(st, 0, NULL, NULL) == c->objects - c->entries, "verify: %s",
              fi_last_error());
    CHECK_RC(put_obj(st, 9, "a"), FI_EINVALID);
    key_n(key, 9);
    CHECK_OK(fi_store_lock_key(st, key, &lock));
    fi_store_unlock(lock);
    fi_store_close(st);
}

/* Run read_only_body over a read-only copy of `src` and check the copy is
 * unchanged. */
static void check_read_only_copy(const char *src, ro_case *c, int how)
{
    char ro[4200], before[4200], after[4200];
    in_tmp(ro, "ro");
    in_tmp(before, "before.txt");
    in_tmp(after, "after.txt");
    if (how & IN_RO_MOUNT)
        CHECK(sh("cp -a '%s' '%s'", src, ro) == 0); /* root, and writable but for the mount */
    else
        CHECK(read_only_copy(src, ro) == 0);
    CHECK(snapshot(ro, before) == 0);
    c->dir = ro;
    int status = in_child(read_only_body, c, how, ro, -1);
    if (status == SKIPPED) {
        printf("  skipped: no mount namespace here (needs root)\n");
        return;
    }
    CHECK_MSG(status == 0, "read-only child failed (%d), see above", status);
    CHECK(snapshot(ro, after) == 0);
    CHECK_MSG(sh("cmp -s '%s' '%s'", before, after) == 0, "the read-only cache changed");
}

TEST(read_only_copy_is_read_by_its_user)
{
    char src[4200];
    in_tmp(src, "cache");
    CHECK_OK(make_cache(src, 3));
    ro_case c = {NULL, 3, 3, "not writable"};
    check_read_only_copy(src, &c, AS_NOBODY);
}

TEST(read_only_copy_with_wal_and_shm_shows_the_wal)
{
    char src[4200], shm[4300];
    in_tmp(src, "cache");
    CHECK_OK(make_cache(src, 2));
    CHECK(crash_after_put(src, 3) == 0);
    snprintf(shm, sizeof shm, "%s/index.sqlite-shm", src);
    CHECK(access(shm, F_OK) == 0);
    ro_case c = {NULL, 3, 3, "not writable"}; /* row 3 is only in the -wal */
    check_read_only_copy(src, &c, AS_NOBODY);
}

TEST(read_only_copy_with_wal_but_no_shm_serves_every_object)
{
    char src[4200], shm[4300];
    in_tmp(src, "cache");
    CHECK_OK(make_cache(src, 2));
    CHECK(crash_after_put(src, 3) == 0);
    snprintf(shm, sizeof shm, "%s/index.sqlite-shm", src);
    CHECK(unlink(shm) == 0);
    /* Without a -shm the -wal cannot be read: the index shows 2 rows, but
     * object 3 is served (by key) all the same. */
    ro_case c = {NULL, 3, 2, "not writable"};
    check_read_only_copy(src, &c, AS_NOBODY);
}

TEST(root_owned_image_cache_is_read_by_a_service_user)
{
    char src[4200], ro[4200];
    if (geteuid() != 0) {
        printf("  skipped: needs root to make a root-owned cache for another user\n");
        return;
    }
    in_tmp(src, "cache");
    in_tmp(ro, "ro");
    CHECK_OK(make_cache(src, 2));
    CHECK(chmod(check_tmpdir, 0755) == 0);
    /* As a Dockerfile would: COPY the cache, make it world-readable, read-only. */
    CHECK(sh("cp -a '%s' '%s' && chmod -R a+rX,a-w '%s'", src, ro, ro) == 0);
    ro_case c = {ro, 2, 2, "not writable"};
    CHECK(in_child(read_only_body, &c, AS_NOBODY, NULL, -1) == 0);
}

TEST(read_only_bind_mount_is_read_even_by_root)
{
    char src[4200];
    in_tmp(src, "cache");
    CHECK_OK(make_cache(src, 3));
    ro_case c = {NULL, 3, 3, "Read-only file system"};
    check_read_only_copy(src, &c, IN_RO_MOUNT);
}

static fi_jit_spec spec_of(const char *text)
{
    static char variant[64];
    fi_jit_spec spec;
    if (fi_jit_spec_parse(&spec, variant, sizeof variant, text) < 0) abort();
    return spec;
}

typedef struct jit_case {
    const char *dir;
    int rc_cached, out_cached, rc_nojit, rc_compiled, out_compiled, rc_stats;
    int64_t disk_hits;
} jit_case;

static void jit_read_only_body(void *arg)
{
    jit_case *c = arg;
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_build_outcome out = FI_BUILD_COMPILED;
    fi_jit_spec a = spec_of("decode q=fp16 hd=64"), b = spec_of("decode q=bf16 hd=64");
    fi_jit_stats s = FI_JIT_STATS_INIT;
    opts.cache_dir = c->dir;
    opts.arch = "sm_90a";
    opts.jit = 0; /* FIJIT_JIT=0: serve only what the cache holds */
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    c->rc_cached = fi_jit_prewarm(&out, ctx, &a, NULL);
    c->out_cached = (int)out;
    c->rc_nojit = fi_jit_prewarm(&out, ctx, &b, NULL);
    fi_jit_ctx_free(ctx);
    opts.jit = 1;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    c->rc_compiled = fi_jit_prewarm(&out, ctx, &b, NULL);
    c->out_compiled = (int)out;
    c->rc_stats = fi_jit_stats_get(&s, ctx);
    c->disk_hits = s.disk_hits;
    fi_jit_ctx_free(ctx);
}

TEST(read_only_cache_serves_kernels_and_compiles_misses_in_memory)
{
    char src[4200], ro[4200], log[4200], before[4200], after[4200];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_spec a = spec_of("decode q=fp16 hd=64");
    in_tmp(src, "cache");
    in_tmp(ro, "ro");
    in_tmp(log, "log.txt");
    in_tmp(before, "before.txt");
    in_tmp(after, "after.txt");
    opts.cache_dir = src;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_OFF;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    int rc = fi_jit_prewarm(NULL, ctx, &a, NULL);
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
    CHECK(read_only_copy(src, ro) == 0 && snapshot(ro, before) == 0);
    /* The child's results come back through a shared page. */
    jit_case *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(c != MAP_FAILED);
    memset(c, 0x7f, sizeof *c);
    c->dir = ro;
    int fd = open_log(log);
    int status = in_child(jit_read_only_body, c, AS_NOBODY, NULL, fd);
    close(fd);
    jit_case r = *c;
    munmap(c, sizeof *c);
    CHECK_MSG(status == 0, "child failed (%d)", status);
    CHECK_MSG(r.rc_cached == 0 && r.out_cached == FI_BUILD_CACHED, "cached kernel: rc %d out %d",
              r.rc_cached, r.out_cached);
    CHECK_RC(r.rc_nojit, FI_ENOTFOUND);
    /* A miss compiles (in memory) but prewarm, whose job is to store, says it could not. */
    CHECK_MSG(r.rc_compiled == FI_EIO, "miss: rc %d", r.rc_compiled);
    CHECK(r.rc_stats == 0);
    CHECK(snapshot(ro, after) == 0);
    CHECK_MSG(sh("cmp -s '%s' '%s'", before, after) == 0, "the read-only cache changed");
    /* Said once per context, and nothing else complains. */
    CHECK_MSG(occurrences(log, "opened read-only") == 2, "log: %d", occurrences(log, "opened read-only"));
    CHECK(occurrences(log, "warning") == 2);
}

/* ---- 6. a full disk ---------------------------------------------------------------- */

/* SQLite's own writes fail with ENOSPC while `sqlite_disk_full` is set,
 * through the unix VFS's system-call table (its fault-injection seam): 1
 * every write, FULL_GROWING only those that make a file longer (a full disk
 * still overwrites the blocks a file has). */
static atomic_int sqlite_disk_full;
#define FULL_GROWING 2
static sqlite3_syscall_ptr real_calls[5];
static const char *const full_names[5] = {"write", "pwrite", "pwrite64", "ftruncate", "fallocate"};

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef int (*ftruncate_fn)(int, off_t);
typedef int (*fallocate_fn)(int, off_t, off_t);

/* 1 when a write to `fd` that ends at `end` (< 0: at the file offset plus
 * -end) must fail. */
static int full_refuses(int fd, off_t end)
{
    int mode = atomic_load(&sqlite_disk_full);
    struct stat sb;
    if (mode != FULL_GROWING) return mode;
    if (end < 0) end = lseek(fd, 0, SEEK_CUR) - end;
    return fstat(fd, &sb) < 0 || end > sb.st_size;
}
static ssize_t full_write(int fd, const void *b, size_t n)
{
    if (full_refuses(fd, -(off_t)n)) return errno = ENOSPC, -1;
    return ((write_fn)real_calls[0])(fd, b, n);
}
static ssize_t full_pwrite(int fd, const void *b, size_t n, off_t off)
{
    if (full_refuses(fd, off + (off_t)n)) return errno = ENOSPC, -1;
    return ((pwrite_fn)real_calls[1])(fd, b, n, off);
}
static ssize_t full_pwrite64(int fd, const void *b, size_t n, off_t off)
{
    if (full_refuses(fd, off + (off_t)n)) return errno = ENOSPC, -1;
    return ((pwrite_fn)real_calls[2])(fd, b, n, off);
}
static int full_ftruncate(int fd, off_t n)
{
    if (full_refuses(fd, n)) return errno = ENOSPC, -1;
    return ((ftruncate_fn)real_calls[3])(fd, n);
}
static int full_fallocate(int fd, off_t off, off_t n)
{
    if (full_refuses(fd, off + n)) return ENOSPC; /* posix_fallocate returns the error */
    return ((fallocate_fn)real_calls[4])(fd, off, n);
}

static void sqlite_full_install(int on)
{
    sqlite3_vfs *vfs = sqlite3_vfs_find("unix");
    const sqlite3_syscall_ptr mine[5] = {(sqlite3_syscall_ptr)full_write,
                                         (sqlite3_syscall_ptr)full_pwrite,
                                         (sqlite3_syscall_ptr)full_pwrite64,
                                         (sqlite3_syscall_ptr)full_ftruncate,
                                         (sqlite3_syscall_ptr)full_fallocate};
    for (int i = 0; i < 5; i++) {
        if (on) real_calls[i] = vfs->xGetSystemCall(vfs, full_names[i]);
        if (real_calls[i]) vfs->xSetSystemCall(vfs, full_names[i], on ? mine[i] : real_calls[i]);
    }
}

static void disk_full(int on)
{
    atomic_store(&sqlite_disk_full, on);
    fi__fault_arm(on ? FI_FAULT_DISK_FULL : 0, on, on);
}

/* Counters saved after the disk filled are not lost: SQLite's log cannot
 * grow, but checkpointed it is written again from its start, in blocks it
 * has (a prewarm on a full disk counted 32 compiles for 60 before). */
TEST(full_disk_loses_no_counts_once_the_log_cannot_grow)
{
    enum { SAVES = 60 };
    char dir[4200], index[4300];
    fi_store *st = NULL;
    sqlite3 *db = NULL;
    in_tmp(dir, "cache");
    snprintf(index, sizeof index, "%s/index.sqlite", dir);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    fi_jit_stats one = FI_JIT_STATS_INIT;
    one.compiles = 1;
    int rc = 0;
    for (int i = 1; rc == 0 && i <= 3; i++) rc = put_obj(st, i, "a");
    if (rc == 0) rc = fi_store_stats_add(st, &one);
    /* Another connection moves the log into the index: the log keeps its
     * size, and the index its pages, for what follows. */
    int checkpointed = sqlite3_open(index, &db) == SQLITE_OK &&
                       sqlite3_exec(db, "PRAGMA wal_checkpoint(PASSIVE)", NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(db);
    sqlite_full_install(1);
    atomic_store(&sqlite_disk_full, FULL_GROWING);
    int failed = 0;
    for (int i = 0; rc == 0 && i < SAVES; i++) failed += fi_store_stats_add(st, &one) < 0;
    atomic_store(&sqlite_disk_full, 0);
    sqlite_full_install(0);
    fi_jit_stats s = FI_JIT_STATS_INIT;
    if (rc == 0) rc = fi_store_stats_get(st, &s);
    fi_store_close(st);
    CHECK_OK(rc);
    CHECK(checkpointed);
    CHECK_MSG(failed == 0 && s.compiles == SAVES + 1, "%d saves failed; %lld compiles counted of %d",
              failed, (long long)s.compiles, SAVES + 1);
}

TEST(full_disk_still_serves_reads_and_says_the_disk_is_full)
{
    char dir[4200];
    fi_store *st = NULL;
    in_tmp(dir, "cache");
    CHECK_OK(make_cache(dir, 3)); /* closed: the next open must make a -shm */
    sqlite_full_install(1);
    disk_full(1);
    int rc_plain = fi_store_open(&st, dir, 0, 0);
    char err[1024];
    snprintf(err, sizeof err, "%s", fi_last_error());
    fi_store_close(st);
    st = NULL;
    int rc = fi_store_open(&st, dir, FI_STORE_READ_ONLY_FALLBACK, 0);
    int ro = fi_store_read_only(st), served = 0;
    for (int i = 1; i <= 3; i++) served += get_obj(st, i, "a") == 1;
    int64_t entries = entries_of(st);
    int rc_put = st ? put_obj(st, 4, "a") : 0;
    fi_store_close(st);
    disk_full(0);
    sqlite_full_install(0);
    CHECK_MSG(rc_plain == FI_EIO && strstr(err, "the disk is full"), "%d: %s", rc_plain, err);
    CHECK_MSG(rc == 0 && ro && served == 3 && entries == 3, "rc %d ro %d served %d of 3, %lld rows",
              rc, ro, served, (long long)entries);
    CHECK_RC(rc_put, FI_EINVALID);
    /* With space again: writable, and nothing was damaged. */
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK(!fi_store_read_only(st) && fi_store_verify(st, 0, NULL, NULL) == 0);
    CHECK_OK(put_obj(st, 4, "a"));
    CHECK(entries_of(st) == 4);
    fi_store_close(st);
}

TEST(full_disk_context_serves_the_cache)
{
    char dir[4200];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_spec a = spec_of("decode q=fp16 hd=64");
    fi_build_outcome out = FI_BUILD_COMPILED;
    in_tmp(dir, "cache");
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_OFF;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    int rc = fi_jit_prewarm(NULL, ctx, &a, NULL);
    fi_jit_ctx_free(ctx);
    ctx = NULL;
    CHECK_OK(rc);
    sqlite_full_install(1);
    disk_full(1);
    opts.jit = 0;
    rc = fi_jit_ctx_new(&ctx, &opts);
    if (rc == 0) rc = fi_jit_prewarm(&out, ctx, &a, NULL);
    fi_jit_ctx_free(ctx);
    disk_full(0);
    sqlite_full_install(0);
    CHECK_MSG(rc == 0 && out == FI_BUILD_CACHED, "rc %d out %d: %s", rc, out, fi_last_error());
}

/* ---- 10. a frozen lock holder ------------------------------------------------------- */

/* The holder: lock key 1, say so, stop; when continued, publish object 1
 * ("late") and leave, writing "P" to `result_fd` (when >= 0) if it published. */
static void frozen_holder(const char *dir, int ready_fd, int result_fd)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    key_n(key, 1);
    if (fi_store_open(&st, dir, 0, 0) < 0 || fi_store_lock_key(st, key, &lock) < 0) _exit(2);
    if (write(ready_fd, "L", 1) != 1) _exit(2);
    raise(SIGSTOP);
    int rc = put_obj(st, 1, "late");
    fi_store_unlock(lock);
    fi_store_close(st);
    _exit(rc == 0 && (result_fd < 0 || write(result_fd, "P", 1) == 1) ? 0 : 1);
}

/* The waiter: times out, builds and publishes object 1 ("early"). Exit 0 if
 * the wait took 0.25-10 s and the object is served. */
static void timed_waiter(const char *dir)
{
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    uint8_t key[16];
    key_n(key, 1);
    if (fi_store_open(&st, dir, 0, 0) < 0) _exit(2);
    fi_store_set_lock_timeout(st, 300);
    int64_t t0 = fi__now_ns();
    int rc = fi_store_lock_key(st, key, &lock);
    double waited = (double)(fi__now_ns() - t0) / 1e9;
    if (rc == 0) rc = put_obj(st, 1, "early");
    int got = get_obj(st, 1, "early");
    fi_store_unlock(lock);
    fi_store_close(st);
    if (rc != 0 || got != 1) _exit(3);
    _exit(waited >= 0.25 && waited < 10 ? 0 : 4);
}

TEST(waiter_gives_up_on_a_frozen_lock_holder_and_the_late_writer_is_harmless)
{
    char dir[4200];
    int fds[2];
    char c = 0;
    int status = 0;
    fi_store *st = NULL;
    in_tmp(dir, "cache");
    CHECK_OK(make_cache(dir, 0));
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t holder = fork();
    if (holder == 0) frozen_holder(dir, fds[1], -1);
    close(fds[1]);
    int got = (int)read(fds[0], &c, 1);
    close(fds[0]);
    CHECK(got == 1 && c == 'L');
    CHECK(waitpid(holder, &status, WUNTRACED) == holder && WIFSTOPPED(status));

    pid_t waiter = fork();
    if (waiter == 0) timed_waiter(dir);
    int done = 0;
    for (int i = 0; i < 2000 && !done; i++) { /* 20 s at most */
        done = waitpid(waiter, &status, WNOHANG) == waiter;
        if (!done) {
            struct timespec pause = {0, 10000000};
            nanosleep(&pause, NULL);
        }
    }
    if (!done) {
        kill(waiter, SIGKILL);
        waitpid(waiter, NULL, 0);
    }
    kill(holder, SIGCONT);
    int holder_status = 0;
    waitpid(holder, &holder_status, 0);
    CHECK_MSG(done, "the waiter was still blocked behind the stopped holder after 20 s");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "waiter status %#x", status);
    /* The holder wakes up and publishes the same key: both entries were
     * whole, the last one wins, nothing is damaged. */
    CHECK_MSG(WIFEXITED(holder_status) && WEXITSTATUS(holder_status) == 0, "holder %#x",
              holder_status);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    CHECK(get_obj(st, 1, "late") == 1);
    CHECK(entries_of(st) == 1 && fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}

/* fi_jit_explain's text, kept whole. */
static void append_text(void *user, const char *text)
{
    char *buf = user;
    size_t used = strlen(buf);
    snprintf(buf + used, 65536 - used, "%s", text);
}

/* A context builds a kernel whose lock a stopped process holds, after
 * FIJIT_LOCK_TIMEOUT_MS. */
TEST(context_builds_past_a_frozen_holder_after_the_lock_timeout)
{
    char dir[4200], lock[4400];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_spec a = spec_of("decode q=fp16 hd=64");
    in_tmp(dir, "cache");
    opts.cache_dir = dir;
    opts.arch = "sm_90a";
    opts.log_level = FI_LOG_OFF;
    char *text = calloc(1, 65536);
    CHECK(text != NULL);
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    int rc = fi_jit_explain(ctx, &a, "sm_90a", append_text, text);
    fi_jit_ctx_free(ctx);
    ctx = NULL;
    const char *k = strstr(text, "\nkey ");
    int found = rc == 0 && k && strspn(k + 5, "0123456789abcdef") >= 32;
    if (found) snprintf(lock, sizeof lock, "%s/locks/%.32s.lock", dir, k + 5);
    free(text);
    CHECK_MSG(found, "no key in fi_jit_explain's text (rc %d)", rc);

    int fds[2], status = 0;
    char c = 0;
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t holder = fork();
    if (holder == 0) {
        int fd = open(lock, O_RDWR | O_CREAT, 0600);
        if (fd < 0 || flock(fd, LOCK_EX) < 0 || write(fds[1], "L", 1) != 1) _exit(2);
        raise(SIGSTOP);
        _exit(0);
    }
    close(fds[1]);
    int got = (int)read(fds[0], &c, 1);
    close(fds[0]);
    if (got == 1) waitpid(holder, &status, WUNTRACED);
    fi_build_outcome out = FI_BUILD_CACHED;
    setenv("FIJIT_LOCK_TIMEOUT_MS", "300", 1);
    int64_t t0 = fi__now_ns();
    rc = fi_jit_ctx_new(&ctx, &opts);
    /* Before the timeout existed this waited for ever: bound it here. */
    alarm(60);
    if (rc == 0) rc = fi_jit_prewarm(&out, ctx, &a, NULL);
    alarm(0);
    double took = (double)(fi__now_ns() - t0) / 1e9;
    unsetenv("FIJIT_LOCK_TIMEOUT_MS");
    fi_jit_ctx_free(ctx);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK(got == 1 && WIFSTOPPED(status));
    CHECK_MSG(rc == 0 && out == FI_BUILD_COMPILED, "rc %d: %s", rc, fi_last_error());
    CHECK_MSG(took >= 0.3, "built after %.2f s: the lock was not waited for", took);
}

TEST(lock_timeout_comes_from_the_environment_and_is_checked)
{
    static const char *const bad[] = {"soon", "10s", "-5"};
    char dir[4200];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    in_tmp(dir, "cache");
    opts.cache_dir = dir;
    opts.log_level = FI_LOG_OFF;
    for (int i = 0; i < 3; i++) {
        setenv("FIJIT_LOCK_TIMEOUT_MS", bad[i], 1);
        int rc = fi_jit_ctx_new(&ctx, &opts);
        fi_jit_ctx_free(ctx);
        ctx = NULL;
        CHECK_MSG(rc == FI_EINVALID && strstr(fi_last_error(), "FIJIT_LOCK_TIMEOUT_MS"),
                  "'%s': rc %d", bad[i], rc);
    }
    setenv("FIJIT_LOCK_TIMEOUT_MS", "250", 1);
    int rc = fi_jit_ctx_new(&ctx, &opts);
    unsetenv("FIJIT_LOCK_TIMEOUT_MS");
    fi_jit_ctx_free(ctx);
    CHECK_OK(rc);
}

/* ---- 15. a stale -shm ------------------------------------------------------------------ */

typedef struct shm_case {
    const char *dir;
    int want_read_only;
} shm_case;

static void stale_shm_body(void *arg)
{
    const shm_case *c = arg;
    fi_store *st = NULL;
    fi__log_set_level(FI_LOG_WARN);
    int rc = fi_store_open(&st, c->dir, 0, 0);
    if (c->want_read_only) {
        char want[4300];
        snprintf(want, sizeof want, "%s/index.sqlite-shm", c->dir);
        CHECK_MSG(rc == FI_EIO && strstr(fi_last_error(), want) &&
                      strstr(fi_last_error(), "then remove it"),
                  "rc %d: %s", rc, fi_last_error());
        CHECK_OK(fi_store_open(&st, c->dir, FI_STORE_READ_ONLY_FALLBACK, 0));
        CHECK(fi_store_read_only(st));
        for (int i = 1; i <= 3; i++) CHECK(get_obj(st, i, "a") == 1);
        fi_store_close(st);
        return;
    }
    CHECK_MSG(rc == 0, "%s", fi_last_error());
    CHECK(!fi_store_read_only(st));
    for (int i = 1; i <= 3; i++) CHECK(get_obj(st, i, "a") == 1);
    CHECK_MSG(put_obj(st, 4, "a") == 0, "put: %s", fi_last_error());
    fi_jit_stats d = FI_JIT_STATS_INIT;
    d.misses = 1;
    CHECK_OK(fi_store_stats_add(st, &d));
    CHECK(entries_of(st) == 4);
    fi_store_close(st);
}

/* A cache owned by the child's user whose last writer died (objects 1-3,
 * row 3 in the -wal), its -shm then made 0400 (or given to root). */
static int stale_shm_cache(const char *dir, int to_root)
{
    char shm[4300];
    snprintf(shm, sizeof shm, "%s/index.sqlite-shm", dir);
    if (chmod(check_tmpdir, 0755) < 0 || make_cache(dir, 2) < 0 || crash_after_put(dir, 3) != 0)
        return -1;
    if (geteuid() == 0 && sh("chown -R %d:%d '%s'", NOBODY, NOBODY, dir) != 0) return -1;
    if (to_root && chown(shm, 0, 0) < 0) return -1;
    return chmod(shm, to_root ? 0644 : 0400);
}

TEST(stale_read_only_shm_is_repaired_and_said_once)
{
    char dir[4200], log[4200];
    in_tmp(dir, "cache");
    in_tmp(log, "log.txt");
    CHECK(stale_shm_cache(dir, 0) == 0);
    shm_case c = {dir, 0};
    int fd = open_log(log);
    int status = in_child(stale_shm_body, &c, AS_NOBODY, NULL, fd);
    close(fd);
    CHECK_MSG(status == 0, "child failed (%d)", status);
    CHECK(occurrences(log, "made it 0600") == 1);
}

TEST(another_users_idle_shm_is_removed_a_busy_one_is_named)
{
    char dir[4200], shm[4300];
    if (geteuid() != 0) {
        printf("  skipped: needs root to leave another user's -shm\n");
        return;
    }
    in_tmp(dir, "cache");
    snprintf(shm, sizeof shm, "%s/index.sqlite-shm", dir);
    CHECK(stale_shm_cache(dir, 1) == 0);
    /* In use: a process holds SQLite's read lock on the DMS byte. */
    int fd = open(shm, O_RDWR);
    struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 128, .l_len = 1};
    CHECK(fd >= 0 && fcntl(fd, F_SETLK, &lk) == 0);
    shm_case busy = {dir, 1};
    int status = in_child(stale_shm_body, &busy, AS_NOBODY, NULL, -1);
    close(fd); /* idle now */
    CHECK_MSG(status == 0, "busy -shm: child failed (%d)", status);
    shm_case idle = {dir, 0};
    CHECK_MSG(in_child(stale_shm_body, &idle, AS_NOBODY, NULL, -1) == 0, "idle -shm: child failed");
}

TEST(a_cache_refusing_writes_warns_once_per_context)
{
    char dir[4200], log[4200];
    fi_jit_ctx *ctx = NULL;
    fi_jit_options opts = FI_JIT_OPTIONS_INIT;
    fi_jit_stats s = FI_JIT_STATS_INIT;
    in_tmp(dir, "cache");
    in_tmp(log, "log.txt");
    opts.cache_dir = dir;
    CHECK_OK(fi_jit_ctx_new(&ctx, &opts));
    fflush(stderr);
    int saved = dup(2), fd = open_log(log);
    dup2(fd, 2);
    close(fd);
    fi__fault_arm(FI_FAULT_SQL, 1, 1);
    for (int i = 0; i < 5; i++) (void)fi_jit_stats_get(&s, ctx); /* each saves counters */
    fi__fault_arm(0, 0, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fi_jit_ctx_free(ctx);
    CHECK_MSG(occurrences(log, "could not save statistics") == 1, "said %d times",
              occurrences(log, "could not save statistics"));
}

/* An index broken under a running writer while another process holds the
 * rebuild lock: that put fails, but the store does not stay closed; the
 * next put opens the index again (rebuilding it) and stores, and every
 * object is served. */
TEST(index_closed_by_a_failed_rebuild_is_opened_again_by_the_next_put)
{
    char dir[4200], index[4300], lock[4300];
    fi_store *st = NULL;
    sqlite3 *db = NULL;
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    snprintf(index, sizeof index, "%s/index.sqlite", dir);
    snprintf(lock, sizeof lock, "%s/locks/index.lock", dir);
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    fi_store_set_lock_timeout(st, 0);
    CHECK_OK(put_obj(st, 1, "a"));
    CHECK(sqlite3_open(index, &db) == SQLITE_OK);
    int dropped = sqlite3_exec(db, "DROP TABLE entries", NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(db);
    int fd = open(lock, O_RDWR | O_CREAT, 0600);
    int held = fd >= 0 && flock(fd, LOCK_EX) == 0;
    int rc_during = put_obj(st, 2, "a"); /* broken index, rebuild lock taken */
    if (fd >= 0) close(fd);
    int rc_after = put_obj(st, 3, "a");
    int served = get_obj(st, 1, "a") + get_obj(st, 3, "a");
    fi_jit_stats s = FI_JIT_STATS_INIT;
    int rc_stats = fi_store_stats_get(st, &s);
    fi_store_close(st);
    CHECK(dropped && held);
    CHECK_MSG(rc_during < 0, "the put under a held rebuild lock stored: %d", rc_during);
    CHECK_MSG(rc_after == 0, "the next put failed: %s", fi_last_error());
    CHECK(served == 2);
    CHECK_OK(rc_stats);
    CHECK(s.entries >= 2 && s.corrupt >= 1);
}

/* A holder stopped while it holds a key's lock is taken over within a few
 * seconds of the default 60 s lock timeout: the waiter gets the lock (a
 * real one, that a third process waits for), stores its entry; the holder,
 * continued, finds it lost the lock and stores nothing over it. */
TEST(lock_of_a_stopped_holder_is_taken_over_and_the_holder_stores_nothing)
{
    char dir[4200], lock_path[4400], hex[33];
    int ready[2], result[2], status = 0;
    char c = 0;
    uint8_t key[16];
    fi_store *st = NULL;
    fi_store_lock *lock = NULL;
    in_tmp(dir, "cache");
    CHECK_OK(make_cache(dir, 0));
    key_n(key, 1);
    fi_key_hex(hex, key);
    snprintf(lock_path, sizeof lock_path, "%s/locks/%s.lock", dir, hex);
    CHECK(pipe(ready) == 0 && pipe(result) == 0);
    fflush(NULL);
    pid_t holder = fork();
    if (holder == 0) frozen_holder(dir, ready[1], result[1]);
    close(ready[1]);
    close(result[1]);
    int got = (int)read(ready[0], &c, 1);
    close(ready[0]);
    CHECK(got == 1 && c == 'L');
    CHECK(waitpid(holder, &status, WUNTRACED) == holder && WIFSTOPPED(status));

    /* The default lock timeout: only a takeover ends the wait before it. */
    CHECK_OK(fi_store_open(&st, dir, 0, 0));
    int64_t t0 = fi__now_ns();
    int rc = fi_store_lock_key(st, key, &lock);
    double waited = (double)(fi__now_ns() - t0) / 1e9;
    int fd = open(lock_path, O_RDWR);
    int third_waits = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    if (fd >= 0) close(fd);
    int put = rc == 0 ? put_obj(st, 1, "early") : rc;
    fi_store_unlock(lock);
    kill(holder, SIGCONT);
    int holder_status = 0;
    waitpid(holder, &holder_status, 0);
    got = (int)read(result[0], &c, 1);
    close(result[0]);
    printf("  took the lock of a stopped holder over in %.1f s (lock timeout %d s)\n", waited,
           FI_STORE_LOCK_TIMEOUT_MS / 1000);
    CHECK_OK(rc);
    CHECK_MSG(waited < FI_STORE_LOCK_TIMEOUT_MS / 1000.0 / 2, "waited %.1f s", waited);
    CHECK_MSG(third_waits, "the lock taken over is not held");
    CHECK_OK(put);
    CHECK_MSG(WIFEXITED(holder_status) && WEXITSTATUS(holder_status) == 0 && got == 1,
              "holder %#x", holder_status);
    /* The waiter's entry stands; the holder's put left it alone. */
    CHECK(get_obj(st, 1, "early") == 1);
    CHECK(entries_of(st) == 1 && fi_store_verify(st, 0, NULL, NULL) == 0);
    fi_store_close(st);
}
