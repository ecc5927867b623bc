/*
 * The launch paths of every kernel kind, run against the fake CUDA driver
 * (tests/fake_cuda.c, built next to this test as libcuda.so.1): what reaches
 * cuLaunchKernel — entry, grid, block, dynamic shared memory and the
 * parameter block — and what the plans copy to "device" memory. The kernels
 * are compiled for real (NVRTC, sm_90a) and checked by the fake to name the
 * entries asked for; nothing executes. Kernel results are the GPU suites'
 * business (tests/gpu).
 */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "fijit_cache.h"
#include "launch/decode.h"
#include "fake_cuda.h"
#include "fijit_batch_decode.h"
#include "decode/params.h"
#include "fijit_prefill.h"
#include "prefill/params.h"

/* ---- the fake driver ---------------------------------------------------------- */

static struct {
    void *lib;
    fake_cuda_set_launch_hook_fn set_launch_hook;
    fake_cuda_uncapturable_calls_fn uncapturable_calls;
    fake_cuda_fail_call_fn fail_call;
    fake_cuda_fault_fired_fn fault_fired;
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int);
} fake;

/* Loads the fake driver (before fijit's first driver call, which then finds
 * it by soname) and makes its device's context current. */
static int fake_ready(void)
{
    if (fake.lib) return 1;
    void *lib = check_fake_cuda();
    if (!lib) return 0;
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
    *(void **)&fake.set_launch_hook = dlsym(lib, "fake_cuda_set_launch_hook");
    *(void **)&fake.uncapturable_calls = dlsym(lib, "fake_cuda_uncapturable_calls");
    *(void **)&fake.fail_call = dlsym(lib, "fake_cuda_fail_call");
    *(void **)&fake.fault_fired = dlsym(lib, "fake_cuda_fault_fired");
    *(void **)&fake.launch = dlsym(lib, "cuLaunchKernel");
    *(void **)&fake.func_set_attribute = dlsym(lib, "cuFuncSetAttribute");
    CUcontext context = NULL;
    if (!retain || !set_current || !fake.set_launch_hook || !fake.uncapturable_calls ||
        !fake.fail_call || !fake.fault_fired || !fake.launch ||
        !fake.func_set_attribute || retain(&context, 0) != CUDA_SUCCESS ||
        set_current(context) != CUDA_SUCCESS)
        return 0;
    fake.lib = lib;
    return 1;
}

/* The last launch the hook saw, with a copy of its parameter block. */
static struct {
    int count;
    char name[64];
    unsigned grid[3], block[3], smem;
    union {
        fi_decode_params decode;
        fi_batch_decode_params batch_decode;
        fi_merge_states_params merge;
        fi_prefill_params prefill;
    } p;
    fi_prefill_ws ws; /* the Hopper main loop's second parameter */
    CUresult result; /* what the hook makes cuLaunchKernel return */
    /* The last batch prefill RoPE pre-pass. */
    int rope_count;
    unsigned rope_grid[3], rope_block[3];
    fi_prefill_params rope;
} seen;

static CUresult record_launch(const fake_cuda_launch *l, void *user)
{
    (void)user;
    seen.count++;
    if (strcmp(l->name, "fi_prefill_rope_k_kernel") == 0) {
        seen.rope_count++;
        memcpy(seen.rope_grid, l->grid, sizeof seen.rope_grid);
        memcpy(seen.rope_block, l->block, sizeof seen.rope_block);
        memcpy(&seen.rope, l->params[0], sizeof seen.rope);
    }
    snprintf(seen.name, sizeof seen.name, "%s", l->name);
    memcpy(seen.grid, l->grid, sizeof seen.grid);
    memcpy(seen.block, l->block, sizeof seen.block);
    seen.smem = l->smem;
    size_t bytes = 0;
    if (strcmp(l->name, "fi_decode_kernel") == 0) bytes = sizeof seen.p.decode;
    else if (strcmp(l->name, "fi_batch_decode_kernel") == 0) bytes = sizeof seen.p.batch_decode;
    else if (strcmp(l->name, "fi_merge_states_kernel") == 0) bytes = sizeof seen.p.merge;
    else if (strncmp(l->name, "fi_prefill_kernel_", 18) == 0) bytes = sizeof seen.p.prefill;
    memcpy(&seen.p, l->params[0], bytes);
    if (strcmp(l->name, "fi_prefill_kernel_ws") == 0) memcpy(&seen.ws, l->params[1], sizeof seen.ws);
    return seen.result;
}

/* The fake device is compute capability 9.0: modules are built for sm_90a
 * unless a test asks for sm_90. */
#define FAKE_SM90A 1

/* A context for `arch` on a fresh cache, the fake driver current, launches
 * recorded. */
static int launch_ctx_for(fi_jit_ctx **ctx, const char *arch)
{
    if (!fake_ready()) return -1;
    memset(&seen, 0, sizeof seen);
    fake.set_launch_hook(record_launch, NULL);
    return check_ctx_new(ctx, arch);
}

static int launch_ctx(fi_jit_ctx **ctx)
{
    return launch_ctx_for(ctx, "sm_90a");
}

/* Device addresses for tensors the launch code passes on but never reads. */
static _Alignas(256) unsigned char device_arena[1 << 16];
#define DEV(i) ((void *)(device_arena + 4096 * (i)))

/* The frequencies decode/params.h documents, to the float they round to. */
static int rope_table_is(const float *freq, int hd, double scale, double theta)
{
    for (int i = 0; i < hd / 2; i++)
        if (freq[i] != (float)(pow(theta, -2.0 * i / hd) / scale)) return 0;
    return 1;
}

static fi_jit_spec spec_of(fi_kernel_kind kind, fi_mask mask, fi_pos_encoding pos)
{
    fi_jit_spec s = FI_JIT_SPEC_INIT;
    s.kind = kind;
    s.head_dim = 128;
    s.mask = mask;
    s.pos = pos;
    return s;
}

/* ---- tests ---------------------------------------------------------------------- */

TEST(fake_driver_refuses_shared_memory_beyond_the_opt_in)
{
    /* The other tests rely on this check to catch a launch that forgot its
     * opt-in; it must be able to fail. */
    fi_jit_ctx *ctx = NULL;
    const fi_jit_kernel *k = NULL;
    fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_NONE);
    CHECK_OK(launch_ctx(&ctx));
    CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
    fi_decode_params p;
    memset(&p, 0, sizeof p);
    void *params[] = {&p};
    CHECK(fake.launch(k->function, 1, 1, 1, 128, 1, 1, 64 * 1024, NULL, params, NULL) ==
          CUDA_ERROR_INVALID_VALUE);
    CHECK(seen.count == 0);
    CHECK(fake.func_set_attribute(k->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  64 * 1024) == CUDA_SUCCESS);
    CHECK(fake.launch(k->function, 1, 1, 1, 128, 1, 1, 64 * 1024, NULL, params, NULL) ==
          CUDA_SUCCESS);
    CHECK(fake.launch(k->function, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL) ==
          CUDA_ERROR_INVALID_VALUE);
    CHECK(seen.count == 1 && strcmp(seen.name, "fi_decode_kernel") == 0);
    fi_jit_ctx_free(ctx);
}

static void decode_args_for(fi_decode_args *a, int kv_len)
{
    a->q = DEV(0);
    a->k = DEV(1);
    a->v = DEV(2);
    a->o = DEV(3);
    a->num_qo_heads = 32;
    a->num_kv_heads = 8;
    a->kv_len = kv_len;
    a->q_stride_h = a->o_stride_h = 128;
    a->k_stride_n = a->v_stride_n = 8 * 128; /* NHD */
    a->k_stride_h = a->v_stride_h = 128;
}

/* A single prefill of len queries and keys in NHD, q heads qo_heads, kv heads kv_heads. */
static void prefill_args_for(fi_prefill_args *a, int qo_heads, int kv_heads, int len, int hd)
{
    a->q = DEV(0);
    a->k = DEV(1);
    a->v = DEV(2);
    a->o = DEV(3);
    a->num_qo_heads = qo_heads;
    a->num_kv_heads = kv_heads;
    a->qo_len = a->kv_len = len;
    a->q_stride_n = a->o_stride_n = qo_heads * hd;
    a->k_stride_n = a->v_stride_n = kv_heads * hd;
    a->q_stride_h = a->o_stride_h = a->k_stride_h = a->v_stride_h = hd;
}

/* A batch of pages of 16 tokens, 32 q heads on 8 kv heads; the SM count
 * from the (fake) device. */
static fi_batch_decode_plan_args plan_args_for(int batch, const int32_t *indptr, const int32_t *last)
{
    fi_batch_decode_plan_args info = FI_BATCH_DECODE_PLAN_ARGS_INIT;
    info.batch_size = batch;
    info.kv_indptr = indptr;
    info.kv_last_page_len = last;
    info.num_qo_heads = 32;
    info.num_kv_heads = 8;
    info.page_size = 16;
    return info;
}

/* Batch decode over HND pages of 16 tokens, 32 q heads on 8 kv heads. */
static void batch_decode_args_for(fi_batch_decode_args *a, int hd, void *ws, size_t bytes)
{
    a->q = DEV(0);
    a->k = DEV(1);
    a->v = DEV(2);
    a->o = DEV(3);
    a->kv_indices = DEV(4);
    a->q_stride_b = a->o_stride_b = 32 * hd;
    a->q_stride_h = a->o_stride_h = hd;
    a->k_stride_page = a->v_stride_page = 8 * 16 * hd;
    a->k_stride_h = a->v_stride_h = 16 * hd;
    a->k_stride_n = a->v_stride_n = hd;
    a->workspace = ws;
    a->workspace_bytes = bytes;
}

/* A batch prefill plan over `batch` requests, 32 q heads on 8 kv heads;
 * `last` NULL: ragged K/V, else pages of 16 tokens. */
static fi_batch_prefill_plan_args batch_prefill_plan_for(int batch, const int32_t *qo_indptr,
                                                         const int32_t *kv_indptr,
                                                         const int32_t *last)
{
    fi_batch_prefill_plan_args pa = FI_BATCH_PREFILL_PLAN_ARGS_INIT;
    pa.batch_size = batch;
    pa.qo_indptr = qo_indptr;
    pa.kv_indptr = kv_indptr;
    pa.kv_last_page_len = last;
    pa.num_qo_heads = 32;
    pa.num_kv_heads = 8;
    pa.page_size = last ? 16 : 0;
    return pa;
}

/* Its run: NHD rows (and NHD pages of 16, which the ragged kind ignores) at head_dim hd. */
static void batch_prefill_args_at(fi_batch_prefill_args *a, int hd)
{
    a->q = DEV(0);
    a->k = DEV(1);
    a->v = DEV(2);
    a->o = DEV(3);
    a->qo_indptr = DEV(4);
    a->kv_indptr = DEV(5);
    a->kv_indices = DEV(6);
    a->kv_last_page_len = DEV(7);
    a->q_stride_n = a->o_stride_n = 32 * hd;
    a->k_stride_n = a->v_stride_n = 8 * hd;
    a->q_stride_h = a->o_stride_h = a->k_stride_h = a->v_stride_h = hd;
    a->k_stride_page = a->v_stride_page = 16 * 8 * hd;
}

/* The same at head_dim 128. */
static void batch_prefill_args_for(fi_batch_prefill_args *a) { batch_prefill_args_at(a, 128); }

/* A plan of `pa` for s, uploaded into a new workspace of the size it asks
 * for, poisoned first (what the upload leaves reads 0xab): the workspace,
 * or NULL (nothing kept, *plan NULL) when a step failed. The caller frees
 * both. */
static void *plan_and_upload(fi_jit_ctx *ctx, const fi_jit_spec *s,
                             const fi_batch_prefill_plan_args *pa, fi_batch_prefill_plan **plan)
{
    size_t bytes = 0;
    void *ws = NULL;
    *plan = NULL;
    if (fi_batch_prefill_workspace_size(&bytes, s, pa) == 0 &&
        (ws = aligned_alloc(256, (bytes + 255) / 256 * 256)) != NULL) {
        memset(ws, 0xab, bytes);
        if (fi_batch_prefill_plan_new(plan, ctx, s, pa) == 0 &&
            fi_batch_prefill_plan_upload(*plan, ws, bytes) == 0)
            return ws;
    }
    fprintf(stderr, "  plan_and_upload: %s\n", fi_last_error());
    fi_batch_prefill_plan_free(*plan);
    *plan = NULL;
    free(ws);
    return NULL;
}

