"""ctypes binding of the parts of include/fijit.h the GPU test and benchmark use.

Loads build/libfijit.so (or $FIJIT_LIB) and runs fi_decode_run on torch
tensors, in the CUDA context torch made current, on torch's current stream.
Struct layouts mirror include/fijit.h field for field (fijit 0.2); ctypes
applies the same C alignment rules. Setting a field a struct does not have
(a name of an older layout, say soft_cap on an args struct) raises
AttributeError instead of being silently ignored.

Names follow the C API: logits_soft_cap (the float cap of an args struct;
spec(..., soft_cap=1) is the spec's on/off flag), max_splits, batch_size;
window_left is a plan argument of both batch kinds; -1 means no window, and
mask="window" needs window_left >= 0.

Custom variants: Fijit.register_variant(name, source) or
Fijit.register_variant_file(path) registers a snippet; name it with
spec(..., variant=name) / prefill_spec(..., variant=name), and pass the values
of its declared parameters ("//! param float scale") as a dict, e.g.
    decode_args(..., variant_args={"sigmoid_scale": 0.5, "sink_logits": tensor})
(also prefill_args, batch_decode_args, and set_variant_args(args, dict) for any
args struct). Python floats go as FI_VARG_FLOAT, ints as FI_VARG_INT, tensors
(anything with data_ptr()) as FI_VARG_PTR; varg_float/varg_int/varg_ptr force a
type.
"""
import ctypes
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FI_KIND_DECODE = 1
DTYPES = {"fp16": 1, "bf16": 2, "fp8_e4m3": 3, "fp8_e5m2": 4}
MASKS = {"none": 0, "window": 2}
POS = {"none": 0, "rope": 1, "alibi": 2}


# fi_variant_arg_type (include/fijit.h)
FI_VARG_FLOAT = 1
FI_VARG_INT = 2
FI_VARG_PTR = 3


class _Strict(ctypes.Structure):
    """A ctypes struct that refuses attributes it has no field for (names starting
    with '_' excepted: Python-side bookkeeping such as _variant_keepalive)."""

    def __setattr__(self, name, value):
        if not name.startswith("_") and name not in {f[0] for f in type(self)._fields_}:
            raise AttributeError(f"{type(self).__name__} has no field {name!r} (fijit 0.2 layout)")
        super().__setattr__(name, value)


class _VariantArgValue(ctypes.Union):
    _fields_ = [("f", ctypes.c_float), ("i", ctypes.c_int), ("ptr", ctypes.c_void_p)]


class VariantArg(ctypes.Structure):
    """fi_variant_arg: {const char *name; fi_variant_arg_type type; union {float f; int i;
    const void *ptr;} value;}"""
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("value", _VariantArgValue)]


def varg_float(x):
    return (FI_VARG_FLOAT, float(x))


def varg_int(x):
    return (FI_VARG_INT, int(x))


def varg_ptr(x):
    """A device pointer: a tensor (its data_ptr()), an int address, or None (NULL)."""
    return (FI_VARG_PTR, x)


def _varg_value(v):
    """(type, python value) for one entry of a variant_args dict."""
    if isinstance(v, tuple) and len(v) == 2 and v[0] in (FI_VARG_FLOAT, FI_VARG_INT, FI_VARG_PTR):
        return v
    if isinstance(v, bool):
        raise TypeError("variant argument: bool is ambiguous; use varg_int")
    if isinstance(v, float):
        return (FI_VARG_FLOAT, v)
    if isinstance(v, int):
        return (FI_VARG_INT, v)
    if v is None or hasattr(v, "data_ptr"):
        return (FI_VARG_PTR, v)
    raise TypeError(f"variant argument of type {type(v).__name__}: give a float, an int, a "
                    "tensor, or varg_float/varg_int/varg_ptr(...)")


def make_variant_args(values):
    """dict name -> value (see _varg_value) -> (ctypes array of VariantArg or None, count,
    keepalive). The array and the keepalive must outlive the launch."""
    if not values:
        return None, 0, ()
    items = list(values.items())
    arr = (VariantArg * len(items))()
    keep = [arr]
    for i, (name, v) in enumerate(items):
        t, x = _varg_value(v)
        b = name.encode()
        keep.append(b)
        arr[i].name = b
        arr[i].type = t
        if t == FI_VARG_FLOAT:
            arr[i].value.f = float(x)
        elif t == FI_VARG_INT:
            arr[i].value.i = int(x)
        else:
            keep.append(x)  # a tensor must stay allocated while the launch may run
            arr[i].value.ptr = x.data_ptr() if hasattr(x, "data_ptr") else x
    return arr, len(items), tuple(keep)


