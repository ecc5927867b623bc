#!/usr/bin/env python3
"""GPU correctness suite of absorbed MLA decode (include/fijit_mla.h) through the Python
package (fijit.BatchMLADecodePlan), against a float64 reference of the UN-absorbed MLA
formula: per head, explicit keys k = [W_UK ckv || kpe] and values v = W_UV ckv.

  PYTHONPATH=python FIJIT_LIBRARY=build/libfijit.so python3 tests/gpu/test_mla_decode.py [--quick]

Two holds on the kernel, both from `reference` below:
  exact     W_UK = W_UV = identity (512 x 512): the un-absorbed formula then IS the
            absorbed one on the very inputs the kernel reads (after their rounding), and
            the kernel is held to the tolerance of its output dtype;
  model     random W_UK, W_UV [heads, 128, 512] (DeepSeek-V3's shapes): the kernel gets
            q_nope = W_UK^T q (rounded to q's dtype) and its output is mapped back
            through W_UV; held to a looser bound (q's rounding before the product).
Every accepted tuple family: heads 16/32/64/128 x page sizes 1/16/64 x q = o fp16/bf16 x
kv 16-bit / fp8_e4m3 (random per-tensor scale; the reference reads the dequantised
values), cycling soft-cap and an attention-sink variant, one batch of requests with
kv lengths 0, 1, 63, 64, 65, 4096, 32768 and query lengths 1-8 mixed (causal among
the new tokens, bottom-right), pages in a scrambled order, q and the cache given as
two tensors or as one 576-wide tensor (alternating), the plan's automatic split or
none (every fourth case). Outputs and lse are NaN-poisoned first; a second run must
give the same bits; one case is captured in a CUDA graph and replayed. A request
without keys must give o = 0 and lse = -inf. The seed is printed (FIJIT_TEST_SEED
replays). Exit status 1 on any failure.
"""
import argparse
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
LATENT, ROPE = 512, 64
TOL_O = {torch.float16: 5e-3, torch.bfloat16: 2e-2}
TOL_LSE = {torch.float16: 3e-3, torch.bfloat16: 1.5e-2}
SINK = """//! param const float* sink_logits
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float output_transform(const P &p, float o, int h, int d,
                                                             float lse)
    {
        o = fijit::DefaultVariant::output_transform(p, o, h, d, lse);
        const float z = fijit::variant_params(p).sink_logits[h] - lse;
        return z < 88.0f ? o / (1.0f + expf(z)) : 0.0f;
    }
};
"""
KV_LENS = [0, 1, 63, 64, 65, 4096, 32768]
SEED = int(os.environ.get("FIJIT_TEST_SEED", str(int(time.time()) % 100000)))
GEN = torch.Generator(device=DEV).manual_seed(SEED)
failures = []


def reference(q_nope, q_pe, ckv, kpe, q_len, sm_scale, *, wuk=None, wuv=None, cap=0.0,
              sink=None):
    """float64 un-absorbed MLA attention of one request. q_nope [q_len, H, Dn], q_pe
    [q_len, H, 64], ckv [L, 512], kpe [L, 64]; wuk, wuv [H, Dn, 512] (None: identity,
    Dn = 512). Per head h: k_j = [wuk[h] ckv_j || kpe_j], v_j = wuv[h] ckv_j; token i sees
    keys j <= L - q_len + i. Returns (o [q_len, H, Dv], lse [q_len, H])."""
    L, H = ckv.shape[0], q_nope.shape[1]
    if wuk is None:  # k_nope = ckv for every head
        s = torch.einsum("ihd,ld->hil", q_nope, ckv)
    else:
        s = torch.einsum("ihd,hld->hil", q_nope, torch.einsum("hdc,lc->hld", wuk, ckv))
    s = (s + torch.einsum("ihr,lr->hil", q_pe, kpe)) * sm_scale
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    i = torch.arange(q_len, device=s.device).view(1, q_len, 1)
    j = torch.arange(L, device=s.device).view(1, 1, L)
    s = s.masked_fill(j > L - q_len + i, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                               # [H, q_len]
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)           # rows with no key: 0
    if wuv is None:  # v = ckv for every head
        o = torch.einsum("hil,ld->ihd", p, ckv)
    else:
        o = torch.einsum("hil,hld->ihd", p, torch.einsum("hdc,lc->hld", wuv, ckv))
    if sink is not None:
        o = o / (1.0 + torch.exp(sink.double().view(1, H, 1) - lse.t().unsqueeze(-1)))
    return o, lse.t()


