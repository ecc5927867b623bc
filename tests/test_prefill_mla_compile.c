/*
 * CPU test of MLA's prefill tuples (q and k of head_dim 192, v and o of
 * head_dim_vo 128): a covering set (each kind, both dtypes, every mask and
 * soft-cap at least once) compiles through NVRTC for sm_80 and sm_90a, and
 * ptxas reports no spills for their main kernels (the cache index keeps
 * what it reported; every kernel of all 48 tuples, the Hopper main loop
 * included: bench/ws_resources.py on a prewarm log). FIJIT_TEST_QUICK=1
 * compiles one tuple per kind.
 */
#include <string.h>

#include "check.h"
#include "fijit_cache.h"
#include "fijit_prefill.h"

static const char *const tuples[] = {
    "prefill q=fp16 hd=192 hd_vo=128 mask=causal",
    "batch_prefill_ragged q=bf16 hd=192 hd_vo=128 mask=causal",
    "batch_prefill_paged q=fp16 hd=192 hd_vo=128 mask=none",
    "prefill q=bf16 hd=192 hd_vo=128 mask=none softcap=1",
    "batch_prefill_ragged q=fp16 hd=192 hd_vo=128 mask=window",
    "batch_prefill_paged q=bf16 hd=192 hd_vo=128 mask=custom softcap=1",
};
#define TUPLES (int)(sizeof tuples / sizeof tuples[0])

typedef struct {
    const char *arch;
    int entries, spilled, registers_unknown;
    char first[320];
} entries_seen;

static int note_entry(void *user, const fi_cache_entry *e)
{
    entries_seen *s = user;
    if (strcmp(e->arch, s->arch) != 0) return 0;
    s->entries++;
    if (e->registers <= 0) s->registers_unknown++;
    if (e->spill_bytes != 0 && !s->spilled++)
        snprintf(s->first, sizeof s->first, "%s %s: %d bytes", e->spec, e->arch, e->spill_bytes);
    return 0;
}

TEST(mla_prefill_tuples_compile_for_sm80_and_sm90a_without_spills)
{
    static const char *const arches[] = {"sm_80", "sm_90a"};
    const int n = check_quick() ? 3 : TUPLES;
    fi_jit_spec specs[TUPLES];
    for (int i = 0; i < n; i++) specs[i] = parse_or_die(tuples[i]);
    int compiled = 0, modules = 0;
    for (int a = 0; a < 2; a++) {
        fi_jit_ctx *ctx = NULL;
        CHECK_OK(check_ctx_new(&ctx, arches[a]));
        char first[2400];
        const int failures = check_prewarm_all(ctx, specs, n, -1, first, sizeof first);
        CHECK_MSG(failures == 0, "%s: %d of %d failed; first: %s", arches[a], failures, n, first);
        fi_cache *cache = NULL;
        entries_seen seen = {.arch = arches[a]};
        CHECK_OK(fi_cache_open(&cache, fi_jit_ctx_cache_dir(ctx), 0));
        CHECK_OK(fi_cache_foreach(cache, note_entry, &seen));
        fi_cache_close(cache);
        CHECK_MSG(seen.spilled == 0, "%s: %d modules spill, first %s", arches[a], seen.spilled,
                  seen.first);
        CHECK(seen.registers_unknown == 0);
        compiled += seen.entries;
        const int of_arch = check_modules_of(ctx, specs, n, arches[a]);
        fi_jit_ctx_free(ctx);
        CHECK_OK(of_arch < 0 ? of_arch : 0);
        modules += of_arch; /* a tuple each, or one per part (src/kinds/prefill.c parts) */
    }
    CHECK_MSG(compiled == modules, "%d modules in the caches, want %d", compiled, modules);
}
