/*
 * CPU tests of absorbed MLA decode (include/fijit_mla.h, src/launch/mla_decode.c,
 * templates/mla/):
 *  - the spec: parse / format round trips, the kind's own head dim, refusals
 *    naming the field, archs without the shared memory refused;
 *  - NVRTC compiles of a covering set of tuples for sm_80 and sm_90a (16-bit
 *    and fp8 KV, soft-cap, variants on every hook the kernel calls), no spills;
 *  - plans and runs on the fake CUDA driver (tests/fake_cuda.c): grid, block,
 *    shared memory and parameters of both kernels, split decisions, workspace
 *    bounds, argument refusals that launch nothing, and the graph-capture rule
 *    (a run compiles, allocates, copies and synchronises nothing);
 *  - a float64 reference of the un-absorbed MLA formula (explicit per-head
 *    keys W_UK.ckv and values W_UV.ckv) against the absorbed one the kernel
 *    computes, and the plan's work items merged as the merge kernel merges
 *    them against the whole: tests/gpu/test_mla_decode.py holds the kernels
 *    to the same reference.
 * FIJIT_TEST_QUICK=1 (sanitizer runs) compiles for sm_90a only.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "common/sys.h"
#include "fake_cuda.h"
#include "fijit_mla.h"
#include "launch/mla_decode.h"
#include "mla/params.h"

#define CKV FI_MLA_DIM_CKV
#define KPE FI_MLA_DIM_KPE

/* ---- the fake driver -------------------------------------------------------- */

static struct {
    void *lib;
    fake_cuda_set_launch_hook_fn set_launch_hook;
    fake_cuda_uncapturable_calls_fn uncapturable_calls;
    fake_cuda_fail_call_fn fail_call;
    fake_cuda_fault_fired_fn fault_fired;
} fake;

/* Loads the fake driver and makes its device's context current. */
static int fake_ready(void)
{
    if (fake.lib) return 1;
    void *lib = check_fake_cuda();
    if (!lib || check_fake_cuda_current() < 0) return 0;
    *(void **)&fake.set_launch_hook = dlsym(lib, "fake_cuda_set_launch_hook");
    *(void **)&fake.uncapturable_calls = dlsym(lib, "fake_cuda_uncapturable_calls");
    *(void **)&fake.fail_call = dlsym(lib, "fake_cuda_fail_call");
    *(void **)&fake.fault_fired = dlsym(lib, "fake_cuda_fault_fired");
    if (!fake.set_launch_hook || !fake.uncapturable_calls || !fake.fail_call || !fake.fault_fired)
        return 0;
    fake.lib = lib;
    return 1;
}

/* The launches the hook saw: the last of each kernel, with its parameters. */
static struct {
    int count, main_count, merge_count;
    unsigned grid[3], block[3], smem;
    unsigned merge_grid[3], merge_block[3], merge_smem;
    fi_mla_decode_params p, merge_p;
} seen;

static CUresult record_launch(const fake_cuda_launch *l, void *user)
{
    (void)user;
    seen.count++;
    if (strcmp(l->name, "fi_mla_decode_kernel") == 0) {
        seen.main_count++;
        memcpy(seen.grid, l->grid, sizeof seen.grid);
        memcpy(seen.block, l->block, sizeof seen.block);
        seen.smem = l->smem;
        memcpy(&seen.p, l->params[0], sizeof seen.p);
    } else if (strcmp(l->name, "fi_mla_decode_merge_kernel") == 0) {
        seen.merge_count++;
        memcpy(seen.merge_grid, l->grid, sizeof seen.merge_grid);
        memcpy(seen.merge_block, l->block, sizeof seen.merge_block);
        seen.merge_smem = l->smem;
        memcpy(&seen.merge_p, l->params[0], sizeof seen.merge_p);
    }
    return CUDA_SUCCESS;
}

/* One memory-only context for the whole program, so that each tuple compiles
 * once however many tests use it; the fake driver current, launches recorded. */
static fi_jit_ctx *shared;

static void shared_free(void)
{
    fi_jit_ctx_free(shared);
}

static fi_jit_ctx *fake_ctx(void)
{
    if (!fake_ready()) return NULL;
    memset(&seen, 0, sizeof seen);
    fake.set_launch_hook(record_launch, NULL);
    if (!shared) {
        fi_jit_options opts = FI_JIT_OPTIONS_INIT;
        opts.use_disk_cache = 0;
        opts.arch = "sm_90a";
        opts.log_level = FI_LOG_OFF;
        if (fi_jit_ctx_new(&shared, &opts) < 0) return NULL;
        atexit(shared_free);
    }
    return shared;
}

/* Device addresses for tensors the launch code passes on but never reads. */
static _Alignas(256) unsigned char device_arena[1 << 16];
#define DEV(i) ((void *)(device_arena + 4096 * (i)))

static fi_jit_spec mla_spec(fi_dtype q, fi_dtype kv)
{
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = FI_KIND_MLA_DECODE;
    s.q_dtype = s.o_dtype = q;
    s.kv_dtype = kv;
    s.head_dim = FI_MLA_HEAD_DIM;
    return s;
}

/* A batch layout with its arrays (host), as an engine would give it. */
typedef struct batch {
    int size;
    int32_t qo_indptr[33], kv_indptr[33], last[32];
} batch;

/* Requests of q_lens[b] tokens and kv_lens[b] keys in pages of `page`. */
static batch batch_of(int n, const int *q_lens, const int *kv_lens, int page)
{
    batch b;
    memset(&b, 0, sizeof b);
    b.size = n;
    for (int i = 0; i < n; i++) {
        const int pages = (kv_lens[i] + page - 1) / page;
        b.qo_indptr[i + 1] = b.qo_indptr[i] + q_lens[i];
        b.kv_indptr[i + 1] = b.kv_indptr[i] + pages;
        b.last[i] = pages ? kv_lens[i] - (pages - 1) * page : 0;
    }
    return b;
}

static fi_batch_mla_decode_plan_args plan_args(const batch *b, int heads, int page)
{
    fi_batch_mla_decode_plan_args pa = FI_BATCH_MLA_DECODE_PLAN_ARGS_INIT;
    pa.batch_size = b->size;
    pa.qo_indptr = b->qo_indptr;
    pa.kv_indptr = b->kv_indptr;
    pa.kv_last_page_len = b->last;
    pa.num_heads = heads;
    pa.page_size = page;
    return pa;
}

/* Run arguments over contiguous tensors: q [tokens, heads, 576] (q_pe after
 * q_nope in one tensor), one [pages, page, 576] cache, o [tokens, heads, 512]. */
