/*
 * CPU tests of the prefill kinds: their accepted tuples (fi_jit_spec_enumerate:
 * 3 kinds x fp16/bf16 x head_dim 64/128/256 x 4 masks x 3 pos encodings x
 * soft-cap 0/1, and fp8 prefill's four, built on sm_90a only) compile through
 * NVRTC with no failure for sm_80, sm_89 and sm_90a, the archs whose template
 * code differs; the
 * kinds refuse what they do not support with FI_EUNSUPPORTED naming the
 * field. Which tuples compile is tests/cover.h's rule: a pairwise cover per
 * arch in `make test`, each value once with FIJIT_TEST_QUICK=1, every tuple
 * with FIJIT_TEST_SWEEP=1 (`make test-sweep`). Prints the mean NVRTC time
 * per module.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cover.h"
#include "fijit_prefill.h"

#define PREFILL_TUPLES 1024

static const fi_kernel_kind prefill_kinds[] = {FI_KIND_PREFILL, FI_KIND_BATCH_PREFILL_RAGGED,
                                               FI_KIND_BATCH_PREFILL_PAGED};

/* Every tuple the prefill kinds accept (fi_jit_spec_enumerate), or -1. */
static int prefill_tuples(fi_jit_spec *out, int max)
{
    int n = 0;
    for (size_t k = 0; k < sizeof prefill_kinds / sizeof prefill_kinds[0]; k++) {
        const int got = fi_jit_spec_enumerate(out + n, (size_t)(max - n), prefill_kinds[k]);
        if (got < 0 || got > max - n) return -1;
        n += got;
    }
    return n;
}

/* sm_80: mma.sync tiles, fp8 converted in software; sm_89: the same tiles
 * with hardware fp8 conversion; sm_90a: wgmma tiles, the Hopper main loop
 * and fp8 prefill. */
static const char *const archs[] = {"sm_80", "sm_89", "sm_90a"};

TEST(prefill_tuples_compile_for_every_arch)
{
    for (size_t g = 0; g < sizeof archs / sizeof archs[0]; g++) {
        static fi_jit_spec specs[PREFILL_TUPLES];
        static char err[2600];
        const int total = prefill_tuples(specs, PREFILL_TUPLES);
        CHECK(total > 0);
        CHECK_MSG(cover_compile("prefill", archs[g], specs, total, err, sizeof err) > 0, "%s", err);
    }
}

TEST(prefill_refuses_unsupported_tuples)
{
    for (int k = 0; k < 3; k++) {
        fi_jit_spec s = FI_JIT_SPEC_INIT;
        s.kind = prefill_kinds[k];
        CHECK_OK(fi_jit_spec_check(&s));
        s.head_dim = 96;
        CHECK(fi_jit_spec_check(&s) == FI_EUNSUPPORTED);
        CHECK(strstr(fi_last_error(), "head_dim") && strstr(fi_last_error(), "64, 128, 192/128, 256"));
        s.head_dim = 128;
        s.kv_dtype = FI_DTYPE_BF16;
        CHECK(fi_jit_spec_check(&s) == FI_EUNSUPPORTED);
        CHECK(strstr(fi_last_error(), "kv dtype"));
        s.kv_dtype = FI_DTYPE_FP16;
        s.q_dtype = s.kv_dtype = s.o_dtype = FI_DTYPE_FP8_E4M3;
        CHECK(fi_jit_spec_check(&s) == FI_EUNSUPPORTED);
        CHECK(strstr(fi_last_error(), "o dtype") && strstr(fi_last_error(), "fp16, bf16"));
        s.q_dtype = FI_DTYPE_FP8_E5M2;
        CHECK(fi_jit_spec_check(&s) == FI_EUNSUPPORTED);
        CHECK(strstr(fi_last_error(), "q dtype") && strstr(fi_last_error(), "fp16, bf16"));
        /* Single prefill names its fp8 q too; the batch kinds have none. */
        CHECK(!strstr(fi_last_error(), "fp8_e4m3") == (prefill_kinds[k] != FI_KIND_PREFILL));
    }
}

/* fp8 prefill (templates/prefill/fp8.cuh): its four tuples are accepted (and
 * compiled for sm_90a by prefill_tuples_compile_for_every_arch), every other
 * field value is refused naming what is supported, and so is any other arch,
 * before anything is expanded. */
