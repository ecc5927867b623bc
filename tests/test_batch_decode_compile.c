/*
 * CPU tests of the decode kinds' tuple space: their accepted tuples
 * (fi_jit_spec_enumerate: single and batch decode x q=o fp16/bf16 x kv
 * same/fp8_e4m3/fp8_e5m2 x head_dim 64/128/256 x mask none/window x pos
 * none/rope/alibi x soft-cap 0/1) compile through NVRTC with no failure for
 * sm_80, sm_89 and sm_90a (fi_jit_prewarm, FIJIT_TEST_JOBS threads); the
 * kinds refuse what they do
 * not support with FI_EUNSUPPORTED naming the field; the batch-decode plan
 * validates its layout and sizes its workspace without a GPU. Which tuples
 * compile is tests/cover.h's rule: a pairwise cover per arch in `make test`,
 * each value once with FIJIT_TEST_QUICK=1, every tuple with
 * FIJIT_TEST_SWEEP=1 (`make test-sweep`).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cover.h"
#include "launch/decode.h"
#include "fijit_batch_decode.h"
#include "decode/params.h"

#define DECODE_TUPLES 1024

/* Every tuple the decode kinds accept (fi_jit_spec_enumerate), or -1. */
static int decode_tuples(fi_jit_spec *out, int max)
{
    static const fi_kernel_kind kinds[] = {FI_KIND_DECODE, FI_KIND_BATCH_DECODE};
    int n = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const int got = fi_jit_spec_enumerate(out + n, (size_t)(max - n), kinds[k]);
        if (got < 0 || got > max - n) return -1;
        n += got;
    }
    return n;
}

/* sm_80 converts fp8 K/V in software, sm_89 and later in hardware; sm_90a
 * is the arch the kernels are tuned on. */
static const char *const archs[] = {"sm_80", "sm_89", "sm_90a"};

TEST(decode_tuples_compile_for_every_arch)
{
    for (size_t g = 0; g < sizeof archs / sizeof archs[0]; g++) {
        static fi_jit_spec specs[DECODE_TUPLES];
        static char err[2600];
        const int total = decode_tuples(specs, DECODE_TUPLES);
        CHECK(total > 0);
        CHECK_MSG(cover_compile("decode", archs[g], specs, total, err, sizeof err) > 0, "%s", err);
    }
}

TEST(batch_decode_refuses_unsupported_tuples)
{
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = FI_KIND_BATCH_DECODE;
    s.mask = FI_MASK_CAUSAL;
    CHECK_RC(fi_jit_spec_check(&s), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "mask") && strstr(fi_last_error(), "none, window"));
    s.mask = FI_MASK_NONE;
    s.head_dim = 96;
    CHECK_RC(fi_jit_spec_check(&s), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "head_dim"));
    s.head_dim = 128;
    s.kv_dtype = FI_DTYPE_BF16; /* q fp16 with kv bf16 */
    CHECK_RC(fi_jit_spec_check(&s), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "kv dtype") && strstr(fi_last_error(), "fp8_e4m3"));
    s.kv_dtype = FI_DTYPE_FP8_E4M3;
    s.q_dtype = s.o_dtype = FI_DTYPE_FP8_E4M3;
    CHECK_RC(fi_jit_spec_check(&s), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "q dtype"));
    s.q_dtype = FI_DTYPE_BF16;
    s.o_dtype = FI_DTYPE_FP16;
    CHECK_RC(fi_jit_spec_check(&s), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "o dtype"));
    s.o_dtype = FI_DTYPE_BF16;
    CHECK_OK(fi_jit_spec_check(&s));
    char text[256];
    CHECK(fi_jit_spec_format(text, sizeof text, &s) > 0);
    CHECK_MSG(strstr(text, "batch_decode") && strstr(text, "kv=fp8_e4m3"), "%s", text);
}

