#!/usr/bin/env python3
"""GPU correctness test of custom variants: the four examples in examples/variants/
against a float64 reference computed with torch on the GPU, and a re-implementation
of the built-in behaviour as a user snippet, which must be bit-identical to the
built-in kernel.

1. Examples (sigmoid, attention_sink, document_mask, tanh_softcap), each registered
   from its file with fi_jit_variant_register_file and launched with its declared
   parameters as fi_variant_arg values:
     single decode   kv_len 0, 1, 33, 777, 8192, 33000 (split-KV: automatic and forced),
                     GQA group 1-8, NHD and HND
     single prefill  mask none and causal (plus window on one tuple), qo/kv lengths
                     1/1, 37/37, 130/333, 200/100 (queries with no visible key under
                     causal), 700/1100, 1000/2500, every CTA tile kernel in turn
     batch decode, batch prefill ragged and paged: one mixed-length batch each
                     (zero-length requests included), fp16 and bf16 hd 128
   Tuples: fp16 and bf16 at head_dim 128 with no position encoding, plus two more per
   example (head_dim 64 and 256, RoPE, ALiBi, the built-in soft-cap) -- see TUPLES.
   Parameters are random per case (sigmoid scale/bias, sink logits around the
   keys' log-sum-exp, document layouts contiguous or scattered, caps that bite).
2. Default re-implemented (--equal-cases random cases): a snippet overriding the
   hooks with the built-in expressions (ALiBi bias, soft-cap, sliding window, as in
   templates/variant_*.cuh) runs on the same tuple and arguments as the built-in
   kernel; o and lse must be bit-identical (torch.equal, and equal bit patterns).
   Every prefill case and a quarter of the decode cases redefine query_transform too;
   decode then takes its path for transformed queries (two 16-bit parts instead of
   the untransformed q and scaled logits), so those are held to the float64
   reference instead of to the built-in's bits. So are the prefill cases whose
   built-in tuple may take the Hopper loop's raw queries (takes_raw_q).
3. Argument checks: a launch with missing or mistyped variant arguments is refused
   with a message naming the parameter.

Outputs and lse are poisoned with NaN before every launch; inputs are fresh random data
(the seed is printed; FIJIT_TEST_SEED replays it). Errors are relative to the
reference's largest magnitude per case, max|o - ref| / max|ref| and
mean|o - ref| / mean|ref|, against the tolerance of the output type (the same budget
as test_decode.py / test_prefill.py); lse is compared as |lse - ref| / max(1, |ref|).
Every case prints one line; failures say why; a summary table comes last. Exit
status 1 on any failure.

Reference semantics (queries at key positions qpos_i = i + kv_len - qo_len; decode is
qo_len = 1, qpos = kv_len - 1):
  s_ij = rope(q_i) . rope(k_j) * sm_scale [+ slope_h (j - qpos_i)] [-> cap tanh(s / cap)]
  visible: tuple mask (causal j <= qpos_i; window j >= qpos_i - window_left)
  sigmoid         w_ij = sigmoid(s_ij * sigmoid_scale + sigmoid_bias) on visible keys,
                  o_i = sum_j w_ij v_j; lse = 0
  attention_sink  softmax; o_i *= 1 / (1 + exp(sink_h - lse_i)) (0 when lse_i = -inf);
                  lse is the keys' own
  document_mask   visible also needs qpos_i >= 0 and seg[j] == seg[qpos_i]
  tanh_softcap    s_ij -> cap * tanh(s_ij / cap) after the default transform
  softmax variants: o_i = softmax(s_i) v over visible keys, lse_i = log sum exp;
  no visible key: o = 0, lse = -inf.
"""
import argparse
import concurrent.futures
import json
import math
import os
import struct
import sys
import time
import traceback

import torch

from fijit.testing import (FI_KIND_BATCH_DECODE, BatchDecode, BatchPrefillArgs, Fijit,
                           FijitError, Prefill, batch_decode_args, decode_args,
                           prefill_args, prefill_spec, set_variant_args, varg_int)
from test_prefill import reference_logits, reference_softmax

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Same budget as test_decode.py / test_prefill.py: fp32 accumulation; what remains is
# the rounding of q and P (prefill) and of the output itself (fp16 2^-11, bf16 2^-8).
TOL_O = {"fp16": 5e-3, "bf16": 2e-2}
TOL_LSE = {"fp16": 3e-3, "bf16": 1.5e-2}
# bf16 with RoPE: the rotated q (times sm_scale) and k are rounded to bf16 before the
# products, and a row whose lse comes from one key (window_left 0) has no averaging:
# simulating that rounding alone (hd 256, sm_scale 0.1, cap 4, 8800 one-key rows of
# N(0, 1) q and k) gives a largest relative lse error of 1.7e-2.
TOL_LSE_BF16_ROPE = 2.5e-2


def lse_tol(dtype, pos):
    return TOL_LSE_BF16_ROPE if dtype == "bf16" and pos == "rope" else TOL_LSE[dtype]
