"""Plan/run objects for the batch kinds, as serving engines use them: plan() once per
batch layout on the host (lengths, head counts, page size, mask and position
encoding), run() per layer with the tensors. The workspace is a uint8 CUDA tensor the
caller owns and keeps alive; plan() writes the work list into it. run() only queues
kernels (no host synchronisation, no allocation when out= and lse= are given), so it
can be captured in a CUDA graph. Re-planning rewrites the workspace: capture again.
One plan and workspace must not serve runs that may execute at the same time (give
each stream its own)."""
import ctypes

import torch

from . import _structs as S
from . import _tensors as T
from ._callspec import prefill_mask, soft_cap_arg, spec_for
from ._callspec import sm_scale_arg as _scale
from ._lib import new_struct
from .context import default_context
from .errors import check

_POS = ("none", "rope", "alibi")


def _host_ints(name, x):
    """Host copy of an index array: a list/tuple of ints or a tensor (a CUDA tensor costs
    a synchronisation)."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {tuple(x.shape)}")
        return [int(i) for i in x.tolist()]
    try:
        return [int(i) for i in x]
    except TypeError:
        raise TypeError(f"{name}: expected a list of ints or a 1-D tensor, got {type(x).__name__}")


def _c_ints(values):
    return (ctypes.c_int32 * max(len(values), 1))(*values)


def _device_ints(name, host, given, device):
    """A device int32 copy of `host`, or `given` (a CUDA int32 tensor with those values)."""
    if given is not None:
        if given.device != device or given.numel() != len(host):
            raise ValueError(f"{name}: expected {len(host)} entries on {device}")
        return given.to(torch.int32).contiguous()
    return torch.tensor(host, dtype=torch.int32, device=device)


def _given(**fields):
    """The fields given (not None); the others keep the library's defaults."""
    return {k: v for k, v in fields.items() if v is not None}


def _outputs(out, lse, return_lse, shape, dtype, device):
    """out (checked, or new) and lse (checked, new with return_lse, or None)."""
    o = T.output("out", out, shape, dtype, device)
    if lse is None and return_lse:
        lse = torch.empty(shape[:2], dtype=torch.float32, device=device)
    elif lse is not None:
        T.output("lse", lse, shape[:2], torch.float32, device)
    return o, lse


