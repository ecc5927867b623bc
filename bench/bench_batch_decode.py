#!/usr/bin/env python3
"""Batch decode benchmark: fijit's fi_batch_decode_run over a paged KV cache
(page_size 16, HND pages handed out in random order) against the device copy
ceiling and against torch SDPA's default backend on the same values gathered
into dense [B, H, L, D] tensors (the gather is outside the timed region).

Method (as bench_decode.py): CUDA events around each call, median of --reps
after --warmup; before every timed run 256 MiB are overwritten and another
256 MiB read (L2 holds only clean lines), then torch.cuda._sleep keeps the GPU
busy while the host queues the timed call, so host dispatch stays out of
short kernels' times. GB/s counts the K and V bytes read. Random data.
The paged K and V caches of every shape, and SDPA's dense copies of them,
are views of pools allocated once up front, as a serving engine allocates
its cache. With per-shape allocations, a shape measured after larger ones
had been allocated and freed ran slower inside the kernel (batch 64 x kv 1k
x 32/32: 424 us traced from first block to last, 361 us in a fresh
process; pool size, pool contents and a prior SDPA call alone did not do
it).
The plan is made once per shape (outside the timing), as a model would per
step. "nosplit" times the same batch planned with max_splits = 1.

Before/after comparisons: --config NAME,LIB[,TEMPLATE_DIR[,VAR=VALUE;...]] (repeat
it; as bench_prefill.py) times several fijit builds on the same tensors, each with
its own plan; with --rounds R the configs and SDPA are timed in R rounds, the order
rotated each round, and each gets the median of its rounds' medians. The first
config is the reference of the 'x ref' columns.

Raw numbers go to $OUT/bench_batch_decode.json when OUT is set; the table is
printed last.
"""
import argparse
import json
import os
import statistics
import sys
import warnings

import torch
import torch.nn.functional as F

from bench_decode import Timer, copy_ceiling
from bench_prefill import Config
from fijit.testing import FI_KIND_BATCH_DECODE, BatchDecode, Fijit, batch_decode_args


