#!/usr/bin/env python3
"""GPU correctness test of fp8 single prefill (sm_90a): q, k, v torch.float8_e4m3fn with
per-tensor scales, o fp16 or bf16 (include/fijit_prefill.h, fi_prefill_args version 4),
against a float64 reference, with a tolerance derived from fp8's precision (TOLERANCE
below) checked element by element.

Inputs: random fp32 q, k, v (normal, std 1, and std 4 so that the logits are large and
the softmax peaked), quantised per tensor: scale = amax / 448 (e4m3's largest finite),
x8 = (x / scale).to(float8_e4m3fn). The reference reads the DEQUANTISED values
x8.double() * scale, so only the kernel's own error is measured. Shapes: head_dim 128;
masks none and causal (bottom-right aligned: key j visible to query i iff j <= i +
kv_len - qo_len); heads 32/8, 32/32 and 8/1 (GQA 8, K/V in HND); (qo_len, kv_len) from
(1, 1) to (513, 2100) and (4096, 4096) (not with --quick); o fp16 and bf16;
sm_scale 0.05 at qo_len 77, else the default 1/sqrt(128). Outputs o and lse are
poisoned (NaN) first; every workspace holds random bytes. Each case also runs the
16-bit kernel on the dequantised data (rounded to the output dtype) and reports both
mean errors. Then calls that must fail cleanly, leaving their outputs poisoned: no
workspace (FI_EINVALID), half the workspace, head_dim 64 (FI_EUNSUPPORTED),
fp8 q with fp16 k/v (the C library: FI_EUNSUPPORTED; fijit.prefill: TypeError), and
fijit.prefill's fp8 path once, against the reference.

    PYTHONPATH=python python3 tests/gpu/test_prefill_fp8.py [--quick] [--json PATH] [--lib LIBFIJIT]

The seed is printed (FIJIT_TEST_SEED replays it). Results go to --json PATH, else to
$OUT/test_prefill_fp8.json when OUT is set. Last line "test_prefill_fp8: N cases, F
failures"; exit status 1 on any failure.
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import torch

import fijit
from fijit.testing import Fijit, Prefill, prefill_args, prefill_spec, seeded_generator

FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0
OUT_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
D = 128

# ---- TOLERANCE ---------------------------------------------------------------------------
# The kernel computes s = (q8 . k8) * q_scale * k_scale * sm_scale on fp8 tensor cores,
# p = exp(s - running max) in fp32 (the row sum l from these unrounded p), rounds p to
# e4m3 for P.V on fp8 tensor cores, and writes o = (P.V) * v_scale / l rounded to o's
# dtype. Against the float64 reference, per row i (query, head) and element d:
#
# 1. P's rounding to e4m3 (3 mantissa bits): a weight p in e4m3's normal range
#    (>= 2^-6) is off by at most half an ulp, 2^-4 * p; a subnormal one by at most half
#    the subnormal spacing 2^-9, i.e. 2^-10 (and never by more than p itself):
#    |e_j| <= c_j = min(p_j, max(2^-4 p_j, 2^-10))                          (EPS_P, P_SUB)
# 2. The logits' accumulation: Hopper's fp8 tensor cores accumulate with fewer bits than
#    fp32 (about 14 kept, truncating: DeepSeek-V3 report, 3.3.2). Taken as a relative
#    error EPS_ACC = 2^-10 of the sum of magnitudes sum_d |q_d k_d| <= |q_i| |k_j|
#    (Cauchy-Schwarz), 4x the bias such truncation gives over head_dim 128:
#    |ds_ij| <= delta_i = EPS_ACC * sm_scale * |q_i| * max_j |k_j|. Each normalised
#    weight then moves by a factor within exp(+-2 delta_i): c_j += expm1(2 delta_i) p_j.
# 3. o's error from the weights: err_d = sum_j e_j v_jd / l. The e_j depend on q and k
#    only, and v is drawn independently of them, zero-mean and |v| <= vmax (that kv
#    head's largest |v|). At worst (all errors of one sign) |err| <= vmax sum_j c_j / l:
#    the error of a weighted mean with per-weight relative error eps is at most
#    eps * max|v|. With v's independence, Hoeffding: |err| <= HOEFFDING * vmax *
#    sqrt(sum_j c_j^2) / l except with probability 2 exp(-HOEFFDING^2 / 2) = 1e-12 per
#    element (a union bound over a case's up to 17M elements keeps a false failure
#    below 2e-5). The smaller of the two bounds counts: it is the worst case for a
#    peaked row (one weight ~1) and far tighter for flat rows of thousands of keys.
# 4. P.V's own fp8 accumulation: at most EPS_ACC * sum_j p_j |v_jd| / l <= EPS_ACC * vmax.
# 5. o's rounding to fp16 / bf16: half an ulp, U_OUT * |o| (2^-11, 2^-8), and fp16's
#    subnormal spacing 2^-24.
#    => |o - ref| <= (1 + U_OUT) * atol_i + U_OUT * |ref| + 2^-24,
#       atol_i = vmax * (min(sum c, HOEFFDING * sqrt(sum c^2)) / l + EPS_ACC).
# lse = m + log(l) comes from the unrounded fp32 p, so P's rounding does not reach it;
# the logits' error moves it by at most delta_i; fp32's exp/log/sums add ~1e-6:
#    |lse - ref| <= LSE_ABS + delta_i + 2^-20 * |ref|, LSE_ABS = 1e-3.
# First H200 run (all 168 cases): worst o error 0.2x its tolerance, lse 0.26x; lse's
# error at qo = kv = 1 (lse = the one logit) was 9e-4, 2^-13 of sum_d |q_d k_d| * sm_scale:
# the accumulation of 2. is real, and std 4 data's logits err by up to 0.056.
EPS_P = 2.0 ** -4
P_SUB = 2.0 ** -10
EPS_ACC = 2.0 ** -10
HOEFFDING = 7.5
U_OUT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
LSE_ABS = 1e-3
GAIN_TOL = 0.01  # |median row gain of o - 1| (judge): a 2% error of a scale fails


def quantize(x):
    """x (fp32) -> (x8 float8_e4m3fn, scale as the fp32 the kernel reads, x8 * scale float64)."""
    scale = float((x.abs().amax() / E4M3_MAX).float())
    x8 = (x / scale).to(FP8)
    return x8, scale, x8.double() * scale


def reference(q, k, v, sm_scale, causal):
    """q [Lq, H, D], k, v [Lk, Hkv, D] float64 (dequantised) -> o [Lq, H, D], lse [Lq, H],
    atol [Lq, H] and lse_tol [Lq, H] (TOLERANCE above). One kv head at a time: [G, Lq, Lk]
    float64 scores, 0.5 GB at 4096 x 4096 with G 4."""
    Lq, H, _ = q.shape
    Lk, Hkv = k.shape[0], k.shape[1]
    G = H // Hkv
    dev = q.device
    o = torch.zeros(Lq, H, D, dtype=torch.float64, device=dev)
    lse, atol, lse_tol = (torch.empty(Lq, H, dtype=torch.float64, device=dev) for _ in range(3))
    hidden = None
    if causal:
        hidden = (torch.arange(Lk, device=dev)[None, :] >
                  torch.arange(Lq, device=dev)[:, None] + (Lk - Lq))
    q_norm = q.norm(dim=-1)  # [Lq, H]
    for h in range(Hkv):
        heads = slice(h * G, (h + 1) * G)
        s = torch.einsum("igd,jd->gij", q[:, heads], k[:, h]) * sm_scale
        if hidden is not None:
            s.masked_fill_(hidden, -math.inf)
        m = s.amax(-1, keepdim=True).clamp_min(-1e300)  # a row with no key: p = 0, lse -inf
        p = torch.exp(s - m)
        del s
        l_sum = p.sum(-1)  # [G, Lq]
        inv_l = 1.0 / l_sum.clamp_min(1e-300)
        o[:, heads] = torch.einsum("gij,jd->igd", p, v[:, h]) * inv_l.T[..., None]
        lse[:, heads] = (m.squeeze(-1) + torch.log(l_sum)).T
        delta = EPS_ACC * sm_scale * q_norm[:, heads].T * k[:, h].norm(dim=-1).amax()
        c = torch.minimum(p, (EPS_P * p).clamp_min(P_SUB)) + torch.expm1(2 * delta)[..., None] * p
        weights = torch.minimum(c.sum(-1), HOEFFDING * c.square().sum(-1).sqrt()) * inv_l
        atol[:, heads] = (float(v[:, h].abs().amax()) * (weights + EPS_ACC)).T
        lse_tol[:, heads] = (LSE_ABS + delta).T
    lse_tol += 2.0 ** -20 * lse.abs().nan_to_num(posinf=0.0)
    return o, lse, atol, lse_tol


def row_gains(o64, ref_o):
    """Each row's (query, head) least-squares gain of o against the reference, over
    the rows whose reference is not zero: (median, the one furthest from 1); (1.0, 1.0)
    where no row has one."""
    o_rows, r_rows = o64.reshape(-1, D), ref_o.reshape(-1, D)
    norm = (r_rows * r_rows).sum(-1)
    live = norm > 0
    if not bool(live.any()):
        return 1.0, 1.0
    gains = (o_rows * r_rows).sum(-1)[live] / norm[live]
    worst = gains[(gains - 1.0).abs().argmax()]
    return float(gains.median()), float(worst)


def judge(o, lse, ref, odt):
    """o, lse against reference()'s output: a dict of the errors, their ratio to the
    tolerance (<= 1 passes) and ok."""
    ref_o, ref_lse, atol, lse_tol = ref
    o64 = o.double()
    diff = (o64 - ref_o).abs()
    u = U_OUT[odt]
    tol = (1 + u) * atol[..., None] + u * ref_o.abs() + 2.0 ** -24
    finite = bool(torch.isfinite(o64).all())
    o_ratio = float((diff / tol).max()) if finite else math.inf
    l64 = lse.double()
    empty = torch.isneginf(ref_lse)
    lse_ok = bool(torch.isneginf(l64[empty]).all())
    ld = (l64[~empty] - ref_lse[~empty]).abs()
    lse_ratio = float((ld / lse_tol[~empty]).max()) if ld.numel() else 0.0
    if not bool(torch.isfinite(ld).all()):
        lse_ratio = math.inf
    # The gain of o against the reference: a wrong scale (v_scale, say) multiplies
    # every row by one factor, which the elementwise bound above may leave room for.
    # Fitted per row (least squares over head_dim) and judged by the median over the
    # rows: the weights' rounding is unbiased and independent of v, so a row's gain is
    # within a fraction of a percent of 1, except in a row whose softmax a few weights
    # carry (up to e4m3's 2^-5 then). One fit over the whole case let such a row
    # decide it, as it has the largest |o|: seed 953451833, qo 1 x kv 300 at 8/1
    # (8 rows), fitted 1.0188 with every element within 0.05x its tolerance.
    gain, gain_worst = row_gains(o64, ref_o) if finite else (math.inf, math.inf)
    gain_ok = abs(gain - 1.0) <= GAIN_TOL
    return {"ok": finite and o_ratio <= 1.0 and lse_ok and lse_ratio <= 1.0 and gain_ok,
            "gain": gain, "gain_worst_row": gain_worst,
            "o_err_max": float(diff.max()) if finite else math.inf,
            "o_err_mean": float(diff.mean()) if finite else math.inf,
            "o_tol_ratio": o_ratio, "lse_err_max": float(ld.max()) if ld.numel() else 0.0,
            "lse_tol_ratio": lse_ratio if lse_ok else math.inf}


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def random_workspace(pf, spec, args, gen):
    """fi_prefill_workspace_size bytes of random contents set into args (the kernels
    need no initialised workspace); the tensor, to keep alive."""
    ws = pf.workspace(spec, args)
    if ws is not None:
        ws.random_(0, 256, generator=gen)
    return ws


def stream():
    return torch.cuda.current_stream().cuda_stream


class Inputs:
    """One case's quantised q, k, v (k and v in `layout`) and their dequantised values in
    NHD, for the reference and the 16-bit run."""

    def __init__(self, gen, lq, lk, H, Hkv, std, layout):
        def rnd(*shape):
            return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32) * std
        kv_shape = (lk, Hkv, D) if layout == "NHD" else (Hkv, lk, D)
        self.layout = layout
        self.q8, self.q_scale, self.qd = quantize(rnd(lq, H, D))
        self.k8, self.k_scale, self.kd = quantize(rnd(*kv_shape))
        self.v8, self.v_scale, self.vd = quantize(rnd(*kv_shape))

    def nhd(self, t):
        return t if self.layout == "NHD" else t.permute(1, 0, 2)

    def scales(self):
        return dict(q_scale=self.q_scale, k_scale=self.k_scale, v_scale=self.v_scale)

    def ref(self, sm_scale, causal):
        return reference(self.qd, self.nhd(self.kd), self.nhd(self.vd),
                         sm_scale or 1.0 / math.sqrt(D), causal)


def run_case(pf, gen, odt, mask, H, Hkv, lq, lk, std, sm_scale, layout, with_16bit):
    x = Inputs(gen, lq, lk, H, Hkv, std, layout)
    tdt = OUT_DTYPES[odt]
    o, lse = poisoned(lq, H, D, dtype=tdt), poisoned(lq, H, dtype=torch.float32)
    spec = prefill_spec("single", "fp8_e4m3", D, mask, out_dtype=odt)
    args = prefill_args(x.q8, x.k8, x.v8, o, lse, layout=layout, sm_scale=sm_scale,
                        **x.scales())
    ws = random_workspace(pf, spec, args, gen)  # noqa: F841 (alive through the launch)
    pf.run(spec, args, stream())
    torch.cuda.synchronize()
    ref = x.ref(sm_scale, mask == "causal")
    res = judge(o, lse, ref, odt)
    res["o16_err_mean"] = None
    if with_16bit:
        # The 16-bit kernel on the same (dequantised) data, rounded to o's dtype.
        q16, k16, v16 = x.qd.to(tdt), x.kd.to(tdt), x.vd.to(tdt)
        o16 = poisoned(lq, H, D, dtype=tdt)
        spec16 = prefill_spec("single", odt, D, mask)
        args16 = prefill_args(q16, k16, v16, o16, layout=layout, sm_scale=sm_scale)
        ws16 = random_workspace(pf, spec16, args16, gen)  # noqa: F841
        try:
            pf.run(spec16, args16, stream())
            torch.cuda.synchronize()
            res["o16_err_mean"] = float((o16.double() - ref[0]).abs().mean())
        except fijit.Error as e:  # informational: test_prefill.py tests the 16-bit kernels
            print(f"note: 16-bit run failed: {e}", flush=True)
    return res


class Checks:
    """Calls that must fail (or, for the package's path, pass) once each."""

    def __init__(self, fj, pf, gen):
        self.fj, self.pf, self.gen = fj, pf, gen
        self.results = []

    def record(self, name, ok, detail):
        print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + detail}", flush=True)
        self.results.append({"case": name, "ok": ok, "detail": detail})

    def expect_error(self, name, fn, exc, outputs):
        """fn() must raise exc and leave every tensor of `outputs` poisoned (NaN)."""
        for t in outputs:
            t.fill_(float("nan"))
        torch.cuda.synchronize()
        try:
            fn()
            got = None
        except Exception as e:  # the wrong exception is reported below
            got = e
        torch.cuda.synchronize()
        untouched = all(bool(torch.isnan(t).all()) for t in outputs)
        self.record(name, isinstance(got, exc) and untouched,
                    f"raised {got!r}" + ("" if untouched else "; the output was written"))

    def run(self):
        pf, gen = self.pf, self.gen
        ctx = self.fj.context
        x = Inputs(gen, 200, 300, 8, 2, 1.0, "NHD")
        o, lse = poisoned(200, 8, D, dtype=torch.bfloat16), poisoned(200, 8, dtype=torch.float32)
        outs = (o, lse)
        spec = prefill_spec("single", "fp8_e4m3", D, "causal", out_dtype="bf16")

        args = prefill_args(x.q8, x.k8, x.v8, o, lse, **x.scales())
        self.expect_error("fp8 without a workspace: InvalidError (FI_EINVALID)",
                          lambda: pf.run(spec, args, stream()), fijit.InvalidError, outs)
        short = prefill_args(x.q8, x.k8, x.v8, o, lse, **x.scales())
        # Half the size: no room for V's copy (16 bytes short could be the block counter
        # alone, which a run may do without).
        ws = random_workspace(pf, spec, short, gen)
        short.workspace_bytes = short.workspace_bytes // 32 * 16
        self.expect_error("fp8 with half the workspace: refused",
                          lambda: pf.run(spec, short, stream()), fijit.Error, outs)

        # head_dim 64: refused by the spec check, with room enough in a workspace.
        q64, k64, v64 = (t[..., :64].contiguous() for t in (x.q8, x.k8, x.v8))
        o64 = poisoned(200, 8, 64, dtype=torch.bfloat16)
        a64 = prefill_args(q64, k64, v64, o64, lse, **x.scales())
        big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        a64.workspace, a64.workspace_bytes = big.data_ptr(), big.numel()
        self.expect_error("fp8 head_dim 64: UnsupportedError (FI_EUNSUPPORTED)",
                          lambda: pf.run(prefill_spec("single", "fp8_e4m3", 64, "causal",
                                                      out_dtype="bf16"), a64, stream()),
                          fijit.UnsupportedError, (o64, lse))
        self.expect_error("fijit.prefill fp8 head_dim 64: UnsupportedError",
                          lambda: fijit.prefill(q64, k64, v64, causal=True, out=o64,
                                                ctx=ctx, **x.scales()),
                          fijit.UnsupportedError, (o64,))

        # Mixed dtypes: fp8 q with fp16 k and v.
        k16, v16 = x.kd.half(), x.vd.half()
        mixed = prefill_args(x.q8, k16, v16, o, lse, **x.scales())
        mixed.workspace, mixed.workspace_bytes = big.data_ptr(), big.numel()
        self.expect_error("fp8 q with fp16 k/v (spec q=fp8_e4m3 kv=fp16): UnsupportedError",
                          lambda: pf.run(prefill_spec("single", "fp8_e4m3", D, "causal",
                                                      out_dtype="bf16", kv_dtype="fp16"),
                                         mixed, stream()),
                          fijit.UnsupportedError, outs)
        self.expect_error("fijit.prefill fp8 q with fp16 k/v: TypeError",
                          lambda: fijit.prefill(x.q8, k16, v16, out=o, ctx=ctx, **x.scales()),
                          TypeError, (o,))
        self.expect_error("fijit.prefill fp16 q with fp8 k/v: TypeError",
                          lambda: fijit.prefill(x.qd.half(), x.k8, x.v8, ctx=ctx), TypeError, ())
        self.expect_error("fijit.prefill fp8 with out_dtype float32: TypeError",
                          lambda: fijit.prefill(x.q8, x.k8, x.v8, out_dtype=torch.float32,
                                                ctx=ctx, **x.scales()), TypeError, ())

        # The package's fp8 path: workspace, version 4, scales, out_dtype.
        try:
            po, pl = fijit.prefill(x.q8, x.k8, x.v8, causal=True, out_dtype=torch.float16,
                                   return_lse=True, ctx=ctx, **x.scales())
            torch.cuda.synchronize()
            r = judge(po, pl, x.ref(0.0, True), "fp16")
            self.record("fijit.prefill fp8 causal, out_dtype fp16, vs reference",
                        r["ok"] and po.dtype == torch.float16,
                        f"{po.dtype}, o {r['o_tol_ratio']:.3g} x tol, lse "
                        f"{r['lse_tol_ratio']:.3g} x tol")
        except Exception as e:
            self.record("fijit.prefill fp8 causal, out_dtype fp16, vs reference", False, repr(e))
        del ws, big
        return self.results


