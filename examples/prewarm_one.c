/*
 * Smallest fijit program: make sure the cache holds one decode kernel for a
 * target arch. Needs no GPU. Build against an installed fijit with
 *   cc prewarm_one.c $(pkg-config --cflags --libs --static fijit)
 */
#include <fijit.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    const char *text = argc > 1 ? argv[1] : "decode q=fp16 hd=128";
    const char *arch = argc > 2 ? argv[2] : "sm_90a";
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec spec;
    fi_build_outcome outcome;
    char variant[64];
    int rc;
    if (fi_version_number() != FIJIT_VERSION_NUMBER)
        fprintf(stderr, "warning: header %d, library %d\n", FIJIT_VERSION_NUMBER, fi_version_number());
    if ((rc = fi_jit_spec_parse(&spec, variant, sizeof variant, text)) < 0 ||
        (rc = fi_jit_ctx_new(&ctx, NULL)) < 0 ||
        (rc = fi_jit_prewarm(&outcome, ctx, &spec, arch)) < 0) {
        fprintf(stderr, "%s: %s\n", fi_error_name(rc), fi_last_error());
        fi_jit_ctx_free(ctx);
        return 1;
    }
    printf("%s for %s: %s in %s\n", text, arch,
           outcome == FI_BUILD_COMPILED ? "compiled" : "already cached", fi_jit_ctx_cache_dir(ctx));
    fi_jit_ctx_free(ctx);
    return 0;
}
