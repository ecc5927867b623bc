"""Absorbed MLA decode (DeepSeek-V3/R1, Kimi K2) over a paged latent cache
(include/fijit_mla.h): BatchMLADecodePlan (plan once per batch layout, run per layer,
as BatchDecodePlan) and fijit.mla_decode for one call.

Shapes (tokens = all requests' query tokens, packed):
  q_nope [tokens, heads, 512]  the query's no-RoPE part already multiplied by W_UK
  q_pe   [tokens, heads, 64]   its RoPE part (RoPE applied by the engine)
  ckv    [pages, page_size, 512] and kpe [pages, page_size, 64]: the paged cache;
         or one [pages, page_size, 576] tensor given as ckv (kpe then None: its last 64)
  out    [tokens, heads, 512] in the latent space (apply W_UV after), lse [tokens, heads]
q_nope and q_pe may be views of one [tokens, heads, 576] tensor (q_pe=None: its last 64).
Request b's query tokens are qo_indptr[b]..qo_indptr[b+1] (1 to 8 each), causal among
themselves and aligned bottom-right against its kv_len keys (the cache holds them)."""

import torch

from . import _structs as S
from . import _tensors as T
from ._callspec import soft_cap_arg, spec_for
from ._lib import new_struct
from .plans import _Plan, _c_ints, _host_ints, _outputs

LATENT, ROPE = 512, 64


def _split_576(name, t, rope):
    """(nope, pe) from one 576-wide tensor `t` when `rope` is None, else (t, rope)."""
    if rope is not None:
        return t, rope
    if t.shape[-1] != LATENT + ROPE:
        raise ValueError(f"{name}: without its RoPE part given apart, expected the last dimension "
                         f"{LATENT + ROPE} ({LATENT} latent + {ROPE} RoPE), got {t.shape[-1]}")
    return t[..., :LATENT], t[..., LATENT:]


