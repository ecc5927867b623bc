"""One-shot attention functions on torch tensors: decode, prefill, varlen_prefill
(flash_attn_varlen_func's arguments, names and order: softmax_scale, window_size) and
merge_states.

Conventions (as flash-attn): out= writes into a tensor you own; return_lse=True
returns (out, lse) with lse the NATURAL log of the softmax denominator, float32,
[tokens, heads]. sm_scale None means 1/sqrt(head_dim); logits_soft_cap None or 0
means none (softcap=, its earlier name, is accepted for one release with a
DeprecationWarning); a sliding window (window_left >= 0: keys i+off-window_left ..
i+off) is causal. Calls
run on torch.cuda.current_stream() unless stream= is given. Inside torch.compile the
functions go through the torch.library ops fijit::* (see _ops.py), without variants
or fp8 prefill (eager only: prefill's docstring).
"""
import ctypes

import torch

from . import _structs as S
from . import _tensors as T
from ._callspec import pos_name, prefill_mask, soft_cap_arg, spec_for, vo_head_dim  # noqa: F401
from ._callspec import sm_scale_arg as _scale
from ._lib import new_struct
from ._ops import register_ops
from .context import default_context
from .errors import check
from .plans import BatchPrefillPlan


def pack_mask(mask, qo_len, kv_len):
    """A bool [qo_len, kv_len] mask (True: visible) -> the bit-packed uint8 layout of
    fijit_prefill.h (bit i*kv_len+j, least significant bit first); a uint8 tensor is
    taken as packed already."""
    if mask.dtype == torch.uint8:
        return mask.contiguous()
    if mask.dtype != torch.bool or tuple(mask.shape) != (qo_len, kv_len):
        raise ValueError(f"custom_mask: expected a bool tensor of shape ({qo_len}, {kv_len}) or "
                         f"packed uint8 bits, got {mask.dtype} {tuple(mask.shape)}")
    bits = mask.reshape(-1)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    weights = (1 << torch.arange(8, device=mask.device, dtype=torch.int32))
    return (bits.reshape(-1, 8).to(torch.int32) * weights).sum(1).to(torch.uint8)


def _compiling():
    return torch.compiler.is_compiling()


def _graph_result(o, lse, out, return_lse):
    """What a traced call returns: the op's result, copied into out= when one is given."""
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_lse else o


def _no_variant_in_graph(variant, variant_args):
    if variant is not None or variant_args:
        raise NotImplementedError("variants are not available inside torch.compile; call "
                                  "fijit outside the compiled region for them")


# ---- decode -------------------------------------------------------------------------
def decode(q, k, v, *, kv_layout="NHD", sm_scale=None, logits_soft_cap=None, window_left=-1,
           alibi_slopes=None, rope=False, rope_theta=1e4, rope_scale=1.0, rope_offset=0,
           k_scale=1.0, v_scale=1.0, max_splits=0, variant=None, out=None, return_lse=False,
           workspace=None, stream=None, ctx=None, softcap=None, **variant_args):
    """Single-request decode: q [num_qo_heads, head_dim] (one token) against k, v
    [kv_len, num_kv_heads, head_dim] (kv_layout "NHD") or [num_kv_heads, kv_len,
    head_dim] ("HND"), any token/head strides. GQA when num_qo_heads is a multiple of
    num_kv_heads. fp8 k/v (torch.float8_e4m3fn / e5m2) hold k / k_scale, v / v_scale.
    The query sits at position rope_offset + kv_len - 1 (RoPE; the window counts back
    from it). Returns out [num_qo_heads, head_dim] (q's dtype), and lse
    [num_qo_heads] with return_lse. workspace: None (split-KV's partials are allocated
    per call) or a 1-D uint8 CUDA tensor you own, reused across calls (ValueError naming
    the bytes needed when it is too small)."""
    logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "fijit.decode")
    if _compiling():
        _no_variant_in_graph(variant, variant_args)
        o, lse = torch.ops.fijit.decode(q, k, v, kv_layout, _scale(sm_scale), logits_soft_cap,
                                        int(window_left), alibi_slopes, bool(rope),
                                        float(rope_theta), float(rope_scale), int(rope_offset))
        return _graph_result(o, lse, out, return_lse)
    T.qkv(q, k, v, 2, 3)
    H, D = q.shape
    o = T.output("out", out, (H, D), q.dtype, q.device)
    lse = torch.empty((H,), dtype=torch.float32, device=q.device) if return_lse else None
    decode_into(o, lse, q, k, v, kv_layout=kv_layout, sm_scale=sm_scale,
                logits_soft_cap=logits_soft_cap,
                window_left=window_left, alibi_slopes=alibi_slopes, rope=rope,
                rope_theta=rope_theta, rope_scale=rope_scale, rope_offset=rope_offset,
                k_scale=k_scale, v_scale=v_scale, max_splits=max_splits, variant=variant,
                workspace=workspace, stream=stream, ctx=ctx, variant_args=variant_args)
    return (o, lse) if return_lse else o