# Args version that first carried variant_args, per args struct (include/*.h).
_VARIANT_ARGS_VERSION = {}


def set_variant_args(args, values):
    """Point args.variant_args / num_variant_args at the values of `values` (a dict, or
    None for none) and raise args.version to the one that carries them. The ctypes
    array is kept alive as an attribute of `args`."""
    arr, n, keep = make_variant_args(values)
    args.variant_args = ctypes.addressof(arr) if arr is not None else None
    args.num_variant_args = n
    args._variant_keepalive = keep
    want = _VARIANT_ARGS_VERSION[type(args).__name__]
    if n and args.version < want:
        args.version = want
    return args


class Spec(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("kind", ctypes.c_int), ("q_dtype", ctypes.c_int),
                ("kv_dtype", ctypes.c_int), ("o_dtype", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("mask", ctypes.c_int), ("pos", ctypes.c_int), ("soft_cap", ctypes.c_int),
                ("variant", ctypes.c_char_p)]


class DecodeArgs(_Strict):
    _fields_ = [("version", ctypes.c_uint), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p),
                ("v", ctypes.c_void_p), ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("num_qo_heads", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("kv_len", ctypes.c_int),
                ("q_stride_h", ctypes.c_int64), ("o_stride_h", ctypes.c_int64),
                ("k_stride_n", ctypes.c_int64), ("k_stride_h", ctypes.c_int64),
                ("v_stride_n", ctypes.c_int64), ("v_stride_h", ctypes.c_int64),
                ("sm_scale", ctypes.c_float), ("logits_soft_cap", ctypes.c_float),
                ("rope_scale", ctypes.c_float), ("rope_theta", ctypes.c_float),
                ("rope_offset", ctypes.c_int), ("window_left", ctypes.c_int),
                ("alibi_slopes", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t), ("max_splits", ctypes.c_int),
                ("k_scale", ctypes.c_float), ("v_scale", ctypes.c_float),
                # version 3
                ("variant_args", ctypes.c_void_p), ("num_variant_args", ctypes.c_int),
                # version 4
                ("sm_count", ctypes.c_int)]


FI_DECODE_ARGS_VERSION = 4
_VARIANT_ARGS_VERSION["DecodeArgs"] = 3


class JitKernel(ctypes.Structure):
    _fields_ = [("function", ctypes.c_void_p),
                ("functions", ctypes.c_void_p * 6),  # FI_JIT_MAX_FUNCTIONS
                ("block_dim", ctypes.c_uint * 3), ("merge_block_dim", ctypes.c_uint * 3),
                ("smem_bytes", ctypes.c_uint), ("param_bytes", ctypes.c_uint),
                ("registers", ctypes.c_int), ("spill_bytes", ctypes.c_int),
                ("key", ctypes.c_uint8 * 16), ("arch", ctypes.c_char * 16)]


class FijitError(RuntimeError):
    pass


class Fijit:
    def __init__(self, lib_path=None):
        path = lib_path or os.environ.get("FIJIT_LIB")
        if not path:
            # The versioned file too: a copy of build/ may have lost the symlinks.
            for name in ("libfijit.so", "libfijit.so.0", "libfijit.so.0.2.0"):
                path = os.path.join(ROOT, "build", name)
                if os.path.exists(path):
                    break
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.fi_last_error.restype = ctypes.c_char_p
        L.fi_jit_ctx_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        L.fi_jit_ctx_free.argtypes = [ctypes.c_void_p]
        L.fi_jit_ctx_free.restype = None
        L.fi_decode_workspace_size.argtypes = [ctypes.POINTER(ctypes.c_size_t),
                                               ctypes.POINTER(Spec), ctypes.POINTER(DecodeArgs)]
        L.fi_decode_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Spec),
                                    ctypes.POINTER(DecodeArgs), ctypes.c_void_p]
        L.fi_jit_get_kernel.argtypes = [ctypes.POINTER(ctypes.POINTER(JitKernel)),
                                        ctypes.c_void_p, ctypes.POINTER(Spec)]
        L.fi_jit_variant_register.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                              ctypes.c_uint]
        L.fi_jit_variant_register_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.c_char_p, ctypes.c_uint]
        L.fi_error_name.restype = ctypes.c_char_p
        L.fi_jit_prewarm.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                     ctypes.POINTER(Spec), ctypes.c_char_p]
        L.fi_error_name.argtypes = [ctypes.c_int]
        self.ctx = ctypes.c_void_p()
        self._check(L.fi_jit_ctx_new(ctypes.byref(self.ctx), None), "fi_jit_ctx_new")

    def _check(self, rc, what):
        if rc != 0:
            msg = self.lib.fi_last_error().decode(errors="replace")
            name = self.lib.fi_error_name(rc).decode(errors="replace")
            raise FijitError(f"{what} failed ({rc} {name}): {msg}")

    def register_variant(self, name, source, replace=False):
        """fi_jit_variant_register; replace=True passes FI_VARIANT_REPLACE."""
        self._check(self.lib.fi_jit_variant_register(self.ctx, name.encode(), source.encode(),
                                                     1 if replace else 0),
                    f"fi_jit_variant_register({name})")
        return name

    def register_variant_file(self, path, name=None, replace=False):
        """fi_jit_variant_register_file; returns the variant's name (name, or the file
        name up to its first '.')."""
        self._check(self.lib.fi_jit_variant_register_file(
            self.ctx, name.encode() if name else None, os.fsencode(path), 1 if replace else 0),
            f"fi_jit_variant_register_file({path})")
        return name or os.path.basename(path).split(".")[0]

    def close(self):
        if self.ctx:
            self.lib.fi_jit_ctx_free(self.ctx)
            self.ctx = ctypes.c_void_p()

    @staticmethod
    def spec(dtype="fp16", head_dim=128, mask="none", pos="none", soft_cap=0, kv_dtype=None,
             kind=FI_KIND_DECODE, variant=None):
        d = DTYPES[dtype]
        kv = DTYPES[kv_dtype] if kv_dtype else d
        return Spec(1, kind, d, kv, d, head_dim, MASKS[mask], POS[pos], int(soft_cap),
                    variant.encode() if variant else None)

    def kernel(self, spec):
        """The loaded fi_jit_kernel for spec (a copy of the borrowed struct)."""
        out = ctypes.POINTER(JitKernel)()
        self._check(self.lib.fi_jit_get_kernel(ctypes.byref(out), self.ctx, ctypes.byref(spec)),
                    "fi_jit_get_kernel")
        k = JitKernel()
        ctypes.pointer(k)[0] = out[0]
        return k

    def prewarm(self, spec, arch=None):
        """fi_jit_prewarm: compile `spec` into the cache for `arch` (None: the context's)
        without loading it; returns "compiled" or "cached". Thread-safe (ctypes releases
        the GIL), so a thread pool can warm many specs at once."""
        out = ctypes.c_int(-1)
        self._check(self.lib.fi_jit_prewarm(ctypes.byref(out), self.ctx, ctypes.byref(spec),
                                            arch.encode() if arch else None),
                    "fi_jit_prewarm")
        return "compiled" if out.value == 0 else "cached"

    def workspace_size(self, spec, args):
        n = ctypes.c_size_t()
        self._check(self.lib.fi_decode_workspace_size(ctypes.byref(n), ctypes.byref(spec),
                                                      ctypes.byref(args)),
                    "fi_decode_workspace_size")
        return n.value

    def run(self, spec, args, stream=0):
        self._check(self.lib.fi_decode_run(self.ctx, ctypes.byref(spec), ctypes.byref(args),
                                           ctypes.c_void_p(stream)), "fi_decode_run")


