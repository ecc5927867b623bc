#!/usr/bin/env python3
"""GPU correctness test of single-request decode (fi_decode_run) against a
float64 reference computed with torch on the GPU.

Every tuple (dtype fp16/bf16 x head_dim 64/128/256 x mask none/window x pos
none/rope/alibi x soft-cap 0/1) runs at kv_len 0, 1, 7, 4096, 33000, GQA group
1/4/8, NHD and HND layouts, automatic and forced split counts. Outputs and lse
are poisoned with NaN first; inputs are fresh random data each run (the seed is
printed; FIJIT_TEST_SEED replays it). The workspace starts as random bytes and
every case runs twice on it; the second output must equal the first bit for
bit (split counters left by a launch, or garbage, never miscount). Errors are
relative to the reference's
largest magnitude per case: max|o - ref| / max|ref| and mean|o - ref| /
mean|ref|; lse is compared in absolute terms (it is a log). Exit status 1 on
any failure.

Reference semantics (the contract the kernel implements):
  s_j = (rope(q) . rope(k_j)) * sm_scale       sm_scale 0 -> 1/sqrt(hd)
      + slope[h] * (j - (L-1))                 ALiBi
  s_j = cap * tanh(s_j / cap)                  soft-cap
  visible iff j >= L-1-window_left             window (window_left >= 0; -1 is refused)
  o = softmax(s) @ v, lse = log(sum exp(s_j)) natural log; L = 0: o = 0, lse = -inf
  rope: rotate-half, freq_i = float32((1/rope_scale) * theta^(-2i/hd)) from
  double, angle = position * freq_i, q at rope_offset + L - 1, k_j at rope_offset + j.
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import torch

from fijit.testing import Fijit, decode_args, seeded_generator

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Budget: fp32 accumulation and approximate exp2 are ~1e-6; what remains is the
# rounding of the output itself (fp16 2^-11, bf16 2^-8 of an element).
TOL_O = {"fp16": 5e-3, "bf16": 2e-2}
TOL_LSE = 2e-3


def lse_tol(dtype, pos):
    """lse budget (times max(1, |lse|)). With RoPE the kernel rotates K in fp32
    and rounds it once to the 16-bit type, as prefill does and as a cache of
    pre-rotated keys would hold it: with bf16 (2^-9) that moves lse by a few
    1e-3, so bf16 + RoPE gets prefill's bf16 budget."""
    return 1.5e-2 if dtype == "bf16" and pos == "rope" else TOL_LSE


