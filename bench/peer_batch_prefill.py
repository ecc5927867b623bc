#!/usr/bin/env python3
"""The batch target measured on the peers as well: how much of single prefill's speed each
library keeps on bench_batch_prefill.py's batch (16 requests of mixed lengths, qo = kv,
seeded) against its own single prefill of the same (query, key) pairs (one request of
the length whose L^2 is the batch's sum of L_i^2).

    PYTHONPATH=python python3 bench/peer_batch_prefill.py [--hds 128] [--heads 32/8,32/32] [--masks none,causal]

Per shape, in one process on the same tensors, L2 flushed before every run, the median of
--reps runs a round over --rounds rounds, each round's runners in an order drawn from all
their permutations (bench_prefill.time_runners: the clock a kernel gets depends on what ran
just before it, and the peers draw other power than fijit):
  fijit   single prefill; the ragged and paged (page 16) batch; and single prefill of each
          request in turn (16 launches: what the batch kinds save a caller);
  flash   SDPA's flash backend on the single request; its varlen kernel on the batch
          (aten._flash_attention_forward with cumulative offsets, as flash_attn_varlen);
  cudnn   SDPA's cuDNN backend on the single request; on the batch as a jagged nested
          tensor (TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED=1 where the torch build gates it).
GQA K/V is expanded for the peers outside timing, as bench_prefill.py does. A peer that
refuses a shape prints n/a and why (--verbose). Printed: TFLOP/s (4 * heads * hd * visible
pairs / time), each library's batch / its own single prefill, then fijit's batch against
each peer's batch, and the largest |o| difference of each batch output from flash's
(each peer is checked to compute the same attention). Raw numbers go to
$OUT/peer_batch_prefill.json when OUT is set.
"""
import argparse
import json
import os
import statistics

# Read by torch's cuDNN attention on nested tensors, where the build still gates it.
os.environ.setdefault("TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from batch_shapes import add_batch_options, batch_of, shape_grid, single_len
from bench_batch_prefill import batch_runner, pairs
from bench_prefill import TORCH_DTYPES, SDPBackend, add_sdpa, sdpa_kernel, time_runners
from fijit.testing import Fijit, Prefill, prefill_args, prefill_spec

# The runners, in the printed order; those whose work is the single request's (the rest
# run the batch); the peers' batch runners; the batch outputs compared with flash varlen's.
NAMES = ("fijit single", "fijit ragged", "fijit paged", "fijit per-request", "flash single",
         "flash varlen", "cudnn single", "cudnn jagged")
SINGLE = ("fijit single", "flash single", "cudnn single")
PEER_BATCH = ("flash varlen", "cudnn jagged")
DIFFED = ("fijit per-request", "cudnn jagged")
# Each library's batch runner and its own single prefill.
OWN_SINGLE = {"fijit ragged": "fijit single", "fijit paged": "fijit single",
              "fijit per-request": "fijit single", "flash varlen": "flash single",
              "cudnn jagged": "cudnn single"}


def expand_kv(t, G):
    """K or V [N, Hkv, D] with each kv head repeated for its G query heads (the peers'
    kernels are timed on MHA-shaped K/V, as in bench_prefill.add_sdpa)."""
    return t.repeat_interleave(G, dim=1) if G > 1 else t


def flash_varlen(q, k, v, cu, max_len, causal):
    """SDPA's flash kernel over packed requests (cumulative offsets cu, int32)."""
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, causal,
                                                  False)
    return out[0]


def jagged(t, offsets):
    """[N, H, D] as a nested tensor [B, H, j, D] of the requests at `offsets` (int64)."""
    return torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2)


def cudnn_jagged(q, k, v, causal):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def per_request_runner(pf, spec, q, k, v, o, lens):
    """fijit single prefill of each request in turn, on views of the packed tensors."""
    stream = torch.cuda.current_stream().cuda_stream
    calls, keep, at = [], [], 0
    for L in lens:
        a = prefill_args(q[at:at + L], k[at:at + L], v[at:at + L], o[at:at + L])
        keep.append(pf.workspace(spec, a))
        calls.append(a)
        at += L
    return (lambda: [pf.run(spec, a, stream) for a in calls]), keep


def try_runner(runners, errors, name, fn, verbose):
    """Adds fn as a runner after one call, or records why the library refused."""
    try:
        out = fn()
        torch.cuda.synchronize()
        runners[name] = fn
        return out
    except Exception as e:  # a backend not built for, or refusing, this shape
        errors[name] = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        if verbose:
            print(f"  {name}: {errors[name]}")
        return None