TEST(batch_decode_plan_validates_and_sizes)
{
    fi_jit_ctx *ctx = NULL;
    fi_batch_decode_plan *plan = NULL;
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = FI_KIND_BATCH_DECODE;
    /* A plan gets its kernel, loaded into the current context: the fake driver's. */
    CHECK(check_fake_cuda_current() == 0);
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    /* Requests of 0, 1, 100 and 40000 tokens in pages of 16. */
    int32_t indptr[5] = {0, 0, 1, 8, 8 + 2500};
    int32_t last[4] = {0, 1, 4, 16};
    fi_batch_decode_plan_args info = FI_BATCH_DECODE_PLAN_ARGS_INIT;
    info.batch_size = 4;
    info.kv_indptr = indptr;
    info.kv_last_page_len = last;
    info.num_qo_heads = 32;
    info.num_kv_heads = 8;
    info.page_size = 16;
    info.sm_count = 132; /* no GPU needed */
    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &info));
    int items = 0, max_splits = 0;
    size_t bytes = 0;
    CHECK_OK(fi_batch_decode_plan_describe(&items, &max_splits, plan));
    CHECK_OK(fi_batch_decode_plan_workspace_size(&bytes, plan));
    CHECK_MSG(items > 4 && max_splits > 1 && bytes > 0, "items %d splits %d bytes %zu", items,
              max_splits, bytes);
    fi_batch_decode_plan_free(plan);
    plan = NULL;
    info.max_splits = 1;
    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &info));
    CHECK_OK(fi_batch_decode_plan_describe(&items, &max_splits, plan));
    CHECK(items == 4 && max_splits == 1);
    fi_batch_decode_plan_free(plan);
    plan = NULL;
    info.max_splits = 0;
    {
        /* A batch that fills the GPU with equal requests is not split; one
         * request far longer than the rest is. */
        static int32_t even_indptr[65], even_last[64];
        for (int b = 0; b <= 64; b++) even_indptr[b] = b * 256;
        for (int b = 0; b < 64; b++) even_last[b] = 16;
        fi_batch_decode_plan_args even = info;
        even.batch_size = 64;
        even.kv_indptr = even_indptr;
        even.kv_last_page_len = even_last;
        CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &even));
        CHECK_OK(fi_batch_decode_plan_describe(&items, &max_splits, plan));
        CHECK_MSG(items == 64 && max_splits == 1, "even batch: %d items, %d splits", items,
                  max_splits);
        fi_batch_decode_plan_free(plan);
        for (int b = 1; b <= 64; b++) even_indptr[b] += 4096; /* request 0: 69632 keys */
        CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &even));
        CHECK_OK(fi_batch_decode_plan_describe(&items, &max_splits, plan));
        CHECK_MSG(max_splits > 1, "skewed batch: %d items, %d splits", items, max_splits);
        fi_batch_decode_plan_free(plan);
        plan = NULL;
    }
    info.max_splits = 1;
    last[2] = 17; /* more than a page */
    CHECK_RC(fi_batch_decode_plan_new(&plan, ctx, &s, &info), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "kv_last_page_len[2]"));
    last[2] = 4;
    info.page_size = 128;
    CHECK_RC(fi_batch_decode_plan_new(&plan, ctx, &s, &info), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "page_size"));
    info.page_size = 16;
    s.kind = FI_KIND_DECODE;
    CHECK_RC(fi_batch_decode_plan_new(&plan, ctx, &s, &info), FI_EINVALID);
    CHECK(plan == NULL);
    fi_batch_decode_plan_free(NULL);
    fi_jit_ctx_free(ctx);
}

/* K/V strides whose byte offsets reach 2 GiB (the kernels' 32-bit offsets)
 * are refused by both launch functions, naming the stride, before any GPU
 * work; the largest accepted ones pass that check. */
TEST(decode_refuses_strides_beyond_32_bit_offsets)
{
    fi_jit_ctx *ctx = NULL;
    fi_batch_decode_plan *plan = NULL;
    CHECK(check_fake_cuda_current() == 0); /* a plan loads its kernel */
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = FI_KIND_BATCH_DECODE;
    int32_t indptr[2] = {0, 4}, last[1] = {16};
    fi_batch_decode_plan_args info = FI_BATCH_DECODE_PLAN_ARGS_INIT;
    info.batch_size = 1;
    info.kv_indptr = indptr;
    info.kv_last_page_len = last;
    info.num_qo_heads = info.num_kv_heads = 1;
    info.page_size = 16;
    info.sm_count = 132;
    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &info));
    fi_batch_decode_args a = FI_BATCH_DECODE_ARGS_INIT;
    a.o = (void *)(uintptr_t)0x10000;
    a.q = a.k = a.v = a.o;
    a.kv_indices = (const int32_t *)(uintptr_t)0x10000;
    a.q_stride_b = a.o_stride_b = a.q_stride_h = a.o_stride_h = 128;
    a.k_stride_page = a.v_stride_page = 16 * 128;
    a.k_stride_n = a.v_stride_n = 128;
    a.k_stride_page = (int64_t)1 << 30; /* 2 GiB of fp16 */
    CHECK_RC(fi_batch_decode_run(ctx, plan, &a, NULL), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "k_stride_page"), "%s", fi_last_error());
    a.k_stride_page = 16 * 128;
    a.v_stride_n = ((int64_t)1 << 30) / 16; /* times page_size: 2 GiB */
    CHECK_RC(fi_batch_decode_run(ctx, plan, &a, NULL), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "v_stride_n"), "%s", fi_last_error());
    fi_batch_decode_plan_free(plan);

    fi_jit_spec d = FI_JIT_SPEC_INIT;
    d.kind = FI_KIND_DECODE;
    fi_decode_args da = FI_DECODE_ARGS_INIT;
    da.o = (void *)(uintptr_t)0x10000;
    da.q = da.k = da.v = da.o;
    da.num_qo_heads = da.num_kv_heads = 1;
    da.kv_len = 16;
    da.max_splits = 1;
    da.k_stride_n = (int64_t)1 << 30;
    da.v_stride_n = 128;
    CHECK_RC(fi_decode_run(ctx, &d, &da, NULL), FI_EINVALID);
    CHECK_MSG(strstr(fi_last_error(), "k_stride_n"), "%s", fi_last_error());
    fi_jit_ctx_free(ctx);
}

