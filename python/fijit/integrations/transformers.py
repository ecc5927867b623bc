"""fijit as a Hugging Face transformers attention backend.

    import fijit.integrations.transformers as fhf
    fhf.register()                       # adds "fijit" to AttentionInterface
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="fijit")

Every attention call of a layer is ONE fijit launch for the whole batch, with no host
synchronisation and no per-row loop: prefill and decode steps alike, unpadded, left- or
right-padded batches, dynamic and static caches (torch.compile fullgraph and CUDA
graphs included: see fijit.padded). The mask function registered with the backend
turns transformers' 2-D padding mask into a fijit.padded.KeyLayout on the device (which
keys each row attends to, once per forward and mask kind), packed into one int32 tensor
of 4 dimensions that transformers hands to the layers as it hands any prepared mask
(generate's precomputed static-cache masks included), and the attention function
runs a PaddedBatchPlan (batch prefill over a page table of page size 1 over the dense
[B, Hkv, L, D] cache; the plan is made once per shape and reused by every layer and
step). Padding keys and a static cache's unfilled tail are left out of each row's key
list, not masked, so nothing computed for a pad token reaches a real one.

Served: causal attention with GQA/MQA, the layer's sliding window
(kwargs["sliding_window"] or module.sliding_window: keys within sliding_window - 1 of
the query, as transformers' own mask), logit soft-capping (kwargs["softcap"]), the
model's scaling, attention sinks (gpt-oss: kwargs["s_aux"], through fijit's sink
variant), fp16/bf16, the head dims fijit builds (64/128/256, and MLA's q/k 192 with v
128), non-causal (encoder) attention.

Falls back to transformers' SDPA, with one warning per reason, for: a 4-D mask given
by the caller, chunked attention, packed sequences and other extra mask functions
(image tokens), a cache whose key offset is a tensor rather than an integer (where a
rolling window's keys may not be in position order), dropout while training, gradients (fijit has no
backward kernels), fp32 or other dtypes, head dims fijit does not build, CPU tensors.
A fallback from a call whose mask is fijit's gets the equivalent SDPA mask.

Rows of the 2-D mask with holes (zeros between attended positions) are served exactly
in decode steps (the holes are left out); in a prompt, a row's queries after a hole sit
at their position among the attended keys, as in packed rows, which is what right
padding carried into decoding gives.
"""
import logging
import threading

import torch

from .. import padded as P
from ..spec import accepted_specs

NAME = "fijit"
_log = logging.getLogger("fijit.transformers")
_warned = set()
# Calls served by fijit and by the SDPA fallback, for tests and for users checking coverage.
calls = {"fijit": 0, "sdpa": 0}


def _head_dims():
    """(head_dim of q and k, head_dim of v) of the 16-bit batch prefills fijit builds,
    from the library's tuple space (fijit.accepted_specs)."""
    return frozenset((s.head_dim, s.head_dim_vo or s.head_dim)
                     for s in accepted_specs("batch_prefill_paged")
                     if s.q_dtype in ("fp16", "bf16"))


# Read once at import (not inside a forward, which torch.compile traces).
_HEAD_DIMS = _head_dims()


def _count(path):
    """calls[path] += 1 outside torch.compile: inside, a counter that changes every call
    would make every call recompile (dynamo guards on the value it reads), so compiled
    calls are not counted; a compiled fallback still shows in fallback_reasons()."""
    if not torch.compiler.is_compiling():
        calls[path] += 1


def fallback_reasons():
    """The reasons SDPA served some call for, since the process started."""
    return sorted(_warned)