def make_cache(lens, page, kv_dtype, one_tensor):
    """A paged latent cache with scrambled pages. Returns (ckv, kpe, kv_indptr, last,
    indices, scale, dense): one_tensor, ckv the [pages, page, 576] tensor and kpe None;
    else two tensors [pages, page, 512] and [pages, page, 64]. dense[b] holds the
    float64 [L, 576] values the kernel reads (dequantised for fp8)."""
    pages = [(n + page - 1) // page for n in lens]
    total = sum(pages) + 2
    perm = torch.randperm(total, generator=GEN, device=DEV).to(torch.int32)
    indptr = [0]
    for n in pages:
        indptr.append(indptr[-1] + n)
    last = [n - (p - 1) * page if p else 0 for n, p in zip(lens, pages)]
    indices = perm[:indptr[-1]].contiguous()
    vals = torch.randn(total, page, LATENT + ROPE, generator=GEN, device=DEV)
    scale = 1.0
    if kv_dtype == torch.float8_e4m3fn:
        scale = float(torch.rand(1, generator=GEN, device=DEV)) * 0.05 + 0.02
        # e4m3's largest value is 448; torch's cast makes NaN of what lies beyond.
        store = (vals / scale).clamp(-448.0, 448.0).to(kv_dtype)
        read = store.double() * scale
    else:
        store = vals.to(kv_dtype)
        read = store.double()
    if one_tensor:
        ckv, kpe = store, None
    else:
        ckv, kpe = store[..., :LATENT].contiguous(), store[..., LATENT:].contiguous()
    dense = [read[indices[indptr[b]:indptr[b + 1]].long()].reshape(-1, LATENT + ROPE)[:n]
             for b, n in enumerate(lens)]
    return ckv, kpe, indptr, last, indices, scale, dense


def check_close(name, got, ref, tol):
    """None, or what is wrong: a non-finite value or a max error relative to max |ref|
    above tol."""
    g = got.double()
    if not bool(torch.isfinite(g).all()):
        return f"{name}: non-finite output"
    err = float((g - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    if err > tol:
        return f"{name}: max relative error {err:.3g} > {tol}"
    return None


def run_case(idx, heads, page, q_dtype, fp8, quick):
    kv_dtype = torch.float8_e4m3fn if fp8 else q_dtype
    lens = KV_LENS[:-1] if quick else KV_LENS
    q_lens = [1 + (idx + b) % 8 for b in range(len(lens))]
    qo = [0]
    for n in q_lens:
        qo.append(qo[-1] + n)
    T = qo[-1]
    two_q, one_cache = idx % 2 == 0, idx % 3 != 0
    softcap = 20.0 if idx % 3 == 1 else 0.0
    use_sink = idx % 4 == 2
    sm_scale = 1.0 / math.sqrt(192)
    ckv, kpe, indptr, last, indices, scale, dense = make_cache(lens, page, kv_dtype, one_cache)
    q = torch.randn(T, heads, LATENT + ROPE, generator=GEN, device=DEV).to(q_dtype)
    # One 576-wide q (q_pe None), or two tensors.
    q_nope, q_pe = (q, None) if not two_q else (q[..., :LATENT].contiguous(),
                                                q[..., LATENT:].contiguous())
    sink = (torch.randn(heads, generator=GEN, device=DEV) * 2).float() if use_sink else None
    ws = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    plan = fijit.BatchMLADecodePlan(ws).plan(
        qo, indptr, last, heads, page_size=page, q_dtype=q_dtype, kv_dtype=kv_dtype,
        sm_scale=sm_scale, logits_soft_cap=softcap, variant="mla_sink" if use_sink else None,
        max_splits=1 if idx % 4 == 3 else 0, grow_workspace=True)
    items, splits = plan.describe()
    out = torch.full((T, heads, LATENT), float("nan"), dtype=q_dtype, device=DEV)
    lse = torch.full((T, heads), float("nan"), dtype=torch.float32, device=DEV)
    extra = {"sink_logits": sink} if use_sink else {}
    plan.run(q_nope, q_pe, ckv, kpe, indices, kv_scale=scale, out=out, lse=lse, **extra)
    torch.cuda.synchronize()
    again = torch.full_like(out, float("nan"))
    plan.run(q_nope, q_pe, ckv, kpe, indices, kv_scale=scale, out=again, **extra)
    torch.cuda.synchronize()
    problems = []
    if not torch.equal(again.view(torch.int16), out.view(torch.int16)):
        problems.append("a second run differs")
    for b, n in enumerate(lens):
        t0, t1 = qo[b], qo[b + 1]
        qd = q[t0:t1].double()
        ref_o, ref_lse = reference(qd[..., :LATENT], qd[..., LATENT:], dense[b][:, :LATENT],
                                   dense[b][:, LATENT:], t1 - t0, sm_scale, cap=softcap,
                                   sink=sink)
        if n == 0:
            if not (bool((out[t0:t1] == 0).all()) and bool(torch.isneginf(lse[t0:t1]).all())):
                problems.append("kv 0: o must be 0 and lse -inf")
            continue
        p = check_close(f"kv {n} o", out[t0:t1], ref_o, TOL_O[q_dtype])
        if p:
            problems.append(p)
        # Rows that see no key (a query before the request's first key) have lse -inf in
        # both; elsewhere the difference counts (NaN, an unwritten row, fails).
        got_lse, none = lse[t0:t1].double(), torch.isneginf(ref_lse)
        if not bool(torch.isneginf(got_lse[none]).all()):
            problems.append(f"kv {n} lse: a row with no key must be -inf")
        le = float((got_lse[~none] - ref_lse[~none]).abs().max()) if bool((~none).any()) else 0.0
        if not le <= TOL_LSE[q_dtype]:
            problems.append(f"kv {n} lse: error {le:.3g}")
    return problems, f"{items} items, splits {splits}"


def model_case(heads, q_dtype):
    """The absorbed kernel against explicit per-head keys and values (DeepSeek-V3 shapes)."""
    lens, page = [300, 4096, 5], 16
    q_lens = [2, 1, 4]
    ckv, kpe, indptr, last, indices, scale, dense = make_cache(lens, page, q_dtype, True)
    wuk = torch.randn(heads, 128, LATENT, generator=GEN, device=DEV, dtype=torch.float64) / 16
    wuv = torch.randn(heads, 128, LATENT, generator=GEN, device=DEV, dtype=torch.float64) / 16
    qo = [0, 2, 3, 7]
    q_orig = torch.randn(7, heads, 128, generator=GEN, device=DEV, dtype=torch.float64)
    q_pe = torch.randn(7, heads, ROPE, generator=GEN, device=DEV).to(q_dtype)
    q_abs = torch.einsum("hdc,thd->thc", wuk, q_orig).to(q_dtype)  # absorbed, rounded
    sm_scale = 1.0 / math.sqrt(192)
    out = fijit.mla_decode(q_abs, q_pe, ckv, kpe, indices, qo, indptr, last, sm_scale=sm_scale)
    torch.cuda.synchronize()
    problems = []
    for b in range(3):
        t0, t1 = qo[b], qo[b + 1]
        ref_o, _ = reference(q_orig[t0:t1], q_pe[t0:t1].double(), dense[b][:, :LATENT],
                             dense[b][:, LATENT:], q_lens[b], sm_scale, wuk=wuk, wuv=wuv)
        got = torch.einsum("hdc,thc->thd", wuv, out[t0:t1].double())  # W_UV o_latent
        p = check_close(f"model kv {lens[b]}", got, ref_o, 4 * TOL_O[q_dtype])
        if p:
            problems.append(p)
    return problems


def graph_case():
    """run() captured in a CUDA graph and replayed gives the eager result."""
    lens, page, heads = [100, 2000], 64, 16
    ckv, kpe, indptr, last, indices, scale, dense = make_cache(lens, page, torch.bfloat16, True)
    qo = [0, 3, 4]
    q = torch.randn(4, heads, LATENT + ROPE, generator=GEN, device=DEV).to(torch.bfloat16)
    ws = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
    plan = fijit.BatchMLADecodePlan(ws).plan(qo, indptr, last, heads, page_size=page,
                                             q_dtype=torch.bfloat16, sm_scale=0.1)
    eager = plan.run(q, None, ckv, None, indices)
    out = torch.full_like(eager, float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        plan.run(q, None, ckv, None, indices, out=out)
    g.replay()
    torch.cuda.synchronize()
    return [] if torch.equal(out.view(torch.int16), eager.view(torch.int16)) else [
        "graph replay differs from the eager run"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="no 32k request, half the tuples")
    args = ap.parse_args()
    print(f"seed {SEED}")
    fijit.register_variant("mla_sink", SINK, replace=True)
    idx = 0
    for heads in (16, 32, 64, 128):
        for page in (1, 16, 64):
            for q_dtype in (torch.bfloat16, torch.float16):
                for fp8 in (False, True):
                    idx += 1
                    # --quick: half the tuples, fp8 and 16-bit KV in turn per 4.
                    if args.quick and (idx + (idx - 1) // 4) % 2:
                        continue
                    name = (f"heads {heads} page {page} q {str(q_dtype)[6:]} "
                            f"kv {'fp8_e4m3' if fp8 else 'q'} case {idx}")
                    try:
                        problems, info = run_case(idx, heads, page, q_dtype, fp8, args.quick)
                    except Exception:
                        problems, info = [traceback.format_exc()], ""
                    print(f"{'ok  ' if not problems else 'FAIL'} {name} ({info})"
                          + ("" if not problems else ": " + "; ".join(problems)), flush=True)
                    if problems:
                        failures.append(name)
    for name, fn in ((f"model heads {h} {str(d)[6:]}", lambda h=h, d=d: model_case(h, d))
                     for h in (16, 128) for d in (torch.bfloat16, torch.float16)):
        problems = fn()
        print(f"{'ok  ' if not problems else 'FAIL'} {name}" + ("" if not problems else
                                                              ": " + "; ".join(problems)))
        if problems:
            failures.append(name)
    problems = graph_case()
    print(f"{'ok  ' if not problems else 'FAIL'} graph capture and replay"
          + ("" if not problems else ": " + "; ".join(problems)))
    if problems:
        failures.append("graph")
    print(f"test_mla_decode: {'all passed' if not failures else f'{len(failures)} failed'} "
          f"(seed {SEED})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
