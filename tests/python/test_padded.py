#!/usr/bin/env python3
"""CPU tests of the package's tensor paths without torch or a GPU: tests/python/stand_ins
stands in for torch (small host tensors) and tests/fake_cuda.c for the driver (host
memory for device memory, launches checked and counted), so the real code runs end to
end, the library included (kernels are compiled for the fake's sm_90a and loaded). What
is checked: the padded-batch key layout (fijit.padded) against lists worked out by hand
(left and right padding, holes, a static cache's tail, a sliding cache's offset), its
SDPA mask, PaddedBatchPlan and padded_attention (one launch per call, one plan per
shape, every argument error before anything runs), workspace= of decode and prefill,
per-request rope_offsets, and softcap= as the deprecated alias of logits_soft_cap.

    python3 tests/python/test_padded.py [build-dir]      (make test-python)
"""
import ctypes
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
sys.path[:0] = [os.path.join(HERE, "stand_ins"), os.path.join(ROOT, "python")]
os.environ["FIJIT_LIBRARY"] = os.path.join(BUILD, "libfijit.so")
for var in ("FIJIT_ARCH", "FIJIT_JIT", "FIJIT_LOG", "FIJIT_TEMPLATE_DIR", "FIJIT_REMOTE"):
    os.environ.pop(var, None)
WORK = tempfile.mkdtemp(prefix="fijit-padded.")
os.environ["FIJIT_CACHE_DIR"] = os.path.join(WORK, "cache")

# The fake driver first (fijit's dlopen("libcuda.so.1") then finds it), with its primary
# context current, as torch leaves it.
CUDA = ctypes.CDLL(os.path.join(BUILD, "tests", "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
_ctx = ctypes.c_void_p()
assert CUDA.cuInit(0) == 0 and CUDA.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), 0) == 0
assert CUDA.cuCtxSetCurrent(_ctx) == 0

import torch  # noqa: E402  (the fake)
import fijit  # noqa: E402
from fijit import padded as P  # noqa: E402

assert getattr(torch, "FAKE", False), "tests/python/stand_ins must shadow torch here"
from checks import check, failures, finish, raises  # noqa: E402,F401


def launches():
    return CUDA.fake_cuda_launch_count()


def bools(rows):
    return torch.tensor([[bool(x) for x in r] for r in rows], dtype=torch.bool)


def row_lists(layout):
    """Each row's keys as (row, key) pairs, from the device arrays."""
    ptr, keys = layout.kv_indptr.tolist(), layout.keys.tolist()
    return [[divmod(keys[p], layout.kv_len) for p in range(ptr[b], ptr[b + 1])]
            for b in range(layout.batch_size)]


# ---- the key layout ----------------------------------------------------------------------
lay = P.padding_layout(bools([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 1]]))
check("padding_layout lists each row's visible keys in order, rows one after another",
      lay.kv_indptr.tolist() == [0, 2, 6, 8]
      and row_lists(lay) == [[(0, 2), (0, 3)], [(1, 0), (1, 1), (1, 2), (1, 3)],
                             [(2, 1), (2, 3)]]
      and len(lay.keys.tolist()) == 3 * 4 + 1, row_lists(lay))
pages = lay.pages(2 * 4).tolist()[:8]  # HND [B, Hkv=2, L=4, D]: row b starts at token 8 b
check("pages(): page ids in the cache's own row stride (HND: Hkv * L tokens a row)",
      pages == [2, 3, 8, 9, 10, 11, 17, 19] and lay.pages(4) is lay.keys, pages)
empty_row = P.padding_layout(bools([[0, 0], [1, 0]]))
check("a row with no visible key has none (o = 0 from the kernel)",
      empty_row.kv_indptr.tolist() == [0, 0, 1], empty_row.kv_indptr.tolist())
e = raises(lambda: P.padding_layout(torch.ones(2, 3, dtype=torch.int32)), ValueError)
check("padding_layout of a non-bool mask: ValueError", isinstance(e, ValueError), repr(e))

# transformers' 2-D mask (1: attend) as visible keys of a layer's cache.
left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.int64)
v = P.visible_keys(left, 5, 0, 5).tolist()
check("visible_keys: left padding drops the leading pads",
      v == [[False, False, True, True, True], [True] * 5], v)
right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.int64)
v = P.visible_keys(right, 5, 0, 5).tolist()
check("visible_keys: right padding in a prompt keeps the trailing pads (queries stay at "
      "their positions)", v == [[True] * 5, [True] * 5], v)
