/*
 * The local tier's locks (see local.h): per-key flock build locks with a
 * bounded wait, the takeover of a lock whose holder is frozen, and gc's
 * removal of lock files nobody holds.
 *
 * A lock file holds "<pid> <host>\n" of its holder. A waiter that finds the
 * holder is a process of this host that stays stopped (SIGSTOP, a debugger:
 * state T or t in /proc/PID/stat) for FROZEN_HOLDER_MS takes the lock over:
 * it locks a fresh file and renames it over the path. The holder's file is
 * then unlinked; woken, it finds its inode gone from the path
 * (fi__local_lock_lost) and does not publish what the new holder stored.
 * A holder that runs or sleeps (hung in NVRTC, say) cannot be told from a
 * slow one: it is waited for up to the lock timeout.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"

/* How long a waiter watches a holder stay stopped before taking its lock:
 * like the fleet lease of a dead host (taken over within 3 s), and long
 * enough that a holder stopped and continued at once (^Z, fg) keeps it. */
#define FROZEN_HOLDER_MS 2000

struct fi_local_lock {
    int fd;
    fi_local *st;
    char path[PATH_MAX_LEN];
    char hex[33];
    fi_local_lock *next; /* in st->held */
};

/* ---- who holds a lock file --------------------------------------------------------- */

static void host_name(char *out, size_t size)
{
    if (gethostname(out, size) < 0) snprintf(out, size, "?");
    out[size - 1] = '\0';
    for (char *p = out; *p; p++)
        if (*p <= ' ') *p = '_';
}

/* Write "<pid> <host>" into a lock file just taken. Best effort: a lock
 * without it is only never taken over. */
static void say_holder(int fd)
{
    char text[128], host[64];
    host_name(host, sizeof host);
    int n = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) != n) (void)ftruncate(fd, 0);
}

/* The holder named in the lock file at `path` when it is a process of this
 * host, and the file's inode; 0 when there is none to judge. */
static pid_t holder_of(const char *path, ino_t *ino)
{
    char text[128] = "", host[64], theirs[64];
    struct stat sb;
    long pid = 0;
    int fd = fi__open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) return 0;
    ssize_t n = fi__fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? pread(fd, text, sizeof text - 1, 0) : -1;
    fi__close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    host_name(host, sizeof host);
    if (sscanf(text, "%ld %63s", &pid, theirs) != 2 || strcmp(theirs, host) != 0 || pid <= 0 ||
        pid == (long)getpid())
        return 0;
    *ino = sb.st_ino;
    return (pid_t)pid;
}

/* 1 when process `pid` is stopped (state T, or t under a tracer). */
static int process_stopped(pid_t pid)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = fi__open(path, O_RDONLY, 0);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    fi__close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    const char *end = strrchr(text, ')'); /* the command name may hold anything */
    return end && end[1] == ' ' && (end[2] == 'T' || end[2] == 't');
}

/* ---- per-file locks ------------------------------------------------------------ */

/* Open and flock a lock file. After the lock is ours, the path must still
 * name the same inode: gc may unlink an idle lock file, and a waiter that
 * locked the unlinked inode must start over on the new one. */
static int lock_file(const char *path, int nonblock, int *out_fd)
{
    for (;;) {
        struct stat a, b;
        int fd = fi__open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
        if (fd < 0) return fi__error(FI_EIO, "cannot open lock file %s: %s", path, strerror(errno));
        int r;
        do r = flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0));
        while (r < 0 && errno == EINTR);
        if (r < 0) {
            int err = errno;
            fi__close(fd);
            if (err == EWOULDBLOCK) return 1; /* held by someone else */
            return fi__error(FI_EIO, "cannot lock %s: %s", path, strerror(err));
        }
        if (fi__fstat(fd, &a) < 0) {
            int err = errno;
            fi__close(fd);
            return fi__error(FI_EIO, "cannot stat lock file %s: %s", path, strerror(err));
        }
        if (lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            say_holder(fd);
            *out_fd = fd;
            return 0;
        }
        fi__close(fd); /* replaced while we waited: retry on the current file */
    }
}

