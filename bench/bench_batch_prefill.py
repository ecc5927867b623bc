#!/usr/bin/env python3
"""Batch prefill against single prefill on the same work: a batch of requests of mixed
lengths (qo = kv, drawn in --lens, seeded) run as one ragged and one paged (page 16)
batch prefill, and single prefill of the length whose L^2 equals the batch's sum of
L_i^2, the same pairs of (query, key). CUDA events around each launch, warm-up first,
median of --reps runs in --rounds interleaved rounds; TFLOP/s counts 4 * heads * hd *
visible pairs. The batch kinds should run within 10% of single prefill. [lo-hi] after a
ratio: the lowest and highest of the rounds' own ratios (each round's medians), which
the clocks' drift between rounds does not move: an A/B whose ranges overlap is noise.
--ab NAME,VAR=VAL[;VAR=VAL] also plans each batch kind under that environment (plans
read FIJIT_PREFILL_WS, for one) and times it interleaved with the rest, in the same
process on the same tensors: its TFLOP/s and ratio to the default plan are printed after.
Single prefill is timed under it too (it reads FIJIT_PREFILL_WS per launch), with a
workspace (the counter its persistent CTAs claim blocks through). --ab-lib LIB runs the
--ab side on another build (its own libfijit.so: a template change needs one, as a
process keeps the kernel it first served for a spec). Both repeat, paired in order, so
one run times several builds against this one; --kinds paged leaves ragged out, and
paged-seq adds paged K/V whose pages lie in order in the pool (beside random pages: where
the pool's layout costs).
Raw numbers go to $OUT/bench_batch_prefill.json when OUT is set.
"""
import argparse
import json
import os
import statistics

import torch

from batch_shapes import add_batch_options, batch_of, shape_grid, single_len
from bench_prefill import TORCH_DTYPES, environment, time_once
from fijit.testing import BatchPrefillArgs, Fijit, Prefill, prefill_args, prefill_spec


# --kinds: each one's batch kind and page order (None: --page-order's).
KINDS = {"ragged": ("ragged", None), "paged": ("paged", None), "paged-seq": ("paged", "sequential")}


def pairs(L, causal):
    return L * (L + 1) // 2 if causal else L * L


def round_ratio_range(times, flops, n, base):
    """The lowest and highest of the rounds' ratios of n's throughput to base's, each from
    that round's medians: the clocks drift between rounds and move both alike within one,
    so this spread is what the ratio itself is known to."""
    ratios = [flops[n] / statistics.median(tn) / (flops[base] / statistics.median(tb))
              for tn, tb in zip(times[n], times[base])]
    return min(ratios), max(ratios)


def range_text(lo_hi):
    return f"[{lo_hi[0]:.2f}-{lo_hi[1]:.2f}]"