TEST(decode_launch_matches_its_plan_and_workspace)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_NONE);
    fi_decode_args a = FI_DECODE_ARGS_INIT;
    decode_args_for(&a, 4096);
    CHECK_OK(launch_ctx(&ctx));
    size_t bytes = 0;
    CHECK_OK(fi_decode_workspace_size(&bytes, &s, &a));
    CHECK(bytes > 0); /* 4096 keys on 132 SMs are split */
    void *ws = aligned_alloc(256, (bytes + 255) / 256 * 256);
    CHECK(ws);
    a.workspace = ws;
    a.workspace_bytes = bytes;
    const int rc = fi_decode_run(ctx, &s, &a, NULL);
    const fi_decode_params *p = &seen.p.decode;
    const int ok = rc == 0 && seen.count == 1 && strcmp(seen.name, "fi_decode_kernel") == 0;
    const unsigned char *end = (const unsigned char *)ws + bytes;
    CHECK_MSG(ok, "rc %d (%s), %d launches of %s", rc, fi_last_error(), seen.count, seen.name);
    CHECK(seen.block[0] == (unsigned)FI_DECODE_THREADS && seen.block[1] == 1 && seen.block[2] == 1);
    CHECK_MSG(seen.grid[0] == (unsigned)p->num_splits && p->num_splits > 1 &&
                  seen.grid[1] == (unsigned)(8 * p->head_blocks) && seen.grid[2] == 1,
              "grid %u x %u, %d splits, %d head blocks", seen.grid[0], seen.grid[1],
              p->num_splits, p->head_blocks);
    CHECK((long long)p->kv_chunk * p->num_splits >= 4096 && p->kv_chunk % 32 == 0);
    CHECK(p->stages >= 2 && p->stages <= FI_DECODE_MAX_STAGES);
    CHECK_MSG(seen.smem == (unsigned)FI_DECODE_SMEM_BYTES(128, 2, 0, p->stages), "smem %u, %d stages",
              seen.smem, p->stages);
    CHECK(p->q == a.q && p->k == a.k && p->v == a.v && p->o == a.o && p->lse == NULL);
    CHECK(p->k_stride_n == 1024 && p->k_stride_h == 128 && p->q_stride_h == 128);
    CHECK(p->num_qo_heads == 32 && p->num_kv_heads == 8 && p->kv_len == 4096 && p->group_size == 4);
    CHECK(p->sm_scale == (float)(1.0 / sqrt(128.0)) && p->k_scale == 1.f && p->v_scale == 1.f);
    /* partial_o, then partial_lse, then the counters, all inside the workspace. */
    CHECK(p->partial_o == (float *)ws);
    CHECK(p->partial_lse == p->partial_o + (size_t)p->num_splits * 32 * 128);
    CHECK((const unsigned char *)(p->partial_lse + (size_t)p->num_splits * 32) <=
          (const unsigned char *)p->counters);
    CHECK((uintptr_t)p->counters % 8 == 0 &&
          (const unsigned char *)(p->counters + 8 * p->head_blocks) <= end);
    CHECK(p->epoch != 0);

    /* No split: one block per kv head along y, no workspace needed. */
    a.max_splits = 1;
    a.workspace = NULL;
    a.workspace_bytes = 0;
    CHECK_OK(fi_decode_run(ctx, &s, &a, NULL));
    CHECK(seen.count == 2 && seen.grid[0] == 1 && p->num_splits == 1);
    CHECK(seen.smem == (unsigned)FI_DECODE_SMEM_BYTES(128, 2, 0, p->stages));
    free(ws);
    fi_jit_ctx_free(ctx);
}

TEST(rope_frequencies_reach_every_kind)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    {
        fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_ROPE_LLAMA);
        fi_decode_args a = FI_DECODE_ARGS_INIT;
        decode_args_for(&a, 100);
        a.max_splits = 1;
        a.rope_scale = 2.f;
        a.rope_theta = 5e5f;
        CHECK_OK(fi_decode_run(ctx, &s, &a, NULL));
        CHECK(rope_table_is(seen.p.decode.rope_freq, 128, 2.0, 5e5));
        a.rope_scale = a.rope_theta = 0.f; /* the defaults: 1 and 1e4 */
        CHECK_OK(fi_decode_run(ctx, &s, &a, NULL));
        CHECK(rope_table_is(seen.p.decode.rope_freq, 128, 1.0, 1e4));
    }
    {
        fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_ROPE_LLAMA);
        fi_prefill_args a = FI_PREFILL_ARGS_INIT;
        prefill_args_for(&a, 4, 4, 64, 128);
        a.rope_scale = 4.f;
        a.rope_theta = 1e6f;
        CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
        CHECK(rope_table_is(seen.p.prefill.rope_freq, 128, 4.0, 1e6));
    }
    fi_jit_ctx_free(ctx);
}

TEST(batch_decode_launch_reads_the_uploaded_plan)
{
    fi_jit_ctx *ctx = NULL;
    fi_batch_decode_plan *plan = NULL;
    fi_jit_spec s = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_ROPE_LLAMA);
    CHECK_OK(launch_ctx(&ctx));
    /* Requests of 0, 1, 100 and 40000 tokens in pages of 16; the plan asks
     * the (fake) device for its SM count. */
    int32_t indptr[5] = {0, 0, 1, 8, 8 + 2500};
    int32_t last[4] = {0, 1, 4, 16};
    const fi_batch_decode_plan_args info = plan_args_for(4, indptr, last);
    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &info));
    int items = 0, max_splits = 0;
    size_t bytes = 0;
    CHECK_OK(fi_batch_decode_plan_describe(&items, &max_splits, plan));
    CHECK_OK(fi_batch_decode_plan_workspace_size(&bytes, plan));
    unsigned char *ws = aligned_alloc(256, (bytes + 255) / 256 * 256);
    CHECK(ws && max_splits > 1);
    memset(ws, 0xab, bytes); /* what a fresh allocation may hold */
    CHECK_OK(fi_batch_decode_plan_upload(plan, ws, bytes));
    const fi_batch_decode_work *work = NULL;
    int n = 0;
    CHECK_OK(fi__batch_decode_plan_work(plan, &work, &n));
    CHECK(n == items && memcmp(ws, work, (size_t)n * sizeof *work) == 0);

    fi_batch_decode_args a = FI_BATCH_DECODE_ARGS_INIT;
    batch_decode_args_for(&a, 128, ws, bytes);
    CHECK_OK(fi_batch_decode_run(ctx, plan, &a, NULL));
    const fi_batch_decode_params *p = &seen.p.batch_decode;
    CHECK_MSG(seen.count == 1 && strcmp(seen.name, "fi_batch_decode_kernel") == 0, "%d: %s",
              seen.count, seen.name);
    CHECK_MSG(seen.grid[0] == (unsigned)items && seen.grid[1] == (unsigned)(8 * p->head_blocks),
              "grid %u x %u for %d items", seen.grid[0], seen.grid[1], items);
    CHECK(seen.block[0] == (unsigned)FI_DECODE_THREADS);
    CHECK(p->stages >= 2 && p->stages <= FI_DECODE_MAX_STAGES);
    CHECK_MSG(seen.smem == (unsigned)FI_DECODE_SMEM_BYTES(128, 2, 1, p->stages), "smem %u, %d stages",
              seen.smem, p->stages);
    CHECK((const void *)p->work == (const void *)ws);
    /* The split scratch and the counters lie in the workspace, after the work list. */
    CHECK((const unsigned char *)p->partial_o >= ws + (size_t)n * sizeof *work);
    CHECK((const unsigned char *)(p->counters + 4 * 8 * p->head_blocks) <= ws + bytes);
    for (int i = 0; i < 4 * 8 * p->head_blocks; i++) CHECK(p->counters[i] == 0);
    CHECK(p->page_size == 16 && p->page_shift == 4 && p->k_stride_page == 8 * 16 * 128);
    CHECK(p->epoch == 0 && rope_table_is(p->rope_freq, 128, 1.0, 1e4));
    fi_batch_decode_plan_free(plan);
    free(ws);
    fi_jit_ctx_free(ctx);
}

/* The TMA map the fake driver was given (fake_cuda.h) describes `base`
 * [rows, heads, hd] with the strides of prefill_args_for, read in boxes of
 * {64, box_heads, box_rows}. */
static int tma_map_is(const fi_tma_map *m, const void *base, int rows, int heads, int hd,
                      int box_heads, int box_rows)
{
    const unsigned long long *w = m->words;
    return w[FAKE_TMA_ADDRESS] == (unsigned long long)(uintptr_t)base &&
           w[FAKE_TMA_DIMS] == (unsigned long long)hd && w[FAKE_TMA_DIMS + 1] == (unsigned long long)heads &&
           w[FAKE_TMA_DIMS + 2] == (unsigned long long)rows &&
           w[FAKE_TMA_STRIDES] == (unsigned long long)hd * 2 &&
           w[FAKE_TMA_STRIDES + 1] == (unsigned long long)heads * hd * 2 && w[FAKE_TMA_BOX] == 64 &&
           w[FAKE_TMA_BOX + 1] == (unsigned long long)box_heads &&
           w[FAKE_TMA_BOX + 2] == (unsigned long long)box_rows &&
           w[FAKE_TMA_SWIZZLE] == CU_TENSOR_MAP_SWIZZLE_128B;
}

/* sm_90a: the 128-row tiles of single and ragged prefill go to the Hopper
 * main loop with TMA maps of K, V and (when the group divides the tile) Q,
 * persistent at head_dim <= 128 (a CTA per SM; at 256: below), a CTA per
 * block with FIJIT_PREFILL_WS=grid; FIJIT_PREFILL_WS=0 keeps tile kernel 0, and a
 * custom mask always does. */
TEST(prefill_hopper_main_loop_takes_the_128_row_tiles)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_NONE);
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&a, 32, 8, 1000, 128);
    CHECK_OK(launch_ctx(&ctx));
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
    /* 4000 packed rows per kv head: 32 tiles of 128 x 8 kv heads, walked by a
     * CTA per SM of the (fake) device. */
    CHECK_MSG(seen.grid[0] == FAKE_CUDA_SM_COUNT && seen.grid[1] == 1, "grid %u x %u", seen.grid[0], seen.grid[1]);
    CHECK(seen.block[0] == FI_PREFILL_WS_THREADS(128, 1) && seen.block[0] == 384 &&
          seen.smem == FI_PREFILL_WS_SMEM_BYTES(128, 1, 1)); /* lean, causal */
    CHECK(seen.ws.work_items == 32 && seen.ws.kv_heads == 8);
    /* K and V in boxes of a K/V tile (160 keys: lean, causal, head_dim 128),
     * Q of a tile's packed rows (4 heads x 32 tokens). */
    const int kv_box = FI_PREFILL_WS_TILE_KV(128, 1, 1);
    CHECK(kv_box == 160);
    CHECK(tma_map_is(&seen.ws.k, a.k, 1000, 8, 128, 1, kv_box) &&
          tma_map_is(&seen.ws.v, a.v, 1000, 8, 128, 1, kv_box));
    CHECK(seen.ws.q_rows == 1000 &&
          tma_map_is(&seen.ws.q, a.q, 1000, 32, 128, 4, 32));
    /* O of a consumer's 64 packed rows (4 heads x 16 tokens), stored by TMA. */
    CHECK(seen.ws.o_rows == 1000 && tma_map_is(&seen.ws.o, a.o, 1000, 32, 128, 4, 16));
    CHECK(seen.p.prefill.q == a.q && seen.p.prefill.qo_len == 1000);

    setenv("FIJIT_PREFILL_WS", "persistent:3", 1); /* the tests' cap: 3 CTAs */
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(seen.grid[0] == 3 && seen.grid[1] == 1, "grid %u x %u", seen.grid[0], seen.grid[1]);

    setenv("FIJIT_PREFILL_WS", "grid", 1); /* a CTA per block, one grid row */
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    unsetenv("FIJIT_PREFILL_WS");
    CHECK_MSG(seen.grid[0] == 32 * 8 && seen.grid[1] == 1, "grid %u x %u", seen.grid[0], seen.grid[1]);

    /* A group of 3 divides neither the tile nor a consumer's 64 rows: no map
     * of q or o, the consumers load Q and store O themselves. */
    prefill_args_for(&a, 24, 8, 1000, 128);
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
    CHECK(seen.ws.q_rows == 0 && seen.ws.o_rows == 0);
    prefill_args_for(&a, 32, 8, 1000, 128);

    setenv("FIJIT_PREFILL_WS", "0", 1);
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    unsetenv("FIJIT_PREFILL_WS");
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_q128") == 0, "%s", seen.name);

    fi_jit_spec custom = spec_of(FI_KIND_PREFILL, FI_MASK_CUSTOM, FI_POS_NONE);
    a.custom_mask = (const uint8_t *)DEV(4);
    CHECK_OK(fi_prefill_run(ctx, &custom, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_q128") == 0, "%s", seen.name);
    fi_jit_ctx_free(ctx);
}

/* A single prefill of 1000 tokens, 32 q heads on 8 kv heads, no mask, at
 * head_dim hd, on a fresh context: the Hopper main loop's tests. */
static int hopper_single_setup(fi_jit_ctx **ctx, fi_jit_spec *s, fi_prefill_args *a, int hd)
{
    *s = spec_of(FI_KIND_PREFILL, FI_MASK_NONE, FI_POS_NONE);
    s->head_dim = hd;
    prefill_args_for(a, 32, 8, 1000, hd);
    return launch_ctx(ctx);
}

/* head_dim 64, lean tuple: three consumer warpgroups, so 192-row tiles (Q
 * boxes of 4 heads x 48 tokens) and 512 threads; with a soft-cap (not lean)
 * two consumers and 128-row tiles again. */
TEST(prefill_hopper_main_loop_at_head_dim_64_takes_192_row_tiles)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    CHECK_OK(hopper_single_setup(&ctx, &s, &a, 64));
    setenv("FIJIT_PREFILL_WS", "grid", 1);
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
    /* 4000 packed rows per kv head: 21 tiles of 192. */
    CHECK_MSG(seen.ws.work_items == 21 && seen.grid[0] == 21 * 8, "items %d grid %u",
              seen.ws.work_items, seen.grid[0]);
    CHECK(FI_PREFILL_WS_TILE_Q(64, 1) == 192 && seen.block[0] == 512 &&
          seen.smem == FI_PREFILL_WS_SMEM_BYTES(64, 1, 1));
    CHECK(seen.ws.q_rows == 1000 && tma_map_is(&seen.ws.q, a.q, 1000, 32, 64, 4, 48));

    s.soft_cap = 1;
    a.logits_soft_cap = 30.f;
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    unsetenv("FIJIT_PREFILL_WS");
    CHECK_MSG(seen.ws.work_items == 32 && seen.block[0] == 384, "items %d block %u",
              seen.ws.work_items, seen.block[0]);
    fi_jit_ctx_free(ctx);
}

/* head_dim 256: one Q buffer, filled by TMA too (its box a consumer's 64
 * packed rows, each consumer's refilled on its own), 80-key K/V tiles;
 * persistent CTAs without a causal mask, a CTA per block with one where
 * they cannot claim (no workspace: prefill_ws.c, ws_default; where they can,
 * the next test). */