def decode_args(q, k, v, o, lse=None, *, layout, sm_scale=0.0, logits_soft_cap=0.0,
                rope_scale=0.0, rope_theta=0.0, rope_offset=0, window_left=-1, alibi_slopes=None,
                max_splits=0, k_scale=0.0, v_scale=0.0, sm_count=0, variant_args=None):
    """Args for q [H, D], o [H, D] and k/v in `layout` "NHD" [L, Hkv, D] or "HND" [Hkv, L, D].
    variant_args: dict of the variant's declared parameters (see set_variant_args)."""
    if layout == "NHD":
        kv_len, hkv = k.shape[0], k.shape[1]
        ksn, ksh, vsn, vsh = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    else:
        hkv, kv_len = k.shape[0], k.shape[1]
        ksh, ksn, vsh, vsn = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    a = DecodeArgs()
    a.version = FI_DECODE_ARGS_VERSION
    a.k_scale, a.v_scale = k_scale, v_scale
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.num_qo_heads, a.num_kv_heads, a.kv_len = q.shape[0], hkv, kv_len
    a.q_stride_h, a.o_stride_h = q.stride(0), o.stride(0)
    a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = ksn, ksh, vsn, vsh
    a.sm_scale, a.logits_soft_cap = sm_scale, logits_soft_cap
    a.rope_scale, a.rope_theta, a.rope_offset = rope_scale, rope_theta, rope_offset
    a.window_left = window_left
    a.alibi_slopes = alibi_slopes.data_ptr() if alibi_slopes is not None else None
    a.max_splits = max_splits
    a.sm_count = sm_count
    set_variant_args(a, variant_args)
    return a


