#!/usr/bin/env python3
"""GPU test of the fijit Python package (python/fijit) on torch tensors: every kind through
the public functions and plan objects against a float64 reference, on fresh random data
with every output poisoned (NaN) first. Covers decode (NHD/HND, GQA, window, soft-cap,
ALiBi, RoPE), prefill (causal, window, soft-cap, ALiBi, RoPE, custom mask, qo_len <
kv_len), non-contiguous q/k/v slices of a fused QKV tensor, out= and return_lse=,
varlen_prefill shaped like flash_attn_varlen_func, merge_states, BatchDecodePlan and
BatchPrefillPlan (ragged, paged) with a caller-owned workspace, CUDA-graph capture and
replay of run(), the torch.library ops under torch.compile(fullgraph=True), and a
variant with a parameter passed by keyword.

    PYTHONPATH=python FIJIT_LIBRARY=build/libfijit.so python3 tests/gpu/test_python_pkg.py [--quick]

Prints one line per case; exit status 1 on any failure. The seed is printed
(FIJIT_TEST_SEED replays it).
"""
import math
import os
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402

DEV = "cuda"
TOL_O = {torch.float16: 5e-3, torch.bfloat16: 2e-2}
TOL_LSE = {torch.float16: 3e-3, torch.bfloat16: 1.5e-2}
SEED = int(os.environ.get("FIJIT_TEST_SEED", str(int(time.time()) % 100000)))
GEN = torch.Generator(device=DEV).manual_seed(SEED)
failures = []

# Every spec the cases below use, prewarmed in parallel first so cases time kernels.
SPECS = [f"decode q={dt} hd=128 mask={m} pos={p} softcap={c}"
         for dt in ("fp16", "bf16") for m, p, c in (("none", "none", 0), ("window", "none", 1),
                                                    ("none", "alibi", 0), ("none", "rope", 0))]
SPECS += [f"prefill q={dt} hd={hd} mask={m} pos={p} softcap={c}"
          for dt, hd in (("fp16", 128), ("bf16", 64))
          for m, p, c in (("none", "none", 0), ("causal", "none", 0), ("window", "none", 1),
                          ("causal", "alibi", 0), ("causal", "rope", 0), ("custom", "none", 0))]
SPECS += ["batch_decode q=fp16 hd=128", "batch_decode q=fp16 hd=128 pos=rope",
          "batch_prefill_ragged q=fp16 hd=128 mask=causal",
          "batch_prefill_paged q=fp16 hd=128 mask=causal", "prefill q=fp16 hd=64 mask=causal"]


def rnd(*shape, dtype=torch.float16):
    return torch.randn(*shape, generator=GEN, device=DEV, dtype=torch.float32).to(dtype)


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


