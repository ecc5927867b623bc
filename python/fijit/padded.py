"""Attention over a padded batch held in dense per-row K/V caches (the layout of
transformers' caches, dynamic and static, and of most eager model code): one launch per
layer, no host synchronisation, no per-row loop.

q is [B, H, S, D] (or its [B, S, H, D] transpose: any view whose token stride is the
same across rows), k and v [B, Hkv, L, D] (any strides, last dimension contiguous). Row
b attends to the keys its `keys` list names, in order: a KeyLayout built on the device
from a [B, L] visibility mask (padding_layout), so no length is read on the host. The
keys are read through a page table of page size 1 over the dense cache (batch prefill's
paged kind): row b's key list may skip the left padding, holes and the unfilled tail of
a static cache, and query i of row b sits at position n_b - S + i of its n_b listed
keys (causal masks align bottom-right, as everywhere in fijit).

The plan depends on shapes only (B, S, heads, head_dim, dtypes, mask), so one plan
serves every layer and every decode step of a generation, and a CUDA graph captured
over runs stays valid while the caches fill: the kernel reads each row's key count
from the device indptr on every run, and the plan's work list depends only on the
query lengths. (fijit_prefill.h asks device arrays equal to the plan's; for the mask
kinds this module plans, none, causal and window without RoPE, the host key counts
only order the work items, which is what lets a plan outlive its lengths.)
"""
import threading
from collections import OrderedDict, namedtuple

import torch

from . import _structs as S
from . import _tensors as T
from ._callspec import soft_cap_arg, spec_for
from ._callspec import sm_scale_arg as _scale
from ._lib import new_struct
from ._ops import register_padded_op
from .context import default_context
from .plans import _c_ints, _Plan

_16BIT = (torch.float16, torch.bfloat16)


class KeyLayout:
    """Which keys each row of a padded batch attends to, on the device: kv_indptr
    int32 [B + 1] (row b's keys are list entries kv_indptr[b] .. kv_indptr[b+1]) and
    keys int32 [B * L + 1] (entry p: b * L + j for key j of row b; entries past the
    last row's are unused). Built once per forward, shared by every layer whose caches
    are [B, *, L, D]. A plain class (torch.compile traces its making in a mask
    function)."""

    def __init__(self, kv_indptr, keys, batch_size, kv_len, visible=None, packed=None):
        self.kv_indptr, self.keys, self.visible = kv_indptr, keys, visible
        self._packed = packed  # the tensor kv_indptr and keys are views of, if one
        self.batch_size, self.kv_len = int(batch_size), int(kv_len)
        self._pages = {}  # row stride in tokens -> page ids for that cache layout

    def pages(self, rows_per_batch):
        """The page ids (page size 1) of the keys in a cache whose row b starts at token
        b * rows_per_batch (HND [B, Hkv, L, D]: Hkv * L; [B, L, Hkv, D]: L). Kept per
        layout object, from the keys as they were at the first call: write new contents
        into a new KeyLayout (under CUDA-graph capture they are computed inside the
        graph, so that a replay reads the keys as they are then)."""
        capturing = torch.cuda.is_current_stream_capturing()
        pages = None if capturing else self._pages.get(rows_per_batch)
        if pages is None:
            if rows_per_batch == self.kv_len:
                pages = self.keys
            else:
                row = torch.div(self.keys, self.kv_len, rounding_mode="floor")
                pages = (row * rows_per_batch + (self.keys - row * self.kv_len)).to(torch.int32)
            if not capturing:
                self._pages[rows_per_batch] = pages
        return pages

    def packed(self):
        """The layout as ONE int32 tensor [1, 1, 1, _header(B) + B * L + 1] (kv_indptr,
        then from a 16-byte boundary the keys): what a model can carry where it carries
        a 4-D attention mask (transformers passes such a mask through untouched,
        compiled forwards and generate's precomputed static-cache masks included).
        unpack() reads it back."""
        flat = self._packed
        if flat is None:
            gap = self.kv_indptr.new_zeros(_header(self.batch_size) - self.batch_size - 1)
            flat = torch.cat([self.kv_indptr, gap, self.keys])
        return flat.view(1, 1, 1, -1)

    @staticmethod
    def is_packed(t, batch_size, kv_len):
        """Whether `t` is the packed() form of a layout of these sizes."""
        return (isinstance(t, torch.Tensor) and t.dtype == torch.int32 and t.dim() == 4
                and tuple(t.shape[:3]) == (1, 1, 1)
                and t.shape[3] == _header(batch_size) + batch_size * kv_len + 1)

    @staticmethod
    def unpack(t, batch_size, kv_len):
        """The KeyLayout of a packed() tensor (views of it, no copy)."""
        flat = t.view(-1)
        return KeyLayout(flat[:batch_size + 1], flat[_header(batch_size):], batch_size, kv_len,
                         packed=flat)

    def visible_mask(self):
        """The bool [B, L] mask of the listed keys (kept, or rebuilt on the device)."""
        if self.visible is None:
            B, L = self.batch_size, self.kv_len
            p = torch.arange(B * L + 1, device=self.keys.device)
            listed = torch.where(p < self.kv_indptr[-1:], self.keys.to(torch.int64), B * L)
            flags = torch.zeros(B * L + 1, dtype=torch.bool, device=self.keys.device)
            self.visible = flags.scatter_(0, listed, True)[:B * L].view(B, L)
        return self.visible