def decode_into(o, lse, q, k, v, *, kv_layout, sm_scale, logits_soft_cap, window_left,
                alibi_slopes, rope, rope_theta, rope_scale, rope_offset, k_scale=1.0,
                v_scale=1.0, max_splits=0, variant=None, workspace=None, stream=None, ctx=None,
                variant_args=None):
    """fi_decode_run into o (and lse, or None); inputs already checked."""
    ctx = ctx or default_context()
    dev = q.device
    H, D = q.shape
    kv_len, hkv, ksn, ksh = T.kv_strides("k", k, kv_layout)
    _, _, vsn, vsh = T.kv_strides("v", v, kv_layout)
    spec_c = spec_for("decode", q.dtype, k.dtype, D, "window" if window_left >= 0 else "none",
                      pos_name(rope, alibi_slopes), logits_soft_cap > 0, variant).to_c()
    varr, nvar, keep = T.variant_args(variant_args, dev)
    L = ctx._lib
    a = new_struct(S.DecodeArgs, L, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                   o=o.data_ptr(), lse=lse.data_ptr() if lse is not None else None,
                   num_qo_heads=H, num_kv_heads=hkv, kv_len=kv_len, q_stride_h=q.stride(0),
                   o_stride_h=o.stride(0), k_stride_n=ksn, k_stride_h=ksh, v_stride_n=vsn,
                   v_stride_h=vsh, sm_scale=_scale(sm_scale), logits_soft_cap=logits_soft_cap,
                   rope_scale=float(rope_scale), rope_theta=float(rope_theta),
                   rope_offset=int(rope_offset), window_left=int(window_left),
                   alibi_slopes=T.optional("alibi_slopes", alibi_slopes, (H,), torch.float32,
                                           dev),
                   max_splits=int(max_splits), k_scale=float(k_scale), v_scale=float(v_scale),
                   variant_args=varr, num_variant_args=nvar)
    ws = None
    spec_p, args_p = ctypes.byref(spec_c), ctypes.byref(a)
    with T.device_of(q):
        n = ctypes.c_size_t()
        check(L.fi_decode_workspace_size(ctypes.byref(n), spec_p, args_p),
              "fi_decode_workspace_size", L)
        if n.value:
            ws = T.workspace_for(workspace, n.value, dev)
            a.workspace, a.workspace_bytes = ws.data_ptr(), ws.numel()
        check(L.fi_decode_run(ctx.handle, spec_p, args_p, T.stream_handle(stream, dev)),
              "fi_decode_run", L)
        T.keep_for_stream(stream, dev, ws if workspace is None else None)
    del keep, ws  # alive until the launch is queued; the caching allocator orders reuse
    return o


