// Hopper (sm_90a) asynchronous-copy and synchronisation helpers: mbarriers
// (PTX ISA: mbarrier), TMA tile loads (cp.async.bulk.tensor) through a
// tensor map the host encodes (a CUtensorMap: fi_tma_map in prefill/params.h), register
// reallocation between warpgroups (setmaxnreg) and named barriers.
#pragma once

namespace fijit {

__device__ __forceinline__ void bar_init(unsigned int bar, unsigned int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned int bar, unsigned int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned int bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Wait for the completion of the barrier's phase of parity `parity`.
__device__ __forceinline__ void bar_wait(unsigned int bar, unsigned int parity)
{
    unsigned int done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            " selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
// Box {64 columns, 1 head, kTileKV keys} at (col, head, key) of `map` into
// `dst`, completing `bar`'s transaction bytes.
__device__ __forceinline__ void tma_load(unsigned int dst, const void *map, int col, int head,
                                         int key, unsigned int bar)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(head), "r"(key), "r"(bar)
        : "memory");
}
// Box {64 columns, ...} at (col, head, key) of `map` into L2 (a hint:
// nothing waits for it).
__device__ __forceinline__ void tma_prefetch(const void *map, int col, int head, int key)
{
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(col), "r"(head), "r"(key)
                 : "memory");
}
// A box of a paged map (prefill/params.h: {64 columns, 8 rows, panels, row
// groups, pages}) at panel coordinate `panel`, its first 8-row group `group`
// of page coordinate `page`, into `dst`, completing `bar`'s transaction
// bytes. Where the map's box is a whole page, `group` is 0.
__device__ __forceinline__ void tma_load_page_part(unsigned int dst, const void *map, int panel,
                                                   int group, int page, unsigned int bar)
{
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(0), "r"(0), "r"(panel), "r"(group),
        "r"(page), "r"(bar)
        : "memory");
}
// Box {64 columns, ...} from `src` (shared memory, written by the generic
// proxy and fenced: fence.proxy.async, then a barrier) to (col, head, key)
// of `map`; rows past the map's extent are not written. In the thread's
// current bulk group (bulk_commit).
__device__ __forceinline__ void tma_store(const void *map, int col, int head, int key,
                                          unsigned int src)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
                 " [%0, {%1, %2, %3}], [%4];" ::"l"(reinterpret_cast<unsigned long long>(map)),
                 "r"(col), "r"(head), "r"(key), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Until the thread's bulk groups have read their shared memory (it may then
// be written again; the global writes complete later).
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
template <int kCount>
__device__ __forceinline__ void set_max_regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kCount));
}
template <int kCount>
__device__ __forceinline__ void set_max_regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kCount));
}
__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fijit
