#!/usr/bin/env python3
"""Decode benchmark: fijit's fi_decode_run against the device copy ceiling and
against torch.nn.functional.scaled_dot_product_attention on the same tensors,
in the same process.

Method: CUDA events around each call, median of --reps runs after --warmup
runs; before every timed run a 256 MiB buffer is overwritten so that K/V come
from HBM, not L2 (the flush is queued ahead, so the host's launch overhead is
hidden behind it as it would be in a model's stream). GB/s counts the bytes of
K and V read (q and o are negligible); the copy ceiling is a torch device copy
of a 1 GiB buffer counting read + write. K/V are stored [kv_heads, kv_len, hd]
(HND), the layout SDPA takes, and both read the very same tensors.

Raw numbers go to $OUT/bench_decode.json when OUT is set. The table is printed last.
"""
import argparse
import json
import os
import statistics
import sys

import warnings

import torch
import torch.nn.functional as F

from fijit.testing import Fijit, decode_args

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch: default backend only
    SDPBackend = sdpa_kernel = None

FLUSH_BYTES = 256 << 20


class L2Flush:
    """Queued before a timed run, so that its data comes from HBM, not L2.

    mode "write": overwrite a 256 MiB buffer. That leaves L2 full of dirty
    lines, and the timed kernel then pays for writing them back to HBM (up to
    the L2 size, 50 MiB on H100: ~15 us of traffic that is not the kernel's).
    mode "write+read" (default): overwrite, then read another 256 MiB buffer,
    so L2 holds only clean lines when the timed kernel starts.
    """

    def __init__(self, mode="write+read"):
        self.mode = mode
        self.dirty = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        self.clean = torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")

    def __call__(self, i=0):
        self.dirty.fill_(float(i))
        if self.mode == "write+read":
            self.clean.sum()


class Timer:
    """Median kernel time between CUDA events, L2 flushed before every run (L2Flush)."""

    def __init__(self, warmup, reps, flush="write+read"):
        self.warmup, self.reps = warmup, reps
        self.l2 = L2Flush(flush)

    def flush_l2(self, i):
        self.l2(i)

    def median_us(self, fn):
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for i in range(self.reps):
            self.flush_l2(i)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
        return statistics.median(times), min(times)


def copy_ceiling(timer):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    med, _ = timer.median_us(lambda: b.copy_(a))
    return 2 * n / (med * 1e-6) / 1e9