def _header(batch_size):
    """int32 entries before the keys in a packed layout: kv_indptr, padded so that the
    keys (the page ids when the cache's rows are L tokens apart) start 16-byte aligned."""
    return (batch_size + 1 + 3) // 4 * 4


def padding_layout(visible):
    """The KeyLayout of a bool [B, L] mask (True: row b attends to key j), on its
    device, with no host synchronisation."""
    if not isinstance(visible, torch.Tensor) or visible.dim() != 2 or visible.dtype != torch.bool:
        raise ValueError("visible: expected a bool tensor [batch_size, kv_len]")
    B, L = visible.shape
    dev = visible.device
    # One buffer, kv_indptr then keys (packed() is then a view of it), in a dozen small
    # kernels and no in-place write to a view (torch.compile traces this). Key entries
    # past the last row's keep what empty() gave: nothing reads them.
    head = _header(B)
    counts = visible.sum(-1, dtype=torch.int32)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)             # kv_indptr[1:]
    slot = torch.cumsum(visible, -1) + (ends - counts + head - 1).unsqueeze(1)
    slot = torch.where(visible, slot, head + B * L)               # hidden: the spare slot
    flat = torch.cat([counts.new_zeros(1), ends,                  # the gap before the keys,
                      torch.empty(head - B - 1 + B * L + 1,       # like the keys past the
                                  dtype=torch.int32, device=dev)])  # last row's, is not read
    flat.scatter_(0, slot.view(-1), torch.arange(B * L, dtype=torch.int32, device=dev))
    return KeyLayout(flat[:B + 1], flat[head:], B, L, visible, flat)


def sdpa_mask(layout, qo_len, *, causal=True, window_left=-1):
    """The bool [B, 1, S, L] mask (True: attend) that SDPA needs to compute what a run
    over `layout` computes: row b's listed keys, query i at position n_b - S + i of
    them (causal: keys up to it; window: and no more than window_left before it)."""
    visible = layout.visible_mask()
    rank = torch.cumsum(visible, -1) - 1                               # [B, L]
    n = visible.sum(-1, keepdim=True)                                  # [B, 1]
    qpos = n - qo_len + torch.arange(qo_len, device=visible.device)[None, :]  # [B, S]
    allowed = visible[:, None, :].expand(-1, qo_len, -1)
    if causal:
        allowed = allowed & (rank[:, None, :] <= qpos[:, :, None])
        if window_left >= 0:
            allowed = allowed & (rank[:, None, :] >= qpos[:, :, None] - window_left)
    return allowed[:, None]