static fi_batch_mla_decode_args run_args(int heads, int page, void *ws, size_t bytes)
{
    fi_batch_mla_decode_args a = FI_BATCH_MLA_DECODE_ARGS_INIT;
    a.q_nope = DEV(0);
    a.q_pe = (char *)DEV(0) + CKV * 2;
    a.ckv = DEV(1);
    a.kpe = (char *)DEV(1) + CKV * 2;
    a.o = DEV(2);
    a.lse = DEV(3);
    a.kv_indices = DEV(4);
    a.q_nope_stride_n = a.q_pe_stride_n = (int64_t)heads * (CKV + KPE);
    a.q_nope_stride_h = a.q_pe_stride_h = CKV + KPE;
    a.ckv_stride_page = a.kpe_stride_page = (int64_t)page * (CKV + KPE);
    a.ckv_stride_n = a.kpe_stride_n = CKV + KPE;
    a.o_stride_n = (int64_t)heads * CKV;
    a.o_stride_h = CKV;
    a.sm_scale = 0.0721688f; /* 1/sqrt(192) */
    a.workspace = ws;
    a.workspace_bytes = bytes;
    return a;
}

/* ---- the spec --------------------------------------------------------------------- */

TEST(mla_spec_round_trips_with_its_own_head_dim)
{
    static const char *const texts[] = {
        "mla_decode q=bf16", "mla_decode q=fp16 kv=fp8_e4m3", "mla_decode q=bf16 softcap=1",
        "mla_decode q=fp16 hd=512 variant=attention_sink"};
    static const char *const canonical[] = {
        "mla_decode q=bf16 kv=bf16 o=bf16 hd=512 mask=none pos=none softcap=0",
        "mla_decode q=fp16 kv=fp8_e4m3 o=fp16 hd=512 mask=none pos=none softcap=0",
        "mla_decode q=bf16 kv=bf16 o=bf16 hd=512 mask=none pos=none softcap=1",
        "mla_decode q=fp16 kv=fp16 o=fp16 hd=512 mask=none pos=none softcap=0 variant=attention_sink"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char variant[64], text[256], again[256], variant2[64];
        fi_jit_spec s, t;
        CHECK_OK(fi_jit_spec_parse(&s, variant, sizeof variant, texts[i]));
        CHECK(s.kind == FI_KIND_MLA_DECODE && s.head_dim == FI_MLA_HEAD_DIM);
        CHECK(fi_jit_spec_format(text, sizeof text, &s) > 0);
        CHECK_MSG(strcmp(text, canonical[i]) == 0, "'%s' formats as '%s'", texts[i], text);
        CHECK_OK(fi_jit_spec_parse(&t, variant2, sizeof variant2, text));
        CHECK(fi_jit_spec_format(again, sizeof again, &t) > 0 && strcmp(again, text) == 0);
    }
    /* The other kinds keep FI_JIT_SPEC_INIT's head dim. */
    fi_jit_spec d = parse_or_die("decode q=fp16");
    CHECK(d.head_dim == 128);
}

TEST(mla_spec_refuses_what_the_kernel_does_not_do)
{
    static const struct {
        const char *text, *words;
    } bad[] = {
        {"mla_decode q=bf16 hd=128", "head_dim 128"},
        {"mla_decode q=bf16 hd=576", "supported: 512"},
        {"mla_decode q=fp8_e4m3 kv=fp8_e4m3 o=bf16", "q dtype 'fp8_e4m3'"},
        {"mla_decode q=bf16 kv=fp16", "kv dtype 'fp16'"},
        {"mla_decode q=bf16 kv=fp8_e5m2", "supported: kv equal to q, fp8_e4m3"},
        {"mla_decode q=bf16 o=fp16", "o dtype 'fp16'"},
        {"mla_decode q=bf16 mask=causal", "causal among a request's new tokens is built in"},
        {"mla_decode q=bf16 mask=window", "mask 'window'"},
        {"mla_decode q=bf16 pos=rope", "RoPE is applied to q_pe and kpe"},
        {"mla_decode q=bf16 pos=alibi", "pos 'alibi'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fi_jit_spec s = parse_or_die(bad[i].text);
        CHECK_RC(fi_jit_spec_check(&s), FI_EUNSUPPORTED);
        CHECK_MSG(strstr(fi_last_error(), bad[i].words), "%s: %s", bad[i].text, fi_last_error());
    }
}

/* The accepted tuple space (what the CLI's prewarm product and make test's
 * sweeps draw from): q = o fp16/bf16 x kv q/e4m3 x soft-cap, all at hd 512. */
TEST(mla_tuple_space_is_eight_tuples_at_the_latent_width)
{
    fi_jit_spec all[16];
    CHECK(fi_jit_spec_enumerate(all, 16, FI_KIND_MLA_DECODE) == 8);
    int fp8 = 0, capped = 0;
    for (int i = 0; i < 8; i++) {
        CHECK(all[i].kind == FI_KIND_MLA_DECODE && all[i].head_dim == FI_MLA_HEAD_DIM);
        CHECK(all[i].o_dtype == all[i].q_dtype && all[i].mask == FI_MASK_NONE &&
              all[i].pos == FI_POS_NONE);
        fp8 += all[i].kv_dtype == FI_DTYPE_FP8_E4M3;
        capped += all[i].soft_cap;
    }
    CHECK(fp8 == 4 && capped == 4);
}

static void collect_text(void *user, const char *text)
{
    char *buf = user;
    strncat(buf, text, 16383 - strlen(buf));
}

/* The key hashes the kind's own templates (templates/mla/) and the shared
 * ones, not another kind's: editing decode/ leaves MLA entries valid. */
TEST(mla_key_covers_its_templates_and_no_other_kinds)
{
    fi_jit_ctx *ctx = NULL;
    static char text[16384];
    text[0] = '\0';
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_FP8_E4M3);
    CHECK_OK(check_ctx_new(&ctx, "sm_80"));
    CHECK_OK(fi_jit_explain(ctx, &s, "sm_80", collect_text, text));
    fi_jit_ctx_free(ctx);
    CHECK_MSG(strstr(text, "header:mla/mla_decode.cuh") && strstr(text, "header:mla/tile.cuh") &&
                  strstr(text, "header:mla/params.h") && strstr(text, "fi_mla_decode_merge_kernel"),
              "%s", text);
    CHECK_MSG(!strstr(text, "header:decode/") && !strstr(text, "header:prefill/"), "%s", text);
}