TEST(prefill_hopper_main_loop_at_head_dim_256_loads_q_by_tma)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    CHECK_OK(hopper_single_setup(&ctx, &s, &a, 256));
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
    CHECK_MSG(seen.grid[0] == FAKE_CUDA_SM_COUNT, "grid %u", seen.grid[0]);
    CHECK(seen.ws.work_items == 32 && seen.ws.kv_heads == 8 && seen.block[0] == 384 &&
          seen.smem == FI_PREFILL_WS_SMEM_BYTES(256, 1, 0));
    CHECK(FI_PREFILL_WS_TILE_KV(256, 1, 0) == 80 &&
          tma_map_is(&seen.ws.k, a.k, 1000, 8, 256, 1, 80));
    CHECK(seen.ws.q_rows == 1000 && tma_map_is(&seen.ws.q, a.q, 1000, 32, 256, 4, 16));

    s.mask = FI_MASK_CAUSAL; /* 32 tiles x 8 kv heads, a CTA each */
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(seen.grid[0] == 32 * 8 && seen.ws.q_rows == 1000, "grid %u q_rows %d", seen.grid[0],
              seen.ws.q_rows);

    a.sm_scale = -0.5f; /* applied to Q, not in the exponent: the consumers load Q */
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK(strcmp(seen.name, "fi_prefill_kernel_ws") == 0 && seen.ws.q_rows == 0);
    fi_jit_ctx_free(ctx);
}

/* Causal head_dim 256: persistent CTAs claiming their blocks where query rows
 * see at most WS_SHORT_KEYS (3072) keys on average and the launch has a
 * counter (single prefill: a workspace; batch: the plan's), else a CTA per
 * block: single 1000 over 1000 keys and ragged or paged 1000 + 2000 (means
 * 500 and 834) claim; 1000 queries over 8000 keys (7500) and 2 x 8000
 * (4000) do not. */
TEST(prefill_at_head_dim_256_causal_claims_where_rows_see_few_keys)
{
    static _Alignas(256) unsigned char ws[16];
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    CHECK_OK(hopper_single_setup(&ctx, &s, &a, 256));
    s.mask = FI_MASK_CAUSAL;
    a.workspace = ws;
    a.workspace_bytes = sizeof ws;
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(seen.grid[0] == FAKE_CUDA_SM_COUNT && seen.ws.claims == (unsigned int *)(void *)ws,
              "grid %u", seen.grid[0]);
    a.kv_len = 8000;
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(seen.grid[0] == 32 * 8 && !seen.ws.claims, "grid %u", seen.grid[0]);

    /* The same batches paged (pages of 16; 1000 keys end in a page of 8),
     * whose Q comes by TMA too; with RoPE (rotated keys, Q loaded by the
     * consumers, no feed) a CTA per block. */
    fi_batch_prefill_args b = FI_BATCH_PREFILL_ARGS_INIT;
    batch_prefill_args_at(&b, 256);
    static const int32_t shorter[3] = {0, 1000, 3000}, longer[3] = {0, 8000, 16000};
    static const int32_t shorter_pages[3] = {0, 63, 188}, longer_pages[3] = {0, 500, 1000};
    static const int32_t shorter_last[2] = {8, 16}, longer_last[2] = {16, 16};
    for (int c = 0; c < 5; c++) {
        const int l = c % 2, paged = c >= 2, rope = c == 4;
        fi_jit_spec r = spec_of(paged ? FI_KIND_BATCH_PREFILL_PAGED : FI_KIND_BATCH_PREFILL_RAGGED,
                                FI_MASK_CAUSAL, rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE);
        r.head_dim = 256;
        const int32_t *indptr = l ? longer : shorter;
        fi_batch_prefill_plan_args pa =
            paged ? batch_prefill_plan_for(2, indptr, l ? longer_pages : shorter_pages,
                                           l ? longer_last : shorter_last)
                  : batch_prefill_plan_for(2, indptr, indptr, NULL);
        fi_batch_prefill_plan *plan = NULL;
        void *pws = plan_and_upload(ctx, &r, &pa, &plan);
        CHECK(pws);
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &b, NULL));
        /* 4000 + 8000 or 32000 + 32000 packed rows: 32 + 63 or 500 tiles of 128, x 8 kv heads. */
        const int claims = !l && !rope;
        const unsigned blocks = l ? 500 * 8 : 95 * 8;
        CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0 &&
                      seen.grid[0] == (claims ? FAKE_CUDA_SM_COUNT : blocks) &&
                      (seen.ws.claims != NULL) == claims,
                  "%s %s%s: %s grid %u", paged ? "paged" : "ragged", l ? "longer" : "shorter",
                  rope ? " rope" : "", seen.name, seen.grid[0]);
        fi_batch_prefill_plan_free(plan);
        free(pws);
    }
    fi_jit_ctx_free(ctx);
}

TEST(prefill_launch_picks_a_tile_kernel_and_its_geometry)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_NONE);
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&a, 32, 8, 1000, 128);
    CHECK_OK(launch_ctx(&ctx));
    setenv("FIJIT_PREFILL_WS", "0", 1); /* the tile kernels (the Hopper loop: above) */
    for (int forced = 0; forced <= 16; forced += 16) {
        a.cta_tile_q = forced;
        CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
        int tile = 0, idx = -1;
        CHECK_MSG(sscanf(seen.name, "fi_prefill_kernel_q%d", &tile) == 1, "%s", seen.name);
        for (int i = 0; i < FI_PREFILL_NUM_TILES; i++)
            if (FI_PREFILL_TILE_Q(i) == tile) idx = i;
        CHECK(idx >= 0 && (!forced || tile == forced));
        /* 1000 tokens x 4 heads of a group = 4000 packed rows per kv head. */
        CHECK_MSG(seen.grid[0] == (unsigned)((4000 + tile - 1) / tile) && seen.grid[1] == 8,
                  "q%d: grid %u x %u", tile, seen.grid[0], seen.grid[1]);
        CHECK(seen.block[0] == (unsigned)FI_PREFILL_WARPS(idx, 128, FAKE_SM90A) * 32);
        CHECK(seen.smem == (unsigned)FI_PREFILL_SMEM_BYTES(idx, 128, FAKE_SM90A));
        const fi_prefill_params *p = &seen.p.prefill;
        CHECK(p->q == a.q && p->o == a.o && p->qo_len == 1000 && p->group_size == 4);
        CHECK(p->sm_scale == (float)(1.0 / sqrt(128.0)) && p->heads_per_section >= 1);
    }
    unsetenv("FIJIT_PREFILL_WS");
    CHECK(seen.count == 2);
    fi_jit_ctx_free(ctx);
}

TEST(batch_prefill_paged_launch_reads_its_work_list)
{
    fi_jit_ctx *ctx = NULL;
    fi_batch_prefill_plan *plan = NULL;
    fi_jit_spec s = spec_of(FI_KIND_BATCH_PREFILL_PAGED, FI_MASK_CAUSAL, FI_POS_NONE);
    CHECK_OK(launch_ctx(&ctx));
    /* Three requests: 300, 0 and 17 queries over 40, 0 and 2 pages of 16. */
    int32_t qo_indptr[4] = {0, 300, 300, 317};
    int32_t kv_indptr[4] = {0, 40, 40, 42};
    int32_t last[3] = {16, 1, 5};
    const fi_batch_prefill_plan_args pa = batch_prefill_plan_for(3, qo_indptr, kv_indptr, last);
    int *ws = plan_and_upload(ctx, &s, &pa, &plan);
    CHECK(ws);
    fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
    batch_prefill_args_for(&a);
    CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
    const fi_prefill_params *p = &seen.p.prefill;
    int tile = 0, idx = -1;
    CHECK_MSG(seen.count == 1 && sscanf(seen.name, "fi_prefill_kernel_q%d", &tile) == 1, "%s",
              seen.name);
    for (int i = 0; i < FI_PREFILL_NUM_TILES; i++)
        if (FI_PREFILL_TILE_Q(i) == tile) idx = i;
    CHECK(idx >= 0 && seen.grid[1] == 8 &&
          seen.block[0] == (unsigned)FI_PREFILL_WARPS(idx, 128, FAKE_SM90A) * 32);
    CHECK(seen.smem == (unsigned)FI_PREFILL_SMEM_BYTES(idx, 128, FAKE_SM90A));
    /* One block per query tile of each request: ceil(rows / tile) with 4
     * packed rows per token; the empty request has none. */
    const unsigned want = (unsigned)((300 * 4 + tile - 1) / tile + (17 * 4 + tile - 1) / tile);
    CHECK_MSG(seen.grid[0] == want, "grid %u, want %u (q%d)", seen.grid[0], want, tile);
    CHECK(p->work_request == ws && p->work_tile == ws + seen.grid[0]);
    unsigned char listed[2][1200 / 16] = {{0}}; /* each (request, tile) once */
    for (unsigned i = 0; i < seen.grid[0]; i++) {
        const int r = p->work_request[i], t = p->work_tile[i];
        CHECK_MSG((r == 0 || r == 2) && t >= 0 && t * tile < (r == 0 ? 1200 : 68) &&
                      !listed[r / 2][t]++,
                  "work item %u: request %d tile %d", i, r, t);
    }
    CHECK(p->qo_indptr == a.qo_indptr && p->kv_indices == a.kv_indices && p->page_size == 16);
    fi_batch_prefill_plan_free(plan);
    free(ws);
    fi_jit_ctx_free(ctx);
}

/* A paged batch prefill (`mask`, hd 128, 8 kv heads) of two requests, 300
 * and 17 queries over 40 and 2 pages of `ps` keys (the last page holds 3),
 * planned with 128-row tiles and run with K and V strides (elements) of a
 * kv head, a row and a page; `seen` holds the launch. 0 when every step
 * succeeded. */
static int run_paged_batch_masked(fi_jit_ctx *ctx, fi_mask mask, int ps, int64_t stride_h,
                                  int64_t stride_n, int64_t stride_page, fi_batch_prefill_args *a)
{
    fi_jit_spec s = spec_of(FI_KIND_BATCH_PREFILL_PAGED, mask, FI_POS_NONE);
    int32_t qo_indptr[3] = {0, 300, 317};
    int32_t kv_indptr[3] = {0, 40, 42};
    int32_t last[2] = {ps, 3};
    fi_batch_prefill_plan_args pa = batch_prefill_plan_for(2, qo_indptr, kv_indptr, last);
    pa.page_size = ps;
    pa.cta_tile_q = 128;
    fi_batch_prefill_plan *plan = NULL;
    int *ws = plan_and_upload(ctx, &s, &pa, &plan);
    if (!ws) return -1;
    const fi_batch_prefill_args init = FI_BATCH_PREFILL_ARGS_INIT;
    *a = init;
    batch_prefill_args_for(a);
    a->k_stride_h = a->v_stride_h = stride_h;
    a->k_stride_n = a->v_stride_n = stride_n;
    a->k_stride_page = a->v_stride_page = stride_page;
    const int rc = fi_batch_prefill_run(ctx, plan, a, NULL);
    fi_batch_prefill_plan_free(plan);
    free(ws);
    return rc;
}

/* The same without a mask. */
static int run_paged_batch(fi_jit_ctx *ctx, int ps, int64_t stride_h, int64_t stride_n,
                           int64_t stride_page, fi_batch_prefill_args *a)
{
    return run_paged_batch_masked(ctx, FI_MASK_NONE, ps, stride_h, stride_n, stride_page, a);
}

/* Whether the launch's paged map `m` (0: K, 1: V) has these 5-D sizes,
 * byte strides, box and kv-head coordinate factors. */
static int paged_map_is(int m, const unsigned long long dims[4], const unsigned long long strides[4],
                        const unsigned long long box[5], const int coords[3])
{
    const unsigned long long *w = m ? seen.ws.v.words : seen.ws.k.words;
    const int *c = m ? seen.ws.v_coords : seen.ws.k_coords;
    for (int i = 0; i < 4; i++)
        if (w[FAKE_TMA_DIMS + i] != dims[i] || w[FAKE_TMA_STRIDES + i] != strides[i]) return 0;
    for (int i = 0; i < 5; i++)
        if (w[FAKE_TMA_BOX + i] != box[i]) return 0;
    return c[0] == coords[0] && c[1] == coords[1] && c[2] == coords[2];
}

/* Paged K/V on sm_90a: the Hopper main loop takes 128-row tiles when the
 * page size is a multiple of 8 rows that divides its 128-key K/V tiles, with
 * 5-D maps of the page pools (box: a whole page, all its panels); other page
 * sizes keep tile kernel 0. NHD pages (heads contiguous): {64 columns, 8
 * rows, 8 heads x 2 panels, ps / 8 row groups, pages}, the head in the panel
 * coordinate. With a causal mask, 160-key tiles, any multiple of 8: boxes of
 * the greatest common divisor of the page and 160 rows. */