def visible_keys(attention_mask_2d, kv_len, kv_offset, q_end, batch_size=None, device=None):
    """transformers' padding mask as the visibility mask padding_layout takes: key j of
    the layer's cache (position j + kv_offset) is visible to row b when the 2-D mask
    attends to that position, or when the position follows the row's last attended one
    (right padding in a prompt: the pads after the last token are keys of the pad
    queries only, so keeping them keeps every query at its own position), and it is
    below q_end (the end of this forward's queries: a static cache's unfilled tail is
    not). attention_mask_2d None: no padding in any of batch_size rows. q_end: an int
    or a 1-element tensor. device: where the result goes when neither the mask nor q_end
    is a tensor. Returns bool [B, kv_len]."""
    pos = torch.arange(kv_len, device=_device_of(attention_mask_2d, q_end, device))
    if kv_offset:
        pos = pos + kv_offset
    visible = pos[None, :] < q_end
    if attention_mask_2d is None:
        if batch_size is None:
            raise ValueError("batch_size: required without an attention mask")
        return visible.expand(int(batch_size), -1).contiguous()
    m = attention_mask_2d.to(torch.bool)
    B, n = m.shape
    if not kv_offset and n == kv_len:  # the mask's columns are the cache's keys (no gather)
        last = torch.where(m, pos, -1).amax(-1, keepdim=True)
        return visible & (m | (pos > last))
    idx = torch.arange(n, device=m.device)
    last = torch.where(m, idx, -1).amax(-1, keepdim=True)             # -1: nothing attended
    at = pos.clamp(max=n - 1)[None, :].expand(B, -1)
    attended = torch.gather(m, 1, at) & (pos[None, :] < n)
    return visible & (attended | (pos[None, :] > last))


def _device_of(mask, q_end, device):
    for x in (mask, q_end):
        if isinstance(x, torch.Tensor):
            return x.device
    if device is None:
        raise ValueError("visible_keys: give device= where attention_mask_2d and q_end are "
                         "not tensors")
    return device