TEST(mla_archs_without_the_shared_memory_are_refused_before_compiling)
{
    fi_jit_ctx *ctx = NULL;
    fi_build_outcome outcome;
    fi_jit_stats st = FI_JIT_STATS_INIT;
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_BF16);
    CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
    static const char *const refused[] = {"sm_75", "sm_86", "sm_89", "sm_120"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK_RC(fi_jit_prewarm(&outcome, ctx, &s, refused[i]), FI_EUNSUPPORTED);
        CHECK_MSG(strstr(fi_last_error(), refused[i]) && strstr(fi_last_error(), "shared memory"),
                  "%s", fi_last_error());
    }
    CHECK_OK(fi_jit_stats_get(&st, ctx));
    CHECK(st.compiles == 0 && st.compile_failures == 0);
    fi_jit_ctx_free(ctx);
}

/* ---- compiles ----------------------------------------------------------------------- */

/* Variants on every hook the kernel calls: a query transform (the in-place
 * pass over Q), logits transform and mask, and the output transform of an
 * attention sink with a declared parameter. */
static const char kHooksVariant[] =
    "//! param float bias\n"
    "struct Variant : fijit::DefaultVariant {\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float query_transform(const P &p, float q, int h, int d)\n"
    "    { return fijit::DefaultVariant::query_transform(p, q, h, d) * (d < 512 ? 1.0f : 0.5f); }\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ float logits_transform(const P &p, float s, int h, int j, int i)\n"
    "    { return fijit::DefaultVariant::logits_transform(p, s, h, j, i) + fijit::variant_params(p).bias; }\n"
    "    template <class P>\n"
    "    static __device__ __forceinline__ bool logits_mask(const P &p, int h, int j, int i)\n"
    "    { (void)p; (void)h; return j % 7 != 3 || j == i; }\n"
    "};\n";

static int register_variants(fi_jit_ctx *ctx)
{
    int rc = fi_jit_variant_register(ctx, "mla_hooks", kHooksVariant, 0);
    if (rc == 0)
        rc = fi_jit_variant_register_file(ctx, NULL, "examples/variants/attention_sink.cuh", 0);
    return rc;
}

/* Every code path of the templates once: both 16-bit types, fp8 KV under
 * each, soft-cap, the hooks variant, the sink variant. */
static const char *const kCovering[] = {
    "mla_decode q=bf16",
    "mla_decode q=fp16",
    "mla_decode q=bf16 kv=fp8_e4m3",
    "mla_decode q=fp16 kv=fp8_e4m3 softcap=1",
    "mla_decode q=bf16 softcap=1 variant=attention_sink",
    "mla_decode q=fp16 variant=mla_hooks",
    "mla_decode q=bf16 kv=fp8_e4m3 variant=mla_hooks",
};
#define COVERING_COUNT ((int)(sizeof kCovering / sizeof kCovering[0]))

TEST(mla_covering_tuples_compile_for_sm80_and_sm90a)
{
    static const char *const arches[] = {"sm_80", "sm_90a"};
    fi_jit_spec specs[COVERING_COUNT];
    char err[1024];
    for (int i = 0; i < COVERING_COUNT; i++) specs[i] = parse_or_die(kCovering[i]);
    for (int a = check_quick() ? 1 : 0; a < 2; a++) {
        fi_jit_ctx *ctx = NULL;
        CHECK_OK(check_ctx_new(&ctx, arches[a]));
        CHECK_OK(register_variants(ctx));
        const int failed = check_prewarm_all(ctx, specs, COVERING_COUNT, FI_BUILD_COMPILED, err,
                                             sizeof err);
        fi_jit_ctx_free(ctx);
        CHECK_MSG(failed == 0, "%s: %d failed: %s", arches[a], failed, err);
    }
}

TEST(mla_kernels_load_with_their_launch_shape_and_no_spills)
{
    fi_jit_ctx *ctx = fake_ctx();
    CHECK(ctx);
    CHECK_OK(register_variants(ctx));
    for (int i = 0; i < COVERING_COUNT; i++) {
        const fi_jit_spec s = parse_or_die(kCovering[i]);
        const fi_jit_kernel *k = NULL;
        CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
        const int kvb = s.kv_dtype == FI_DTYPE_FP8_E4M3 ? 1 : 2;
        CHECK(k->functions[0] && k->functions[1] && !k->functions[2]);
        CHECK(k->block_dim[0] == FI_MLA_THREADS && k->merge_block_dim[0] == FI_MLA_MERGE_THREADS);
        CHECK(k->smem_bytes == (unsigned)FI_MLA_SMEM_BYTES(kvb, FI_MLA_STAGES(90)));
        CHECK(k->param_bytes == sizeof(fi_mla_decode_params));
        /* From ptxas' report (-1 when missing): the 128-float accumulator
         * and everything else fit in registers. */
        CHECK_MSG(k->spill_bytes == 0, "%s: %d bytes spilled", kCovering[i], k->spill_bytes);
    }
}

/* ---- plans and runs on the fake driver ------------------------------------------------ */

/* The invariants of a work list: per (request, row block), consecutive items
 * that cover the request's keys [0, kv_len) once, in whole tiles; every row
 * of the request in some row block. */
static int work_list_ok(const fi_mla_decode_work *w, int n, const batch *b, int heads,
                        char *why, size_t why_size)
{
    int i = 0;
    for (int r = 0; r < b->size; r++) {
        const int q_len = b->qo_indptr[r + 1] - b->qo_indptr[r];
        const int blocks = (q_len * heads + FI_MLA_ROWS - 1) / FI_MLA_ROWS;
        for (int rb = 0; rb < blocks; rb++) {
            if (i >= n) return snprintf(why, why_size, "request %d block %d missing", r, rb), 0;
            const int first = i, splits = w[i].num_splits, kv_len = w[i].kv_len;
            int next = 0;
            for (int s = 0; s < splits; s++, i++) {
                const fi_mla_decode_work *x = &w[i];
                if (i >= n || x->request != r || x->row_block != rb || x->split != s ||
                    x->num_splits != splits || x->first_item != first || x->kv_len != kv_len ||
                    x->q_len != q_len || x->q_start != b->qo_indptr[r] ||
                    x->page_start != b->kv_indptr[r])
                    return snprintf(why, why_size, "item %d does not continue request %d block "
                                    "%d split %d", i, r, rb, s), 0;
                if (x->kv_begin != next || x->kv_end < x->kv_begin ||
                    (s < splits - 1 && (x->kv_end - x->kv_begin) % FI_MLA_TILE_KEYS != 0))
                    return snprintf(why, why_size, "item %d covers [%d, %d) after %d", i,
                                    x->kv_begin, x->kv_end, next), 0;
                next = x->kv_end;
            }
            if (next != kv_len || splits > FI_MLA_MAX_SPLITS)
                return snprintf(why, why_size, "request %d block %d ends at %d of %d keys in "
                                "%d splits", r, rb, next, kv_len, splits), 0;
        }
    }
    if (i != n) return snprintf(why, why_size, "%d items, %d expected", n, i), 0;
    return 1;
}