EXAMPLES = ["sigmoid", "attention_sink", "document_mask", "tanh_softcap"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES_DIR = os.path.join(ROOT, "examples", "variants")

# Per example: (dtype, head_dim, pos, built-in soft-cap, decode masks, prefill masks).
# The first two are the fp16/bf16 hd 128 baseline; the rest vary head_dim, RoPE/ALiBi,
# the built-in soft-cap and the sliding window, which the examples compose with
# through fijit::DefaultVariant.
TUPLES = {
    "sigmoid": [("fp16", 128, "none", 0, ["none"], ["none", "causal"]),
                ("bf16", 128, "none", 0, ["none"], ["none", "causal"]),
                ("fp16", 64, "alibi", 0, ["none", "window"], ["none", "causal", "window"]),
                ("bf16", 256, "rope", 0, ["none"], ["none", "causal"])],
    "attention_sink": [("fp16", 128, "none", 0, ["none"], ["none", "causal"]),
                       ("bf16", 128, "none", 0, ["none"], ["none", "causal"]),
                       ("bf16", 64, "rope", 0, ["none", "window"], ["none", "causal", "window"]),
                       ("fp16", 256, "alibi", 1, ["none"], ["none", "causal"])],
    "document_mask": [("fp16", 128, "none", 0, ["none"], ["none", "causal"]),
                      ("bf16", 128, "none", 0, ["none"], ["none", "causal"]),
                      ("fp16", 64, "rope", 0, ["none", "window"], ["none", "causal", "window"]),
                      ("bf16", 256, "alibi", 0, ["none"], ["none", "causal"])],
    "tanh_softcap": [("fp16", 128, "none", 0, ["none"], ["none", "causal"]),
                     ("bf16", 128, "none", 0, ["none"], ["none", "causal"]),
                     ("fp16", 64, "alibi", 0, ["none", "window"], ["none", "causal", "window"]),
                     ("bf16", 256, "rope", 0, ["none"], ["none", "causal"])],
}
DECODE_SHAPES = [  # (kv_len, group, layout, max_splits: 0 automatic)
    (0, 4, "NHD", 0), (1, 1, "NHD", 0), (33, 4, "HND", 0), (777, 2, "NHD", 5),
    (8192, 4, "NHD", 0), (8192, 8, "HND", 3), (33000, 1, "NHD", 0)]
DECODE_QUICK = [(1, 1, "NHD", 0), (33, 4, "HND", 0), (8192, 4, "NHD", 0)]
PREFILL_SHAPES = [  # (qo_len, kv_len, group, layout)
    (1, 1, 1, "NHD"), (37, 37, 4, "HND"), (130, 333, 2, "NHD"), (200, 100, 2, "HND"),
    (700, 1100, 1, "NHD"), (1000, 2500, 4, "HND")]
PREFILL_QUICK = [(37, 37, 4, "HND"), (130, 333, 2, "NHD"), (200, 100, 2, "HND")]
BATCH_DECODE = ([0, 1, 33, 4101, 7], 16, 4)       # (lengths, page_size, group)
BATCH_PREFILL = ([0, 1, 37, 130, 5], [5, 1, 60, 333, 0], 4)  # (qo lens, kv lens, group)
TILES = [0, 128, 64, 16]
HKV = 2


# ---- reference ----------------------------------------------------------------------------
def reference(q, k, v, *, variant, vp, sm_scale, pos, rope, slopes, cap, mask, window_left):
    """q [Lq, H, D], k/v [Lk, Hkv, D] (logical NHD) -> o [Lq, H, D], lse [Lq, H] float64.
    variant: None (built-in) or an example name; vp: its parameters (python values and
    tensors). The built-in tuple's logits and masks are test_prefill.py's (decode: one
    query, the last, which every key is visible to under a causal mask)."""
    Lq, H, D = q.shape
    Lk = k.shape[0]
    dev = q.device
    if Lq == 0 or Lk == 0:
        return (torch.zeros(Lq, H, D, dtype=torch.float64, device=dev),
                torch.full((Lq, H), -math.inf if variant != "sigmoid" else 0.0,
                           dtype=torch.float64, device=dev))
    v64 = v.double()
    s, vis, qp = reference_logits(q.double(), k.double(), sm_scale=sm_scale, pos=pos, rope=rope,
                                  slopes=slopes, cap=cap, mask=mask, window_left=window_left)
    if variant == "document_mask":
        seg = vp["segment_ids"].long()
        seg_q = seg[qp.clamp_min(0)]  # [Lq, 1]
        vis &= (qp >= 0) & (seg[:Lk][None, :] == seg_q)
    if variant == "tanh_softcap":
        c = float(vp["cap"])
        s = c * torch.tanh(s / c)
    if variant == "sigmoid":
        w = torch.sigmoid(s * float(vp["sigmoid_scale"]) + float(vp["sigmoid_bias"]))
        w = torch.where(vis, w, torch.zeros_like(w))
        o = torch.einsum("kgij,jkd->ikgd", w, v64).reshape(Lq, H, D)
        return o, torch.zeros(Lq, H, dtype=torch.float64, device=dev)
    o, lse = reference_softmax(s, vis, v64)
    if variant == "attention_sink":
        sink = vp["sink_logits"].double()[None, :]
        o = o / (1.0 + torch.exp(sink - lse))[..., None]  # lse = -inf: o / inf = 0
    return o, lse


# ---- comparison ---------------------------------------------------------------------------
def _where(mask_t):
    idx = mask_t.nonzero()
    return tuple(int(x) for x in idx[0]) if idx.numel() else None


def compare(o, lse, ref_o, ref_lse, dtype, softmax, pos):
    """(ok, max_rel, mean_rel, lse_err, why): o [..., D] output, lse [...] float32."""
    why = []
    o64 = o.double()
    n_bad = int((~torch.isfinite(o64)).sum())
    if n_bad:
        why.append(f"{n_bad} of {o64.numel()} output elements not finite (NaN poison left or "
                   f"overflow), first at {_where(~torch.isfinite(o64))}")
    diff = (o64 - ref_o).abs()
    if diff.numel() == 0:
        return not why, 0.0, 0.0, 0.0, "; ".join(why)
    smax = float(ref_o.abs().max())
    smean = float(ref_o.abs().mean())
    dfin = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    err_max = float(dfin.max()) / (smax if smax > 0 else 1.0)
    err_mean = float(dfin.mean()) / (smean if smean > 0 else 1.0)
    if err_max > TOL_O[dtype] and not n_bad:
        at = _where(dfin == dfin.max())
        why.append(f"max rel err {err_max:.3g} > tol {TOL_O[dtype]:.0e} at {at}: got "
                   f"{float(o64[at]):.6g}, want {float(ref_o[at]):.6g} (max|ref| {smax:.4g})")
    l64 = lse.double()
    lse_err = 0.0
    if not softmax:
        bad = l64 != 0
        if bool(bad.any()):
            at = _where(bad)
            lse_err = math.inf
            why.append(f"lse must be 0 without softmax: {int(bad.sum())} values differ, "
                       f"first at {at} = {float(l64[at])}")
    else:
        empty = torch.isneginf(ref_lse)
        if bool((empty & ~torch.isneginf(l64)).any()):
            at = _where(empty & ~torch.isneginf(l64))
            lse_err = math.inf
            why.append(f"lse must be -inf for a query with no visible key: at {at} got "
                       f"{float(l64[at])}")
        fin = ~empty
        if bool(fin.any()):
            d = (l64[fin] - ref_lse[fin]).abs() / ref_lse[fin].abs().clamp_min(1.0)
            e = float(d.max()) if bool(torch.isfinite(d).all()) else math.inf
            lse_err = max(lse_err, e)
            if e > lse_tol(dtype, pos):
                why.append(f"lse rel err {e:.3g} > tol {lse_tol(dtype, pos):.1e}")
    ok = not why
    if n_bad:
        err_max = err_mean = math.inf
    return ok, err_max, err_mean, lse_err, "; ".join(why)


# ---- random inputs ------------------------------------------------------------------------
class Rand:
    def __init__(self, gen):
        self.gen = gen

    def normal(self, *shape, dtype):
        return torch.randn(*shape, generator=self.gen, device="cuda",
                           dtype=torch.float32).to(dtype)

    def uniform(self, lo, hi):
        return lo + (hi - lo) * float(torch.rand(1, generator=self.gen, device="cuda"))

    def randint(self, lo, hi):
        """lo <= x < hi"""
        return int(torch.randint(lo, hi, (1,), generator=self.gen, device="cuda"))

    def choice(self, xs):
        return xs[self.randint(0, len(xs))]


def segment_ids(rnd, n):
    """int32 [max(n, 1)]: contiguous documents of random lengths (two cases in three), or
    scattered ids from a small set."""
    n = max(n, 1)
    if rnd.randint(0, 3) == 0:
        return torch.randint(0, 3, (n,), generator=rnd.gen, device="cuda", dtype=torch.int32)
    docs = rnd.randint(1, 9)
    cuts = torch.randint(0, n + 1, (docs - 1,), generator=rnd.gen, device="cuda")
    starts = torch.zeros(n, dtype=torch.int32, device="cuda")
    starts.index_add_(0, cuts.clamp_max(n - 1), torch.ones_like(cuts, dtype=torch.int32))
    return torch.cumsum(starts, 0).to(torch.int32)


def f32(x):
    """x rounded to float32, as the kernel receives a FI_VARG_FLOAT."""
    return struct.unpack("f", struct.pack("f", x))[0]


def variant_values(rnd, example, H, max_kv):
    """(values for fi_variant_arg, the same for the reference) of one case."""
    if example == "sigmoid":
        vals = {"sigmoid_scale": f32(rnd.uniform(0.5, 2.0)),
                "sigmoid_bias": f32(rnd.uniform(-math.log(max_kv + 1) - 1.0, 1.0))}
        return vals, vals
    if example == "attention_sink":
        # Around the keys' log-sum-exp (~ log kv_len) so the factor spans (0, 1).
        base = math.log(max(max_kv, 1))
        sinks = (torch.rand(H, generator=rnd.gen, device="cuda") * 8.0 - 4.0 + base).float()
        return {"sink_logits": sinks}, {"sink_logits": sinks}
    if example == "document_mask":
        seg = segment_ids(rnd, max_kv)
        return {"segment_ids": seg}, {"segment_ids": seg}
    if example == "tanh_softcap":
        vals = {"cap": f32(rnd.uniform(0.5, 3.0))}  # bites on logits of about unit size
        return vals, vals
    return None, {}


class Scalars:
    """Launch scalars of one case (sm_scale, RoPE, ALiBi, built-in cap, window)."""

    def __init__(self, rnd, example, hd, H, mask, pos, softcap, kv_len, decode):
        # Logits of about unit size (as in test_prefill.py): q * sm_scale is rounded to
        # 16 bits before the tensor-core products, so much larger logits would need a
        # looser tolerance than the output's.
        self.sm_scale = rnd.choice([0.0, 0.07, 0.1])
        self.scale = self.sm_scale if self.sm_scale else 1.0 / math.sqrt(hd)
        self.cap = rnd.uniform(2.0, 6.0) if softcap else 0.0
        self.window_left = -1
        if mask == "window":
            self.window_left = (rnd.choice([0, 5, kv_len // 2, kv_len + 10]) if decode else
                                rnd.choice([0, 5, 40, 1000, 100000]))  # 100000: causal
        self.rope = (1.0, 1e4, 0)
        if pos == "rope":
            self.rope = rnd.choice([(1.0, 1e4, 0), (2.0, 5e5, 777), (1.0, 1e6, 100000)])
        self.slopes = None
        if pos == "alibi":
            self.slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)],
                                       device="cuda", dtype=torch.float32)
        self.pos, self.mask = pos, mask

    def launch(self):
        r = self.pos == "rope"
        return dict(sm_scale=self.sm_scale, logits_soft_cap=self.cap,
                    rope_scale=self.rope[0] if r else 0.0, rope_theta=self.rope[1] if r else 0.0,
                    rope_offset=self.rope[2] if r else 0, window_left=self.window_left,
                    alibi_slopes=self.slopes)

    def ref(self):
        return dict(sm_scale=self.scale, pos=self.pos, rope=self.rope, slopes=self.slopes,
                    cap=self.cap, mask=self.mask, window_left=self.window_left)


