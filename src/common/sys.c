/*
 * System-call wrappers with a fault-injection seam (see sys.h). In normal use
 * fi__fault() is one relaxed atomic load. Also the environment rules the
 * library and the CLI share (cache dir, log level).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sys.h"

static atomic_uint fault_mask;    /* classes armed; 0: injection off */
static atomic_long fault_countdown; /* calls left before the first failure */
static atomic_int fault_persistent;
static atomic_long fault_fired;

void fi__fault_arm(unsigned mask, long nth, int persistent)
{
    atomic_store(&fault_mask, 0u);
    atomic_store(&fault_countdown, nth);
    atomic_store(&fault_persistent, persistent);
    atomic_store(&fault_fired, 0);
    if (nth > 0) atomic_store(&fault_mask, mask);
}

long fi__fault_count(void) { return atomic_load(&fault_fired); }

int fi__fault(fi_fault_class cls)
{
    if (!(atomic_load_explicit(&fault_mask, memory_order_relaxed) & (unsigned)cls)) return 0;
    long left = atomic_fetch_sub(&fault_countdown, 1) - 1;
    if (left == 0 || (left < 0 && atomic_load(&fault_persistent))) {
        atomic_fetch_add(&fault_fired, 1);
        return 1;
    }
    return 0;
}

void *fi__malloc(size_t n)
{
    if (fi__fault(FI_FAULT_ALLOC)) return NULL;
    return malloc(n ? n : 1);
}

void *fi__calloc(size_t count, size_t n)
{
    if (fi__fault(FI_FAULT_ALLOC)) return NULL;
    return calloc(count ? count : 1, n ? n : 1);
}

void *fi__realloc(void *p, size_t n)
{
    if (fi__fault(FI_FAULT_ALLOC)) return NULL;
    return realloc(p, n ? n : 1);
}