TEST(mla_run_launches_the_planned_grid_and_merges_splits)
{
    fi_jit_ctx *ctx = fake_ctx();
    fi_batch_mla_decode_plan *plan = NULL;
    CHECK(ctx);
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_FP8_E4M3);
    /* One long request: 128 heads x 2 tokens = 4 row blocks, far from the
     * fake device's 132 SMs, so its 32k keys are cut. Plus short ones. */
    const int q_lens[4] = {2, 1, 8, 3}, kv_lens[4] = {32768, 0, 65, 1};
    const batch b = batch_of(4, q_lens, kv_lens, 64);
    const fi_batch_mla_decode_plan_args pa = plan_args(&b, 128, 64);
    size_t before = 0, bytes = 0;
    CHECK_OK(fi_batch_mla_decode_workspace_size(&before, &s, &pa));
    CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
    int items = 0, max_splits = 0;
    CHECK_OK(fi_batch_mla_decode_plan_describe(&items, &max_splits, plan));
    CHECK_OK(fi_batch_mla_decode_plan_workspace_size(&bytes, plan));
    CHECK(bytes == before);
    CHECK_MSG(max_splits > 1 && items <= 2 * 132, "%d items, %d splits", items, max_splits);
    const fi_mla_decode_work *work = NULL;
    int n = 0;
    char why[256] = "";
    CHECK_OK(fi__mla_decode_plan_work(plan, &work, &n));
    CHECK_MSG(n == items && work_list_ok(work, n, &b, 128, why, sizeof why), "%s", why);
    /* Work list, then the partial outputs and lse of every item. */
    const size_t need = (size_t)n * sizeof *work + (size_t)n * FI_MLA_ROWS * (CKV + 1) * 4;
    CHECK_MSG(bytes >= need && bytes <= need + 64, "%zu bytes for %zu", bytes, need);

    unsigned char *ws = aligned_alloc(256, (bytes + 255) / 256 * 256);
    CHECK(ws);
    memset(ws, 0xab, bytes);
    CHECK_OK(fi_batch_mla_decode_plan_upload(plan, ws, bytes));
    CHECK(memcmp(ws, work, (size_t)n * sizeof *work) == 0);

    fi_jit_stats st0 = FI_JIT_STATS_INIT, st1 = FI_JIT_STATS_INIT;
    CHECK_OK(fi_jit_stats_get(&st0, ctx));
    const int uncapturable = fake.uncapturable_calls();
    fi_batch_mla_decode_args a = run_args(128, 64, ws, bytes);
    a.kv_scale = 0.5f;
    CHECK_OK(fi_batch_mla_decode_run(ctx, plan, &a, NULL));
    /* A run is capturable: nothing compiled, loaded, copied or synchronised. */
    CHECK_OK(fi_jit_stats_get(&st1, ctx));
    CHECK(fake.uncapturable_calls() == uncapturable);
    CHECK(st1.compiles == st0.compiles && st1.misses == st0.misses);

    CHECK(seen.main_count == 1 && seen.merge_count == 1 && seen.count == 2);
    CHECK(seen.grid[0] == (unsigned)items && seen.grid[1] == 1 && seen.grid[2] == 1);
    CHECK(seen.block[0] == FI_MLA_THREADS && seen.smem == (unsigned)FI_MLA_SMEM_BYTES(1, 3));
    CHECK(seen.merge_grid[0] == (unsigned)items && seen.merge_block[0] == FI_MLA_MERGE_THREADS &&
          seen.merge_smem == 0);
    CHECK(memcmp(&seen.p, &seen.merge_p, sizeof seen.p) == 0);
    const fi_mla_decode_params *p = &seen.p;
    CHECK((const void *)p->work == (const void *)ws);
    CHECK((unsigned char *)p->partial_o >= ws + (size_t)n * sizeof *work);
    CHECK((unsigned char *)(p->partial_lse + (size_t)n * FI_MLA_ROWS) <= ws + bytes);
    CHECK((unsigned char *)p->partial_lse >=
          (unsigned char *)(p->partial_o + (size_t)n * FI_MLA_ROWS * CKV));
    CHECK(p->num_heads == 128 && p->page_size == 64 && p->kv_scale == 0.5f);
    CHECK(p->sm_scale == a.sm_scale && p->soft_cap == 0.f);
    CHECK(p->q_pe == a.q_pe && p->kpe == a.kpe && p->lse == a.lse && p->kv_indices == a.kv_indices);
    CHECK(p->q_nope_stride_t == 128 * 576 && p->ckv_stride_page == 64 * 576 &&
          p->o_stride_t == 128 * 512 && p->o_stride_h == 512);
    fi_batch_mla_decode_plan_free(plan);
    free(ws);
}

TEST(mla_plan_splits_only_when_the_row_blocks_leave_sms_idle)
{
    fi_jit_ctx *ctx = fake_ctx();
    CHECK(ctx);
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_BF16);
    int q_lens[32], kv_lens[32];
    for (int i = 0; i < 32; i++) q_lens[i] = 1 + i % 8, kv_lens[i] = 4096 + 64 * i;
    const int heads[] = {16, 32, 64, 128};
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        const batch b = batch_of(32, q_lens, kv_lens, 16);
        fi_batch_mla_decode_plan_args pa = plan_args(&b, heads[h], 16);
        /* Row blocks: sum over requests of ceil(q_len * heads / 64). */
        int blocks = 0;
        for (int i = 0; i < 32; i++) blocks += (q_lens[i] * heads[h] + 63) / 64;
        static const int sms[] = {16, 132, 1000};
        for (size_t m = 0; m < sizeof sms / sizeof sms[0]; m++) {
            fi_batch_mla_decode_plan *plan = NULL;
            pa.sm_count = sms[m];
            CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
            int items = 0, splits = 0, n = 0;
            const fi_mla_decode_work *work = NULL;
            char why[256] = "";
            CHECK_OK(fi_batch_mla_decode_plan_describe(&items, &splits, plan));
            CHECK_OK(fi__mla_decode_plan_work(plan, &work, &n));
            CHECK_MSG(work_list_ok(work, n, &b, heads[h], why, sizeof why), "%s", why);
            if (blocks >= sms[m])
                CHECK_MSG(splits == 1 && items == blocks, "%d heads, %d SMs: %d items, %d splits",
                          heads[h], sms[m], items, splits);
            else /* one wave (a request whose share is below one SM still gets one) */
                CHECK_MSG(items <= sms[m] + blocks && (sms[m] < 4 * blocks || splits > 1),
                          "%d heads, %d SMs: %d items of %d blocks, %d splits", heads[h], sms[m],
                          items, blocks, splits);
            fi_batch_mla_decode_plan_free(plan);
        }
        /* max_splits 1 never splits; N bounds the items of a block. */
        for (int cap = 1; cap <= 3; cap += 2) {
            fi_batch_mla_decode_plan *plan = NULL;
            int splits = 0;
            pa.sm_count = 100000;
            pa.max_splits = cap;
            CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
            CHECK_OK(fi_batch_mla_decode_plan_describe(NULL, &splits, plan));
            CHECK_MSG(splits >= 1 && splits <= cap, "max_splits %d: %d", cap, splits);
            fi_batch_mla_decode_plan_free(plan);
        }
    }
}