# ---- prefill ------------------------------------------------------------------------
def prefill(q, k, v, *, causal=False, window_left=-1, logits_soft_cap=None, sm_scale=None,
            alibi_slopes=None, rope=False, rope_theta=1e4, rope_scale=1.0, rope_offset=0,
            custom_mask=None, kv_layout="NHD", q_scale=1.0, k_scale=1.0, v_scale=1.0,
            out_dtype=None, variant=None, out=None, return_lse=False, workspace=None,
            stream=None, ctx=None, softcap=None, **variant_args):
    """Single-request prefill: q [qo_len, num_qo_heads, head_dim] against k, v
    [kv_len, num_kv_heads, head_dim] ("NHD") or [num_kv_heads, kv_len, head_dim]
    ("HND"); any token/head strides (a q/k/v slice of a fused QKV tensor works). Causal
    masks align bottom-right when qo_len < kv_len. custom_mask: bool [qo_len, kv_len]
    (True: visible) or packed uint8 bits. Returns out [qo_len, num_qo_heads, head_dim of
    v] and, with return_lse, lse [qo_len, num_qo_heads] (float32, natural log). v may
    have a smaller head_dim than q and k: MLA's prefill, 192 and 128 (fijit_prefill.h
    lists the tuples; RoPE must then be applied by the caller); sm_scale None is
    1/sqrt(q's head_dim).

    q, k and v share one dtype. fp16 and bf16 write out in that dtype (out_dtype None or
    the same; the scales must stay 1). fp8 (sm_90a, head_dim 128, mask none or causal, no
    RoPE/ALiBi/soft-cap/variant; the library refuses others with UnsupportedError): q, k
    and v all torch.float8_e4m3fn holding the real values divided by the per-tensor
    q_scale, k_scale, v_scale (positive); logits are (q_real . k_real) * sm_scale; out is
    out_dtype, torch.float16 or torch.bfloat16 (None: out='s dtype, else bfloat16). The
    workspace (fp8's re-laid-out V, RoPE's rotated keys, the persistent kernel's
    counter) is allocated per call unless workspace= gives a 1-D uint8 CUDA tensor you
    own (ValueError naming the bytes needed when it is too small). Token and head strides
    count 1-byte elements there: multiples of 16. Mixed dtypes raise TypeError, scales
    or out_dtype given for 16-bit inputs TypeError/ValueError. fp8 is eager-only: inside
    torch.compile it raises NotImplementedError (the fijit::prefill op carries no scales
    or out_dtype; call fijit.prefill outside the compiled region), as variants and
    custom masks do."""
    logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "fijit.prefill")
    if _compiling():
        _no_variant_in_graph(variant, variant_args)
        if custom_mask is not None:
            raise NotImplementedError("custom_mask is not available inside torch.compile")
        if T.prefill_dtypes(q.dtype, k.dtype, out_dtype,
                            (q_scale, k_scale, v_scale)) != q.dtype:
            raise NotImplementedError("fp8 prefill is not available inside torch.compile; call "
                                      "fijit.prefill outside the compiled region for it")
        o, lse = torch.ops.fijit.prefill(q, k, v, kv_layout, bool(causal), int(window_left),
                                         logits_soft_cap, _scale(sm_scale), alibi_slopes,
                                         bool(rope), float(rope_theta), float(rope_scale),
                                         int(rope_offset))
        return _graph_result(o, lse, out, return_lse)
    T.qkv(q, k, v, 3, 3, T.PREFILL_DTYPES, T.PREFILL_DTYPES, v_head_dim=True)
    if out_dtype is None and out is not None and q.dtype == T.FP8_E4M3:
        out_dtype = out.dtype  # fp8 writes the dtype of the out= given
    o_dtype = T.prefill_dtypes(q.dtype, k.dtype, out_dtype, (q_scale, k_scale, v_scale))
    Lq, H, _ = q.shape
    o = T.output("out", out, (Lq, H, v.shape[-1]), o_dtype, q.device)
    lse = torch.empty((Lq, H), dtype=torch.float32, device=q.device) if return_lse else None
    prefill_into(o, lse, q, k, v, causal=causal, window_left=window_left,
                 logits_soft_cap=logits_soft_cap,
                 sm_scale=sm_scale, alibi_slopes=alibi_slopes, rope=rope, rope_theta=rope_theta,
                 rope_scale=rope_scale, rope_offset=rope_offset, custom_mask=custom_mask,
                 kv_layout=kv_layout, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
                 variant=variant, workspace=workspace, stream=stream, ctx=ctx,
                 variant_args=variant_args)
    return (o, lse) if return_lse else o