TEST(batch_prefill_paged_hopper_main_loop_reads_pages_in_boxes)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    const int sizes[] = {16, 8, 5, 48, 24, 64, 12};
    const int boxes[] = {16, 8, 0, 0, 0, 64, 0}; /* 0: the tile kernel */
    for (int i = 0; i < 7; i++) {
        const int ps = sizes[i];
        fi_batch_prefill_args a;
        CHECK_OK(run_paged_batch(ctx, ps, 128, 8 * 128, (int64_t)ps * 8 * 128, &a));
        CHECK_MSG(strcmp(seen.name, boxes[i] ? "fi_prefill_kernel_ws" : "fi_prefill_kernel_q128") == 0,
                  "page %d: %s", ps, seen.name);
        if (!boxes[i]) continue;
        const unsigned long long dims[4] = {64, 8, 16, (unsigned long long)ps / 8};
        const unsigned long long strides[4] = {8 * 128 * 2, 128, 8 * 8 * 128 * 2,
                                               (unsigned long long)ps * 8 * 128 * 2};
        const unsigned long long box[5] = {64, 8, 2, (unsigned long long)boxes[i] / 8, 1};
        CHECK_MSG(seen.ws.page_box == boxes[i], "page %d: box %d", ps, seen.ws.page_box);
        const int coords[3] = {2, 1, 0};
        CHECK(seen.ws.k.words[FAKE_TMA_ADDRESS] == (unsigned long long)(uintptr_t)a.k &&
              seen.ws.v.words[FAKE_TMA_ADDRESS] == (unsigned long long)(uintptr_t)a.v);
        CHECK_MSG(paged_map_is(0, dims, strides, box, coords) &&
                      paged_map_is(1, dims, strides, box, coords),
                  "page %d", ps);
        /* 1200 and 68 packed rows: 10 + 1 tiles of 128, a CTA each. */
        CHECK(seen.ws.work_items == 11 && seen.ws.kv_heads == 8 && seen.grid[0] == 88);
        /* The map of q (317 tokens, a tile's 4 heads x 32 tokens a box):
         * at head_dim 128 the loop loads Q through it into its one buffer
         * (and prefetches it). */
        CHECK(seen.ws.q_rows == 317 && tma_map_is(&seen.ws.q, a.q, 317, 32, 128, 4, 32));
        CHECK(seen.p.prefill.page_size == ps && seen.smem == FI_PREFILL_WS_SMEM_BYTES(128, 0, 0));
    }
    /* A causal mask: 160-key K/V tiles, so pages of 64 come in boxes of 32
     * rows, two a page, of 48 in boxes of 16, and pages of 16 whole. */
    for (int i = 0; i < 3; i++) {
        const int ps = (int[]){64, 48, 16}[i], box_rows = (int[]){32, 16, 16}[i];
        fi_batch_prefill_args a;
        CHECK_OK(run_paged_batch_masked(ctx, FI_MASK_CAUSAL, ps, 128, 8 * 128, (int64_t)ps * 8 * 128, &a));
        const unsigned long long dims[4] = {64, 8, 16, (unsigned long long)ps / 8};
        const unsigned long long strides[4] = {8 * 128 * 2, 128, 8 * 8 * 128 * 2,
                                               (unsigned long long)ps * 8 * 128 * 2};
        const unsigned long long box[5] = {64, 8, 2, (unsigned long long)box_rows / 8, 1};
        const int coords[3] = {2, 1, 0};
        CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0 && seen.ws.page_box == box_rows &&
                      paged_map_is(0, dims, strides, box, coords) &&
                      paged_map_is(1, dims, strides, box, coords),
                  "causal page %d: %s, box %d", ps, seen.name, seen.ws.page_box);
        CHECK(FI_PREFILL_WS_TILE_KV(128, 1, 1) == 160 &&
              seen.smem == FI_PREFILL_WS_SMEM_BYTES(128, 1, 1));
    }
    fi_jit_ctx_free(ctx);
}

/* Paged K/V in HND pages (a page holds whole heads): the kv head joins the
 * page coordinate (page * heads + head), the map's pages are one head's
 * rows. A layout that is neither NHD nor whole-head pages keeps tile
 * kernel 0, whose loads take any strides. */
TEST(batch_prefill_paged_hopper_main_loop_maps_hnd_pages_and_refuses_others)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    fi_batch_prefill_args a;
    CHECK_OK(run_paged_batch(ctx, 16, 16 * 128, 128, 8 * 16 * 128, &a)); /* [page][head][row] */
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "HND: %s", seen.name);
    const unsigned long long dims[4] = {64, 8, 2, 2};
    const unsigned long long strides[4] = {128 * 2, 128, 8 * 128 * 2, 16 * 128 * 2};
    const unsigned long long box[5] = {64, 8, 2, 2, 1};
    const int coords[3] = {0, 8, 1};
    CHECK(paged_map_is(0, dims, strides, box, coords) && paged_map_is(1, dims, strides, box, coords));
    /* Heads 256 apart in rows of 8 x 256: neither form. */
    CHECK_OK(run_paged_batch(ctx, 16, 256, 8 * 256, 16 * 8 * 256, &a));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_q128") == 0, "other: %s", seen.name);
    fi_jit_ctx_free(ctx);
}

/* A batch plan whose Hopper main loop has tiles of another size than tile
 * kernel 0 (192 rows at head_dim 64) holds a second work list after the
 * first: each launch reads its own, so tile kernel 0 (FIJIT_PREFILL_WS=0, or
 * tensors TMA cannot read) still finds 128-row tiles. */
TEST(batch_prefill_hopper_main_loop_reads_its_own_work_list)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_BATCH_PREFILL_RAGGED, FI_MASK_CAUSAL, FI_POS_NONE);
    s.head_dim = 64;
    CHECK_OK(launch_ctx(&ctx));
    /* 300, 0, 17 queries over 640, 0, 21 keys: 1200 and 68 packed rows. */
    int32_t qo_indptr[4] = {0, 300, 300, 317}, kv_indptr[4] = {0, 640, 640, 661};
    fi_batch_prefill_plan_args pa = batch_prefill_plan_for(3, qo_indptr, kv_indptr, NULL);
    pa.cta_tile_q = 128;
    fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
    batch_prefill_args_at(&a, 64);
    for (int off = 0; off < 2; off++) {
        if (off) setenv("FIJIT_PREFILL_WS", "0", 1);
        fi_batch_prefill_plan *plan = NULL;
        int *ws = plan_and_upload(ctx, &s, &pa, &plan);
        CHECK(ws);
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
        unsetenv("FIJIT_PREFILL_WS");
        const fi_prefill_params *p = &seen.p.prefill;
        /* Tile kernel 0's list: 10 + 1 tiles of 128; the Hopper loop's: 7 + 1 of 192. */
        const int tq = off ? 128 : 192, n = off ? 11 : 8;
        const int *list = off ? ws : ws + 2 * 11;
        CHECK_MSG(strcmp(seen.name, off ? "fi_prefill_kernel_q128" : "fi_prefill_kernel_ws") == 0,
                  "%s", seen.name);
        CHECK_MSG(p->work_request == list && p->work_tile == list + n, "off %d: list at %td", off,
                  p->work_request - ws);
        /* 8 x 8 kv heads = 64 blocks: fewer than the SMs, a CTA each, nothing to claim. */
        if (!off) CHECK(seen.ws.work_items == n && seen.ws.q_rows == 317 && !seen.ws.claims);
        if (off) CHECK(seen.grid[0] == (unsigned)n);
        unsigned char listed[2][10] = {{0}}; /* each (request, tile) once */
        for (int i = 0; i < n; i++) {
            const int r = p->work_request[i], t = p->work_tile[i];
            CHECK_MSG((r == 0 || r == 2) && t >= 0 && t * tq < (r == 0 ? 1200 : 68) &&
                          !listed[r / 2][t]++,
                      "off %d item %d: request %d tile %d", off, i, r, t);
        }
        /* Causal: the longest tile first, request 0's last one. */
        CHECK(p->work_request[0] == 0 && p->work_tile[0] == (1200 + tq - 1) / tq - 1);
        fi_batch_prefill_plan_free(plan);
        free(ws);
    }
    fi_jit_ctx_free(ctx);
}

/* The Hopper loop's causal tiles end at a request's last row (its partial
 * tile is the first), so its list orders them by the keys of those tiles:
 * request 0 (95 queries, 380 packed rows in two 192-row tiles: rows 188-379
 * see 95 keys, rows -4-187 see 47) and request 1 (48 queries, one tile of
 * 192 rows: 48 keys) list as (0, 1), (1, 0), (0, 0). Aligned at row 0,
 * request 0's first tile would see 48 keys and list before request 1's. */
TEST(batch_prefill_hopper_causal_list_orders_tiles_aligned_at_the_last_row)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_BATCH_PREFILL_RAGGED, FI_MASK_CAUSAL, FI_POS_NONE);
    s.head_dim = 64;
    CHECK_OK(launch_ctx(&ctx));
    int32_t qo_indptr[3] = {0, 95, 143}, kv_indptr[3] = {0, 95, 143};
    fi_batch_prefill_plan_args pa = batch_prefill_plan_for(2, qo_indptr, kv_indptr, NULL);
    pa.cta_tile_q = 128;
    fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
    batch_prefill_args_at(&a, 64);
    fi_batch_prefill_plan *plan = NULL;
    int *ws = plan_and_upload(ctx, &s, &pa, &plan);
    CHECK(ws);
    CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
    const fi_prefill_params *p = &seen.p.prefill;
    /* After tile kernel 0's list of 3 + 2 tiles of 128 rows. */
    CHECK(p->work_request == ws + 2 * 5 && p->work_tile == ws + 2 * 5 + 3);
    static const int want[3][2] = {{0, 1}, {1, 0}, {0, 0}};
    for (int i = 0; i < 3; i++)
        CHECK_MSG(p->work_request[i] == want[i][0] && p->work_tile[i] == want[i][1],
                  "item %d: request %d tile %d", i, p->work_request[i], p->work_tile[i]);
    fi_batch_prefill_plan_free(plan);
    free(ws);
    fi_jit_ctx_free(ctx);
}

/* Persistent CTAs fewer than the blocks claim them from a counter in the
 * plan's workspace, which the upload zeroes; FIJIT_PREFILL_WS=static:N
 * walks every N-th block instead (no counter). */
TEST(batch_prefill_persistent_ctas_claim_blocks_from_the_workspace)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_BATCH_PREFILL_RAGGED, FI_MASK_CAUSAL, FI_POS_NONE);
    CHECK_OK(launch_ctx(&ctx));
    int32_t qo_indptr[3] = {0, 1000, 1100}, kv_indptr[3] = {0, 1000, 1100};
    fi_batch_prefill_plan_args pa = batch_prefill_plan_for(2, qo_indptr, kv_indptr, NULL);
    pa.cta_tile_q = 128;
    fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
    batch_prefill_args_for(&a);
    static const char *const modes[] = {"persistent:3", "static:3"};
    for (int m = 0; m < 2; m++) {
        setenv("FIJIT_PREFILL_WS", modes[m], 1);
        fi_batch_prefill_plan *plan = NULL;
        unsigned char *ws = plan_and_upload(ctx, &s, &pa, &plan);
        unsetenv("FIJIT_PREFILL_WS");
        CHECK(ws);
        size_t bytes = 0;
        CHECK_OK(fi_batch_prefill_plan_workspace_size(&bytes, plan));
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
        CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
        /* (32 x 4 + 4) packed rows / 128 = 32 + 4 tiles, x 8 kv heads: 3 CTAs walk them. */
        CHECK(seen.grid[0] == 3 && seen.ws.work_items == 36 && seen.ws.kv_heads == 8);
        if (m == 0) {
            const unsigned char *claims = (const unsigned char *)seen.ws.claims;
            /* After the work list (both lists: the loop's tiles are the tile kernel's). */
            CHECK_MSG(claims && claims >= ws + 2 * 36 * sizeof(int32_t) &&
                          claims + sizeof(unsigned) <= ws + bytes,
                      "claims at %td of %zu", claims ? claims - ws : -1, bytes);
            CHECK(*seen.ws.claims == 0); /* zeroed over the poison */
        } else {
            CHECK(seen.ws.claims == NULL);
        }
        fi_batch_prefill_plan_free(plan);
        free(ws);
    }
    fi_jit_ctx_free(ctx);
}

/* Batch prefill with RoPE: the workspace grows by the rotated keys (and, paged,
 * the requests' first rows); a run launches the pre-pass over every key of
 * every kv head, then the tile kernel on the rotated keys, V untouched; a
 * workspace sized for no RoPE is refused; later runs stay capturable. */
TEST(batch_prefill_rope_rotates_keys_once_into_the_workspace)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    /* 300, 0, 17 queries over 640, 0, 21 keys (paged: 40, 0, 2 pages of 16). */
    int32_t qo_indptr[4] = {0, 300, 300, 317};
    int32_t paged_indptr[4] = {0, 40, 40, 42}, last[3] = {16, 1, 5};
    int32_t ragged_indptr[4] = {0, 640, 640, 661};
    for (int paged = 0; paged < 2; paged++) {
        const fi_kernel_kind kind = paged ? FI_KIND_BATCH_PREFILL_PAGED : FI_KIND_BATCH_PREFILL_RAGGED;
        fi_jit_spec plain = spec_of(kind, FI_MASK_CAUSAL, FI_POS_NONE);
        fi_jit_spec rope = spec_of(kind, FI_MASK_CAUSAL, FI_POS_ROPE_LLAMA);
        const fi_batch_prefill_plan_args pa = batch_prefill_plan_for(
            3, qo_indptr, paged ? paged_indptr : ragged_indptr, paged ? last : NULL);
        size_t plain_bytes = 0, bytes = 0;
        CHECK_OK(fi_batch_prefill_workspace_size(&plain_bytes, &plain, &pa));
        CHECK_OK(fi_batch_prefill_workspace_size(&bytes, &rope, &pa));
        const size_t rot_bytes = 661 * 8 * 128 * 2;
        CHECK_MSG(bytes == plain_bytes + rot_bytes + (paged ? 16 : 0), "paged %d: %zu bytes, "
                  "plain %zu", paged, bytes, plain_bytes);
        unsigned char *ws = aligned_alloc(256, (bytes + 255) / 256 * 256);
        CHECK(ws);
        memset(ws, 0xab, bytes);
        fi_batch_prefill_plan *plan = NULL;
        CHECK_OK(fi_batch_prefill_plan_new(&plan, ctx, &rope, &pa));
        size_t plan_bytes = 0;
        CHECK_OK(fi_batch_prefill_plan_workspace_size(&plan_bytes, plan));
        CHECK(plan_bytes == bytes);
        fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
        batch_prefill_args_for(&a);
        a.rope_theta = 1e4f;
        CHECK_RC(fi_batch_prefill_run(ctx, plan, &a, NULL), FI_EINVALID); /* not uploaded */
        CHECK(strstr(fi_last_error(), "fi_batch_prefill_plan_upload"));
        CHECK_RC(fi_batch_prefill_plan_upload(plan, ws, plain_bytes), FI_EINVALID);
        CHECK(strstr(fi_last_error(), "fi_batch_prefill_plan_workspace_size"));
        CHECK_OK(fi_batch_prefill_plan_upload(plan, ws, bytes));
        memset(&seen, 0, sizeof seen);
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
        const fi_prefill_params *r = &seen.rope, *p = &seen.p.prefill;
        CHECK_MSG(seen.count == 2 && seen.rope_count == 1 &&
                      strncmp(seen.name, "fi_prefill_kernel_q", 19) == 0,
                  "paged %d: %d launches, last %s", paged, seen.count, seen.name);
        /* A thread per pair of 16-byte chunks: 661 keys x 8 pairs, per kv head. */
        CHECK(seen.rope_grid[1] == 8 && seen.rope_block[0] == FI_PREFILL_ROPE_THREADS &&
              seen.rope_grid[0] * FI_PREFILL_ROPE_THREADS >= 661 * 8);
        CHECK(r->k == a.k && r->k_stride_n == a.k_stride_n && r->k_stride_h == a.k_stride_h &&
              r->k_stride_page == a.k_stride_page && r->kv_indptr == a.kv_indptr);
        CHECK(r->rot_k == ws + plain_bytes && r->kv_tokens == 661 && r->batch_size == 3);
        CHECK(rope_table_is(r->rope_freq, 128, 1.0, 1e4));
        if (paged) {
            const int *starts = r->kv_token_start;
            CHECK(starts == (const int *)(ws + plain_bytes + rot_bytes));
            CHECK_MSG(starts[0] == 0 && starts[1] == 640 && starts[2] == 640 && starts[3] == 661,
                      "first rows %d %d %d %d", starts[0], starts[1], starts[2], starts[3]);
        } else {
            CHECK(r->kv_token_start == a.kv_indptr);
        }
        CHECK(p->k == r->rot_k && p->k_stride_n == 8 * 128 && p->k_stride_h == 128 &&
              p->kv_token_start == r->kv_token_start);
        CHECK(p->v == a.v && p->v_stride_n == a.v_stride_n && p->v_stride_h == a.v_stride_h);
        const int base = fake.uncapturable_calls();
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
        CHECK(fake.uncapturable_calls() == base && seen.count == 4 && seen.rope_count == 2);
        fi_batch_prefill_plan_free(plan);
        free(ws);
    }
    fi_jit_ctx_free(ctx);
}