def stream():
    return torch.cuda.current_stream().cuda_stream


# ---- single decode and prefill ------------------------------------------------------------
def run_decode(fj, rnd, c, spec):
    """One single-decode case; c: dict with example, dtype, hd, mask, pos, softcap, L,
    group, layout, splits. Returns compare()'s tuple."""
    tdt = TORCH_DTYPES[c["dtype"]]
    hd, L, H = c["hd"], c["L"], c["group"] * HKV
    sc = Scalars(rnd, c["example"], hd, H, c["mask"], c["pos"], c["softcap"], L, True)
    vargs, vref = variant_values(rnd, c["example"], H, L)
    q = rnd.normal(H, hd, dtype=tdt)
    if c["layout"] == "NHD":
        k, v = rnd.normal(L, HKV, hd, dtype=tdt), rnd.normal(L, HKV, hd, dtype=tdt)
        kn, vn = k, v
    else:
        k, v = rnd.normal(HKV, L, hd, dtype=tdt), rnd.normal(HKV, L, hd, dtype=tdt)
        kn, vn = k.permute(1, 0, 2), v.permute(1, 0, 2)
    o = torch.full((H, hd), float("nan"), device="cuda", dtype=tdt)
    lse = torch.full((H,), float("nan"), device="cuda", dtype=torch.float32)
    args = decode_args(q, k, v, o, lse, layout=c["layout"], max_splits=c["splits"],
                       variant_args=vargs, **sc.launch())
    ws_bytes = fj.workspace_size(spec, args)
    ws = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device="cuda")
    args.workspace, args.workspace_bytes = ws.data_ptr(), ws_bytes
    fj.run(spec, args, stream())
    torch.cuda.synchronize()
    ref_o, ref_lse = reference(q[None], kn, vn, variant=c["example"], vp=vref, **sc.ref())
    return compare(o, lse, ref_o[0], ref_lse[0], c["dtype"], c["example"] != "sigmoid",
                   c["pos"])


