#!/usr/bin/env python3
"""Single prefill with RoPE, with and without the optional workspace (the keys
rotated once by a pre-pass launch, or each K tile rotated in every CTA that
reads it), side by side in one process on the same tensors: CUDA events around
each call, warm-up first, median of --reps interleaved runs. On sm_90a the
workspace path runs the Hopper main loop, so the workspace is timed again on
the tile kernels (FIJIT_PREFILL_WS=0): that output must be bit-identical to the
tile-rotation one, and the Hopper one agree within fp16 rounding. fp16, batch 1.
"""
import argparse
import os
import statistics
import sys

import torch

from bench_prefill import time_once
from fijit.testing import Fijit, Prefill, prefill_args, prefill_spec

SHAPES = [(128, 4096, 32, 8, "causal"), (128, 8192, 32, 8, "causal"),
          (128, 8192, 32, 32, "none"), (64, 8192, 32, 8, "causal")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    opt = ap.parse_args()
    pf = Prefill(Fijit())
    stream = torch.cuda.current_stream().cuda_stream
    print(f"single prefill, RoPE, fp16, {torch.cuda.get_device_name()}, median of {opt.reps}")
    print(f"{'hd':>3} {'mask':6} {'heads':>5} {'seq':>5} | {'tile rot us':>11} "
          f"{'ws tiles us':>11} {'workspace us':>12} | {'speedup':>7} {'same bits':>9} "
          f"{'rel diff':>8}")
    failed = 0
    for hd, L, H, Hkv, mask in SHAPES:
        q = torch.randn(L, H, hd, device="cuda", dtype=torch.float16)
        k = torch.randn(L, Hkv, hd, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        o_tile, o_wt, o_ws = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
        spec = prefill_spec("single", "fp16", hd, mask, "rope", 0)
        a_tile = prefill_args(q, k, v, o_tile, rope_theta=1e4)
        a_wt = prefill_args(q, k, v, o_wt, rope_theta=1e4)
        a_ws = prefill_args(q, k, v, o_ws, rope_theta=1e4)
        ws = pf.workspace(spec, a_ws)  # noqa: F841 (kept alive while a_ws is used)
        wt = pf.workspace(spec, a_wt)  # noqa: F841

        def on_tiles():
            os.environ["FIJIT_PREFILL_WS"] = "0"  # read at each single-prefill launch
            try:
                pf.run(spec, a_wt, stream)
            finally:
                del os.environ["FIJIT_PREFILL_WS"]
        runs = {"tile": lambda: pf.run(spec, a_tile, stream), "ws_tiles": on_tiles,
                "workspace": lambda: pf.run(spec, a_ws, stream)}
        for fn in runs.values():
            for _ in range(5):
                fn()
        secs = {name: [] for name in runs}
        for _ in range(opt.reps):
            for name, fn in runs.items():
                secs[name].append(time_once(fn))
        t_tile, t_wt, t_ws = (statistics.median(secs[n]) * 1e6
                              for n in ("tile", "ws_tiles", "workspace"))
        same = torch.equal(o_tile, o_wt)
        rel = float((o_ws.float() - o_tile.float()).abs().max() / o_tile.float().abs().max())
        failed += not same or not rel < 5e-3
        print(f"{hd:3d} {mask:6} {H:>2}/{Hkv:<2} {L:5d} | {t_tile:11.0f} {t_wt:11.0f} "
              f"{t_ws:12.0f} | {t_tile / t_ws:6.2f}x {str(same):>9} {rel:8.1e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
