"""sdpa_mask that records its call and returns a marker (the stand-in of SDPA's mask)."""
from . import _Registry

AttentionMaskInterface = _Registry()
sdpa_calls = []


class SdpaMask:
    """What the stand-in sdpa_mask returns: the arguments it was given."""

    def __init__(self, kwargs):
        self.kwargs = kwargs

    def dim(self):
        return 4


def sdpa_mask(*args, **kwargs):
    sdpa_calls.append(kwargs)
    return SdpaMask(kwargs)


def causal_mask_function(batch_idx, head_idx, q_idx, kv_idx):
    return kv_idx <= q_idx


def and_masks(*fns):
    def and_mask(*idx):
        return all(f(*idx) for f in fns)
    return and_mask