def prefill_into(o, lse, q, k, v, *, causal, window_left, logits_soft_cap, sm_scale,
                 alibi_slopes, rope, rope_theta, rope_scale, rope_offset, kv_layout,
                 custom_mask=None, q_scale=1.0, k_scale=1.0, v_scale=1.0, variant=None,
                 workspace=None, stream=None, ctx=None, variant_args=None):
    """fi_prefill_run into o (and lse, or None); inputs already checked. The spec's
    o_dtype is o's dtype (fp8 q/k/v: fp16 or bf16); the scales are for fp8 inputs (the
    C library ignores them for 16-bit ones)."""
    ctx = ctx or default_context()
    Lq, H, D = q.shape
    kv_len, hkv, ksn, ksh = T.kv_strides("k", k, kv_layout)
    _, _, vsn, vsh = T.kv_strides("v", v, kv_layout)
    mask = prefill_mask(causal, window_left, custom_mask)
    bits = pack_mask(custom_mask, Lq, kv_len) if custom_mask is not None else None
    spec = spec_for("prefill", q.dtype, k.dtype, D, mask, pos_name(rope, alibi_slopes),
                    logits_soft_cap > 0, variant, o.dtype, vo_head_dim(D, v))
    varr, nvar, keep = T.variant_args(variant_args, q.device)
    L = ctx._lib
    a = new_struct(S.PrefillArgs, L, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                   o=o.data_ptr(), lse=lse.data_ptr() if lse is not None else None,
                   num_qo_heads=H, num_kv_heads=hkv, qo_len=Lq, kv_len=kv_len,
                   q_stride_n=q.stride(0), q_stride_h=q.stride(1), o_stride_n=o.stride(0),
                   o_stride_h=o.stride(1), k_stride_n=ksn, k_stride_h=ksh, v_stride_n=vsn,
                   v_stride_h=vsh, sm_scale=_scale(sm_scale), logits_soft_cap=logits_soft_cap,
                   rope_scale=float(rope_scale), rope_theta=float(rope_theta),
                   rope_offset=int(rope_offset), window_left=int(window_left),
                   alibi_slopes=T.optional("alibi_slopes", alibi_slopes, (H,), torch.float32,
                                           q.device),
                   custom_mask=bits.data_ptr() if bits is not None else None,
                   variant_args=varr, num_variant_args=nvar, q_scale=float(q_scale),
                   k_scale=float(k_scale), v_scale=float(v_scale))
    spec_c = spec.to_c()
    ws = None
    with T.device_of(q):
        # A workspace: RoPE's keys rotated once instead of per query tile, the counter
        # through which persistent CTAs claim blocks, and fp8's re-laid-out V (which
        # fi_prefill_run requires: always allocated when the size is not 0).
        n = ctypes.c_size_t()
        check(L.fi_prefill_workspace_size(ctypes.byref(n), ctypes.byref(spec_c), ctypes.byref(a)),
              "fi_prefill_workspace_size", L)
        if n.value:
            ws = T.workspace_for(workspace, n.value, q.device)
            a.workspace, a.workspace_bytes = ws.data_ptr(), ws.numel()
        check(L.fi_prefill_run(ctx.handle, ctypes.byref(spec_c), ctypes.byref(a),
                               T.stream_handle(stream, q.device)), "fi_prefill_run", L)
        T.keep_for_stream(stream, q.device, ws if workspace is None else None, bits)
    del keep, ws, bits
    return o


