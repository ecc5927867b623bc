"""Torch tensors to what the C API takes: dtype names, device pointers, element
strides, the CUDA stream, variant argument arrays. Checks here are the cheap ones
that name the Python argument (type, device, dtype, rank, shapes, a contiguous last
dimension, 16-byte alignment); the C library checks the rest and names the field."""
import ctypes

import torch

from . import _structs as S

DTYPE_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16"}
for _name, _fp8 in (("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")):
    if hasattr(torch, _fp8):
        DTYPE_NAME[getattr(torch, _fp8)] = _name
TORCH_DTYPE = {v: k for k, v in DTYPE_NAME.items()}
_16BIT = (torch.float16, torch.bfloat16)
_KV_DTYPES = tuple(DTYPE_NAME)
# Single prefill: q, k and v of one dtype, 16-bit or (sm_90a) float8_e4m3fn.
FP8_E4M3 = getattr(torch, "float8_e4m3fn", None)
PREFILL_DTYPES = _16BIT + ((FP8_E4M3,) if FP8_E4M3 is not None else ())
# The raw CUstream of a device's current stream without building a torch.cuda.Stream
# (what torch's own generated code uses); torch.cuda.current_stream where it is absent.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def tensor(name, t, ndim, *, dtypes=None, device=None):
    """Check that `t` is a CUDA tensor of rank `ndim` (and dtype in `dtypes`, on
    `device`) whose last dimension is contiguous and 16-byte aligned."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"{name}: must be on a CUDA device, is on {t.device}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: on {t.device}, but q is on {device}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype {t.dtype} not supported (expected "
                        f"{' or '.join(str(d) for d in dtypes)})")
    if t.numel():
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), strides "
                             f"are {tuple(t.stride())}")
        if t.data_ptr() % 16:
            raise ValueError(f"{name}: data must start 16-byte aligned (a view at an odd offset?)")
    return t


def qkv(q, k, v, q_ndim, kv_ndim, q_dtypes=_16BIT, kv_dtypes=_KV_DTYPES, v_head_dim=False):
    """Check q, k, v together, on one device: q of `q_dtypes` (16-bit), k of `kv_dtypes`
    (16-bit or fp8), v of k's dtype, k and v of one shape, one head_dim; with
    `v_head_dim` (the prefill kinds) v's head_dim may be smaller than k's (MLA's
    192/128: the library says which pairs it builds)."""
    tensor("q", q, q_ndim, dtypes=q_dtypes)
    dev = q.device
    tensor("k", k, kv_ndim, dtypes=kv_dtypes, device=dev)
    tensor("v", v, kv_ndim, dtypes=(k.dtype,), device=dev)
    if v_head_dim and k.shape[:-1] == v.shape[:-1] and v.shape[-1] < k.shape[-1]:
        pass  # v narrower than q and k
    elif k.shape != v.shape:
        raise ValueError(f"k and v: shapes differ ({tuple(k.shape)} vs {tuple(v.shape)})"
                         + ("; only v's head_dim may be smaller" if v_head_dim else ""))
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k: head_dim {k.shape[-1]} differs from q's {q.shape[-1]}")


def prefill_dtypes(q_dtype, kv_dtype, out_dtype, scales):
    """The output dtype of a single prefill from its input dtypes (k's and v's are one,
    checked by qkv): all three 16-bit and alike (out_dtype None or q's; no scales), or all
    three float8_e4m3fn, out_dtype fp16 or bf16 (None: bf16) and `scales` (q_scale,
    k_scale, v_scale) positive. Reads dtypes only, so it serves traced calls too."""
    if q_dtype not in PREFILL_DTYPES:
        raise TypeError(f"q: dtype {q_dtype} not supported (expected "
                        f"{' or '.join(str(d) for d in PREFILL_DTYPES)})")
    if q_dtype != kv_dtype:
        raise TypeError(f"q and k/v: dtypes {q_dtype} and {kv_dtype} do not mix; prefill takes "
                        f"q, k and v all fp16, all bf16, or all float8_e4m3fn (fp8, with "
                        f"q_scale, k_scale, v_scale)")
    names = ("q_scale", "k_scale", "v_scale")
    if q_dtype != FP8_E4M3:
        if out_dtype is not None and out_dtype != q_dtype:
            raise TypeError(f"out_dtype: a {q_dtype} prefill writes {q_dtype}; out_dtype "
                            f"{out_dtype} is for float8_e4m3fn inputs only")
        for name, x in zip(names, scales):
            if float(x) != 1.0:
                raise ValueError(f"{name}: scales apply to float8_e4m3fn inputs only, q is "
                                 f"{q_dtype} (got {name}={x})")
        return q_dtype
    for name, x in zip(names, scales):
        if not 0.0 < float(x) < float("inf"):
            raise ValueError(f"{name}: expected a positive finite float, got {x}")
    if out_dtype is None:
        return torch.bfloat16
    if out_dtype not in _16BIT:
        raise TypeError(f"out_dtype: fp8 prefill writes torch.float16 or torch.bfloat16, not "
                        f"{out_dtype}")
    return out_dtype


def output(name, given, shape, dtype, device):
    """`given` (checked: shape, dtype, device) or a new tensor."""
    if given is None:
        return torch.empty(shape, dtype=dtype, device=device)
    tensor(name, given, len(shape), dtypes=(dtype,), device=device)
    if tuple(given.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(given.shape)}")
    return given


def optional(name, t, shape, dtype, device):
    """A checked optional input (alibi_slopes, rope_offsets ...): pointer or None."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.device != device or t.dtype != dtype:
        raise ValueError(f"{name}: expected a {dtype} tensor on {device}")
    if tuple(t.shape) != tuple(shape) or not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor of shape {tuple(shape)}, got "
                         f"{tuple(t.shape)}")
    return t.data_ptr()


