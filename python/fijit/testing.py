"""Test and benchmark helpers over the fijit Python package's ctypes binding.

The repo has ONE ctypes binding of include/fijit.h: python/fijit (struct layouts in
fijit/_structs.py, checked field by field against the header by `make test-python`;
library loading, version check and prototypes in fijit/_lib.py; error mapping in
fijit/errors.py). This module defines no struct and no prototype of its own: it gives
the GPU tests (tests/gpu/) and the benchmarks (bench/) a raw, C-shaped layer over that
binding, where they build the args structs field by field (pointers, strides, forced
tiles, deliberately wrong variant arguments) and launch them as the C API would, on
torch tensors, in the CUDA context torch made current. Both import it from the package
(`from fijit.testing import Fijit`), the tree's python/ on PYTHONPATH (scripts/gpu/run.sh
exports it) or the package installed; it needs no torch to import.

Fijit(lib_path) binds one library file (default: $FIJIT_LIB, then $FIJIT_LIBRARY, then
build/libfijit.so): a fijit.Context(library=path) whose calls all go to that file, so a
benchmark can hold several builds in one process (bench_prefill.py --config NAME,LIB).
Setting a field a struct does not have (a name of an older layout, say soft_cap on an
args struct) raises AttributeError (the package's structs have no __dict__).

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
type (the package's own functions take only well-typed values; the tests also send
wrong ones on purpose).
"""
import ctypes
import glob
import os
import time

# The source tree, when this is its python/fijit: its build/ holds the default library.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fijit  # noqa: E402
from fijit import _structs as S  # noqa: E402
from fijit.errors import check as _pkg_check  # noqa: E402

FI_KIND_DECODE = S.KIND["decode"]
DTYPES = dict(S.DTYPE)
MASKS = {"none": S.MASK["none"], "window": S.MASK["window"]}
POS = dict(S.POS)

# fi_variant_arg_type (include/fijit.h)
FI_VARG_FLOAT = S.VARG_FLOAT
FI_VARG_INT = S.VARG_INT
FI_VARG_PTR = S.VARG_PTR

# The package's structs, under the names the tests use.
Spec = S.JitSpec
JitKernel = S.JitKernel
VariantArg = S.VariantArg
DecodeArgs = S.DecodeArgs
PrefillArgs = S.PrefillArgs
PrefillPlanArgs = S.BatchPrefillPlanArgs
BatchDecodePlanArgs = S.BatchDecodePlanArgs
BatchDecodeArgs = S.BatchDecodeArgs
MergeStatesArgs = S.MergeStatesArgs

FI_DECODE_ARGS_VERSION = S.DecodeArgs.VERSION
FI_PREFILL_ARGS_VERSION = S.PrefillArgs.VERSION
FI_BATCH_PREFILL_PLAN_ARGS_VERSION = S.BatchPrefillPlanArgs.VERSION
FI_BATCH_PREFILL_ARGS_VERSION = S.BatchPrefillArgs.VERSION
FI_BATCH_DECODE_PLAN_ARGS_VERSION = S.BatchDecodePlanArgs.VERSION
FI_BATCH_DECODE_ARGS_VERSION = S.BatchDecodeArgs.VERSION


def _new(cls, **fields):
    """A zeroed struct at the package's version of it, with `fields` set (the tests give
    every field they mean)."""
    s = cls(**fields)
    s.version = cls.VERSION
    return s

# A failed call raises the package's exceptions: fijit.Error and its per-code
# subclasses (CompileError, InvalidError, ...), carrying fi_last_error()'s message.
FijitError = fijit.Error


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
_VARIANT_ARGS_VERSION = {S.DecodeArgs: 3, S.PrefillArgs: 2, S.BatchDecodeArgs: 3,
                         S.BatchPrefillArgs: 3}


def set_variant_args(args, values):
    """Point args.variant_args / num_variant_args at the values of `values` (a dict, or
    None for none) and raise args.version to the one that carries them. The ctypes
    array is kept alive by `args` (its _keepalive)."""
    arr, n, keep = make_variant_args(values)
    args.variant_args = ctypes.addressof(arr) if arr is not None else None
    args.num_variant_args = n
    args._keepalive = keep
    want = _VARIANT_ARGS_VERSION[type(args)]
    if n and args.version < want:
        args.version = want
    return args