/* Take the lock at `path` from its frozen holder, whose file has inode
 * `frozen`: lock a fresh file beside it and rename it over the path.
 * Returns 0 with the lock, 1 when the path changed meanwhile (another
 * waiter took it over, or the holder let go): wait on the new file. */
static int take_over(const char *path, ino_t frozen, pid_t holder, int *out_fd)
{
    char tmp[PATH_MAX_LEN + 32];
    struct stat a, b;
    size_t n = strlen(path);
    /* Named like a lock file, so that gc removes one a killed taker left. */
    snprintf(tmp, sizeof tmp, "%.*s.take-%ld.lock", (int)(n > 5 ? n - 5 : n), path, (long)getpid());
    (void)fi__unlink(tmp);
    int fd = fi__open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0) return fi__error(FI_EIO, "cannot create lock file %s: %s", tmp, strerror(errno));
    int ok = flock(fd, LOCK_EX | LOCK_NB) == 0 && fi__fstat(fd, &a) == 0;
    say_holder(fd);
    ok = ok && lstat(path, &b) == 0 && b.st_ino == frozen && fi__rename(tmp, path) == 0;
    if (!ok) {
        (void)fi__unlink(tmp);
        fi__close(fd);
        return 1;
    }
    if (lstat(path, &b) < 0 || b.st_dev != a.st_dev || b.st_ino != a.st_ino) {
        fi__close(fd); /* another taker renamed after us */
        return 1;
    }
    fi__log(FI_LOG_WARN, "took over the build lock %s from process %ld, stopped for over %d ms",
            path, (long)holder, FROZEN_HOLDER_MS);
    *out_fd = fd;
    return 0;
}

/* lock_file with a bounded wait (< 0: none): poll (a blocking flock cannot
 * time out without signals, which belong to the host) with a growing
 * pause, watching for a frozen holder to take over. Returns 1 when the
 * lock is still held by someone else after `timeout_ms`. */
int fi__local_lock_file_wait(const char *path, int64_t timeout_ms, int *out_fd)
{
    int64_t start = fi__now_ns(), stopped_since = 0;
    ino_t stopped_ino = 0;
    long pause_ns = 1000000;
    for (;;) {
        int rc = lock_file(path, 1, out_fd);
        if (rc != 1) return rc;
        int64_t now = fi__now_ns();
        ino_t ino = 0;
        pid_t holder = holder_of(path, &ino);
        if (holder > 0 && process_stopped(holder)) {
            if (!stopped_since || ino != stopped_ino) {
                stopped_since = now;
                stopped_ino = ino;
            } else if (now - stopped_since >= (int64_t)FROZEN_HOLDER_MS * 1000000) {
                if ((rc = take_over(path, ino, holder, out_fd)) != 1) return rc;
                stopped_since = 0;
            }
        } else {
            stopped_since = 0;
        }
        int64_t left = timeout_ms < 0 ? INT64_MAX : start + timeout_ms * 1000000 - now;
        if (left <= 0) return 1;
        struct timespec pause = {0, pause_ns < left ? pause_ns : (long)left};
        nanosleep(&pause, NULL);
        if (pause_ns < 20000000) pause_ns *= 2; /* at most 20 ms late after a release */
    }
}

/* 1 when this process held the build lock of `hex` and another process
 * took it over while it was stopped (its file is no longer at the path). */