def kv_strides(name, t, layout):
    """(len, heads, stride_n, stride_h) of k or v [L, H, D] (NHD) or [H, L, D] (HND)."""
    if layout == "NHD":
        return t.shape[0], t.shape[1], t.stride(0), t.stride(1)
    if layout == "HND":
        return t.shape[1], t.shape[0], t.stride(1), t.stride(0)
    raise ValueError(f"kv_layout: {layout!r} is not 'NHD' or 'HND'")


def page_strides(t, layout):
    """(pages, page_size, heads, stride_page, stride_n, stride_h) of a paged cache."""
    if layout == "NHD":  # [pages, page_size, heads, D]
        return t.shape[0], t.shape[1], t.shape[2], t.stride(0), t.stride(1), t.stride(2)
    if layout == "HND":  # [pages, heads, page_size, D]
        return t.shape[0], t.shape[2], t.shape[1], t.stride(0), t.stride(2), t.stride(1)
    raise ValueError(f"kv_layout: {layout!r} is not 'NHD' or 'HND'")


def stream_handle(stream, device):
    """The CUstream for `stream`: None (torch's current stream on `device`), a
    torch.cuda.Stream, or a raw handle (int)."""
    if stream is None:
        if _raw_stream is not None and device.index is not None:
            return _raw_stream(device.index)
        return torch.cuda.current_stream(device).cuda_stream
    if isinstance(stream, int):
        return stream
    return stream.cuda_stream


def keep_for_stream(stream, device, *tensors):
    """Temporaries this package allocated on the current stream (a workspace, a packed
    mask) and that a launch on another `stream` reads: record that stream on them
    (Tensor.record_stream) so that the caching allocator does not hand their memory to
    later work before that launch has run. Nothing to do when stream is None (the launch
    is on the current stream, which orders the reuse)."""
    if stream is None:
        return
    if isinstance(stream, int):
        if _raw_stream is not None and device.index is not None \
                and stream == _raw_stream(device.index):
            return
        stream = torch.cuda.ExternalStream(stream, device=device)
    for t in tensors:
        if t is not None:
            t.record_stream(stream)


class device_of:
    """Make q's device current for the call (fijit uses the thread's current CUDA context);
    a no-op when it already is."""

    def __init__(self, t):
        self.index = t.device.index
        self.prev = None

    def __enter__(self):
        cur = torch.cuda.current_device()
        if self.index is not None and cur != self.index:
            self.prev = cur
            torch.cuda.set_device(self.index)

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.cuda.set_device(self.prev)


def variant_args(values, device):
    """A variant's declared parameters ({name: value}) as (fi_variant_arg array or None,
    count, keepalive). float -> FI_VARG_FLOAT, int -> FI_VARG_INT, tensor -> FI_VARG_PTR
    (its device pointer); the C library refuses a name or type the snippet did not
    declare."""
    if not values:
        return None, 0, ()
    arr = (S.VariantArg * len(values))()
    keep = [arr]
    for i, (name, value) in enumerate(values.items()):
        b = name.encode()
        keep.append(b)
        arr[i].name = b
        if isinstance(value, bool):
            raise TypeError(f"{name}: a bool variant parameter is ambiguous; pass 0 or 1 (int)")
        if isinstance(value, float):
            arr[i].type, arr[i].value.f = S.VARG_FLOAT, value
        elif isinstance(value, int):
            arr[i].type, arr[i].value.i = S.VARG_INT, value
        elif isinstance(value, torch.Tensor):
            if value.device != device:
                raise ValueError(f"{name}: on {value.device}, but q is on {device}")
            keep.append(value)
            arr[i].type, arr[i].value.ptr = S.VARG_PTR, value.data_ptr()
        else:
            raise TypeError(f"{name}: variant parameters are float, int or tensor, got "
                            f"{type(value).__name__}")
    return ctypes.addressof(arr), len(values), tuple(keep)


def workspace_for(given, nbytes, device):
    """The workspace of a one-shot call: `given` (a 1-D uint8 CUDA tensor on `device` the
    caller owns and reuses, at least `nbytes` long) or, when None, a new one."""
    if given is None:
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    if not isinstance(given, torch.Tensor) or given.dtype != torch.uint8 or given.dim() != 1 \
            or given.device != device or not given.is_contiguous():
        raise ValueError(f"workspace: expected a contiguous 1-D uint8 tensor on {device}")
    if given.numel() < nbytes:
        raise ValueError(f"workspace: this call needs {nbytes} bytes, the workspace has "
                         f"{given.numel()}")
    return given