def rope64(x, pos, theta, scale):
    """Llama rotate-half RoPE on x [..., n, D] (float64) at positions pos [n]."""
    D = x.shape[-1]
    freq = torch.tensor([(theta ** (-2.0 * i / D)) / scale for i in range(D // 2)],
                        dtype=torch.float64, device=x.device).float().double()
    ang = pos[:, None].double() * freq[None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def reference(q, k, v, *, causal=False, window_left=-1, softcap=0.0, sm_scale=None, slopes=None,
              rope=None, visible=None):
    """q [Lq, H, D], k/v [Lk, Hkv, D] -> o [Lq, H, D], lse [Lq, H] (float64), the semantics
    of include/fijit_prefill.h (bottom-right causal, ALiBi before the cap, rope =
    (theta, scale, offset))."""
    Lq, H, D = q.shape
    Lk, Hkv = k.shape[0], k.shape[1]
    G = H // Hkv
    off = Lk - Lq
    q64, k64, v64 = q.double(), k.double(), v.double()
    if rope is not None:
        theta, scale, offset = rope
        qpos = torch.arange(Lq, device=DEV) + off + offset
        kpos = torch.arange(Lk, device=DEV) + offset
        q64 = rope64(q64.transpose(0, 1), qpos, theta, scale).transpose(0, 1)
        k64 = rope64(k64.transpose(0, 1), kpos, theta, scale).transpose(0, 1)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    s = torch.einsum("ikgd,jkd->kgij", q64.reshape(Lq, Hkv, G, D), k64) * scale
    i = torch.arange(Lq, device=DEV)[:, None] + off
    j = torch.arange(Lk, device=DEV)[None, :]
    if slopes is not None:
        s = s + slopes.double().reshape(Hkv, G)[:, :, None, None] * (j - i).double()
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    vis = torch.ones(Lq, Lk, dtype=torch.bool, device=DEV)
    if causal:
        vis &= j <= i
    if window_left >= 0:
        vis &= j >= i - window_left
    if visible is not None:
        vis &= visible
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(vis, torch.exp(s - lse[..., None].clamp_min(-1e300)), torch.zeros_like(s))
    o = torch.einsum("kgij,jkd->ikgd", p, v64).reshape(Lq, H, D)
    return o, lse.permute(2, 0, 1).reshape(Lq, H)


def compare(name, o, ref_o, lse=None, ref_lse=None, dtype=torch.float16, tol_scale=1.0):
    """Relative max error of o (and lse) against the reference; records a failure."""
    o64 = o.double()
    ok = bool(torch.isfinite(o64).all())
    den = float(ref_o.abs().max()) or 1.0
    err = float((o64 - ref_o).abs().max()) / den if o.numel() else 0.0
    ok = ok and err <= TOL_O[dtype] * tol_scale
    lerr = 0.0
    if lse is not None:
        empty = torch.isneginf(ref_lse)
        ok = ok and bool(torch.isneginf(lse[empty]).all())
        fin = ~empty
        if bool(fin.any()):
            d = (lse.double()[fin] - ref_lse[fin]).abs() / ref_lse[fin].abs().clamp_min(1.0)
            lerr = float(d.max()) if bool(torch.isfinite(d).all()) else math.inf
        ok = ok and lerr <= TOL_LSE[dtype] * tol_scale
    print(f"{'ok  ' if ok else 'FAIL'} {name}: o err {err:.2e}"
          + (f", lse err {lerr:.2e}" if lse is not None else ""), flush=True)
    if not ok:
        failures.append(name)
    return ok


CASES = []


def case(fn):
    """Register a case; main() runs each, an exception being a failure, not the end."""
    CASES.append(fn)
    return fn


# ---- one-shot functions ------------------------------------------------------------------
@case
def decode_cases():
    H, Hkv, D, L = 32, 8, 128, 1000
    for dtype in (torch.float16, torch.bfloat16):
        for layout in ("NHD", "HND"):
            for kw in ({}, {"window_left": 100, "logits_soft_cap": 30.0},
                       {"alibi_slopes": torch.rand(H, generator=GEN, device=DEV) * 0.1},
                       {"rope": True, "rope_theta": 5e5, "rope_offset": 7}):
                q = rnd(H, D, dtype=dtype)
                kshape = (L, Hkv, D) if layout == "NHD" else (Hkv, L, D)
                k, v = rnd(*kshape, dtype=dtype), rnd(*kshape, dtype=dtype)
                out = poisoned(H, D, dtype=dtype)
                o, lse = fijit.decode(q, k, v, kv_layout=layout, out=out, return_lse=True, **kw)
                assert o is out, "out= must be the returned tensor"
                kn = k if layout == "NHD" else k.transpose(0, 1)
                vn = v if layout == "NHD" else v.transpose(0, 1)
                rope = (kw["rope_theta"], 1.0, kw["rope_offset"]) if kw.get("rope") else None
                ro, rl = reference(q[None], kn, vn, window_left=kw.get("window_left", -1),
                                   softcap=kw.get("logits_soft_cap", 0.0),
                                   slopes=kw.get("alibi_slopes"), rope=rope, causal=True)
                tag = ",".join(k for k in kw if k != "rope_theta") or "plain"
                compare(f"decode {str(dtype)[6:]} {layout} {tag}", o[None], ro, lse[None], rl,
                        dtype, 2.0 if rope else 1.0)


@case
def prefill_cases():
    for dtype, D in ((torch.float16, 128), (torch.bfloat16, 64)):
        H, Hkv, Lq, Lk = 8, 2, 200, 333
        for kw in ({}, {"causal": True}, {"causal": True, "window_left": 40, "logits_soft_cap": 20.0},
                   {"causal": True, "alibi_slopes": torch.rand(H, generator=GEN, device=DEV) * 0.1},
                   {"causal": True, "rope": True, "rope_theta": 1e4, "rope_scale": 2.0,
                    "rope_offset": 3}):
            q, k, v = rnd(Lq, H, D, dtype=dtype), rnd(Lk, Hkv, D, dtype=dtype), rnd(Lk, Hkv, D, dtype=dtype)
            out = poisoned(Lq, H, D, dtype=dtype)
            o, lse = fijit.prefill(q, k, v, out=out, return_lse=True, **kw)
            rope = (kw["rope_theta"], kw["rope_scale"], kw["rope_offset"]) if kw.get("rope") else None
            ro, rl = reference(q, k, v, causal=kw.get("causal", False),
                               window_left=kw.get("window_left", -1),
                               softcap=kw.get("logits_soft_cap", 0.0),
                               slopes=kw.get("alibi_slopes"), rope=rope)
            tag = ",".join(x for x in kw if x not in ("rope_theta", "rope_scale", "rope_offset")) or "none"
            compare(f"prefill {str(dtype)[6:]} hd{D} {tag}", o, ro, lse, rl, dtype, 2.0 if rope else 1.0)
        vis = torch.rand(Lq, Lk, generator=GEN, device=DEV) < 0.3
        q, k, v = rnd(Lq, H, D, dtype=dtype), rnd(Lk, Hkv, D, dtype=dtype), rnd(Lk, Hkv, D, dtype=dtype)
        o, lse = fijit.prefill(q, k, v, custom_mask=vis, return_lse=True)
        ro, rl = reference(q, k, v, visible=vis)
        compare(f"prefill {str(dtype)[6:]} hd{D} custom_mask", o, ro, lse, rl, dtype)


@case
def fused_qkv_views():
    """q, k, v as slices of one [L, H + 2 Hkv, D] tensor (and k/v HND views): no copies."""
    L, H, Hkv, D = 300, 8, 2, 128
    qkv = rnd(L, H + 2 * Hkv, D)
    q, k, v = qkv[:, :H], qkv[:, H:H + Hkv], qkv[:, H + Hkv:]
    assert not q.is_contiguous() and not k.is_contiguous()
    o = fijit.prefill(q, k, v, causal=True)
    ro, _ = reference(q, k, v, causal=True)
    compare("prefill fused-QKV slices", o, ro)
    od = fijit.decode(q[-1], k, v)
    rd, _ = reference(q[-1:], k, v, causal=True)
    compare("decode fused-QKV slices", od[None], rd)
    # out= into a strided view of a larger buffer ([L, H, D] with a padded head stride)
    buf = poisoned(L, H, D + 64, dtype=torch.float16)
    fijit.prefill(q, k, v, causal=True, out=buf[:, :, :D])
    compare("prefill out= into a strided view", buf[:, :, :D], ro)


@case
def varlen_cases():
    H, Hkv, D = 8, 2, 128
    lq, lk = [37, 1, 128, 5], [37, 64, 300, 5]
    cq = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32, device=DEV)
    ck = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32, device=DEV)
    q, k, v = rnd(sum(lq), H, D), rnd(sum(lk), Hkv, D), rnd(sum(lk), Hkv, D)
    out = poisoned(sum(lq), H, D, dtype=torch.float16)
    o, lse = fijit.varlen_prefill(q, k, v, cq, ck, max(lq), max(lk), causal=True, out=out,
                                  return_lse=True)
    refs = [reference(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal=True)
            for b in range(len(lq))]
    compare("varlen_prefill causal (4 requests)", o, torch.cat([r[0] for r in refs]), lse,
            torch.cat([r[1] for r in refs]))
    # flash_attn_varlen_func's names: softmax_scale, and window_size=(left, 0), the causal
    # sliding window (positional, in flash-attn's order).
    o = fijit.varlen_prefill(q, k, v, cq, ck, max(lq), max(lk), 0.0, 0.05, False, (16, 0))
    refs = [reference(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal=True,
                      window_left=16, sm_scale=0.05) for b in range(len(lq))]
    compare("varlen_prefill softmax_scale, window_size=(16, 0)", o,
            torch.cat([r[0] for r in refs]))
    for bad in (dict(window_size=(16, 4)), dict(dropout_p=0.1)):
        try:
            fijit.varlen_prefill(q, k, v, cq, ck, **bad)
            raise AssertionError(f"varlen_prefill accepted {bad}")
        except NotImplementedError:
            pass


@case
def merge_states_case():
    """Attention over two disjoint halves of the keys, merged, equals attention over all."""
    L, Lk, H, D = 64, 512, 8, 128
    q, k, v = rnd(L, H, D), rnd(Lk, H, D), rnd(Lk, H, D)
    o1, l1 = fijit.prefill(q, k[:200], v[:200], return_lse=True)
    o2, l2 = fijit.prefill(q, k[200:], v[200:], return_lse=True)
    vs = torch.stack([o1, o2], dim=1)   # [L, 2, H, D]
    ls = torch.stack([l1, l2], dim=1)   # [L, 2, H]
    out, lse_out = poisoned(L, H, D, dtype=torch.float16), poisoned(L, H, dtype=torch.float32)
    mo, ml = fijit.merge_states(vs, ls, out=out, lse_out=lse_out)
    ro, rl = reference(q, k, v)
    compare("merge_states of two halves", mo, ro, ml, rl, tol_scale=2.0)


# ---- plan / run objects --------------------------------------------------------------------
def paged(lens, page, Hkv, D, layout, extra_pages=3):
    """A shuffled paged cache holding `lens` tokens per request: (k_cache, v_cache,
    indptr, last_page_len, indices, dense k per request, dense v per request)."""
    npages = [(n + page - 1) // page for n in lens]
    total = sum(npages) + extra_pages
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(SEED)).tolist()
    shape = (total, page, Hkv, D) if layout == "NHD" else (total, Hkv, page, D)
    kc, vc = rnd(*shape), rnd(*shape)
    indptr, idx, ks, vs = [0], [], [], []
    for n, p in zip(lens, npages):
        pages = perm[len(idx):len(idx) + p]
        idx += pages
        indptr.append(len(idx))
        sel_k = kc[pages] if layout == "NHD" else kc[pages].transpose(1, 2)
        sel_v = vc[pages] if layout == "NHD" else vc[pages].transpose(1, 2)
        ks.append(sel_k.reshape(-1, Hkv, D)[:n])
        vs.append(sel_v.reshape(-1, Hkv, D)[:n])
    last = [n - (p - 1) * page if p else 0 for n, p in zip(lens, npages)]
    return kc, vc, indptr, last, torch.tensor(idx, dtype=torch.int32, device=DEV), ks, vs


@case
def batch_decode_plan_cases():
    H, Hkv, D, page = 32, 8, 128, 16
    lens = [1, 17, 300, 1000]
    ws = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)  # caller-owned
    for layout in ("NHD", "HND"):
        kc, vc, indptr, last, idx, ks, vs = paged(lens, page, Hkv, D, layout)
        plan = fijit.BatchDecodePlan(ws, layout).plan(indptr, last, H, Hkv, D, page_size=page)
        q = rnd(len(lens), H, D)
        out, lse = poisoned(len(lens), H, D, dtype=torch.float16), poisoned(len(lens), H, dtype=torch.float32)
        plan.run(q, kc, vc, idx, out=out, lse=lse)
        refs = [reference(q[b:b + 1], ks[b], vs[b], causal=True) for b in range(len(lens))]
        compare(f"BatchDecodePlan {layout}", out, torch.cat([r[0] for r in refs]), lse,
                torch.cat([r[1] for r in refs]))
    # RoPE with per-request offsets
    kc, vc, indptr, last, idx, ks, vs = paged(lens, page, Hkv, D, "NHD")
    plan = fijit.BatchDecodePlan(ws).plan(indptr, last, H, Hkv, D, page_size=page,
                                          pos_encoding="rope", rope_theta=5e5)
    offs = torch.tensor([0, 5, 100, 9], dtype=torch.int32, device=DEV)
    q = rnd(len(lens), H, D)
    o = plan.run(q, kc, vc, idx, rope_offsets=offs)
    ro = torch.cat([reference(q[b:b + 1], ks[b], vs[b], causal=True,
                              rope=(5e5, 1.0, int(offs[b])))[0] for b in range(len(lens))])
    compare("BatchDecodePlan rope_offsets", o, ro, tol_scale=2.0)
    # A workspace that is too small is refused, naming the bytes.
    try:
        fijit.BatchDecodePlan(torch.empty(16, dtype=torch.uint8, device=DEV)).plan(
            indptr, last, H, Hkv, D, page_size=page)
        print("FAIL small workspace: not refused")
        failures.append("small workspace")
    except ValueError as e:
        ok = "workspace" in str(e) and "bytes" in str(e)
        print(f"{'ok  ' if ok else 'FAIL'} small workspace refused: {e}")
        if not ok:
            failures.append("small workspace")
    # CUDA graph: capture one run, replay it on new q values.
    kc, vc, indptr, last, idx, ks, vs = paged(lens, page, Hkv, D, "NHD")
    plan = fijit.BatchDecodePlan(ws).plan(indptr, last, H, Hkv, D, page_size=page)
    q = rnd(len(lens), H, D)
    out = poisoned(len(lens), H, D, dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        plan.run(q, kc, vc, idx, out=out)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(q, kc, vc, idx, out=out)
    for rep in range(3):
        q.copy_(rnd(len(lens), H, D))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ro = torch.cat([reference(q[b:b + 1], ks[b], vs[b], causal=True)[0] for b in range(len(lens))])
        compare(f"BatchDecodePlan CUDA-graph replay {rep}", out, ro)


@case
def batch_prefill_plan_cases():
    H, Hkv, D, page = 8, 2, 128, 16
    lq, lk = [1, 50, 129, 7], [30, 50, 400, 7]
    ws = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    qo = [0] + torch.tensor(lq).cumsum(0).tolist()
    kvp = [0] + torch.tensor(lk).cumsum(0).tolist()
    q = rnd(qo[-1], H, D)
    # ragged, NHD views of a fused buffer for k and v
    kvbuf = rnd(kvp[-1], 2 * Hkv, D)
    k, v = kvbuf[:, :Hkv], kvbuf[:, Hkv:]
    plan = fijit.BatchPrefillPlan(ws).plan(qo, kvp, H, Hkv, D, causal=True)
    out = poisoned(qo[-1], H, D, dtype=torch.float16)
    o, lse = plan.run(q, k, v, out=out, return_lse=True)
    refs = [reference(q[qo[b]:qo[b + 1]], k[kvp[b]:kvp[b + 1]], v[kvp[b]:kvp[b + 1]], causal=True)
            for b in range(len(lq))]
    ro, rl = torch.cat([r[0] for r in refs]), torch.cat([r[1] for r in refs])
    compare("BatchPrefillPlan ragged causal", o, ro, lse, rl)
    # graph capture of the ragged run
    out.fill_(float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        plan.run(q, k, v, out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(q, k, v, out=out)
    q.copy_(rnd(qo[-1], H, D))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    ro = torch.cat([reference(q[qo[b]:qo[b + 1]], k[kvp[b]:kvp[b + 1]], v[kvp[b]:kvp[b + 1]],
                              causal=True)[0] for b in range(len(lq))])
    compare("BatchPrefillPlan ragged CUDA-graph replay", out, ro)
    # paged
    for layout in ("NHD", "HND"):
        kc, vc, indptr, last, idx, ks, vs = paged(lk, page, Hkv, D, layout)
        plan = fijit.BatchPrefillPlan(ws, layout, paged=True).plan(
            qo, indptr, H, Hkv, D, kv_last_page_len=last, page_size=page, causal=True)
        out = poisoned(qo[-1], H, D, dtype=torch.float16)
        o, lse = plan.run(q, kc, vc, kv_indices=idx, out=out, return_lse=True)
        refs = [reference(q[qo[b]:qo[b + 1]], ks[b], vs[b], causal=True) for b in range(len(lq))]
        compare(f"BatchPrefillPlan paged {layout} causal", o, torch.cat([r[0] for r in refs]),
                lse, torch.cat([r[1] for r in refs]))
        plan.close()


# ---- torch.compile through the custom ops ------------------------------------------------------
class TinyAttention(torch.nn.Module):
    def __init__(self, dim=512, heads=8, kv_heads=2, head_dim=64):
        super().__init__()
        self.h, self.hkv, self.d = heads, kv_heads, head_dim
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * head_dim, bias=False)
        self.o = torch.nn.Linear(heads * head_dim, dim, bias=False)

    def forward(self, x):  # x [L, dim]
        L = x.shape[0]
        qkv = self.qkv(x).view(L, self.h + 2 * self.hkv, self.d)
        q, k, v = qkv[:, :self.h], qkv[:, self.h:self.h + self.hkv], qkv[:, self.h + self.hkv:]
        a = fijit.prefill(q, k, v, causal=True)
        return self.o(a.reshape(L, self.h * self.d))


@case
def torch_compile_case():
    torch.manual_seed(SEED)
    m = TinyAttention().to(DEV, torch.float16)
    x = torch.randn(256, 512, device=DEV, dtype=torch.float16)
    with torch.no_grad():
        eager = m(x)
        compiled = torch.compile(m, fullgraph=True)(x)
        L = x.shape[0]
        qkv = m.qkv(x).view(L, 12, 64)
        ra, _ = reference(qkv[:, :8], qkv[:, 8:10], qkv[:, 10:], causal=True)
        ref = m.o(ra.reshape(L, 512).to(torch.float16))
    compare("torch.compile(fullgraph=True) vs eager", compiled, eager.double(), tol_scale=2.0)
    compare("torch.compile(fullgraph=True) vs reference", compiled, ref.double(), tol_scale=4.0)
    ok = hasattr(torch.ops.fijit, "prefill") and hasattr(torch.ops.fijit, "decode")
    print(f"{'ok  ' if ok else 'FAIL'} torch.ops.fijit.* registered")
    if not ok:
        failures.append("ops registered")


# ---- a variant with a parameter by keyword ------------------------------------------------------
SCALED = """// Multiplies every logit by logit_scale on top of the default transform.
//! param float logit_scale
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float logits_transform(const P &p, float logit, int qo_head,
                                                             int kv_idx, int qo_idx)
    {
        return fijit::DefaultVariant::logits_transform(p, logit, qo_head, kv_idx, qo_idx) *
               fijit::variant_params(p).logit_scale;
    }
};
"""


@case
def variant_case():
    name = fijit.register_variant("pyscaled", SCALED)
    H, Hkv, D, L = 8, 2, 128, 257
    q, k, v = rnd(L, H, D), rnd(L, Hkv, D), rnd(L, Hkv, D)
    o = fijit.prefill(q, k, v, causal=True, variant=name, logit_scale=0.25)
    ro, _ = reference(q, k, v, causal=True, sm_scale=0.25 / math.sqrt(D))
    compare("variant by keyword (prefill, logit_scale=0.25)", o, ro)
    od = fijit.decode(q[-1], k, v, variant=name, logit_scale=3.0)
    rd, _ = reference(q[-1:], k, v, causal=True, sm_scale=3.0 / math.sqrt(D))
    compare("variant by keyword (decode, logit_scale=3.0)", od[None], rd)
    try:
        fijit.decode(q[-1], k, v, variant=name)
        print("FAIL variant without its parameter: accepted")
        failures.append("variant missing parameter")
    except fijit.Error as e:
        print(f"ok   variant without its parameter refused: {str(e)[:120]}")


@case
def overhead_bench():
    """Host time per call of the Python functions (kernel time excluded by a tiny shape):
    argument checks, the args struct, fi_decode_workspace_size, the stream handle and the
    fi_decode_run launch. 38 us on the H100 host before the structs lost their Python-level
    __setattr__ (now __slots__) and the stream handle its torch.cuda.Stream object."""
    q, k, v = rnd(32, 128), rnd(16, 8, 128), rnd(16, 8, 128)
    out = torch.empty_like(q)
    for _ in range(20):
        fijit.decode(q, k, v, out=out)
    torch.cuda.synchronize()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        fijit.decode(q, k, v, out=out)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"note python overhead: fijit.decode host time {(t1 - t0) / n * 1e6:.1f} us/call "
          f"(ctypes struct + fi_decode_run launch)")


def main():
    print(f"seed {SEED}; library {fijit.library_path()} {fijit.library_version()}; "
          f"torch {torch.__version__}; {torch.cuda.get_device_name()}")
    t = time.time()
    try:
        fijit.prewarm(SPECS, jobs=8)
    except fijit.Error as e:
        print(f"FAIL prewarm: {e}")
        failures.append("prewarm")
    print(f"prewarm {len(SPECS)} specs: {time.time() - t:.1f} s")
    for fn in CASES:
        try:
            fn()
        except Exception:
            print(f"FAIL {fn.__name__}: exception", flush=True)
            traceback.print_exc()
            failures.append(fn.__name__)
    print(f"test_python_pkg: {len(failures)} failed" + (f": {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