def batch_runner(pf, kind, spec, lens, H, Hkv, hd, tdt, page, page_order="random"):
    """A closure running one batch prefill of `lens` (qo = kv) of `kind`; paged K/V's
    pages in a random permutation of the pool, or in order (`page_order`)."""
    dev = "cuda"
    n = sum(lens)
    q = torch.randn(n, H, hd, device=dev, dtype=tdt)
    o = torch.empty_like(q)
    indptr = [0]
    for L in lens:
        indptr.append(indptr[-1] + L)
    args = BatchPrefillArgs()  # FI_BATCH_PREFILL_ARGS_VERSION
    keep = [q, o]
    if kind == "ragged":
        k = torch.randn(n, Hkv, hd, device=dev, dtype=tdt)
        v = torch.randn(n, Hkv, hd, device=dev, dtype=tdt)
        kv_indptr, last = indptr, None
        args.k_stride_n, args.k_stride_h = k.stride(0), k.stride(1)
        args.v_stride_n, args.v_stride_h = v.stride(0), v.stride(1)
    else:
        npages = [(L + page - 1) // page for L in lens]
        kv_indptr = [0]
        for p in npages:
            kv_indptr.append(kv_indptr[-1] + p)
        total = kv_indptr[-1]
        k = torch.randn(total, page, Hkv, hd, device=dev, dtype=tdt)
        v = torch.randn(total, page, Hkv, hd, device=dev, dtype=tdt)
        idx = (torch.randperm(total, device=dev) if page_order == "random"
               else torch.arange(total, device=dev)).to(torch.int32)
        last = [L - (p - 1) * page for L, p in zip(lens, npages)]
        last_t = torch.tensor(last, dtype=torch.int32, device=dev)
        keep += [idx, last_t]
        args.kv_indices, args.kv_last_page_len = idx.data_ptr(), last_t.data_ptr()
        args.k_stride_page, args.k_stride_n, args.k_stride_h = k.stride(0), k.stride(1), k.stride(2)
        args.v_stride_page, args.v_stride_n, args.v_stride_h = v.stride(0), v.stride(1), v.stride(2)
    plan, ws = pf.plan(spec, indptr, kv_indptr, H, Hkv, kv_last_page_len=last,
                       page_size=page if kind == "paged" else 16)  # no window: -1
    qo_t = torch.tensor(indptr, dtype=torch.int32, device=dev)
    kv_t = torch.tensor(kv_indptr, dtype=torch.int32, device=dev)
    keep += [k, v, ws, qo_t, kv_t]
    args.q, args.k, args.v, args.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    args.qo_indptr, args.kv_indptr = qo_t.data_ptr(), kv_t.data_ptr()
    args.q_stride_n, args.q_stride_h = q.stride(0), q.stride(1)
    args.o_stride_n, args.o_stride_h = o.stride(0), o.stride(1)
    stream = torch.cuda.current_stream().cuda_stream
    return (lambda: pf.batch_run(plan, args, stream)), keep, plan


def main():
    ap = argparse.ArgumentParser()
    # 10 rounds: the clocks drift between rounds by more than the 10% the batch kinds may
    # lose, and a median over 3 read 0.86-0.89x on shapes that 10 put at 0.90-0.93x (H200).
    ap.add_argument("--reps", type=int, default=6, help="timed runs of each runner a round")
    ap.add_argument("--rounds", type=int, default=10)
    add_batch_options(ap, heads="32/8")
    ap.add_argument("--page-order", choices=("random", "sequential"), default="random",
                    help="paged K/V: pages a random permutation of the pool, or in order")
    ap.add_argument("--kinds", default="ragged,paged",
                    help="batch kinds to time: ragged, paged (pages in --page-order), paged-seq "
                    "(paged, its pages in order: beside paged, where the pool's layout costs)")
    ap.add_argument("--ab", action="append", default=[],
                    help="NAME[,VAR=VAL[;VAR=VAL]]: batch plans (and single prefill) made under "
                    "that environment too, timed alongside; repeat for more sides")
    ap.add_argument("--ab-lib", action="append", default=[],
                    help="libfijit.so of the --ab side in the same place (repeat in --ab's "
                    "order; '' keeps this build)")
    opt = ap.parse_args()
    if len(opt.ab_lib) > len(opt.ab):
        ap.error("--ab-lib needs an --ab NAME[,VAR=VAL...] for each")
    kinds = opt.kinds.split(",")
    if not kinds or any(k not in KINDS for k in kinds):
        ap.error("--kinds: ragged, paged and/or paged-seq")
    lens = batch_of(opt)
    fj = Fijit()
    pf = Prefill(fj)
    # The --ab sides: (name, environment, Prefill), each on its own library where given.
    sides, libs = [], []
    for i, spec in enumerate(opt.ab):
        name, env = (spec.split(",", 1) + [""])[:2]
        lib = opt.ab_lib[i] if i < len(opt.ab_lib) else ""
        if lib:
            libs.append(Fijit(lib))
        sides.append((name, dict(kv.split("=", 1) for kv in env.split(";") if kv),
                      Prefill(libs[-1]) if lib else pf))
    dev = torch.cuda.get_device_name()
    print(f"device: {dev}; batch {opt.batch}, lengths {min(lens)}-{max(lens)} "
          f"(sum {sum(lens)}), page {opt.page}")
    print(f"{'dtype':5} {'hd':>3} {'mask':6} {'heads':>6} | {'single':>7} (L) | " +
          " | ".join(f"{k:>7} {'x single':>8} [rounds]" for k in kinds))
    rows = []
    for dtype, hd, mask, H, Hkv in shape_grid(opt.dtypes, opt.hds, opt.masks, opt.heads):
        tdt = TORCH_DTYPES[dtype]
        causal = mask == "causal"
        heads = f"{H}/{Hkv}"
        work = sum(pairs(L, causal) for L in lens)
        Ls = single_len(lens)
        q = torch.randn(Ls, H, hd, device="cuda", dtype=tdt)
        k = torch.randn(Ls, Hkv, hd, device="cuda", dtype=tdt)
        v = torch.randn(Ls, Hkv, hd, device="cuda", dtype=tdt)
        o = torch.empty_like(q)
        sargs = prefill_args(q, k, v, o)
        sspec = prefill_spec("single", dtype, hd, mask)
        # Its workspace holds the counter of the persistent CTAs' claims.
        sws = pf.workspace(sspec, sargs)  # noqa: F841 (kept alive)
        stream = torch.cuda.current_stream().cuda_stream
        runners = {"single": lambda: pf.run(sspec, sargs, stream)}
        for ab_name, ab_env, ab_pf in sides:
            def single_ab(env=ab_env, spf=ab_pf):  # reads FIJIT_PREFILL_WS per launch
                with environment(env):
                    spf.run(sspec, sargs, stream)
            runners[f"single:{ab_name}"] = single_ab
        plans, keep = [], []
        for kind in kinds:
            base, order = KINDS[kind]
            bspec = prefill_spec(base, dtype, hd, mask)
            for name, env, bpf in [(kind, {}, pf)] + [
                    (f"{kind}:{n}", e, p) for n, e, p in sides]:
                with environment(env):
                    fn, kp, plan = batch_runner(bpf, base, bspec, lens, H, Hkv, hd, tdt,
                                                opt.page, order or opt.page_order)
                runners[name] = fn
                plans.append((bpf, plan))
                keep.append(kp)
        times = {n: [[] for _ in range(opt.rounds)] for n in runners}
        for fn in runners.values():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        for r in range(opt.rounds):
            order = list(runners) if r % 2 == 0 else list(reversed(runners))
            for n in order:
                for _ in range(opt.reps):
                    times[n][r].append(time_once(runners[n]))
        single_flops = 4.0 * H * hd * pairs(Ls, causal)
        batch_flops = 4.0 * H * hd * work
        flops = {n: single_flops if n.split(":")[0] == "single" else batch_flops
                 for n in runners}
        tf = {n: flops[n] / statistics.median(sum(t, [])) / 1e12
              for n, t in times.items()}
        spread = {n: round_ratio_range(times, flops, n, "single") for n in kinds}
        ab = "".join(f" | {n} {tf[n]:7.1f} x default {tf[n] / tf[n.split(':')[0]]:.2f}"
                     f" {range_text(round_ratio_range(times, flops, n, n.split(':')[0]))}"
                     for n in tf if ":" in n)
        batch = " | ".join(f"{tf[k]:7.1f} {tf[k] / tf['single']:8.2f} "
                           f"{range_text(spread[k])}" for k in kinds)
        print(f"{dtype:5} {hd:3d} {mask:6} {heads:>6} | {tf['single']:7.1f} ({Ls}) | "
              f"{batch}{ab}", flush=True)
        rows.append({"dtype": dtype, "hd": hd, "mask": mask, "heads": heads,
                     "lens": lens, "single_len": Ls, "tflops": tf,
                     "round_ratio_range": spread})
        for bpf, plan in plans:
            bpf.plan_free(plan)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_batch_prefill.json"), "w") as f:
            json.dump({"device": dev, "rows": rows}, f)
    fj.close()
    for lib in libs:
        lib.close()


if __name__ == "__main__":
    main()
