/*
 * The remote half of fijit_cache.h: a remote tier opened for an operator's
 * questions (is it there, how full is it, what does it hold), over the
 * backend's optional verbs (remote.h).
 */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/sys.h"
#include "fijit_cache.h"
#include "store/object.h"
#include "store/remote/remote.h"
#include "store/seal.h"

struct fi_cache_remote {
    fi_remote *remote;
};

int fi_cache_remote_url_check(char *out, size_t out_size, const char *url)
{
    if (!out || !out_size || !url)
        return fi__error(FI_EINVALID, "fi_cache_remote_url_check: NULL argument");
    int rc = fi_remote_list_check(url);
    fi_remote_url_masked(out, out_size, url); /* leaves fi_last_error() as the parse left it */
    return rc < 0 ? rc : 0;
}

int fi_cache_remote_open(fi_cache_remote **out, const char *url)
{
    fi_cache_remote *r;
    if (!out || !url) return fi__error(FI_EINVALID, "fi_cache_remote_open: NULL argument");
    *out = NULL;
    if (!(r = fi__calloc(1, sizeof *r))) return fi__error(FI_ENOMEM, "out of memory");
    int rc = fi_remote_open(&r->remote, url);
    if (rc < 0) {
        fi__free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void fi_cache_remote_close(fi_cache_remote *remote)
{
    if (!remote) return;
    remote->remote->ops->close(remote->remote);
    fi__free(remote);
}

/* A verb's failure as the caller sees it: FI_EIO, the remote named. */
static int failed(const fi_cache_remote *remote, fi_remote_result res)
{
    char words[1024];
    snprintf(words, sizeof words, "%s", fi_last_error());
    return fi__error(FI_EIO, "remote cache %s %s: %s", remote->remote->config.url,
                     res == FI_REMOTE_TIMEOUT ? "timed out" : "failed", words);
}

int fi_cache_remote_ping(int64_t *out_ns, fi_cache_remote *remote)
{
    if (!out_ns || !remote) return fi__error(FI_EINVALID, "fi_cache_remote_ping: NULL argument");
    fi__error_clear();
    int64_t start = fi__now_ns();
    fi_remote_result res = remote->remote->ops->ping(remote->remote);
    *out_ns = fi__now_ns() - start;
    return res == FI_REMOTE_OK ? 0 : failed(remote, res);
}

int fi_cache_remote_describe(fi_cache_remote *remote,
                             void (*line)(void *user, const char *name, const char *value),
                             void *user)
{
    if (!remote || !line) return fi__error(FI_EINVALID, "fi_cache_remote_describe: NULL argument");
    fi__error_clear();
    fi_remote_result res = remote->remote->ops->describe(remote->remote, line, user);
    return res == FI_REMOTE_OK ? 0 : failed(remote, res);
}

typedef struct foreach_call {
    int (*fn)(void *user, const fi_cache_remote_entry *entry);
    void *user;
} foreach_call;

/* An item's header, read as the codec reads one (a listing only: the
 * payload and MAC are checked when the entry is fetched for use). */
static int list_item(void *user, const fi_remote_item *item)
{
    foreach_call *call = user;
    fi_cache_remote_entry e;
    fi_object_header hdr;
    char why[256];
    const uint8_t *head = item->head;
    size_t head_size = item->head_size;
    int64_t entry_size = item->size;
    memset(&e, 0, sizeof e);
    memcpy(e.entry.key, item->key, 16);
    e.entry.size = item->size;
    if (head_size >= FI_SEAL_OVERHEAD && memcmp(head, FI_SEAL_MAGIC, 8) == 0) {
        e.sealed = 1;
        head += FI_SEAL_OVERHEAD;
        head_size -= FI_SEAL_OVERHEAD;
        entry_size -= FI_SEAL_OVERHEAD;
    }
    if (head_size >= FI_OBJECT_FIXED + 8 &&
        fi_object_check_fixed(head, (uint64_t)entry_size, &hdr, why, sizeof why) == FI_OBJECT_OK &&
        hdr.header_size <= head_size &&
        fi_object_check_header(head, item->key, &hdr, why, sizeof why) == FI_OBJECT_OK) {
        e.header_ok = 1;
        snprintf(e.entry.spec, sizeof e.entry.spec, "%s", hdr.meta.spec);
        snprintf(e.entry.arch, sizeof e.entry.arch, "%s", hdr.meta.arch);
        e.entry.registers = hdr.meta.registers;
        e.entry.spill_bytes = hdr.meta.spill_bytes;
        e.entry.compile_ns = hdr.meta.compile_ns;
    }
    return call->fn(call->user, &e);
}

int fi_cache_remote_foreach(fi_cache_remote *remote,
                            int (*fn)(void *user, const fi_cache_remote_entry *entry), void *user)
{
    if (!remote || !fn) return fi__error(FI_EINVALID, "fi_cache_remote_foreach: NULL argument");
    if (!remote->remote->ops->scan)
        return fi__error(FI_EUNSUPPORTED, "remote cache %s cannot be listed (an %s store has no "
                         "listing)", remote->remote->config.url, remote->remote->ops->name);
    foreach_call call = {fn, user};
    fi__error_clear();
    fi_remote_result res = remote->remote->ops->scan(remote->remote,
                                                     FI_SEAL_OVERHEAD + FI_OBJECT_MAX_HEADER,
                                                     list_item, &call);
    return res == FI_REMOTE_OK ? 0 : failed(remote, res);
}
