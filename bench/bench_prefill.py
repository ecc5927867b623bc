#!/usr/bin/env python3
"""Prefill benchmark: fijit (batch ragged prefill, one launch for the batch) against
torch SDPA's flash and cuDNN backends, side by side in one process on the same
tensors. CUDA events around each launch, warm-up first, median of --reps runs.

TFLOP/s counts 4 * batch * qo_heads * head_dim * (visible (query, key) pairs):
L^2 pairs without a mask, L(L+1)/2 with causal. Default grid: seq 1k/4k/8k x hd
64/128 x causal and not x fp16/bf16 x heads 32/32 and 32/8, batch 4.
Raw numbers go to $OUT/bench_prefill.json when OUT is set.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "gpu"))
from fijit_py import BatchPrefillArgs, Fijit, Prefill, prefill_spec  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch
    SDPBackend = sdpa_kernel = None

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def time_fn(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times), min(times)


def bench_one(pf, dtype, hd, causal, H, Hkv, L, B, reps, warmup, tile=0, sdpa=True):
    tdt = TORCH_DTYPES[dtype]
    dev = "cuda"
    q = torch.randn(B * L, H, hd, device=dev, dtype=tdt)
    k = torch.randn(B * L, Hkv, hd, device=dev, dtype=tdt)
    v = torch.randn(B * L, Hkv, hd, device=dev, dtype=tdt)
    o = torch.empty_like(q)
    pairs = L * (L + 1) // 2 if causal else L * L
    flops = 4.0 * B * H * hd * pairs
    res = {"dtype": dtype, "hd": hd, "causal": causal, "heads": f"{H}/{Hkv}", "seq": L,
           "batch": B, "flops": flops}

    spec = prefill_spec("ragged", dtype, hd, "causal" if causal else "none")
    indptr = [i * L for i in range(B + 1)]
    plan, ws = pf.plan(spec, indptr, indptr, H, Hkv, cta_tile_q=tile)
    ind_t = torch.tensor(indptr, dtype=torch.int32, device=dev)
    a = BatchPrefillArgs()
    a.version = 1
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    a.qo_indptr = a.kv_indptr = ind_t.data_ptr()
    a.q_stride_n, a.q_stride_h, a.o_stride_n, a.o_stride_h = q.stride(0), q.stride(1), o.stride(0), o.stride(1)
    a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    a.window_left = -1
    stream = torch.cuda.current_stream().cuda_stream

    def run_fijit():
        pf.batch_run(plan, a, stream)

    t, tmin = time_fn(run_fijit, reps, warmup)
    res["fijit_s"], res["fijit_tflops"], res["fijit_tflops_best"] = t, flops / t / 1e12, flops / tmin / 1e12

    # SDPA on [B, H, L, D] views of the same tensors; K/V expanded for GQA outside timing.
    qs = q.view(B, L, H, hd).transpose(1, 2)
    G = H // Hkv
    ks = k.view(B, L, Hkv, hd).repeat_interleave(G, dim=2).transpose(1, 2) if G > 1 else \
        k.view(B, L, Hkv, hd).transpose(1, 2)
    vs = v.view(B, L, Hkv, hd).repeat_interleave(G, dim=2).transpose(1, 2) if G > 1 else \
        v.view(B, L, Hkv, hd).transpose(1, 2)
    ref = None
    for name, backend in (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION")):
        if sdpa_kernel is None or not sdpa:
            res[f"{name}_tflops"] = None
            continue
        be = getattr(SDPBackend, backend, None)
        try:
            def run_sdpa():
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
            out = run_sdpa()
            if ref is None:
                ref = out
            t, tmin = time_fn(run_sdpa, reps, warmup)
            res[f"{name}_s"], res[f"{name}_tflops"] = t, flops / t / 1e12
            res[f"{name}_tflops_best"] = flops / tmin / 1e12
        except Exception as e:  # backend not available for this shape/dtype
            res[f"{name}_tflops"] = None
            res[f"{name}_error"] = str(e)[:200]
    run_fijit()
    torch.cuda.synchronize()
    if ref is not None:
        d = (o.view(B, L, H, hd).transpose(1, 2).float() - ref.float()).abs().max()
        res["max_abs_diff_vs_sdpa"] = float(d)
    pf.plan_free(plan)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seqs", default="1024,4096,8192")
    ap.add_argument("--hds", default="64,128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--heads", default="32/32,32/8")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tile", type=int, default=0, help="force the CTA query tile (128, 64, 16)")
    ap.add_argument("--no-sdpa", action="store_true", help="fijit only")
    ap.add_argument("--label", default="", help="tag for the raw results file")
    opt = ap.parse_args()

    fj = Fijit()
    pf = Prefill(fj)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    t0 = time.time()
    for dtype in opt.dtypes.split(","):
        for hd in [int(x) for x in opt.hds.split(",")]:
            for causal in (False, True):
                for heads in opt.heads.split(","):
                    H, Hkv = (int(x) for x in heads.split("/"))
                    for L in [int(x) for x in opt.seqs.split(",")]:
                        try:
                            rows.append(bench_one(pf, dtype, hd, causal, H, Hkv, L, opt.batch,
                                                  opt.reps, opt.warmup, opt.tile,
                                                  not opt.no_sdpa))
                        except Exception as e:
                            print(f"ERROR {dtype} hd{hd} causal={causal} {heads} L={L}: {e}",
                                  flush=True)
    out = os.environ.get("OUT")
    if out:
        name = f"bench_prefill{'_' + opt.label if opt.label else ''}.json"
        with open(os.path.join(out, name), "w") as f:
            json.dump(rows, f, indent=1)

    def fmt(x):
        return f"{x:7.1f}" if x else "    n/a"

    print()
    print(f"prefill{' [' + opt.label + ']' if opt.label else ''}, batch {opt.batch}, TFLOP/s (median of {opt.reps}; {time.time() - t0:.0f} s)")
    print(f"{'dtype':5} {'hd':>3} {'mask':6} {'heads':>5} {'seq':>5} | {'fijit':>7} {'flash':>7} "
          f"{'cudnn':>7} | {'x flash':>7} {'x cudnn':>7} {'maxdiff':>8}")
    for r in rows:
        fl, cu = r.get("flash_tflops"), r.get("cudnn_tflops")
        print(f"{r['dtype']:5} {r['hd']:3d} {'causal' if r['causal'] else 'none':6} "
              f"{r['heads']:>5} {r['seq']:5d} | {fmt(r['fijit_tflops'])} {fmt(fl)} {fmt(cu)} | "
              f"{(r['fijit_tflops'] / fl) if fl else 0:7.2f} "
              f"{(r['fijit_tflops'] / cu) if cu else 0:7.2f} "
              f"{r.get('max_abs_diff_vs_sdpa', float('nan')):8.1e}")
    fj.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