def run_prefill(pf, rnd, c, spec):
    tdt = TORCH_DTYPES[c["dtype"]]
    hd, lq, lk, H = c["hd"], c["lq"], c["lk"], c["group"] * HKV
    sc = Scalars(rnd, c["example"], hd, H, c["mask"], c["pos"], c["softcap"], lk, False)
    vargs, vref = variant_values(rnd, c["example"], H, lk)
    q = rnd.normal(lq, H, hd, dtype=tdt)
    if c["layout"] == "NHD":
        k, v = rnd.normal(lk, HKV, hd, dtype=tdt), rnd.normal(lk, HKV, hd, dtype=tdt)
        kn, vn = k, v
    else:
        k, v = rnd.normal(HKV, lk, hd, dtype=tdt), rnd.normal(HKV, lk, hd, dtype=tdt)
        kn, vn = k.permute(1, 0, 2), v.permute(1, 0, 2)
    o = torch.full((lq, H, hd), float("nan"), device="cuda", dtype=tdt)
    lse = torch.full((lq, H), float("nan"), device="cuda", dtype=torch.float32)
    args = prefill_args(q, k, v, o, lse, layout=c["layout"], cta_tile_q=c["tile"],
                        variant_args=vargs, **sc.launch())
    pf.run(spec, args, stream())
    torch.cuda.synchronize()
    ref_o, ref_lse = reference(q, kn, vn, variant=c["example"], vp=vref, **sc.ref())
    return compare(o, lse, ref_o, ref_lse, c["dtype"], c["example"] != "sigmoid",
                   c["pos"])