/* Per-request RoPE offsets (args version 4, as batch decode's): the device
 * array reaches the keys' pre-pass and the attention kernel, in place of
 * rope_offset; both given, or a misaligned array, are refused before any
 * launch; version 3 args (no such field) and kinds without RoPE never read it. */
TEST(batch_prefill_rope_offsets_reach_both_launches)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    int32_t qo_indptr[3] = {0, 20, 37};
    int32_t paged_indptr[3] = {0, 2, 4}, last[2] = {16, 3};
    int32_t ragged_indptr[3] = {0, 32, 51};
    const int32_t *offsets = DEV(8);
    for (int paged = 0; paged < 2; paged++) {
        const fi_kernel_kind kind = paged ? FI_KIND_BATCH_PREFILL_PAGED : FI_KIND_BATCH_PREFILL_RAGGED;
        const fi_batch_prefill_plan_args pa = batch_prefill_plan_for(
            2, qo_indptr, paged ? paged_indptr : ragged_indptr, paged ? last : NULL);
        for (int rope = 0; rope < 2; rope++) {
            fi_jit_spec s = spec_of(kind, FI_MASK_CAUSAL, rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE);
            fi_batch_prefill_plan *plan = NULL;
            unsigned char *ws = plan_and_upload(ctx, &s, &pa, &plan);
            CHECK(ws);
            fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
            CHECK(a.version == 4 && a.rope_offsets == NULL);
            batch_prefill_args_for(&a);
            a.rope_offsets = offsets;
            memset(&seen, 0, sizeof seen);
            CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
            /* Without RoPE the array is not read: the kernel gets NULL. */
            CHECK_MSG(seen.p.prefill.rope_offsets == (rope ? (const int *)offsets : NULL),
                      "paged %d rope %d", paged, rope);
            CHECK(seen.rope_count == rope && (!rope || seen.rope.rope_offsets == (const int *)offsets));
            if (rope) {
                a.rope_offset = 7; /* one position from two places */
                CHECK_RC(fi_batch_prefill_run(ctx, plan, &a, NULL), FI_EINVALID);
                CHECK(strstr(fi_last_error(), "rope_offset is 7 and rope_offsets is set"));
                a.rope_offset = 0;
                a.rope_offsets = (const int32_t *)((const char *)offsets + 2);
                CHECK_RC(fi_batch_prefill_run(ctx, plan, &a, NULL), FI_EINVALID);
                CHECK(strstr(fi_last_error(), "rope_offsets"));
                CHECK(seen.count == 2); /* neither refused run launched anything */
                /* Version 3 has no rope_offsets: whatever follows is not read. */
                a.version = 3;
                a.rope_offset = 7;
                CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
                CHECK(seen.p.prefill.rope_offsets == NULL && seen.p.prefill.rope_offset == 7 &&
                      seen.rope.rope_offsets == NULL && seen.rope.rope_offset == 7);
                a.version = 5;
                CHECK_RC(fi_batch_prefill_run(ctx, plan, &a, NULL), FI_EINVALID);
            }
            fi_batch_prefill_plan_free(plan);
            free(ws);
        }
    }
    fi_jit_ctx_free(ctx);
}

/* Single prefill with RoPE: with a workspace (args version 3) the keys are
 * rotated into it by a pre-pass and the tile kernel reads them there, the
 * block claims' counter after them; without one (or with version 2 args) one
 * launch rotates K tiles itself; a workspace too small for the keys is
 * refused before anything is launched. */
TEST(single_prefill_rope_uses_an_optional_workspace)
{
    enum { ROT_BYTES = 500 * 8 * 64 * 2 };
    static _Alignas(256) unsigned char ws[ROT_BYTES + 16];
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    fi_jit_spec rope = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_ROPE_LLAMA);
    fi_jit_spec plain = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_NONE);
    rope.head_dim = plain.head_dim = 64;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&a, 32, 8, 500, 64);
    size_t bytes = 1;
    CHECK_OK(fi_prefill_workspace_size(&bytes, &plain, &a));
    CHECK(bytes == 16); /* the claims' counter alone */
    CHECK_OK(fi_prefill_workspace_size(&bytes, &rope, &a));
    CHECK(bytes == sizeof ws);

    a.workspace = ws;
    a.workspace_bytes = ROT_BYTES - 16;
    CHECK_RC(fi_prefill_run(ctx, &rope, &a, NULL), FI_EINVALID);
    CHECK(seen.count == 0 && strstr(fi_last_error(), "fi_prefill_workspace_size"));

    a.workspace_bytes = bytes;
    a.cta_tile_q = 128; /* the Hopper loop's: 11 tiles of 192 x 8 kv heads, on 3 CTAs */
    setenv("FIJIT_PREFILL_WS", "persistent:3", 1);
    CHECK_OK(fi_prefill_run(ctx, &rope, &a, NULL));
    unsetenv("FIJIT_PREFILL_WS");
    a.cta_tile_q = 0;
    CHECK_MSG(seen.ws.claims == (unsigned int *)(void *)(ws + ROT_BYTES), "%s: claims at %td",
              seen.name, (unsigned char *)seen.ws.claims - ws);
    const fi_prefill_params *r = &seen.rope, *p = &seen.p.prefill;
    CHECK_MSG(seen.count == 2 && seen.rope_count == 1, "%d launches", seen.count);
    CHECK(seen.rope_grid[1] == 8 && seen.rope_grid[0] * FI_PREFILL_ROPE_THREADS >= 500 * 4);
    CHECK(r->k == a.k && r->k_stride_n == a.k_stride_n && r->rot_k == ws && r->kv_tokens == 500);
    CHECK(p->k == ws && p->rot_k == ws && p->k_stride_n == 8 * 64 && p->k_stride_h == 64 &&
          p->v == a.v && p->v_stride_n == a.v_stride_n);

    for (int version = 2; version <= 3; version++) {
        a.version = (unsigned)version;
        a.workspace = version == 2 ? ws : NULL; /* version 2 has no workspace field */
        CHECK_OK(fi_prefill_run(ctx, &rope, &a, NULL));
        CHECK_MSG(seen.count == 3 + (version - 2) && seen.rope_count == 1, "version %d", version);
        CHECK(p->k == a.k && p->rot_k == NULL && p->k_stride_n == a.k_stride_n);
    }
    fi_jit_ctx_free(ctx);
}

/* fp8 single prefill: the V pre-pass writes V into the workspace as P.V
 * reads it (vt, a 192-key multiple of keys per head_dim row), then the Hopper
 * main loop runs. Where the tensors do not suit that loop (a GQA group of 3
 * divides no Q box), the call fails before either launches, so nothing is
 * written to the workspace. */
TEST(fp8_prefill_lays_v_out_only_for_a_launch_that_goes_ahead)
{
    /* vt, then the claims' counter, which the fake driver zeroes in memory */
    enum { VT_BYTES = 8 * 128 * 1152 };
    static _Alignas(256) unsigned char ws[VT_BYTES + 16];
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_NONE, FI_POS_NONE);
    s.q_dtype = s.kv_dtype = FI_DTYPE_FP8_E4M3;
    s.o_dtype = FI_DTYPE_BF16;
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&a, 32, 8, 1000, 128);
    a.q_scale = a.k_scale = a.v_scale = 0.5f;
    size_t bytes = 0;
    CHECK_OK(fi_prefill_workspace_size(&bytes, &s, &a));
    CHECK_MSG(bytes == sizeof ws, "%zu bytes", bytes);
    a.workspace = ws;
    a.workspace_bytes = bytes;
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(seen.count == 2 && strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%d launches, last %s",
              seen.count, seen.name);
    CHECK(seen.p.prefill.vt == a.workspace && seen.p.prefill.vt_keys == 1152 &&
          seen.p.prefill.v_scale == 0.5f);

    prefill_args_for(&a, 24, 8, 1000, 128);
    CHECK_RC(fi_prefill_run(ctx, &s, &a, NULL), FI_EINVALID);
    CHECK_MSG(seen.count == 2 && strstr(fi_last_error(), "Hopper main loop alone"), "%d launches: %s",
              seen.count, fi_last_error());
    fi_jit_ctx_free(ctx);
}

/* Single prefill's persistent CTAs claim their blocks through a counter in
 * the optional workspace (after RoPE's keys: above), zeroed on the stream
 * before each launch; without a workspace, with one too small for the
 * counter, with FIJIT_PREFILL_WS=static:N or a CTA per block, they claim
 * nothing and nothing is written to it. A misaligned workspace is refused. */
TEST(single_prefill_persistent_ctas_claim_blocks_from_an_optional_workspace)
{
    static _Alignas(256) unsigned char ws[64];
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_NONE);
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&a, 32, 8, 1000, 128); /* 32 tiles x 8 kv heads */
    CHECK_OK(launch_ctx(&ctx));
    size_t bytes = 0;
    CHECK_OK(fi_prefill_workspace_size(&bytes, &s, &a));
    CHECK(bytes == 16);
    a.workspace = ws;
    a.workspace_bytes = bytes;
    memset(ws, 0xab, sizeof ws);
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
    CHECK(seen.grid[0] == FAKE_CUDA_SM_COUNT && seen.ws.claims == (unsigned int *)(void *)ws);
    CHECK(*seen.ws.claims == 0 && ws[4] == 0xab); /* that word alone, zeroed */

    static const char *const fixed[] = {"static:3", "grid", NULL};
    for (int m = 0; m < 4; m++) {
        memset(ws, 0xab, sizeof ws);
        if (m < 2) setenv("FIJIT_PREFILL_WS", fixed[m], 1);
        a.workspace = m == 2 ? NULL : ws;
        a.workspace_bytes = m == 3 ? 8 : bytes;
        CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
        unsetenv("FIJIT_PREFILL_WS");
        CHECK_MSG(seen.ws.claims == NULL && ws[0] == 0xab, "case %d", m);
    }
    a.workspace = ws + 4;
    const int launches = seen.count;
    CHECK_RC(fi_prefill_run(ctx, &s, &a, NULL), FI_EINVALID);
    CHECK(seen.count == launches && strstr(fi_last_error(), "workspace"));
    fi_jit_ctx_free(ctx);
}

/* Merge `states` states of `heads` heads for `seq` positions, contiguous, hd 128. */
static fi_merge_states_args merge_args_for(int seq, int states, int heads)
{
    fi_merge_states_args a = FI_MERGE_STATES_ARGS_INIT;
    a.v = DEV(0);
    a.lse = DEV(1);
    a.v_out = DEV(2);
    a.seq_len = seq;
    a.num_states = states;
    a.num_heads = heads;
    a.v_stride_h = 128;
    a.v_stride_state = heads * 128;
    a.v_stride_n = states * heads * 128;
    a.lse_stride_state = heads;
    a.lse_stride_n = states * heads;
    a.v_out_stride_h = 128;
    a.v_out_stride_n = heads * 128;
    return a;
}

/* The 0.2 API's rules: mask=window needs a window in every kind (the *_INIT
 * default -1 is refused where the window is given: decode and prefill args,
 * the batch kinds' plans); decode sizes its workspace from args.sm_count
 * exactly as a run on a device of that many SMs plans it; the batch kinds'
 * run args refuse their pre-0.2 versions; merge_states wants the states'
 * dtype from its args or a spec. */