def sdpa_variants(q4, k4, v4, gqa):
    """(name, fn) for the default backend and each explicit one torch offers."""
    kw = {"enable_gqa": True} if gqa else {}
    out = [("default", lambda: F.scaled_dot_product_attention(q4, k4, v4, **kw))]
    if sdpa_kernel is not None:
        for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
            be = getattr(SDPBackend, name, None)
            if be is None:
                continue

            def fn(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q4, k4, v4, **kw)
            out.append((name.split("_")[0].lower(), fn))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--lens", default="1024,4096,16384,32768,65536")
    ap.add_argument("--heads", default="32/8,32/32")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--num-splits", type=int, default=0, help="0: fijit's automatic plan")
    ap.add_argument("--flush", default="write+read", choices=["write", "write+read"])
    ap.add_argument("--sweep-splits", default="",
                    help="comma list of num_splits to time fijit with, per shape (tuning)")
    ap.add_argument("--tag", default="", help="suffix of the JSON file name")
    opt = ap.parse_args()

    # SDPA explains at length why a backend declines a shape; the table says n/a.
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.cuda.init()
    dev_name = torch.cuda.get_device_name()
    timer = Timer(opt.warmup, opt.reps, opt.flush)
    ceiling = copy_ceiling(timer)
    print(f"bench_decode on {dev_name}: copy ceiling {ceiling:.0f} GB/s (read+write), "
          f"median of {opt.reps} runs, L2 flush: {opt.flush}", flush=True)
    fj = Fijit()
    hd = opt.head_dim
    rows = []
    for dtype in opt.dtypes.split(","):
        tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        spec = Fijit.spec(dtype, hd)
        for heads in opt.heads.split(","):
            hq, hkv = map(int, heads.split("/"))
            for L in map(int, opt.lens.split(",")):
                q = torch.randn(hq, hd, device="cuda", dtype=tdt)
                k = torch.randn(hkv, L, hd, device="cuda", dtype=tdt)
                v = torch.randn(hkv, L, hd, device="cuda", dtype=tdt)
                o = torch.empty(hq, hd, device="cuda", dtype=tdt)
                args = decode_args(q, k, v, o, None, layout="HND", max_splits=opt.num_splits)
                ws_bytes = fj.workspace_size(spec, args)
                ws = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device="cuda")
                args.workspace, args.workspace_bytes = ws.data_ptr(), ws_bytes
                stream = torch.cuda.current_stream().cuda_stream
                kv_bytes = 2 * hkv * L * hd * q.element_size()

                fj.run(spec, args, stream)  # compile or load before timing
                fi_us, fi_min = timer.median_us(lambda: fj.run(spec, args, stream))

                sweep = {}
                for ns in filter(None, opt.sweep_splits.split(",")):
                    a2 = decode_args(q, k, v, o, None, layout="HND", max_splits=int(ns))
                    need = fj.workspace_size(spec, a2)
                    w2 = torch.empty(max(need, 16), dtype=torch.uint8, device="cuda")
                    a2.workspace, a2.workspace_bytes = w2.data_ptr(), need
                    fj.run(spec, a2, stream)
                    sweep[int(ns)] = timer.median_us(lambda: fj.run(spec, a2, stream))[0]
                if sweep:
                    print(f"  splits sweep {dtype} {heads} L={L}: " + ", ".join(
                        f"{ns_}:{t:.1f}" for ns_, t in sweep.items()), flush=True)

                # Same tensors as SDPA's [B, H, S, D].
                q4, k4, v4 = q.view(1, hq, 1, hd), k.view(1, hkv, L, hd), v.view(1, hkv, L, hd)
                ref = F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=hq != hkv)
                max_diff = float((ref.view(hq, hd).float() - o.float()).abs().max())
                sdpa = {}
                for name, fn in sdpa_variants(q4, k4, v4, hq != hkv):
                    try:
                        fn()
                        torch.cuda.synchronize()
                        sdpa[name] = timer.median_us(fn)[0]
                    except Exception as e:  # backend does not take this shape
                        sdpa[name] = None
                        sdpa[name + "_error"] = str(e).splitlines()[0][:120] if str(e) else "?"
                times = {k_: t for k_, t in sdpa.items() if isinstance(t, float)}
                best_name = min(times, key=times.get) if times else None
                row = dict(dtype=dtype, heads=heads, kv_len=L, hd=hd, kv_bytes=kv_bytes,
                           fijit_us=fi_us, fijit_min_us=fi_min,
                           fijit_gbs=kv_bytes / (fi_us * 1e-6) / 1e9,
                           num_splits=opt.num_splits, workspace_bytes=ws_bytes,
                           splits_sweep_us=sweep,
                           max_abs_diff_vs_sdpa=max_diff, sdpa_us=sdpa,
                           sdpa_best=best_name,
                           sdpa_best_us=times[best_name] if best_name else None)
                row["pct_copy"] = 100.0 * row["fijit_gbs"] / ceiling
                rows.append(row)
                print(f"  {dtype} {heads:>5} L={L:6d}: fijit {fi_us:8.1f} us "
                      f"{row['fijit_gbs']:6.0f} GB/s ({row['pct_copy']:.0f}%), sdpa "
                      + ", ".join(f"{n_}={t:.1f}" for n_, t in times.items())
                      + f", max|diff| {max_diff:.2e}", flush=True)
                del q, k, v, o, ws
    fj.close()

    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"bench_decode{opt.tag}.json"), "w") as f:
            json.dump(dict(device=dev_name, copy_ceiling_gbs=ceiling, reps=opt.reps,
                           flush=opt.flush,
                           warmup=opt.warmup, rows=rows), f, indent=1)

    print(f"\ndecode, batch 1, hd {hd}, {dev_name}, copy ceiling {ceiling:.0f} GB/s, "
          f"L2 flush {opt.flush}; sdpa = fastest SDPA backend; speedup = sdpa time / fijit time")
    print(f"{'dtype':5} {'heads':>5} {'kv_len':>7} {'fijit us':>9} {'GB/s':>6} {'%copy':>6} "
          f"{'sdpa us':>8} {'sdpa backend':>12} {'speedup':>8}")
    for r in rows:
        s_us = r["sdpa_best_us"]
        s_txt = f"{s_us:8.1f}" if s_us else "     n/a"
        x_txt = f"{s_us / r['fijit_us']:7.2f}x" if s_us else "     n/a"
        print(f"{r['dtype']:5} {r['heads']:>5} {r['kv_len']:7d} {r['fijit_us']:9.1f} "
              f"{r['fijit_gbs']:6.0f} {r['pct_copy']:5.0f}% {s_txt} {str(r['sdpa_best']):>12} "
              f"{x_txt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
