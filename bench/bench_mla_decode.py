#!/usr/bin/env python3
"""Absorbed MLA decode benchmark: fijit.BatchMLADecodePlan over a paged latent cache
(one [pages, page_size, 576] tensor, pages in random order) against the device copy
ceiling measured in the same run and against torch SDPA on the same attention written as
MQA over the dense latent (each of a request's q_len x heads rows a query head, one kv
head: k = [ckv || kpe] 576 wide, v = ckv 512 wide), each SDPA backend that takes them.

    PYTHONPATH=python FIJIT_LIBRARY=build/libfijit.so python3 bench/bench_mla_decode.py [--quick]

Shapes and the targets they are held to:
  memory-bound   bf16 and fp8_e4m3 KV, batch 64 and 128, kv 4k-32k, 16 heads, 1 query
                 token: GB/s of the latent cache read once per request (576 values a
                 token) against the copy ceiling (target >= 90%); fp8 against bf16
                 (target >= 1.7x);
  compute-bound  bf16, 128 heads with 2 query tokens and 64 heads with 4, batch 64/128,
                 kv 4k/8k: TFLOP/s of 2 * rows * kv * (576 + 512) (target >= 600 on H200).
Method (bench_decode.py's Timer): CUDA events around each call, median of --reps after
--warmup, L2 flushed (256 MiB written and read) before every timed run. The plan is made
once per shape, outside the timing, as a model does per step. SDPA runs without the
causal mask among the new tokens (it differs from fijit's by at most q_len - 1 keys of
a row), on its dense copy gathered outside the timing. Raw numbers go to
$OUT/bench_mla_decode.json when OUT is set; the table is printed last, with the device,
date and command.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
from bench_decode import Timer, copy_ceiling  # noqa: E402

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch: the default backend only
    SDPBackend = sdpa_kernel = None

LATENT, ROPE = 512, 64
FP8 = getattr(torch, "float8_e4m3fn", None)


def shapes(quick):
    """(kind, batch, kv, heads, q_len, kv dtype name)."""
    mem = [("memory", b, kv, 16, 1, kvd) for b in (64, 128) for kv in (4096, 8192, 16384, 32768)
           for kvd in ("bf16", "fp8_e4m3")]
    comp = [("compute", b, kv, h, ql, "bf16") for b in (64, 128) for kv in (4096, 8192)
            for h, ql in ((128, 2), (64, 4))]
    out = mem + comp
    return out[::4] if quick else out


def sdpa_peers(q4, k4, v4):
    """(name, fn) of each SDPA backend on MQA over the dense latent (enable_gqa)."""
    def call():
        return F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=True, scale=0.1)
    peers = [("default", call)]
    if sdpa_kernel is not None:
        for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
            be = getattr(SDPBackend, name, None)
            if be is not None:
                def fn(be=be):
                    with sdpa_kernel(be):
                        return call()
                peers.append((name.split("_")[0].lower(), fn))
    return peers


def bench_shape(timer, gen, kind, B, kv, H, q_len, kvd, page):
    dev = "cuda"
    kv_dtype = FP8 if kvd == "fp8_e4m3" else torch.bfloat16
    pages_per = (kv + page - 1) // page
    total = B * pages_per
    cache = torch.randn(total, page, LATENT + ROPE, generator=gen, device=dev).clamp(
        -448.0, 448.0).to(kv_dtype)
    indices = torch.randperm(total, generator=gen, device=dev).to(torch.int32)
    qo = [i * q_len for i in range(B + 1)]
    indptr = [i * pages_per for i in range(B + 1)]
    last = [kv - (pages_per - 1) * page] * B
    q = torch.randn(B * q_len, H, LATENT + ROPE, generator=gen, device=dev).to(torch.bfloat16)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    plan = fijit.BatchMLADecodePlan(ws).plan(qo, indptr, last, H, page_size=page,
                                             q_dtype=torch.bfloat16, kv_dtype=kv_dtype,
                                             sm_scale=0.1, grow_workspace=True)
    items, splits = plan.describe()
    out = torch.empty(B * q_len, H, LATENT, dtype=torch.bfloat16, device=dev)
    med, best = timer.median_us(lambda: plan.run(q, None, cache, None, indices, out=out))
    kv_bytes = B * kv * (LATENT + ROPE) * cache.element_size()
    flops = 2.0 * B * q_len * H * kv * (LATENT + ROPE + LATENT)
    row = dict(kind=kind, batch=B, kv=kv, heads=H, q_len=q_len, kv_dtype=kvd, page=page,
               items=items, splits=splits, fijit_us=med, fijit_best_us=best,
               gbs=kv_bytes / (med * 1e-6) / 1e9, tflops=flops / (med * 1e-6) / 1e12)
    # Peers: SDPA as MQA over the dense latent (16-bit only), gathered outside the timing.
    if kvd == "bf16":
        dense = cache[indices.long()].reshape(B, pages_per * page, LATENT + ROPE)[:, :kv]
        k4 = dense.unsqueeze(1)                                   # [B, 1, kv, 576]
        v4 = dense[..., :LATENT].unsqueeze(1).contiguous()        # [B, 1, kv, 512]
        # Every (token, head) row a query head of its own, with one query: [B, qH, 1, 576].
        q4 = q.view(B, q_len * H, LATENT + ROPE).unsqueeze(2)
        row["sdpa"] = {}
        for name, fn in sdpa_peers(q4, k4, v4):
            try:
                fn()
                t, _ = timer.median_us(fn)
                row["sdpa"][name] = t
            except RuntimeError as e:  # a backend that does not take the shapes
                row["sdpa"][name] = str(e).split("\n")[0][:80]
        del dense, k4, v4, q4
    plan.close()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="a quarter of the shapes")
    opt = ap.parse_args()
    dev_name = torch.cuda.get_device_name()
    timer = Timer(opt.warmup, opt.reps)
    ceiling = copy_ceiling(timer)
    torch.cuda.empty_cache()
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    for kind, B, kv, H, q_len, kvd in shapes(opt.quick):
        if kvd == "fp8_e4m3" and FP8 is None:
            continue
        r = bench_shape(timer, gen, kind, B, kv, H, q_len, kvd, opt.page)
        r["pct_copy"] = 100.0 * r["gbs"] / ceiling
        rows.append(r)
        print(f"{kind:7} B {B:3} kv {kv:5} H {H:3} q {q_len} {kvd:8} {r['fijit_us']:8.1f} us "
              f"{r['gbs']:6.0f} GB/s ({r['pct_copy']:.0f}%) {r['tflops']:6.1f} TFLOP/s "
              f"items {r['items']} splits {r['splits']}", flush=True)
        torch.cuda.empty_cache()
    bf16 = {(r["batch"], r["kv"]): r for r in rows if r["kind"] == "memory" and r["kv_dtype"] == "bf16"}
    for r in rows:
        base = bf16.get((r["batch"], r["kv"])) if r["kv_dtype"] != "bf16" else None
        if base:
            r["x_bf16"] = base["fijit_us"] / r["fijit_us"]
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_mla_decode.json"), "w") as f:
            json.dump(dict(device=dev_name, date=time.strftime("%Y-%m-%d"), command=" ".join(
                sys.argv), copy_ceiling_gbs=ceiling, rows=rows), f, indent=1)
    print(f"\nabsorbed MLA decode, page {opt.page}, bf16 q, {dev_name}, "
          f"{time.strftime('%Y-%m-%d')}, copy ceiling {ceiling:.0f} GB/s, median of {opt.reps} "
          f"(L2 flushed); command: {' '.join(sys.argv)}")
    print(f"{'kind':7} {'B':>4} {'kv':>6} {'H':>4} {'q':>2} {'kv dtype':8} {'us':>8} {'GB/s':>6} "
          f"{'%copy':>6} {'TFLOP/s':>8} {'x bf16':>6}  SDPA us (x fijit)")
    for r in rows:
        peers = ", ".join(f"{k} {v:.1f} ({v / r['fijit_us']:.2f}x)" if isinstance(v, float)
                          else f"{k}: n/a" for k, v in r.get("sdpa", {}).items())
        xb = f"{r['x_bf16']:.2f}" if "x_bf16" in r else "-"
        print(f"{r['kind']:7} {r['batch']:4} {r['kv']:6} {r['heads']:4} {r['q_len']:2} "
              f"{r['kv_dtype']:8} {r['fijit_us']:8.1f} {r['gbs']:6.0f} {r['pct_copy']:5.0f}% "
              f"{r['tflops']:8.1f} {xb:>6}  {peers}")


if __name__ == "__main__":
    main()