class BatchMLADecodePlan(_Plan):
    """Absorbed MLA decode over a paged latent cache, 1-8 query tokens per request."""
    _prefix = "fi_batch_mla_decode"

    def __init__(self, workspace, *, ctx=None):
        super().__init__(workspace, "NHD", ctx=ctx)

    def plan(self, qo_indptr, kv_indptr, kv_last_page_len, num_heads, *, page_size=64,
             q_dtype=torch.bfloat16, kv_dtype=None, sm_scale, logits_soft_cap=None,
             variant=None, max_splits=0, grow_workspace=False, softcap=None):
        """qo_indptr [B+1] (query token offsets, steps of 1..8), kv_indptr [B+1] (offsets
        into kv_indices: each request's pages) and kv_last_page_len [B] (1..page_size),
        host lists or tensors. kv_dtype: q's, or torch.float8_e4m3fn (a per-tensor
        kv_scale at run). sm_scale is required (DeepSeek-V3: 1/sqrt(192) times its YaRN
        factor). logits_soft_cap > 0 caps the logits (softcap=: its deprecated alias).
        Gets the kernel now: run() never compiles."""
        logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "BatchMLADecodePlan.plan")
        qo = _host_ints("qo_indptr", qo_indptr)
        indptr = _host_ints("kv_indptr", kv_indptr)
        last = _host_ints("kv_last_page_len", kv_last_page_len)
        if not (len(qo) == len(indptr) == len(last) + 1):
            raise ValueError(f"qo_indptr ({len(qo)}), kv_indptr ({len(indptr)}) and "
                             f"kv_last_page_len ({len(last)}): want batch_size + 1, batch_size + 1 "
                             "and batch_size entries")
        if sm_scale is None or not float(sm_scale) > 0:
            raise ValueError("sm_scale: give the model's softmax scale (> 0)")
        kv_dtype = kv_dtype or q_dtype
        spec = spec_for("mla_decode", q_dtype, kv_dtype, LATENT, "none", "none",
                        logits_soft_cap > 0, variant)
        self._host = (_c_ints(qo), _c_ints(indptr), _c_ints(last))  # read by plan_new
        pa = new_struct(S.BatchMLADecodePlanArgs, self._lib, batch_size=len(last),
                        qo_indptr=self._host[0], kv_indptr=self._host[1],
                        kv_last_page_len=self._host[2], num_heads=num_heads,
                        page_size=page_size, max_splits=max_splits)
        self._new_and_upload(spec, pa, grow_workspace)
        self.batch_size, self.num_heads, self.num_tokens = len(last), num_heads, qo[-1]
        self.page_size, self.num_pages = page_size, indptr[-1]
        self.q_dtype, self.kv_dtype = q_dtype, kv_dtype
        self._scalars = dict(sm_scale=float(sm_scale), logits_soft_cap=logits_soft_cap)
        return self

    def describe(self):
        """(work items, the most items one (request, 64-row block) was cut into)."""
        return self._describe()

    def run(self, q_nope, q_pe, ckv, kpe, kv_indices, *, kv_scale=1.0, out=None, lse=None,
            return_lse=False, stream=None, **variant_args):
        """q_nope [T, H, 512] (or [T, H, 576] with q_pe None), ckv [pages, page_size, 512]
        (or [pages, page_size, 576] with kpe None), kv_indices int32 CUDA page ids.
        Returns out [T, H, 512] (and lse [T, H], natural log, with return_lse or lse=)."""
        self._need_plan()
        T.tensor("q_nope", q_nope, 3, dtypes=(self.q_dtype,))
        dev = q_nope.device
        T.tensor("ckv", ckv, 3, dtypes=(self.kv_dtype,), device=dev)
        q_nope, q_pe = _split_576("q_nope", q_nope, q_pe)
        ckv, kpe = _split_576("ckv", ckv, kpe)
        T.tensor("q_pe", q_pe, 3, dtypes=(self.q_dtype,), device=dev)
        T.tensor("kpe", kpe, 3, dtypes=(self.kv_dtype,), device=dev)
        Tn, H = self.num_tokens, self.num_heads
        for name, t, want in (("q_nope", q_nope, (Tn, H, LATENT)), ("q_pe", q_pe, (Tn, H, ROPE))):
            if tuple(t.shape) != want:
                raise ValueError(f"{name}: expected shape {want} (the plan's), got {tuple(t.shape)}")
        for name, t, width in (("ckv", ckv, LATENT), ("kpe", kpe, ROPE)):
            if t.shape[1] != self.page_size or t.shape[2] != width or t.shape[0] != ckv.shape[0]:
                raise ValueError(f"{name}: expected [pages, {self.page_size}, {width}], got "
                                 f"{tuple(t.shape)}")
        if not isinstance(kv_indices, torch.Tensor) or kv_indices.dtype != torch.int32 \
                or kv_indices.device != dev or kv_indices.numel() < self.num_pages:
            raise ValueError(f"kv_indices: expected an int32 tensor on {dev} with at least "
                             f"{self.num_pages} page ids")
        o, lse = _outputs(out, lse, return_lse, (Tn, H, LATENT), q_nope.dtype, dev)
        varr, nvar, keep = T.variant_args(variant_args, dev)
        a = new_struct(
            S.BatchMLADecodeArgs, self._lib, q_nope=q_nope.data_ptr(),
            q_pe=q_pe.data_ptr(), ckv=ckv.data_ptr(), kpe=kpe.data_ptr(), o=o.data_ptr(),
            lse=lse.data_ptr() if lse is not None else None, kv_indices=kv_indices.data_ptr(),
            q_nope_stride_n=q_nope.stride(0), q_nope_stride_h=q_nope.stride(1),
            q_pe_stride_n=q_pe.stride(0), q_pe_stride_h=q_pe.stride(1),
            ckv_stride_page=ckv.stride(0), ckv_stride_n=ckv.stride(1),
            kpe_stride_page=kpe.stride(0), kpe_stride_n=kpe.stride(1), o_stride_n=o.stride(0),
            o_stride_h=o.stride(1), kv_scale=float(kv_scale),
            workspace=self.workspace.data_ptr(), workspace_bytes=self.workspace_bytes,
            variant_args=varr, num_variant_args=nvar, **self._scalars)
        return self._launch(a, q_nope, o, lse, return_lse, stream, keep)


def mla_decode(q_nope, q_pe, ckv, kpe, kv_indices, qo_indptr, kv_indptr, kv_last_page_len, *,
               sm_scale, logits_soft_cap=None, kv_scale=1.0, variant=None, out=None, lse=None,
               return_lse=False, workspace=None, stream=None, ctx=None, softcap=None,
               **variant_args):
    """One absorbed MLA decode call: plan (host; the index arrays are read on the host)
    and run. For a batch layout served over many layers, keep a BatchMLADecodePlan."""
    logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "fijit.mla_decode")
    if workspace is None:
        workspace = torch.empty(1 << 20, dtype=torch.uint8, device=q_nope.device)
    page_size = ckv.shape[1]
    plan = BatchMLADecodePlan(workspace, ctx=ctx)
    plan.plan(qo_indptr, kv_indptr, kv_last_page_len, q_nope.shape[1], page_size=page_size,
              q_dtype=q_nope.dtype, kv_dtype=ckv.dtype, sm_scale=sm_scale,
              logits_soft_cap=logits_soft_cap,
              variant=variant, grow_workspace=True)
    try:
        result = plan.run(q_nope, q_pe, ckv, kpe, kv_indices, kv_scale=kv_scale, out=out,
                          lse=lse, return_lse=return_lse, stream=stream, **variant_args)
        # The workspace (the work list) lives until the kernels on `stream` are done.
        T.keep_for_stream(stream, q_nope.device, plan.workspace)
        return result
    finally:
        plan.close()