holes = torch.tensor([[1, 1, 0, 0, 1, 1]], dtype=torch.int64)
v = P.visible_keys(holes, 6, 0, 6).tolist()
check("visible_keys: a decode step after right padding drops the holes",
      v == [[True, True, False, False, True, True]], v)
v = P.visible_keys(left, 8, 0, torch.tensor([5])).tolist()
check("visible_keys: a static cache of 8 with 5 filled leaves the tail out (q_end a tensor)",
      v == [[False, False, True, True, True, False, False, False], [True] * 5 + [False] * 3], v)
v = P.visible_keys(left, 3, 2, 5).tolist()
check("visible_keys: a sliding cache holding positions 2..4 (kv_offset 2)",
      v == [[True, True, True], [True, True, True]], v)
v = P.visible_keys(torch.tensor([[0, 0, 0, 1, 1]], dtype=torch.int64), 3, 2, 5).tolist()
check("visible_keys: ... with a pad inside the window", v == [[False, True, True]], v)
v = P.visible_keys(None, 4, 0, torch.tensor([3]), batch_size=2).tolist()
check("visible_keys: no mask, a static cache's tail, every row",
      v == [[True, True, True, False]] * 2, v)
e = raises(lambda: P.visible_keys(None, 4, 0, 3, batch_size=2), ValueError)
check("visible_keys: no tensor to take the device from, no device=: ValueError naming device",
      isinstance(e, ValueError) and "device" in str(e), repr(e))
v = P.visible_keys(None, 4, 0, 3, batch_size=2, device="cuda").tolist()
check("visible_keys: q_end an int, device= given", v == [[True, True, True, False]] * 2, v)
e = raises(lambda: P.visible_keys(None, 4, 0, torch.tensor([3])), ValueError)
check("visible_keys: no mask and no batch_size: ValueError naming it",
      isinstance(e, ValueError) and "batch_size" in str(e), repr(e))

m = P.sdpa_mask(P.padding_layout(bools([[0, 1, 1, 1]])), 2, causal=True).tolist()
check("sdpa_mask: the queries at the last positions of the row's keys, causal",
      m == [[[[False, True, True, False], [False, True, True, True]]]], m)
m = P.sdpa_mask(P.padding_layout(bools([[1, 1, 1, 1]])), 1, causal=True, window_left=1).tolist()
check("sdpa_mask: a window of 1 key before the query", m == [[[[False, False, True, True]]]], m)

# ---- PaddedBatchPlan through the library, on the fake driver -------------------------------
B, S, H, HKV, D, L = 3, 4, 4, 2, 64, 6
F16 = torch.float16


def qkv(seq=S, kv=L, d=D, q_dtype=F16):
    q = torch.empty(B, seq, H, d, dtype=q_dtype).transpose(1, 2)  # as transformers' view
    k = torch.empty(B, HKV, kv, d, dtype=F16)
    return q, k, torch.empty(B, HKV, kv, d, dtype=F16)


layout = P.padding_layout(P.visible_keys(torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6,
                                                        [0, 1, 1, 1, 1, 1]]), L, 0, L))
plan = P.PaddedBatchPlan().plan(B, S, H, HKV, D, q_dtype=F16, causal=True)
q, k, v = qkv()
n0 = launches()
out = plan.run(q, k, v, layout)
check("PaddedBatchPlan.run: one launch for the batch, out [B, S, H, D]",
      launches() == n0 + 1 and tuple(out.shape) == (B, S, H, D), (launches() - n0, out.shape))
o2, lse = plan.run(q, k, v, layout, return_lse=True)
check("PaddedBatchPlan.run(return_lse=True): lse [B, S, H] float32",
      tuple(lse.shape) == (B, S, H) and lse.dtype is torch.float32)
q1, k1, v1 = qkv(seq=1)
step = P.PaddedBatchPlan().plan(B, 1, H, HKV, D, kv_len_hint=L)
n0 = launches()
step.run(q1, k1, v1, layout)
check("a decode step (S = 1) is the same one launch", launches() == n0 + 1)