/* DeepSeek-V3's heads over 8 GPUs: 32 requests of one token x 16 heads (one
 * row block each) of 4096 keys: each request gets its share of the SMs,
 * rounded down, so the grid is one wave (132 SMs: 4 items a request). */
TEST(mla_plan_fills_one_wave_without_spilling_into_a_second)
{
    fi_jit_ctx *ctx = fake_ctx();
    CHECK(ctx);
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_BF16);
    int q_lens[32], kv_lens[32];
    for (int i = 0; i < 32; i++) q_lens[i] = 1, kv_lens[i] = 4096;
    const batch b = batch_of(32, q_lens, kv_lens, 64);
    fi_batch_mla_decode_plan_args pa = plan_args(&b, 16, 64);
    static const struct {
        int sms, items, splits;
    } want[] = {{132, 128, 4}, {64, 64, 2}, {32, 32, 1}, {16, 32, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        fi_batch_mla_decode_plan *plan = NULL;
        int items = 0, splits = 0;
        pa.sm_count = want[i].sms;
        CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
        CHECK_OK(fi_batch_mla_decode_plan_describe(&items, &splits, plan));
        fi_batch_mla_decode_plan_free(plan);
        CHECK_MSG(items == want[i].items && splits == want[i].splits,
                  "%d SMs: %d items, %d splits", want[i].sms, items, splits);
    }
}

TEST(mla_request_without_keys_is_one_item_that_reads_nothing)
{
    fi_jit_ctx *ctx = fake_ctx();
    fi_batch_mla_decode_plan *plan = NULL;
    CHECK(ctx);
    const fi_jit_spec s = mla_spec(FI_DTYPE_FP16, FI_DTYPE_FP16);
    const int q_lens[1] = {4}, kv_lens[1] = {0};
    const batch b = batch_of(1, q_lens, kv_lens, 1);
    fi_batch_mla_decode_plan_args pa = plan_args(&b, 16, 1);
    CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
    const fi_mla_decode_work *w = NULL;
    int n = 0;
    CHECK_OK(fi__mla_decode_plan_work(plan, &w, &n));
    CHECK(n == 1 && w->kv_begin == 0 && w->kv_end == 0 && w->num_splits == 1 && w->q_len == 4);
    size_t bytes = 0;
    CHECK_OK(fi_batch_mla_decode_plan_workspace_size(&bytes, plan));
    CHECK(bytes == sizeof *w); /* no split: no partials */
    fi_batch_mla_decode_plan_free(plan);
}

TEST(mla_bad_plan_arguments_are_refused_by_name)
{
    fi_jit_ctx *ctx = fake_ctx();
    CHECK(ctx);
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_BF16);
    const int q_lens[2] = {1, 2}, kv_lens[2] = {100, 10};
    static const struct {
        const char *words;
        int field, value, code;
    } bad[] = {
        {"batch_size is 0", 0, 0, FI_EINVALID},    {"num_heads is 0", 1, 0, FI_EINVALID},
        {"num_heads is 129", 1, 129, FI_EINVALID}, {"page_size 0", 2, 0, FI_EUNSUPPORTED},
        {"page_size 65", 2, 65, FI_EUNSUPPORTED},  {"max_splits is 65", 3, 65, FI_EINVALID},
        {"sm_count is -1", 4, -1, FI_EINVALID},    {"9 query tokens", 5, 9, FI_EINVALID},
        {"0 query tokens", 5, 0, FI_EINVALID},     {"kv_last_page_len[0] = 17", 6, 17, FI_EINVALID},
        {"qo_indptr[0] (1)", 7, 1, FI_EINVALID},   {"version", 8, 7, FI_EINVALID},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        batch b = batch_of(2, q_lens, kv_lens, 16);
        fi_batch_mla_decode_plan_args pa = plan_args(&b, 32, 16);
        switch (bad[i].field) {
        case 0: pa.batch_size = bad[i].value; break;
        case 1: pa.num_heads = bad[i].value; break;
        case 2: pa.page_size = bad[i].value; break;
        case 3: pa.max_splits = bad[i].value; break;
        case 4: pa.sm_count = bad[i].value; break;
        case 5: b.qo_indptr[2] = b.qo_indptr[1] + bad[i].value; break;
        case 6: b.last[0] = bad[i].value; break;
        case 7: b.qo_indptr[0] = bad[i].value; break;
        default: pa.version = (unsigned)bad[i].value; break;
        }
        fi_batch_mla_decode_plan *plan = (fi_batch_mla_decode_plan *)&pa; /* must be reset */
        size_t bytes = 1;
        CHECK_RC(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa), bad[i].code);
        CHECK_MSG(strstr(fi_last_error(), bad[i].words) && strstr(fi_last_error(), "mla_decode"),
                  "%s: %s", bad[i].words, fi_last_error());
        CHECK(plan == NULL);
        CHECK_RC(fi_batch_mla_decode_workspace_size(&bytes, &s, &pa), bad[i].code);
        CHECK(bytes == 0);
    }
    /* A spec of another kind. */
    batch b = batch_of(2, q_lens, kv_lens, 16);
    fi_batch_mla_decode_plan_args pa = plan_args(&b, 32, 16);
    fi_jit_spec other = parse_or_die("batch_decode q=bf16 hd=128");
    fi_batch_mla_decode_plan *plan = NULL;
    CHECK_RC(fi_batch_mla_decode_plan_new(&plan, ctx, &other, &pa), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "FI_KIND_MLA_DECODE"));
    CHECK(seen.count == 0);
}

