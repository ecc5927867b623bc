"""The Spec and scalar arguments of a kernel call, from its Python arguments: shared by
the one-shot functions (attention.py) and the plans (plans.py)."""
import functools

from . import _tensors as T
from .spec import Spec


@functools.lru_cache(maxsize=1024)
def spec_for(kind, q_dtype, kv_dtype, head_dim, mask, pos, soft_cap, variant, o_dtype=None):
    """The Spec of a call (cached: building one per call would cost microseconds); o_dtype
    None: q's."""
    return Spec(kind=kind, q_dtype=T.DTYPE_NAME[q_dtype], kv_dtype=T.DTYPE_NAME[kv_dtype],
                o_dtype=T.DTYPE_NAME[o_dtype or q_dtype], head_dim=head_dim, mask=mask, pos=pos,
                soft_cap=soft_cap, variant=variant)


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