cases = {
    "q of another shape": (lambda: plan.run(qkv(seq=5)[0], k, v, layout), ValueError, "q"),
    "q as a contiguous [B, H, S, D] (rows not S token strides apart)":
        (lambda: plan.run(torch.empty(B, H, S, D, dtype=F16), k, v, layout), ValueError,
         "transpose"),
    "q of another dtype": (lambda: plan.run(qkv(q_dtype=torch.bfloat16)[0], k, v, layout),
                           TypeError, "q"),
    "k of another length than the layout's": (lambda: plan.run(q, *qkv(kv=7)[1:], layout),
                                               ValueError, "k, v"),
    "layout not a KeyLayout": (lambda: plan.run(q, k, v, layout.keys), TypeError, "layout"),
    "out of the wrong shape": (lambda: plan.run(q, k, v, layout,
                                                out=torch.empty(B, S, H, 32, dtype=F16)),
                               ValueError, "out"),
    "lse of the wrong shape": (lambda: plan.run(q, k, v, layout,
                                                lse=torch.empty(B, S, H + 1, dtype=torch.float32)),
                               ValueError, "lse"),
    "k whose batch stride is no multiple of its token stride (a token-major cache)":
        (lambda: plan.run(q, *[torch.empty(L, B, HKV, D, dtype=F16).transpose(0, 1)
                               .transpose(1, 2)] * 2, layout), ValueError, "stride"),
    "run before plan": (lambda: P.PaddedBatchPlan().run(q, k, v, layout), RuntimeError, "plan"),
    "plan: window without causal": (lambda: P.PaddedBatchPlan().plan(B, S, H, HKV, D,
                                                                      causal=False,
                                                                      window_left=3),
                                    ValueError, "window_left"),
    "plan: fp32": (lambda: P.PaddedBatchPlan().plan(B, S, H, HKV, D, q_dtype=torch.float32),
                   TypeError, "q_dtype"),
    "plan: batch 0": (lambda: P.PaddedBatchPlan().plan(0, S, H, HKV, D), ValueError,
                      "batch_size"),
    "plan: a head count the library refuses": (lambda: P.PaddedBatchPlan().plan(B, S, 3, 2, D),
                                               fijit.InvalidError, "num_qo_heads"),
}
plan.run(q, k, v, layout)  # the full check of these inputs, kept
odd = torch.Tensor(q._s, q.shape, q.stride(), q._off + 1, q.device)  # same strides, 2 B off
cases["q 2 bytes off alignment, shapes and strides as the last call's (no shortcut past the "
      "alignment check)"] = (lambda: plan.run(odd, k, v, layout), ValueError, "aligned")
for name, (fn, cls, word) in cases.items():
    n0 = launches()
    e = raises(fn, cls)
    check(f"PaddedBatchPlan: {name}: {cls.__name__} naming {word!r}, nothing launched",
          isinstance(e, cls) and word in str(e) and launches() == n0, repr(e))

# padded_attention: a plan per shape, kept; a contiguous q copied once; sinks.
P._plans.clear()
n0 = launches()
P.padded_attention(q, k, v, layout)
P.padded_attention(torch.empty(B, H, S, D, dtype=F16), k, v, layout)
check("padded_attention: two calls of one shape, one plan, two launches (a contiguous "
      "[B, H, S, D] q is copied, not refused)", len(P._plans) == 1 and launches() == n0 + 2,
      (len(P._plans), launches() - n0))
P.padded_attention(q, k, v, layout, window_left=2)
check("padded_attention: another mask, another plan", len(P._plans) == 2)
n0 = launches()
P.padded_attention(q, k, v, layout, sinks=torch.zeros(H, dtype=torch.float32))
check("padded_attention(sinks=): the sink variant, registered once, one launch",
      launches() == n0 + 1 and P.SINK_VARIANT in fijit.default_context()._variants
      and any(key.variant == P.SINK_VARIANT for key in P._plans))
qm = torch.empty(B, S, 8, 192, dtype=torch.bfloat16).transpose(1, 2)
km = torch.empty(B, 8, L, 192, dtype=torch.bfloat16)
vm = torch.empty(B, 8, L, 128, dtype=torch.bfloat16)
n0 = launches()
om = P.padded_attention(qm, km, vm, layout, window_left=3, logits_soft_cap=20.0)
check("padded_attention of MLA's heads (q, k 192, v 128, bf16) with a window and a soft-cap: "
      "one launch, out of v's head dim", launches() == n0 + 1 and tuple(om.shape) == (B, S, 8, 128))