TEST(mla_bad_run_arguments_are_refused_by_name_and_launch_nothing)
{
    fi_jit_ctx *ctx = fake_ctx();
    fi_batch_mla_decode_plan *plan = NULL;
    CHECK(ctx);
    fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_BF16);
    s.soft_cap = 1;
    const int q_lens[2] = {1, 2}, kv_lens[2] = {100, 10};
    const batch b = batch_of(2, q_lens, kv_lens, 16);
    const fi_batch_mla_decode_plan_args pa = plan_args(&b, 32, 16);
    CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
    size_t bytes = 0;
    CHECK_OK(fi_batch_mla_decode_plan_workspace_size(&bytes, plan));
    unsigned char *ws = aligned_alloc(256, (bytes + 255) / 256 * 256);
    CHECK(ws);
    fi_batch_mla_decode_args a = run_args(32, 16, ws, bytes);
    a.logits_soft_cap = 30.f;
    CHECK_RC(fi_batch_mla_decode_run(ctx, plan, &a, NULL), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "fi_batch_mla_decode_plan_upload"));
    CHECK_OK(fi_batch_mla_decode_plan_upload(plan, ws, bytes));
    CHECK_OK(fi_batch_mla_decode_run(ctx, plan, &a, NULL));
    CHECK(seen.main_count == 1 && seen.merge_count == 0 && seen.p.soft_cap == 30.f);
    static const char *const words[] = {
        "q_nope", "q_pe (", "ckv", "kpe", "o (", "kv_indices", "lse",
        "q_nope_stride_n", "kpe_stride_page", "o_stride_h (256)", "o_stride_n",
        "sm_scale is 0", "sm_scale is nan", "kv_scale is -1", "logits_soft_cap", "workspace has",
        "version"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        fi_batch_mla_decode_args x = a;
        switch (i) {
        case 0: x.q_nope = NULL; break;
        case 1: x.q_pe = (char *)x.q_pe + 2; break;
        case 2: x.ckv = NULL; break;
        case 3: x.kpe = (char *)x.kpe + 8; break;
        case 4: x.o = (char *)x.o + 4; break;
        case 5: x.kv_indices = NULL; break;
        case 6: x.lse = (float *)((char *)x.lse + 2); break;
        case 7: x.q_nope_stride_n = 100; break;
        case 8: x.kpe_stride_page = -8; break;
        case 9: x.o_stride_h = 256; break;
        case 10: x.o_stride_n = 512; break;
        case 11: x.sm_scale = 0.f; break;
        case 12: x.sm_scale = NAN; break;
        case 13: x.kv_scale = -1.f; break;
        case 14: x.logits_soft_cap = 0.f; break;
        case 15: x.workspace_bytes = bytes - 16; break;
        default: x.version = 2; break;
        }
        CHECK_RC(fi_batch_mla_decode_run(ctx, plan, &x, NULL), FI_EINVALID);
        CHECK_MSG(strstr(fi_last_error(), words[i]) && strstr(fi_last_error(), "mla_decode"),
                  "want '%s': %s", words[i], fi_last_error());
    }
    /* A plan serves the context it was made with. */
    fi_jit_ctx *other = NULL;
    CHECK_OK(check_ctx_new(&other, "sm_90a"));
    CHECK_RC(fi_batch_mla_decode_run(other, plan, &a, NULL), FI_EINVALID);
    fi_jit_ctx_free(other);
    CHECK(seen.count == 1); /* only the good run launched */
    fi_batch_mla_decode_plan_free(plan);
    free(ws);
}

/* A plan with a split (so both kernels launch), its upload and two runs, on
 * a fresh context over the test's disk cache; 0 or the first error. */
static int plan_upload_run(unsigned char *ws, size_t room)
{
    fi_jit_ctx *ctx = NULL;
    fi_batch_mla_decode_plan *plan = NULL;
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_FP8_E4M3);
    const int q_lens[2] = {2, 1}, kv_lens[2] = {5000, 70};
    const batch b = batch_of(2, q_lens, kv_lens, 64);
    const fi_batch_mla_decode_plan_args pa = plan_args(&b, 16, 64);
    size_t bytes = 0;
    int rc = check_ctx_new(&ctx, "sm_90a");
    if (rc == 0) rc = fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa);
    if (rc == 0) rc = fi_batch_mla_decode_plan_workspace_size(&bytes, plan);
    if (rc == 0 && bytes > room) rc = -100;
    if (rc == 0) rc = fi_batch_mla_decode_plan_upload(plan, ws, bytes);
    fi_batch_mla_decode_args a = run_args(16, 64, ws, bytes);
    for (int i = 0; i < 2 && rc == 0; i++) rc = fi_batch_mla_decode_run(ctx, plan, &a, NULL);
    fi_batch_mla_decode_plan_free(plan);
    fi_jit_ctx_free(ctx);
    return rc;
}

/* Fault loop over the driver: for n = 1, 2, ... the n-th driver call of
 * plan, upload and runs fails. Each call returns 0 or a fijit error naming
 * the failure (no crash; the sanitizer runs see no leak), and the next
 * sequence on a fresh context succeeds. */
TEST(mla_a_failing_driver_call_anywhere_is_an_error_and_nothing_more)
{
    static unsigned char ws[16 << 20] __attribute__((aligned(256)));
    CHECK(fake_ctx());
    CHECK_OK(plan_upload_run(ws, sizeof ws)); /* compiles into the test's cache */
    int n = 1, failures = 0;
    for (; n < 200; n++) {
        fake.fail_call(n, CUDA_ERROR_LAUNCH_FAILED);
        const int rc = plan_upload_run(ws, sizeof ws);
        const int fired = fake.fault_fired();
        fake.fail_call(0, CUDA_SUCCESS);
        CHECK_MSG(rc <= 0 && rc != -100, "call %d: %d", n, rc);
        if (!fired) {
            CHECK_OK(rc);
            break;
        }
        if (rc < 0) {
            failures++;
            CHECK_MSG(strstr(fi_last_error(), "failed") || strstr(fi_last_error(), "CUDA"),
                      "call %d: %s", n, fi_last_error());
        }
        CHECK_MSG(plan_upload_run(ws, sizeof ws) == 0, "after call %d: %s", n, fi_last_error());
    }
    CHECK_MSG(n > 5 && n < 200 && failures > 3, "%d driver calls, %d reached the caller", n - 1,
              failures);
}

/* The same with the n-th allocation failing, once and then persistently:
 * FI_ENOMEM (or a code it turned into) with a message, no leak under ASan,
 * and the next sequence succeeds. */