TEST(api_0_2_windows_sm_count_and_versions)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    fi_jit_spec ds = spec_of(FI_KIND_DECODE, FI_MASK_WINDOW, FI_POS_NONE);
    fi_decode_args da = FI_DECODE_ARGS_INIT;
    decode_args_for(&da, 5000);
    size_t bytes = 0, on_device = 0;
    CHECK_RC(fi_decode_workspace_size(&bytes, &ds, &da), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "window_left"));
    CHECK_RC(fi_decode_run(ctx, &ds, &da, NULL), FI_EINVALID);
    ds.mask = FI_MASK_NONE;
    CHECK_OK(fi_decode_workspace_size(&on_device, &ds, &da)); /* the fake device's SMs */
    da.sm_count = FAKE_CUDA_SM_COUNT;
    CHECK_OK(fi_decode_workspace_size(&bytes, &ds, &da));
    CHECK_MSG(bytes == on_device && bytes > 0, "%zu vs %zu", bytes, on_device);
    da.sm_count = -1;
    CHECK_RC(fi_decode_workspace_size(&bytes, &ds, &da), FI_EINVALID);

    fi_jit_spec ps = spec_of(FI_KIND_PREFILL, FI_MASK_WINDOW, FI_POS_NONE);
    fi_prefill_args pa = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&pa, 32, 8, 100, 128);
    CHECK_RC(fi_prefill_run(ctx, &ps, &pa, NULL), FI_EINVALID);
    CHECK(seen.count == 0 && strstr(fi_last_error(), "window_left"));

    int32_t indptr[3] = {0, 300, 310}, last[2] = {7, 16};
    fi_batch_decode_plan_args bpa = plan_args_for(2, indptr, last);
    fi_jit_spec bs = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_WINDOW, FI_POS_NONE);
    fi_batch_decode_plan *bplan = NULL;
    CHECK_RC(fi_batch_decode_plan_new(&bplan, ctx, &bs, &bpa), FI_EINVALID);
    CHECK(bplan == NULL && strstr(fi_last_error(), "window_left"));
    bs.mask = FI_MASK_NONE;
    CHECK_OK(fi_batch_decode_plan_new(&bplan, ctx, &bs, &bpa));
    CHECK_OK(fi_batch_decode_workspace_size(&bytes, &bs, &bpa));
    CHECK_OK(fi_batch_decode_plan_workspace_size(&on_device, bplan));
    CHECK(bytes == on_device);
    fi_batch_decode_args ba = FI_BATCH_DECODE_ARGS_INIT;
    ba.version = 2;
    CHECK_RC(fi_batch_decode_run(ctx, bplan, &ba, NULL), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "rebuild"));
    fi_batch_decode_plan_free(bplan);

    int32_t qo_indptr[3] = {0, 100, 130}, kv_indptr[3] = {0, 100, 200};
    fi_batch_prefill_plan_args ppa = batch_prefill_plan_for(2, qo_indptr, kv_indptr, NULL);
    fi_jit_spec rs = spec_of(FI_KIND_BATCH_PREFILL_RAGGED, FI_MASK_WINDOW, FI_POS_NONE);
    fi_batch_prefill_plan *pplan = NULL;
    CHECK_RC(fi_batch_prefill_plan_new(&pplan, ctx, &rs, &ppa), FI_EINVALID);
    CHECK(pplan == NULL && strstr(fi_last_error(), "window_left"));
    CHECK_RC(fi_batch_prefill_workspace_size(&bytes, &rs, &ppa), FI_EINVALID);
    ppa.version = 1;
    rs.mask = FI_MASK_NONE;
    CHECK_RC(fi_batch_prefill_plan_new(&pplan, ctx, &rs, &ppa), FI_EINVALID);
    ppa.version = FI_BATCH_PREFILL_PLAN_ARGS_VERSION;
    ppa.window_left = 40;
    rs.mask = FI_MASK_WINDOW;
    CHECK_OK(fi_batch_prefill_plan_new(&pplan, ctx, &rs, &ppa));
    CHECK_OK(fi_batch_prefill_workspace_size(&bytes, &rs, &ppa));
    CHECK_OK(fi_batch_prefill_plan_workspace_size(&on_device, pplan));
    CHECK(bytes == on_device);
    static unsigned char ws[1 << 16] __attribute__((aligned(256)));
    CHECK(bytes <= sizeof ws);
    CHECK_OK(fi_batch_prefill_plan_upload(pplan, ws, bytes));
    fi_batch_prefill_args bpr = FI_BATCH_PREFILL_ARGS_INIT;
    batch_prefill_args_for(&bpr);
    bpr.version = 2;
    CHECK_RC(fi_batch_prefill_run(ctx, pplan, &bpr, NULL), FI_EINVALID);
    bpr.version = FI_BATCH_PREFILL_ARGS_VERSION;
    CHECK_OK(fi_batch_prefill_run(ctx, pplan, &bpr, NULL));
    CHECK(seen.p.prefill.window_left == 40); /* the plan's window reaches the kernel */
    fi_batch_prefill_plan_free(pplan);

    fi_merge_states_args ma = FI_MERGE_STATES_ARGS_INIT;
    CHECK_RC(fi_merge_states(ctx, NULL, &ma, NULL), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "dtype"));
    fi_jit_ctx_free(ctx);
}

TEST(merge_states_launch_covers_every_row)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    const fi_merge_states_args a = merge_args_for(3, 4, 8);
    fi_jit_spec s = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_NONE);
    CHECK_OK(fi_merge_states(ctx, &s, &a, NULL));
    const fi_merge_states_params *p = &seen.p.merge;
    CHECK_MSG(seen.count == 1 && strcmp(seen.name, "fi_merge_states_kernel") == 0, "%s", seen.name);
    CHECK(seen.grid[0] == 3 * 8 && seen.grid[1] == 1 && seen.block[0] == (unsigned)FI_MERGE_THREADS);
    CHECK(p->v == a.v && p->s == a.lse && p->v_out == a.v_out && p->s_out == NULL);
    CHECK(p->seq_len == 3 && p->num_states == 4 && p->num_heads == 8 && p->v_stride_seq == 4096);
    fi_jit_ctx_free(ctx);
}

TEST(a_failed_launch_is_reported_with_the_driver_message)
{
    fi_jit_ctx *ctx = NULL;
    fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_NONE);
    fi_decode_args a = FI_DECODE_ARGS_INIT;
    decode_args_for(&a, 100);
    a.max_splits = 1;
    CHECK_OK(launch_ctx(&ctx));
    seen.result = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    CHECK_RC(fi_decode_run(ctx, &s, &a, NULL), FI_ECUDA);
    CHECK_MSG(strstr(fi_last_error(), "decode: cuLaunchKernel") &&
                  strstr(fi_last_error(), "too many resources"),
              "%s", fi_last_error());
    seen.result = CUDA_SUCCESS;
    CHECK_OK(fi_decode_run(ctx, &s, &a, NULL)); /* nothing was left half-done */
    CHECK(seen.count == 2);
    fi_jit_ctx_free(ctx);
}

/* ---- every shared-memory size a launch can ask for ------------------------------
 * The fake refuses dynamic shared memory above what the function opted into,
 * so these sweeps check each tuple's size and opt-in at the ring depths its
 * plans choose (sanitizer runs: head_dim 128 only). */

static int sweep_head_dim(int i) { return check_quick() ? (i == 0 ? 128 : 0) : 64 << i; }

TEST(every_decode_tuple_launches_with_its_shared_memory)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    static unsigned char ws[16 << 20] __attribute__((aligned(256)));
    const int lens[2] = {512, 20000}; /* a few splits and a shallow ring; many and a deep one */
    for (int h = 0; h < 3 && sweep_head_dim(h); h++)
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int rope = 0; rope < 2; rope++)
                for (int l = 0; l < 2; l++) {
                    const int hd = sweep_head_dim(h), kvb = fp8 ? 1 : 2, len = lens[l];
                    fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_NONE,
                                            rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE);
                    s.head_dim = hd;
                    s.kv_dtype = fp8 ? FI_DTYPE_FP8_E4M3 : FI_DTYPE_FP16;
                    fi_decode_args a = FI_DECODE_ARGS_INIT;
                    decode_args_for(&a, len);
                    a.q_stride_h = a.o_stride_h = a.k_stride_h = a.v_stride_h = hd;
                    a.k_stride_n = a.v_stride_n = 8 * hd;
                    size_t bytes = 0;
                    CHECK_OK(fi_decode_workspace_size(&bytes, &s, &a));
                    CHECK(bytes <= sizeof ws);
                    a.workspace = ws;
                    a.workspace_bytes = bytes;
                    const int rc = fi_decode_run(ctx, &s, &a, NULL);
                    const fi_decode_params *p = &seen.p.decode;
                    CHECK_MSG(rc == 0, "hd %d fp8 %d rope %d len %d: %s", hd, fp8, rope, len,
                              fi_last_error());
                    CHECK_MSG(seen.smem == (unsigned)FI_DECODE_SMEM_BYTES(hd, kvb, rope, p->stages) &&
                                  seen.grid[0] == (unsigned)p->num_splits,
                              "hd %d fp8 %d rope %d len %d: smem %u, %d stages, grid %u, %d splits",
                              hd, fp8, rope, len, seen.smem, p->stages, seen.grid[0],
                              p->num_splits);
                }
    fi_jit_ctx_free(ctx);
}

TEST(every_batch_decode_tuple_launches_with_its_shared_memory)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    static unsigned char ws[16 << 20] __attribute__((aligned(256)));
    /* One long request (split, a deep ring) and 64 short ones (neither). */
    static int32_t indptr[2][65], last[2][64];
    const int batches[2] = {1, 64}, pages[2] = {1250, 20};
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < batches[c]; b++) {
            indptr[c][b + 1] = indptr[c][b] + pages[c];
            last[c][b] = 16;
        }
    for (int h = 0; h < 3 && sweep_head_dim(h); h++)
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int rope = 0; rope < 2; rope++)
                for (int c = 0; c < 2; c++) {
                    const int hd = sweep_head_dim(h), kvb = fp8 ? 1 : 2;
                    fi_jit_spec s = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE,
                                            rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE);
                    s.head_dim = hd;
                    s.kv_dtype = fp8 ? FI_DTYPE_FP8_E4M3 : FI_DTYPE_FP16;
                    const fi_batch_decode_plan_args info =
                        plan_args_for(batches[c], indptr[c], last[c]);
                    fi_batch_decode_plan *plan = NULL;
                    size_t bytes = 0;
                    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &info));
                    int items = 0, splits = 0;
                    const int ok = fi_batch_decode_plan_describe(&items, &splits, plan) == 0 &&
                                   fi_batch_decode_plan_workspace_size(&bytes, plan) == 0 &&
                                   bytes <= sizeof ws &&
                                   fi_batch_decode_plan_upload(plan, ws, bytes) == 0;
                    fi_batch_decode_args a = FI_BATCH_DECODE_ARGS_INIT;
                    batch_decode_args_for(&a, hd, ws, bytes);
                    const int rc = ok ? fi_batch_decode_run(ctx, plan, &a, NULL) : -1;
                    fi_batch_decode_plan_free(plan);
                    const fi_batch_decode_params *p = &seen.p.batch_decode;
                    CHECK_MSG(rc == 0, "hd %d fp8 %d rope %d batch %d: %s", hd, fp8, rope,
                              batches[c], fi_last_error());
                    CHECK_MSG(seen.smem == (unsigned)FI_DECODE_SMEM_BYTES(hd, kvb, rope, p->stages) &&
                                  seen.grid[0] == (unsigned)items && (c == 1 || splits > 1),
                              "hd %d fp8 %d rope %d batch %d: smem %u, %d stages, grid %u, %d "
                              "items, %d splits", hd, fp8, rope, batches[c], seen.smem,
                              p->stages, seen.grid[0], items, splits);
                }
    fi_jit_ctx_free(ctx);
}

/* The fake device is compute capability 9.0: a context for sm_90a gets the
 * wgmma tile shapes, one for sm_90 (which the device also runs) the portable
 * mma.sync ones. */
TEST(every_prefill_tile_launches_with_its_shared_memory)
{
    static const struct {
        const char *arch;
        int sm90a;
    } targets[] = {{"sm_90a", 1}, {"sm_90", 0}};
    for (int g = 0; g < 2; g++) {
        fi_jit_ctx *ctx = NULL;
        CHECK_OK(launch_ctx_for(&ctx, targets[g].arch));
        const int sm90a = targets[g].sm90a;
        for (int h = 0; h < 3 && sweep_head_dim(h); h++)
            for (int idx = -1; idx < FI_PREFILL_NUM_TILES; idx++) {
                const int hd = sweep_head_dim(h);
                /* idx -1: the Hopper main loop in place of tile 0 (sm_90a),
                 * its shared memory within the device's opt-in limit. */
                if (idx < 0 && !sm90a) continue;
                setenv("FIJIT_PREFILL_WS", idx < 0 ? "grid" : "0", 1);
                fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_NONE, FI_POS_NONE);
                s.head_dim = hd;
                const fi_jit_kernel *k = NULL;
                CHECK_OK(fi_jit_get_kernel(&k, ctx, &s));
                CHECK_MSG(strcmp(k->arch, targets[g].arch) == 0, "built for %s", k->arch);
                fi_prefill_args a = FI_PREFILL_ARGS_INIT;
                prefill_args_for(&a, 2, 2, 300, hd);
                a.cta_tile_q = FI_PREFILL_TILE_Q(idx < 0 ? 0 : idx);
                const int rc = fi_prefill_run(ctx, &s, &a, NULL);
                unsetenv("FIJIT_PREFILL_WS");
                CHECK_MSG(rc == 0, "hd %d tile %d: %s", hd, a.cta_tile_q, fi_last_error());
                if (idx < 0) {
                    CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0 &&
                                  seen.smem == (unsigned)FI_PREFILL_WS_SMEM_BYTES(hd, 1, 0) &&
                                  seen.smem <= FAKE_CUDA_SMEM_OPTIN_MAX,
                              "hd %d: %s smem %u", hd, seen.name, seen.smem);
                    continue;
                }
                CHECK_MSG(seen.smem == (unsigned)FI_PREFILL_SMEM_BYTES(idx, hd, sm90a) &&
                              seen.block[0] == (unsigned)FI_PREFILL_WARPS(idx, hd, sm90a) * 32 &&
                              seen.grid[0] == (unsigned)((300 + a.cta_tile_q - 1) / a.cta_tile_q),
                          "%s hd %d tile %d: smem %u block %u grid %u", targets[g].arch, hd,
                          a.cta_tile_q, seen.smem, seen.block[0], seen.grid[0]);
                /* The 128-row tile of head_dim 64/128: two warpgroups (wgmma)
                 * on sm_90a, 4 warps of 32 rows elsewhere. */
                if (idx == 0 && hd <= 128) CHECK(seen.block[0] == (sm90a ? 256u : 128u));
            }
        fi_jit_ctx_free(ctx);
    }
}

TEST(decode_scalars_reach_the_kernel)
{
    fi_jit_ctx *ctx = NULL;
    static const float slopes[32];
    CHECK_OK(launch_ctx(&ctx));
    fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_WINDOW, FI_POS_ALIBI);
    s.soft_cap = 1;
    fi_decode_args a = FI_DECODE_ARGS_INIT;
    decode_args_for(&a, 300);
    a.max_splits = 1;
    a.sm_scale = 0.25f;
    a.logits_soft_cap = 30.f;
    a.window_left = 77;
    a.alibi_slopes = slopes;
    a.lse = (float *)DEV(5);
    a.rope_offset = 9;
    CHECK_OK(fi_decode_run(ctx, &s, &a, NULL));
    const fi_decode_params *p = &seen.p.decode;
    CHECK(p->sm_scale == 0.25f && p->soft_cap == 30.f && p->window_left == 77);
    CHECK(p->alibi_slopes == slopes && p->lse == a.lse && p->rope_offset == 9);
    /* Without the window mask or soft-cap in the spec, their arguments are ignored. */
    s = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_NONE);
    CHECK_OK(fi_decode_run(ctx, &s, &a, NULL));
    CHECK(p->window_left == -1 && p->soft_cap == 0.f);
    fi_jit_ctx_free(ctx);
}