e = raises(lambda: P.padded_attention(q, k, v, layout, sinks=torch.zeros(H + 1)), ValueError)
check("padded_attention: sinks of the wrong shape: ValueError naming sinks",
      isinstance(e, ValueError) and "sinks" in str(e), repr(e))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    P.padded_attention(q, k, v, layout, softcap=30.0)
check("padded_attention(softcap=): DeprecationWarning, served as logits_soft_cap",
      [w.category for w in caught] == [DeprecationWarning]
      and any(key.logits_soft_cap == 30.0 for key in P._plans), [str(w.message) for w in caught])
e = raises(lambda: P.padded_attention(q, k, v, layout, softcap=1.0, logits_soft_cap=1.0),
           TypeError)
import threading  # noqa: E402
P._plans.clear()
P.padded_attention(q, k, v, layout)
other = threading.Thread(target=lambda: (CUDA.cuCtxSetCurrent(_ctx),  # as torch would
                                         P.padded_attention(q, k, v, layout)))
other.start()
other.join()
check("padded_attention from two threads: a plan each (a plan serves one run at a time)",
      len(P._plans) == 2 and len({key.thread for key in P._plans}) == 2, list(P._plans))
check("padded_attention: softcap and logits_soft_cap both: TypeError", isinstance(e, TypeError))

# ---- workspace=, rope_offsets -------------------------------------------------------------
dq = torch.empty(H, D, dtype=F16)
dk = torch.empty(4000, HKV, D, dtype=F16)
dv = torch.empty(4000, HKV, D, dtype=F16)
e = raises(lambda: fijit.decode(dq, dk, dv, workspace=torch.empty(16, dtype=torch.uint8)),
           ValueError)
check("decode(workspace=) too small: ValueError saying the bytes needed, nothing launched",
      isinstance(e, ValueError) and "needs" in str(e) and "bytes" in str(e), repr(e))
e = raises(lambda: fijit.decode(dq, dk, dv, workspace=torch.empty(1 << 20)), ValueError)
check("decode(workspace=) not uint8: ValueError", isinstance(e, ValueError) and "uint8" in str(e))
ws = torch.empty(8 << 20, dtype=torch.uint8)
n0 = launches()
fijit.decode(dq, dk, dv, workspace=ws)
check("decode(workspace=) big enough: runs in it", launches() > n0)
pq = torch.empty(64, H, D, dtype=F16)
pk = torch.empty(64, HKV, D, dtype=F16)
n0 = launches()
fijit.prefill(pq, pk, pk, causal=True, rope=True, workspace=ws)
check("prefill(workspace=) with RoPE (which needs one): runs in it", launches() > n0)
e = raises(lambda: fijit.prefill(pq, pk, pk, causal=True, rope=True,
                                 workspace=torch.empty(8, dtype=torch.uint8)), ValueError)
check("prefill(workspace=) too small: ValueError", isinstance(e, ValueError), repr(e))

rag = fijit.BatchPrefillPlan(torch.empty(0, dtype=torch.uint8)).plan(
    [0, 32, 64], [0, 32, 64], H, HKV, D, causal=True, pos_encoding="rope", grow_workspace=True)
n0 = launches()
rag.run(pq, pk, pk, rope_offsets=torch.tensor([0, 100], dtype=torch.int32))
check("BatchPrefillPlan.run(rope_offsets=): runs", launches() > n0)
e = raises(lambda: rag.run(pq, pk, pk, rope_offset=3,
                           rope_offsets=torch.tensor([0, 1], dtype=torch.int32)), ValueError)
check("BatchPrefillPlan.run: rope_offset and rope_offsets both: ValueError",
      isinstance(e, ValueError) and "rope_offsets" in str(e), repr(e))
e = raises(lambda: rag.run(pq, pk, pk, rope_offsets=torch.tensor([0, 1, 2], dtype=torch.int32)),
           ValueError)
check("BatchPrefillPlan.run: rope_offsets of the wrong length: ValueError",
      isinstance(e, ValueError) and "rope_offsets" in str(e), repr(e))

f8 = torch.empty(64, H, 128, dtype=torch.float8_e4m3fn)
cu = torch.tensor([0, 64], dtype=torch.int32)
e = raises(lambda: fijit.varlen_prefill(f8, f8, f8, cu, cu), NotImplementedError)
check("varlen_prefill of fp8 inputs: NotImplementedError pointing to fijit.prefill",
      isinstance(e, NotImplementedError) and "fijit.prefill" in str(e), repr(e))