class _Plan:
    """What both batch kinds share: the workspace, the C plan handle and its free."""
    _prefix = None  # "fi_batch_decode" or "fi_batch_prefill"

    def __init__(self, workspace, kv_layout="NHD", *, ctx=None):
        if not isinstance(workspace, torch.Tensor) or workspace.dtype != torch.uint8 \
                or workspace.device.type != "cuda" or workspace.dim() != 1:
            raise ValueError("workspace: expected a 1-D uint8 CUDA tensor (e.g. torch.empty("
                             "128 << 20, dtype=torch.uint8, device='cuda'))")
        if kv_layout not in ("NHD", "HND"):
            raise ValueError(f"kv_layout: {kv_layout!r} is not 'NHD' or 'HND'")
        self.workspace = workspace
        self.kv_layout = kv_layout
        self.ctx = ctx or default_context()
        self._handle = ctypes.c_void_p()
        self._lib = self.ctx._lib
        self.spec = None

    def close(self):
        """Free the C plan (the workspace stays the caller's)."""
        if self._handle:
            getattr(self._lib, self._prefix + "_plan_free")(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _new_and_upload(self, spec, plan_args, grow_workspace):
        """<kind>_plan_new, _plan_workspace_size, _plan_upload into self.workspace."""
        self.close()
        L = self._lib
        handle = ctypes.c_void_p()
        with T.device_of(self.workspace):
            check(getattr(L, self._prefix + "_plan_new")(ctypes.byref(handle), self.ctx.handle,
                                                         ctypes.byref(spec.to_c()),
                                                         ctypes.byref(plan_args)),
                  self._prefix + "_plan_new", L)
            try:
                n = ctypes.c_size_t()
                check(getattr(L, self._prefix + "_plan_workspace_size")(ctypes.byref(n), handle),
                      self._prefix + "_plan_workspace_size", L)
                if self.workspace.numel() < n.value:
                    if not grow_workspace:
                        raise ValueError(f"workspace: this plan needs {n.value} bytes, the "
                                         f"workspace has {self.workspace.numel()}")
                    self.workspace = torch.empty(n.value, dtype=torch.uint8,
                                                 device=self.workspace.device)
                check(getattr(L, self._prefix + "_plan_upload")(
                    handle, self.workspace.data_ptr() or None, n.value),
                    self._prefix + "_plan_upload", L)
            except BaseException:
                getattr(L, self._prefix + "_plan_free")(handle)
                raise
        self._handle = handle
        self.spec = spec
        self.workspace_bytes = n.value

    def _need_plan(self):
        if not self._handle:
            raise RuntimeError(f"{type(self).__name__}.run: call plan() first")

    def _launch(self, args, q, o, lse, return_lse, stream, keep):
        """<prefix>_run of `args` on `stream` (None: q's device's current stream), with
        `keep` (what args points at: the variant arguments) alive until it is queued;
        the run's result: o, or (o, lse) when lse was asked for."""
        name = self._prefix + "_run"
        with T.device_of(q):
            check(getattr(self._lib, name)(self.ctx.handle, self._handle, ctypes.byref(args),
                                           T.stream_handle(stream, q.device)), name, self._lib)
        return (o, lse) if (return_lse or lse is not None) else o

    def _describe(self):
        """The two counts <prefix>_plan_describe gives (the kinds that have one)."""
        self._need_plan()
        a, b = ctypes.c_int(), ctypes.c_int()
        name = f"{self._prefix}_plan_describe"
        check(getattr(self._lib, name)(ctypes.byref(a), ctypes.byref(b), self._handle), name,
              self._lib)
        return a.value, b.value


class BatchDecodePlan(_Plan):
    """Batch decode over a paged KV cache: one query token per request.

    Not FlashInfer's argument order: BatchDecodeWithPagedKVCacheWrapper.plan takes
    (indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
    ...); this plan takes no page indices (they are device data, given to run(), so
    pages can move without a new plan), and page_size and the rest by keyword.
    FlashInfer's pos_encoding_mode is pos_encoding=."""
    _prefix = "fi_batch_decode"

    def plan(self, kv_indptr, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, *,
             page_size=None, q_dtype=torch.float16, kv_dtype=None, window_left=-1,
             logits_soft_cap=None,
             sm_scale=None, pos_encoding="none", rope_theta=1e4, rope_scale=1.0, variant=None,
             max_splits=0, grow_workspace=False, softcap=None):
        """kv_indptr [B+1] (offsets into kv_indices: each request's pages) and
        kv_last_page_len [B] (1..page_size), host lists or tensors; page_size None: the
        library's default (FI_BATCH_DECODE_PLAN_ARGS_INIT). pos_encoding "none",
        "rope" (rope_theta, rope_scale here; per-request offsets at run) or "alibi"
        (slopes at run). logits_soft_cap > 0 caps the logits
        (softcap=: its deprecated alias)."""
        logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "BatchDecodePlan.plan")
        if pos_encoding not in _POS:
            raise ValueError(f"pos_encoding: {pos_encoding!r} is not one of {', '.join(_POS)}")
        indptr = _host_ints("kv_indptr", kv_indptr)
        last = _host_ints("kv_last_page_len", kv_last_page_len)
        if len(indptr) != len(last) + 1:
            raise ValueError(f"kv_indptr: {len(indptr)} entries, kv_last_page_len {len(last)}; "
                             "want batch_size + 1 and batch_size")
        kv_dtype = kv_dtype or q_dtype
        spec = spec_for("batch_decode", q_dtype, kv_dtype, int(head_dim),
                        "window" if window_left >= 0 else "none", pos_encoding,
                        logits_soft_cap > 0, variant)
        self._host = (_c_ints(indptr), _c_ints(last))  # the plan reads them in plan_new
        pa = new_struct(S.BatchDecodePlanArgs, self._lib, batch_size=len(last),
                        kv_indptr=self._host[0], kv_last_page_len=self._host[1],
                        num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads,
                        window_left=window_left, max_splits=max_splits,
                        **_given(page_size=page_size))
        self._new_and_upload(spec, pa, grow_workspace)
        self.batch_size, self.num_qo_heads, self.num_kv_heads = len(last), num_qo_heads, num_kv_heads
        self.head_dim, self.page_size, self.num_pages = int(head_dim), pa.page_size, indptr[-1]
        self.q_dtype, self.kv_dtype = q_dtype, kv_dtype
        self._scalars = dict(sm_scale=_scale(sm_scale), logits_soft_cap=logits_soft_cap,
                             rope_theta=float(rope_theta), rope_scale=float(rope_scale))
        return self

    def describe(self):
        """(work items, the most chunks one request was split into)."""
        return self._describe()

    def run(self, q, k_cache, v_cache, kv_indices, *, alibi_slopes=None, rope_offsets=None,
            k_scale=1.0, v_scale=1.0, out=None, lse=None, return_lse=False, stream=None,
            **variant_args):
        """q [B, H, D]; k_cache, v_cache paged: NHD [pages, page_size, Hkv, D] or HND
        [pages, Hkv, page_size, D]; kv_indices int32 CUDA [kv_indptr[-1]] page ids;
        rope_offsets None or int32 [B] (position of each request's key 0). Returns out
        [B, H, D] (and lse [B, H], natural log, with return_lse or lse=)."""
        self._need_plan()
        dev = q.device
        T.tensor("q", q, 3, dtypes=(self.q_dtype,))
        T.tensor("k_cache", k_cache, 4, dtypes=(self.kv_dtype,), device=dev)
        T.tensor("v_cache", v_cache, 4, dtypes=(self.kv_dtype,), device=dev)
        B, H, D = self.batch_size, self.num_qo_heads, self.head_dim
        if tuple(q.shape) != (B, H, D):
            raise ValueError(f"q: expected shape {(B, H, D)} (the plan's), got {tuple(q.shape)}")
        kp = T.page_strides(k_cache, self.kv_layout)
        vp = T.page_strides(v_cache, self.kv_layout)
        if kp[1:3] != (self.page_size, self.num_kv_heads) or k_cache.shape != v_cache.shape:
            raise ValueError(f"k_cache: expected page_size {self.page_size} and "
                             f"{self.num_kv_heads} kv heads in {self.kv_layout} layout, got "
                             f"shape {tuple(k_cache.shape)} (v_cache {tuple(v_cache.shape)})")
        if not isinstance(kv_indices, torch.Tensor) or kv_indices.dtype != torch.int32 \
                or kv_indices.device != dev or kv_indices.numel() < self.num_pages:
            raise ValueError(f"kv_indices: expected an int32 tensor on {dev} with at least "
                             f"{self.num_pages} page ids")
        o, lse = _outputs(out, lse, return_lse, (B, H, D), q.dtype, dev)
        varr, nvar, keep = T.variant_args(variant_args, dev)
        a = new_struct(S.BatchDecodeArgs, self._lib, q=q.data_ptr(),
                       k=k_cache.data_ptr(), v=v_cache.data_ptr(), o=o.data_ptr(),
                       lse=lse.data_ptr() if lse is not None else None,
                       kv_indices=kv_indices.data_ptr(), q_stride_b=q.stride(0),
                       q_stride_h=q.stride(1), o_stride_b=o.stride(0),
                       o_stride_h=o.stride(1), k_stride_page=kp[3], k_stride_n=kp[4],
                       k_stride_h=kp[5], v_stride_page=vp[3], v_stride_n=vp[4],
                       v_stride_h=vp[5],
                       rope_offsets=T.optional("rope_offsets", rope_offsets, (B,),
                                               torch.int32, dev),
                       alibi_slopes=T.optional("alibi_slopes", alibi_slopes, (H,),
                                               torch.float32, dev),
                       k_scale=float(k_scale), v_scale=float(v_scale),
                       workspace=self.workspace.data_ptr(),
                       workspace_bytes=self.workspace_bytes, variant_args=varr,
                       num_variant_args=nvar, **self._scalars)
        return self._launch(a, q, o, lse, return_lse, stream, keep)


