"""A stand-in for the few parts of torch that fijit's tensor code uses, for CPU tests
on hosts without torch (tests/python/test_padded.py). Tensors are small and live in
host memory (a ctypes buffer, whose address is data_ptr(): the fake CUDA driver of
tests/fake_cuda.c serves "device" memory from host memory the same way), shaped and
strided like torch's, with the elementwise, reduction and indexing operations fijit's
padded-batch layout builds on. Not a general tensor library: what is missing raises.
"""
import ctypes
import itertools
import math
import types


class dtype:
    def __init__(self, name, ctype, floating):
        self.name, self.ctype, self.is_floating_point = name, ctype, floating
        self.itemsize = ctypes.sizeof(ctype)

    def __repr__(self):
        return f"torch.{self.name}"


float16 = dtype("float16", ctypes.c_uint16, True)   # bits only: values are not computed
bfloat16 = dtype("bfloat16", ctypes.c_uint16, True)
float32 = dtype("float32", ctypes.c_float, True)
int32 = dtype("int32", ctypes.c_int32, False)
int64 = dtype("int64", ctypes.c_int64, False)
uint8 = dtype("uint8", ctypes.c_uint8, False)
bool = dtype("bool", ctypes.c_uint8, False)  # noqa: A001  (torch's name)
float8_e4m3fn = dtype("float8_e4m3fn", ctypes.c_uint8, True)
_pybool = type(True)