e = raises(lambda: fijit.BatchPrefillPlan(torch.empty(0, dtype=torch.uint8)).plan(
    [0, 64], [0, 64], H, H, 128, q_dtype=torch.float8_e4m3fn), fijit.UnsupportedError)
check("BatchPrefillPlan.plan with fp8: the library's UnsupportedError naming what it builds",
      isinstance(e, fijit.UnsupportedError) and "fp8" in str(e), repr(e))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fijit.decode(dq, dk, dv, softcap=20.0)
check("decode(softcap=): still served, with a DeprecationWarning",
      [w.category for w in caught] == [DeprecationWarning], [str(w.message) for w in caught])
e = raises(lambda: fijit.prefill(pq, pk, pk, softcap=1.0, logits_soft_cap=2.0), TypeError)
check("prefill: softcap and logits_soft_cap both: TypeError", isinstance(e, TypeError))

# ---- the transformers backend (on stand-ins of transformers' registries) ------------------------
import types  # noqa: E402
import fijit.integrations.transformers as fhf  # noqa: E402
from transformers import masking_utils as mu  # noqa: E402  (the stand-in)
from transformers.integrations import sdpa_attention as sdpa  # noqa: E402

import logging  # noqa: E402
logging.getLogger("fijit.transformers").setLevel(logging.ERROR)  # fallbacks checked below
fhf.register()
from transformers import AttentionInterface  # noqa: E402
check("register(): the attention and mask functions under 'fijit'",
      AttentionInterface["fijit"] is fhf.fijit_attention_forward
      and mu.AttentionMaskInterface["fijit"] is fhf._mask)
saved = mu.AttentionMaskInterface
del mu.AttentionMaskInterface
e = raises(fhf.register, ImportError)
mu.AttentionMaskInterface = saved
check("register() where masking_utils has no AttentionMaskInterface: ImportError (a padded "
      "batch would otherwise arrive with no mask)",
      isinstance(e, ImportError) and "AttentionMaskInterface" in str(e), repr(e))
m2 = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6, [0, 1, 1, 1, 1, 1]])
mask_kw = dict(batch_size=B, cache_position=torch.arange(L), kv_length=L, kv_offset=0,
               mask_function=mu.causal_mask_function, attention_mask=m2,
               allow_is_causal_skip=True, dtype=F16, config=types.SimpleNamespace())
packed = fhf._mask(**mask_kw)
lay = P.KeyLayout.unpack(packed, B, L)
check("the mask function: the padding's KeyLayout packed as a 4-D int32 tensor (which "
      "transformers carries as a prepared mask), no SDPA mask built",
      P.KeyLayout.is_packed(packed, B, L) and tuple(packed.shape) == (1, 1, 1, 4 + B * L + 1)
      and lay.keys.data_ptr() % 16 == 0
      and not P.KeyLayout.is_packed(packed, B, L + 1) and not mu.sdpa_calls
      and row_lists(lay) == [[(0, j) for j in range(2, 6)], [(1, j) for j in range(6)],
                             [(2, j) for j in range(1, 6)]], row_lists(lay))
lay_s = P.KeyLayout.unpack(fhf._mask(**dict(mask_kw, cache_position=torch.tensor([4]),
                                            kv_length=8,
                                            attention_mask=torch.tensor([[0, 1, 1, 1, 1]] * B))),
                           B, 8)
check("the mask function, a static cache of 8 at its 5th token: keys 1..4 of each row",
      row_lists(lay_s) == [[(b, j) for j in range(1, 5)] for b in range(B)], row_lists(lay_s))
lay_n = P.KeyLayout.unpack(fhf._mask(**dict(mask_kw, attention_mask=None)), B, L)
v5_kw = {k: v for k, v in mask_kw.items() if k != "cache_position"}
lay_5 = P.KeyLayout.unpack(fhf._mask(**dict(v5_kw, q_length=2, q_offset=3, kv_length=5,
                                            attention_mask=None, device="cuda")), B, 5)
check("the mask function with transformers 5's arguments (q_length, q_offset an int, "
      "device): the keys up to the last query",
      row_lists(lay_5) == [[(b, j) for j in range(5)] for b in range(B)], row_lists(lay_5))
lay_5s = P.KeyLayout.unpack(fhf._mask(**dict(v5_kw, q_length=1, q_offset=torch.tensor([3]),
                                             kv_length=8, attention_mask=None,
                                             device="cuda")), B, 8)