static unsigned rnd_next(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 8) & 0xffffff;
}

/* Random layouts: the work items of every plan cover each request's visible
 * keys exactly once, in order, in whole tiles but the last, with consistent
 * split numbering; empty requests get one empty item. */
TEST(batch_decode_plan_covers_every_key_once)
{
    unsigned seed = 12345;
#define RND() rnd_next(&seed)
    for (int round = 0; round < (check_quick() ? 40 : 400); round++) {
        static int32_t indptr[65], last[64], len[64];
        const int batch = 1 + (int)(RND() % 64);
        const int page = 1 + (int)(RND() % 64);
        const int hd = 64 << (RND() % 3);
        const int kvh = 1 << (RND() % 4), group = 1 + (int)(RND() % 9);
        const int window = RND() % 3 == 0 ? (int)(RND() % 3000) : -1;
        const int max_splits = RND() % 4 == 0 ? (int)(RND() % 5) : 0;
        indptr[0] = 0;
        for (int b = 0; b < batch; b++) {
            const int l = RND() % 5 == 0 ? 0 : (int)(RND() % (RND() % 2 ? 40000 : 300));
            const int pages = (l + page - 1) / page;
            indptr[b + 1] = indptr[b] + pages;
            last[b] = pages ? l - (pages - 1) * page : 0;
            len[b] = l;
        }
        fi_jit_spec s = FI_JIT_SPEC_INIT;
        s.kind = FI_KIND_BATCH_DECODE;
        s.head_dim = hd;
        s.mask = window >= 0 ? FI_MASK_WINDOW : FI_MASK_NONE;
        fi_batch_decode_plan_args info = FI_BATCH_DECODE_PLAN_ARGS_INIT;
        info.batch_size = batch;
        info.kv_indptr = indptr;
        info.kv_last_page_len = last;
        info.num_kv_heads = kvh;
        info.num_qo_heads = kvh * group;
        info.page_size = page;
        info.window_left = window;
        info.max_splits = max_splits;
        info.sm_count = 132;
        fi_batch_decode_plan *plan = NULL;
        CHECK_OK(fi__batch_decode_plan_make(&plan, &s, &info)); /* the arithmetic alone */
        const fi_batch_decode_work *w = NULL;
        int n = 0;
        fi__batch_decode_plan_work(plan, &w, &n);
        const int tile = FI_DECODE_TILE_TOKENS(hd);
        int i = 0, bad = 0;
        for (int b = 0; b < batch && !bad; b++) {
            const int first = window >= 0 && len[b] - 1 - window > 0 ? len[b] - 1 - window : 0;
            int at = first;
            const int splits = i < n ? w[i].num_splits : 0;
            if (splits < 1 || (max_splits > 0 && splits > max_splits)) bad = 1;
            for (int k = 0; k < splits && !bad; k++, i++) {
                const fi_batch_decode_work *x = &w[i];
                if (i >= n || x->request != b || x->split != k || x->num_splits != splits ||
                    x->first_item != i - k || x->kv_len != len[b] || x->page_start != indptr[b] ||
                    x->kv_begin != at || x->kv_end < x->kv_begin ||
                    (k < splits - 1 && ((x->kv_end - x->kv_begin) % tile != 0 ||
                                        x->kv_end == x->kv_begin)))
                    bad = 1;
                at = x->kv_end;
            }
            if (at != len[b] && !(len[b] == 0 && at == 0)) bad = 1;
            CHECK_MSG(!bad, "round %d: request %d (len %d, page %d, window %d, max_splits %d) "
                      "is not covered exactly", round, b, len[b], page, window, max_splits);
        }
        CHECK_MSG(i == n, "round %d: %d items, %d used", round, n, i);
        size_t bytes = 0;
        fi_batch_decode_plan_workspace_size(&bytes, plan);
        CHECK(bytes >= (size_t)n * sizeof(fi_batch_decode_work));
        fi_batch_decode_plan_free(plan);
    }
#undef RND
}