/* A variant's declared parameters, packed by name into the parameter block of
 * every kind (natural alignment: the float, then the int, then the pointer). */
TEST(variant_arguments_reach_every_kind)
{
    static const char *const snippet = "//! param float scale\n"
                                       "//! param int shift\n"
                                       "//! param const float* bias\n"
                                       "struct Variant : fijit::DefaultVariant {};\n";
    static const float bias[32];
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    CHECK_OK(fi_jit_variant_register(ctx, "packed", snippet, 0));
    fi_variant_arg args[3] = {{"bias", FI_VARG_PTR, {.ptr = bias}},
                              {"scale", FI_VARG_FLOAT, {.f = 1.5f}},
                              {"shift", FI_VARG_INT, {.i = -3}}};
    struct {
        float scale;
        int shift;
        const float *bias;
    } want = {1.5f, -3, bias};
    for (int kind = 0; kind < 3; kind++) {
        const unsigned long long *words = NULL;
        int rc = -1;
        if (kind == 0) {
            fi_jit_spec s = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_NONE);
            s.variant = "packed";
            fi_decode_args a = FI_DECODE_ARGS_INIT;
            decode_args_for(&a, 100);
            a.max_splits = 1;
            a.variant_args = args;
            a.num_variant_args = 3;
            rc = fi_decode_run(ctx, &s, &a, NULL);
            words = seen.p.decode.variant_params;
        } else if (kind == 1) {
            fi_jit_spec s = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_NONE);
            s.variant = "packed";
            fi_prefill_args a = FI_PREFILL_ARGS_INIT;
            prefill_args_for(&a, 4, 4, 64, 128);
            a.variant_args = args;
            a.num_variant_args = 3;
            rc = fi_prefill_run(ctx, &s, &a, NULL);
            words = seen.p.prefill.variant_params;
        } else {
            fi_jit_spec s = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_NONE);
            s.variant = "packed";
            int32_t indptr[2] = {0, 4}, last[1] = {16};
            const fi_batch_decode_plan_args info = plan_args_for(1, indptr, last);
            fi_batch_decode_plan *plan = NULL;
            static unsigned char ws[1 << 20] __attribute__((aligned(256)));
            size_t bytes = 0;
            CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &s, &info));
            rc = fi_batch_decode_plan_workspace_size(&bytes, plan);
            if (rc == 0 && bytes <= sizeof ws) rc = fi_batch_decode_plan_upload(plan, ws, bytes);
            fi_batch_decode_args a = FI_BATCH_DECODE_ARGS_INIT;
            batch_decode_args_for(&a, 128, ws, bytes);
            a.variant_args = args;
            a.num_variant_args = 3;
            if (rc == 0) rc = fi_batch_decode_run(ctx, plan, &a, NULL);
            fi_batch_decode_plan_free(plan);
            words = seen.p.batch_decode.variant_params;
        }
        CHECK_MSG(rc == 0, "kind %d: %s", kind, fi_last_error());
        CHECK_MSG(memcmp(words, &want, sizeof want) == 0, "kind %d: words %llx %llx", kind,
                  words[0], words[1]);
    }
    fi_jit_ctx_free(ctx);
}

/* What CUDA-graph capture needs of a run once its kernel is loaded (and, for
 * the batch kinds, its plan uploaded): one launch and no other driver call
 * that a capture refuses (copies, memsets, synchronisation, allocation), and
 * for a plan the same launch every time. */
TEST(runs_are_single_launches_a_graph_can_capture)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    static unsigned char ws[4 << 20] __attribute__((aligned(256)));
    fi_jit_spec ds = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_NONE);
    fi_decode_args da = FI_DECODE_ARGS_INIT;
    decode_args_for(&da, 8000);
    size_t bytes = 0;
    CHECK_OK(fi_decode_workspace_size(&bytes, &ds, &da));
    CHECK(bytes <= sizeof ws);
    da.workspace = ws;
    da.workspace_bytes = bytes;

    int32_t indptr[3] = {0, 300, 310}, last[2] = {7, 16};
    const fi_batch_decode_plan_args info = plan_args_for(2, indptr, last);
    fi_jit_spec bs = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_NONE);
    fi_batch_decode_plan *plan = NULL;
    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &bs, &info));
    CHECK_OK(fi_batch_decode_plan_workspace_size(&bytes, plan));
    CHECK(bytes <= sizeof ws / 2);
    CHECK_OK(fi_batch_decode_plan_upload(plan, ws + sizeof ws / 2, bytes));
    fi_batch_decode_args ba = FI_BATCH_DECODE_ARGS_INIT;
    batch_decode_args_for(&ba, 128, ws + sizeof ws / 2, bytes);

    fi_jit_spec ps = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_NONE);
    fi_prefill_args pa = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&pa, 32, 8, 500, 128);

    for (int kind = 0; kind < 3; kind++) {
        fi_batch_decode_params first;
        unsigned grid0 = 0;
        int base = 0, launched = 0;
        for (int run = 0; run < 4; run++) {
            int rc = kind == 0   ? fi_decode_run(ctx, &ds, &da, NULL)
                     : kind == 1 ? fi_batch_decode_run(ctx, plan, &ba, NULL)
                                 : fi_prefill_run(ctx, &ps, &pa, NULL);
            CHECK_MSG(rc == 0, "kind %d run %d: %s", kind, run, fi_last_error());
            if (run == 0) { /* the kernel is loaded now */
                base = fake.uncapturable_calls();
                launched = seen.count;
                grid0 = seen.grid[0];
                memcpy(&first, &seen.p.batch_decode, sizeof first);
                continue;
            }
            CHECK_MSG(fake.uncapturable_calls() == base && seen.count == launched + run,
                      "kind %d run %d: %d uncapturable calls, %d launches", kind, run,
                      fake.uncapturable_calls() - base, seen.count - launched);
            CHECK(seen.grid[0] == grid0);
            if (kind == 1) CHECK(memcmp(&first, &seen.p.batch_decode, sizeof first) == 0);
        }
    }
    fi_batch_decode_plan_free(plan);
    fi_jit_ctx_free(ctx);
}

/* fijit_cache.h's device calls, over the fake driver: a device made current,
 * memory allocated, copied both ways and freed; errors for a device that is
 * not there and for NULL pointers. */
TEST(device_calls_reach_the_driver_fijit_opened)
{
    CHECK(fake_ready());
    int count = -1, version = 0;
    CHECK_OK(fi_device_count(&count));
    CHECK(count >= 1);
    CHECK_OK(fi_cuda_driver_version(&version));
    CHECK(version == 13000);
    CHECK_RC(fi_device_use(count), FI_ENODEVICE);
    CHECK(strstr(fi_last_error(), "no CUDA device"));
    CHECK_OK(fi_device_use(0));
    char arch[16];
    CHECK(fi_cuda_current_arch(arch, sizeof arch) > 0);
    void *mem = NULL;
    const char text[] = "through the device";
    char back[sizeof text] = "";
    CHECK_OK(fi_device_alloc(&mem, sizeof text));
    CHECK(mem != NULL);
    CHECK_OK(fi_device_upload(mem, text, sizeof text));
    CHECK_OK(fi_device_synchronize());
    CHECK_OK(fi_device_download(back, mem, sizeof text));
    CHECK(memcmp(back, text, sizeof text) == 0);
    fi_device_free(mem);
    fi_device_free(NULL);
    CHECK_RC(fi_device_alloc(NULL, 16), FI_EINVALID);
    CHECK_RC(fi_device_upload(NULL, text, 1), FI_EINVALID);
    CHECK_RC(fi_device_download(back, NULL, 1), FI_EINVALID);
}

/* The two batch lifecycles are one: batch decode's plan, like batch
 * prefill's, gets its kernel, so the very first run of a fresh context is a
 * single launch that a CUDA graph can capture (no compile, no module load). */
TEST(batch_decode_plan_gets_its_kernel_so_a_first_run_is_capturable)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    static unsigned char ws[1 << 20] __attribute__((aligned(256)));
    int32_t indptr[3] = {0, 300, 310}, last[2] = {7, 16};
    fi_batch_decode_plan_args info = plan_args_for(2, indptr, last);
    info.window_left = 100;
    fi_jit_spec bs = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_WINDOW, FI_POS_NONE);
    fi_batch_decode_plan *plan = NULL;
    size_t bytes = 0;
    CHECK_OK(fi_batch_decode_plan_new(&plan, ctx, &bs, &info));
    CHECK_OK(fi_batch_decode_plan_workspace_size(&bytes, plan));
    CHECK(bytes <= sizeof ws);
    CHECK_OK(fi_batch_decode_plan_upload(plan, ws, bytes));
    fi_batch_decode_args ba = FI_BATCH_DECODE_ARGS_INIT;
    batch_decode_args_for(&ba, 128, ws, bytes);
    const int base = fake.uncapturable_calls(), launched = seen.count;
    CHECK_MSG(fi_batch_decode_run(ctx, plan, &ba, NULL) == 0, "%s", fi_last_error());
    CHECK_MSG(fake.uncapturable_calls() == base && seen.count == launched + 1,
              "first run: %d uncapturable calls, %d launches", fake.uncapturable_calls() - base,
              seen.count - launched);
    fi_batch_decode_plan_free(plan);
    fi_jit_ctx_free(ctx);
}

/* Every kind's host path once, on `ctx`: 0 when all succeeded, else the
 * first error (each call must return 0 or a negative fijit code). */
static int every_kind_once(fi_jit_ctx *ctx, unsigned char *ws, size_t ws_bytes)
{
    int rc, first = 0;
#define STEP(expr)                                                             \
    do {                                                                       \
        rc = (expr);                                                           \
        if (rc > 0) return 1000; /* not a fijit return code */                 \
        if (rc < 0 && !first) first = rc;                                      \
    } while (0)
    fi_jit_spec ds = spec_of(FI_KIND_DECODE, FI_MASK_NONE, FI_POS_ROPE_LLAMA);
    fi_decode_args da = FI_DECODE_ARGS_INIT;
    decode_args_for(&da, 8000);
    size_t bytes = 0;
    STEP(fi_decode_workspace_size(&bytes, &ds, &da));
    da.workspace = ws;
    da.workspace_bytes = ws_bytes / 2;
    if (rc == 0 && bytes <= ws_bytes / 2) STEP(fi_decode_run(ctx, &ds, &da, NULL));

    int32_t indptr[3] = {0, 300, 310}, last[2] = {7, 16};
    const fi_batch_decode_plan_args info = plan_args_for(2, indptr, last);
    fi_jit_spec bs = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_NONE);
    fi_batch_decode_plan *plan = NULL;
    STEP(fi_batch_decode_plan_new(&plan, ctx, &bs, &info));
    if (plan) {
        unsigned char *pws = ws + ws_bytes / 2;
        STEP(fi_batch_decode_plan_workspace_size(&bytes, plan));
        if (rc == 0 && bytes <= ws_bytes / 2) STEP(fi_batch_decode_plan_upload(plan, pws, bytes));
        if (rc == 0) {
            fi_batch_decode_args ba = FI_BATCH_DECODE_ARGS_INIT;
            batch_decode_args_for(&ba, 128, pws, bytes);
            STEP(fi_batch_decode_run(ctx, plan, &ba, NULL));
        }
        fi_batch_decode_plan_free(plan);
    }

    fi_jit_spec ps = spec_of(FI_KIND_PREFILL, FI_MASK_CAUSAL, FI_POS_ROPE_LLAMA);
    fi_prefill_args pa = FI_PREFILL_ARGS_INIT;
    prefill_args_for(&pa, 32, 8, 500, 128);
    pa.workspace = ws; /* the keys' rotation: a second launch */
    pa.workspace_bytes = ws_bytes / 2;
    STEP(fi_prefill_run(ctx, &ps, &pa, NULL));

    /* Batch prefill: ragged, and paged with RoPE (a second upload, the
     * pre-pass launch). */
    int32_t qo_indptr[3] = {0, 100, 130}, kv_indptr[3] = {0, 100, 200};
    int32_t page_indptr[3] = {0, 7, 9}, page_last[2] = {4, 16};
    const fi_jit_spec batch_specs[2] = {
        spec_of(FI_KIND_BATCH_PREFILL_RAGGED, FI_MASK_CAUSAL, FI_POS_NONE),
        spec_of(FI_KIND_BATCH_PREFILL_PAGED, FI_MASK_CAUSAL, FI_POS_ROPE_LLAMA)};
    const fi_batch_prefill_plan_args batch_plans[2] = {
        batch_prefill_plan_for(2, qo_indptr, kv_indptr, NULL),
        batch_prefill_plan_for(2, qo_indptr, page_indptr, page_last)};
    for (int i = 0; i < 2; i++) {
        fi_batch_prefill_plan *pplan = NULL;
        STEP(fi_batch_prefill_workspace_size(&bytes, &batch_specs[i], &batch_plans[i]));
        if (rc == 0 && bytes <= ws_bytes / 2)
            STEP(fi_batch_prefill_plan_new(&pplan, ctx, &batch_specs[i], &batch_plans[i]));
        if (pplan) STEP(fi_batch_prefill_plan_upload(pplan, ws, bytes));
        if (pplan && rc == 0) {
            fi_batch_prefill_args ba = FI_BATCH_PREFILL_ARGS_INIT;
            batch_prefill_args_for(&ba);
            STEP(fi_batch_prefill_run(ctx, pplan, &ba, NULL));
        }
        fi_batch_prefill_plan_free(pplan);
    }

    const fi_merge_states_args ma = merge_args_for(2, 3, 4);
    const fi_jit_spec ms = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_NONE);
    STEP(fi_merge_states(ctx, &ms, &ma, NULL));
