#!/usr/bin/env python3
"""GPU correctness test of the prefill kinds (fi_prefill_run, fi_batch_prefill_plan/run)
against a float64 reference computed with torch on the GPU, plus agreement with
torch SDPA where SDPA computes the same thing.

Every accepted tuple of every kind (single, batch ragged, batch paged) x fp16/bf16 x
head_dim 64/128/256 x mask none/causal/window/custom x pos none/rope/alibi x soft-cap 0/1
runs at several shapes: length 1, lengths that are not multiples of any tile, qo_len <
kv_len and qo_len > kv_len (rows with no visible key under causal masks), a longer one,
GQA groups 1-8, NHD and HND layouts, every CTA tile kernel (forced in turn), batches
with mixed lengths including zero-length requests (qo 0 and kv 0), page sizes 1, 5 and
16. Outputs and lse are poisoned with NaN first; inputs are fresh random data (the seed
is printed; FIJIT_TEST_SEED replays it). Output error is relative to the reference's
largest magnitude per case: max|o - ref| / max|ref| (and the mean ratio); lse is
compared in absolute terms scaled by max(1, |lse|). Exit status 1 on any failure.

Reference semantics (the contract in include/fijit_prefill.h), off = kv_len - qo_len:
  s_ij = (rope(q_i) . rope(k_j)) * sm_scale + slope_h * (j - (i + off))  [ALiBi]
  s_ij = cap * tanh(s_ij / cap)                                          [soft-cap]
  causal: j <= i + off; window: causal and j >= i + off - window_left; custom: bit
  o_i = softmax(s_i) @ v, lse_i = log sum exp s_ij; no visible key: o = 0, lse = -inf
  rope: q_i at rope_offset + off + i, k_j at rope_offset + j; a batch given per-request
  rope_offsets uses rope_offsets[b] in place of rope_offset for request b.
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import torch

from fijit.testing import (BatchPrefillArgs, Fijit, Prefill, prefill_args, prefill_spec,
                           seeded_generator)
from test_decode import rope_apply, rope_freq

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# q (after sm_scale and RoPE) and P are rounded to the 16-bit input type before the
# tensor-core products; fp32 accumulation. What remains is that rounding and the
# output's own (fp16 2^-11, bf16 2^-8).
TOL_O = {"fp16": 5e-3, "bf16": 2e-2}
TOL_LSE = {"fp16": 3e-3, "bf16": 1.5e-2}


def reference_logits(q64, k64, *, sm_scale, pos, rope, slopes, cap, mask, window_left):
    """The built-in tuple's float64 logits s [Hkv, G, Lq, Lk] of q64 [Lq, H, D] and k64
    [Lk, Hkv, D] (RoPE at positions aligned at the last query and key, ALiBi, soft-cap),
    the visibility vis [Lq, Lk] of mask none, causal or window, and qp [Lq, 1], each
    query's position among the keys. tests/gpu/test_variants.py builds on it too."""
    Lq, H, D = q64.shape
    Lk, Hkv = k64.shape[0], k64.shape[1]
    G = H // Hkv  # query heads per kv head
    dev = q64.device
    off = Lk - Lq
    if pos == "rope":
        scale, theta, offset = rope
        freq = rope_freq(D, scale, theta)
        qpos = torch.arange(Lq, dtype=torch.float64, device=dev) + off + offset
        q64 = rope_apply(q64.permute(1, 0, 2), qpos, freq).permute(1, 0, 2)
        kpos = torch.arange(Lk, dtype=torch.float64, device=dev) + offset
        k64 = rope_apply(k64.permute(1, 0, 2), kpos, freq).permute(1, 0, 2)
    s = torch.einsum("ikgd,jkd->kgij", q64.reshape(Lq, Hkv, G, D), k64) * sm_scale
    i = torch.arange(Lq, device=dev)[:, None]
    j = torch.arange(Lk, device=dev)[None, :]
    qp = i + off
    if pos == "alibi":
        s = s + slopes.double().reshape(Hkv, G)[:, :, None, None] * (j - qp).double()
    if cap:
        s = cap * torch.tanh(s / cap)
    vis = torch.ones(Lq, Lk, dtype=torch.bool, device=dev)
    if mask in ("causal", "window"):
        vis &= j <= qp
    if mask == "window" and window_left >= 0:
        vis &= j >= qp - window_left
    return s, vis, qp


