/*
 * The local tier's files (see local.h), a leaf with no SQL: paths, the cache
 * directory's safety checks, reading an object file through the entry codec
 * (store/object.h), and the sweep of leftover temp files.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/sys.h"
#include "store/local/local.h"

int fi__local_object_path(const fi_local *st, char *out, const char *hex)
{
    if (snprintf(out, PATH_MAX_LEN, "%s/objects/%.2s/%s.fo", st->dir, hex, hex) >= PATH_MAX_LEN)
        return fi__error(FI_EINVALID, "cache path too long under %s", st->dir);
    return 0;
}

int fi__local_is_temp_name(const char *name) { return strstr(name, ".tmp.") != NULL; }

/* ---- directories ------------------------------------------------------------ */

/* A cache dir must be ours and not writable by anyone else: objects in it
 * become code that runs on the GPU. */
int fi__local_check_owner_mode(const char *path, const struct stat *sb, unsigned flags)
{
    if (!S_ISDIR(sb->st_mode)) return fi__error(FI_EPERM, "cache path %s is not a directory", path);
    if (flags & FI_STORE_ALLOW_UNSAFE_DIR) return 0;
    /* Root can replace anything anyway, so a root-owned cache (baked into an
     * image, read by a service user) is as safe as one's own. */
    if (sb->st_uid != geteuid() && sb->st_uid != 0)
        return fi__error(FI_EPERM,
                         "cache directory %s belongs to uid %u, not to this user (uid %u) or "
                         "root; use a directory of your own or allow an unsafe directory",
                         path, (unsigned)sb->st_uid, (unsigned)geteuid());
    if (sb->st_mode & fi__cache_unsafe_bits())
        return fi__error(FI_EPERM,
                         "cache directory %s is writable by %s (mode %03o); run chmod 700 on "
                         "it, share it with a group through a umask (docs/configuration.md), "
                         "or allow an unsafe directory", path,
                         fi__cache_unsafe_bits() & S_IWGRP ? "group or others" : "others",
                         (unsigned)(sb->st_mode & 0777));
    return 0;
}

/* mkdir -p with mode 0700. Failures on the parents are left for the final
 * check to report, since a parent may exist without our being able to
 * create it (EACCES on "/home"). */
int fi__local_make_dirs(const char *path)
{
    int rc = 0;
    char *copy = fi__strdup(path);
    if (!copy) FI_FAIL(FI_ENOMEM, "out of memory creating %s", path);
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        (void)fi__mkdir(copy, 0700);
        *p = '/';
    }
    if (fi__mkdir(copy, 0700) < 0 && errno != EEXIST)
        FI_FAIL(FI_EIO, "cannot create cache directory %s: %s", path, strerror(errno));
out:
    fi__free(copy);
    return rc;
}

/* Create (if asked) and check a subfolder of the cache. Never a symlink. */
int fi__local_ensure_subdir(const char *path, unsigned flags, int create)
{
    struct stat sb;
    if (create && fi__mkdir(path, 0700) < 0 && errno != EEXIST)
        return fi__error(FI_EIO, "cannot create %s: %s", path, strerror(errno));
    if (fi__lstat(path, &sb) < 0) {
        if (errno == ENOENT) return fi__error(FI_ENOTFOUND, "%s does not exist", path);
        return fi__error(FI_EIO, "cannot stat %s: %s", path, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode)) return fi__error(FI_EPERM, "%s is a symbolic link; refusing it", path);
    return fi__local_check_owner_mode(path, &sb, flags);
}

/* ---- temp files ---------------------------------------------------------------- */

/* Writers' temp files sit next to their final path (fi__atomic_begin names
 * them `<final>.tmp.<pid>.<n>`), so they share the objects' filesystem and
 * the rename is atomic; tmp/ holds only the sweep marker. Remove those older
 * than the cutoff in `dir`. */
/* 1 if the temp file `name` (`<final>.tmp.<pid>.<n>`) was written by a
 * process that no longer exists on this host. */
int fi__local_temp_writer_dead(const char *name)
{
    const char *p = strstr(name, ".tmp.");
    char *end = NULL;
    if (!p) return 0;
    long pid = strtol(p + 5, &end, 10);
    if (pid <= 0 || end == p + 5 || *end != '.') return 0;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static void clean_temps_in(const char *dir, time_t cutoff)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX_LEN];
    struct stat sb;
    time_t dead_cutoff = time(NULL) - TEMP_DEAD_WRITER_AGE_S;
    if (!d) return;
    while ((e = readdir(d))) {
        if (!fi__local_is_temp_name(e->d_name)) continue;
        if (fi__join_path(path, dir, e->d_name) < 0) continue;
        if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode) &&
            (sb.st_mtime < cutoff ||
             (sb.st_mtime < dead_cutoff && fi__local_temp_writer_dead(e->d_name))))
            (void)fi__unlink(path);
    }
    closedir(d);
}

void fi__local_clean_temps(fi_local *st, int64_t max_age_s)
{
    char objects[PATH_MAX_LEN], sub[PATH_MAX_LEN];
    time_t cutoff = time(NULL) - (time_t)max_age_s;
    DIR *d;
    struct dirent *e;
    if (fi__join_path(objects, st->dir, "objects") < 0) return;
    if (fi__join_path(sub, st->dir, "tmp") == 0) clean_temps_in(sub, cutoff);
    if (!(d = opendir(objects))) return;
    while ((e = readdir(d))) {
        if (strlen(e->d_name) != 2 || fi_hex_digit(e->d_name[0]) < 0 || fi_hex_digit(e->d_name[1]) < 0)
            continue;
        if (fi__join_path(sub, objects, e->d_name) == 0) clean_temps_in(sub, cutoff);
    }
    closedir(d);
}