def _default_library():
    path = os.environ.get("FIJIT_LIB") or os.environ.get("FIJIT_LIBRARY")
    if path:
        return path
    # The versioned file too: a copy of build/ may have lost the symlinks.
    versioned = sorted(glob.glob(os.path.join(ROOT, "build", "libfijit.so.*.*.*")))
    for name in ["libfijit.so", "libfijit.so.0"] + versioned:
        path = os.path.join(ROOT, "build", name)
        if os.path.exists(path):
            break
    return path


class Fijit:
    """One library file and one fijit context on it (fijit.Context(library=path), with
    the library's default options, as fi_jit_ctx_new(&ctx, NULL))."""

    def __init__(self, lib_path=None):
        self.path = lib_path or _default_library()
        self.context = fijit.Context(library=self.path)
        self.lib = self.context.lib
        self.ctx = self.context.handle

    def _check(self, rc, what):
        if rc != 0:
            if rc > 0:
                raise FijitError(f"returned {rc}, expected 0", code=rc, call=what)
            _pkg_check(rc, what, self.lib)

    def register_variant(self, name, source, replace=False):
        """fi_jit_variant_register; replace=True passes FI_VARIANT_REPLACE."""
        self._check(self.lib.fi_jit_variant_register(
            self.ctx, name.encode(), source.encode(), S.VARIANT_REPLACE if replace else 0),
            f"fi_jit_variant_register({name})")
        return name

    def register_variant_file(self, path, name=None, replace=False):
        """fi_jit_variant_register_file; returns the variant's name (name, or the file
        name up to its first '.')."""
        self._check(self.lib.fi_jit_variant_register_file(
            self.ctx, name.encode() if name else None, os.fsencode(path),
            S.VARIANT_REPLACE if replace else 0),
            f"fi_jit_variant_register_file({path})")
        return name or os.path.basename(path).split(".")[0]

    def close(self):
        if self.ctx:
            self.context.close()
            self.ctx = ctypes.c_void_p()

    @staticmethod
    def spec(dtype="fp16", head_dim=128, mask="none", pos="none", soft_cap=0, kv_dtype=None,
             kind=FI_KIND_DECODE, variant=None):
        d = DTYPES[dtype]
        kv = DTYPES[kv_dtype] if kv_dtype else d
        return _new(Spec, kind=kind, q_dtype=d, kv_dtype=kv, o_dtype=d, head_dim=head_dim,
                    mask=MASKS[mask], pos=POS[pos], soft_cap=int(soft_cap),
                    variant=variant.encode() if variant else None)

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


def _ptr(t):
    return t.data_ptr() if t is not None else None


def seeded_generator(test):
    """(seed, CUDA torch.Generator) for a test run: the seed from $FIJIT_TEST_SEED, else
    the clock, printed so that a run can be replayed."""
    import torch
    seed = int(os.environ.get("FIJIT_TEST_SEED", time.time_ns() % (2**31)))
    print(f"{test}: seed {seed} (FIJIT_TEST_SEED={seed} replays)", flush=True)
    torch.cuda.init()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return seed, gen


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
    a.lse = _ptr(lse)
    a.num_qo_heads, a.num_kv_heads, a.kv_len = q.shape[0], hkv, kv_len
    a.q_stride_h, a.o_stride_h = q.stride(0), o.stride(0)
    a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = ksn, ksh, vsn, vsh
    a.sm_scale, a.logits_soft_cap = sm_scale, logits_soft_cap
    a.rope_scale, a.rope_theta, a.rope_offset = rope_scale, rope_theta, rope_offset
    a.window_left = window_left
    a.alibi_slopes = _ptr(alibi_slopes)
    a.max_splits = max_splits
    a.sm_count = sm_count
    set_variant_args(a, variant_args)
    return a


# ---- prefill (include/fijit_prefill.h) -------------------------------------------------
FI_KIND_PREFILL = S.KIND["prefill"]
FI_KIND_BATCH_PREFILL_RAGGED = S.KIND["batch_prefill_ragged"]
FI_KIND_BATCH_PREFILL_PAGED = S.KIND["batch_prefill_paged"]
PREFILL_KINDS = {"single": FI_KIND_PREFILL, "ragged": FI_KIND_BATCH_PREFILL_RAGGED,
                 "paged": FI_KIND_BATCH_PREFILL_PAGED}
PREFILL_MASKS = dict(S.MASK)