def _fallback(reason, module, query, key, value, attention_mask, **kwargs):
    if reason not in _warned:
        _warned.add(reason)
        _log.warning("fijit attention: falling back to SDPA (%s); warned once per reason", reason)
    _count("sdpa")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _unsupported(module, query, key, value, attention_mask, dropout):
    """Why fijit cannot serve this call, or None; attention_mask: None, a KeyLayout or
    another backend's mask."""
    if attention_mask is not None and not isinstance(attention_mask, P.KeyLayout):
        return "a 4-D attention mask given by the caller (or built for another backend)"
    if query.device.type != "cuda":
        return "tensors not on a CUDA device"
    if query.dtype not in (torch.float16, torch.bfloat16) or key.dtype != query.dtype:
        return f"dtype {query.dtype} (fijit serves fp16 and bf16)"
    if key.shape[-1] != query.shape[-1] or (query.shape[-1], value.shape[-1]) not in _HEAD_DIMS:
        built = ", ".join(f"{qk}/{vo}" for qk, vo in sorted(_HEAD_DIMS))
        return (f"head_dim {query.shape[-1]} with v's {value.shape[-1]} (fijit builds q.k/v "
                f"{built})")
    if dropout and module.training:
        return "attention dropout while training"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad):
        return "gradients (fijit has no backward kernels)"
    return None