char *fi__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = fi__malloc(n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

void fi__free(void *p) { free(p); }

/* An injected fault of class `cls` fails the call with `err` in errno. */
#define FI_ERRNO_FAULT(cls, err, ret)                                          \
    do {                                                                       \
        if (fi__fault(cls)) {                                                  \
            errno = (err);                                                     \
            return (ret);                                                      \
        }                                                                      \
    } while (0)
/* Injected file faults look like an I/O error to the caller. */
#define FI_FILE_FAULT(ret) FI_ERRNO_FAULT(FI_FAULT_FILE, EIO, ret)
/* A simulated full disk: calls that need space fail with ENOSPC. */
#define FI_FULL_FAULT(ret) FI_ERRNO_FAULT(FI_FAULT_DISK_FULL, ENOSPC, ret)

/* Creating a name that exists needs no space: a full disk fails only new ones. */
static int would_create(const char *path)
{
    if (!(atomic_load_explicit(&fault_mask, memory_order_relaxed) & FI_FAULT_DISK_FULL)) return 0;
    struct stat sb;
    return lstat(path, &sb) != 0;
}

/* The cache's umask (FIJIT_UMASK, fijit.conf's umask); -1: what fijit
 * creates stays private, as its callers ask (0700 directories, 0600 files). */
static atomic_int cache_umask = -1;

void fi__cache_umask_set(int umask) { atomic_store(&cache_umask, umask); }

int fi__cache_umask(void) { return atomic_load(&cache_umask); }

mode_t fi__cache_unsafe_bits(void)
{
    const int umask = atomic_load(&cache_umask);
    /* Others never; the group only where the umask shares the cache with it. */
    return umask >= 0 && !(umask & S_IWGRP) ? S_IWOTH : (S_IWGRP | S_IWOTH);
}

/* A private mode (0700, 0600) widened to group and others, less the cache's
 * umask; any other mode, or no umask set, is left as asked. */
static mode_t cache_mode(mode_t mode)
{
    const int umask = atomic_load(&cache_umask);
    if (umask < 0 || (mode & 077)) return mode;
    const mode_t user = mode & 0700;
    return (user | user >> 3 | user >> 6) & ~(mode_t)umask;
}

int fi__open(const char *path, int flags, mode_t mode)
{
    FI_FILE_FAULT(-1);
    if ((flags & O_CREAT) && would_create(path)) FI_FULL_FAULT(-1);
    const mode_t want = (flags & O_CREAT) ? cache_mode(mode) : mode;
    int fd;
    do fd = open(path, flags | O_CLOEXEC, want);
    while (fd < 0 && errno == EINTR);
    /* The process's umask may have narrowed it; a file of another user stays as it is. */
    if (fd >= 0 && want != mode) (void)fchmod(fd, want);
    return fd;
}

int fi__close(int fd) { return fd >= 0 ? close(fd) : 0; }

int fi__read_full(int fd, void *buf, size_t n)
{
    FI_FILE_FAULT(-1);
    char *p = buf;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) {
            errno = EIO; /* short file */
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int fi__write_full(int fd, const void *buf, size_t n)
{
    FI_FILE_FAULT(-1);
    FI_FULL_FAULT(-1);
    const char *p = buf;
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) return -1;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

int fi__fsync(int fd)
{
    FI_FILE_FAULT(-1);
    FI_FULL_FAULT(-1);
    return fsync(fd);
}

int fi__rename(const char *from, const char *to)
{
    FI_FILE_FAULT(-1);
    FI_FULL_FAULT(-1);
    return rename(from, to);
}

int fi__unlink(const char *path)
{
    FI_FILE_FAULT(-1);
    return unlink(path);
}

int fi__mkdir(const char *path, mode_t mode)
{
    FI_FILE_FAULT(-1);
    if (would_create(path)) FI_FULL_FAULT(-1);
    const mode_t want = cache_mode(mode);
    int rc = mkdir(path, want);
    if (rc == 0 && want != mode) (void)chmod(path, want); /* past the process's umask */
    return rc;
}

int fi__fstat(int fd, struct stat *st)
{
    FI_FILE_FAULT(-1);
    return fstat(fd, st);
}

int fi__lstat(const char *path, struct stat *st)
{
    FI_FILE_FAULT(-1);
    return lstat(path, st);
}

int fi__access(const char *path, int mode) { return access(path, mode); }

int fi__realpath(const char *path, char *out)
{
    FI_FILE_FAULT(-1);
    return realpath(path, out) ? 0 : -1;
}

int fi__statvfs(const char *path, struct statvfs *out)
{
    if (statvfs(path, out) < 0) return -1;
    if (atomic_load_explicit(&fault_mask, memory_order_relaxed) & FI_FAULT_DISK_FULL)
        out->f_bfree = out->f_bavail = 0;
    return 0;
}

int fi__read_file(const char *path, void **out, size_t *out_size, size_t max_size)
{
    int rc = 0;
    char *data = NULL;
    struct stat st;
    int fd = fi__open(path, O_RDONLY | O_NOFOLLOW, 0);
    if (fd < 0) {
        if (errno == ENOENT) FI_FAIL(FI_ENOTFOUND, "%s: no such file", path);
        FI_FAIL(FI_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    if (fi__fstat(fd, &st) < 0) FI_FAIL(FI_EIO, "cannot stat %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) FI_FAIL(FI_EIO, "%s is not a regular file", path);
    if ((size_t)st.st_size > max_size)
        FI_FAIL(FI_EIO, "%s is %lld bytes, more than the %zu allowed", path,
                (long long)st.st_size, max_size);
    if (!(data = fi__malloc((size_t)st.st_size + 1)))
        FI_FAIL(FI_ENOMEM, "out of memory reading %s", path);
    if (fi__read_full(fd, data, (size_t)st.st_size) < 0)
        FI_FAIL(FI_EIO, "cannot read %s: %s", path, strerror(errno));
    data[st.st_size] = '\0'; /* text files can be used as strings */
    *out = data;
    *out_size = (size_t)st.st_size;
    data = NULL;
out:
    fi__free(data);
    fi__close(fd);
    return rc;
}

int fi__atomic_begin(fi_atomic_file *f, const char *final_path)
{
    static atomic_uint sequence;
    f->fd = -1;
    f->failed_errno = 0;
    if (snprintf(f->final_path, sizeof f->final_path, "%s", final_path) >=
            (int)sizeof f->final_path ||
        snprintf(f->tmp_path, sizeof f->tmp_path, "%s.tmp.%ld.%u", final_path, (long)getpid(),
                 atomic_fetch_add(&sequence, 1)) >= (int)sizeof f->tmp_path)
        return fi__error(FI_EINVALID, "path too long: %s", final_path);
    f->fd = fi__open(f->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (f->fd < 0) {
        f->failed_errno = errno;
        return fi__error(FI_EIO, "cannot create %s: %s", f->tmp_path, strerror(errno));
    }
    return 0;
}

void fi__atomic_write(fi_atomic_file *f, const void *buf, size_t n)
{
    if (f->failed_errno || f->fd < 0) return;
    if (fi__write_full(f->fd, buf, n) < 0) f->failed_errno = errno ? errno : EIO;
}

void fi__atomic_abort(fi_atomic_file *f)
{
    if (f->fd >= 0) {
        fi__close(f->fd);
        unlink(f->tmp_path); /* not through the seam: cleanup must not fail */
        f->fd = -1;
    }
}

int fi__atomic_commit(fi_atomic_file *f)
{
    if (f->fd < 0) return fi__error(FI_EIO, "cannot commit %s: not open", f->final_path);
    if (!f->failed_errno && fi__fsync(f->fd) < 0) f->failed_errno = errno;
    if (!f->failed_errno && fi__rename(f->tmp_path, f->final_path) < 0) f->failed_errno = errno;
    if (f->failed_errno) {
        int err = f->failed_errno;
        fi__atomic_abort(f);
        return fi__error(FI_EIO, "cannot write %s: %s", f->final_path, strerror(err));
    }
    fi__close(f->fd);
    f->fd = -1;
    return 0;
}

int64_t fi__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- configuration from the environment ------------------------------------ */

int fi__default_cache_dir(char *out, size_t size)
{
    const char *env = getenv("FIJIT_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    /* The XDG base-directory spec: a relative XDG_CACHE_HOME is invalid and ignored. */
    if (xdg && xdg[0] != '/') xdg = NULL;
    if (env && *env) n = snprintf(out, size, "%s", env);
    else if (xdg) n = snprintf(out, size, "%s/fijit", xdg);
    else if (home && *home) n = snprintf(out, size, "%s/.cache/fijit", home);
    else return fi__error(FI_EINVALID, "no cache dir: set FIJIT_CACHE_DIR, XDG_CACHE_HOME (absolute) or HOME");
    if (n < 0 || (size_t)n >= size) return fi__error(FI_EINVALID, "cache dir path is too long");
    return 0;
}

int fi__parse_log_level(const char *text)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    if (!text) return -1;
    if (text[0] >= '0' && text[0] <= '4' && !text[1]) return text[0] - '0';
    for (int i = 0; i < 5; i++)
        if (strcasecmp(text, names[i]) == 0) return i;
    if (strcasecmp(text, "warning") == 0) return FI_LOG_WARN;
    return -1;
}

/* ---- paths ------------------------------------------------------------------ */

int fi__join_path(char *out, const char *a, const char *b)
{
    if (snprintf(out, FI_PATH_LEN, "%s/%s", a, b) >= FI_PATH_LEN)
        return fi__error(FI_EINVALID, "cache path too long: %s/%s", a, b);
    return 0;
}

static int remove_tree_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    return (type == FTW_DP ? rmdir(path) : fi__unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

/* Remove whatever sits at `path` (a file, link, FIFO, or a whole folder,
 * never following a link): something planted where a cache file belongs
 * must not block every later write. 0 when nothing is left. */
int fi__remove_any(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return fi__unlink(path) < 0 && errno != ENOENT ? -1 : 0;
    return nftw(path, remove_tree_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}