def BatchPrefillArgs(*args, **kw):
    """A fi_batch_prefill_args (the package's struct) at FI_BATCH_PREFILL_ARGS_VERSION
    (the only one accepted), all else 0 / NULL: build it field by field."""
    a = S.BatchPrefillArgs(*args, **kw)
    if not args and "version" not in kw:
        a.version = FI_BATCH_PREFILL_ARGS_VERSION
    return a


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
                 variant=None, out_dtype=None, kv_dtype=None):
    """q = kv = o = dtype unless kv_dtype / out_dtype name others (fp8 prefill:
    dtype="fp8_e4m3", out_dtype "fp16" or "bf16")."""
    d = DTYPES[dtype]
    return _new(Spec, kind=PREFILL_KINDS[kind], q_dtype=d,
                kv_dtype=DTYPES[kv_dtype] if kv_dtype else d,
                o_dtype=DTYPES[out_dtype] if out_dtype else d, head_dim=head_dim,
                mask=PREFILL_MASKS[mask], pos=POS[pos],
                soft_cap=int(soft_cap), variant=variant.encode() if variant else None)


class Prefill:
    """fi_prefill_run / fi_batch_prefill_* on a Fijit instance's library and context."""

    def __init__(self, fj):
        self.fj = fj

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
        a = _new(PrefillPlanArgs, batch_size=b,
                 qo_indptr=qo, kv_indptr=kv, kv_last_page_len=last, num_qo_heads=num_qo_heads,
                 num_kv_heads=num_kv_heads, page_size=page_size, window_left=window_left,
                 sm_count=sm_count, cta_tile_q=cta_tile_q)
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


def prefill_args(q, k, v, o, lse=None, *, layout="NHD", sm_scale=0.0, logits_soft_cap=0.0,
                 rope_scale=0.0, rope_theta=0.0, rope_offset=0, window_left=-1,
                 alibi_slopes=None, custom_mask=None, cta_tile_q=0, variant_args=None,
                 q_scale=0.0, k_scale=0.0, v_scale=0.0):
    """q, o [Lq, H, D]; k, v "NHD" [Lk, Hkv, D] or "HND" [Hkv, Lk, D].
    variant_args: dict of the variant's declared parameters (see set_variant_args).
    q_scale, k_scale, v_scale: fp8 q/k/v hold the real values divided by them (0: 1);
    fp8 also needs a workspace (Prefill.workspace)."""
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
    a.q_scale, a.k_scale, a.v_scale = q_scale, k_scale, v_scale
    set_variant_args(a, variant_args)
    return a


# ---- batch decode over a paged KV cache, merge states (include/fijit_batch_decode.h) ----
FI_KIND_BATCH_DECODE = S.KIND["batch_decode"]


class BatchDecode:
    """fi_batch_decode_* on torch tensors. plan() returns (plan handle, workspace tensor)."""

    def __init__(self, fj):
        self.fj = fj

    def plan(self, spec, indptr, last_page_len, num_qo_heads, num_kv_heads, page_size, *,
             window_left=-1, max_splits=0, sm_count=0):
        B = len(last_page_len)
        ip = (ctypes.c_int32 * (B + 1))(*[int(x) for x in indptr])
        lp = (ctypes.c_int32 * B)(*[int(x) for x in last_page_len])
        info = _new(BatchDecodePlanArgs, batch_size=B,
                    kv_indptr=ip, kv_last_page_len=lp, num_qo_heads=num_qo_heads,
                    num_kv_heads=num_kv_heads, page_size=page_size, window_left=window_left,
                    max_splits=max_splits, sm_count=sm_count)
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
        a.version = S.MergeStatesArgs.VERSION
        a.v, a.lse, a.v_out = v.data_ptr(), lse.data_ptr(), v_out.data_ptr()
        a.lse_out = _ptr(lse_out)
        a.seq_len, a.num_states, a.num_heads = v.shape[0], v.shape[1], v.shape[2]
        a.v_stride_n, a.v_stride_state, a.v_stride_h = v.stride(0), v.stride(1), v.stride(2)
        a.lse_stride_n, a.lse_stride_state = lse.stride(0), lse.stride(1)
        a.v_out_stride_n, a.v_out_stride_h = v_out.stride(0), v_out.stride(1)
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
    a.lse = _ptr(lse)
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
    a.rope_offsets = _ptr(rope_offsets)
    a.alibi_slopes = _ptr(alibi_slopes)
    a.k_scale, a.v_scale = k_scale, v_scale
    a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    set_variant_args(a, variant_args)
    return a
