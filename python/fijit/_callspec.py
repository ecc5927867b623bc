"""The Spec and scalar arguments of a kernel call, from its Python arguments: shared by
the one-shot functions (attention.py) and the plans (plans.py). Imports no torch at
module level, so that its argument rules are testable without it."""
import functools
import warnings

from .spec import Spec


@functools.lru_cache(maxsize=1024)
def spec_for(kind, q_dtype, kv_dtype, head_dim, mask, pos, soft_cap, variant, o_dtype=None,
             head_dim_vo=0):
    """The Spec of a call (cached: building one per call would cost microseconds); o_dtype
    None: q's; head_dim_vo 0: v and o have head_dim."""
    from . import _tensors as T  # torch: on a cache miss only
    return Spec(kind=kind, q_dtype=T.DTYPE_NAME[q_dtype], kv_dtype=T.DTYPE_NAME[kv_dtype],
                o_dtype=T.DTYPE_NAME[o_dtype or q_dtype], head_dim=head_dim, mask=mask, pos=pos,
                soft_cap=soft_cap, variant=variant, head_dim_vo=head_dim_vo)


def vo_head_dim(head_dim, v):
    """The spec's head_dim_vo for v (its last dimension): 0 where it is q's and k's."""
    return 0 if v.shape[-1] == head_dim else int(v.shape[-1])


def pos_name(rope, alibi_slopes):
    if rope and alibi_slopes is not None:
        raise ValueError("rope and alibi_slopes: choose one position encoding")
    return "rope" if rope else ("alibi" if alibi_slopes is not None else "none")


def prefill_mask(causal, window_left, custom_mask):
    if custom_mask is not None:
        if causal or window_left >= 0:
            raise ValueError("custom_mask: give it alone (without causal or window_left)")
        return "custom"
    if window_left >= 0:
        if not causal:
            raise ValueError("window_left: fijit's sliding window is causal; pass causal=True")
        return "window"
    return "causal" if causal else "none"


def sm_scale_arg(sm_scale):
    """The C field's value: 0 means 1/sqrt(head_dim)."""
    return 0.0 if sm_scale is None else float(sm_scale)


def soft_cap_arg(logits_soft_cap, softcap, who):
    """The logits soft-cap value of a call: logits_soft_cap (None or 0: none), or the
    deprecated softcap= alias of earlier releases (a DeprecationWarning; both given: a
    TypeError). The spec's on/off flag keeps the name soft_cap."""
    if softcap is not None:
        if logits_soft_cap is not None:
            raise TypeError(f"{who}: logits_soft_cap and softcap (its deprecated alias) both "
                            "given; pass logits_soft_cap only")
        warnings.warn(f"{who}: softcap= is deprecated, use logits_soft_cap= (the name of the C "
                      "field and of FlashInfer's argument)", DeprecationWarning, stacklevel=3)
        logits_soft_cap = softcap
    value = 0.0 if logits_soft_cap is None else float(logits_soft_cap)
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(f"{who}: logits_soft_cap must be a finite value >= 0 (0: none), got "
                         f"{logits_soft_cap!r}")
    return value
