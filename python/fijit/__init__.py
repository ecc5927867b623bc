"""fijit for Python: the fijit JIT attention kernels from PyTorch, over libfijit.so through
ctypes (no compiled extension; the standard library only, torch imported when a tensor
function is first used).

Without torch or a GPU: Spec, accepted_specs, Context, prewarm, stats, explain,
register_variant (get_kernel needs a GPU, not torch).
With torch on a CUDA device: decode, prefill, varlen_prefill, merge_states,
padded_attention, the BatchDecodePlan / BatchPrefillPlan / PaddedBatchPlan objects, and
the torch.library ops (fijit::*).
"""
from .errors import (CompileError, CorruptError, CudaError, DiskError, Error,  # noqa: F401
                     InvalidError, LibraryError, LoadError, NoDeviceError, NotFoundError,
                     OutOfMemoryError, UnsafeCacheDirError, UnsupportedError)
from ._lib import library_path, library_version  # noqa: F401
from .spec import Spec, accepted_specs  # noqa: F401
from .context import Context, default_context, set_default_context  # noqa: F401

# Names that need torch live in modules imported on first use (PEP 562), so that
# `import fijit` works on a build host without torch.
_LAZY = {
    "decode": "attention", "prefill": "attention", "varlen_prefill": "attention",
    "merge_states": "attention", "BatchDecodePlan": "plans", "BatchPrefillPlan": "plans",
    "mla_decode": "mla", "BatchMLADecodePlan": "mla",
    "padded_attention": "padded", "PaddedBatchPlan": "padded",
}


TORCH_MISSING = ("fijit.{name} needs PyTorch, which is not installed: pip install torch "
                 "(for a CUDA build matching your driver see https://pytorch.org/get-started/"
                 "locally/). Spec, Context, prewarm, stats and explain work without it.")


def __getattr__(name):
    if name == "__version__":  # the library's: the version is written once, in fijit.h
        return library_version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fijit' has no attribute {name!r}")
    import importlib
    try:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ImportError(TORCH_MISSING.format(name=name), name="torch") from e
    globals()[name] = value
    return value


def register_variant(name, source_or_path, *, replace=False):
    """Register a variant snippet in the default context; see Context.register_variant.
    Name it in a kernel call with variant=name and pass its declared parameters
    ("//! param float cap") by keyword."""
    return default_context().register_variant(name, source_or_path, replace=replace)


def prewarm(specs, arch=None, *, jobs=1):
    """Compile specs into the default context's cache for arch (no GPU needed); see
    Context.prewarm."""
    return default_context().prewarm(specs, arch, jobs=jobs)


def stats():
    """The default context's cache statistics as a dict; see Context.stats."""
    return default_context().stats()


def explain(spec, arch=None, *, source=False, ptx=False):
    """What the cache key of spec on arch is made of (text), optionally followed by the
    translation unit and its PTX; see Context.explain."""
    return default_context().explain(spec, arch, source=source, ptx=ptx)


def get_kernel(spec):
    """Load the kernel of spec into the current CUDA context without running it; see
    Context.get_kernel."""
    return default_context().get_kernel(spec)