def bench_shape(pf, opt, lens, cu, dtype, hd, mask, H, Hkv):
    """One shape's runners timed side by side: its row of results."""
    tdt = TORCH_DTYPES[dtype]
    causal = mask == "causal"
    G = H // Hkv
    Ls = single_len(lens)
    stream = torch.cuda.current_stream().cuda_stream
    runners, errors, plans = {}, {}, []
    keep = []  # what the runners' raw pointers need alive
    # Single prefill: fijit, then SDPA's flash and cuDNN on [1, H, Ls, D].
    qs = torch.randn(Ls, H, hd, device="cuda", dtype=tdt)
    ks = torch.randn(Ls, Hkv, hd, device="cuda", dtype=tdt)
    vs = torch.randn(Ls, Hkv, hd, device="cuda", dtype=tdt)
    sspec = prefill_spec("single", dtype, hd, mask)
    os_ = torch.empty_like(qs)
    sargs = prefill_args(qs, ks, vs, os_)
    keep += [os_, pf.workspace(sspec, sargs)]
    runners["fijit single"] = lambda: pf.run(sspec, sargs, stream)
    sdpa_res, sdpa_runners = {}, {}
    add_sdpa(sdpa_runners, sdpa_res, qs, ks, vs, 1, Ls, causal, True)
    for peer in ("flash", "cudnn"):
        if peer in sdpa_runners:
            runners[f"{peer} single"] = sdpa_runners[peer]
        else:
            errors[f"{peer} single"] = sdpa_res.get(f"{peer}_error", "n/a")
    # The batch: fijit's ragged and paged kinds on their own tensors.
    for kind in ("ragged", "paged"):
        fn, kp, plan = batch_runner(pf, kind, prefill_spec(kind, dtype, hd, mask), lens, H, Hkv,
                                    hd, tdt, opt.page)
        runners[f"fijit {kind}"] = fn
        keep.append(kp)
        plans.append(plan)
    # The peers and fijit's per-request launches on one packed batch.
    n = sum(lens)
    qb = torch.randn(n, H, hd, device="cuda", dtype=tdt)
    kb = torch.randn(n, Hkv, hd, device="cuda", dtype=tdt)
    vb = torch.randn(n, Hkv, hd, device="cuda", dtype=tdt)
    ob = torch.empty_like(qb)
    fn, kp = per_request_runner(pf, sspec, qb, kb, vb, ob, lens)
    runners["fijit per-request"] = fn
    keep.append(kp)
    kx, vx = expand_kv(kb, G), expand_kv(vb, G)
    ref = try_runner(runners, errors, "flash varlen",
                     lambda: flash_varlen(qb, kx, vx, cu, max(lens), causal), opt.verbose)
    off64 = cu.to(torch.int64)
    qj, kj, vj = jagged(qb, off64), jagged(kx, off64), jagged(vx, off64)
    cj = try_runner(runners, errors, "cudnn jagged", lambda: cudnn_jagged(qj, kj, vj, causal),
                    opt.verbose)
    # Each batch output against flash's: the same attention of the same data.
    diffs = {}
    if ref is not None:
        runners["fijit per-request"]()
        torch.cuda.synchronize()
        diffs["fijit per-request"] = float((ob.float() - ref.float()).abs().max())
        if cj is not None:
            cj = cj.transpose(1, 2).values()
            diffs["cudnn jagged"] = float((cj.float() - ref.float()).abs().max())
    samples = time_runners(runners, opt.reps * opt.rounds, opt.rounds, 3,
                           f"{dtype} {hd} {mask} {H}/{Hkv}")
    work = {"single": 4.0 * H * hd * pairs(Ls, causal),
            "batch": 4.0 * H * hd * sum(pairs(L, causal) for L in lens)}
    tf = {name: work["single" if name in SINGLE else "batch"] / statistics.median(t) / 1e12
          for name, t in samples.items()}
    for plan in plans:
        pf.plan_free(plan)
    return {"dtype": dtype, "hd": hd, "mask": mask, "heads": f"{H}/{Hkv}", "lens": lens,
            "single_len": Ls, "tflops": tf,
            "batch_over_own_single": {b: tf[b] / tf[s] for b, s in OWN_SINGLE.items()
                                      if b in tf and s in tf},
            "fijit_ragged_over_peer": {p: tf["fijit ragged"] / tf[p] for p in PEER_BATCH if p in tf},
            "max_abs_diff_vs_flash_varlen": diffs, "errors": errors}


def row_text(r):
    """A shape's line: TFLOP/s (NAMES), batch / own single (OWN_SINGLE), fijit ragged / peer
    batch (PEER_BATCH), max |o - flash varlen|."""
    def cells(d, keys, f):
        return " ".join(f(d[k]) if k in d else "n/a" for k in keys)
    return (f"{r['dtype']:5} {r['hd']:3d} {r['mask']:6} {r['heads']:>6} | "
            f"{cells(r['tflops'], NAMES, lambda x: f'{x:6.1f}')} | "
            f"{cells(r['batch_over_own_single'], OWN_SINGLE, lambda x: f'{x:.2f}')} | "
            f"{cells(r['fijit_ragged_over_peer'], PEER_BATCH, lambda x: f'{x:.2f}')} | "
            f"{cells(r['max_abs_diff_vs_flash_varlen'], DIFFED, lambda x: f'{x:.1e}')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=4, help="timed runs a round")
    ap.add_argument("--rounds", type=int, default=8)
    add_batch_options(ap, heads="32/8,32/32")
    ap.add_argument("--verbose", action="store_true", help="say why a peer refused a shape")
    opt = ap.parse_args()
    lens = batch_of(opt)
    fj = Fijit()
    pf = Prefill(fj)
    dev = torch.cuda.get_device_name()
    print(f"device: {dev}; torch {torch.__version__}; batch {opt.batch}, lengths "
          f"{min(lens)}-{max(lens)} (sum {sum(lens)}), single {single_len(lens)}, page {opt.page}")
    print("TFLOP/s: " + ", ".join(NAMES))
    print("then " + ", ".join(f"{b} / {s}" for b, s in OWN_SINGLE.items()) + "; fijit ragged / "
          + ", ".join(PEER_BATCH) + "; max |o - flash varlen| of " + ", ".join(DIFFED))
    cu = torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32,
                      device="cuda")
    rows = []
    for shape in shape_grid(opt.dtypes, opt.hds, opt.masks, opt.heads):
        rows.append(bench_shape(pf, opt, lens, cu, *shape))
        print(row_text(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "peer_batch_prefill.json"), "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "rows": rows}, f)
    fj.close()


if __name__ == "__main__":
    main()