/* Sweep temps at most once an hour per cache, marked by tmp/last-clean, so
 * that opening a cache stays a few syscalls. */
void fi__local_maybe_clean_temps(fi_local *st)
{
    char marker[PATH_MAX_LEN];
    struct stat sb;
    if (fi__join_path(marker, st->dir, "tmp/last-clean") < 0) return;
    int found = lstat(marker, &sb) == 0;
    if (found && S_ISREG(sb.st_mode) && sb.st_mtime > time(NULL) - TEMP_MAX_AGE_S) return;
    fi__local_clean_temps(st, TEMP_MAX_AGE_S);
    /* Anything but a plain file there (a FIFO would block the open below
     * without O_NONBLOCK; a folder would never be stamped) is replaced. */
    if (found && !S_ISREG(sb.st_mode)) (void)fi__remove_any(marker);
    int fd = fi__open(marker, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd >= 0) {
        if (fi__fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) futimens(fd, NULL);
        fi__close(fd);
    }
}

/* Read and check the object at `path` with the entry codec (object.h).
 * Returns OBJ_OK, OBJ_MISSING, OBJ_BAD (reason in `why`) or a negative
 * fi_error for a failure that says nothing about the object (I/O error, out
 * of memory). With `want` the key in the header must match it. With
 * `payload_out` the payload is handed over. */
int fi__local_obj_read(const char *path, const uint8_t *want, void **payload_out,
                    size_t *payload_size_out, obj_info *info, char *why, size_t why_size)
{
    int rc = 0, fd = -1;
    uint8_t h[FI_OBJECT_MAX_HEADER];
    uint8_t *payload = NULL;
    struct stat sb;
    fi_object_header hdr;

    memset(info, 0, sizeof *info);
    /* O_NONBLOCK: a FIFO planted at the path must not hang the reader (it
     * has no effect on the regular file that is checked for below). */
    fd = fi__open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
    if (fd < 0) {
        int err = errno;
        struct stat lsb;
        if (err == ENOENT) return OBJ_MISSING;
        /* A link (ELOOP) or a socket (ENXIO): bad, and removable by its
         * identity; anything else is an I/O failure. */
        if (lstat(path, &lsb) == 0 && !S_ISREG(lsb.st_mode)) {
            info->dev = lsb.st_dev;
            info->ino = lsb.st_ino;
            snprintf(why, why_size, S_ISLNK(lsb.st_mode) ? "is a symbolic link"
                                                          : "is not a regular file");
            return OBJ_BAD;
        }
        return fi__error(FI_EIO, "cannot open cache object %s: %s", path, strerror(err));
    }
    if (fi__fstat(fd, &sb) < 0)
        FI_FAIL(FI_EIO, "cannot stat cache object %s: %s", path, strerror(errno));
    info->dev = sb.st_dev;
    info->ino = sb.st_ino;
    info->file_size = (int64_t)sb.st_size;
    if (!S_ISREG(sb.st_mode)) {
        snprintf(why, why_size, "is not a regular file");
        rc = OBJ_BAD;
        goto out;
    }
    /* The fixed part, the rest of the header, then the payload: each read
     * only after the codec accepted what came before it. */
    if ((uint64_t)sb.st_size >= FI_OBJECT_FIXED + 8 && fi__read_full(fd, h, FI_OBJECT_FIXED) < 0)
        FI_FAIL(FI_EIO, "cannot read cache object %s: %s", path, strerror(errno));
    if ((rc = fi_object_check_fixed(h, (uint64_t)sb.st_size, &hdr, why, why_size)) != FI_OBJECT_OK)
        goto out;
    if (fi__read_full(fd, h + FI_OBJECT_FIXED, hdr.header_size - FI_OBJECT_FIXED) < 0)
        FI_FAIL(FI_EIO, "cannot read cache object %s: %s", path, strerror(errno));
    if ((rc = fi_object_check_header(h, want, &hdr, why, why_size)) != FI_OBJECT_OK) goto out;
    memcpy(info->key, hdr.key, 16);
    info->checksum = hdr.checksum;
    info->meta = hdr.meta;
    if (!(payload = fi__malloc((size_t)hdr.payload_size)))
        FI_FAIL(FI_ENOMEM, "out of memory reading cache object %s (%" PRIu64 " bytes)", path,
                hdr.payload_size);
    if (fi__read_full(fd, payload, (size_t)hdr.payload_size) < 0)
        FI_FAIL(FI_EIO, "cannot read cache object %s: %s", path, strerror(errno));
    if ((rc = fi_object_check_payload(&hdr, payload, why, why_size)) != FI_OBJECT_OK) goto out;
    if (payload_out) {
        *payload_out = payload;
        *payload_size_out = (size_t)hdr.payload_size;
        payload = NULL;
    }
out:
    fi__free(payload);
    fi__close(fd);
    return rc;
}

/* 0 when the objects/<xx> folder of object `path` is a link or not a
 * folder: O_NOFOLLOW guards only the last component, and put refuses to
 * create one. Serving and verify both judge a folder by this. */
int fi__local_subdir_plain(const char *path)
{
    struct stat sb;
    char sub[PATH_MAX_LEN];
    snprintf(sub, sizeof sub, "%.*s", (int)(strlen(path) - 36), path);
    return !(lstat(sub, &sb) == 0 && !S_ISDIR(sb.st_mode));
}
