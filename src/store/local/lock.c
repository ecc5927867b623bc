/*
 * The local tier's locks (see local.h): per-key flock build locks with a
 * bounded wait, and gc's removal of lock files nobody holds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

struct fi_local_lock {
    int fd;
};

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
            *out_fd = fd;
            return 0;
        }
        fi__close(fd); /* replaced while we waited: retry on the current file */
    }
}

/* lock_file with a bounded wait: poll (a blocking flock cannot time out
 * without signals, which belong to the host) with a growing pause. Returns 1
 * when the lock is still held by someone else after `timeout_ms`. */
int fi__local_lock_file_wait(const char *path, int64_t timeout_ms, int *out_fd)
{
    if (timeout_ms < 0) return lock_file(path, 0, out_fd);
    int64_t deadline = fi__now_ns() + timeout_ms * 1000000;
    long pause_ns = 1000000;
    for (;;) {
        int rc = lock_file(path, 1, out_fd);
        if (rc != 1) return rc;
        int64_t left = deadline - fi__now_ns();
        if (left <= 0) return 1;
        struct timespec pause = {0, pause_ns < left ? pause_ns : (long)left};
        nanosleep(&pause, NULL);
        if (pause_ns < 20000000) pause_ns *= 2; /* at most 20 ms late after a release */
    }
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
    *out = lock;
    lock = NULL;
out:
    fi__free(lock);
    return rc;
}

void fi_local_unlock(fi_local_lock *lock)
{
    if (!lock) return;
    if (lock->fd >= 0) flock(lock->fd, LOCK_UN); /* closing would release it too; be explicit */
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
    if (fi__local_join_path(locks, st->dir, "locks") < 0 || !(d = opendir(locks))) return;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        int fd = -1;
        if (n < 6 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
        if (fi__local_join_path(path, locks, e->d_name) < 0) continue;
        if (lock_file(path, 1, &fd) == 0) {
            (void)fi__unlink(path);
            fi__close(fd);
        }
    }
    closedir(d);
}