# ---- prefill (include/fijit_prefill.h); appended by the prefill work -----------------
FI_KIND_PREFILL = 3
FI_KIND_BATCH_PREFILL_RAGGED = 4
FI_KIND_BATCH_PREFILL_PAGED = 5
PREFILL_KINDS = {"single": FI_KIND_PREFILL, "ragged": FI_KIND_BATCH_PREFILL_RAGGED,
                 "paged": FI_KIND_BATCH_PREFILL_PAGED}
PREFILL_MASKS = {"none": 0, "causal": 1, "window": 2, "custom": 3}

_i64 = ctypes.c_int64


class PrefillArgs(_Strict):
    _fields_ = [("version", ctypes.c_uint), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p),
                ("v", ctypes.c_void_p), ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("num_qo_heads", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("qo_len", ctypes.c_int), ("kv_len", ctypes.c_int),
                ("q_stride_n", _i64), ("q_stride_h", _i64), ("o_stride_n", _i64),
                ("o_stride_h", _i64), ("k_stride_n", _i64), ("k_stride_h", _i64),
                ("v_stride_n", _i64), ("v_stride_h", _i64),
                ("sm_scale", ctypes.c_float), ("logits_soft_cap", ctypes.c_float),
                ("rope_scale", ctypes.c_float), ("rope_theta", ctypes.c_float),
                ("rope_offset", ctypes.c_int), ("window_left", ctypes.c_int),
                ("alibi_slopes", ctypes.c_void_p), ("custom_mask", ctypes.c_void_p),
                ("cta_tile_q", ctypes.c_int),
                # version 2
                ("variant_args", ctypes.c_void_p), ("num_variant_args", ctypes.c_int),
                # version 3
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)]


FI_PREFILL_ARGS_VERSION = 3
_VARIANT_ARGS_VERSION["PrefillArgs"] = 2


class PrefillPlanArgs(_Strict):
    """fi_batch_prefill_plan_args (version 2: window_left after page_size)."""
    _fields_ = [("version", ctypes.c_uint), ("batch_size", ctypes.c_int),
                ("qo_indptr", ctypes.POINTER(ctypes.c_int32)),
                ("kv_indptr", ctypes.POINTER(ctypes.c_int32)),
                ("kv_last_page_len", ctypes.POINTER(ctypes.c_int32)),
                ("num_qo_heads", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("page_size", ctypes.c_int), ("window_left", ctypes.c_int),
                ("sm_count", ctypes.c_int), ("cta_tile_q", ctypes.c_int)]


FI_BATCH_PREFILL_PLAN_ARGS_VERSION = 2


class BatchPrefillArgs(_Strict):
    """fi_batch_prefill_args, version 4 (3 is accepted too: no rope_offsets). Build it
    field by field: it starts at FI_BATCH_PREFILL_ARGS_VERSION, all else 0 / NULL."""
    _fields_ = [("version", ctypes.c_uint), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p),
                ("v", ctypes.c_void_p), ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("qo_indptr", ctypes.c_void_p), ("kv_indptr", ctypes.c_void_p),
                ("kv_indices", ctypes.c_void_p), ("kv_last_page_len", ctypes.c_void_p),
                ("q_stride_n", _i64), ("q_stride_h", _i64), ("o_stride_n", _i64),
                ("o_stride_h", _i64),
                ("k_stride_page", _i64), ("k_stride_n", _i64), ("k_stride_h", _i64),
                ("v_stride_page", _i64), ("v_stride_n", _i64), ("v_stride_h", _i64),
                ("sm_scale", ctypes.c_float), ("logits_soft_cap", ctypes.c_float),
                ("rope_scale", ctypes.c_float), ("rope_theta", ctypes.c_float),
                ("rope_offset", ctypes.c_int),
                ("alibi_slopes", ctypes.c_void_p), ("custom_mask", ctypes.c_void_p),
                ("custom_mask_offsets", ctypes.c_void_p),
                ("variant_args", ctypes.c_void_p), ("num_variant_args", ctypes.c_int),
                ("rope_offsets", ctypes.c_void_p)]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if not args and "version" not in kw:
            self.version = FI_BATCH_PREFILL_ARGS_VERSION