TEST(prefill_fp8_tuples_are_accepted_and_the_rest_refused)
{
    static fi_jit_spec all[PREFILL_TUPLES], ok[4];
    const int total = prefill_tuples(all, PREFILL_TUPLES);
    int n = 0;
    for (int i = 0; i < total; i++)
        if (all[i].q_dtype == FI_DTYPE_FP8_E4M3 && n < 4) ok[n++] = all[i];
    CHECK_MSG(n == 4, "%d fp8 prefill tuples", n);
    for (int i = 0; i < 4; i++) {
        CHECK(ok[i].kind == FI_KIND_PREFILL && ok[i].kv_dtype == FI_DTYPE_FP8_E4M3 &&
              ok[i].head_dim == 128 && ok[i].pos == FI_POS_NONE && !ok[i].soft_cap);
        CHECK_OK(fi_jit_spec_check(&ok[i]));
    }
    fi_jit_ctx *ctx = NULL;
    static const char *const others[] = {"sm_80", "sm_89", "sm_90"};
    for (int a = 0; a < 3; a++) {
        CHECK_OK(check_ctx_new(&ctx, others[a]));
        CHECK(fi_jit_prewarm(NULL, ctx, &ok[0], NULL) == FI_EUNSUPPORTED);
        CHECK(strstr(fi_last_error(), others[a]) && strstr(fi_last_error(), "supported: sm_90a"));
        fi_jit_ctx_free(ctx);
    }
    struct {
        const char *text, *says;
    } bad[] = {
        {"batch_prefill_ragged q=fp8_e4m3 o=fp16", "supported: prefill"},
        {"batch_prefill_paged q=fp8_e4m3 o=fp16", "supported: prefill"},
        {"prefill q=fp8_e4m3 o=fp16 hd=64", "supported: 128"},
        {"prefill q=fp8_e4m3 o=bf16 hd=256", "supported: 128"},
        {"prefill q=fp8_e4m3 o=fp16 mask=window", "none, causal"},
        {"prefill q=fp8_e4m3 o=fp16 mask=custom", "none, causal"},
        {"prefill q=fp8_e4m3 o=fp16 pos=rope", "no pos encoding"},
        {"prefill q=fp8_e4m3 o=fp16 pos=alibi", "no pos encoding"},
        {"prefill q=fp8_e4m3 o=fp16 softcap=1", "soft-cap"},
        {"prefill q=fp8_e4m3 kv=fp16 o=fp16", "kv=fp8_e4m3"},
        {"prefill q=fp8_e4m3 kv=fp8_e5m2 o=fp16", "kv=fp8_e4m3"},
        {"prefill q=fp8_e4m3", "o dtype"},
        {"prefill q=fp16 kv=fp8_e4m3", "kv dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fi_jit_spec s;
        char variant[64];
        CHECK_OK(fi_jit_spec_parse(&s, variant, sizeof variant, bad[i].text));
        CHECK_MSG(fi_jit_spec_check(&s) == FI_EUNSUPPORTED, "%s was accepted", bad[i].text);
        CHECK_MSG(strstr(fi_last_error(), bad[i].says), "%s: '%s' lacks '%s'", bad[i].text,
                  fi_last_error(), bad[i].says);
    }
}

/* fp8's launch arguments are checked before any device work: args version 4
 * (the scales), finite non-negative scales, the Hopper loop's tile, and a
 * workspace of fi_prefill_workspace_size bytes (V laid out for P.V, then the
 * block claims). */
TEST(prefill_fp8_launch_args_are_validated_without_gpu)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = FI_KIND_PREFILL;
    s.q_dtype = s.kv_dtype = FI_DTYPE_FP8_E4M3;
    s.o_dtype = FI_DTYPE_BF16;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    a.num_qo_heads = 8;
    a.num_kv_heads = 2;
    a.qo_len = 100;
    a.kv_len = 300;
    a.q = a.k = a.v = a.o = (void *)(uintptr_t)0x10000;
    a.q_stride_n = 8 * 128;
    a.k_stride_n = a.v_stride_n = 2 * 128;
    a.o_stride_n = 8 * 128;
    a.q_stride_h = a.k_stride_h = a.v_stride_h = a.o_stride_h = 128;
    size_t bytes = 0;
    CHECK_OK(fi_prefill_workspace_size(&bytes, &s, &a));
    CHECK(bytes == (size_t)2 * 128 * 384 + 16); /* 300 keys -> 3 tiles of 128 */
    int rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "workspace of at least 98304 bytes"));
    a.workspace = (void *)(uintptr_t)0x20000;
    a.workspace_bytes = bytes - 17;
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "98303 given"));
    a.version = 3;
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "args.version 4"));
    a.version = FI_PREFILL_ARGS_VERSION;
    a.workspace_bytes = bytes;
    a.k_scale = -1.f;
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "k_scale is -1"));
    a.k_scale = 0.f;
    a.v_scale = 1.f / 0.f;
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "v_scale is inf"));
    a.v_scale = 0.5f;
    a.cta_tile_q = 64;
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "cta_tile_q 64"));
    a.cta_tile_q = 0;
    a.k_stride_n = 2 * 128 + 8; /* 16-byte rows: a multiple of 16 one-byte elements */
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "k_stride_n") &&
          strstr(fi_last_error(), "multiple of 16"));
    fi_jit_ctx_free(ctx);
}

TEST(prefill_kinds_parse_from_spec_strings)
{
    static const char *texts[] = {"prefill q=bf16 hd=64 mask=causal pos=rope softcap=1",
                                  "batch_prefill_ragged q=fp16 hd=256 mask=custom pos=alibi",
                                  "batch_prefill_paged q=fp16 hd=128 mask=window"};
    static const fi_kernel_kind want[] = {FI_KIND_PREFILL, FI_KIND_BATCH_PREFILL_RAGGED,
                                          FI_KIND_BATCH_PREFILL_PAGED};
    for (int i = 0; i < 3; i++) {
        fi_jit_spec s;
        char variant[64];
        CHECK_OK(fi_jit_spec_parse(&s, variant, sizeof variant, texts[i]));
        CHECK(s.kind == want[i]);
        CHECK_OK(fi_jit_spec_check(&s));
    }
}

