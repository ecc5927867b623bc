"""fijit.Spec: the kernel tuple (kind, dtypes, head_dim, mask, position encoding,
soft-cap, variant), parsed, formatted and checked by the C library itself so that
names and limits are defined once."""
import ctypes
from dataclasses import dataclass
from typing import Optional

from . import _structs as S
from ._lib import lib, new_struct
from .errors import check

_NAMES = {"kind": S.KIND, "q_dtype": S.DTYPE, "kv_dtype": S.DTYPE, "o_dtype": S.DTYPE,
          "mask": S.MASK, "pos": S.POS}
_VALUES = {field: {v: k for k, v in names.items()} for field, names in _NAMES.items()}


@dataclass(frozen=True)
class Spec:
    """One kernel tuple. Field values are the names of the canonical spec text
    ("decode", "fp16", "window", "rope"); soft_cap is a bool (the cap's value is a
    launch argument); variant None is the built-in behaviour. Fields left None take
    the library's defaults (fi_jit_spec_init: FI_JIT_SPEC_INIT), kv_dtype and o_dtype
    q_dtype's, as in the spec text."""
    kind: Optional[str] = None
    q_dtype: Optional[str] = None
    kv_dtype: Optional[str] = None
    o_dtype: Optional[str] = None
    head_dim: Optional[int] = None
    mask: Optional[str] = None
    pos: Optional[str] = None
    soft_cap: Optional[bool] = None
    variant: Optional[str] = None
    head_dim_vo: int = 0             # v and o's head dim; 0: head_dim (MLA prefill: 192/128)

    def __post_init__(self):
        defaults = None
        for field in ("kind", "q_dtype", "head_dim", "mask", "pos", "soft_cap"):
            if getattr(self, field) is None:
                defaults = defaults or new_struct(S.JitSpec)
                value = getattr(defaults, field)
                object.__setattr__(self, field, _VALUES[field][value] if field in _VALUES
                                   else value)
        # kv and o default to q, as in the spec text.
        if self.kv_dtype is None:
            object.__setattr__(self, "kv_dtype", self.q_dtype)
        if self.o_dtype is None:
            object.__setattr__(self, "o_dtype", self.q_dtype)
        if self.variant == "default":
            object.__setattr__(self, "variant", None)
        for field, names in _NAMES.items():
            value = getattr(self, field)
            if value not in names:
                raise ValueError(f"Spec.{field}: {value!r} is not one of {', '.join(names)}")
        object.__setattr__(self, "soft_cap", bool(self.soft_cap))
        if self.head_dim_vo == self.head_dim:  # one tuple, one Spec
            object.__setattr__(self, "head_dim_vo", 0)

    @classmethod
    def parse(cls, text, _lib=None):
        """Spec from a canonical spec string ("prefill q=bf16 hd=128 mask=causal"). Raises
        what str() of it would (InvalidError, UnsupportedError: the message names the
        field): a Spec that parses can be written back."""
        L = _lib or lib()
        raw = new_struct(S.JitSpec, L)
        buf = ctypes.create_string_buffer(64)
        check(L.fi_jit_spec_parse(ctypes.byref(raw), buf, len(buf), text.encode()),
              "fi_jit_spec_parse", L)
        _format(raw, L)
        return cls._from_c(raw)

    @classmethod
    def _from_c(cls, raw):
        return cls(kind=_VALUES["kind"][raw.kind], q_dtype=_VALUES["q_dtype"][raw.q_dtype],
                   kv_dtype=_VALUES["kv_dtype"][raw.kv_dtype],
                   o_dtype=_VALUES["o_dtype"][raw.o_dtype], head_dim=raw.head_dim,
                   mask=_VALUES["mask"][raw.mask], pos=_VALUES["pos"][raw.pos],
                   soft_cap=bool(raw.soft_cap),
                   variant=raw.variant.decode() if raw.variant else None,
                   head_dim_vo=raw.head_dim_vo)

    def to_c(self):
        """The fi_jit_spec (cached: a Spec is immutable)."""
        raw = self.__dict__.get("_c")
        if raw is None:
            raw = new_struct(S.JitSpec, kind=S.KIND[self.kind],
                             q_dtype=S.DTYPE[self.q_dtype], kv_dtype=S.DTYPE[self.kv_dtype],
                             o_dtype=S.DTYPE[self.o_dtype], head_dim=int(self.head_dim),
                             mask=S.MASK[self.mask], pos=S.POS[self.pos],
                             soft_cap=int(self.soft_cap),
                             variant=self.variant.encode() if self.variant else None,
                             head_dim_vo=int(self.head_dim_vo))
            object.__setattr__(self, "_c", raw)
        return raw

    def check(self):
        """Raise fijit.InvalidError / UnsupportedError (the message names the field)
        unless fijit can build this tuple."""
        L = lib()
        check(L.fi_jit_spec_check(ctypes.byref(self.to_c())), "fi_jit_spec_check", L)
        return self

    def __str__(self):
        return _format(self.to_c(), lib())


def accepted_specs(kind=None, _lib=None):
    """Every Spec fijit builds (of `kind`, a kind name; None: every kind), default variant,
    from the library's tuple space (fi_jit_spec_enumerate): the one list of what is
    accepted, which nothing in Python restates."""
    L = _lib or lib()
    code = S.KIND[kind] if kind is not None else 0
    n = L.fi_jit_spec_enumerate(None, 0, code)
    check(n, "fi_jit_spec_enumerate", L)
    raws = (S.JitSpec * n)()
    check(L.fi_jit_spec_enumerate(raws, n, code), "fi_jit_spec_enumerate", L)
    return [Spec._from_c(raw) for raw in raws]


def _format(raw, L):
    """The canonical text of a fi_jit_spec, or the library's refusal raised."""
    buf = ctypes.create_string_buffer(512)
    check(L.fi_jit_spec_format(buf, len(buf), ctypes.byref(raw)), "fi_jit_spec_format", L)
    return buf.value.decode()


def as_spec(spec, _lib=None):
    """A Spec from a Spec or a spec string (parsed by `_lib`, None: the default library)."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, str):
        return Spec.parse(spec, _lib)
    raise TypeError(f"spec: expected a fijit.Spec or a spec string, got {type(spec).__name__}")
