"""torch.library custom ops fijit::decode, fijit::prefill, fijit::varlen_prefill,
fijit::merge_states and fijit::padded_attention, with fake (meta) implementations
giving output shapes, so that torch.compile traces through fijit without graph breaks.
attention.py and padded.py register them over their eager functions (register_ops,
register_padded_op) and call them when torch.compiler.is_compiling(); eager calls skip
the dispatcher. Each op but padded_attention returns (out, lse); variants (but
padded_attention's sinks), custom masks and fp8 prefill (its scales and out_dtype are
no op arguments) are eager-only. This module imports none of the package's own, so that
attention.py can import it (no import circle)."""
from types import SimpleNamespace
from typing import Optional, Tuple

import torch

Tensor = torch.Tensor
AVAILABLE = hasattr(torch, "library") and hasattr(torch.library, "custom_op")  # torch >= 2.4
_registered = False
_padded_registered = False


def register_ops(**eager):
    """Define fijit::* over the eager functions given (decode, prefill, varlen_prefill,
    merge_states), once per process; nothing where torch.library cannot."""
    global _registered
    if not AVAILABLE or _registered:
        return
    _registered = True
    A = SimpleNamespace(**eager)

    @torch.library.custom_op("fijit::decode", mutates_args=(), device_types="cuda")
    def decode_op(q: Tensor, k: Tensor, v: Tensor, kv_layout: str, sm_scale: float,
                  logits_soft_cap: float, window_left: int, alibi_slopes: Optional[Tensor],
                  rope: bool, rope_theta: float, rope_scale: float,
                  rope_offset: int) -> Tuple[Tensor, Tensor]:
        out, lse = A.decode(q, k, v, kv_layout=kv_layout, sm_scale=sm_scale or None,
                            logits_soft_cap=logits_soft_cap, window_left=window_left,
                            alibi_slopes=alibi_slopes,
                            rope=rope, rope_theta=rope_theta, rope_scale=rope_scale,
                            rope_offset=rope_offset, return_lse=True)
        return out, lse

    @decode_op.register_fake
    def _decode_fake(q, k, v, kv_layout, sm_scale, logits_soft_cap, window_left, alibi_slopes,
                     rope, rope_theta, rope_scale, rope_offset):
        return q.new_empty(q.shape), q.new_empty(q.shape[:1], dtype=torch.float32)

    @torch.library.custom_op("fijit::prefill", mutates_args=(), device_types="cuda")
    def prefill_op(q: Tensor, k: Tensor, v: Tensor, kv_layout: str, causal: bool,
                   window_left: int, logits_soft_cap: float, sm_scale: float,
                   alibi_slopes: Optional[Tensor], rope: bool, rope_theta: float,
                   rope_scale: float, rope_offset: int) -> Tuple[Tensor, Tensor]:
        out, lse = A.prefill(q, k, v, kv_layout=kv_layout, causal=causal,
                             window_left=window_left, logits_soft_cap=logits_soft_cap,
                             sm_scale=sm_scale or None,
                             alibi_slopes=alibi_slopes, rope=rope, rope_theta=rope_theta,
                             rope_scale=rope_scale, rope_offset=rope_offset, return_lse=True)
        return out, lse

    @prefill_op.register_fake
    def _prefill_fake(q, k, v, kv_layout, causal, window_left, logits_soft_cap, sm_scale,
                      alibi_slopes, rope, rope_theta, rope_scale, rope_offset):
        # out has v's head_dim (MLA's prefill: 128 with q and k of 192).
        return (q.new_empty(q.shape[:2] + v.shape[-1:]),
                q.new_empty(q.shape[:2], dtype=torch.float32))

    @torch.library.custom_op("fijit::varlen_prefill", mutates_args=(), device_types="cuda")
    def varlen_prefill_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                          cu_seqlens_k: Tensor, causal: bool, window_left: int,
                          logits_soft_cap: float,
                          sm_scale: float, alibi_slopes: Optional[Tensor], rope: bool,
                          rope_theta: float, rope_scale: float,
                          rope_offset: int) -> Tuple[Tensor, Tensor]:
        out, lse = A.varlen_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                    softmax_scale=sm_scale or None, causal=causal,
                                    window_size=(window_left, 0 if window_left >= 0 else -1),
                                    logits_soft_cap=logits_soft_cap,
                                    alibi_slopes=alibi_slopes, rope=rope,
                                    rope_theta=rope_theta, rope_scale=rope_scale,
                                    rope_offset=rope_offset, return_lse=True)
        return out, lse

    @varlen_prefill_op.register_fake
    def _varlen_prefill_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, window_left,
                             logits_soft_cap,
                             sm_scale, alibi_slopes, rope, rope_theta, rope_scale, rope_offset):
        return (q.new_empty(q.shape[:2] + v.shape[-1:]),
                q.new_empty(q.shape[:2], dtype=torch.float32))

    @torch.library.custom_op("fijit::merge_states", mutates_args=(), device_types="cuda")
    def merge_states_op(v: Tensor, lse: Tensor) -> Tuple[Tensor, Tensor]:
        return A.merge_states(v, lse)

    @merge_states_op.register_fake
    def _merge_states_fake(v, lse):
        seq, _, h, d = v.shape
        return v.new_empty((seq, h, d)), v.new_empty((seq, h), dtype=torch.float32)



def register_padded_op(run):
    """Define fijit::padded_attention over `run` (padded.py's eager call; its plans are
    made on the first call of a shape, outside any graph), once per process."""
    global _padded_registered
    if not AVAILABLE or _padded_registered:
        return
    _padded_registered = True

    @torch.library.custom_op("fijit::padded_attention", mutates_args=(), device_types="cuda")
    def padded_attention_op(q: Tensor, k: Tensor, v: Tensor, kv_indptr: Tensor, keys: Tensor,
                            kv_len: int, causal: bool, window_left: int, logits_soft_cap: float,
                            sm_scale: float, sinks: Optional[Tensor]) -> Tensor:
        return run(q, k, v, kv_indptr, keys, kv_len, causal, window_left, logits_soft_cap,
                   sm_scale, sinks)

    @padded_attention_op.register_fake
    def _padded_attention_fake(q, k, v, kv_indptr, keys, kv_len, causal, window_left,
                               logits_soft_cap, sm_scale, sinks):
        B, H, S, _ = q.shape
        return q.new_empty((B, S, H, v.shape[-1]))
