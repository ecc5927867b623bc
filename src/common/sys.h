/*
 * The one seam between fijit and the operating system.
 *
 * Every allocation and file operation in the library goes through these
 * wrappers, so that tests can make the Nth call fail (once or persistently)
 * and check that fijit reports an error, leaks nothing and leaves the cache
 * consistent. SQLite, NVRTC and driver calls pass the same fault check
 * (fi__fault) with their own class.
 */
#ifndef FI_SYS_H
#define FI_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef enum fi_fault_class {
    FI_FAULT_ALLOC = 1u << 0,
    FI_FAULT_FILE = 1u << 1,   /* open, read, write, fsync, rename, unlink, mkdir */
    FI_FAULT_SQL = 1u << 2,
    FI_FAULT_NVRTC = 1u << 3,
    FI_FAULT_DRIVER = 1u << 4,
    FI_FAULT_ALL = 0x1f,
    /* A full disk: only calls that need new space fail, with ENOSPC (write,
     * fsync, rename, mkdir, open with O_CREAT); reads keep working. Not in
     * FI_FAULT_ALL, so the existing fault loops are unchanged. */
    FI_FAULT_DISK_FULL = 1u << 5,
    /* Every command sent to a remote tier fails as a lost connection would.
     * Not in FI_FAULT_ALL either: only a context with a remote makes them. */
    FI_FAULT_REMOTE = 1u << 6
} fi_fault_class;

/* Arm fault injection: the `nth` call (1-based) of a class in `mask` fails;
 * with `persistent`, every later one fails too. nth = 0 disarms. */
void fi__fault_arm(unsigned mask, long nth, int persistent);
/* Number of faults injected since the last arm. */
long fi__fault_count(void);
/* Called by each wrapper: nonzero means "pretend this call failed". */
int fi__fault(fi_fault_class cls);

void *fi__malloc(size_t n);
void *fi__calloc(size_t count, size_t n);
void *fi__realloc(void *p, size_t n);
char *fi__strdup(const char *s);
void fi__free(void *p);

/* The cache's umask (-1: private). With one set, the private modes fijit
 * asks for (0700, 0600) are widened to group and others less the umask when
 * fi__open creates a file or fi__mkdir a directory, whatever the process's
 * own umask: a cache shared by a group (docs/configuration.md). Process-wide. */
void fi__cache_umask_set(int umask);
int fi__cache_umask(void);
/* Mode bits a cache directory must not have: S_IWOTH always, S_IWGRP unless
 * the cache's umask lets the group write. */
mode_t fi__cache_unsafe_bits(void);

int fi__open(const char *path, int flags, mode_t mode); /* always O_CLOEXEC */
int fi__close(int fd);
/* Read/write the whole buffer, retrying on EINTR and short counts. 0 or -1 (errno). */
int fi__read_full(int fd, void *buf, size_t n);
int fi__write_full(int fd, const void *buf, size_t n);
int fi__fsync(int fd);
int fi__rename(const char *from, const char *to);
int fi__unlink(const char *path);
int fi__mkdir(const char *path, mode_t mode);
int fi__fstat(int fd, struct stat *st);
int fi__lstat(const char *path, struct stat *st);
/* access(2): no fault is injected (a probe, not an operation). */
int fi__access(const char *path, int mode);
/* realpath(3) into `out` (PATH_MAX bytes). */
int fi__realpath(const char *path, char *out);
/* statvfs(3); with FI_FAULT_DISK_FULL armed it reports no free blocks. */
struct statvfs;
int fi__statvfs(const char *path, struct statvfs *out);

/* Read a whole regular file (no symlinks followed at the last component) into
 * a fresh buffer that the caller frees with fi__free. Returns fi_error code. */
int fi__read_file(const char *path, void **out, size_t *out_size, size_t max_size);

/*
 * Atomic file writer (temp file, write, fsync, rename).
 *   fi_atomic_file f; fi__atomic_begin(&f, dir, final_path);
 *   fi__atomic_write(&f, ...)...; rc = fi__atomic_commit(&f);   // or fi__atomic_abort
 * Errors are sticky: after a failed write, commit fails and removes the temp.
 */
typedef struct fi_atomic_file {
    int fd;
    int failed_errno;
    char tmp_path[4096];
    char final_path[4096];
} fi_atomic_file;

int fi__atomic_begin(fi_atomic_file *f, const char *final_path);
void fi__atomic_write(fi_atomic_file *f, const void *buf, size_t n);
int fi__atomic_commit(fi_atomic_file *f);
void fi__atomic_abort(fi_atomic_file *f);

/* Longest path the cache builds, with its NUL. */
#define FI_PATH_LEN 4096
/* `a`/`b` into `out` (FI_PATH_LEN bytes); FI_EINVALID when it does not fit. */
int fi__join_path(char *out, const char *a, const char *b);
/* Remove whatever sits at `path` (a file, link, FIFO, or a whole folder,
 * never following a link). 0 when nothing is left, else -1 (errno). */
int fi__remove_any(const char *path);

/* Monotonic clock in nanoseconds. */
int64_t fi__now_ns(void);

/* The cache dir when none is given: $FIJIT_CACHE_DIR, $XDG_CACHE_HOME/fijit
 * (absolute only, as the XDG spec says; a relative one is ignored),
 * $HOME/.cache/fijit. fi_error code. */
int fi__default_cache_dir(char *out, size_t size);
/* A log level as FIJIT_LOG writes it: 0-4, or off, error, warn(ing), info,
 * debug (any case). The level, or -1 if `text` is none of these. */
int fi__parse_log_level(const char *text);
/* FI_LOG_LEVEL_HELP, the words for the levels, is in fijit_cache.h. */

#endif