#undef STEP
    return first;
}

/* Fault loop over the driver: for n = 1, 2, ... the n-th driver call fails.
 * Every call returns 0 or an error (no crash; the sanitizer runs see no leak
 * or bad access), a failure that reaches a caller is a fijit error with the
 * driver's message, and the same context then runs everything cleanly:
 * nothing half-loaded or half-planned is left behind. */
TEST(a_failing_driver_call_anywhere_leaves_a_usable_context)
{
    static unsigned char ws[8 << 20] __attribute__((aligned(256)));
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    CHECK_OK(every_kind_once(ctx, ws, sizeof ws)); /* compiles into the cache */
    fi_jit_ctx_free(ctx);
    int n = 1, failures = 0;
    for (; n < 400; n++) {
        CHECK_OK(check_ctx_new(&ctx, "sm_90a"));
        fake.fail_call(n, CUDA_ERROR_LAUNCH_FAILED);
        const int rc = every_kind_once(ctx, ws, sizeof ws);
        const int fired = fake.fault_fired();
        fake.fail_call(0, CUDA_SUCCESS);
        CHECK_MSG(rc <= 0, "call %d: a positive return code", n);
        if (!fired) { /* the sequence has fewer than n driver calls */
            CHECK_OK(rc);
            fi_jit_ctx_free(ctx);
            break;
        }
        if (rc < 0) {
            failures++;
            CHECK_MSG(strstr(fi_last_error(), "failed") || strstr(fi_last_error(), "CUDA"),
                      "call %d: %s", n, fi_last_error());
        }
        const int again = every_kind_once(ctx, ws, sizeof ws);
        CHECK_MSG(again == 0, "call %d failed, then the context: %d %s", n, again, fi_last_error());
        fi_jit_ctx_free(ctx);
    }
    CHECK_MSG(n > 20 && n < 400 && failures > 10, "%d driver calls, %d reached the caller", n - 1,
              failures);
}

/* ---- MLA's prefill: head_dim 192 for q and k, 128 for v and o --------------------- */

static fi_jit_spec mla_spec(fi_kernel_kind kind, fi_mask mask)
{
    fi_jit_spec s = spec_of(kind, mask, FI_POS_NONE);
    s.head_dim = 192;
    s.head_dim_vo = 128;
    return s;
}

/* q and k rows of 192, v and o rows of 128, NHD; heads as DeepSeek-V3 on 8
 * GPUs (16 query heads, MHA). */
static void mla_prefill_args_for(fi_prefill_args *a, int len)
{
    prefill_args_for(a, 16, 16, len, 192);
    a->v_stride_n = a->o_stride_n = 16 * 128;
    a->v_stride_h = a->o_stride_h = 128;
}

/* The 192/128 tuples' tile kernels are the mma.sync ones on every arch (8
 * warps x 16 rows, 32-key K/V tiles, shared memory for rows of 192 in Q and
 * K and of 128 in V), sm_90a's included, with the strides of v and o as
 * given; on sm_90a the 128-row tiles go to the Hopper main loop, with TMA
 * maps of q and k 192 wide and of v and o 128 wide. */
TEST(mla_prefill_launches_its_tiles_and_the_hopper_main_loop)
{
    const char *arches[] = {"sm_90", "sm_90a"};
    for (int i = 0; i < 2; i++) {
        fi_jit_ctx *ctx = NULL;
        CHECK_OK(launch_ctx_for(&ctx, arches[i]));
        fi_jit_spec s = mla_spec(FI_KIND_PREFILL, FI_MASK_CAUSAL);
        fi_prefill_args a = FI_PREFILL_ARGS_INIT;
        mla_prefill_args_for(&a, 1000);
        const int want_smem = ((128 + 2 * 32) * 192 + 2 * 32 * 128) * 2;
        CHECK(FI_PREFILL_SMEM_BYTES_VO(0, 192, 128, 0) == want_smem);
        for (int t = 0; t < FI_PREFILL_NUM_TILES; t++) {
            a.cta_tile_q = FI_PREFILL_TILE_Q(t);
            CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
            if (i == 1 && t == 0) {
                CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
                CHECK(seen.block[0] == FI_PREFILL_WS_THREADS(192, 1) && seen.block[0] == 384);
                CHECK_MSG(seen.smem == FI_PREFILL_WS_SMEM_BYTES_VO(192, 128, 1, 1) &&
                              seen.smem == (1 * 128 * 192 + 2 * 128 * (192 + 128)) * 2 + 320,
                          "%u", seen.smem);
                CHECK(seen.ws.work_items == 8 && seen.ws.kv_heads == 16);
                CHECK(tma_map_is(&seen.ws.k, a.k, 1000, 16, 192, 1, 128) &&
                      tma_map_is(&seen.ws.v, a.v, 1000, 16, 128, 1, 128));
                CHECK(seen.ws.q_rows == 1000 && tma_map_is(&seen.ws.q, a.q, 1000, 16, 192, 1, 64));
                CHECK(seen.ws.o_rows == 1000 && tma_map_is(&seen.ws.o, a.o, 1000, 16, 128, 1, 64));
                continue;
            }
            char want[64];
            snprintf(want, sizeof want, "fi_prefill_kernel_q%d", FI_PREFILL_TILE_Q(t));
            CHECK_MSG(strcmp(seen.name, want) == 0, "%s: %s", arches[i], seen.name);
            CHECK(seen.block[0] == (unsigned)FI_PREFILL_WARPS(t, 192, 0) * 32u);
            CHECK_MSG(seen.smem == (unsigned)FI_PREFILL_SMEM_BYTES_VO(t, 192, 128, 0), "%u",
                      seen.smem);
            CHECK(seen.grid[0] == (unsigned)((1000 + FI_PREFILL_TILE_Q(t) - 1) / FI_PREFILL_TILE_Q(t)) &&
                  seen.grid[1] == 16);
            const fi_prefill_params *p = &seen.p.prefill;
            CHECK(p->q_stride_n == 16 * 192 && p->k_stride_n == 16 * 192 && p->k_stride_h == 192);
            CHECK(p->v_stride_n == 16 * 128 && p->v_stride_h == 128);
            CHECK(p->o_stride_n == 16 * 128 && p->o_stride_h == 128);
            /* sm_scale 0 is 1/sqrt of q and k's head dim, 192. */
            CHECK(p->sm_scale == (float)(1.0 / sqrt(192.0)));
        }
        CHECK(FI_PREFILL_WARPS(0, 192, 0) == 8);
        /* FIJIT_PREFILL_WS=0 keeps tile kernel 0, 8 mma.sync warps, on sm_90a too. */
        setenv("FIJIT_PREFILL_WS", "0", 1);
        a.cta_tile_q = 128;
        CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
        unsetenv("FIJIT_PREFILL_WS");
        CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_q128") == 0 && seen.block[0] == 256 &&
                      seen.smem == (unsigned)want_smem, "%s %u", seen.name, seen.smem);
        fi_jit_ctx_free(ctx);
    }
}

TEST(mla_batch_prefill_plans_run_the_tiles_or_the_hopper_main_loop)
{
    static unsigned char *ws;
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    int32_t qo_indptr[3] = {0, 100, 130}, kv_indptr[3] = {0, 300, 400}, pages[3] = {0, 19, 26},
            last[2] = {12, 4};
    for (int paged = 0; paged <= 1; paged++) {
        fi_jit_spec s = mla_spec(paged ? FI_KIND_BATCH_PREFILL_PAGED : FI_KIND_BATCH_PREFILL_RAGGED,
                                 FI_MASK_CAUSAL);
        fi_batch_prefill_plan_args pa =
            batch_prefill_plan_for(2, qo_indptr, paged ? pages : kv_indptr, paged ? last : NULL);
        pa.num_qo_heads = pa.num_kv_heads = 16;
        fi_batch_prefill_plan *plan = NULL;
        /* The tile kernels (a plan made with FIJIT_PREFILL_WS=0), then the Hopper main loop. */
        setenv("FIJIT_PREFILL_WS", "0", 1);
        ws = plan_and_upload(ctx, &s, &pa, &plan);
        unsetenv("FIJIT_PREFILL_WS");
        CHECK(ws != NULL);
        if (!ws) break;
        fi_batch_prefill_args a = FI_BATCH_PREFILL_ARGS_INIT;
        batch_prefill_args_at(&a, 192);
        a.q_stride_n = a.k_stride_n = 16 * 192;
        a.k_stride_page = 16 * 16 * 192;
        a.v_stride_n = a.o_stride_n = 16 * 128;
        a.v_stride_h = a.o_stride_h = 128;
        a.v_stride_page = 16 * 16 * 128;
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
        CHECK_MSG(strncmp(seen.name, "fi_prefill_kernel_q", 19) == 0, "%s", seen.name);
        const int t = strcmp(seen.name, "fi_prefill_kernel_q128") == 0 ? 0
                      : strcmp(seen.name, "fi_prefill_kernel_q64") == 0 ? 1 : 2;
        CHECK(seen.block[0] == (unsigned)FI_PREFILL_WARPS(t, 192, 0) * 32u);
        CHECK(seen.smem == (unsigned)FI_PREFILL_SMEM_BYTES_VO(t, 192, 128, 0));
        const fi_prefill_params *p = &seen.p.prefill;
        CHECK(p->v_stride_n == 16 * 128 && p->o_stride_h == 128 && p->k_stride_n == 16 * 192);
        CHECK(!paged || (p->v_stride_page == 16 * 16 * 128 && p->k_stride_page == 16 * 16 * 192));
        fi_batch_prefill_plan_free(plan);
        free(ws);
        /* A plan of 128-row tiles takes the Hopper main loop: pages of 16 divide its
         * 128-key tiles. */
        pa.cta_tile_q = 128;
        ws = plan_and_upload(ctx, &s, &pa, &plan);
        CHECK(ws != NULL);
        if (!ws) break;
        CHECK_OK(fi_batch_prefill_run(ctx, plan, &a, NULL));
        CHECK_MSG(strcmp(seen.name, "fi_prefill_kernel_ws") == 0, "%s", seen.name);
        CHECK(seen.smem == FI_PREFILL_WS_SMEM_BYTES_VO(192, 128, 1, 1));
        if (paged) {
            /* Boxes of a page's 16 rows: K's 3 panels, V's 2. */
            CHECK(seen.ws.page_box == 16);
        } else {
            CHECK(tma_map_is(&seen.ws.k, a.k, 400, 16, 192, 1, 128) &&
                  tma_map_is(&seen.ws.v, a.v, 400, 16, 128, 1, 128));
        }
        fi_batch_prefill_plan_free(plan);
        free(ws);
    }
    fi_jit_ctx_free(ctx);
}

/* o's rows are checked against o's head dim (128), not q's (192). */
TEST(mla_prefill_checks_o_against_its_own_head_dim)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    fi_jit_spec s = mla_spec(FI_KIND_PREFILL, FI_MASK_NONE);
    fi_prefill_args a = FI_PREFILL_ARGS_INIT;
    mla_prefill_args_for(&a, 64);
    a.o_stride_n = a.o_stride_h = 120;
    CHECK_RC(fi_prefill_run(ctx, &s, &a, NULL), FI_EINVALID);
    CHECK(seen.count == 0 && strstr(fi_last_error(), "o's head dim (128)"));
    a.o_stride_h = 128;
    a.o_stride_n = 16 * 128; /* rows of 128, less than q's 192: fine */
    CHECK_OK(fi_prefill_run(ctx, &s, &a, NULL));
    CHECK(seen.count == 1);
    fi_jit_ctx_free(ctx);
}

/* Chunked context merges 128-wide states: with the 192/128 prefill spec,
 * with version 2 args naming dtype and head dim (no spec), and still with a
 * batch decode spec; each the batch_decode module of head_dim 128 (no
 * compile past the first), and a head dim the merge has no module for is
 * refused naming it. */
TEST(merge_states_takes_the_states_width_from_args_or_any_spec)
{
    fi_jit_ctx *ctx = NULL;
    CHECK_OK(launch_ctx(&ctx));
    fi_merge_states_args a = merge_args_for(3, 4, 8);
    fi_jit_spec decode = spec_of(FI_KIND_BATCH_DECODE, FI_MASK_NONE, FI_POS_NONE);
    CHECK_OK(fi_merge_states(ctx, &decode, &a, NULL));
    fi_jit_stats before = FI_JIT_STATS_INIT, after = FI_JIT_STATS_INIT;
    CHECK_OK(fi_jit_stats_get(&before, ctx));
    fi_jit_spec mla = mla_spec(FI_KIND_PREFILL, FI_MASK_CAUSAL);
    seen.count = 0;
    CHECK_OK(fi_merge_states(ctx, &mla, &a, NULL));
    CHECK(seen.count == 1 && strcmp(seen.name, "fi_merge_states_kernel") == 0);
    CHECK(seen.p.merge.v_stride_seq == 4 * 8 * 128 && seen.p.merge.num_states == 4);
    a.dtype = FI_DTYPE_FP16;
    a.head_dim = 128;
    CHECK_OK(fi_merge_states(ctx, NULL, &a, NULL));
    CHECK(seen.count == 2 && seen.grid[0] == 3 * 8);
    CHECK_OK(fi_jit_stats_get(&after, ctx));
    CHECK_MSG(after.compiles == before.compiles, "%lld compiles", (long long)(after.compiles - before.compiles));
    a.head_dim = 192;
    CHECK_RC(fi_merge_states(ctx, NULL, &a, NULL), FI_EUNSUPPORTED);
    CHECK(strstr(fi_last_error(), "head_dim 192"));
    a.head_dim = 0;
    CHECK_RC(fi_merge_states(ctx, NULL, &a, NULL), FI_EINVALID);
    CHECK(strstr(fi_last_error(), "head_dim"));
    a.version = 1; /* a version 1 caller's args: dtype and head_dim are not read */
    a.dtype = (fi_dtype)99;
    CHECK_OK(fi_merge_states(ctx, &decode, &a, NULL));
    CHECK(seen.count == 3);
    fi_jit_ctx_free(ctx);
}