# ---- varlen prefill (flash_attn_varlen_func's shape) ---------------------------------
def flash_window(causal, window_size):
    """flash-attn's (causal, window_size=(left, right)) as fijit's (causal, window_left).
    Keys from left before to right after the query's position are visible (-1: no
    limit); fijit's sliding window is causal, so right must be 0 (or -1 with causal)."""
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise TypeError(f"window_size: expected (left, right), got {window_size!r}") from None
    if right == 0:
        causal = True
    elif right > 0 or (left >= 0 and not causal):
        raise NotImplementedError(f"window_size={window_size!r}: fijit's sliding window is "
                                  "causal; give (left, 0), or (left, -1) with causal=True")
    return causal, max(left, -1)


def varlen_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                   dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                   logits_soft_cap=None, alibi_slopes=None, *, rope=False, rope_theta=1e4,
                   rope_scale=1.0, rope_offset=0, variant=None, out=None, return_lse=False,
                   stream=None, ctx=None, softcap=None, **variant_args):
    """Packed batch prefill with flash_attn_varlen_func's arguments, in its order: q
    [total_q, H, D] and k, v [total_k, Hkv, D] with request b at rows
    cu_seqlens_q[b]:cu_seqlens_q[b+1] (k, v: cu_seqlens_k), int32 CUDA tensors.
    max_seqlen_* are accepted and not needed; dropout_p must be 0 (no dropout at
    inference); softmax_scale None means 1/sqrt(D); window_size (left, right) as
    flash-attn's, causal only (see flash_window); logits_soft_cap None or 0 means none
    (flash-attn's softcap, in its place; softcap= by keyword is the deprecated alias). The
    lengths are
    read to the host (one synchronisation) to plan the batch; for repeated calls on one
    layout, and for CUDA graphs, use BatchPrefillPlan. Returns out [total_q, H, D of v]
    (and lse [total_q, H] with return_lse); v may be narrower than q and k as in prefill
    (MLA: 192/128)."""
    if dropout_p:
        raise NotImplementedError(f"dropout_p={dropout_p}: fijit has no dropout (inference only)")
    logits_soft_cap = soft_cap_arg(logits_soft_cap, softcap, "fijit.varlen_prefill")
    causal, window_left = flash_window(causal, window_size)
    sm_scale = softmax_scale
    if _compiling():
        _no_variant_in_graph(variant, variant_args)
        o, lse = torch.ops.fijit.varlen_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                bool(causal), int(window_left), logits_soft_cap,
                                                _scale(sm_scale), alibi_slopes, bool(rope),
                                                float(rope_theta), float(rope_scale),
                                                int(rope_offset))
        return _graph_result(o, lse, out, return_lse)
    if q.dtype == T.FP8_E4M3 and T.FP8_E4M3 is not None:
        raise NotImplementedError("varlen_prefill: fp8 (float8_e4m3fn) q/k/v are served by "
                                  "fijit.prefill only; the library's batch prefill kinds take "
                                  "fp16 or bf16 (call fijit.prefill per sequence)")
    T.qkv(q, k, v, 3, 3, v_head_dim=True)
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype not in (torch.int32,
                                                                                  torch.int64):
            raise ValueError(f"{name}: expected a 1-D int32 tensor of batch_size + 1 offsets")
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k: {cu_seqlens_q.numel()} vs "
                         f"{cu_seqlens_k.numel()} entries (both batch_size + 1)")
    qo_host = cu_seqlens_q.tolist()
    kv_host = cu_seqlens_k.tolist()
    if qo_host[-1] != q.shape[0] or kv_host[-1] != k.shape[0]:
        raise ValueError(f"cu_seqlens: the last offsets ({qo_host[-1]}, {kv_host[-1]}) must equal "
                         f"q's and k's token counts ({q.shape[0]}, {k.shape[0]})")
    Lq, H, D = q.shape
    ws = torch.empty(0, dtype=torch.uint8, device=q.device)
    plan = BatchPrefillPlan(ws, ctx=ctx)
    try:
        plan.plan(qo_host, kv_host, H, k.shape[1], D, head_dim_vo=vo_head_dim(D, v),
                  q_dtype=q.dtype, kv_dtype=k.dtype,
                  causal=causal, window_left=window_left, logits_soft_cap=logits_soft_cap,
                  sm_scale=sm_scale,
                  pos_encoding=pos_name(rope, alibi_slopes), rope_theta=rope_theta,
                  rope_scale=rope_scale, variant=variant, grow_workspace=True,
                  qo_indptr_device=cu_seqlens_q, kv_indptr_device=cu_seqlens_k)
        result = plan.run(q, k, v, alibi_slopes=alibi_slopes, rope_offset=rope_offset, out=out,
                          return_lse=return_lse, stream=stream, **variant_args)
        # The plan's workspace and device offsets are freed on return; a launch on another
        # stream may not have read them yet.
        T.keep_for_stream(stream, q.device, plan.workspace, plan._qo_d, plan._kv_d)
        return result
    finally:
        plan.close()