check("... a static cache's (q_offset a device tensor): its filled part only",
      row_lists(lay_5s) == [[(b, j) for j in range(4)] for b in range(B)], row_lists(lay_5s))
check("the mask function without a padding mask: every key of every row",
      row_lists(lay_n) == [[(b, j) for j in range(L)] for b in range(B)], row_lists(lay_n))
lay_w = fhf._mask(**dict(mask_kw, mask_function=mu.and_masks(mu.causal_mask_function),
                         local_size=4))
check("the mask function of a sliding-window layer (an and_mask with local_size): a layout",
      P.KeyLayout.is_packed(lay_w, B, L), repr(lay_w))
refused = {
    "chunked attention": dict(local_size=4, config=types.SimpleNamespace(attention_chunk_size=4)),
    "an extra mask function (packed sequences)": dict(
        mask_function=mu.and_masks(mu.causal_mask_function)),
    "a cache offset that is a tensor (a rolling static window)": dict(kv_offset=torch.tensor(2)),
    "no query positions": dict(cache_position=None),
}
for name, kw in refused.items():
    mu.sdpa_calls.clear()
    got = fhf._mask(**dict(mask_kw, **kw))
    check(f"the mask function, {name}: SDPA's mask (the calls then fall back)",
          isinstance(got, mu.SdpaMask) and len(mu.sdpa_calls) == 1
          and mu.sdpa_calls[0]["allow_is_causal_skip"] is False, repr(got))

module = types.SimpleNamespace(training=False, is_causal=True)
fhf.calls.update(fijit=0, sdpa=0)
n0 = launches()
o, w = fhf.fijit_attention_forward(module, q, k, v, packed, scaling=0.125)
first = fhf._last.layout[1]
fhf.fijit_attention_forward(module, q, k, v, packed, scaling=0.125)
check("the attention function: one launch per layer for the batch, out [B, S, H, D], served "
      "by fijit; the packed mask unpacked once for every layer",
      launches() == n0 + 2 and tuple(o.shape) == (B, S, H, D) and w is None
      and fhf.calls == {"fijit": 2, "sdpa": 0} and fhf._last.layout[1] is first,
      (launches() - n0, fhf.calls))
n0 = launches()
fhf.fijit_attention_forward(module, q, k, v, packed, scaling=0.125, sliding_window=3,
                            softcap=50.0,
                            s_aux=torch.zeros(H, dtype=torch.float32))
check("the attention function with a window, a soft-cap and sinks (gpt-oss's s_aux): one "
      "launch of the sink variant's plan",
      launches() == n0 + 1 and any(
          (key.window_left, key.logits_soft_cap, key.sm_scale, key.variant)
          == (2, 50.0, 0.125, P.SINK_VARIANT) for key in P._plans), list(P._plans)[-1])
n0 = launches()
o, _ = fhf.fijit_attention_forward(module, q, k, v, mu.SdpaMask({}), scaling=0.125)
check("the attention function with a 4-D mask: SDPA, with that mask, nothing launched",
      o == "sdpa" and launches() == n0 and fhf.calls["sdpa"] == 1
      and isinstance(sdpa.calls[-1]["attention_mask"], mu.SdpaMask))
e = raises(lambda: fhf.fijit_attention_forward(module, q, torch.empty(B, HKV, L + 1, D, dtype=F16),
                                              torch.empty(B, HKV, L + 1, D, dtype=F16), packed),
           ValueError)
check("the attention function with a packed layout of another cache length: ValueError "
      "saying so (never read as an SDPA mask)",
      isinstance(e, ValueError) and "key layout" in str(e), repr(e))
q32 = torch.empty(B, S, H, D, dtype=torch.float32).transpose(1, 2)
o, _ = fhf.fijit_attention_forward(module, q32, k, v, packed, scaling=0.125)
m = sdpa.calls[-1]["attention_mask"]
check("the attention function on fp32: SDPA with the packed layout's equivalent bool mask "
      "(rebuilt on the device)",
      o == "sdpa" and fhf.calls["sdpa"] == 2 and tuple(m.shape) == (B, 1, S, L)
      and m.tolist()[0][0][0] == [False, False, True, False, False, False]
      and sdpa.calls[-1]["is_causal"] is False, sdpa.calls[-1])
check("each fallback reason warned once", len(fhf._warned) == 2, fhf._warned)

finish("test_padded")
