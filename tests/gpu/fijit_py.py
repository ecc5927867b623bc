"""ctypes binding of the parts of include/fijit.h the GPU test and benchmark use.

Loads build/libfijit.so (or $FIJIT_LIB) and runs fi_decode_run on torch
tensors, in the CUDA context torch made current, on torch's current stream.
Struct layouts mirror include/fijit.h field for field; ctypes applies the same
C alignment rules.
"""
import ctypes
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FI_KIND_DECODE = 1
DTYPES = {"fp16": 1, "bf16": 2}
MASKS = {"none": 0, "window": 2}
POS = {"none": 0, "rope": 1, "alibi": 2}


class Spec(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("kind", ctypes.c_int), ("q_dtype", ctypes.c_int),
                ("kv_dtype", ctypes.c_int), ("o_dtype", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("mask", ctypes.c_int), ("pos", ctypes.c_int), ("soft_cap", ctypes.c_int),
                ("variant", ctypes.c_char_p)]


class DecodeArgs(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p),
                ("v", ctypes.c_void_p), ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
                ("num_qo_heads", ctypes.c_int), ("num_kv_heads", ctypes.c_int),
                ("kv_len", ctypes.c_int),
                ("q_stride_h", ctypes.c_int64), ("o_stride_h", ctypes.c_int64),
                ("k_stride_n", ctypes.c_int64), ("k_stride_h", ctypes.c_int64),
                ("v_stride_n", ctypes.c_int64), ("v_stride_h", ctypes.c_int64),
                ("sm_scale", ctypes.c_float), ("soft_cap", ctypes.c_float),
                ("rope_scale", ctypes.c_float), ("rope_theta", ctypes.c_float),
                ("rope_offset", ctypes.c_int), ("window_left", ctypes.c_int),
                ("alibi_slopes", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t), ("num_splits", ctypes.c_int)]


class JitKernel(ctypes.Structure):
    _fields_ = [("function", ctypes.c_void_p), ("merge_function", ctypes.c_void_p),
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
            for name in ("libfijit.so", "libfijit.so.0", "libfijit.so.0.1.0"):
                path = os.path.join(ROOT, "build", name)
                if os.path.exists(path):
                    break
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.fi_last_error.restype = ctypes.c_char_p
        L.fi_jit_ctx_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        L.fi_jit_ctx_free.argtypes = [ctypes.c_void_p]
        L.fi_jit_ctx_free.restype = None
        L.fi_decode_workspace_size.argtypes = [ctypes.c_void_p, ctypes.POINTER(Spec),
                                               ctypes.POINTER(DecodeArgs),
                                               ctypes.POINTER(ctypes.c_size_t)]
        L.fi_decode_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Spec),
                                    ctypes.POINTER(DecodeArgs), ctypes.c_void_p]
        L.fi_jit_get_kernel.argtypes = [ctypes.c_void_p, ctypes.POINTER(Spec),
                                        ctypes.POINTER(ctypes.POINTER(JitKernel))]
        self.ctx = ctypes.c_void_p()
        self._check(L.fi_jit_ctx_new(ctypes.byref(self.ctx), None), "fi_jit_ctx_new")

    def _check(self, rc, what):
        if rc != 0:
            msg = self.lib.fi_last_error().decode(errors="replace")
            raise FijitError(f"{what} failed ({rc}): {msg}")

    def close(self):
        if self.ctx:
            self.lib.fi_jit_ctx_free(self.ctx)
            self.ctx = ctypes.c_void_p()

    @staticmethod
    def spec(dtype="fp16", head_dim=128, mask="none", pos="none", soft_cap=0):
        d = DTYPES[dtype]
        return Spec(1, FI_KIND_DECODE, d, d, d, head_dim, MASKS[mask], POS[pos], int(soft_cap), None)

    def kernel(self, spec):
        """The loaded fi_jit_kernel for spec (a copy of the borrowed struct)."""
        out = ctypes.POINTER(JitKernel)()
        self._check(self.lib.fi_jit_get_kernel(self.ctx, ctypes.byref(spec), ctypes.byref(out)),
                    "fi_jit_get_kernel")
        k = JitKernel()
        ctypes.pointer(k)[0] = out[0]
        return k

    def workspace_size(self, spec, args):
        n = ctypes.c_size_t()
        self._check(self.lib.fi_decode_workspace_size(self.ctx, ctypes.byref(spec),
                                                      ctypes.byref(args), ctypes.byref(n)),
                    "fi_decode_workspace_size")
        return n.value

    def run(self, spec, args, stream=0):
        self._check(self.lib.fi_decode_run(self.ctx, ctypes.byref(spec), ctypes.byref(args),
                                           ctypes.c_void_p(stream)), "fi_decode_run")


def decode_args(q, k, v, o, lse=None, *, layout, sm_scale=0.0, soft_cap=0.0, rope_scale=0.0,
                rope_theta=0.0, rope_offset=0, window_left=-1, alibi_slopes=None,
                num_splits=0):
    """Args for q [H, D], o [H, D] and k/v in `layout` "NHD" [L, Hkv, D] or "HND" [Hkv, L, D]."""
    if layout == "NHD":
        kv_len, hkv = k.shape[0], k.shape[1]
        ksn, ksh, vsn, vsh = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    else:
        hkv, kv_len = k.shape[0], k.shape[1]
        ksh, ksn, vsh, vsn = k.stride(0), k.stride(1), v.stride(0), v.stride(1)
    a = DecodeArgs()
    a.version = 1
    a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    a.lse = lse.data_ptr() if lse is not None else None
    a.num_qo_heads, a.num_kv_heads, a.kv_len = q.shape[0], hkv, kv_len
    a.q_stride_h, a.o_stride_h = q.stride(0), o.stride(0)
    a.k_stride_n, a.k_stride_h, a.v_stride_n, a.v_stride_h = ksn, ksh, vsn, vsh
    a.sm_scale, a.soft_cap = sm_scale, soft_cap
    a.rope_scale, a.rope_theta, a.rope_offset = rope_scale, rope_theta, rope_offset
    a.window_left = window_left
    a.alibi_slopes = alibi_slopes.data_ptr() if alibi_slopes is not None else None
    a.num_splits = num_splits
    return a