int fi__local_lock_lost(fi_local *st, const char *hex)
{
    int lost = 0;
    struct stat a, b;
    pthread_mutex_lock(&st->held_mu);
    for (fi_local_lock *l = st->held; l; l = l->next)
        if (strcmp(l->hex, hex) == 0 && fi__fstat(l->fd, &a) == 0)
            lost = lstat(l->path, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino;
    pthread_mutex_unlock(&st->held_mu);
    return lost;
}

void fi_local_set_lock_timeout(fi_local *st, int64_t timeout_ms)
{
    if (st) st->lock_timeout_ms = timeout_ms;
}

int fi_local_lock_key(fi_local *st, const uint8_t key[16], fi_local_lock **out)
{
    int rc = 0, fd = -1;
    char hex[33], path[PATH_MAX_LEN];
    fi_local_lock *lock = NULL;
    if (!st || !key || !out) return fi__error(FI_EINVALID, "fi_store_lock_key: NULL argument");
    *out = NULL;
    fi_key_hex(hex, key);
    if (snprintf(path, sizeof path, "%s/locks/%s.lock", st->dir, hex) >= (int)sizeof path)
        FI_FAIL(FI_EINVALID, "cache path too long under %s", st->dir);
    if (!(lock = fi__malloc(sizeof *lock))) FI_FAIL(FI_ENOMEM, "out of memory for a build lock");
    if (st->flags & FI_STORE_READ_ONLY) {
        fd = -1; /* nothing will be stored, so there is nothing to serialise */
    } else if ((rc = fi__local_lock_file_wait(path, st->lock_timeout_ms, &fd)) == 1) {
        /* The holder may be stopped (SIGSTOP, a debugger) or hung in NVRTC:
         * build here too. Publishing is rename + insert, so whichever of
         * the two writers of the key comes last just replaces an equal entry. */
        if (!atomic_exchange(&st->lock_timeout_warned, 1))
            fi__log(FI_LOG_WARN, "another process held the build lock %s for over %" PRId64
                    " ms; building without it (FIJIT_LOCK_TIMEOUT_MS sets the wait)",
                    path, st->lock_timeout_ms);
        fd = -1;
        rc = 0;
    } else if (rc < 0) {
        /* A full disk, a read-only locks/ or a planted symlink: the lock only
         * saves duplicate compiles, so build without it (puts stay atomic)
         * rather than fail the kernel. Said once per store. */
        if (!atomic_exchange(&st->lock_warned, 1))
            fi__log(FI_LOG_WARN, "building without a cross-process lock: %s", fi_last_error());
        fi__error_clear();
        fd = -1;
        rc = 0;
    }
    lock->fd = fd;
    lock->st = st;
    snprintf(lock->path, sizeof lock->path, "%s", path);
    snprintf(lock->hex, sizeof lock->hex, "%s", hex);
    lock->next = NULL;
    if (fd >= 0) {
        pthread_mutex_lock(&st->held_mu);
        lock->next = st->held;
        st->held = lock;
        pthread_mutex_unlock(&st->held_mu);
    }
    *out = lock;
    lock = NULL;
out:
    fi__free(lock);
    return rc;
}

void fi_local_unlock(fi_local_lock *lock)
{
    if (!lock) return;
    if (lock->fd >= 0) {
        fi_local *st = lock->st;
        pthread_mutex_lock(&st->held_mu);
        for (fi_local_lock **p = &st->held; *p; p = &(*p)->next)
            if (*p == lock) {
                *p = lock->next;
                break;
            }
        pthread_mutex_unlock(&st->held_mu);
        flock(lock->fd, LOCK_UN); /* closing would release it too; be explicit */
    }
    fi__close(lock->fd);
    fi__free(lock);
}

/* Remove lock files nobody holds, following lock_file's protocol (lock, then
 * unlink while holding it) so a waiter on the old inode retries. */
void fi__local_clean_locks(fi_local *st)
{
    char locks[PATH_MAX_LEN], path[PATH_MAX_LEN];
    DIR *d;
    struct dirent *e;
    if (fi__join_path(locks, st->dir, "locks") < 0 || !(d = opendir(locks))) return;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        int fd = -1;
        if (n < 6 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
        if (fi__join_path(path, locks, e->d_name) < 0) continue;
        if (lock_file(path, 1, &fd) == 0) {
            (void)fi__unlink(path);
            fi__close(fd);
        }
    }
    closedir(d);
}