def _layer_mask(module, kwargs, is_causal):
    """(causal, window_left, logits_soft_cap) of the layer."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    sliding = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
    window_left = int(sliding) - 1 if (sliding and causal) else -1
    return bool(causal), window_left, float(kwargs.get("softcap") or 0.0)


def fijit_attention_forward(module, query, key, value, attention_mask, dropout=0.0,
                            scaling=None, is_causal=None, **kwargs):
    """The AttentionInterface function: (attn_output [B, S, H, Dv], None)."""
    causal, window_left, cap = _layer_mask(module, kwargs, is_causal)
    attention_mask = _layout_of(attention_mask, query.shape[0], key.shape[2])
    reason = _unsupported(module, query, key, value, attention_mask, dropout)
    if reason:
        if isinstance(attention_mask, P.KeyLayout):
            attention_mask = P.sdpa_mask(attention_mask, query.shape[2], causal=causal,
                                         window_left=window_left)
            is_causal = False
        return _fallback(reason, module, query, key, value, attention_mask, dropout=dropout,
                         scaling=scaling, is_causal=is_causal, **kwargs)
    _count("fijit")
    layout = attention_mask
    if layout is None:  # no mask function ran (an older transformers): keys 0 .. L-1
        layout = _full_layout(query.shape[0], key.shape[2], query.device)
    out = P.padded_attention(query, key, value, layout, causal=causal, window_left=window_left,
                             logits_soft_cap=cap, sm_scale=scaling, sinks=kwargs.get("s_aux"))
    return out, None


# The previous call's (packed tensor, its KeyLayout), per thread: each generate() thread
# keeps its own, so that concurrent models never read another's.
_last = threading.local()


def _layout_of(mask, batch_size, kv_len):
    """The KeyLayout a packed mask of these sizes holds (the same object for every layer
    that gets the same tensor, so its page ids are computed once per forward); any other
    mask as it is."""
    if not P.KeyLayout.is_packed(mask, batch_size, kv_len):
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.int32 and mask.dim() == 4:
            raise ValueError(f"attention_mask: a fijit key layout, but not of this layer's "
                             f"{batch_size} rows of {kv_len} keys (shape {tuple(mask.shape)}): "
                             "the cache holds another length than the mask function was told")
        return mask
    if torch.compiler.is_compiling():  # traced: views only (the op computes the pages)
        return P.KeyLayout.unpack(mask, batch_size, kv_len)
    last = getattr(_last, "layout", None)
    if last is None or last[0] is not mask:
        last = _last.layout = (mask, P.KeyLayout.unpack(mask, batch_size, kv_len))
    return last[1]


def _full_layout(batch_size, kv_len, device):
    """Every row attends to keys 0 .. kv_len - 1 (kept for the next layer's call)."""
    got = getattr(_last, "full", None)
    if got is None or (got.batch_size, got.kv_len, got.keys.device) != (batch_size, kv_len,
                                                                         device):
        visible = torch.ones((batch_size, kv_len), dtype=torch.bool, device=device)
        got = _last.full = P.padding_layout(visible)
    return got


def _mask(*args, **kwargs):
    """The AttentionMaskInterface function: the KeyLayout of this forward (which keys
    each row attends to), built on the device from the 2-D padding mask, the cache's
    size and offset and the queries' positions, with no host synchronisation, and
    returned packed into one int32 tensor of 4 dimensions, which transformers carries
    to the layers as it carries any prepared mask. SDPA's
    mask (which makes the attention calls fall back) for what fijit does not follow:
    chunked attention, extra mask functions, a cache whose offset is not a plain
    integer (a static cache's rolling sliding-window layers). Arguments are read by
    name (their set changed between transformers releases)."""
    from transformers import masking_utils as mu
    attention_mask = kwargs.get("attention_mask")
    local_size = kwargs.get("local_size")
    config = kwargs.get("config")
    cache_position = kwargs.get("cache_position")
    kv_length, kv_offset = kwargs.get("kv_length"), kwargs.get("kv_offset", 0)
    chunked = local_size is not None and local_size == getattr(config, "attention_chunk_size",
                                                               None)
    name = getattr(kwargs.get("mask_function"), "__name__", "")
    own = name in _OWN_MASK_FUNCTIONS or (local_size is not None and (
        name in _WINDOW_FUNCTIONS or "sliding" in name))
    q_end = _queries_end(cache_position, kwargs)
    if (chunked or not own or q_end is None or not _plain_int(kv_length)
            or not _plain_int(kv_offset)
            or (attention_mask is not None and attention_mask.dim() != 2)
            or (attention_mask is None and not kwargs.get("batch_size"))
            or not (isinstance(q_end, torch.Tensor) or attention_mask is not None
                    or kwargs.get("device") is not None)):
        return mu.sdpa_mask(*args, **dict(kwargs, allow_is_causal_skip=False))
    visible = P.visible_keys(attention_mask, kv_length, kv_offset, q_end,
                             kwargs.get("batch_size"), kwargs.get("device"))
    return P.padding_layout(visible).packed()


def _plain_int(x):
    """An int, or the symbolic int torch.compile traces one as (not a tensor)."""
    return isinstance(x, int) or type(x).__name__ == "SymInt"


def _queries_end(cache_position, kwargs):
    """The position after this forward's last query: from cache_position (a device
    tensor: no synchronisation), or from q_offset + q_length (transformers 5: q_offset
    an int, or a device tensor for static caches); None when neither is given."""
    if cache_position is not None:
        return cache_position[-1:] + 1
    if kwargs.get("q_length") is not None and kwargs.get("q_offset") is not None:
        return kwargs["q_offset"] + kwargs["q_length"]
    return None


# The mask functions of transformers' create_causal_mask and create_bidirectional_mask,
# and (with local_size, the window) the closures create_sliding_window_causal_mask
# passes, which the layer's own causal flag and window reproduce; anything else (packed
# sequences, image tokens: and_mask/or_mask without a window; chunks) gets SDPA's mask.
_OWN_MASK_FUNCTIONS = ("causal_mask_function", "bidirectional_mask_function")
_WINDOW_FUNCTIONS = ("and_mask", "inner_mask", "sliding_window_causal_mask_function")


def register(name=NAME):
    """Register fijit under `name` in transformers' AttentionInterface and
    AttentionMaskInterface; then attn_implementation=name selects it."""
    import transformers
    from transformers import AttentionInterface
    masks = getattr(transformers, "AttentionMaskInterface", None)
    try:
        from transformers import masking_utils
    except ImportError:  # older transformers: 4-D masks built per model (served or not)
        masking_utils = None
    masks = getattr(masking_utils, "AttentionMaskInterface", masks)
    if masking_utils is not None and masks is None:
        # Without the mask function a padded batch would reach the attention function
        # with no mask at all: refuse rather than serve it wrong.
        raise ImportError(f"transformers {transformers.__version__} has masking_utils but no "
                          "AttentionMaskInterface where fijit looks for it; fijit cannot see "
                          "its padding masks")
    if masks is not None:
        masks.register(name, _mask)
    AttentionInterface.register(name, fijit_attention_forward)
    return name