FI_BATCH_PREFILL_ARGS_VERSION = 4
_VARIANT_ARGS_VERSION["BatchPrefillArgs"] = 3


def upload_plan(fj, kind, plan, workspace=None, device="cuda"):
    """The rest of a batch plan's lifecycle, the same for both batch kinds (`kind`
    "fi_batch_decode" or "fi_batch_prefill"): <kind>_plan_workspace_size, a workspace
    (`workspace` when it is large enough, else a new uint8 tensor), <kind>_plan_upload.
    Returns the workspace; on failure frees the plan and raises."""
    import torch
    L = fj.lib
    try:
        n = ctypes.c_size_t()
        fj._check(getattr(L, kind + "_plan_workspace_size")(ctypes.byref(n), plan),
                  kind + "_plan_workspace_size")
        ws = workspace
        if ws is None or ws.numel() < n.value:
            ws = torch.empty(max(n.value, 16), dtype=torch.uint8, device=device)
        fj._check(getattr(L, kind + "_plan_upload")(plan, ctypes.c_void_p(ws.data_ptr()), n.value),
                  kind + "_plan_upload")
    except Exception:
        getattr(L, kind + "_plan_free")(plan)
        raise
    return ws


def prefill_spec(kind="single", dtype="fp16", head_dim=128, mask="none", pos="none", soft_cap=0,
                 variant=None):
    d = DTYPES[dtype]
    return Spec(1, PREFILL_KINDS[kind], d, d, d, head_dim, PREFILL_MASKS[mask], POS[pos],
                int(soft_cap), variant.encode() if variant else None)


