/*
 * Which part of its tuple a cache entry is. A tuple may be built as several
 * modules side by side (docs/cold-start.md: prefill on sm_90a), each an
 * entry of its own key that carries the tuple's spec and arch, so two rows
 * of `fijit list` or `fijit remote list` would read the same. They are told
 * apart by key: fi_jit_explain lists a split tuple's parts with the key of
 * each, computed as a build would (no compile, no cache opened).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* More parts than a kind splits a tuple into (kinds/kind.h FI_KIND_MAX_PARTS). */
#define CLI_MAX_PARTS 8

struct cli_parts {
    fi_jit_ctx *ctx; /* NULL until a row needs it; no disk cache */
    int ctx_failed;
    /* The tuple explained last: rows come ordered by spec. */
    char spec[256];
    char arch[16];
    int count; /* its parts; 0: not split, or not explained */
    uint8_t keys[CLI_MAX_PARTS][16];
};

/* Collects "part P of N, ..." and "key HEX" lines of fi_jit_explain. */
static void collect_part_keys(void *user, const char *line)
{
    cli_parts *p = user;
    int part = 0, count = 0;
    char hex[33];
    if (sscanf(line, "part %d of %d,", &part, &count) == 2 && part == p->count + 1 &&
        count > 1 && count <= CLI_MAX_PARTS) {
        p->count = part;
        memset(p->keys[part - 1], 0, sizeof p->keys[0]);
    } else if (p->count > 0 && sscanf(line, "key %32[0-9a-f]", hex) == 1 && strlen(hex) == 32) {
        for (int i = 0; i < 16; i++) {
            unsigned byte = 0;
            sscanf(hex + 2 * i, "%2x", &byte);
            p->keys[p->count - 1][i] = (uint8_t)byte;
        }
    }
}

/* Explain `spec` on `arch` unless it was the last one. */
static void explain_tuple(cli_parts *p, const char *spec, const char *arch)
{
    if (strcmp(p->spec, spec) == 0 && strcmp(p->arch, arch) == 0) return;
    snprintf(p->spec, sizeof p->spec, "%s", spec);
    snprintf(p->arch, sizeof p->arch, "%s", arch);
    p->count = 0;
    if (!p->ctx && !p->ctx_failed) {
        fi_jit_options opts = FI_JIT_OPTIONS_INIT;
        opts.use_disk_cache = 0;
        opts.remote = ""; /* keys need no remote: none, whatever FIJIT_REMOTE says */
        opts.log_level = FI_LOG_OFF;
        p->ctx_failed = fi_jit_ctx_new(&p->ctx, &opts) < 0;
    }
    fi_jit_spec parsed;
    char variant[64];
    /* A tuple of a variant needs its snippet for a key: not told apart. */
    if (!p->ctx || fi_jit_spec_parse(&parsed, variant, sizeof variant, spec) < 0 || parsed.variant ||
        fi_jit_explain(p->ctx, &parsed, arch, collect_part_keys, p) < 0)
        p->count = 0;
}

int cli_parts_new(cli_parts **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -1;
}

void cli_parts_free(cli_parts *p)
{
    if (!p) return;
    fi_jit_ctx_free(p->ctx);
    free(p);
}

/* "part 1 of 2" when `key` is a part of the tuple as this fijit builds it,
 * else "key 1a2b3c4d" (another build of the tuple: other templates, NVRTC,
 * FIJIT_FAST_COMPILE, or a variant's, whose snippet is not at hand). */
static void part_label(char *out, size_t out_size, cli_parts *p, const fi_cache_entry *row)
{
    explain_tuple(p, row->spec, row->arch);
    for (int i = 0; i < p->count; i++)
        if (memcmp(p->keys[i], row->key, 16) == 0) {
            snprintf(out, out_size, "part %d of %d", i + 1, p->count);
            return;
        }
    char hex[33];
    fi_cache_key_hex(hex, row->key);
    snprintf(out, out_size, "key %.8s", hex);
}

static int same_tuple(const fi_cache_entry *a, const fi_cache_entry *b)
{
    return b && strcmp(a->spec, b->spec) == 0 && strcmp(a->arch, b->arch) == 0;
}

void cli_parts_note(char *out, size_t out_size, cli_parts *p, const fi_cache_entry *row,
                    const fi_cache_entry *prev, const fi_cache_entry *next)
{
    char label[32];
    out[0] = '\0';
    if (!same_tuple(row, prev) && !same_tuple(row, next)) return;
    part_label(label, sizeof label, p, row);
    snprintf(out, out_size, "  %s", label);
}
