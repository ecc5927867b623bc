/*
 * Cold builds: what a compile's speed settings may and may not change.
 * The cubin a key names is the same bytes whichever cache builds it, and
 * FIJIT_FAST_COMPILE (NVRTC -Ofast-compile: other code, built sooner) builds
 * under keys of its own, so that no default build is served its kernels and
 * none of its kernels is served to a default build.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/error.h"
#include "common/sys.h"
#include "store/object.h"
#include "store/store.h"

/* The cheapest tuple to compile (decode's one kernel, at head_dim 64). */
#define COLD_SPEC "decode q=fp16 hd=64"

static void append(void *user, const char *text) { strcat(user, text); }

/* The key fi_jit_explain reports for `spec` on ctx's arch ("key <hex>"). */
static int explained_key(fi_jit_ctx *ctx, const fi_jit_spec *spec, char *text, uint8_t key[16])
{
    text[0] = '\0';
    int rc = fi_jit_explain(ctx, spec, NULL, append, text);
    if (rc < 0) return rc;
    const char *line = strstr(text, "\nkey ");
    char hex[33] = "";
    if (line) snprintf(hex, sizeof hex, "%.32s", line + 5);
    return fi_key_from_hex(hex, key) == 0 ? 0 : fi__error(FI_EINVALID, "no key in the explain output");
}

/* The object cached under `key` in `dir`, read and verified by the store
 * (fi__free). */
static int cached_object(const char *dir, const uint8_t key[16], void **out, size_t *out_size)
{
    fi_store *store = NULL;
    int rc = fi_store_open(&store, dir, 0, 0);
    if (rc == 0) rc = fi_store_get(store, key, out, out_size, NULL);
    fi_store_close(store);
    return rc;
}

TEST(cold_build_same_key_same_cubin_bytes)
{
    /* Two empty caches build one tuple: the same key, byte for byte the same
     * cubin (what lets a fleet share entries, and what any speed-up that
     * keeps the key must keep). */
    fi_jit_spec spec = parse_or_die(COLD_SPEC);
    char dirs[2][4200], text[2][16384];
    uint8_t keys[2][16];
    void *objects[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    fi_build_outcome outcome;
    for (int i = 0; i < 2; i++) {
        fi_jit_ctx *ctx = NULL;
        snprintf(dirs[i], sizeof dirs[i], "%s/cache%d", check_tmpdir, i);
        CHECK_OK(check_ctx_in(&ctx, dirs[i], "sm_90a"));
        int rc = fi_jit_prewarm(&outcome, ctx, &spec, NULL);
        if (rc == 0) rc = explained_key(ctx, &spec, text[i], keys[i]);
        fi_jit_ctx_free(ctx);
        CHECK_OK(rc);
        CHECK(outcome == FI_BUILD_COMPILED);
        CHECK_OK(cached_object(dirs[i], keys[i], &objects[i], &sizes[i]));
    }
    const int same_key = memcmp(keys[0], keys[1], 16) == 0;
    const int same_bytes = sizes[0] == sizes[1] && memcmp(objects[0], objects[1], sizes[0]) == 0;
    fi__free(objects[0]);
    fi__free(objects[1]);
    CHECK(same_key);
    CHECK_MSG(same_bytes, "two cold builds of one key gave cubins of %zu and %zu bytes that differ",
              sizes[0], sizes[1]);
}

TEST(fast_compile_level_refused_unless_known)
{
    static const char *const bad[] = {"fast", "MID", "mid ", "1", "max,min"};
    fi_jit_ctx *ctx = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FIJIT_FAST_COMPILE", bad[i], 1);
        int rc = check_ctx_new(&ctx, "sm_90a");
        unsetenv("FIJIT_FAST_COMPILE");
        CHECK_MSG(rc == FI_EINVALID && !ctx, "FIJIT_FAST_COMPILE='%s' gave %d", bad[i], rc);
        CHECK_MSG(strstr(fi_last_error(), "FIJIT_FAST_COMPILE") &&
                      strstr(fi_last_error(), "off, min, mid, max"),
                  "message: %s", fi_last_error());
    }
    static const char *const good[] = {"", "off", "min", "mid", "max"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("FIJIT_FAST_COMPILE", good[i], 1);
        int rc = check_ctx_new(&ctx, "sm_90a");
        unsetenv("FIJIT_FAST_COMPILE");
        fi_jit_ctx_free(ctx);
        ctx = NULL;
        CHECK_MSG(rc == 0, "FIJIT_FAST_COMPILE='%s': %s", good[i], fi_last_error());
    }
}

TEST(fast_compile_builds_under_its_own_key)
{
    fi_jit_spec spec = parse_or_die(COLD_SPEC);
    char dir[4200], text[16384];
    uint8_t default_key[16], fast_key[16];
    fi_jit_ctx *plain = NULL, *fast = NULL;
    fi_build_outcome outcome[4];
    snprintf(dir, sizeof dir, "%s/cache", check_tmpdir);
    CHECK_OK(check_ctx_in(&plain, dir, "sm_90a"));
    setenv("FIJIT_FAST_COMPILE", "max", 1);
    int rc = check_ctx_in(&fast, dir, "sm_90a");
    unsetenv("FIJIT_FAST_COMPILE");
    if (rc < 0) fi_jit_ctx_free(plain);
    CHECK_OK(rc);
    /* Default, fast, fast again, default again, into one cache. */
    if ((rc = fi_jit_prewarm(&outcome[0], plain, &spec, NULL)) == 0 &&
        (rc = fi_jit_prewarm(&outcome[1], fast, &spec, NULL)) == 0 &&
        (rc = fi_jit_prewarm(&outcome[2], fast, &spec, NULL)) == 0 &&
        (rc = fi_jit_prewarm(&outcome[3], plain, &spec, NULL)) == 0 &&
        (rc = explained_key(fast, &spec, text, fast_key)) == 0 &&
        !strstr(text, "\"--Ofast-compile=max\""))
        rc = -1000;
    if (rc == 0 && (rc = explained_key(plain, &spec, text, default_key)) == 0 &&
        strstr(text, "Ofast-compile"))
        rc = -1001;
    fi_jit_ctx_free(plain);
    fi_jit_ctx_free(fast);
    CHECK_MSG(rc == 0, "rc %d (-1000: the fast key lacks its option, -1001: the default key "
              "has it): %.2000s", rc, rc < -999 ? text : fi_last_error());
    CHECK(outcome[0] == FI_BUILD_COMPILED);
    CHECK_MSG(outcome[1] == FI_BUILD_COMPILED, "a fast build was served the default build's entry");
    CHECK(outcome[2] == FI_BUILD_CACHED);
    CHECK(outcome[3] == FI_BUILD_CACHED);
    CHECK(memcmp(default_key, fast_key, 16) != 0);
}