class Prefill:
    """fi_prefill_run / fi_batch_prefill_* on a Fijit instance's library and context."""

    def __init__(self, fj):
        self.fj = fj
        L = fj.lib
        L.fi_prefill_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Spec),
                                     ctypes.POINTER(PrefillArgs), ctypes.c_void_p]
        L.fi_prefill_workspace_size.argtypes = [ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.POINTER(Spec), ctypes.POINTER(PrefillArgs)]
        L.fi_batch_prefill_workspace_size.argtypes = [ctypes.POINTER(ctypes.c_size_t),
                                                      ctypes.POINTER(Spec),
                                                      ctypes.POINTER(PrefillPlanArgs)]
        L.fi_batch_prefill_plan_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                                ctypes.POINTER(Spec),
                                                ctypes.POINTER(PrefillPlanArgs)]
        L.fi_batch_prefill_plan_workspace_size.argtypes = [ctypes.POINTER(ctypes.c_size_t),
                                                           ctypes.c_void_p]
        L.fi_batch_prefill_plan_upload.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                   ctypes.c_size_t]
        L.fi_batch_prefill_plan_free.argtypes = [ctypes.c_void_p]
        L.fi_batch_prefill_plan_free.restype = None
        L.fi_batch_prefill_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.POINTER(BatchPrefillArgs), ctypes.c_void_p]

    def run(self, spec, args, stream=0):
        self.fj._check(self.fj.lib.fi_prefill_run(self.fj.ctx, ctypes.byref(spec),
                                                  ctypes.byref(args), ctypes.c_void_p(stream)),
                       "fi_prefill_run")

    def workspace(self, spec, args, device="cuda"):
        """A workspace of fi_prefill_workspace_size bytes set into args (None when 0);
        keep the returned tensor alive while args are used."""
        import torch
        n = ctypes.c_size_t()
        self.fj._check(self.fj.lib.fi_prefill_workspace_size(ctypes.byref(n), ctypes.byref(spec),
                                                             ctypes.byref(args)),
                       "fi_prefill_workspace_size")
        if not n.value:
            return None
        ws = torch.empty(n.value, dtype=torch.uint8, device=device)
        args.workspace, args.workspace_bytes = ws.data_ptr(), n.value
        return ws

    def plan(self, spec, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, *,
             kv_last_page_len=None, page_size=16, window_left=-1, cta_tile_q=0, sm_count=0,
             device="cuda", workspace=None):
        """fi_batch_prefill_plan_new, _plan_workspace_size and _plan_upload: returns (plan
        handle, workspace tensor); host lists in, as ints. window_left: the plan's (-1: no
        window; mask="window" needs >= 0). `workspace`: a uint8 tensor to reuse when it is
        large enough (else a new one is made)."""
        b = len(qo_indptr) - 1
        arr = ctypes.c_int32 * (b + 1)
        qo = arr(*qo_indptr)
        kv = arr(*kv_indptr)
        last = (ctypes.c_int32 * max(b, 1))(*(kv_last_page_len or [0] * b))
        a = PrefillPlanArgs(FI_BATCH_PREFILL_PLAN_ARGS_VERSION, b, qo, kv, last, num_qo_heads,
                            num_kv_heads, page_size, window_left, sm_count, cta_tile_q)
        plan = ctypes.c_void_p()
        self.fj._check(self.fj.lib.fi_batch_prefill_plan_new(ctypes.byref(plan), self.fj.ctx,
                                                             ctypes.byref(spec), ctypes.byref(a)),
                       "fi_batch_prefill_plan_new")
        return plan, upload_plan(self.fj, "fi_batch_prefill", plan, workspace, device)

    def plan_free(self, plan):
        self.fj.lib.fi_batch_prefill_plan_free(plan)

    def batch_run(self, plan, args, stream=0):
        self.fj._check(self.fj.lib.fi_batch_prefill_run(self.fj.ctx, plan, ctypes.byref(args),
                                                        ctypes.c_void_p(stream)),
                       "fi_batch_prefill_run")


def _ptr(t):
    return t.data_ptr() if t is not None else None


def prefill_args(q, k, v, o, lse=None, *, layout="NHD", sm_scale=0.0, logits_soft_cap=0.0,
                 rope_scale=0.0, rope_theta=0.0, rope_offset=0, window_left=-1,
                 alibi_slopes=None, custom_mask=None, cta_tile_q=0, variant_args=None):
    """q, o [Lq, H, D]; k, v "NHD" [Lk, Hkv, D] or "HND" [Hkv, Lk, D].
    variant_args: dict of the variant's declared parameters (see set_variant_args)."""
    if layout == "NHD":
        kv_len, hkv = k.shape[0], k.shape[1]
        ksn, ksh, vsn, vsh = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    else:
        hkv, kv_len = k.shape[0], k.shape[1]
        ksh, ksn, vsh, vsn = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    a = PrefillArgs()
    a.version = FI_PREFILL_ARGS_VERSION
    a.q, a.k, a.v, a.o, a.lse = _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse)
    a.num_qo_heads, a.num_kv_heads, a.qo_len, a.kv_len = q.shape[1], hkv, q.shape[0], kv_len
    a.q_stride_n, a.q_stride_h, a.o_stride_n, a.o_stride_h = (q.stride(0), q.stride(1),
                                                              o.stride(0), o.stride(1))
    a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = ksn, ksh, vsn, vsh
    a.sm_scale, a.logits_soft_cap = sm_scale, logits_soft_cap
    a.rope_scale, a.rope_theta, a.rope_offset = rope_scale, rope_theta, rope_offset
    a.window_left = window_left
    a.alibi_slopes, a.custom_mask = _ptr(alibi_slopes), _ptr(custom_mask)
    a.cta_tile_q = cta_tile_q
    set_variant_args(a, variant_args)
    return a


# ---- batch decode over a paged KV cache, merge states (include/fijit_batch_decode.h) ----
FI_KIND_BATCH_DECODE = 2