SHAPES = [(1, 1), (1, 300), (77, 77), (128, 128), (1000, 1000), (513, 2100), (4096, 4096)]
HEADS = [(32, 8), (32, 32), (8, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true",
                    help="no 4096 x 4096, and std 4 data with heads 32/8 only")
    ap.add_argument("--json", default=None, help="write per-case results here")
    ap.add_argument("--lib", default=None, help="libfijit.so to test (default: $FIJIT_LIB, "
                    "$FIJIT_LIBRARY, then build/libfijit.so)")
    ap.add_argument("--no-16bit", action="store_true",
                    help="skip the 16-bit runs on the dequantised data")
    ap.add_argument("--verbose", action="store_true", help="name each case before it runs")
    opt = ap.parse_args()

    seed, gen = seeded_generator("test_prefill_fp8")
    fj = Fijit(opt.lib)
    pf = Prefill(fj)
    shapes = [s for s in SHAPES if not (opt.quick and s == (4096, 4096))]
    results, stats = [], {}
    t0 = time.time()
    for odt, mask, (H, Hkv), std, (lq, lk) in itertools.product(
            OUT_DTYPES, ("none", "causal"), HEADS, (1.0, 4.0), shapes):
        if opt.quick and std != 1.0 and (H, Hkv) != (32, 8):
            continue
        sm_scale = 0.05 if lq == 77 else 0.0
        layout = "HND" if Hkv == 1 else "NHD"
        name = (f"o={odt} mask={mask} heads={H}/{Hkv} std={std:g} qo={lq} kv={lk} {layout}"
                f"{f' sm_scale={sm_scale:g}' if sm_scale else ''}")
        if opt.verbose:
            print(f"case {name}", flush=True)
        try:
            r = run_case(pf, gen, odt, mask, H, Hkv, lq, lk, std, sm_scale, layout,
                         not opt.no_16bit)
        except Exception as e:  # a failed call must not hide the other results
            r = {"ok": False, "error": repr(e)}
            print(f"ERROR {name}: {e}", flush=True)
        r["case"] = name
        results.append(r)
        st = stats.setdefault((odt, std), {"cases": 0, "fail": 0, "o_ratio": 0.0,
                                           "lse_ratio": 0.0, "err8": [], "err16": []})
        st["cases"] += 1
        st["fail"] += not r["ok"]
        if "error" not in r:
            st["o_ratio"] = max(st["o_ratio"], r["o_tol_ratio"])
            st["lse_ratio"] = max(st["lse_ratio"], r["lse_tol_ratio"])
            st["gain"] = max(st.get("gain", 0.0), abs(r["gain"] - 1.0))
            st["err8"].append(r["o_err_mean"])
            if r["o16_err_mean"] is not None:
                st["err16"].append(r["o16_err_mean"])
            if not r["ok"]:
                print(f"FAIL {name}: o {r['o_tol_ratio']:.3g} x tol (max |err| "
                      f"{r['o_err_max']:.3g}), lse {r['lse_tol_ratio']:.3g} x tol (max |err| "
                      f"{r['lse_err_max']:.3g}), gain {r['gain']:.4f}", flush=True)
    print(f"\nfp8 prefill vs float64 reference on the dequantised inputs ({len(results)} cases, "
          f"{time.time() - t0:.0f} s); 'x tol': the largest error / its tolerance (<= 1 passes)")
    print(f"{'o':4} {'std':>3} {'cases':>5} {'fail':>4} {'o x tol':>8} {'lse x tol':>9} "
          f"{'mean|err| fp8':>13} {'16-bit':>9} {'ratio':>6} {'|gain-1|':>8}")
    for (odt, std), st in stats.items():
        e8 = sum(st["err8"]) / len(st["err8"]) if st["err8"] else math.nan
        e16 = sum(st["err16"]) / len(st["err16"]) if st["err16"] else math.nan
        print(f"{odt:4} {std:3g} {st['cases']:5d} {st['fail']:4d} {st['o_ratio']:8.3f} "
              f"{st['lse_ratio']:9.3f} {e8:13.3e} {e16:9.3e} {e8 / e16:6.1f} "
              f"{st.get('gain', math.nan):8.2e}")
    print()
    results += Checks(fj, pf, gen).run()
    failures = sum(not r["ok"] for r in results)
    out = opt.json or (os.path.join(os.environ["OUT"], "test_prefill_fp8.json")
                       if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump({"seed": seed, "results": results}, f, indent=1)
    fj.close()
    print(f"test_prefill_fp8: {len(results)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