# ---- merge of attention states -------------------------------------------------------
def merge_states(v, lse, *, out=None, lse_out=None, stream=None, ctx=None):
    """Merge num_states partial results over disjoint key sets: v [seq, num_states, H, D]
    (fp16/bf16, normalised outputs), lse [seq, num_states, H] (float32, natural log,
    head stride 1). Returns (v_out [seq, H, D], lse_out [seq, H]). A row whose states all
    have lse -inf gets 0 and -inf."""
    if _compiling():
        o, l = torch.ops.fijit.merge_states(v, lse)
        if out is not None:
            out.copy_(o)
            o = out
        if lse_out is not None:
            lse_out.copy_(l)
            l = lse_out
        return o, l
    T.tensor("v", v, 4, dtypes=T._16BIT)
    T.tensor("lse", lse, 3, dtypes=(torch.float32,), device=v.device)
    seq, n, H, D = v.shape
    if tuple(lse.shape) != (seq, n, H):
        raise ValueError(f"lse: expected shape {(seq, n, H)}, got {tuple(lse.shape)}")
    o = T.output("out", out, (seq, H, D), v.dtype, v.device)
    lo = T.output("lse_out", lse_out, (seq, H), torch.float32, v.device)
    if lse_out is not None and not lse_out.is_contiguous():
        raise ValueError("lse_out: must be contiguous")
    merge_states_into(o, lo, v, lse, stream=stream, ctx=ctx)
    return o, lo


def merge_states_into(o, lo, v, lse, *, stream=None, ctx=None):
    ctx = ctx or default_context()
    seq, n, H, D = v.shape
    spec = spec_for("batch_decode", v.dtype, v.dtype, D, "none", "none", False, None)
    a = new_struct(S.MergeStatesArgs, ctx._lib, v=v.data_ptr(), lse=lse.data_ptr(),
                   v_out=o.data_ptr(), lse_out=lo.data_ptr(), seq_len=seq, num_states=n,
                   num_heads=H, v_stride_n=v.stride(0), v_stride_state=v.stride(1),
                   v_stride_h=v.stride(2), lse_stride_n=lse.stride(0),
                   lse_stride_state=lse.stride(1), v_out_stride_n=o.stride(0),
                   v_out_stride_h=o.stride(1))
    with T.device_of(v):
        check(ctx._lib.fi_merge_states(ctx.handle, ctypes.byref(spec.to_c()), ctypes.byref(a),
                                       T.stream_handle(stream, v.device)), "fi_merge_states",
              ctx._lib)
    return o


# fijit::* for torch.compile, where torch.library can (the ops call these functions).
register_ops(decode=decode, prefill=prefill, varlen_prefill=varlen_prefill,
             merge_states=merge_states)