class BatchDecodePlanArgs(_Strict):
    """fi_batch_decode_plan_args (version 1)."""
    _fields_ = [("version", ctypes.c_uint), ("batch_size", ctypes.c_int),
                ("kv_indptr", ctypes.c_void_p), ("kv_last_page_len", ctypes.c_void_p),
                ("num_qo_heads", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("page_size", ctypes.c_int), ("window_left", ctypes.c_int),
                ("max_splits", ctypes.c_int), ("sm_count", ctypes.c_int)]


FI_BATCH_DECODE_PLAN_ARGS_VERSION = 1


class BatchDecodeArgs(_Strict):
    """fi_batch_decode_args, version 3 (the only one accepted)."""
    _fields_ = [("version", ctypes.c_uint), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p),
                ("v", ctypes.c_void_p), ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("kv_indices", ctypes.c_void_p)] + [
        (n, ctypes.c_int64) for n in ("q_stride_b", "q_stride_h", "o_stride_b", "o_stride_h",
                                      "k_stride_page", "k_stride_n", "k_stride_h",
                                      "v_stride_page", "v_stride_n", "v_stride_h")] + [
        ("sm_scale", ctypes.c_float), ("logits_soft_cap", ctypes.c_float),
        ("rope_scale", ctypes.c_float), ("rope_theta", ctypes.c_float),
        ("rope_offsets", ctypes.c_void_p), ("alibi_slopes", ctypes.c_void_p),
        ("k_scale", ctypes.c_float), ("v_scale", ctypes.c_float),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        ("variant_args", ctypes.c_void_p), ("num_variant_args", ctypes.c_int)]


FI_BATCH_DECODE_ARGS_VERSION = 3
_VARIANT_ARGS_VERSION["BatchDecodeArgs"] = 3


class MergeStatesArgs(_Strict):
    """fi_merge_states_args (version 1; lse / lse_out were s / s_out before 0.2)."""
    _fields_ = [("version", ctypes.c_uint), ("v", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("v_out", ctypes.c_void_p), ("lse_out", ctypes.c_void_p),
                ("seq_len", ctypes.c_int), ("num_states", ctypes.c_int),
                ("num_heads", ctypes.c_int)] + [
        (n, ctypes.c_int64) for n in ("v_stride_seq", "v_stride_state", "v_stride_h",
                                      "lse_stride_seq", "lse_stride_state", "v_out_stride_seq",
                                      "v_out_stride_h")]


class BatchDecode:
    """fi_batch_decode_* on torch tensors. plan() returns (plan handle, workspace tensor)."""

    def __init__(self, fj):
        self.fj = fj
        L = fj.lib
        L.fi_batch_decode_plan_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                               ctypes.POINTER(Spec),
                                               ctypes.POINTER(BatchDecodePlanArgs)]
        L.fi_batch_decode_plan_workspace_size.argtypes = [ctypes.POINTER(ctypes.c_size_t),
                                                          ctypes.c_void_p]
        L.fi_batch_decode_plan_describe.argtypes = [ctypes.POINTER(ctypes.c_int),
                                                    ctypes.POINTER(ctypes.c_int), ctypes.c_void_p]
        L.fi_batch_decode_plan_upload.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        L.fi_batch_decode_plan_free.argtypes = [ctypes.c_void_p]
        L.fi_batch_decode_plan_free.restype = None
        L.fi_batch_decode_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.POINTER(BatchDecodeArgs), ctypes.c_void_p]
        L.fi_merge_states.argtypes = [ctypes.c_void_p, ctypes.POINTER(Spec),
                                      ctypes.POINTER(MergeStatesArgs), ctypes.c_void_p]

    def plan(self, spec, indptr, last_page_len, num_qo_heads, num_kv_heads, page_size, *,
             window_left=-1, max_splits=0, sm_count=0):
        B = len(last_page_len)
        ip = (ctypes.c_int32 * (B + 1))(*[int(x) for x in indptr])
        lp = (ctypes.c_int32 * B)(*[int(x) for x in last_page_len])
        info = BatchDecodePlanArgs(FI_BATCH_DECODE_PLAN_ARGS_VERSION, B,
                                   ctypes.cast(ip, ctypes.c_void_p),
                                   ctypes.cast(lp, ctypes.c_void_p), num_qo_heads, num_kv_heads,
                                   page_size, window_left, max_splits, sm_count)
        plan = ctypes.c_void_p()
        L = self.fj.lib
        self.fj._check(L.fi_batch_decode_plan_new(ctypes.byref(plan), self.fj.ctx,
                                                  ctypes.byref(spec), ctypes.byref(info)),
                       "fi_batch_decode_plan_new")
        return plan, upload_plan(self.fj, "fi_batch_decode", plan)

    def describe(self, plan):
        a, b = ctypes.c_int(), ctypes.c_int()
        self.fj._check(self.fj.lib.fi_batch_decode_plan_describe(ctypes.byref(a), ctypes.byref(b),
                                                                 plan), "describe")
        return a.value, b.value

    def free(self, plan):
        self.fj.lib.fi_batch_decode_plan_free(plan)

    def run(self, plan, args, stream=0):
        self.fj._check(self.fj.lib.fi_batch_decode_run(self.fj.ctx, plan, ctypes.byref(args),
                                                       ctypes.c_void_p(stream)),
                       "fi_batch_decode_run")

    def merge_states(self, dtype, v, lse, v_out, lse_out=None, stream=0):
        """v [seq, n, H, D], lse [seq, n, H] float32, v_out [seq, H, D], lse_out [seq, H].
        The spec is the batch-decode spec of (dtype, D): fi_merge_states reads its o_dtype
        and head_dim."""
        a = MergeStatesArgs()
        a.version = 1
        a.v, a.lse, a.v_out = v.data_ptr(), lse.data_ptr(), v_out.data_ptr()
        a.lse_out = lse_out.data_ptr() if lse_out is not None else None
        a.seq_len, a.num_states, a.num_heads = v.shape[0], v.shape[1], v.shape[2]
        a.v_stride_seq, a.v_stride_state, a.v_stride_h = v.stride(0), v.stride(1), v.stride(2)
        a.lse_stride_seq, a.lse_stride_state = lse.stride(0), lse.stride(1)
        a.v_out_stride_seq, a.v_out_stride_h = v_out.stride(0), v_out.stride(1)
        spec = Fijit.spec(dtype, v.shape[3], kind=FI_KIND_BATCH_DECODE)
        self.fj._check(self.fj.lib.fi_merge_states(self.fj.ctx, ctypes.byref(spec),
                                                   ctypes.byref(a), ctypes.c_void_p(stream)),
                       "fi_merge_states")