def rope_freq(hd, scale, theta):
    f = [(theta ** (-2.0 * i / hd)) / scale for i in range(hd // 2)]
    return torch.tensor(f, dtype=torch.float64).float().double()


def rope_apply(x, pos, freq):
    """x [..., n, hd] float64, pos [n] float64."""
    ang = pos[:, None] * freq.to(x.device)[None, :]
    c = torch.cos(ang)
    s = torch.sin(ang)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def reference(q, k_nhd, v_nhd, *, sm_scale, soft_cap, pos, rope, window_left, slopes):
    """q [H, D], k/v [L, Hkv, D] -> o [H, D] float64, lse [H] float64."""
    H, D = q.shape
    L, Hkv, _ = k_nhd.shape
    G = H // Hkv
    dev = q.device
    q64 = q.double()
    k64 = k_nhd.double()
    v64 = v_nhd.double()
    if L == 0:
        return torch.zeros(H, D, dtype=torch.float64, device=dev), torch.full(
            (H,), -math.inf, dtype=torch.float64, device=dev)
    if pos == "rope":
        scale, theta, offset = rope
        freq = rope_freq(D, scale, theta)
        qpos = torch.full((1,), float(offset + L - 1), dtype=torch.float64, device=dev)
        q64 = rope_apply(q64.reshape(H, 1, D), qpos, freq).reshape(H, D)
        kpos = torch.arange(L, dtype=torch.float64, device=dev) + offset
        k64 = rope_apply(k64.permute(1, 0, 2), kpos, freq).permute(1, 0, 2)
    qg = q64.reshape(Hkv, G, D)
    s = torch.einsum("kgd,lkd->kgl", qg, k64).reshape(H, L) * sm_scale
    j = torch.arange(L, device=dev, dtype=torch.float64)
    if pos == "alibi":
        s = s + slopes.double()[:, None] * (j - (L - 1))[None, :]
    if soft_cap:
        s = soft_cap * torch.tanh(s / soft_cap)
    if window_left is not None and window_left >= 0:
        s = s.masked_fill((j < (L - 1 - window_left))[None, :], -math.inf)
    lse = torch.logsumexp(s, dim=1)
    p = torch.exp(s - lse[:, None]).reshape(Hkv, G, L)
    o = torch.einsum("kgl,lkd->kgd", p, v64).reshape(H, D)
    return o, lse


FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def run_case(fj, gen, dtype, hd, mask, pos, softcap, L, group, layout, num_splits, hkv=2,
             kv_dtype=None):
    dev = "cuda"
    tdt = TORCH_DTYPES[dtype]
    H = group * hkv

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32).to(tdt)

    q = rnd(H, hd)
    k_scale = v_scale = 0.0
    if kv_dtype in FP8:
        # Quantise random floats with a random per-tensor scale; the reference
        # reads the dequantised values (exactly what the kernel multiplies back).
        k_scale = float(torch.rand(1, generator=gen, device=dev)) * 1.5 + 0.25
        v_scale = float(torch.rand(1, generator=gen, device=dev)) * 1.5 + 0.25
        shape = (L, hkv, hd) if layout == "NHD" else (hkv, L, hd)
        kf = torch.randn(*shape, generator=gen, device=dev)
        vf = torch.randn(*shape, generator=gen, device=dev)
        k, v = (kf / k_scale).to(FP8[kv_dtype]), (vf / v_scale).to(FP8[kv_dtype])
        kd, vd = k.double() * k_scale, v.double() * v_scale
    else:
        if layout == "NHD":
            k, v = rnd(L, hkv, hd), rnd(L, hkv, hd)
        else:
            k, v = rnd(hkv, L, hd), rnd(hkv, L, hd)
        kd, vd = k, v
    if layout == "NHD":
        k_nhd, v_nhd = kd, vd
    else:
        k_nhd, v_nhd = kd.permute(1, 0, 2), vd.permute(1, 0, 2)
    o = torch.full((H, hd), float("nan"), device=dev, dtype=tdt)
    lse = torch.full((H,), float("nan"), device=dev, dtype=torch.float32)

    sm_scale = 0.0 if (L + hd) % 2 == 0 else 0.07
    cap = 2.5 if softcap else 0.0
    window_left = -1
    if mask == "window":
        window_left = [0, 5, L // 2, L + 10, 100][(L + group) % 5]
    rope = (1.0, 1e4, 0)
    if pos == "rope":
        rope = [(1.0, 1e4, 0), (2.0, 5e5, 777), (1.0, 1e6, 100000)][(L + group + hd) % 3]
    slopes = None
    if pos == "alibi":
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], device=dev,
                              dtype=torch.float32)

    spec = Fijit.spec(dtype, hd, mask, pos, softcap, kv_dtype=kv_dtype)
    args = decode_args(q, k, v, o, lse, layout=layout, sm_scale=sm_scale, logits_soft_cap=cap,
                       k_scale=k_scale, v_scale=v_scale,
                       rope_scale=rope[0] if pos == "rope" else 0.0,
                       rope_theta=rope[1] if pos == "rope" else 0.0,
                       rope_offset=rope[2] if pos == "rope" else 0,
                       window_left=window_left, alibi_slopes=slopes, max_splits=num_splits)
    ws_bytes = fj.workspace_size(spec, args)
    # Random bytes: the split counters must cope with whatever a workspace held.
    ws = torch.randint(0, 256, (max(ws_bytes, 16),), dtype=torch.uint8, device=dev, generator=gen)
    args.workspace, args.workspace_bytes = ws.data_ptr(), ws_bytes
    stream = torch.cuda.current_stream().cuda_stream
    fj.run(spec, args, stream)
    # Again on the same workspace (counters as the first launch left them),
    # into a re-poisoned output: the result must be the same bits.
    first = o.clone()
    o.fill_(float("nan"))
    fj.run(spec, args, stream)
    torch.cuda.synchronize()
    rerun_same = bool(torch.equal(o, first))

    scale = sm_scale if sm_scale else 1.0 / math.sqrt(hd)
    ref_o, ref_lse = reference(q, k_nhd, v_nhd, sm_scale=scale, soft_cap=cap, pos=pos, rope=rope,
                               window_left=window_left if mask == "window" else None,
                               slopes=slopes)
    o64 = o.double()
    finite = bool(torch.isfinite(o64).all())
    if L == 0:
        err_max = float((o64 - ref_o).abs().max())
        err_mean = err_max
        lse_ok = bool(torch.isneginf(lse).all())
        lse_err = 0.0 if lse_ok else float("inf")
    else:
        diff = (o64 - ref_o).abs()
        err_max = float(diff.max() / ref_o.abs().max().clamp_min(1e-30))
        err_mean = float(diff.mean() / ref_o.abs().mean().clamp_min(1e-30))
        lse_err = float((lse.double() - ref_lse).abs().max()) if bool(
            torch.isfinite(lse).all()) else float("inf")
        lse_ok = lse_err <= lse_tol(dtype, pos) * max(1.0, float(ref_lse.abs().max()))
    ok = finite and err_max <= TOL_O[dtype] and lse_ok and rerun_same
    return ok, err_max, err_mean, lse_err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--json", default=None, help="write per-case results here")
    ap.add_argument("--tiny", action="store_true",
                    help="a handful of small cases (fp16 and fp8 KV, hd 128), for the sanitizers")
    opt = ap.parse_args()

    seed, gen = seeded_generator("test_decode")
    fj = Fijit()

    lens = [0, 1, 7, 4096, 33000] if not opt.quick else [1, 7, 4096]
    groups = [1, 4, 8]
    layouts = ["NHD", "HND"]
    tuples = [(d, None) + t for d, t in itertools.product(
        ["fp16", "bf16"], itertools.product([64, 128, 256], ["none", "window"],
                                            ["none", "rope", "alibi"], [0, 1]))]
    # fp8 KV (q = o 16-bit): every tuple, on fewer shapes (one group, layouts alternating).
    tuples += [(d, kv) + t for d, kv, t in itertools.product(
        ["fp16", "bf16"], ["fp8_e4m3", "fp8_e5m2"],
        itertools.product([64, 128, 256], ["none", "window"], ["none", "rope", "alibi"], [0, 1]))]
    if opt.tiny:
        lens, groups = [1, 7, 300], [4]
        tuples = [t for t in tuples if t[0] == "fp16" and t[1] in (None, "fp8_e4m3") and
                  t[2] == 128 and t[4] in ("none", "rope") and t[5] == 0]
    results = []
    keys = ["fp16", "bf16", "fp16+fp8_e4m3", "fp16+fp8_e5m2", "bf16+fp8_e4m3", "bf16+fp8_e5m2"]
    stats = {d: {"cases": 0, "fail": 0, "max": 0.0, "mean_sum": 0.0, "lse_max": 0.0}
             for d in keys}
    t0 = time.time()
    n = 0
    for (dtype, kv, hd, mask, pos, sc) in tuples:
        shapes = (list(itertools.product(lens, groups, layouts)) if kv is None else
                  [(L, 4, layouts[i % 2]) for i, L in enumerate(lens)])
        for L, group, layout in shapes:
            # Cycle split modes: automatic, none, and a forced odd count.
            num_splits = [0, 1, 0, 5][n % 4]
            n += 1
            name = (f"{dtype} kv={kv or dtype} hd={hd} mask={mask} pos={pos} softcap={sc} L={L} "
                    f"group={group} {layout} splits={num_splits}")
            try:
                ok, emax, emean, lerr = run_case(fj, gen, dtype, hd, mask, pos, sc, L, group,
                                                 layout, num_splits, kv_dtype=kv)
            except Exception as e:  # a failed call must not hide the other results
                ok, emax, emean, lerr = False, float("inf"), float("inf"), float("inf")
                print(f"ERROR {name}: {e}", flush=True)
            st = stats[dtype if kv is None else f"{dtype}+{kv}"]
            st["cases"] += 1
            st["max"] = max(st["max"], emax)
            st["mean_sum"] += emean if math.isfinite(emean) else 0.0
            st["lse_max"] = max(st["lse_max"], lerr)
            if not ok:
                st["fail"] += 1
                print(f"FAIL {name}: max_rel {emax:.3g} mean_rel {emean:.3g} lse_err {lerr:.3g}",
                      flush=True)
            results.append(dict(case=name, ok=ok, max_rel=emax, mean_rel=emean, lse_err=lerr))
    dt = time.time() - t0
    print(f"\ndecode correctness vs float64 reference ({len(results)} cases, {dt:.1f} s)")
    print(f"{'q+kv dtype':14} {'cases':>6} {'failed':>6} {'max rel err':>12} {'mean rel err':>13} "
          f"{'max lse err':>12} {'tol':>8}")
    for d, st in stats.items():
        mean = st["mean_sum"] / max(1, st["cases"])
        print(f"{d:14} {st['cases']:6d} {st['fail']:6d} {st['max']:12.3e} {mean:13.3e} "
              f"{st['lse_max']:12.3e} {TOL_O[d.split('+')[0]]:8.0e}")
    print("\nkernels as loaded (registers / spill bytes per thread, from the cubin):")
    for dtype, hd in itertools.product(["fp16", "bf16"], [64, 128, 256]):
        regs = set()
        for mask, pos, sc in itertools.product(["none", "window"], ["none", "rope", "alibi"], [0, 1]):
            try:
                k = fj.kernel(Fijit.spec(dtype, hd, mask, pos, sc))
                regs.add((k.registers, k.spill_bytes))
            except Exception as e:
                regs.add(("error", str(e)[:60]))
        print(f"  {dtype} hd={hd}: " + ", ".join(f"{r} regs / {s_} B spill" for r, s_ in sorted(regs, key=str)))
    out = opt.json or (os.path.join(os.environ["OUT"], "test_decode.json")
                       if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump(dict(seed=seed, stats=stats, results=results), f, indent=1)
    failed = sum(st["fail"] for st in stats.values())
    print("test_decode:", "OK" if failed == 0 else f"{failed} FAILED")
    fj.close()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