def _kv_shapes_ok(k, v, head_dim, head_dim_vo):
    """k of the plan's head_dim, v the same shape but for its head_dim_vo."""
    return k.shape[-1] == head_dim and v.shape == k.shape[:-1] + (head_dim_vo,)


class BatchPrefillPlan(_Plan):
    """Batch prefill: ragged K/V (packed tokens, paged=False) or a paged K/V cache.

    plan() begins as FlashInfer's ragged wrapper's does (qo_indptr, kv_indptr,
    num_qo_heads, num_kv_heads, head_dim, then keywords). Not the paged wrapper's order,
    (qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, ...): page
    indices go to run(), kv_last_page_len is a keyword. FlashInfer's pos_encoding_mode is
    pos_encoding=."""

    _prefix = "fi_batch_prefill"

    def __init__(self, workspace, kv_layout="NHD", *, paged=False, ctx=None):
        super().__init__(workspace, kv_layout, ctx=ctx)
        self.paged = bool(paged)

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim, *,
             head_dim_vo=0, kv_last_page_len=None, page_size=None, q_dtype=torch.float16,
             kv_dtype=None,
             causal=False, window_left=-1, logits_soft_cap=None, sm_scale=None,
             pos_encoding="none",
             rope_theta=1e4, rope_scale=1.0, variant=None, cta_tile_q=0, grow_workspace=False,
             qo_indptr_device=None, kv_indptr_device=None, kv_last_page_len_device=None,
             softcap=None):
        """qo_indptr [B+1] query token offsets; kv_indptr [B+1]: ragged, key token
        offsets; paged, offsets into kv_indices (page counts), with kv_last_page_len [B].
        Host lists or tensors; the plan keeps device copies (or the *_device tensors given,
        which must hold the same values). page_size (paged) None: the library's default
        (FI_BATCH_PREFILL_PLAN_ARGS_INIT). head_dim_vo: v's and out's head dim where it is
        not head_dim (MLA's prefill: head_dim 192, head_dim_vo 128); 0: head_dim."""
        logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "BatchPrefillPlan.plan")
        if pos_encoding not in _POS:
            raise ValueError(f"pos_encoding: {pos_encoding!r} is not one of {', '.join(_POS)}")
        qo = _host_ints("qo_indptr", qo_indptr)
        kv = _host_ints("kv_indptr", kv_indptr)
        if len(qo) != len(kv) or len(qo) < 2:
            raise ValueError(f"qo_indptr and kv_indptr: {len(qo)} and {len(kv)} entries; both "
                             "must be batch_size + 1 (>= 2)")
        B = len(qo) - 1
        if self.paged:
            if kv_last_page_len is None:
                raise ValueError("kv_last_page_len: required for a paged plan")
            last = _host_ints("kv_last_page_len", kv_last_page_len)
            if len(last) != B:
                raise ValueError(f"kv_last_page_len: {len(last)} entries, want {B}")
        else:
            last = [0] * B
        kv_dtype = kv_dtype or q_dtype
        kind = "batch_prefill_paged" if self.paged else "batch_prefill_ragged"
        head_dim_vo = 0 if int(head_dim_vo) == int(head_dim) else int(head_dim_vo)
        spec = spec_for(kind, q_dtype, kv_dtype, int(head_dim),
                        prefill_mask(causal, window_left, None), pos_encoding,
                        logits_soft_cap > 0, variant, head_dim_vo=head_dim_vo)
        self._host = (_c_ints(qo), _c_ints(kv), _c_ints(last))
        pa = new_struct(S.BatchPrefillPlanArgs, self._lib, batch_size=B,
                        qo_indptr=self._host[0], kv_indptr=self._host[1],
                        kv_last_page_len=self._host[2], num_qo_heads=num_qo_heads,
                        num_kv_heads=num_kv_heads, window_left=window_left,
                        cta_tile_q=cta_tile_q, **_given(page_size=page_size))
        self._new_and_upload(spec, pa, grow_workspace)
        dev = self.workspace.device
        self._qo_d = _device_ints("qo_indptr_device", qo, qo_indptr_device, dev)
        self._kv_d = _device_ints("kv_indptr_device", kv, kv_indptr_device, dev)
        self._last_d = (_device_ints("kv_last_page_len_device", last, kv_last_page_len_device,
                                     dev) if self.paged else None)
        self.batch_size, self.num_qo_heads, self.num_kv_heads = B, num_qo_heads, num_kv_heads
        self.head_dim, self.page_size = int(head_dim), pa.page_size
        self.head_dim_vo = head_dim_vo or int(head_dim)
        self.total_q, self.total_kv = qo[-1], kv[-1]
        self.q_dtype, self.kv_dtype = q_dtype, kv_dtype
        self._scalars = dict(sm_scale=_scale(sm_scale), logits_soft_cap=logits_soft_cap,
                             rope_theta=float(rope_theta), rope_scale=float(rope_scale))
        return self

    def run(self, q, k, v, *, kv_indices=None, alibi_slopes=None, rope_offset=0,
            rope_offsets=None, out=None, lse=None, return_lse=False, stream=None,
            **variant_args):
        """q [total_q, H, D]. Ragged: k, v [total_kv, Hkv, D] (NHD) or [Hkv, total_kv, D]
        (HND), any strides. Paged: k, v caches NHD [pages, page_size, Hkv, D] or HND
        [pages, Hkv, page_size, D] and kv_indices int32 [kv_indptr[-1]]. rope_offset: the
        position of key 0 of every request; rope_offsets: int32 [B] on q's device, each
        request's own (then rope_offset must stay 0). Returns out [total_q, H, D] (and lse
        [total_q, H], natural log, with return_lse or lse=). With the plan's head_dim_vo,
        v's last dimension and out's are head_dim_vo (MLA: 128 with q and k of 192)."""
        self._need_plan()
        dev = q.device
        H, D, Dvo = self.num_qo_heads, self.head_dim, self.head_dim_vo
        T.tensor("q", q, 3, dtypes=(self.q_dtype,))
        ndim = 4 if self.paged else 3
        T.tensor("k", k, ndim, dtypes=(self.kv_dtype,), device=dev)
        T.tensor("v", v, ndim, dtypes=(self.kv_dtype,), device=dev)
        if tuple(q.shape) != (self.total_q, H, D):
            raise ValueError(f"q: expected shape {(self.total_q, H, D)} (the plan's), got "
                             f"{tuple(q.shape)}")
        if self.paged:
            kp, vp = T.page_strides(k, self.kv_layout), T.page_strides(v, self.kv_layout)
            if kp[1:3] != (self.page_size, self.num_kv_heads) or \
                    not _kv_shapes_ok(k, v, D, Dvo):
                raise ValueError(f"k, v: expected page_size {self.page_size}, "
                                 f"{self.num_kv_heads} kv heads ({self.kv_layout}) and head_dim "
                                 f"{D} (v: {Dvo}), got shapes {tuple(k.shape)} and "
                                 f"{tuple(v.shape)}")
            if not isinstance(kv_indices, torch.Tensor) or kv_indices.dtype != torch.int32 \
                    or kv_indices.device != dev or kv_indices.numel() < self.total_kv:
                raise ValueError(f"kv_indices: expected an int32 tensor on {dev} with at least "
                                 f"{self.total_kv} page ids")
            strides = dict(k_stride_page=kp[3], k_stride_n=kp[4], k_stride_h=kp[5],
                           v_stride_page=vp[3], v_stride_n=vp[4], v_stride_h=vp[5])
        else:
            kl, kh, ksn, ksh = T.kv_strides("k", k, self.kv_layout)
            vl, vh, vsn, vsh = T.kv_strides("v", v, self.kv_layout)
            if (kl, kh) != (self.total_kv, self.num_kv_heads) or not _kv_shapes_ok(k, v, D, Dvo):
                raise ValueError(f"k, v: expected {self.total_kv} tokens, {self.num_kv_heads} "
                                 f"kv heads ({self.kv_layout}) and head_dim {D} (v: {Dvo}), got "
                                 f"shapes {tuple(k.shape)} and {tuple(v.shape)}")
            strides = dict(k_stride_n=ksn, k_stride_h=ksh, v_stride_n=vsn, v_stride_h=vsh)
        if rope_offsets is not None and int(rope_offset):
            raise ValueError("rope_offset and rope_offsets: give one (rope_offsets: per request)")
        offsets = T.optional("rope_offsets", rope_offsets, (self.batch_size,), torch.int32, dev)
        o, lse = _outputs(out, lse, return_lse, (self.total_q, H, Dvo), q.dtype, dev)
        varr, nvar, keep = T.variant_args(variant_args, dev)
        a = new_struct(S.BatchPrefillArgs, self._lib, q=q.data_ptr(),
                       k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                       lse=lse.data_ptr() if lse is not None else None,
                       qo_indptr=self._qo_d.data_ptr(), kv_indptr=self._kv_d.data_ptr(),
                       kv_indices=kv_indices.data_ptr() if self.paged else None,
                       kv_last_page_len=(self._last_d.data_ptr() if self.paged
                                         else None),
                       q_stride_n=q.stride(0), q_stride_h=q.stride(1),
                       o_stride_n=o.stride(0), o_stride_h=o.stride(1),
                       rope_offset=int(rope_offset), rope_offsets=offsets,
                       alibi_slopes=T.optional("alibi_slopes", alibi_slopes, (H,),
                                               torch.float32, dev),
                       variant_args=varr, num_variant_args=nvar, **strides,
                       **self._scalars)
        return self._launch(a, q, o, lse, return_lse, stream, keep)