def reference_softmax(s, vis, v64):
    """o [Lq, H, D] and lse [Lq, H], float64, of logits s [Hkv, G, Lq, Lk] over the keys
    vis [Lq, Lk] shows (a row that sees none: o 0, lse -inf) and values v64 [Lk, Hkv, D]."""
    Hkv, G, Lq, _ = s.shape
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # [Hkv, G, Lq]
    p = torch.exp(s - lse[..., None].clamp_min(-1e300))
    p = torch.where(vis, p, torch.zeros_like(p))
    o = torch.einsum("kgij,jkd->ikgd", p, v64).reshape(Lq, Hkv * G, v64.shape[-1])
    return o, lse.permute(2, 0, 1).reshape(Lq, Hkv * G)


def reference(q, k, v, *, sm_scale, cap, pos, rope, mask, window_left, slopes, bits):
    """q, k [L, H or Hkv, D], v [Lk, Hkv, Dv] (logical NHD) -> o [Lq, H, Dv], lse [Lq, H]
    float64."""
    Lq, H = q.shape[0], q.shape[1]
    if k.shape[0] == 0 or Lq == 0:  # o as wide as v (192/128 heads: 128)
        return (torch.zeros(Lq, H, v.shape[-1], dtype=torch.float64, device=q.device),
                torch.full((Lq, H), -math.inf, dtype=torch.float64, device=q.device))
    s, vis, _ = reference_logits(q.double(), k.double(), sm_scale=sm_scale, pos=pos, rope=rope,
                                 slopes=slopes, cap=cap, mask=mask, window_left=window_left)
    if mask == "custom":
        vis &= bits
    return reference_softmax(s, vis, v.double())


def pack_bits(flat, shift=0):
    """bool [n] -> uint8 [ceil(n/8)], bit n at byte n/8, bit n%8 (LSB first), as a
    view `shift` bytes into its buffer: the kernels read the mask in aligned
    words and must find it at any address."""
    n = flat.numel()
    pad = (-n) % 8
    b = torch.cat([flat, torch.zeros(pad, dtype=torch.bool, device=flat.device)]).reshape(-1, 8)
    w = (1 << torch.arange(8, device=flat.device, dtype=torch.int32))
    out = (b.to(torch.int32) * w).sum(1).to(torch.uint8)
    if not out.numel():
        out = torch.zeros(16, dtype=torch.uint8, device=flat.device)
    buf = torch.zeros(out.numel() + shift, dtype=torch.uint8, device=flat.device)
    buf[shift:] = out
    return buf[shift:]


def compare(o, lse, ref_o, ref_lse, dtype):
    o64 = o.double()
    finite = bool(torch.isfinite(o64).all())
    diff = (o64 - ref_o).abs()
    if diff.numel() == 0:
        return True, 0.0, 0.0, 0.0
    scale_max = float(ref_o.abs().max())
    scale_mean = float(ref_o.abs().mean())
    err_max = float(diff.max()) / (scale_max if scale_max > 0 else 1.0)
    err_mean = float(diff.mean()) / (scale_mean if scale_mean > 0 else 1.0)
    l64 = lse.double()
    empty = torch.isneginf(ref_lse)
    lse_ok = bool(torch.isneginf(l64[empty]).all())
    fin = ~empty
    lse_err = 0.0
    if bool(fin.any()):
        d = (l64[fin] - ref_lse[fin]).abs() / ref_lse[fin].abs().clamp_min(1.0)
        lse_err = float(d.max()) if bool(torch.isfinite(d).all()) else float("inf")
    lse_ok = lse_ok and lse_err <= TOL_LSE[dtype]
    ok = finite and err_max <= TOL_O[dtype] and lse_ok
    if not finite:
        err_max = float("inf")
    return ok, err_max, err_mean, lse_err if lse_ok or lse_err else float("inf")


