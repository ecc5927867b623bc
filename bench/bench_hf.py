#!/usr/bin/env python3
"""transformers with fijit against transformers with SDPA, in one process on one model
object per row: prompt latency and ms per generated token, per model and batch shape,
with the dynamic cache and with the static cache (generate compiles the decode step:
fullgraph, CUDA graphs); then the host cost of one attention call from Python.

Rows: the models of tests/gpu/test_python_hf.py (random weights from configs) x
batch 1, batch 8 of equal prompts, a left-padded batch of 8 prompts of 100-2000
tokens (--quick: fewer models, layers and tokens). The reference backend is SDPA
where it computes the same thing, eager for soft-capped and sink models. Method: one
untimed warm-up of every timed call per backend, then --rounds rounds alternating
the backends, each call between torch.cuda.synchronize(); medians. ms/token is that
of the decode steps alone, (generate(N) - generate(1)) / (N - 1). The speed-up is
reference time / fijit time (> 1: fijit faster).

Host cost: microseconds of Python per call (CPU time of N calls queued back to back
on shapes so small that the GPU never holds the host up): fijit.decode (the one-shot
call, which builds its argument struct and spec each time), a decode layer of batch 8
as the backend made it before (that call per row), PaddedBatchPlan.run (a plan kept per
shape, its struct made once), padded_attention (the same plus the plan lookup), SDPA.

    PYTHONPATH=python:tests/gpu FIJIT_LIBRARY=build/libfijit.so python3 bench/bench_hf.py
        [--quick] [--rounds N] [--models llama3-8b,qwen2,...] [--no-static]

(tests/gpu on the path: the models, batches and prewarm are test_python_hf.py's.)
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
import fijit.integrations.transformers as fhf  # noqa: E402
from fijit import padded as P  # noqa: E402
import transformers  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 layers, 16 tokens, short prompts, "
                    "llama3-8b only, the static cache on the padded batch only")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per backend")
    ap.add_argument("--models", default=None, help="comma-separated names (default: all)")
    ap.add_argument("--no-static", action="store_true", help="skip the static cache + compile rows")
    return ap.parse_args()


OPT = parse()
sys.argv = [sys.argv[0]] + (["--quick"] if OPT.quick else [])
try:
    import test_python_hf as H  # noqa: E402  (the models, batches and prewarm of the GPU test)
except ModuleNotFoundError as e:
    if e.name != "test_python_hf":
        raise
    sys.exit("bench_hf: put tests/gpu on PYTHONPATH (PYTHONPATH=python:tests/gpu): the models "
             "and batches are tests/gpu/test_python_hf.py's")

NEW = H.NEW
ROUNDS = OPT.rounds or (3 if OPT.quick else 5)
WANT = set(OPT.models.split(",")) if OPT.models else ({"llama3-8b"} if OPT.quick else None)


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def measure(model, backends, ids, mask, static):
    """{backend: (prompt s, s per token)}: medians over ROUNDS alternating rounds."""
    kw = dict(cache_implementation="static") if static else {}
    calls = {"prompt": lambda: H.prompt_logits(model, ids, mask),
             "gen1": lambda: H.greedy(model, ids, mask, 1, **kw),
             "gen": lambda: H.greedy(model, ids, mask, NEW, **kw)}
    times = {b: {c: [] for c in calls} for b in backends}
    for b in backends:
        H.set_backend(model, b)
        for fn in calls.values():
            fn()
    for _ in range(ROUNDS):
        for b in backends:
            H.set_backend(model, b)
            for c, fn in calls.items():
                times[b][c].append(timed(fn))
    out = {}
    for b in backends:
        med = {c: statistics.median(t) for c, t in times[b].items()}
        out[b] = (med["prompt"], (med["gen"] - med["gen1"]) / (NEW - 1))
    return out


def host_cost(n=2000):
    """us of Python per call for the one-shot decode, a kept plan's run, padded_attention
    and SDPA, on a decode shape small enough that the GPU never makes the host wait
    beyond its queue."""
    B, Hq, Hkv, D, L = 8, 32, 8, 128, 256
    q = torch.randn(B, 1, Hq, D, dtype=torch.float16, device="cuda").transpose(1, 2)
    k = torch.randn(B, Hkv, L, D, dtype=torch.float16, device="cuda")
    v = torch.randn_like(k)
    layout = P.padding_layout(torch.ones(B, L, dtype=torch.bool, device="cuda"))
    plan = P.plan_for(q, k, v, causal=True, window_left=-1, logits_soft_cap=0.0, sm_scale=0.0)
    out = torch.empty(B, 1, Hq, D, dtype=torch.float16, device="cuda")
    q1 = q[0, :, 0]
    runs = {
        "fijit.decode (one-shot, one row)": lambda: fijit.decode(q1, k[0], v[0], kv_layout="HND"),
        f"a layer before: fijit.decode per row x {B}": lambda: [
            fijit.decode(q[b, :, 0], k[b], v[b], kv_layout="HND") for b in range(B)],
        "PaddedBatchPlan.run (kept plan, whole batch)": lambda: plan.run(q, k, v, layout, out=out),
        "padded_attention (plan lookup + run)": lambda: P.padded_attention(q, k, v, layout,
                                                                           out=out),
        "SDPA (whole batch, is_causal=False)": lambda: F.scaled_dot_product_attention(
            q, k, v, enable_gqa=True),
    }
    res = {}
    for name, fn in runs.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        chunks = []
        for _ in range(5):  # median of 5 chunks of n calls
            t = time.process_time()
            for _ in range(n):
                fn()
            chunks.append((time.process_time() - t) / n * 1e6)
            torch.cuda.synchronize()
        res[name] = statistics.median(chunks)
    return res


def main():
    fhf.register()
    dev = torch.cuda.get_device_name()
    print(f"# bench_hf: {dev}, {time.strftime('%Y-%m-%d', time.gmtime())}, transformers "
          f"{transformers.__version__}, torch {torch.__version__}, fijit "
          f"{fijit.library_version()}; {H.LAYERS} layers, {NEW} tokens, median of {ROUNDS} "
          f"rounds; command: python3 bench/bench_hf.py{' --quick' if OPT.quick else ''}")
    H.prewarm()
    rows = []
    gen = torch.Generator().manual_seed(0)
    print(f"{'model':10} {'batch':22} {'cache':7} {'prompt ms ref/fijit':>22} {'x':>6} "
          f"{'ms/token ref/fijit':>20} {'x':>6}  calls")
    for name, cfg, dtype, ref in H.configs():
        if WANT and name not in WANT:
            continue
        model = H.build(cfg, dtype, ref)
        for what, ids, mask in H.batches(cfg.vocab_size, gen):
            ids, mask = ids.to("cuda"), mask.to("cuda")
            statics = (False,) if OPT.no_static or (OPT.quick and "padded" not in what) \
                else (False, True)
            for static in statics:
                fhf.calls.update(fijit=0, sdpa=0)
                res = measure(model, (ref, fhf.NAME), ids, mask, static)
                (pr, tr), (pf, tf) = res[ref], res[fhf.NAME]
                row = dict(model=name, batch=what, cache="static" if static else "dynamic",
                           ref=ref, prompt_ms=(pr * 1e3, pf * 1e3), token_ms=(tr * 1e3, tf * 1e3),
                           prompt_x=pr / pf, token_x=tr / tf, calls=dict(fhf.calls))
                rows.append(row)
                print(f"{name:10} {what:22} {row['cache']:7} {pr * 1e3:10.2f}/{pf * 1e3:<10.2f} "
                      f"{pr / pf:6.2f} {tr * 1e3:9.3f}/{tf * 1e3:<9.3f} {tr / tf:6.2f}  "
                      f"{row['calls']} (ref {ref})", flush=True)
        del model
        torch.cuda.empty_cache()
    print("\n# host cost of one attention call from Python (us, median of 5 x 2000 calls)")
    host = host_cost()
    for name, us in host.items():
        print(f"{name:48} {us:8.1f}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_hf.json"), "w") as f:
            json.dump(dict(device=dev, rows=rows, host_us=host), f, indent=1)
    slow = [r for r in rows if min(r["prompt_x"], r["token_x"]) < 1.0]
    print(f"\nrows below 1.0x: {len(slow)} of {len(rows)}"
          + "".join(f"\n  {r['model']} {r['batch']} {r['cache']}" for r in slow))


if __name__ == "__main__":
    main()