TEST(mla_a_failing_allocation_anywhere_is_an_error_and_nothing_more)
{
    static unsigned char ws[16 << 20] __attribute__((aligned(256)));
    CHECK(fake_ctx());
    CHECK_OK(plan_upload_run(ws, sizeof ws));
    int n = 1, failures = 0;
    for (; n < 5000; n++) {
        for (int persistent = 0; persistent < 2; persistent++) {
            fi__fault_arm(FI_FAULT_ALLOC, n, persistent);
            const int rc = plan_upload_run(ws, sizeof ws);
            const long fired = fi__fault_count();
            fi__fault_arm(0, 0, 0);
            if (!fired) {
                CHECK_OK(rc);
                goto done;
            }
            CHECK_MSG(rc <= 0 && rc != -100 && (rc == 0 || *fi_last_error()),
                      "allocation %d: %d", n, rc);
            failures += rc < 0;
            CHECK_MSG(plan_upload_run(ws, sizeof ws) == 0, "after allocation %d: %s", n,
                      fi_last_error());
        }
    }
done:
    CHECK_MSG(n > 10 && n < 5000 && failures > 10, "%d allocations, %d failures reached the caller",
              n - 1, failures);
}

/* ---- the float64 reference ---------------------------------------------------------------- */

/* A random problem in double: q [tokens, heads, 576], a paged cache [pages,
 * page, 576] (ckv then kpe), pages handed out in a scrambled order. */
typedef struct problem {
    batch b;
    int heads, page, tokens, pages;
    double *q, *cache, scale, cap, *sink; /* cap 0: no soft-cap; sink NULL: none */
    int32_t *indices;
} problem;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) /* [-1, 1) */
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static int problem_new(problem *P, int n, const int *q_lens, const int *kv_lens, int heads, int page)
{
    memset(P, 0, sizeof *P);
    P->b = batch_of(n, q_lens, kv_lens, page);
    P->heads = heads;
    P->page = page;
    P->tokens = P->b.qo_indptr[n];
    P->pages = P->b.kv_indptr[n];
    P->scale = 1.0 / sqrt(192.0);
    P->q = malloc(sizeof(double) * (size_t)P->tokens * heads * 576);
    P->cache = malloc(sizeof(double) * ((size_t)P->pages * page * 576 + 1));
    P->indices = malloc(sizeof(int32_t) * ((size_t)P->pages + 1));
    if (!P->q || !P->cache || !P->indices) return -1;
    for (size_t i = 0; i < (size_t)P->tokens * heads * 576; i++) P->q[i] = 2.0 * uniform();
    for (size_t i = 0; i < (size_t)P->pages * page * 576; i++) P->cache[i] = uniform();
    for (int i = 0; i < P->pages; i++) P->indices[i] = (int32_t)((i * 7 + 3) % P->pages);
    return 0;
}

static void problem_free(problem *P)
{
    free(P->q);
    free(P->cache);
    free(P->indices);
}

/* Cached token j of request r: its 576 values. */
static const double *cached(const problem *P, int r, int j)
{
    const int32_t page = P->indices[P->b.kv_indptr[r] + j / P->page];
    return P->cache + ((size_t)page * P->page + (size_t)(j % P->page)) * 576;
}

/* The absorbed formula, as the kernel computes it, for row (token i of
 * request r, head h) over keys [begin, end): o [512] normalised over them
 * and their natural-log lse (-inf and 0 when none is visible). */
static double absorbed_partial(const problem *P, int r, int i, int h, int begin, int end,
                               double *o)
{
    const int q_len = P->b.qo_indptr[r + 1] - P->b.qo_indptr[r];
    const int pages = P->b.kv_indptr[r + 1] - P->b.kv_indptr[r];
    const int kv_len = pages ? (pages - 1) * P->page + P->b.last[r] : 0;
    const double *q = P->q + ((size_t)(P->b.qo_indptr[r] + i) * P->heads + h) * 576;
    double m = -INFINITY, l = 0;
    memset(o, 0, sizeof(double) * CKV);
    for (int j = begin; j < end && j <= kv_len - q_len + i; j++) {
        const double *k = cached(P, r, j);
        double s = 0;
        for (int d = 0; d < 576; d++) s += q[d] * k[d];
        s *= P->scale;
        if (P->cap > 0) s = P->cap * tanh(s / P->cap);
        const double m_new = s > m ? s : m, alpha = exp(m - m_new), w = exp(s - m_new);
        l = l * alpha + w;
        for (int d = 0; d < CKV; d++) o[d] = o[d] * alpha + w * k[d];
        m = m_new;
    }
    for (int d = 0; d < CKV && l > 0; d++) o[d] /= l;
    return l > 0 ? m + log(l) : -INFINITY;
}

/* The sink's output transform (examples/variants/attention_sink.cuh). */
static double with_sink(const problem *P, int h, double o, double lse)
{
    return P->sink ? o / (1.0 + exp(P->sink[h] - lse)) : o;
}