def batch_decode_args(q, k_cache, v_cache, kv_indices, o, lse, workspace, *, layout,
                      sm_scale=0.0, logits_soft_cap=0.0, rope_scale=0.0, rope_theta=0.0,
                      rope_offsets=None, alibi_slopes=None, k_scale=0.0, v_scale=0.0,
                      variant_args=None):
    """q/o [B, H, D]; caches NHD [P, page, Hkv, D] or HND [P, Hkv, page, D] (any strides).
    variant_args: dict of the variant's declared parameters (see set_variant_args)."""
    a = BatchDecodeArgs()
    a.version = FI_BATCH_DECODE_ARGS_VERSION
    a.q, a.k, a.v, a.o = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), o.data_ptr()
    a.kv_indices = kv_indices.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.q_stride_b, a.q_stride_h = q.stride(0), q.stride(1)
    a.o_stride_b, a.o_stride_h = o.stride(0), o.stride(1)
    for name, c in (("k", k_cache), ("v", v_cache)):
        if layout == "NHD":
            sp, sn, sh = c.stride(0), c.stride(1), c.stride(2)
        else:
            sp, sh, sn = c.stride(0), c.stride(1), c.stride(2)
        setattr(a, name + "_stride_page", sp)
        setattr(a, name + "_stride_h", sh)
        setattr(a, name + "_stride_n", sn)
    a.sm_scale, a.logits_soft_cap = sm_scale, logits_soft_cap
    a.rope_scale, a.rope_theta = rope_scale, rope_theta
    a.rope_offsets = rope_offsets.data_ptr() if rope_offsets is not None else None
    a.alibi_slopes = alibi_slopes.data_ptr() if alibi_slopes is not None else None
    a.k_scale, a.v_scale = k_scale, v_scale
    a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    set_variant_args(a, variant_args)
    return a