TEST(prefill_launch_args_are_validated_without_gpu)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = FI_KIND_PREFILL;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    a.num_qo_heads = 6;
    a.num_kv_heads = 4;
    a.qo_len = a.kv_len = 8;
    int rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "multiple of num_kv_heads"));
    a.num_qo_heads = 8;
    a.q = (void *)(uintptr_t)0x1008; /* not 16-byte aligned */
    rc = fi_prefill_run(ctx, &s, &a, NULL);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "q ("));

    /* Batch plan: page tables are checked on the host. */
    s.kind = FI_KIND_BATCH_PREFILL_PAGED;
    int32_t qo[3] = {0, 4, 4}, kv[3] = {0, 2, 3}, last[2] = {5, 17};
    fi_batch_prefill_plan_args pa = FI_BATCH_PREFILL_PLAN_ARGS_INIT;
    pa.batch_size = 2;
    pa.qo_indptr = qo;
    pa.kv_indptr = kv;
    pa.kv_last_page_len = last;
    pa.num_qo_heads = 8;
    pa.num_kv_heads = 2;
    pa.page_size = 16;
    size_t bytes = 0;
    rc = fi_batch_prefill_workspace_size(&bytes, &s, &pa);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "kv_last_page_len[1]"));
    last[1] = 16;
    CHECK_OK(fi_batch_prefill_workspace_size(&bytes, &s, &pa));
    CHECK(bytes >= 2 * sizeof(int32_t) * 2); /* 4 queries x 4 heads = 16 rows: one tile at least */
    pa.page_size = 65;
    rc = fi_batch_prefill_workspace_size(&bytes, &s, &pa);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "page_size"));
    pa.page_size = 16;
    qo[2] = 3; /* decreasing */
    rc = fi_batch_prefill_workspace_size(&bytes, &s, &pa);
    CHECK(rc == FI_EINVALID && strstr(fi_last_error(), "must not decrease"));
    fi_jit_ctx_free(ctx);
}

/* A variant overriding all four hooks compiles into every prefill kind: the
 * kernels call the hooks with fi_prefill_params, whose sm_scale, soft_cap,
 * alibi_slopes and window_left fields carry the names the hooks use. */
TEST(prefill_variant_hooks_compile_in_every_kind)
{
    static const char *const all_hooks =
        "struct Variant : fijit::DefaultVariant {\n"
        "    template <class P>\n"
        "    static __device__ __forceinline__ float query_transform(const P &p, float q, int h, int d)\n"
        "    { return q * p.sm_scale * (d < 4 ? 0.5f : 1.0f); }\n"
        "    template <class P>\n"
        "    static __device__ __forceinline__ float logits_transform(const P &p, float s, int h, int kv, int qo)\n"
        "    { return s - 0.01f * (float)(qo - kv); }\n"
        "    template <class P>\n"
        "    static __device__ __forceinline__ bool logits_mask(const P &p, int h, int kv, int qo)\n"
        "    { return (kv & 1) == 0 || kv == qo; }\n"
        "    template <class P>\n"
        "    static __device__ __forceinline__ float output_transform(const P &p, float o, int h, int d, float lse)\n"
        "    { return 2.0f * o; }\n"
        "};\n";
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    int rc = fi_jit_variant_register(ctx, "all_hooks", all_hooks, 0);
    CHECK_MSG(rc == 0, "register: %s", fi_last_error());
    for (int k = 0; k < (check_quick() ? 1 : 3); k++) {
        fi_jit_spec s = FI_JIT_SPEC_INIT;
        s.kind = prefill_kinds[k];
        s.mask = FI_MASK_CUSTOM;
        s.variant = "all_hooks";
        rc = fi_jit_prewarm(NULL, ctx, &s, "sm_90a");
        CHECK_MSG(rc == 0, "kind %d: %s", (int)prefill_kinds[k], fi_last_error());
    }
    fi_jit_ctx_free(ctx);
}

/* Messages name the kind as spec strings do, or the public function where no
 * spec is at hand. */
TEST(batch_prefill_messages_name_the_kind)
{
    fi_jit_spec s = FI_JIT_SPEC_INIT; /* decode */
    fi_batch_prefill_plan_args pa = FI_BATCH_PREFILL_PLAN_ARGS_INIT;
    size_t bytes = 0;
    CHECK_RC(fi_batch_prefill_workspace_size(&bytes, &s, &pa), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "spec.kind decode is not a batch prefill kind"), "%s",
              fi_last_error());
    CHECK_RC(fi_batch_prefill_plan_workspace_size(&bytes, NULL), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "fi_batch_prefill_plan_workspace_size: plan is NULL"));
}