class QuietTimer(Timer):
    """Timer whose flush ends with a ~50 us GPU sleep, so the host has queued
    the timed call before the start event is reached."""

    def flush_l2(self, i):
        super().flush_l2(i)
        torch.cuda._sleep(100000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--lens", default="1024,4096,16384,32768")
    ap.add_argument("--heads", default="32/8,32/32")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--kv-dtype", default="", help="fp8_e4m3 or fp8_e5m2 (no SDPA then)")
    ap.add_argument("--pos", default="none", choices=["none", "rope"],
                    help="rope: RoPE on the fly (rope_theta 1e4; no SDPA then)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--no-nosplit", action="store_true", help="skip the max_splits=1 timing")
    ap.add_argument("--page-order", default="random", choices=["random", "seq", "same"],
                    help="pages of the cache handed out in random or in sequential order; "
                         "same: every entry of the table is page 0 (K/V from L2: what the "
                         "kernel costs with DRAM out of the way)")
    ap.add_argument("--sm-count", type=int, default=0,
                    help="SM count the plan assumes (0: the device's; tuning experiments)")
    ap.add_argument("--read-ceiling", default="",
                    help="JSON written by bench/read_ceiling.cu: adds %%read, fijit's GB/s over "
                         "the read ceiling of random 4 KiB chunks (this paged layout's reads)")
    ap.add_argument("--config", action="append", default=[],
                    help="NAME,LIB[,TEMPLATE_DIR[,VAR=VALUE;...]]: a fijit build to time "
                         "(repeat to compare builds; the first is the reference)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of interleaved timings of the configs and SDPA")
    ap.add_argument("--tag", default="")
    opt = ap.parse_args()

    warnings.filterwarnings("ignore", category=UserWarning)
    torch.cuda.init()
    dev_name = torch.cuda.get_device_name()
    timer = QuietTimer(opt.warmup, opt.reps)
    ceiling = copy_ceiling(timer)
    print(f"bench_batch_decode on {dev_name}: copy ceiling {ceiling:.0f} GB/s, median of "
          f"{opt.reps}", flush=True)
    configs = [Config(c) for c in opt.config] or [Config("fijit")]
    for cfg in configs:
        cfg.bd = BatchDecode(cfg.fj)
    multi = len(configs) > 1
    hd, ps = opt.head_dim, opt.page_size
    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    rows = []
    kv_esize = 1 if opt.kv_dtype else 2
    pool_bytes = max(B * ((L + ps - 1) // ps) * int(h.split("/")[1]) * ps * hd * kv_esize
                     for B in map(int, opt.batches.split(",")) for L in map(int, opt.lens.split(","))
                     for h in opt.heads.split(","))
    torch.cuda.empty_cache()  # the copy ceiling's buffers
    k_pool = torch.empty(pool_bytes, dtype=torch.uint8, device="cuda")
    v_pool = torch.empty(pool_bytes, dtype=torch.uint8, device="cuda")
    dense_bytes = 0 if opt.kv_dtype or opt.pos != "none" else max(
        B * int(h.split("/")[1]) * L * hd * 2 for B in map(int, opt.batches.split(","))
        for L in map(int, opt.lens.split(",")) for h in opt.heads.split(","))
    kd_pool = torch.empty(dense_bytes, dtype=torch.uint8, device="cuda")
    vd_pool = torch.empty(dense_bytes, dtype=torch.uint8, device="cuda")
    for dtype in opt.dtypes.split(","):
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        kvd = opt.kv_dtype or None
        kv_tdt = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}.get(kvd, tdt)
        spec = Fijit.spec(dtype, hd, pos=opt.pos, kv_dtype=kvd, kind=FI_KIND_BATCH_DECODE)
        for heads in opt.heads.split(","):
            hq, hkv = map(int, heads.split("/"))
            for B in map(int, opt.batches.split(",")):
                for L in map(int, opt.lens.split(",")):
                    npg = (L + ps - 1) // ps
                    total = B * npg
                    shape, nbytes = (total, hkv, ps, hd), total * hkv * ps * hd * kv_esize
                    kc = k_pool[:nbytes].view(kv_tdt).view(shape)
                    vc = v_pool[:nbytes].view(kv_tdt).view(shape)
                    for c in (kc, vc):
                        if kvd is None:
                            c.normal_(generator=gen)
                        else:
                            c.copy_(torch.randn(shape, device="cuda", generator=gen,
                                                dtype=torch.float16).to(kv_tdt))
                    perm = (torch.randperm(total, device="cuda", generator=gen)
                            if opt.page_order == "random" else
                            torch.arange(total, device="cuda") if opt.page_order == "seq" else
                            torch.zeros(total, device="cuda", dtype=torch.int64)).to(torch.int32)
                    indptr = [b * npg for b in range(B + 1)]
                    last = [L - (npg - 1) * ps] * B
                    q = torch.randn(B, hq, hd, device="cuda", generator=gen).to(tdt)
                    kv_bytes = 2 * B * hkv * L * hd * kc.element_size()

                    plans, runners, outs = [], {}, {}
                    for cfg in configs:
                        o = outs[cfg.name] = torch.empty(B, hq, hd, device="cuda", dtype=tdt)
                        with cfg.applied():
                            plan, ws = cfg.bd.plan(spec, indptr, last, hq, hkv, ps,
                                                   sm_count=opt.sm_count)
                            args = batch_decode_args(q, kc, vc, perm, o, None, ws, layout="HND",
                                                     k_scale=1.0, v_scale=1.0)
                            cfg.bd.run(plan, args, stream)  # compile or load before timing
                        plans.append((cfg, plan, ws))
                        runners[cfg.name] = (lambda c=cfg, pl=plan, a=args:
                                             c.bd.run(pl, a, stream))
                    items, msp = configs[0].bd.describe(plans[0][1])
                    ns_us = None
                    if msp > 1 and not opt.no_nosplit:
                        cfg = configs[0]
                        with cfg.applied():
                            plan1, ws1 = cfg.bd.plan(spec, indptr, last, hq, hkv, ps, max_splits=1)
                        a1 = batch_decode_args(q, kc, vc, perm, outs[cfg.name], None, ws1,
                                               layout="HND", k_scale=1.0, v_scale=1.0)
                        cfg.bd.run(plan1, a1, stream)
                        ns_us = timer.median_us(lambda: cfg.bd.run(plan1, a1, stream))[0]
                        cfg.bd.free(plan1)
                        del ws1
                    for fn in runners.values():
                        fn()  # the outputs compared below are the plans' own
                    torch.cuda.synchronize()
                    max_diff = {}
                    if kvd is None and opt.pos == "none":
                        # Gather the pages into SDPA's dense [B, Hkv, L, D] (untimed).
                        # One request at a time: the largest shape leaves no room for more.
                        idx = perm.long().view(B, npg)
                        nd = B * hkv * L * hd * 2
                        kd = kd_pool[:nd].view(tdt).view(B, hkv, L, hd)
                        vd = vd_pool[:nd].view(tdt).view(B, hkv, L, hd)
                        for b in range(B):
                            kd[b] = kc[idx[b]].permute(1, 0, 2, 3).reshape(hkv, npg * ps, hd)[:, :L]
                            vd[b] = vc[idx[b]].permute(1, 0, 2, 3).reshape(hkv, npg * ps, hd)[:, :L]
                        q4 = q.view(B, hq, 1, hd)

                        def sdpa():
                            return F.scaled_dot_product_attention(q4, kd, vd, enable_gqa=hq != hkv)
                        ref = sdpa()
                        torch.cuda.synchronize()
                        for name, o in outs.items():
                            max_diff[name] = float((ref.view(B, hq, hd).float() - o.float()).abs().max())
                        runners["sdpa"] = sdpa
                        del ref
                    medians = {name: [] for name in runners}
                    mins = {name: [] for name in runners}
                    names = list(runners)
                    for r in range(opt.rounds):
                        for name in names[r % len(names):] + names[:r % len(names)]:
                            med, mn = timer.median_us(runners[name])
                            medians[name].append(med)
                            mins[name].append(mn)
                    us = {name: statistics.median(v) for name, v in medians.items()}
                    fi_us, fi_min = us[configs[0].name], min(mins[configs[0].name])
                    sdpa_us = us.get("sdpa")
                    for cfg, plan, _ in plans:
                        cfg.bd.free(plan)
                    if "sdpa" in runners:
                        del kd, vd
                    row = dict(dtype=dtype, kv_dtype=kvd or dtype, pos=opt.pos, heads=heads, batch=B,
                               page_order=opt.page_order,
                               kv_len=L, hd=hd, page_size=ps, kv_bytes=kv_bytes, items=items,
                               max_request_splits=msp, fijit_us=fi_us, fijit_min_us=fi_min,
                               fijit_nosplit_us=ns_us,
                               fijit_gbs=kv_bytes / (fi_us * 1e-6) / 1e9, sdpa_us=sdpa_us,
                               max_abs_diff_vs_sdpa=max_diff.get(configs[0].name))
                    if multi:
                        row["configs_us"] = {c.name: us[c.name] for c in configs}
                        row["configs_max_abs_diff_vs_sdpa"] = max_diff
                    row["pct_copy"] = 100.0 * row["fijit_gbs"] / ceiling
                    rows.append(row)
                    print(f"  {dtype} {heads:>5} B={B:3d} L={L:6d}: fijit {fi_us:8.1f} us "
                          f"{row['fijit_gbs']:6.0f} GB/s ({row['pct_copy']:.0f}%) items {items} "
                          f"(x{msp})" + (f" nosplit {ns_us:.1f}" if ns_us else "")
                          + (f", sdpa {sdpa_us:.1f} us, max|diff| {max(max_diff.values()):.2e}"
                             if sdpa_us else "")
                          + "".join(f", {c.name} {us[c.name]:.1f}" for c in configs[1:]),
                          flush=True)
                    del kc, vc, q, outs, plans, runners, perm
                    torch.cuda.empty_cache()
    for cfg in configs:
        cfg.fj.close()
    read = None
    if opt.read_ceiling:
        with open(opt.read_ceiling) as f:
            read = json.load(f)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"bench_batch_decode{opt.tag}.json"), "w") as f:
            json.dump(dict(device=dev_name, copy_ceiling_gbs=ceiling, read_ceiling=read,
                           reps=opt.reps, rows=rows), f, indent=1)
    print(f"\nbatch decode, paged (page {ps}, HND, {opt.page_order} pages), hd {hd}, {dev_name}, copy ceiling "
          f"{ceiling:.0f} GB/s; sdpa = default backend on gathered dense KV; "
          f"ratio = sdpa time / fijit time")
    if read:
        print(f"read ceiling (bench/read_ceiling.cu): {read['random_4k_gbs']:.0f} GB/s in random "
              f"4 KiB chunks (these pages; %read), {read['contiguous_gbs']:.0f} GB/s contiguous "
              f"(SDPA's dense copy)")
    print(f"{'dtype':9} {'heads':>5} {'batch':>5} {'kv_len':>6} {'fijit us':>9} {'GB/s':>6} "
          f"{'%copy':>6}" + (f" {'%read':>6}" if read else "") +
          f" {'sdpa us':>8} {'ratio':>6} {'splits':>6} {'nosplit us':>10}"
          + "".join(f" {c.name[:9]:>9} {'x ref':>6}" for c in configs[1:]))
    for r in rows:
        s_txt = f"{r['sdpa_us']:8.1f}" if r["sdpa_us"] else "     n/a"
        x_txt = f"{r['sdpa_us'] / r['fijit_us']:5.2f}x" if r["sdpa_us"] else "   n/a"
        n_txt = f"{r['fijit_nosplit_us']:10.1f}" if r["fijit_nosplit_us"] else "         -"
        name = r["dtype"] if r["kv_dtype"] == r["dtype"] else f"{r['dtype']}/{r['kv_dtype'][4:]}"
        name += "+rope" if r["pos"] == "rope" else ""
        print(f"{name:9} {r['heads']:>5} {r['batch']:5d} {r['kv_len']:6d} {r['fijit_us']:9.1f} "
              f"{r['fijit_gbs']:6.0f} {r['pct_copy']:5.0f}% "
              + (f"{100 * r['fijit_gbs'] / read['random_4k_gbs']:5.0f}% " if read else "")
              + f"{s_txt} {x_txt} "
              f"{r['max_request_splits']:6d} {n_txt}"
              + "".join(f" {r['configs_us'][c.name]:9.1f} {r['fijit_us'] / r['configs_us'][c.name]:5.3f}x"
                        for c in configs[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
