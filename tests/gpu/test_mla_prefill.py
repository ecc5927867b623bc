#!/usr/bin/env python3
"""GPU correctness test of MLA's prefill (q and k of head_dim 192, v and o of 128, the
non-absorbed form DeepSeek-V3/R1 and Kimi K2 prefill with) through the Python package,
against the float64 reference of tests/gpu/test_prefill.py (torch on the GPU).

Every accepted 192/128 tuple: kinds single (fijit.prefill), ragged (fijit.varlen_prefill)
and paged (fijit.BatchPrefillPlan, pages of 1, 16 and 64) x fp16/bf16 x mask none/causal/
window (custom: single prefill, the only Python entry that takes one) x soft-cap 0/1
(pos none: RoPE and ALiBi are refused, checked at the end), at lengths 1, 63, 64, 65, 129, 1000 and qo_len < kv_len and qo_len > kv_len
(causal rows with no visible key: o 0, lse -inf), MHA (16 heads, DeepSeek-V3 on 8 GPUs)
and a GQA group of 4. Outputs are poisoned with NaN first (out=, lse=). Then chunked
context as engines run it: the new tokens against each cached chunk with no mask and
against their own keys causally, the (o, lse) states merged by fijit.merge_states, equal
to causal attention over the whole context. Exit status 1 on any failure.

    FIJIT_LIBRARY=build/libfijit.so python3 tests/gpu/test_mla_prefill.py [--quick]
"""
import itertools
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("FIJIT_LIBRARY", os.path.join(ROOT, "build", "libfijit.so"))
import fijit  # noqa: E402
from fijit.testing import seeded_generator  # noqa: E402
from test_prefill import TORCH_DTYPES, compare, reference  # noqa: E402

QUICK = "--quick" in sys.argv
DQK, DVO = 192, 128
SHAPES = [(1, 1), (63, 63), (64, 64), (65, 300), (129, 129), (100, 50), (1, 777)] + \
    ([] if QUICK else [(1000, 1000), (333, 2048)])
WINDOW = 40
POS = ("none",)  # the pos encodings 192/128 takes (fijit_prefill.h)


def rand(gen, *shape, dtype):
    return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)


def mask_name(mask):
    return {"none": dict(causal=False), "causal": dict(causal=True),
            "window": dict(causal=True, window_left=WINDOW), "custom": {}}[mask]


def ref_of(q, k, v, *, mask, pos, cap, slopes, bits=None, sm_scale):
    return reference(q, k, v, sm_scale=sm_scale, cap=cap, pos=pos, rope=None, mask=mask,
                     window_left=WINDOW if mask == "window" else -1, slopes=slopes, bits=bits)


def check(name, o, lse, ref_o, ref_lse, dtype, failures):
    ok, err, mean, lse_err = compare(o, lse, ref_o, ref_lse, dtype)
    if not ok:
        failures.append(name)
        print(f"FAIL {name}: o err {err:.3g} (mean {mean:.3g}), lse err {lse_err:.3g}", flush=True)
    return ok


def single_cases(gen, dtype, H, Hkv, failures):
    n = 0
    for (lq, lk), mask, pos, cap in itertools.product(SHAPES, ("none", "causal", "window", "custom"),
                                                      POS, (0.0, 30.0)):
        q = rand(gen, lq, H, DQK, dtype=dtype)
        k = rand(gen, lk, Hkv, DQK, dtype=dtype)
        v = rand(gen, lk, Hkv, DVO, dtype=dtype)
        slopes = torch.rand(H, generator=gen, device="cuda") * 0.1 if pos == "alibi" else None
        bits = torch.rand(lq, lk, generator=gen, device="cuda") < 0.7 if mask == "custom" else None
        sm_scale = 1.0 / math.sqrt(DQK)
        out = torch.full((lq, H, DVO), float("nan"), dtype=dtype, device="cuda")
        o, lse = fijit.prefill(q, k, v, **mask_name(mask), custom_mask=bits, logits_soft_cap=cap,
                               alibi_slopes=slopes, out=out, return_lse=True)
        ro, rl = ref_of(q, k, v, mask=mask, pos=pos, cap=cap, slopes=slopes, bits=bits,
                        sm_scale=sm_scale)
        check(f"single {dtype} {H}/{Hkv} {lq}x{lk} {mask} {pos} cap {cap}", o, lse, ro, rl,
              TORCH_NAME[dtype], failures)
        n += 1
    return n