class Case:
    """Random inputs and scalar parameters for one tuple and shape."""

    def __init__(self, gen, dtype, hd, mask, pos, softcap, H, seed_mix):
        self.gen, self.dtype, self.hd, self.mask, self.pos, self.softcap = (
            gen, dtype, hd, mask, pos, softcap)
        self.tdt = TORCH_DTYPES[dtype]
        self.sm_scale = 0.0 if seed_mix % 2 == 0 else 0.07
        self.cap = 2.5 if softcap else 0.0
        # mask=window needs a window (>= 0); 100000 is wider than any request: causal.
        self.window_left = [0, 5, 40, 1000, 100000][seed_mix % 5] if mask == "window" else -1
        self.mask_shift = seed_mix % 4  # custom mask's address, bytes past an aligned one
        self.use_workspace = (seed_mix // 4) % 2 == 1  # single prefill: half the cases
        self.rope = [(1.0, 1e4, 0), (2.0, 5e5, 777), (1.0, 1e6, 100000)][seed_mix % 3]
        self.slopes = None
        if pos == "alibi":
            self.slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)],
                                       device="cuda", dtype=torch.float32)

    def rnd(self, *shape):
        return torch.randn(*shape, generator=self.gen, device="cuda",
                           dtype=torch.float32).to(self.tdt)

    def bits(self, lq, lk):
        b = torch.rand(lq, lk, generator=self.gen, device="cuda") < 0.7
        if lq > 2:
            b[lq // 2] = False  # one query sees nothing
        return b

    def scalars(self):
        """The run's scalars (window_left is the plan's for the batch kinds)."""
        return dict(sm_scale=self.sm_scale, logits_soft_cap=self.cap,
                    rope_scale=self.rope[0] if self.pos == "rope" else 0.0,
                    rope_theta=self.rope[1] if self.pos == "rope" else 0.0,
                    rope_offset=self.rope[2] if self.pos == "rope" else 0)

    def ref(self, q, k, v, bits, rope_offset=None):
        """rope_offset: this request's own (per-request rope_offsets), else the case's."""
        scale = self.sm_scale if self.sm_scale else 1.0 / math.sqrt(self.hd)
        rope = self.rope if rope_offset is None else (self.rope[0], self.rope[1], rope_offset)
        return reference(q, k, v, sm_scale=scale, cap=self.cap, pos=self.pos, rope=rope,
                         mask=self.mask, window_left=self.window_left, slopes=self.slopes,
                         bits=bits)


def run_single(pf, gen, tup, lq, lk, group, layout, tile, hkv=2):
    dtype, hd, mask, pos, sc = tup
    H = group * hkv
    c = Case(gen, dtype, hd, mask, pos, sc, H, lq + 3 * lk + group)
    q = c.rnd(lq, H, hd)
    if layout == "NHD":
        k, v = c.rnd(lk, hkv, hd), c.rnd(lk, hkv, hd)
        kn, vn = k, v
    else:
        k, v = c.rnd(hkv, lk, hd), c.rnd(hkv, lk, hd)
        kn, vn = k.permute(1, 0, 2), v.permute(1, 0, 2)
    o = torch.full((lq, H, hd), float("nan"), device="cuda", dtype=c.tdt)
    lse = torch.full((lq, H), float("nan"), device="cuda", dtype=torch.float32)
    bits = c.bits(lq, lk) if mask == "custom" else None
    packed = pack_bits(bits.reshape(-1), c.mask_shift) if bits is not None else None
    spec = prefill_spec("single", dtype, hd, mask, pos, sc)
    args = prefill_args(q, k, v, o, lse, layout=layout, alibi_slopes=c.slopes,
                        custom_mask=packed, cta_tile_q=tile, window_left=c.window_left,
                        **c.scalars())
    # Half the cases pass a workspace: RoPE rotates the keys once into it, and sm_90a's
    # persistent CTAs claim their blocks through its counter.
    ws = pf.workspace(spec, args) if c.use_workspace else None  # noqa: F841 (kept alive)
    pf.run(spec, args, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ref_o, ref_lse = c.ref(q, kn, vn, bits)
    return compare(o, lse, ref_o, ref_lse, dtype)


# --page-order: how the pool's pages are handed to requests (pool_page_order).
PAGE_ORDER = "runs"


def pool_page_order(total, gen, dev):
    """The pool's page ids in runs of 1-24 consecutive pages, the runs shuffled, as a
    cache's allocator hands them out once freed pages mix with fresh ones: a request's
    pages then both follow on and jump. --page-order sequential: one run; random: runs
    of one page."""
    if PAGE_ORDER == "sequential":
        return torch.arange(total, device=dev)
    if PAGE_ORDER == "random":
        return torch.randperm(total, generator=gen, device=dev)
    lens = torch.randint(1, 25, (total,), generator=gen, device=dev).tolist()
    runs, start = [], 0
    for n in lens:
        if start >= total:
            break
        runs.append(torch.arange(start, min(start + n, total), device=dev))
        start += n
    order = torch.randperm(len(runs), generator=gen, device=dev).tolist()
    return torch.cat([runs[i] for i in order])


def run_batch(pf, gen, kind, tup, qo_lens, kv_lens, group, layout, page_size, tile, hkv=2,
              stream=None, workspace=None, per_request_rope=False):
    """stream: run on it right after the plan, with every input ready beforehand (so the
    run is ordered after nothing but what the plan itself guarantees); workspace: reused.
    per_request_rope: RoPE positions from rope_offsets, a random one per request."""
    dtype, hd, mask, pos, sc = tup
    H = group * hkv
    dev = "cuda"
    c = Case(gen, dtype, hd, mask, pos, sc, H, sum(qo_lens) + 3 * sum(kv_lens) + page_size)
    B = len(qo_lens)
    qo_indptr = [0]
    for n in qo_lens:
        qo_indptr.append(qo_indptr[-1] + n)
    total_q = qo_indptr[-1]
    q = c.rnd(max(total_q, 1), H, hd)
    o = torch.full((max(total_q, 1), H, hd), float("nan"), device=dev, dtype=c.tdt)
    lse = torch.full((max(total_q, 1), H), float("nan"), device=dev, dtype=torch.float32)
    args = BatchPrefillArgs()  # FI_BATCH_PREFILL_ARGS_VERSION
    logical = []  # per request (k, v) [Lk, Hkv, D]
    last_page = None
    if kind == "ragged":
        kv_indptr = [0]
        for n in kv_lens:
            kv_indptr.append(kv_indptr[-1] + n)
        total_k = max(kv_indptr[-1], 1)
        if layout == "NHD":
            k, v = c.rnd(total_k, hkv, hd), c.rnd(total_k, hkv, hd)
            kn, vn = k, v
            args.k_stride_n, args.k_stride_h = k.stride(0), k.stride(1)
            args.v_stride_n, args.v_stride_h = v.stride(0), v.stride(1)
        else:
            k, v = c.rnd(hkv, total_k, hd), c.rnd(hkv, total_k, hd)
            kn, vn = k.permute(1, 0, 2), v.permute(1, 0, 2)
            args.k_stride_h, args.k_stride_n = k.stride(0), k.stride(1)
            args.v_stride_h, args.v_stride_n = v.stride(0), v.stride(1)
        for b in range(B):
            logical.append((kn[kv_indptr[b]:kv_indptr[b + 1]], vn[kv_indptr[b]:kv_indptr[b + 1]]))
        kv_indices_t = None
    else:
        npages = [(n + page_size - 1) // page_size for n in kv_lens]
        kv_indptr = [0]
        for n in npages:
            kv_indptr.append(kv_indptr[-1] + n)
        total_pages = kv_indptr[-1] + 3
        perm = pool_page_order(total_pages, gen, dev)[:max(kv_indptr[-1], 1)]
        kv_indices_t = perm.to(torch.int32).contiguous()
        last_page = [n - (p - 1) * page_size if p > 0 else 0 for n, p in zip(kv_lens, npages)]
        if layout == "NHD":
            k = c.rnd(total_pages, page_size, hkv, hd)
            v = c.rnd(total_pages, page_size, hkv, hd)
            args.k_stride_page, args.k_stride_n, args.k_stride_h = k.stride(0), k.stride(1), k.stride(2)
            args.v_stride_page, args.v_stride_n, args.v_stride_h = v.stride(0), v.stride(1), v.stride(2)
            knp, vnp = k, v
        else:
            k = c.rnd(total_pages, hkv, page_size, hd)
            v = c.rnd(total_pages, hkv, page_size, hd)
            args.k_stride_page, args.k_stride_h, args.k_stride_n = k.stride(0), k.stride(1), k.stride(2)
            args.v_stride_page, args.v_stride_h, args.v_stride_n = v.stride(0), v.stride(1), v.stride(2)
            knp, vnp = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        # Slots past each request's last key, and the pages no request owns,
        # hold NaN: a kernel reading whole pages must keep them out of the
        # output (a weight of 0 times NaN is NaN).
        owned = set(kv_indices_t.tolist()[:kv_indptr[-1]])
        with torch.no_grad():
            for pg in range(total_pages):
                if pg not in owned:
                    knp[pg] = float("nan")
                    vnp[pg] = float("nan")
            for b in range(B):
                if npages[b] and last_page[b] < page_size:
                    pg = int(kv_indices_t[kv_indptr[b + 1] - 1])
                    knp[pg, last_page[b]:] = float("nan")
                    vnp[pg, last_page[b]:] = float("nan")
        for b in range(B):
            idx = kv_indices_t[kv_indptr[b]:kv_indptr[b + 1]].long()
            kb = knp[idx].reshape(-1, hkv, hd)[:kv_lens[b]]
            vb = vnp[idx].reshape(-1, hkv, hd)[:kv_lens[b]]
            logical.append((kb, vb))
    bits_list, offsets = [], []
    if mask == "custom":
        pos_bits = 0
        for b in range(B):
            bb = c.bits(qo_lens[b], kv_lens[b])
            bits_list.append(bb)
            offsets.append(pos_bits)
            pos_bits += bb.numel()
        flat = torch.cat([bb.reshape(-1) for bb in bits_list]) if pos_bits else torch.zeros(
            0, dtype=torch.bool, device=dev)
        packed = pack_bits(flat, c.mask_shift)
        offs_t = torch.tensor(offsets, dtype=torch.int64, device=dev)
    else:
        packed, offs_t = None, None

    spec = prefill_spec(kind, dtype, hd, mask, pos, sc)
    qo_t = torch.tensor(qo_indptr, dtype=torch.int32, device=dev)
    kv_t = torch.tensor(kv_indptr, dtype=torch.int32, device=dev)
    last_t = torch.tensor(last_page or [0], dtype=torch.int32, device=dev)
    if stream is not None:
        torch.cuda.synchronize()
    plan, ws = pf.plan(spec, qo_indptr, kv_indptr, H, hkv, kv_last_page_len=last_page,
                       page_size=page_size if kind == "paged" else 16,
                       window_left=c.window_left, cta_tile_q=tile, workspace=workspace)
    args.q, args.k, args.v, args.o, args.lse = (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                o.data_ptr(), lse.data_ptr())
    args.qo_indptr, args.kv_indptr = qo_t.data_ptr(), kv_t.data_ptr()
    if kind == "paged":
        args.kv_indices, args.kv_last_page_len = kv_indices_t.data_ptr(), last_t.data_ptr()
    args.q_stride_n, args.q_stride_h = q.stride(0), q.stride(1)
    args.o_stride_n, args.o_stride_h = o.stride(0), o.stride(1)
    for name, val in c.scalars().items():
        setattr(args, name, val)
    args.alibi_slopes = c.slopes.data_ptr() if c.slopes is not None else None
    args.custom_mask = packed.data_ptr() if packed is not None else None
    args.custom_mask_offsets = offs_t.data_ptr() if offs_t is not None else None
    rope_offsets = [None] * B
    if per_request_rope:
        rope_offsets = [int(x) for x in torch.randint(0, 200000, (B,), generator=gen, device=dev)]
        rope_offsets_t = torch.tensor(rope_offsets, dtype=torch.int32, device=dev)
        args.rope_offset = 0  # rope_offsets replaces it
        args.rope_offsets = rope_offsets_t.data_ptr()
    try:
        pf.batch_run(plan, args, (stream or torch.cuda.current_stream()).cuda_stream)
        torch.cuda.synchronize()
    finally:
        pf.plan_free(plan)
    ref_o = torch.zeros(max(total_q, 1), H, hd, dtype=torch.float64, device=dev)
    ref_lse = torch.full((max(total_q, 1), H), -math.inf, dtype=torch.float64, device=dev)
    for b in range(B):
        a, e = qo_indptr[b], qo_indptr[b + 1]
        kb, vb = logical[b]
        ro, rl = c.ref(q[a:e], kb, vb, bits_list[b] if bits_list else None, rope_offsets[b])
        ref_o[a:e], ref_lse[a:e] = ro, rl
    if total_q == 0:
        return True, 0.0, 0.0, 0.0
    return compare(o[:total_q], lse[:total_q], ref_o[:total_q], ref_lse[:total_q], dtype)


def nonblocking_plan_run(pf, gen, rounds):
    """Plan, then run at once on a non-blocking stream, reusing one workspace with a new batch
    layout each round: every run must read the work list its own plan wrote."""
    stream = torch.cuda.Stream()  # PyTorch's streams do not wait for the legacy stream
    workspace = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    rng = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen,
                                                          device="cuda")))
    worst, fails = 0.0, 0
    for r in range(rounds):
        b = 1 + r % 5
        lens = [int(x) for x in torch.randint(1, 400, (b,), generator=rng)]
        ok, emax, _, _ = run_batch(pf, gen, "ragged", ("fp16", 64, "causal", "none", 0), lens,
                                   lens, 2, "NHD", 0, 0, stream=stream, workspace=workspace)
        worst = max(worst, emax)
        fails += not ok
    return fails, worst


