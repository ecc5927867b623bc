"""fijit as a Hugging Face transformers attention backend.

    import fijit.integrations.transformers as fhf
    fhf.register()                       # adds "fijit" to AttentionInterface
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fijit")

Served by fijit: causal prefill (with or without a KV cache before it), decode of one
token against the model's cache, GQA/MQA, the layer's sliding window
(kwargs["sliding_window"] or module.sliding_window: keys within sliding_window - 1 of
the query, as transformers' own mask), logit soft-capping (kwargs["softcap"]), the
model's scaling, fp16/bf16 and head_dim 64/128/256, non-causal (encoder) attention, and
MLA models (DeepSeek-V3/R1, Kimi K2), whose attention calls carry q and k of head_dim
192 and v of 128 (the RoPE part already applied by the model): their prefill and their
decode steps alike run fijit's 192/128 prefill kernels (a decode step is a prefill of
one query, which sees every key).

Falls back to transformers' SDPA, with one warning per reason, for: a materialised
mask (padding in the batch, packed sequences, static caches, chunked attention, any
mask transformers builds beyond causal/sliding), dropout while training, gradients
(fijit has no backward kernels), fp32 or other dtypes, head dims fijit does not build,
CPU tensors, queries longer than the keys.

q/k/v arrive as [batch, heads, seq, head_dim] (k, v with the cache); the output is
[batch, seq, heads, head_dim of v]. fijit reads the views in place (HND layout), one
call per batch row.
"""
import functools
import logging

import torch

from .. import attention as A
from ..spec import accepted_specs

NAME = "fijit"
_log = logging.getLogger("fijit.transformers")
_warned = set()
# Calls served by fijit and by the SDPA fallback, for tests and for users checking coverage.
calls = {"fijit": 0, "sdpa": 0}


@functools.lru_cache(maxsize=1)
def _head_dims():
    """(head_dim of q and k, head_dim of v) of the 16-bit single prefills fijit builds,
    from the library's tuple space (fijit.accepted_specs)."""
    return frozenset((s.head_dim, s.head_dim_vo or s.head_dim)
                     for s in accepted_specs("prefill") if s.q_dtype in ("fp16", "bf16"))


def _fallback(reason, module, query, key, value, attention_mask, **kwargs):
    if reason not in _warned:
        _warned.add(reason)
        _log.warning("fijit attention: falling back to SDPA (%s); warned once per reason", reason)
    calls["sdpa"] += 1
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _unsupported(module, query, key, value, attention_mask, dropout):
    """Why fijit cannot serve this call, or None."""
    if attention_mask is not None:
        return "a materialised attention mask (padding, packing, static cache or custom mask)"
    if query.device.type != "cuda":
        return "tensors not on a CUDA device"
    if query.dtype not in (torch.float16, torch.bfloat16) or key.dtype != query.dtype:
        return f"dtype {query.dtype} (fijit serves fp16 and bf16)"
    if key.shape[-1] != query.shape[-1] or (query.shape[-1], value.shape[-1]) not in _head_dims():
        built = ", ".join(f"{qk}/{vo}" for qk, vo in sorted(_head_dims()))
        return (f"head_dim {query.shape[-1]} with v's {value.shape[-1]} (fijit builds q.k/v "
                f"{built})")
    if dropout and module.training:
        return "attention dropout while training"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad):
        return "gradients (fijit has no backward kernels)"
    if query.shape[2] > key.shape[2]:
        return "more queries than keys"
    return None


def fijit_attention_forward(module, query, key, value, attention_mask, dropout=0.0,
                            scaling=None, is_causal=None, **kwargs):
    """The AttentionInterface function: (attn_output [B, S, H, D], None)."""
    reason = _unsupported(module, query, key, value, attention_mask, dropout)
    if reason:
        return _fallback(reason, module, query, key, value, attention_mask, dropout=dropout,
                         scaling=scaling, is_causal=is_causal, **kwargs)
    calls["fijit"] += 1
    B, H, S, D = query.shape
    Dv = value.shape[-1]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    sliding = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
    window_left = int(sliding) - 1 if (sliding and causal) else -1
    softcap = float(kwargs.get("softcap") or 0.0)
    out = torch.empty((B, S, H, Dv), dtype=query.dtype, device=query.device)
    for b in range(B):
        k, v = key[b], value[b]  # [Hkv, L, D]: HND
        if S == 1 and Dv == D:  # decode has no narrower v: MLA's step is a prefill of one
            A.decode(query[b, :, 0, :], k, v, kv_layout="HND", sm_scale=scaling,
                     softcap=softcap, window_left=window_left, out=out[b, 0])
        else:
            A.prefill(query[b].transpose(0, 1), k, v, kv_layout="HND", causal=bool(causal),
                      window_left=window_left, softcap=softcap, sm_scale=scaling, out=out[b])
    return out, None


def _mask(*args, **kwargs):
    """The AttentionMaskInterface function: None when the mask is one fijit applies itself
    (causal, or causal + the layer's sliding window, no padding), else SDPA's mask, which
    makes the attention call fall back. Arguments are passed through to sdpa_mask as they
    came (their names changed between transformers releases)."""
    from transformers import masking_utils as mu
    attention_mask = kwargs.get("attention_mask")
    local_size = kwargs.get("local_size")
    config = kwargs.get("config")
    chunked = local_size is not None and local_size == getattr(config, "attention_chunk_size",
                                                               None)
    padded = attention_mask is not None and not bool(attention_mask.all())
    if kwargs.get("allow_is_causal_skip", True) and not padded and not chunked:
        return None
    return mu.sdpa_mask(*args, **dict(kwargs, allow_is_causal_skip=False))


def register(name=NAME):
    """Register fijit under `name` in transformers' AttentionInterface and
    AttentionMaskInterface; then attn_implementation=name selects it."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, fijit_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface
        AttentionMaskInterface.register(name, _mask)
    except ImportError:  # older transformers: masks are built per model
        pass
    return name