def batch_lengths(gen):
    qo = [1, 63, 0, 129, 300] if QUICK else [1, 63, 0, 129, 300, 1000]
    kv = [lq + int(torch.randint(0, 200, (1,), generator=gen, device="cuda")) for lq in qo]
    kv[2] = 0  # a request with no keys
    return qo, kv


def batch_cases(gen, dtype, H, Hkv, failures):
    n = 0
    qo, kv = batch_lengths(gen)
    cu_q = torch.tensor([0] + list(itertools.accumulate(qo)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(itertools.accumulate(kv)), dtype=torch.int32, device="cuda")
    for mask, pos, cap in itertools.product(("none", "causal", "window"), POS, (0.0, 30.0)):
        q = rand(gen, sum(qo), H, DQK, dtype=dtype)
        k = rand(gen, sum(kv), Hkv, DQK, dtype=dtype)
        v = rand(gen, sum(kv), Hkv, DVO, dtype=dtype)
        slopes = torch.rand(H, generator=gen, device="cuda") * 0.1 if pos == "alibi" else None
        kw = mask_name(mask)
        refs = [ref_of(q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]],
                       mask=mask, pos=pos, cap=cap, slopes=slopes, sm_scale=1 / math.sqrt(DQK))
                for b in range(len(qo))]
        ro = torch.cat([r[0] for r in refs])
        rl = torch.cat([r[1] for r in refs])
        # Ragged.
        out = torch.full((sum(qo), H, DVO), float("nan"), dtype=dtype, device="cuda")
        o, lse = fijit.varlen_prefill(q, k, v, cu_q, cu_k, logits_soft_cap=cap,
                                      alibi_slopes=slopes,
                                      out=out, return_lse=True, **kw)
        check(f"ragged {dtype} {H}/{Hkv} {mask} {pos} cap {cap}", o, lse, ro, rl,
              TORCH_NAME[dtype], failures)
        n += 1
        # Paged: the same keys in pages, in a shuffled pool.
        for page in ((16,) if QUICK else (1, 16, 64)):
            pages = [max(0, (n_k + page - 1) // page) for n_k in kv]
            total = sum(pages)
            order = torch.randperm(total, generator=gen, device="cuda").cpu()
            kc = torch.zeros(total, page, Hkv, DQK, dtype=dtype, device="cuda")
            vc = torch.zeros(total, page, Hkv, DVO, dtype=dtype, device="cuda")
            slots, rows, p0 = [], [], 0
            for b in range(len(qo)):
                slots += [int(order[p0 + j // page]) for j in range(kv[b])]
                rows += [j % page for j in range(kv[b])]
                p0 += pages[b]
            kc[slots, rows] = k
            vc[slots, rows] = v
            order = order.to(device="cuda", dtype=torch.int32)
            last = [(n_k - 1) % page + 1 if n_k else page for n_k in kv]
            kv_indptr = [0] + list(itertools.accumulate(pages))
            ws = torch.empty(0, dtype=torch.uint8, device="cuda")
            plan = fijit.BatchPrefillPlan(ws, paged=True)
            plan.plan([0] + list(itertools.accumulate(qo)), kv_indptr, H, Hkv, DQK,
                      head_dim_vo=DVO, kv_last_page_len=last, page_size=page, q_dtype=dtype,
                      logits_soft_cap=cap, pos_encoding=pos, grow_workspace=True,
                      causal=kw.get("causal", False), window_left=kw.get("window_left", -1))
            out = torch.full((sum(qo), H, DVO), float("nan"), dtype=dtype, device="cuda")
            lse = torch.full((sum(qo), H), float("nan"), dtype=torch.float32, device="cuda")
            plan.run(q, kc, vc, kv_indices=order, alibi_slopes=slopes, out=out, lse=lse)
            check(f"paged{page} {dtype} {H}/{Hkv} {mask} {pos} cap {cap}", out, lse, ro, rl,
                  TORCH_NAME[dtype], failures)
            plan.close()
            n += 1
    return n


def chunked_context(gen, dtype, H, failures):
    """New tokens after a cached context, chunk by chunk, merged = attention over all."""
    n = 0
    for new, cached, chunk in ((1, 4096, 1024), (128, 1000, 256), (500, 3000, 1024),
                               (64, 0, 64)):
        q = rand(gen, new, H, DQK, dtype=dtype)
        k = rand(gen, cached + new, H, DQK, dtype=dtype)
        v = rand(gen, cached + new, H, DVO, dtype=dtype)
        states, lses = [], []
        for c0 in range(0, cached, chunk):
            c1 = min(cached, c0 + chunk)
            o, lse = fijit.prefill(q, k[c0:c1], v[c0:c1], causal=False, return_lse=True)
            states.append(o)
            lses.append(lse)
        o, lse = fijit.prefill(q, k[cached:], v[cached:], causal=True, return_lse=True)
        states.append(o)
        lses.append(lse)
        vs = torch.stack(states, dim=1).contiguous()  # [new, n, H, 128]
        ls = torch.stack(lses, dim=1).contiguous()    # [new, n, H]
        out = torch.full((new, H, DVO), float("nan"), dtype=dtype, device="cuda")
        lo = torch.full((new, H), float("nan"), dtype=torch.float32, device="cuda")
        fijit.merge_states(vs, ls, out=out, lse_out=lo)
        ro, rl = ref_of(q, k, v, mask="causal", pos="none", cap=0.0, slopes=None,
                        sm_scale=1 / math.sqrt(DQK))
        check(f"chunked {dtype} new {new} cached {cached} chunk {chunk}", out, lo, ro, rl,
              TORCH_NAME[dtype], failures)
        n += 1
    return n


TORCH_NAME = {v: k for k, v in TORCH_DTYPES.items()}


def main():
    seed, gen = seeded_generator("test_mla_prefill")
    failures = []
    total = 0
    for dtype in (torch.float16, torch.bfloat16):
        for H, Hkv in ((16, 16), (16, 4)):
            total += single_cases(gen, dtype, H, Hkv, failures)
            total += batch_cases(gen, dtype, H, Hkv, failures)
        total += chunked_context(gen, dtype, 16, failures)
    # What the library refuses for these head dims, with the field named.
    q = rand(gen, 8, 16, DQK, dtype=torch.float16)
    k = rand(gen, 8, 16, DQK, dtype=torch.float16)
    v = rand(gen, 8, 16, DVO, dtype=torch.float16)
    try:
        fijit.prefill(q, k, v, rope=True)
        failures.append("rope with 192/128 was accepted")
    except fijit.UnsupportedError as e:
        if "pos" not in str(e):
            failures.append(f"rope refusal does not name pos: {e}")
    try:
        fijit.prefill(q, k, v, alibi_slopes=torch.ones(16, device="cuda"))
        failures.append("alibi with 192/128 was accepted")
    except fijit.UnsupportedError as e:
        if "pos" not in str(e):
            failures.append(f"alibi refusal does not name pos: {e}")
    try:
        fijit.prefill(q, k, rand(gen, 8, 16, 64, dtype=torch.float16))
        failures.append("192/64 was accepted")
    except fijit.UnsupportedError as e:
        if "head_dim" not in str(e):
            failures.append(f"192/64 refusal does not name head_dim: {e}")
    print(f"test_mla_prefill: {total} cases, {len(failures)} failed (seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