def per_request_rope_cases(pf, gen, kinds, dtypes, hds, masks, quick):
    """Batch prefill with RoPE positioned per request (rope_offsets): yields (name, fn)."""
    n = 0
    for kind in [k for k in ("ragged", "paged") if k in kinds]:
        for dtype, hd, mask in itertools.product(dtypes, hds, masks):
            for qo, kv, group in (BATCHES[:2] if quick else BATCHES):
                for ps in ([16] if kind == "ragged" or quick else [5, 16]):
                    tile = TILES[n % len(TILES)]
                    layout = ["NHD", "HND"][(n // 4) % 2]
                    n += 1
                    tup = (dtype, hd, mask, "rope", 0)
                    name = (f"{kind} {tup} rope_offsets qo={qo} kv={kv} group={group} page={ps} "
                            f"{layout} tile={tile}")
                    yield name, (lambda kind=kind, tup=tup, qo=qo, kv=kv, group=group,
                                 layout=layout, ps=ps, tile=tile:
                                 run_batch(pf, gen, kind, tup, qo, kv, group, layout, ps, tile,
                                           per_request_rope=True))


def sdpa_agreement(pf, gen):
    """fijit vs torch SDPA (default backend) where both compute the same thing."""
    rows = []
    F = torch.nn.functional
    for dtype, hd, causal, (H, Hkv) in itertools.product(["fp16", "bf16"], [64, 128, 256],
                                                         [False, True], [(8, 8), (8, 2)]):
        tdt = TORCH_DTYPES[dtype]
        L = 1000
        q = torch.randn(L, H, hd, generator=gen, device="cuda").to(tdt)
        k = torch.randn(L, Hkv, hd, generator=gen, device="cuda").to(tdt)
        v = torch.randn(L, Hkv, hd, generator=gen, device="cuda").to(tdt)
        o = torch.full_like(q, float("nan"))
        spec = prefill_spec("single", dtype, hd, "causal" if causal else "none")
        pf.run(spec, prefill_args(q, k, v, o), torch.cuda.current_stream().cuda_stream)
        kr = k.repeat_interleave(H // Hkv, dim=1)
        vr = v.repeat_interleave(H // Hkv, dim=1)
        ref = F.scaled_dot_product_attention(q.transpose(0, 1), kr.transpose(0, 1),
                                             vr.transpose(0, 1), is_causal=causal).transpose(0, 1)
        torch.cuda.synchronize()
        d = (o.float() - ref.float()).abs()
        rel = float(d.max() / ref.float().abs().max())
        rows.append((dtype, hd, causal, H, Hkv, rel))
    return rows


SINGLE_SHAPES = [  # (qo_len, kv_len, group, layout)
    (1, 1, 1, "NHD"), (1, 300, 4, "HND"), (77, 77, 2, "NHD"), (130, 333, 4, "HND"),
    (200, 100, 2, "NHD"), (50, 70, 8, "HND"), (700, 1100, 1, "NHD"), (300, 500, 3, "NHD")]
# group 3 does not divide the Hopper loop's 128-row tile: its consumers load Q
SINGLE_QUICK = [(1, 300, 4, "HND"), (130, 333, 4, "NHD"), (700, 1100, 1, "NHD"),
                (300, 500, 3, "NHD")]
BATCHES = [  # (qo_lens, kv_lens, group)
    ([0, 1, 37, 130, 3], [5, 1, 60, 200, 0], 4),
    ([300, 17], [300, 900], 1),
    ([5, 0, 9], [17, 33, 0], 8)]
TILES = [0, 128, 64, 16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--kinds", default="single,ragged,paged")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--hds", default="64,128,256")
    ap.add_argument("--masks", default="none,causal,window,custom")
    ap.add_argument("--pos", default="none,rope,alibi")
    ap.add_argument("--softcaps", default="0,1")
    ap.add_argument("--no-sdpa", action="store_true", help="skip the SDPA comparison")
    ap.add_argument("--verbose", action="store_true", help="name each case before it runs")
    ap.add_argument("--page-order", choices=("runs", "sequential", "random"), default="runs",
                    help="paged: the pool's pages in shuffled runs, in order, or shuffled one by one")
    ap.add_argument("--pages", default=None,
                    help="page sizes of the paged cases (default: 1,16,48 quick, else 1,5,16,24,64)")
    opt = ap.parse_args()
    global PAGE_ORDER
    PAGE_ORDER = opt.page_order

    seed, gen = seeded_generator("test_prefill")
    fj = Fijit()
    pf = Prefill(fj)
    tuples = list(itertools.product(opt.dtypes.split(","), [int(x) for x in opt.hds.split(",")],
                                    opt.masks.split(","), opt.pos.split(","),
                                    [int(x) for x in opt.softcaps.split(",")]))
    kinds = opt.kinds.split(",")
    stats = {}
    results = []
    failures = 0
    t0 = time.time()
    n = 0
    for kind in kinds:
        for tup in tuples:
            if kind == "single":
                shapes = [("single", s) for s in (SINGLE_QUICK if opt.quick else SINGLE_SHAPES)]
            else:
                batches = BATCHES[:2] if opt.quick else BATCHES
                # Page 48 (and 24, 64): where the Hopper loop's K/V tiles hold
                # 160 keys (hd 128 causal), boxes of part of a page (16, 8, 32
                # rows) at row groups past the page's first; elsewhere the
                # tile kernels.
                pages = [1, 16, 48] if kind == "paged" else [0]
                if kind == "paged" and not opt.quick:
                    pages = [1, 5, 16, 24, 64]
                if kind == "paged" and opt.pages:
                    pages = [int(x) for x in opt.pages.split(",")]
                shapes = [("batch", (b, ps)) for b in batches for ps in pages]
            for i, (what, shape) in enumerate(shapes):
                tile = TILES[n % len(TILES)]
                layout = ["NHD", "HND"][(n // 4) % 2]
                n += 1
                if what == "single":
                    lq, lk, group, lay = shape
                    name = (f"single {tup} qo={lq} kv={lk} group={group} {lay} tile={tile}")
                    fn = lambda: run_single(pf, gen, tup, lq, lk, group, lay, tile)  # noqa: E731
                else:
                    (qo, kv, group), ps = shape
                    name = (f"{kind} {tup} qo={qo} kv={kv} group={group} page={ps} {layout} "
                            f"tile={tile}")
                    fn = lambda: run_batch(pf, gen, kind, tup, qo, kv, group, layout,  # noqa: E731
                                           ps, tile)
                if opt.verbose:
                    print(f"case {name}", flush=True)
                try:
                    ok, emax, emean, lerr = fn()
                except Exception as e:  # a failed call must not hide the other results
                    ok, emax, emean, lerr = False, float("inf"), float("inf"), float("inf")
                    print(f"ERROR {name}: {e}", flush=True)
                st = stats.setdefault((kind, tup[0]), {"cases": 0, "fail": 0, "max": 0.0,
                                                        "mean_sum": 0.0, "lse_max": 0.0})
                st["cases"] += 1
                st["max"] = max(st["max"], emax)
                st["mean_sum"] += emean if math.isfinite(emean) else 0.0
                st["lse_max"] = max(st["lse_max"], lerr)
                results.append({"case": name, "ok": ok, "max_rel": emax, "mean_rel": emean,
                                "lse_err": lerr})
                if not ok:
                    st["fail"] += 1
                    failures += 1
                    if failures <= 40:
                        print(f"FAIL {name}: max_rel {emax:.3g} mean_rel {emean:.3g} "
                              f"lse_err {lerr:.3g}", flush=True)
    if "rope" in opt.pos.split(","):
        rope_fails = rope_cases = 0
        for name, fn in per_request_rope_cases(pf, gen, kinds, opt.dtypes.split(","),
                                               [int(x) for x in opt.hds.split(",")],
                                               [m for m in opt.masks.split(",")], opt.quick):
            if opt.verbose:
                print(f"case {name}", flush=True)
            try:
                ok, emax, emean, lerr = fn()
            except Exception as e:
                ok, emax, emean, lerr = False, float("inf"), float("inf"), float("inf")
                print(f"ERROR {name}: {e}", flush=True)
            rope_cases += 1
            results.append({"case": name, "ok": ok, "max_rel": emax, "mean_rel": emean,
                            "lse_err": lerr})
            if not ok:
                rope_fails += 1
                print(f"FAIL {name}: max_rel {emax:.3g} mean_rel {emean:.3g} lse_err {lerr:.3g}",
                      flush=True)
        print(f"batch prefill with per-request rope_offsets: {rope_cases} cases, "
              f"{rope_fails} failures")
        failures += rope_fails
    elapsed = time.time() - t0
    print()
    print(f"prefill correctness vs float64 reference ({len(tuples)} tuples per kind, "
          f"{n} cases, {elapsed:.0f} s)")
    print(f"{'kind':8} {'dtype':5} {'cases':>6} {'fail':>5} {'max_rel':>10} {'mean_rel':>10} "
          f"{'lse_err':>10} {'tol':>8}")
    for (kind, dtype), st in stats.items():
        print(f"{kind:8} {dtype:5} {st['cases']:6d} {st['fail']:5d} {st['max']:10.2e} "
              f"{st['mean_sum'] / max(st['cases'], 1):10.2e} {st['lse_max']:10.2e} "
              f"{TOL_O[dtype]:8.0e}")
    nb_fails, nb_worst = nonblocking_plan_run(pf, gen, 10 if opt.quick else 60)
    print(f"plan -> run on a non-blocking stream, workspace reused: {nb_fails} failures "
          f"(max_rel {nb_worst:.2e})")
    failures += nb_fails
    sdpa = []
    try:
        sdpa = [] if opt.no_sdpa else sdpa_agreement(pf, gen)
        print("agreement with torch SDPA (L=1000, max|o - sdpa| / max|sdpa|):")
        for dtype, hd, causal, H, Hkv, rel in sdpa:
            print(f"  {dtype} hd={hd} {'causal' if causal else 'none  '} heads {H}/{Hkv}: "
                  f"{rel:.2e}")
        bad = [r for r in sdpa if r[5] > 2 * TOL_O[r[0]]]
        if bad:
            failures += len(bad)
            print(f"FAIL: {len(bad)} SDPA comparisons above 2x tolerance")
    except Exception as e:
        failures += 1
        print(f"ERROR sdpa agreement: {e}")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "test_prefill.json"), "w") as f:
            json.dump({"seed": seed, "results": results,
                       "sdpa": [list(r) for r in sdpa]}, f)
    fj.close()
    print(f"test_prefill: {'FAILED' if failures else 'passed'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