# ---- batch kinds --------------------------------------------------------------------------
def paged_cache(rnd, lens, page_size, hd, tdt):
    """NHD pages [P, page, Hkv, D] handed out in random order. Returns (k, v, indptr, last,
    indices int32 device, per-request dense k/v [L, Hkv, D])."""
    pages = [(n + page_size - 1) // page_size for n in lens]
    indptr = [0]
    for n in pages:
        indptr.append(indptr[-1] + n)
    total = indptr[-1] + 3
    kc = rnd.normal(total, page_size, HKV, hd, dtype=tdt)
    vc = rnd.normal(total, page_size, HKV, hd, dtype=tdt)
    perm = torch.randperm(total, generator=rnd.gen, device="cuda")[:max(indptr[-1], 1)]
    indices = perm.to(torch.int32).contiguous()
    last = [n - (p - 1) * page_size if p else 0 for n, p in zip(lens, pages)]
    dense = []
    for b, n in enumerate(lens):
        idx = indices[indptr[b]:indptr[b + 1]].long()
        dense.append((kc[idx].reshape(-1, HKV, hd)[:n], vc[idx].reshape(-1, HKV, hd)[:n]))
    return kc, vc, indptr, last, indices, dense


def run_batch_decode(fj, bd, rnd, c, spec):
    tdt = TORCH_DTYPES[c["dtype"]]
    hd = c["hd"]
    lens, page_size, group = BATCH_DECODE
    B, H = len(lens), group * HKV
    sc = Scalars(rnd, c["example"], hd, H, c["mask"], c["pos"], c["softcap"], max(lens), True)
    vargs, vref = variant_values(rnd, c["example"], H, max(lens))
    q = rnd.normal(B, H, hd, dtype=tdt)
    kc, vc, indptr, last, indices, dense = paged_cache(rnd, lens, page_size, hd, tdt)
    o = torch.full((B, H, hd), float("nan"), device="cuda", dtype=tdt)
    lse = torch.full((B, H), float("nan"), device="cuda", dtype=torch.float32)
    plan, ws = bd.plan(spec, indptr, last, H, HKV, page_size, window_left=sc.window_left)
    try:
        la = sc.launch()
        args = batch_decode_args(q, kc, vc, indices, o, lse, ws, layout="NHD",
                                 sm_scale=la["sm_scale"],
                                 logits_soft_cap=la["logits_soft_cap"],
                                 rope_scale=la["rope_scale"], rope_theta=la["rope_theta"],
                                 alibi_slopes=la["alibi_slopes"], variant_args=vargs)
        bd.run(plan, args, stream())
        torch.cuda.synchronize()
    finally:
        bd.free(plan)
    ref_o = torch.zeros(B, H, hd, dtype=torch.float64, device="cuda")
    ref_lse = torch.zeros(B, H, dtype=torch.float64, device="cuda")
    for b in range(B):
        ro, rl = reference(q[b][None], dense[b][0], dense[b][1], variant=c["example"], vp=vref,
                           **sc.ref())
        ref_o[b], ref_lse[b] = ro[0], rl[0]
    return compare(o, lse, ref_o, ref_lse, c["dtype"], c["example"] != "sigmoid",
                   c["pos"])


def run_batch_prefill(pf, rnd, c, spec):
    tdt = TORCH_DTYPES[c["dtype"]]
    hd, kind = c["hd"], c["kind"]
    qo_lens, kv_lens, group = BATCH_PREFILL
    B, H = len(qo_lens), group * HKV
    page_size = 5
    sc = Scalars(rnd, c["example"], hd, H, c["mask"], c["pos"], c["softcap"], max(kv_lens), False)
    vargs, vref = variant_values(rnd, c["example"], H, max(kv_lens))
    qo_indptr = [0]
    for n in qo_lens:
        qo_indptr.append(qo_indptr[-1] + n)
    total_q = qo_indptr[-1]
    q = rnd.normal(total_q, H, hd, dtype=tdt)
    o = torch.full((total_q, H, hd), float("nan"), device="cuda", dtype=tdt)
    lse = torch.full((total_q, H), float("nan"), device="cuda", dtype=torch.float32)
    a = BatchPrefillArgs()  # FI_BATCH_PREFILL_ARGS_VERSION
    last = None
    if kind == "ragged":
        kv_indptr = [0]
        for n in kv_lens:
            kv_indptr.append(kv_indptr[-1] + n)
        k = rnd.normal(max(kv_indptr[-1], 1), HKV, hd, dtype=tdt)
        v = rnd.normal(max(kv_indptr[-1], 1), HKV, hd, dtype=tdt)
        a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = (k.stride(0), k.stride(1),
                                                                  v.stride(0), v.stride(1))
        dense = [(k[kv_indptr[b]:kv_indptr[b + 1]], v[kv_indptr[b]:kv_indptr[b + 1]])
                 for b in range(B)]
        keep = ()
    else:
        k, v, kv_indptr, last, indices, dense = paged_cache(rnd, kv_lens, page_size, hd, tdt)
        a.k_stride_page, a.k_stride_n, a.k_stride_h = k.stride(0), k.stride(1), k.stride(2)
        a.v_stride_page, a.v_stride_n, a.v_stride_h = v.stride(0), v.stride(1), v.stride(2)
        last_t = torch.tensor(last, dtype=torch.int32, device="cuda")
        a.kv_indices, a.kv_last_page_len = indices.data_ptr(), last_t.data_ptr()
        keep = (indices, last_t)
    plan, ws = pf.plan(spec, qo_indptr, kv_indptr, H, HKV, kv_last_page_len=last,
                       page_size=page_size if kind == "paged" else 16,
                       window_left=sc.window_left, cta_tile_q=c["tile"])
    qo_t = torch.tensor(qo_indptr, dtype=torch.int32, device="cuda")
    kv_t = torch.tensor(kv_indptr, dtype=torch.int32, device="cuda")
    a.q, a.k, a.v, a.o, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    a.qo_indptr, a.kv_indptr = qo_t.data_ptr(), kv_t.data_ptr()
    a.q_stride_n, a.q_stride_h, a.o_stride_n, a.o_stride_h = (q.stride(0), q.stride(1),
                                                              o.stride(0), o.stride(1))
    la = sc.launch()
    for name in ("sm_scale", "logits_soft_cap", "rope_scale", "rope_theta", "rope_offset"):
        setattr(a, name, la[name])
    a.alibi_slopes = la["alibi_slopes"].data_ptr() if la["alibi_slopes"] is not None else None
    set_variant_args(a, vargs)
    try:
        pf.batch_run(plan, a, stream())
        torch.cuda.synchronize()
    finally:
        pf.plan_free(plan)
    del keep
    ref_o = torch.zeros(total_q, H, hd, dtype=torch.float64, device="cuda")
    ref_lse = torch.zeros(total_q, H, dtype=torch.float64, device="cuda")
    for b in range(B):
        s, e = qo_indptr[b], qo_indptr[b + 1]
        ro, rl = reference(q[s:e], dense[b][0], dense[b][1], variant=c["example"], vp=vref,
                           **sc.ref())
        ref_o[s:e], ref_lse[s:e] = ro, rl
    return compare(o, lse, ref_o, ref_lse, c["dtype"], c["example"] != "sigmoid",
                   c["pos"])


# ---- the built-in behaviour re-implemented as a user variant ------------------------------
def reimpl_source(alibi, softcap, window, query):
    """A snippet overriding every hook with the built-in expressions (templates/
    common/variant.cuh, variants/alibi.cuh, variants/softcap.cuh, variants/window.cuh) for
    the layers this tuple has, query_transform only when `query`. Keep it in step with
    those files: the comparison is bit for bit, except for decode with `query`: decode
    multiplies the untransformed q with K and scales the fp32 logits when the variant
    keeps the base query_transform, and a redefined one (even the same expression)
    takes the two-part path of transformed queries, which rounds differently."""
    lt = []
    if alibi:
        lt.append("        logit = logit + p.alibi_slopes[qo_head] * (float)(kv_idx - qo_idx);")
    if softcap:
        lt.append("        logit = p.soft_cap * fijit::tanh_accurate(logit * (1.0f / p.soft_cap));")
    mask = ("        return p.window_left < 0 || kv_idx >= qo_idx - p.window_left;" if window else
            "        return true;")
    return "\n".join([
        f"// The built-in variant (alibi={int(alibi)} softcap={int(softcap)} "
        f"window={int(window)}) written with the public hooks.",
        "struct Variant : fijit::DefaultVariant {"] + ([
        "    template <class P>",
        "    static __device__ __forceinline__ float query_transform(const P &p, float q,"
        " int qo_head, int dim)",
        "    {",
        "        return q * p.sm_scale;",
        "    }"] if query else []) + [
        "    template <class P>",
        "    static __device__ __forceinline__ float logits_transform(const P &p, float logit,"
        " int qo_head, int kv_idx, int qo_idx)",
        "    {"] + lt + [
        "        return logit;",
        "    }",
        "    template <class P>",
        "    static __device__ __forceinline__ bool logits_mask(const P &p, int qo_head,"
        " int kv_idx, int qo_idx)",
        "    {",
        mask,
        "    }",
        "    template <class P>",
        "    static __device__ __forceinline__ float output_transform(const P &p, float o,"
        " int qo_head, int dim, float lse)",
        "    {",
        "        return o;",
        "    }",
        "};",
        ""])


def reimpl_name(pos, softcap, mask, query):
    return (f"reimpl_a{int(pos == 'alibi')}_c{int(softcap)}_w{int(mask == 'window')}"
            f"_q{int(query)}")


def equal_cases(rnd, n):
    """n random (kind, tuple, shape) cases for the bit-identity test."""
    out = []
    for idx in range(n):
        kind = "decode" if idx % 2 == 0 else "prefill"
        c = dict(kind=kind, dtype=rnd.choice(["fp16", "bf16"]), hd=rnd.choice([64, 128, 256]),
                 pos=rnd.choice(["none", "rope", "alibi"]), softcap=rnd.choice([0, 1]),
                 group=rnd.choice([1, 2, 4, 8]), layout=rnd.choice(["NHD", "HND"]))
        if kind == "decode":
            c.update(mask=rnd.choice(["none", "window"]),
                     L=rnd.choice([1, 33, 500, 4099, 8192, rnd.randint(2, 20000)]),
                     splits=rnd.choice([0, 0, 1, 5]))
        else:
            lk = rnd.choice([1, 37, 333, 1100, rnd.randint(1, 2000)])
            lq = rnd.choice([1, lk, max(1, lk // 3), rnd.randint(1, 1500)])
            c.update(mask=rnd.choice(["none", "causal", "window"]), lq=lq, lk=lk,
                     tile=rnd.choice(TILES))
        # Decode with a redefined query_transform is held to the float64 reference
        # instead (see reimpl_source); every other case must be bit-identical.
        c["query"] = kind == "prefill" or idx % 4 == 0
        c["variant"] = reimpl_name(c["pos"], c["softcap"], c["mask"], c["query"])
        out.append(c)
    return out


def takes_raw_q(c):
    """Whether the built-in kernel of prefill case c may read q as it is, with sm_scale
    applied in the softmax (the Hopper loop's kRawQTuple, templates/prefill/ws/
    config.cuh: tuples that keep the base query and logits hooks, no RoPE,
    head_dim <= 128, 128-row tiles or the automatic choice): a variant redefining the
    hooks scales q first, which rounds differently."""
    return (c["kind"] == "prefill" and c["pos"] == "none" and not c["softcap"] and
            c["hd"] <= 128 and c["tile"] in (0, 128))


def run_equal(fj, pf, rnd, c, spec_builtin, spec_variant):
    """Built-in vs re-implementation on identical inputs: (ok, why, ref_err)."""
    tdt = TORCH_DTYPES[c["dtype"]]
    hd, H = c["hd"], c["group"] * HKV
    decode = c["kind"] == "decode"
    lk = c["L"] if decode else c["lk"]
    lq = 1 if decode else c["lq"]
    sc = Scalars(rnd, None, hd, H, c["mask"], c["pos"], c["softcap"], lk, decode)
    q = rnd.normal(lq, H, hd, dtype=tdt)
    if c["layout"] == "NHD":
        k, v = rnd.normal(lk, HKV, hd, dtype=tdt), rnd.normal(lk, HKV, hd, dtype=tdt)
        kn, vn = k, v
    else:
        k, v = rnd.normal(HKV, lk, hd, dtype=tdt), rnd.normal(HKV, lk, hd, dtype=tdt)
        kn, vn = k.permute(1, 0, 2), v.permute(1, 0, 2)
    outs = []
    for spec in (spec_builtin, spec_variant):
        o = torch.full((lq, H, hd), float("nan"), device="cuda", dtype=tdt)
        lse = torch.full((lq, H), float("nan"), device="cuda", dtype=torch.float32)
        if decode:
            args = decode_args(q[0], k, v, o[0], lse[0], layout=c["layout"],
                               max_splits=c["splits"], **sc.launch())
            ws_bytes = fj.workspace_size(spec, args)
            ws = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device="cuda")
            args.workspace, args.workspace_bytes = ws.data_ptr(), ws_bytes
            fj.run(spec, args, stream())
        else:
            args = prefill_args(q, k, v, o, lse, layout=c["layout"], cta_tile_q=c["tile"],
                                **sc.launch())
            pf.run(spec, args, stream())
        torch.cuda.synchronize()
        outs.append((o, lse))
    (o1, l1), (o2, l2) = outs
    why = []
    ref_o, ref_lse = reference(q, kn, vn, variant=None, vp={}, **sc.ref())
    ref_only = (decode and c["query"]) or takes_raw_q(c)  # see reimpl_source, takes_raw_q
    if ref_only:
        ok_var, _, _, _, why_var = compare(o2, l2, ref_o, ref_lse, c["dtype"], True,
                                           c["pos"])
        if not ok_var:
            why.append("variant vs float64 reference: " + why_var)
    elif not torch.equal(o1, o2) or not torch.equal(o1.view(torch.int16), o2.view(torch.int16)):
        diff = (o1.view(torch.int16) != o2.view(torch.int16)) | (o1 != o2)
        at = _where(diff)
        why.append(f"o differs in {int(diff.sum())} of {o1.numel()} elements, first at {at}: "
                   f"built-in {float(o1[at])!r}, variant {float(o2[at])!r}")
    if (not ref_only and
            (not torch.equal(l1, l2) or not torch.equal(l1.view(torch.int32), l2.view(torch.int32)))):
        diff = (l1.view(torch.int32) != l2.view(torch.int32)) | (l1 != l2)
        at = _where(diff)
        why.append(f"lse differs in {int(diff.sum())} of {l1.numel()}, first at {at}: "
                   f"built-in {float(l1[at])!r}, variant {float(l2[at])!r}")
    # Both equal but wrong would pass the above: hold the built-in to the reference too.
    ok_ref, emax, _, _, why_ref = compare(o1, l1, ref_o, ref_lse, c["dtype"], True, c["pos"])
    if not ok_ref:
        why.append("built-in vs float64 reference: " + why_ref)
    return not why, "; ".join(why), emax


# ---- argument checks ----------------------------------------------------------------------
def argument_checks(fj):
    """Launches with wrong variant arguments are refused, naming the parameter, and
    write nothing. Returns (number of checks, list of failure messages)."""
    fails = []
    q = torch.randn(8, 128, device="cuda").half()
    k = torch.randn(16, 2, 128, device="cuda").half()
    o = torch.full((8, 128), float("nan"), device="cuda", dtype=torch.float16)
    spec = Fijit.spec("fp16", 128, variant="sigmoid")
    cases = [("no arguments", None, "sigmoid_scale"),
             ("one missing", {"sigmoid_scale": 1.0}, "sigmoid_bias"),
             ("int for a float", {"sigmoid_scale": varg_int(1), "sigmoid_bias": 0.0},
              "sigmoid_scale"),
             ("unknown name", {"sigmoid_scale": 1.0, "sigmoid_bias": 0.0, "bogus": 1.0}, None),
             ("misspelt", {"sigmoid_scale": 1.0, "sigmoid_bais": 0.0}, "sigmoid_bais")]
    for what, vals, needle in cases:
        args = decode_args(q, k, k, o, None, layout="NHD", max_splits=1, variant_args=vals)
        try:
            fj.run(spec, args, stream())
            torch.cuda.synchronize()
            fails.append(f"sigmoid decode with {what}: accepted")
        except FijitError as e:
            if needle and needle not in str(e):
                fails.append(f"sigmoid decode with {what}: message does not name '{needle}': {e}")
    builtin = Fijit.spec("fp16", 128)
    args = decode_args(q, k, k, o, None, layout="NHD", max_splits=1,
                       variant_args={"sigmoid_scale": 1.0})
    try:
        fj.run(builtin, args, stream())
        torch.cuda.synchronize()
        fails.append("built-in decode with a variant argument: accepted")
    except FijitError:
        pass
    if not bool(torch.isnan(o).all()):
        fails.append("a refused launch wrote to o")
    return len(cases) + 2, fails


# ---- driver -------------------------------------------------------------------------------
def spec_of(c, variant):
    if c["kind"] == "decode":
        return Fijit.spec(c["dtype"], c["hd"], c["mask"], c["pos"], c["softcap"], variant=variant)
    if c["kind"] == "batch_decode":
        return Fijit.spec(c["dtype"], c["hd"], c["mask"], c["pos"], c["softcap"],
                          kind=FI_KIND_BATCH_DECODE, variant=variant)
    kind = {"prefill": "single", "ragged": "ragged", "paged": "paged"}[c["kind"]]
    return prefill_spec(kind, c["dtype"], c["hd"], c["mask"], c["pos"], c["softcap"],
                        variant=variant)


def example_cases(examples, quick, with_batch):
    cases = []
    n = 0
    for ex in examples:
        for dtype, hd, pos, softcap, dmasks, pmasks in TUPLES[ex]:
            base = dict(example=ex, dtype=dtype, hd=hd, pos=pos, softcap=softcap)
            for mask in dmasks:
                for L, group, layout, splits in (DECODE_QUICK if quick else DECODE_SHAPES):
                    cases.append(dict(base, kind="decode", mask=mask, L=L, group=group,
                                      layout=layout, splits=splits))
            for mask in pmasks:
                for lq, lk, group, layout in (PREFILL_QUICK if quick else PREFILL_SHAPES):
                    cases.append(dict(base, kind="prefill", mask=mask, lq=lq, lk=lk,
                                      group=group, layout=layout, tile=TILES[n % len(TILES)]))
                    n += 1
        if with_batch:
            for dtype in ("fp16", "bf16"):
                base = dict(example=ex, dtype=dtype, hd=128, pos="none", softcap=0)
                cases.append(dict(base, kind="batch_decode", mask="none"))
                for kind in ("ragged", "paged"):
                    cases.append(dict(base, kind=kind, mask="causal", tile=TILES[n % len(TILES)]))
                    n += 1
    return cases


def describe(c):
    t = (f"{c.get('example') or c.get('variant')} {c['kind']} {c['dtype']} hd={c['hd']} "
         f"mask={c['mask']} pos={c['pos']} softcap={c['softcap']}")
    if c["kind"] == "decode":
        return t + f" kv={c['L']} group={c['group']} {c['layout']} splits={c['splits']}"
    if c["kind"] == "prefill":
        return t + (f" qo={c['lq']} kv={c['lk']} group={c['group']} {c['layout']} "
                    f"tile={c['tile']}")
    if c["kind"] == "batch_decode":
        return t + f" lens={BATCH_DECODE[0]} page={BATCH_DECODE[1]} group={BATCH_DECODE[2]}"
    return t + f" qo={BATCH_PREFILL[0]} kv={BATCH_PREFILL[1]} group={BATCH_PREFILL[2]} tile={c['tile']}"


def prewarm(fj, specs, jobs):
    """Compile every distinct spec into the cache in parallel before the runs (the
    first spec is loaded on this thread to learn the device's arch). Failures are
    only reported here: the case that needs the spec fails with the message too."""
    uniq = {}
    for s in specs:
        key = (s.kind, s.q_dtype, s.head_dim, s.mask, s.pos, s.soft_cap, s.variant)
        uniq.setdefault(key, s)
    specs = list(uniq.values())
    if not specs:
        return
    t0 = time.time()
    arch = None
    for s in specs[:3]:
        try:
            arch = fj.kernel(s).arch.decode()
            break
        except Exception as e:  # reported by its case
            print(f"prewarm: {str(e)[:2000]}", flush=True)
    if arch is None:
        print("prewarm: no spec compiled; see the cases below", flush=True)
        return
    counts = {"compiled": 0, "cached": 0, "failed": 0}
    first_error = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = [pool.submit(fj.prewarm, s, arch) for s in specs]
        for f in futs:
            try:
                counts[f.result()] += 1
            except Exception as e:
                counts["failed"] += 1
                first_error = first_error or str(e)
    print(f"prewarm ({arch}, {jobs} threads): {len(specs)} modules, {counts['compiled']} "
          f"compiled, {counts['cached']} cached, {counts['failed']} failed, "
          f"{time.time() - t0:.0f} s", flush=True)
    if first_error:
        print(f"  first prewarm failure: {first_error[:3000]}", flush=True)


def clip(text, earlier_failures):
    """The first failure's message in full (an NVRTC log can be long), later ones cut."""
    return text if earlier_failures == 0 or len(text) <= 700 else text[:700] + " [...]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer shapes and equality cases")
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--equal-cases", type=int, default=None,
                    help="random cases of the bit-identity test (default 32, quick 12)")
    ap.add_argument("--no-batch", action="store_true", help="skip the batch kinds")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4,
                    help="threads compiling before the runs (0: no prewarm)")
    ap.add_argument("--json", default=None, help="write per-case results here")
    opt = ap.parse_args()

    seed = int(os.environ.get("FIJIT_TEST_SEED", time.time_ns() % (2**31)))
    print(f"test_variants: seed {seed} (FIJIT_TEST_SEED={seed} replays)", flush=True)
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    rnd = Rand(gen)
    fj = Fijit()
    pf = Prefill(fj)
    bd = BatchDecode(fj)
    examples = [e for e in opt.examples.split(",") if e]
    failures = 0
    results = []

    # Registration: every example from its file; the re-implementations from text.
    for ex in examples:
        path = os.path.join(EXAMPLES_DIR, ex + ".cuh")
        try:
            name = fj.register_variant_file(path)
            assert name == ex, (name, ex)
        except Exception as e:
            print(f"FAIL register {path}: {e}", flush=True)
            return 1
    n_equal = opt.equal_cases if opt.equal_cases is not None else (12 if opt.quick else 32)
    eq_cases = equal_cases(rnd, n_equal)
    for c in eq_cases:
        try:
            fj.register_variant(c["variant"], reimpl_source(c["pos"] == "alibi", c["softcap"],
                                                            c["mask"] == "window", c["query"]))
        except FijitError as e:
            print(f"FAIL register {c['variant']}: {e}", flush=True)
            return 1

    cases = example_cases(examples, opt.quick, not opt.no_batch)
    if opt.jobs > 0:
        prewarm(fj, [spec_of(c, c["example"]) for c in cases] +
                [spec_of(c, v) for c in eq_cases for v in (None, c["variant"])], opt.jobs)

    # 1. Examples vs float64.
    stats = {}
    t0 = time.time()
    print(f"\n== examples vs float64 reference ({len(cases)} cases)", flush=True)
    for c in cases:
        name = describe(c)
        spec = spec_of(c, c["example"])
        try:
            if c["kind"] == "decode":
                ok, emax, emean, lerr, why = run_decode(fj, rnd, c, spec)
            elif c["kind"] == "prefill":
                ok, emax, emean, lerr, why = run_prefill(pf, rnd, c, spec)
            elif c["kind"] == "batch_decode":
                ok, emax, emean, lerr, why = run_batch_decode(fj, bd, rnd, c, spec)
            else:
                ok, emax, emean, lerr, why = run_batch_prefill(pf, rnd, c, spec)
        except Exception as e:  # a failed call must not hide the other results
            ok, emax, emean, lerr = False, math.inf, math.inf, math.inf
            why = f"{type(e).__name__}: {e}"
            if not isinstance(e, FijitError):
                why += "\n" + traceback.format_exc(limit=3)
        tag = "ok  " if ok else "FAIL"
        print(f"{tag} {name}: max_rel {emax:.2e} mean_rel {emean:.2e} lse_err {lerr:.2e}"
              + ("" if ok else f"\n     -> {clip(why, failures)}"), flush=True)
        st = stats.setdefault((c["example"], c["kind"], c["dtype"]),
                              {"cases": 0, "fail": 0, "max": 0.0, "mean_sum": 0.0, "lse": 0.0})
        st["cases"] += 1
        st["fail"] += 0 if ok else 1
        st["max"] = max(st["max"], emax)
        st["mean_sum"] += emean if math.isfinite(emean) else 0.0
        st["lse"] = max(st["lse"], lerr)
        failures += 0 if ok else 1
        results.append(dict(case=name, ok=ok, max_rel=emax, mean_rel=emean, lse_err=lerr,
                            why=why))
    t_examples = time.time() - t0

    # 2. The built-in behaviour as a user variant: bit-identical.
    print(f"\n== built-in vs its re-implementation as a variant ({len(eq_cases)} random "
          f"cases, bit-identical)", flush=True)
    eq_fail = 0
    for c in eq_cases:
        name = describe(c)
        try:
            ok, why, emax = run_equal(fj, pf, rnd, c, spec_of(c, None), spec_of(c, c["variant"]))
        except Exception as e:
            ok, why, emax = False, f"{type(e).__name__}: {e}", math.inf
        same = "within tolerance" if c["kind"] == "decode" and c["query"] else "identical"
        print(f"{'ok  ' if ok else 'FAIL'} {name}{' query_transform' if c['query'] else ''}: "
              f"{same if ok else clip(why, failures + eq_fail)} "
              f"(built-in vs float64: max_rel {emax:.2e})", flush=True)
        eq_fail += 0 if ok else 1
        results.append(dict(case="equal " + name, ok=ok, why=why, max_rel=emax))
    failures += eq_fail

    # 3. Argument checks.
    print("\n== variant argument checks", flush=True)
    n_arg, arg_fails = 0, []
    if "sigmoid" in examples:  # the checks launch the sigmoid example
        try:
            n_arg, arg_fails = argument_checks(fj)
        except Exception as e:
            arg_fails = [f"{type(e).__name__}: {e}"]
    for f in arg_fails:
        print(f"FAIL {f}", flush=True)
    if not arg_fails:
        print("ok   missing, mistyped, unknown and misspelt arguments are refused", flush=True)
    failures += len(arg_fails)

    print(f"\nvariants vs float64 reference ({len(cases)} cases, {t_examples:.0f} s)")
    print(f"{'example':15} {'kind':12} {'dtype':5} {'cases':>5} {'fail':>4} {'max_rel':>9} "
          f"{'mean_rel':>9} {'lse_err':>9} {'tol':>6}")
    for (ex, kind, dtype), st in stats.items():
        print(f"{ex:15} {kind:12} {dtype:5} {st['cases']:5d} {st['fail']:4d} {st['max']:9.2e} "
              f"{st['mean_sum'] / max(st['cases'], 1):9.2e} {st['lse']:9.2e} "
              f"{TOL_O[dtype]:6.0e}")
    print(f"{'default re-implemented':33} {len(eq_cases):5d} {eq_fail:4d}   bit-identical")
    print(f"{'argument checks':33} {n_arg:5d} {len(arg_fails):4d}")
    out = opt.json or (os.path.join(os.environ["OUT"], "test_variants.json")
                       if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump(dict(seed=seed, results=results), f, indent=1)
    fj.close()
    print(f"test_variants: {'FAILED' if failures else 'passed'}: {failures} failures "
          f"(seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