class PaddedBatchPlan(_Plan):
    """Plan/run for a padded batch over dense per-row caches (see the module's text).
    plan() on the host once per shape; run() per layer, with a KeyLayout."""
    _prefix = "fi_batch_prefill"

    def __init__(self, workspace=None, *, ctx=None, device=None):
        if workspace is None:
            workspace = torch.empty(0, dtype=torch.uint8, device=device or "cuda")
        super().__init__(workspace, "HND", ctx=ctx)
        self._args = None
        self._checked_sig = self._checked = None  # run(): the inputs last checked in full

    def plan(self, batch_size, qo_len, num_qo_heads, num_kv_heads, head_dim, *,
             head_dim_vo=0, kv_len_hint=None, q_dtype=torch.float16, kv_dtype=None, causal=True,
             window_left=-1, logits_soft_cap=None, sm_scale=None, variant=None,
             grow_workspace=True, softcap=None):
        """batch_size rows of qo_len queries each. kv_len_hint: a typical key count per
        row (None: qo_len), used only to order the work; runs may give any counts.
        window_left >= 0 (causal): keys within window_left positions before the query.
        head_dim_vo: v's and out's head dim where it is not head_dim (MLA: 192/128)."""
        logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "PaddedBatchPlan.plan")
        B, Sq = int(batch_size), int(qo_len)
        if B < 1 or Sq < 1:
            raise ValueError(f"batch_size and qo_len: expected >= 1, got {B} and {Sq}")
        if window_left >= 0 and not causal:
            raise ValueError("window_left: fijit's sliding window is causal; pass causal=True")
        if q_dtype not in _16BIT:
            raise TypeError(f"q_dtype: {q_dtype} not supported (expected torch.float16 or "
                            "torch.bfloat16)")
        kv_dtype = kv_dtype or q_dtype
        hint = max(int(kv_len_hint or Sq), Sq)
        mask = "window" if window_left >= 0 else ("causal" if causal else "none")
        head_dim_vo = 0 if int(head_dim_vo) in (0, int(head_dim)) else int(head_dim_vo)
        spec = spec_for("batch_prefill_paged", q_dtype, kv_dtype, int(head_dim), mask, "none",
                        logits_soft_cap > 0, variant, head_dim_vo=head_dim_vo)
        qo = [b * Sq for b in range(B + 1)]
        kv = [b * hint for b in range(B + 1)]
        self._host = (_c_ints(qo), _c_ints(kv), _c_ints([1] * B))
        pa = new_struct(S.BatchPrefillPlanArgs, self._lib, batch_size=B, qo_indptr=self._host[0],
                        kv_indptr=self._host[1], kv_last_page_len=self._host[2],
                        num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                        page_size=1, window_left=int(window_left))
        self._new_and_upload(spec, pa, grow_workspace)
        dev = self.workspace.device
        self._qo_d = torch.tensor(qo, dtype=torch.int32, device=dev)
        self._last_d = torch.ones(B, dtype=torch.int32, device=dev)
        self.batch_size, self.qo_len = B, Sq
        self.num_qo_heads, self.num_kv_heads, self.head_dim = (int(num_qo_heads),
                                                               int(num_kv_heads), int(head_dim))
        self.head_dim_vo = head_dim_vo or self.head_dim
        self.q_dtype, self.kv_dtype = q_dtype, kv_dtype
        self._checked_sig = self._checked = None
        # The run's struct, made once: a run sets only its pointers and strides.
        self._args = new_struct(S.BatchPrefillArgs, self._lib, sm_scale=_scale(sm_scale),
                                logits_soft_cap=logits_soft_cap,
                                qo_indptr=self._qo_d.data_ptr(),
                                kv_last_page_len=self._last_d.data_ptr())
        return self

    def run(self, q, k, v, layout, *, out=None, lse=None, return_lse=False, stream=None,
            **variant_args):
        """q [B, H, S, D], a view whose rows are S token strides apart (a [B, S, H, D]
        tensor transposed, as transformers' projections give it); k [B, Hkv, L, D], v
        [B, Hkv, L, D or the plan's head_dim_vo], any strides; layout: a KeyLayout of
        these B rows and this L. Returns out [B, S, H, Dv] (q's dtype; out= of that
        shape, rows S token strides apart) and, with return_lse or lse=, lse [B, S, H]
        (float32, natural log). variant_args: the plan's variant's parameters."""
        self._need_plan()
        B, Sq, H, Dv = self.batch_size, self.qo_len, self.num_qo_heads, self.head_dim_vo
        rows, q_rows = self._inputs(q, k, v, layout)
        dev = q.device
        o = T.output("out", out, (B, Sq, H, Dv), q.dtype, dev)
        o_rows = _token_view("out", o.transpose(1, 2)) if out is not None else H * Dv
        if lse is None and return_lse:
            lse = torch.empty((B, Sq, H), dtype=torch.float32, device=dev)
        elif lse is not None:
            T.output("lse", lse, (B, Sq, H), torch.float32, dev)
            if not lse.is_contiguous():
                raise ValueError("lse: must be contiguous")
        pages = layout.pages(rows)
        varr, nvar, keep = T.variant_args(variant_args, dev)
        a = self._args
        a.variant_args, a.num_variant_args = varr, nvar
        a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
        a.lse = lse.data_ptr() if lse is not None else None
        a.kv_indptr, a.kv_indices = layout.kv_indptr.data_ptr(), pages.data_ptr()
        a.q_stride_n, a.q_stride_h = q_rows, q.stride(1)
        a.o_stride_n, a.o_stride_h = o_rows, o.stride(2)
        a.k_stride_page, a.k_stride_n, a.k_stride_h = k.stride(2), k.stride(2), k.stride(1)
        a.v_stride_page, a.v_stride_n, a.v_stride_h = v.stride(2), v.stride(2), v.stride(1)
        return self._launch(a, q, o, lse, return_lse, stream, keep)

    def _inputs(self, q, k, v, layout):
        """(rows per batch of the caches, q's token stride) of checked inputs. Every layer
        of a model hands over tensors of one shape and strides: after one full check,
        calls with the same shapes, strides, dtypes and devices check alignment only
        (the host time of a call, per layer, is what a decode step is made of)."""
        sig = (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
               v.shape, v.stride(), v.dtype, v.device, type(layout),
               getattr(layout, "batch_size", None), getattr(layout, "kv_len", None))
        if sig == self._checked_sig and not (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:
            return self._checked
        B, Sq, H, D = self.batch_size, self.qo_len, self.num_qo_heads, self.head_dim
        Hkv, Dv = self.num_kv_heads, self.head_dim_vo
        T.tensor("q", q, 4, dtypes=(self.q_dtype,))
        dev = q.device
        T.tensor("k", k, 4, dtypes=(self.kv_dtype,), device=dev)
        T.tensor("v", v, 4, dtypes=(self.kv_dtype,), device=dev)
        if tuple(q.shape) != (B, H, Sq, D):
            raise ValueError(f"q: expected shape {(B, H, Sq, D)} (the plan's [B, H, S, D]), got "
                             f"{tuple(q.shape)}")
        if not isinstance(layout, KeyLayout):
            raise TypeError(f"layout: expected a fijit.padded.KeyLayout, got "
                            f"{type(layout).__name__}")
        L = layout.kv_len
        if tuple(k.shape) != (B, Hkv, L, D) or tuple(v.shape) != (B, Hkv, L, Dv) \
                or layout.batch_size != B:
            raise ValueError(f"k, v: expected shapes {(B, Hkv, L, D)} and {(B, Hkv, L, Dv)} "
                             f"(batch and keys of the layout, heads of the plan), got "
                             f"{tuple(k.shape)} and {tuple(v.shape)}")
        rows = _rows_per_batch(k, "k")
        if _rows_per_batch(v, "v") != rows:
            raise ValueError("k, v: batch strides differ in token strides (two caches of one "
                             "layout expected)")
        self._checked = rows, _token_view("q", q)
        self._checked_sig = sig
        return self._checked


def _rows_per_batch(t, name):
    """Token rows between a cache's batch rows (its batch stride in token strides)."""
    if t.stride(2) <= 0 or t.stride(0) % t.stride(2):
        raise ValueError(f"{name}: its batch stride ({t.stride(0)}) must be a multiple of its "
                         f"token stride ({t.stride(2)}): a dense [B, Hkv, L, D] cache or a view "
                         "of one")
    return t.stride(0) // t.stride(2)


def _token_view(name, t):
    """The token stride of a [B, H, S, D] view read as B * S tokens of H heads: the batch
    stride must be S token strides (q from [B, S, H, D] transposed; not a contiguous
    [B, H, S, D], which the caller copies)."""
    B, _, Sq, _ = t.shape
    if Sq > 1 and B > 1 and t.stride(0) != Sq * t.stride(2):
        raise ValueError(f"{name}: rows must be S token strides apart (a [B, S, H, D] tensor "
                         f"seen as [B, H, S, D]); strides are {tuple(t.stride())}: pass "
                         f"{name}.transpose(1, 2).contiguous().transpose(1, 2)")
    return t.stride(2) if Sq > 1 else t.stride(0)


# ---- one-shot calls: a plan per shape, kept -------------------------------------------
_PLANS_KEPT = 32  # least recently used dropped beyond this
_plans = OrderedDict()
_plans_lock = threading.Lock()
PlanKey = namedtuple("PlanKey", "ctx device batch_size qo_len num_qo_heads num_kv_heads head_dim "
                     "head_dim_vo q_dtype kv_dtype causal window_left logits_soft_cap sm_scale "
                     "variant thread")


# Learned per-head sink logits in the softmax denominator (gpt-oss): o / (1 + e^(sink - lse)),
# the output transform of examples/variants/attention_sink.cuh, registered by padded_attention
# in each context it runs in.
SINK_VARIANT = "fijit_sink"
SINK_SOURCE = """//! param const float* sink_logits
struct Variant : fijit::DefaultVariant {
    template <class P>
    static __device__ __forceinline__ float output_transform(const P &p, float o, int qo_head,
                                                             int dim, float lse)
    {
        o = fijit::DefaultVariant::output_transform(p, o, qo_head, dim, lse);
        const float z = fijit::variant_params(p).sink_logits[qo_head] - lse;
        return z < 88.0f ? o / (1.0f + expf(z)) : 0.0f;  // no visible key: all mass on the sink
    }
};
"""
_sink_contexts = set()


def _sink_variant(ctx):
    if id(ctx) not in _sink_contexts:
        if SINK_VARIANT not in ctx._variants:
            ctx.register_variant(SINK_VARIANT, SINK_SOURCE)
        _sink_contexts.add(id(ctx))
    return SINK_VARIANT


def plan_for(q, k, v, *, causal, window_left, logits_soft_cap, sm_scale, variant=None,
             ctx=None):
    """The kept PaddedBatchPlan of this call's shapes, dtypes and mask (made on the
    first call of a shape: outside any CUDA-graph capture; then reused by every layer
    and step), one per thread: a plan's run struct serves one call at a time. Not one
    per stream: CUDA-graph capture runs on a stream of its own, where a plan must already
    exist; runs of these plans only read their workspace (the work list; page size 1
    takes the tile kernels, which claim no blocks), so streams may share one."""
    ctx = ctx or default_context()
    B, H, Sq, D = q.shape
    key = PlanKey(id(ctx), q.device, B, Sq, H, k.shape[1], D, v.shape[-1], q.dtype, k.dtype,
                  bool(causal), int(window_left), float(logits_soft_cap), sm_scale, variant,
                  threading.get_ident())
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    plan = PaddedBatchPlan(device=q.device, ctx=ctx).plan(
        B, Sq, H, k.shape[1], D, head_dim_vo=v.shape[-1], kv_len_hint=k.shape[2],
        q_dtype=q.dtype, kv_dtype=k.dtype, causal=causal, window_left=window_left,
        logits_soft_cap=logits_soft_cap, sm_scale=sm_scale, variant=variant)
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > _PLANS_KEPT:
            _plans.popitem(last=False)  # freed when no caller holds it any more
    return plan


def padded_attention(q, k, v, layout, *, causal=True, window_left=-1, logits_soft_cap=None,
                     sm_scale=None, sinks=None, out=None, ctx=None, softcap=None):
    """One launch over a padded batch (see the module's text): q [B, H, S, D], k, v
    [B, Hkv, L, D] (v: or MLA's narrower head dim), layout a KeyLayout of B rows and L
    keys. Returns out [B, S, H, Dv]. sinks: None, or a learned sink logit per query head
    ([H], any float dtype; gpt-oss's s_aux) that joins each softmax denominator (through
    the variant SINK_VARIANT). A q whose rows are not S token strides apart (a
    contiguous [B, H, S, D]) is copied once. Plans are kept per shape; inside
    torch.compile the call is the custom op fijit::padded_attention."""
    logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "fijit.padded_attention")
    B, H, Sq, D = q.shape
    if Sq > 1 and B > 1 and q.stride(0) != Sq * q.stride(2):
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or tuple(sinks.shape) != (H,) \
                or not sinks.is_floating_point():
            raise ValueError(f"sinks: expected a float tensor of shape ({H},) (one per query "
                             "head)")
        sinks = sinks.detach().to(torch.float32).contiguous()
    if torch.compiler.is_compiling():
        if ctx is not None:
            raise NotImplementedError("ctx= is not available inside torch.compile")
        o = torch.ops.fijit.padded_attention(q, k, v, layout.kv_indptr, layout.keys,
                                             layout.kv_len, bool(causal), int(window_left),
                                             logits_soft_cap, _scale(sm_scale), sinks)
        if out is not None:
            out.copy_(o)
            o = out
        return o
    return _run(q, k, v, layout, causal, window_left, logits_soft_cap, _scale(sm_scale), sinks,
                ctx, out)


def _run(q, k, v, layout, causal, window_left, logits_soft_cap, sm_scale, sinks, ctx=None,
         out=None):
    ctx = ctx or default_context()
    variant = _sink_variant(ctx) if sinks is not None else None
    plan = plan_for(q, k, v, causal=causal, window_left=window_left,
                    logits_soft_cap=logits_soft_cap, sm_scale=sm_scale, variant=variant,
                    ctx=ctx)
    extra = {"sink_logits": sinks} if sinks is not None else {}
    return plan.run(q, k, v, layout, out=out, **extra)


def _padded_op_eager(q, k, v, kv_indptr, keys, kv_len, causal, window_left, logits_soft_cap,
                     sm_scale, sinks):
    layout = KeyLayout(kv_indptr, keys, q.shape[0], kv_len)
    return _run(q, k, v, layout, causal, window_left, logits_soft_cap, sm_scale, sinks)


register_padded_op(_padded_op_eager)
