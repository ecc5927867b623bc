#!/usr/bin/env python3
"""GPU correctness test of batch decode over a paged KV cache
(fi_batch_decode_plan_new / _upload / _run) and of fi_merge_states, against a
float64 reference computed with torch on the GPU.

Every accepted tuple (q=o fp16/bf16 x kv same/fp8_e4m3/fp8_e5m2 x head_dim
64/128/256 x mask none/window x pos none/rope/alibi x soft-cap 0/1) runs on
three batches:
  A  lengths [0, 1, 7, 33, 300, 0], page_size 1, NHD, GQA group 4
  B  lengths [1, 0, 4101, 77], page_size 16, HND, group 1, 8, 16 cycling
  C  lengths [20000, 3, 1500], page_size 16 / 7 / 64 (cycling), NHD or HND, group 8,
     one kv head, padded (non-contiguous) caches
Pages are handed out in a random order; per-request RoPE offsets differ. The
plan is automatic (split-KV on the long requests), or forced to no split on
every fourth case. Outputs and lse are NaN-poisoned first; data is fresh
random (seed printed; FIJIT_TEST_SEED replays). fp8 KV is quantised from
random floats with a random per-tensor scale, and the reference reads the
dequantised values, so every dtype is held to the tolerance of its output
type. For 16-bit tuples with no mask, pos or soft-cap, the output is also
compared with torch SDPA on the same (gathered) tensors. Exit status 1 on any
failure.
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from fijit.testing import (FI_KIND_BATCH_DECODE, BatchDecode, Fijit, batch_decode_args,
                           seeded_generator)
from test_decode import TOL_LSE, TOL_O, lse_tol, reference

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def scenario(idx, which):
    """(lengths, page_size, layout, group, hkv, padded) of batch `which` for case idx."""
    if which == "A":
        return [0, 1, 7, 33, 300, 0], 1, "NHD", 4, 2, False
    if which == "B":
        return [1, 0, 4101, 77], 16, "HND", [1, 8, 16][idx % 3], 2, False
    return [20000, 3, 1500], [16, 7, 64][idx % 3], ["NHD", "HND"][idx % 2], 8, 1, True


def make_cache(gen, lens, page_size, layout, hkv, hd, kv_dtype, q_tdt, padded, dev="cuda"):
    """Random paged caches. Returns (k_cache, v_cache, indptr, last, indices, k_dense, v_dense,
    k_scale, v_scale): dense float64 per request [L, Hkv, D] of the values the kernel reads."""
    pages = [(L + page_size - 1) // page_size for L in lens]
    total = sum(pages) + 3
    perm = torch.randperm(total, generator=gen, device=dev).to(torch.int32)
    indptr = [0]
    for n in pages:
        indptr.append(indptr[-1] + n)
    last = [L - (n - 1) * page_size if n else 0 for L, n in zip(lens, pages)]
    indices = perm[:indptr[-1]].contiguous()
    if layout == "NHD":
        shape = (total, page_size, hkv, hd)
    else:
        shape = (total, hkv, page_size, hd)
    pad = 16 if padded else 0  # a padded last dim: strides differ from the dense ones

    def rnd():
        full = torch.randn(*shape[:-1], hd + pad, generator=gen, device=dev, dtype=torch.float32)
        return full[..., :hd]

    kf, vf = rnd(), rnd()
    if kv_dtype in FP8:
        k_scale = float(torch.rand(1, generator=gen, device=dev)) * 1.5 + 0.25
        v_scale = float(torch.rand(1, generator=gen, device=dev)) * 1.5 + 0.25
        kbuf = torch.empty(*shape[:-1], hd + pad, device=dev, dtype=FP8[kv_dtype])
        vbuf = torch.empty_like(kbuf)
        kc, vc = kbuf[..., :hd], vbuf[..., :hd]
        kc.copy_((kf / k_scale).to(FP8[kv_dtype]))
        vc.copy_((vf / v_scale).to(FP8[kv_dtype]))
        kd, vd = kc.double() * k_scale, vc.double() * v_scale
    else:
        k_scale = v_scale = 0.0
        kbuf = torch.empty(*shape[:-1], hd + pad, device=dev, dtype=q_tdt)
        vbuf = torch.empty_like(kbuf)
        kc, vc = kbuf[..., :hd], vbuf[..., :hd]
        kc.copy_(kf)
        vc.copy_(vf)
        kd, vd = kc.double(), vc.double()
    k_dense, v_dense = [], []
    for b, L in enumerate(lens):
        idx = indices[indptr[b]:indptr[b + 1]].long()
        if layout == "NHD":
            kk, vv = kd[idx].reshape(-1, hkv, hd), vd[idx].reshape(-1, hkv, hd)
        else:
            kk = kd[idx].permute(0, 2, 1, 3).reshape(-1, hkv, hd)
            vv = vd[idx].permute(0, 2, 1, 3).reshape(-1, hkv, hd)
        k_dense.append(kk[:L])
        v_dense.append(vv[:L])
    return kc, vc, indptr, last, indices, k_dense, v_dense, k_scale, v_scale


def run_case(fj, bd, gen, dtype, kv_dtype, hd, mask, pos, softcap, which, idx, max_splits):
    dev = "cuda"
    tdt = TORCH_DTYPES[dtype]
    lens, page_size, layout, group, hkv, padded = scenario(idx, which)
    B, H = len(lens), group * hkv
    q = torch.randn(B, H, hd, generator=gen, device=dev, dtype=torch.float32).to(tdt)
    kc, vc, indptr, last, indices, k_dense, v_dense, k_scale, v_scale = make_cache(
        gen, lens, page_size, layout, hkv, hd, kv_dtype, tdt, padded)
    o = torch.full((B, H, hd), float("nan"), device=dev, dtype=tdt)
    # lse is optional: every fifth case passes none.
    lse = (torch.full((B, H), float("nan"), device=dev, dtype=torch.float32)
           if idx % 5 != 4 else None)

    sm_scale = 0.0 if (idx + hd) % 2 == 0 else 0.07
    cap = 2.5 if softcap else 0.0
    window_left = -1
    if mask == "window":
        window_left = [0, 5, 1000, 40000, 100][idx % 5]
    rope = (1.0, 1e4)
    offsets = None
    if pos == "rope":
        rope = [(1.0, 1e4), (2.0, 5e5), (1.0, 1e6)][idx % 3]
        offsets = torch.randint(0, 100000, (B,), generator=gen, device=dev, dtype=torch.int32)
    slopes = None
    if pos == "alibi":
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], device=dev,
                              dtype=torch.float32)

    spec = Fijit.spec(dtype, hd, mask, pos, softcap, kv_dtype=kv_dtype if kv_dtype != dtype else None,
                      kind=FI_KIND_BATCH_DECODE)
    plan, ws = bd.plan(spec, indptr, last, H, hkv, page_size, window_left=window_left,
                       max_splits=max_splits)
    try:
        items, max_req_splits = bd.describe(plan)
        args = batch_decode_args(q, kc, vc, indices, o, lse, ws, layout=layout, sm_scale=sm_scale,
                                 logits_soft_cap=cap,
                                 rope_scale=rope[0] if pos == "rope" else 0.0,
                                 rope_theta=rope[1] if pos == "rope" else 0.0, rope_offsets=offsets,
                                 alibi_slopes=slopes, k_scale=k_scale, v_scale=v_scale)
        stream = torch.cuda.current_stream().cuda_stream
        bd.run(plan, args, stream)
        torch.cuda.synchronize()
        # Run again on the same workspace: the split counters must have been reset.
        o2 = o.clone()
        bd.run(plan, args, stream)
        torch.cuda.synchronize()
        rerun_same = bool(torch.equal(o2.view(torch.int16), o.view(torch.int16)))
    finally:
        bd.free(plan)

    scale = sm_scale if sm_scale else 1.0 / math.sqrt(hd)
    err_max = err_mean = lse_err = 0.0
    ok = rerun_same
    sdpa_err = None
    for b, L in enumerate(lens):
        off = int(offsets[b]) if offsets is not None else 0
        ref_o, ref_lse = reference(q[b], k_dense[b], v_dense[b], sm_scale=scale, soft_cap=cap,
                                   pos=pos, rope=(rope[0], rope[1], off),
                                   window_left=window_left if mask == "window" else None,
                                   slopes=slopes)
        o64 = o[b].double()
        if not bool(torch.isfinite(o64).all()):
            ok = False
            err_max = float("inf")
            continue
        if L == 0:
            e = float((o64 - ref_o).abs().max())
            ok = ok and e == 0.0 and (lse is None or bool(torch.isneginf(lse[b]).all()))
            err_max = max(err_max, e)
            continue
        diff = (o64 - ref_o).abs()
        em = float(diff.max() / ref_o.abs().max().clamp_min(1e-30))
        en = float(diff.mean() / ref_o.abs().mean().clamp_min(1e-30))
        if lse is None:
            le = 0.0
        else:
            le = float((lse[b].double() - ref_lse).abs().max()) if bool(
                torch.isfinite(lse[b]).all()) else float("inf")
        err_max, err_mean, lse_err = max(err_max, em), max(err_mean, en), max(lse_err, le)
        ok = ok and em <= TOL_O[dtype] and le <= lse_tol(dtype, pos) * max(1.0, float(ref_lse.abs().max()))
        if (kv_dtype == dtype and mask == "none" and pos == "none" and not softcap):
            q4 = q[b].view(1, H, 1, hd)
            k4 = k_dense[b].to(tdt).permute(1, 0, 2).unsqueeze(0)
            v4 = v_dense[b].to(tdt).permute(1, 0, 2).unsqueeze(0)
            ref = F.scaled_dot_product_attention(q4, k4, v4, scale=scale,
                                                 enable_gqa=H != hkv).view(H, hd).double()
            se = float((ref - o64).abs().max() / ref.abs().max().clamp_min(1e-30))
            sdpa_err = se if sdpa_err is None else max(sdpa_err, se)
            ok = ok and se <= 2 * TOL_O[dtype]
    return ok, err_max, err_mean, lse_err, sdpa_err, items, max_req_splits


def graph_case(fj, bd, gen):
    """Capture one run in a CUDA graph; replay it on new q values and compare with
    direct runs (the fixed grid, the work list in the workspace and the split
    counters' reset make a plan replayable)."""
    dev, tdt, hd, hkv, H = "cuda", torch.float16, 128, 2, 8
    lens = [5000, 17, 0, 2100]
    kc, vc, indptr, last, indices, _, _, _, _ = make_cache(gen, lens, 16, "NHD", hkv, hd,
                                                           "fp16", tdt, False)
    spec = Fijit.spec("fp16", hd, kind=FI_KIND_BATCH_DECODE)
    plan, ws = bd.plan(spec, indptr, last, H, hkv, 16)
    q = torch.randn(len(lens), H, hd, generator=gen, device=dev).to(tdt)
    o = torch.zeros(len(lens), H, hd, device=dev, dtype=tdt)
    lse = torch.zeros(len(lens), H, device=dev)
    args = batch_decode_args(q, kc, vc, indices, o, lse, ws, layout="NHD")
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            bd.run(plan, args, s.cuda_stream)  # load the kernel before capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            bd.run(plan, args, torch.cuda.current_stream().cuda_stream)
        ok = True
        for _ in range(3):
            q.copy_(torch.randn(q.shape, generator=gen, device=dev).to(tdt))
            g.replay()
            torch.cuda.synchronize()
            got_o, got_l = o.clone(), lse.clone()
            bd.run(plan, args, torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            ok = ok and torch.equal(got_o, o) and torch.equal(got_l, lse)
        items, msp = bd.describe(plan)
        return ok and msp > 1, items, msp
    finally:
        bd.free(plan)


def merge_states_case(fj, bd, gen, dtype, hd, seq, n, heads):
    tdt = TORCH_DTYPES[dtype]
    v = torch.randn(seq, n, heads, hd, generator=gen, device="cuda").to(tdt)
    s = torch.randn(seq, n, heads, generator=gen, device="cuda") * 5
    if n > 1:
        s[:, 0, :] = -math.inf  # an empty state weighs nothing
    if seq > 1:
        s[1, :, :] = -math.inf  # a row with no state at all
    vo = torch.full((seq, heads, hd), float("nan"), device="cuda", dtype=tdt)
    so = torch.full((seq, heads), float("nan"), device="cuda")
    bd.merge_states(dtype, v, s, vo, so, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    s64 = s.double()
    S = torch.logsumexp(s64, dim=1)  # [seq, heads]
    w = torch.exp(s64 - S[:, None, :]).nan_to_num(0.0)
    ref = (w[..., None] * v.double()).sum(dim=1)
    err = float((vo.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    fin = torch.isfinite(S)
    lse_ok = bool(torch.isneginf(so[~fin]).all()) and (
        float((so.double()[fin] - S[fin]).abs().max()) <= TOL_LSE * max(1.0, float(S[fin].abs().max()))
        if bool(fin.any()) else True)
    return bool(torch.isfinite(vo).all()) and err <= TOL_O[dtype] and lse_ok, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one head_dim, fewer tuples")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tiny", action="store_true",
                    help="a handful of tuples (fp16 and fp8 KV, hd 128) on batches A and B "
                         "(page sizes 1 and 16), for the sanitizers")
    opt = ap.parse_args()
    seed, gen = seeded_generator("test_batch_decode")
    fj = Fijit()
    bd = BatchDecode(fj)

    dims = [128] if opt.quick else [64, 128, 256]
    tuples = [(d, kv, hd, m, p, sc)
              for d, kvk, hd, m, p, sc in itertools.product(
                  ["fp16", "bf16"], ["same", "fp8_e4m3", "fp8_e5m2"], dims, ["none", "window"],
                  ["none", "rope", "alibi"], [0, 1])
              for kv in [d if kvk == "same" else kvk]]
    if opt.tiny:
        tuples = [t for t in tuples if t[0] == "fp16" and t[1] in ("fp16", "fp8_e4m3") and
                  t[2] == 128 and t[4] in ("none", "rope") and t[5] == 0]
    keys = ["fp16", "bf16", "fp16+fp8_e4m3", "fp16+fp8_e5m2", "bf16+fp8_e4m3", "bf16+fp8_e5m2"]
    stats = {k: {"cases": 0, "fail": 0, "max": 0.0, "mean_max": 0.0, "lse_max": 0.0,
                 "sdpa_max": 0.0, "sdpa_cases": 0} for k in keys}
    results = []
    t0 = time.time()
    n = 0
    for (dtype, kv, hd, mask, pos, sc) in tuples:
        key = dtype if kv == dtype else f"{dtype}+{kv}"
        for which in "AB" if opt.tiny else "ABC":
            max_splits = 1 if n % 4 == 3 else 0
            name = (f"q={dtype} kv={kv} hd={hd} mask={mask} pos={pos} softcap={sc} batch={which} "
                    f"case={n} max_splits={max_splits}")
            try:
                ok, emax, emean, lerr, serr, items, msp = run_case(
                    fj, bd, gen, dtype, kv, hd, mask, pos, sc, which, n, max_splits)
            except Exception as e:
                ok, emax, emean, lerr, serr, items, msp = (False, float("inf"), float("inf"),
                                                           float("inf"), None, 0, 0)
                print(f"ERROR {name}: {e}", flush=True)
            n += 1
            st = stats[key]
            st["cases"] += 1
            st["max"] = max(st["max"], emax)
            st["mean_max"] = max(st["mean_max"], emean if math.isfinite(emean) else 0.0)
            st["lse_max"] = max(st["lse_max"], lerr)
            if serr is not None:
                st["sdpa_max"] = max(st["sdpa_max"], serr)
                st["sdpa_cases"] += 1
            if not ok:
                st["fail"] += 1
                print(f"FAIL {name}: max_rel {emax:.3g} mean_rel {emean:.3g} lse_err {lerr:.3g} "
                      f"sdpa {serr}", flush=True)
            results.append(dict(case=name, ok=ok, max_rel=emax, mean_rel=emean, lse_err=lerr,
                                sdpa_rel=serr, items=items, max_request_splits=msp))

    merge_fail = 0
    merge_max = {}
    for dtype, hd, (seq, ns, heads) in itertools.product(["fp16", "bf16"], dims,
                                                         [(1, 1, 1), (7, 3, 32), (33, 17, 8)]):
        try:
            ok, err = merge_states_case(fj, bd, gen, dtype, hd, seq, ns, heads)
        except Exception as e:
            ok, err = False, float("inf")
            print(f"ERROR merge_states {dtype} hd={hd}: {e}", flush=True)
        merge_max[dtype] = max(merge_max.get(dtype, 0.0), err)
        if not ok:
            merge_fail += 1
            print(f"FAIL merge_states {dtype} hd={hd} seq={seq} states={ns} heads={heads}: {err:.3g}")
    try:
        graph_ok, g_items, g_splits = graph_case(fj, bd, gen)
    except Exception as e:
        graph_ok, g_items, g_splits = False, 0, 0
        print(f"ERROR graph: {e}", flush=True)
    dt = time.time() - t0

    print(f"\nbatch decode correctness vs float64 reference ({len(results)} cases, {dt:.1f} s)")
    print(f"{'q+kv dtype':14} {'cases':>6} {'failed':>6} {'max rel err':>12} {'mean rel err':>13} "
          f"{'max lse err':>12} {'vs SDPA':>9} {'tol':>7}")
    for k, st in stats.items():
        sd = f"{st['sdpa_max']:9.2e}" if st["sdpa_cases"] else "      n/a"
        print(f"{k:14} {st['cases']:6d} {st['fail']:6d} {st['max']:12.3e} {st['mean_max']:13.3e} "
              f"{st['lse_max']:12.3e} {sd} {TOL_O[k.split('+')[0]]:7.0e}")
    print(f"CUDA graph capture + 3 replays vs direct runs ({g_items} items, up to {g_splits} "
          f"splits per request): {'OK' if graph_ok else 'FAILED'}")
    print("merge_states: " + ", ".join(f"{d} max rel err {e:.2e}" for d, e in merge_max.items())
          + f", {merge_fail} failed")
    out = opt.json or (os.path.join(os.environ["OUT"], "test_batch_decode.json")
                       if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump(dict(seed=seed, stats=stats, merge_max=merge_max, results=results), f,
                      indent=1)
    failed = sum(st["fail"] for st in stats.values()) + merge_fail + (0 if graph_ok else 1)
    print("test_batch_decode:", "OK" if failed == 0 else f"{failed} FAILED")
    fj.close()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
