#!/usr/bin/env python3
"""MLA prefill benchmark: fijit's prefill with q/k of head_dim 192 and v/o of 128 (the
non-absorbed attention DeepSeek-V3/R1 and Kimi K2 prefill with) against torch SDPA's
cuDNN backend (which takes d_qk != d_v; flash does not) on the same tensors, in one
process. Batch ragged prefill (one launch for the batch) of --batch requests of --seq
tokens, --heads query heads (MHA, as the model: 128 heads, or 16 on 8 GPUs), causal and
not, fp16 and bf16. Timing as bench_prefill.py: CUDA events, L2 flushed before each run
(time_once), warm-up, runners interleaved over --rounds rounds, median of --reps runs.
TFLOP/s counts 2 * batch * heads * (192 + 128) * visible (query, key) pairs (L^2, or
L(L+1)/2 causal). The issue's target: >= 1.0x cuDNN at seq >= 4k. Raw numbers go to
$OUT/bench_mla_prefill.json when OUT is set.

    FIJIT_LIBRARY=build/libfijit.so python3 bench/bench_mla_prefill.py [--seq 1024,4096,8192]
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
from bench_prefill import (SDPBackend, TORCH_DTYPES, fmt, ratio, record_times,  # noqa: E402
                           sdpa_kernel, time_runners, visible_pairs)

DQK, DVO = 192, 128


def bench_shape(dtype, causal, H, L, B, opt):
    tdt = TORCH_DTYPES[dtype]
    q = torch.randn(B * L, H, DQK, device="cuda", dtype=tdt)
    k = torch.randn(B * L, H, DQK, device="cuda", dtype=tdt)
    v = torch.randn(B * L, H, DVO, device="cuda", dtype=tdt)
    cu = torch.arange(0, (B + 1) * L, L, dtype=torch.int32, device="cuda")
    ws = torch.empty(0, dtype=torch.uint8, device="cuda")
    plan = fijit.BatchPrefillPlan(ws).plan(cu.tolist(), cu.tolist(), H, H, DQK, head_dim_vo=DVO,
                                           q_dtype=tdt, causal=causal, grow_workspace=True)
    out = torch.empty(B * L, H, DVO, device="cuda", dtype=tdt)
    runners = {"fijit": lambda: plan.run(q, k, v, out=out)}
    res = dict(dtype=dtype, causal=causal, heads=H, seq=L, batch=B)
    qs, ks, vs = (t.view(B, L, H, -1).transpose(1, 2) for t in (q, k, v))
    if sdpa_kernel is not None and getattr(SDPBackend, "CUDNN_ATTENTION", None) is not None:
        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        try:
            ref = cudnn().transpose(1, 2).reshape(B * L, H, DVO)
            runners["cudnn"] = cudnn
            runners["fijit"]()
            res["max_diff_vs_cudnn"] = float((out.float() - ref.float()).abs().max())
        except Exception as e:  # cuDNN absent or refusing the shape
            res["cudnn_error"] = str(e)[:200]
    flops = 2.0 * B * H * (DQK + DVO) * visible_pairs("causal" if causal else "none", L, 0)
    times = time_runners(runners, opt.reps, opt.rounds, opt.warmup, seed=L * H)
    for name, ts in times.items():
        record_times(res, name, ts, flops)
    plan.close()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", default="1024,4096,8192,16384")
    ap.add_argument("--heads", default="16,128")
    ap.add_argument("--batch", type=int, default=0, help="0: 16k tokens per batch")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=5)
    opt = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, fijit "
          f"{fijit.library_version()}; hd {DQK}/{DVO}, median of {opt.reps} runs, L2 flushed")
    print(f"{'dtype':5} {'mask':6} {'heads':>5} {'seq':>6} {'batch':>5} {'fijit':>7} "
          f"{'cudnn':>7} {'x cudnn':>7}  TFLOP/s")
    rows = []
    for dtype in opt.dtypes.split(","):
        for causal in (True, False):
            for H in (int(h) for h in opt.heads.split(",")):
                for L in (int(s) for s in opt.seq.split(",")):
                    B = opt.batch or max(1, 16384 // L)
                    r = bench_shape(dtype, causal, H, L, B, opt)
                    rows.append(r)
                    print(f"{dtype:5} {'causal' if causal else 'none':6} {H:5} {L:6} {B:5} "
                          f"{fmt(r.get('fijit_tflops'))} {fmt(r.get('cudnn_tflops'))} "
                          f"{ratio(r.get('fijit_tflops'), r.get('cudnn_tflops')):>7}",
                          flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_mla_prefill.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