class device:
    def __init__(self, spec="cuda", index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        kind, _, num = str(spec).partition(":")
        self.type = kind
        self.index = int(num) if num else (index if index is not None else
                                           (0 if kind == "cuda" else None))

    def __eq__(self, other):
        other = device(other) if isinstance(other, str) else other
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"


Size = tuple


def _numel(shape):
    return math.prod(shape)


def _contiguous_strides(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


class _Storage:
    """Values in a ctypes array (16-byte aligned), read and written element by element."""

    def __init__(self, n, dt):
        self.dtype = dt
        self.raw = (ctypes.c_uint8 * (max(n, 1) * dt.itemsize + 16))()
        base = ctypes.addressof(self.raw)
        self.ptr = base + (-base) % 16
        self.array = (dt.ctype * max(n, 1)).from_address(self.ptr)


class Tensor:
    def __init__(self, storage, shape, strides, offset, dev):
        self._s, self.shape, self._strides = storage, tuple(shape), tuple(strides)
        self._off = offset
        self.device = dev
        self.dtype = storage.dtype

    # ---- metadata ----------------------------------------------------------------
    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def dim(self):
        return len(self.shape)

    ndim = property(dim)

    def numel(self):
        return _numel(self.shape)

    def data_ptr(self):
        return self._s.ptr + self._off * self.dtype.itemsize

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def is_contiguous(self):
        return all(n == 1 or s == c for n, s, c in
                   zip(self.shape, self._strides, _contiguous_strides(self.shape)))

    def size(self, i=None):
        return self.shape if i is None else self.shape[i]

    def detach(self):
        return self

    requires_grad = False

    def record_stream(self, stream):
        pass

    # ---- element access ------------------------------------------------------------
    def _index(self, idx):
        return self._off + sum(i * s for i, s in zip(idx, self._strides))

    def _get(self, idx):
        v = self._s.array[self._index(idx)]
        return _pybool(v) if self.dtype is bool else v

    def _set(self, idx, v):
        if self.dtype is bool:
            v = 1 if v else 0
        elif not self.dtype.is_floating_point:
            v = int(v)
        self._s.array[self._index(idx)] = v

    def _indices(self):
        return itertools.product(*(range(n) for n in self.shape))

    def tolist(self):
        def rec(prefix, d):
            if d == self.dim():
                return self._get(prefix)
            return [rec(prefix + (i,), d + 1) for i in range(self.shape[d])]
        return rec((), 0)

    def item(self):
        return self._get((0,) * self.dim())

    # ---- views ---------------------------------------------------------------------
    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if -1 in shape:
            known = _numel([n for n in shape if n != -1])
            shape = tuple(self.numel() // known if n == -1 else n for n in shape)
        if not self.is_contiguous() or _numel(shape) != self.numel():
            raise RuntimeError(f"fake torch: view {shape} of {self.shape} (non-contiguous?)")
        return Tensor(self._s, shape, _contiguous_strides(shape), self._off, self.device)

    reshape = view

    def transpose(self, a, b):
        shape, strides = list(self.shape), list(self._strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return Tensor(self._s, shape, strides, self._off, self.device)

    def expand(self, *shape):
        shape = [self.shape[i] if n == -1 else n for i, n in enumerate(shape)]
        strides = [s if self.shape[i] == n else 0 for i, (n, s) in
                   enumerate(zip(shape, self._strides))]
        return Tensor(self._s, shape, strides, self._off, self.device)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        shape, strides, off, d = [], [], self._off, 0
        for k in key:
            if k is None:
                shape.append(1)
                strides.append(0)
                continue
            n, s = self.shape[d], self._strides[d]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                shape.append(max(0, (stop - start + step - 1) // step))
                strides.append(s * step)
                off += start * s
            else:
                off += (k % n) * s
            d += 1
        shape += self.shape[d:]
        strides += self._strides[d:]
        return Tensor(self._s, shape, strides, off, self.device)

    def __setitem__(self, key, value):
        self[key].copy_(value)

    # ---- copies ----------------------------------------------------------------------
    def copy_(self, src):
        src = _as_tensor(src, self)
        for idx in self._indices():
            self._set(idx, src._get(_bcast_idx(idx, src.shape)))
        return self

    def contiguous(self):
        return self if self.is_contiguous() else self.clone()

    def clone(self):
        out = empty(self.shape, dtype=self.dtype, device=self.device)
        return out.copy_(self)

    def to(self, dt=None, **kw):
        dt = kw.get("dtype", dt)
        if isinstance(dt, (device, str)) or dt is None or dt is self.dtype:
            return self
        out = empty(self.shape, dtype=dt, device=self.device)
        return out.copy_(self)

    def new_empty(self, shape, dtype=None):
        return empty(shape, dtype=dtype or self.dtype, device=self.device)

    def new_zeros(self, n):
        return zeros(n, dtype=self.dtype, device=self.device)

    # ---- in place ----------------------------------------------------------------------
    def masked_fill(self, mask, value):
        return self.clone().masked_fill_(mask, value)

    def masked_fill_(self, mask, value):
        for idx in self._indices():
            if mask._get(_bcast_idx(idx, mask.shape)):
                self._set(idx, value)
        return self

    def scatter_(self, dim, index, src):
        if dim != 0 or self.dim() != 1:
            raise NotImplementedError("fake torch: scatter_ on dim 0 of a 1-D tensor only")
        for idx in index._indices():
            self._set((index._get(idx),), src._get(idx) if isinstance(src, Tensor) else src)
        return self

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self.copy_(self.clamp(min=min, max=max))

    def zero_(self):
        return self.masked_fill_(tensor(True), 0)

    def add_(self, other):
        return self.copy_(self + other)

    def unsqueeze(self, dim):
        dim %= self.dim() + 1
        return self[(slice(None),) * dim + (None,)]

    def logical_not(self):
        return ~self

    # ---- reductions ----------------------------------------------------------------------
    def _reduce(self, dim, fn, dt, keepdim):
        dim %= self.dim()
        shape = list(self.shape)
        n = shape[dim]
        shape[dim] = 1
        out = empty(shape, dtype=dt, device=self.device)
        for idx in out._indices():
            vals = [self._get(idx[:dim] + (i,) + idx[dim + 1:]) for i in range(n)]
            out._set(idx, fn(vals))
        return out if keepdim else out.view(*(s for i, s in enumerate(shape) if i != dim))

    def sum(self, dim, dtype=None, keepdim=False):
        dt = dtype or (int64 if self.dtype in (bool, int32, uint8) else self.dtype)
        return self._reduce(dim, lambda v: sum(int(x) if not isinstance(x, float) else x
                                               for x in v), dt, keepdim)

    def amax(self, dim, keepdim=False):
        return self._reduce(dim, max, self.dtype, keepdim)

    # ---- elementwise ---------------------------------------------------------------------
    def _binary(self, other, fn, out_dtype=None):
        other = _as_tensor(other, self)
        shape = _bcast_shape(self.shape, other.shape)
        dt = out_dtype or _promote(self.dtype, other.dtype)
        out = empty(shape, dtype=dt, device=self.device)
        for idx in out._indices():
            out._set(idx, fn(self._get(_bcast_idx(idx, self.shape)),
                             other._get(_bcast_idx(idx, other.shape))))
        return out

    def _unary(self, fn, dt=None):
        out = empty(self.shape, dtype=dt or self.dtype, device=self.device)
        for idx in out._indices():
            out._set(idx, fn(self._get(idx)))
        return out

    def __add__(self, o): return self._binary(o, lambda a, b: a + b)
    __radd__ = __add__
    def __sub__(self, o): return self._binary(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._binary(o, lambda a, b: b - a)
    def __mul__(self, o): return self._binary(o, lambda a, b: a * b)
    __rmul__ = __mul__
    def __lt__(self, o): return self._binary(o, lambda a, b: a < b, bool)
    def __le__(self, o): return self._binary(o, lambda a, b: a <= b, bool)
    def __gt__(self, o): return self._binary(o, lambda a, b: a > b, bool)
    def __ge__(self, o): return self._binary(o, lambda a, b: a >= b, bool)
    def __eq__(self, o): return self._binary(o, lambda a, b: a == b, bool)
    def __ne__(self, o): return self._binary(o, lambda a, b: a != b, bool)
    def __and__(self, o): return self._binary(o, lambda a, b: a and b, bool)
    def __or__(self, o): return self._binary(o, lambda a, b: a or b, bool)
    def __invert__(self): return self._unary(lambda a: not a)
    __hash__ = object.__hash__

    def clamp(self, min=None, max=None):  # noqa: A002
        lo = -math.inf if min is None else min
        hi = math.inf if max is None else max
        return self._unary(lambda a: type(a)(a if lo <= a <= hi else (lo if a < lo else hi)))

    def __repr__(self):
        return f"fake_torch.tensor({self.tolist()}, dtype={self.dtype})"


def _promote(*dts):
    order = [bool, uint8, int32, int64, float16, bfloat16, float32]
    return max(dts, key=order.index)


def _bcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"fake torch: shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def _bcast_idx(idx, shape):
    idx = idx[len(idx) - len(shape):] if len(shape) else ()
    return tuple(0 if n == 1 else i for i, n in zip(idx, shape))


def _as_tensor(x, like):
    if isinstance(x, Tensor):
        return x
    dt = float32 if isinstance(x, float) else (bool if isinstance(x, _pybool) else like.dtype)
    return tensor(x, dtype=dt, device=like.device)


# ---- factories ---------------------------------------------------------------------------
def _shape_of(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def empty(*shape, dtype=float32, device="cuda"):
    shape = _shape_of(shape)
    return Tensor(_Storage(_numel(shape), dtype), shape, _contiguous_strides(shape), 0,
                  _device(device))


def _device(d):
    return d if isinstance(d, device) else device(d)


def zeros(*shape, dtype=float32, device="cuda"):
    t = empty(*shape, dtype=dtype, device=device)
    ctypes.memset(t._s.ptr, 0, max(t.numel(), 1) * t.dtype.itemsize)
    return t


def ones(*shape, dtype=float32, device="cuda"):
    t = empty(*shape, dtype=dtype, device=device)
    for idx in t._indices():
        t._set(idx, 1)
    return t


def full(shape, value, dtype=float32, device="cuda"):
    return zeros(shape, dtype=dtype, device=device).masked_fill_(tensor(True), value)


def tensor(values, dtype=None, device="cuda"):
    def shape_of(v):
        return (len(v),) + shape_of(v[0]) if isinstance(v, (list, tuple)) and v else \
            ((0,) if isinstance(v, (list, tuple)) else ())
    shape = shape_of(values)
    flat = list(values) if len(shape) == 1 else \
        ([values] if not shape else [x for row in values for x in row])
    if dtype is None:
        dtype = float32 if any(isinstance(x, float) for x in flat) else \
            (bool if flat and all(isinstance(x, _pybool) for x in flat) else int64)
    t = empty(shape, dtype=dtype, device=device)
    for i, idx in enumerate(t._indices()):
        t._set(idx, flat[i])
    return t


def arange(n, dtype=int64, device="cuda"):
    return tensor(list(range(n)), dtype=dtype, device=device) if n else \
        empty(0, dtype=dtype, device=device)


def cumsum(x, dim, dtype=None, out=None):
    dim %= x.dim()
    result = empty(x.shape, dtype=dtype or (int64 if x.dtype in (bool, int32) else x.dtype),
                   device=x.device)
    _cumsum_into(result, x, dim)
    return out.copy_(result) if out is not None else result


def _cumsum_into(out, x, dim):
    for idx in out._indices():
        if idx[dim] == 0:
            acc = 0
            for i in range(x.shape[dim]):
                j = idx[:dim] + (i,) + idx[dim + 1:]
                acc += int(x._get(j))
                out._set(j, acc)


def cat(tensors):
    out = empty(sum(t.shape[0] for t in tensors), dtype=_promote(*(t.dtype for t in tensors)),
                device=tensors[0].device)
    at = 0
    for t in tensors:
        out[at:at + t.shape[0]] = t
        at += t.shape[0]
    return out


def where(cond, a, b):
    a = _as_tensor(a, cond if not isinstance(b, Tensor) else b)
    b = _as_tensor(b, a)
    shape = _bcast_shape(_bcast_shape(cond.shape, a.shape), b.shape)
    out = empty(shape, dtype=_promote(a.dtype, b.dtype), device=cond.device)
    for idx in out._indices():
        src = a if cond._get(_bcast_idx(idx, cond.shape)) else b
        out._set(idx, src._get(_bcast_idx(idx, src.shape)))
    return out


def gather(x, dim, index):
    out = empty(index.shape, dtype=x.dtype, device=x.device)
    for idx in out._indices():
        j = list(idx)
        j[dim] = index._get(idx)
        out._set(idx, x._get(tuple(j)))
    return out


def div(a, b, rounding_mode=None):
    if rounding_mode != "floor":
        raise NotImplementedError("fake torch: div with rounding_mode='floor' only")
    return a._binary(b, lambda x, y: x // y)


# ---- the module's other corners fijit reaches ---------------------------------------------
class _Cuda:
    _current = 0

    def current_device(self):
        return self._current

    def set_device(self, index):
        self._current = index

    def current_stream(self, dev=None):
        return types.SimpleNamespace(cuda_stream=0)

    def synchronize(self):
        pass

    def is_current_stream_capturing(self):
        return False

    def is_available(self):
        return True


cuda = _Cuda()
compiler = types.SimpleNamespace(is_compiling=lambda: False)


def is_grad_enabled():
    return False

_C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0)  # the default stream
FAKE = True