TEST(mla_absorbed_formula_equals_the_unabsorbed_attention)
{
    /* DeepSeek-V3's shapes per head: q_nope 128 (before absorption), rope 64,
     * latent 512, v 128; W_UK, W_UV [128][512]. k_h(j) = [W_UK ckv_j || kpe_j]
     * (192), v_h(j) = W_UV ckv_j (128). Absorbed: q_lat = W_UK^T q_nope, and
     * o_h = W_UV o_lat. */
    const int q_lens[3] = {1, 3, 8}, kv_lens[3] = {65, 3, 130};
    const int heads = 2;
    problem P;
    CHECK(problem_new(&P, 3, q_lens, kv_lens, heads, 16) == 0);
    P.cap = 0;
    double *wuk = malloc(sizeof(double) * heads * 128 * CKV);
    double *wuv = malloc(sizeof(double) * heads * 128 * CKV);
    double *qn = malloc(sizeof(double) * (size_t)P.tokens * heads * 128);
    double *o_lat = malloc(sizeof(double) * CKV);
    CHECK(wuk && wuv && qn && o_lat);
    for (int i = 0; i < heads * 128 * CKV; i++) wuk[i] = uniform() / 8, wuv[i] = uniform() / 8;
    for (int i = 0; i < P.tokens * heads * 128; i++) qn[i] = uniform();
    /* Absorb: the q_nope part of P.q is W_UK^T q_nope (q_pe is kept). */
    for (int t = 0; t < P.tokens; t++)
        for (int h = 0; h < heads; h++)
            for (int c = 0; c < CKV; c++) {
                double s = 0;
                for (int e = 0; e < 128; e++)
                    s += wuk[((size_t)h * 128 + e) * CKV + c] * qn[((size_t)t * heads + h) * 128 + e];
                P.q[((size_t)t * heads + h) * 576 + c] = s;
            }
    double worst = 0;
    int rows = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < q_lens[r]; i++)
            for (int h = 0; h < heads; h++) {
                const int t = P.b.qo_indptr[r] + i;
                const double lse = absorbed_partial(&P, r, i, h, 0, kv_lens[r], o_lat);
                /* Un-absorbed: explicit keys and values of head h. */
                const double *qpe = P.q + ((size_t)t * heads + h) * 576 + CKV;
                const double *qh = qn + ((size_t)t * heads + h) * 128;
                double m = -INFINITY, l = 0, o[128] = {0};
                for (int j = 0; j <= kv_lens[r] - q_lens[r] + i; j++) {
                    const double *c = cached(&P, r, j);
                    double k[128], v[128], s = 0;
                    for (int e = 0; e < 128; e++) {
                        k[e] = v[e] = 0;
                        for (int d = 0; d < CKV; d++) {
                            k[e] += wuk[((size_t)h * 128 + e) * CKV + d] * c[d];
                            v[e] += wuv[((size_t)h * 128 + e) * CKV + d] * c[d];
                        }
                        s += qh[e] * k[e];
                    }
                    for (int e = 0; e < KPE; e++) s += qpe[e] * c[CKV + e];
                    s *= P.scale;
                    const double m_new = s > m ? s : m, alpha = exp(m - m_new), w = exp(s - m_new);
                    l = l * alpha + w;
                    for (int e = 0; e < 128; e++) o[e] = o[e] * alpha + w * v[e];
                    m = m_new;
                }
                CHECK(l > 0 && fabs(m + log(l) - lse) < 1e-9);
                for (int e = 0; e < 128; e++) {
                    double up = 0;
                    for (int d = 0; d < CKV; d++) up += wuv[((size_t)h * 128 + e) * CKV + d] * o_lat[d];
                    const double err = fabs(up - o[e] / l);
                    if (err > worst) worst = err;
                }
                rows++;
            }
    CHECK_MSG(rows == 2 * 12 && worst < 1e-9, "%d rows, worst %g", rows, worst);
    free(wuk), free(wuv), free(qn), free(o_lat);
    problem_free(&P);
}

TEST(mla_plan_items_merged_as_the_merge_kernel_does_give_the_reference)
{
    fi_jit_ctx *ctx = fake_ctx();
    fi_batch_mla_decode_plan *plan = NULL;
    CHECK(ctx);
    const int q_lens[6] = {1, 8, 2, 3, 5, 1}, kv_lens[6] = {0, 1, 63, 64, 65, 1000};
    const int heads = 16;
    problem P;
    CHECK(problem_new(&P, 6, q_lens, kv_lens, heads, 16) == 0);
    double sink[16];
    for (int h = 0; h < heads; h++) sink[h] = uniform() * 3;
    P.cap = 8.0;
    P.sink = sink;
    const fi_jit_spec s = mla_spec(FI_DTYPE_BF16, FI_DTYPE_BF16);
    fi_batch_mla_decode_plan_args pa = plan_args(&P.b, heads, 16);
    pa.sm_count = 32; /* more SMs than the 8 row blocks: the long requests split */
    CHECK_OK(fi_batch_mla_decode_plan_new(&plan, ctx, &s, &pa));
    const fi_mla_decode_work *w = NULL;
    int n = 0, splits = 0;
    CHECK_OK(fi__mla_decode_plan_work(plan, &w, &n));
    CHECK_OK(fi_batch_mla_decode_plan_describe(NULL, &splits, plan));
    CHECK(splits > 1);
    double *part = malloc(sizeof(double) * (size_t)n * FI_MLA_ROWS * CKV);
    double *part_lse = malloc(sizeof(double) * (size_t)n * FI_MLA_ROWS);
    double whole[CKV];
    CHECK(part && part_lse);
    /* The main kernel's item states, row by row. */
    for (int it = 0; it < n; it++)
        for (int row = 0; row < FI_MLA_ROWS; row++) {
            const int flat = w[it].row_block * FI_MLA_ROWS + row;
            if (flat >= w[it].q_len * heads) break;
            part_lse[(size_t)it * FI_MLA_ROWS + row] =
                absorbed_partial(&P, w[it].request, flat / heads, flat % heads, w[it].kv_begin,
                                 w[it].kv_end, part + ((size_t)it * FI_MLA_ROWS + row) * CKV);
        }
    /* The merge kernel's combination (or the item itself), then the sink. */
    double worst = 0;
    int rows = 0;
    for (int it = 0; it < n; it++) {
        if (w[it].split != 0) continue;
        for (int row = 0; row < FI_MLA_ROWS; row++) {
            const int flat = w[it].row_block * FI_MLA_ROWS + row;
            if (flat >= w[it].q_len * heads) break;
            const int h = flat % heads;
            double mx = -INFINITY, sum = 0, lse;
            for (int k = 0; k < w[it].num_splits; k++)
                if (part_lse[(size_t)(it + k) * FI_MLA_ROWS + row] > mx)
                    mx = part_lse[(size_t)(it + k) * FI_MLA_ROWS + row];
            double merged[CKV] = {0};
            for (int k = 0; mx > -INFINITY && k < w[it].num_splits; k++) {
                const double wt = exp(part_lse[(size_t)(it + k) * FI_MLA_ROWS + row] - mx);
                sum += wt;
                for (int d = 0; d < CKV; d++)
                    merged[d] += wt * part[((size_t)(it + k) * FI_MLA_ROWS + row) * CKV + d];
            }
            lse = sum > 0 ? mx + log(sum) : -INFINITY;
            const double ref = absorbed_partial(&P, w[it].request, flat / heads, h, 0,
                                                w[it].kv_len, whole);
            CHECK_MSG(lse == ref || fabs(lse - ref) < 1e-9, "lse %g vs %g", lse, ref);
            for (int d = 0; d < CKV; d++) {
                const double got = with_sink(&P, h, sum > 0 ? merged[d] / sum : 0, lse);
                const double err = fabs(got - with_sink(&P, h, whole[d], ref));
                if (err > worst) worst = err;
            }
            rows++;
        }
    }
    CHECK_MSG(rows == 20 * heads && worst < 1e-12, "%d rows, worst %g", rows, worst);
    /* The request without keys: o = 0 (the sink holds all), lse = -inf. */
    CHECK(absorbed_partial(&P, 0, 0, 0, 0, 0, whole) == -INFINITY && whole[0] == 0);
    free(part), free(part_lse);
    problem_free(&P);
    fi_batch_mla_decode_plan_free(plan);
}
