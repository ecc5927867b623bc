"""fijit.Context: one fi_jit_ctx (cache directory, target arch, registered variants),
and the process-wide default context every module-level function uses."""
import ctypes
import os
import threading
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

from . import _structs as S
from ._lib import WRITE_FN, lib, load_library, new_struct
from .errors import check
from .spec import as_spec

# What get_kernel tells of a loaded kernel (fi_jit_kernel's fields a Python caller uses).
KernelInfo = namedtuple("KernelInfo",
                        "function block_dim smem_bytes registers spill_bytes key arch")
_LOG_LEVELS = {"off": 0, "error": 1, "warn": 2, "info": 3, "debug": 4}


class Context:
    """A fijit context. Arguments left None come from the environment (FIJIT_CACHE_DIR,
    FIJIT_ARCH, ...) and then the library's defaults (fi_jit_options_init), as in
    fi_jit_ctx_new. log_level is one of "off", "error", "warn", "info", "debug". Needs
    no GPU.

    library: None for the package's library (found as _lib.py describes), or the path
    of one libfijit.so to bind this context to; every call made with the context (the
    functions' ctx=, the plans') goes to that library. Several contexts on different
    builds can live in one process (A/B benchmarks).

    remote, remote_secret: the fleet tier (a redis:// or unix:// URL, and the secret
    whose MAC remote entries must carry), as fi_jit_options' fields; None: from
    $FIJIT_REMOTE and $FIJIT_REMOTE_SECRET."""

    def __init__(self, cache_dir=None, *, arch=None, jit=None, use_disk_cache=None,
                 log_level=None, max_cache_bytes=None, allow_unsafe_dir=None, library=None,
                 remote=None, remote_secret=None):
        if log_level is not None and log_level not in _LOG_LEVELS:
            raise ValueError(f"log_level: {log_level!r} is not one of {', '.join(_LOG_LEVELS)}")
        # Kept as attributes: the C context keeps the pointers for its lifetime.
        self._cache_dir_b = os.fsencode(cache_dir) if cache_dir is not None else None
        self._arch_b = arch.encode() if arch else None
        self._remote_b = remote.encode() if remote else None
        self._secret_b = remote_secret.encode() if remote_secret else None
        # Only what the caller gave: the rest keeps fi_jit_options_init's defaults.
        given = {"jit": jit, "use_disk_cache": use_disk_cache, "allow_unsafe_dir": allow_unsafe_dir,
                 "max_cache_bytes": max_cache_bytes,
                 "log_level": _LOG_LEVELS.get(log_level)}
        fields = {k: int(v) for k, v in given.items() if v is not None}
        self._lib = lib() if library is None else load_library(library)
        opts = new_struct(S.JitOptions, self._lib, cache_dir=self._cache_dir_b, arch=self._arch_b,
                          remote=self._remote_b, remote_secret=self._secret_b, **fields)
        handle = ctypes.c_void_p()
        check(self._lib.fi_jit_ctx_new(ctypes.byref(handle), ctypes.byref(opts)), "fi_jit_ctx_new",
              self._lib)
        self.handle = handle
        self._variants = {}

    def close(self):
        if self.handle:
            self._lib.fi_jit_ctx_free(self.handle)
            self.handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def lib(self):
        """The ctypes handle of the library this context belongs to."""
        return self._lib

    @property
    def library_path(self):
        return self._lib._name

    @property
    def cache_dir(self):
        return self._lib.fi_jit_ctx_cache_dir(self.handle).decode()

    # ---- variants ---------------------------------------------------------------------
    def register_variant(self, name, source_or_path, *, replace=False):
        """Register a variant snippet under `name` (None with a path: the file name up to
        its first '.'). `source_or_path` is the snippet text, or a path (os.PathLike, or
        a one-line string naming an existing file). Returns the name."""
        flags = S.VARIANT_REPLACE if replace else 0
        if _is_path(source_or_path):
            path = os.fspath(source_or_path)
            check(self._lib.fi_jit_variant_register_file(
                self.handle, name.encode() if name else None, os.fsencode(path), flags),
                "fi_jit_variant_register_file", self._lib)
            name = name or os.path.basename(path).split(".")[0]
        else:
            if not name:
                raise ValueError("name: required when registering a variant from source text")
            check(self._lib.fi_jit_variant_register(self.handle, name.encode(),
                                                    source_or_path.encode(), flags),
                  "fi_jit_variant_register", self._lib)
        self._variants[name] = source_or_path
        return name

    # ---- compile-only work (no GPU) ---------------------------------------------------
    def prewarm(self, specs, arch=None, *, jobs=1):
        """Compile each spec (a Spec or spec string; one or a list) into the cache for
        `arch` (a name, a list of names, or None: the context's). Returns a list of
        (Spec, arch, "compiled" | "cached"). Raises the first failure after every job
        ran. `jobs` > 1 compiles in threads (NVRTC gains up to ~4)."""
        if isinstance(specs, (str,)) or not hasattr(specs, "__iter__"):
            specs = [specs]
        arches = [arch] if arch is None or isinstance(arch, str) else list(arch)
        todo = [(as_spec(s, self._lib), a) for s in specs for a in arches]

        def one(item):
            spec, a = item
            out = ctypes.c_int(-1)
            check(self._lib.fi_jit_prewarm(ctypes.byref(out), self.handle,
                                           ctypes.byref(spec.to_c()), a.encode() if a else None),
                  "fi_jit_prewarm", self._lib)
            return spec, a, S.BUILD_OUTCOME.get(out.value, str(out.value))

        if jobs <= 1 or len(todo) <= 1:
            return [one(t) for t in todo]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(one, t) for t in todo]
            results, first_error = [], None
            for f in futures:
                try:
                    results.append(f.result())
                except Exception as e:  # keep going: the other jobs' work is stored
                    first_error = first_error or e
            if first_error:
                raise first_error
            return results

    def stats(self):
        """The cache's statistics (all processes) plus this context's unflushed counts:
        a dict of the FI_JIT_STATS_COUNTERS names to ints (compile_ns in ns, bytes)."""
        st = new_struct(S.JitStats, self._lib)
        check(self._lib.fi_jit_stats_get(ctypes.byref(st), self.handle), "fi_jit_stats_get",
              self._lib)
        return {name: getattr(st, name) for name in S.STATS_COUNTERS}

    def explain(self, spec, arch=None, *, source=False, ptx=False):
        """The text of what the cache key of `spec` on `arch` is made of; with source=True
        followed by the translation unit (byte for byte what the key hashes and NVRTC
        compiles), with ptx=True by the PTX NVRTC makes of it (compiled now, not
        cached). Each part after the first starts with a line "---- <what> ----"."""
        spec_c = as_spec(spec, self._lib).to_c()
        arch_b = arch.encode() if arch else None
        chunks = []
        cb = WRITE_FN(lambda _user, text: chunks.append(text.decode(errors="replace")))
        check(self._lib.fi_jit_explain(self.handle, ctypes.byref(spec_c), arch_b, cb, None),
              "fi_jit_explain", self._lib)
        for wanted, as_ptx, title in ((source, 0, "translation unit"), (ptx, 1, "PTX")):
            if wanted:
                chunks.append(f"\n---- {title} ----\n" + self._unit(spec_c, arch_b, as_ptx))
        return "".join(chunks)

    def _unit(self, spec_c, arch_b, as_ptx):
        """fi_jit_unit's text (the library's buffer copied, then freed)."""
        buf, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(self._lib.fi_jit_unit(ctypes.byref(buf), ctypes.byref(size), self.handle,
                                    ctypes.byref(spec_c), arch_b, as_ptx), "fi_jit_unit",
              self._lib)
        try:
            return ctypes.string_at(buf, size.value).decode(errors="replace")
        finally:
            self._lib.fi_free(buf)

    def get_kernel(self, spec):
        """Load the kernel of `spec` into the current CUDA context (compiled, or read from
        the cache) without running it, so that later calls never compile or load (warm a
        server before its first request, or before CUDA-graph capture). Returns a
        KernelInfo: the CUfunction handle (an int, borrowed from this context), block
        shape, dynamic shared memory, registers, spills, cache key (hex) and arch. Needs a
        current CUDA context (torch makes one on first use of a device)."""
        kernel = ctypes.POINTER(S.JitKernel)()
        check(self._lib.fi_jit_get_kernel(ctypes.byref(kernel), self.handle,
                                          ctypes.byref(as_spec(spec, self._lib).to_c())),
              "fi_jit_get_kernel", self._lib)
        k = kernel.contents
        return KernelInfo(function=k.function or 0, block_dim=tuple(k.block_dim),
                          smem_bytes=k.smem_bytes, registers=k.registers,
                          spill_bytes=k.spill_bytes, key=bytes(k.key).hex(),
                          arch=k.arch.decode())


def _is_path(x):
    if isinstance(x, os.PathLike):
        return True
    # Snippet text always has a newline or "Variant" in it; anything else names a file.
    return isinstance(x, str) and "\n" not in x and "Variant" not in x


_default = None
_default_lock = threading.Lock()


def default_context():
    """The process-wide context (options from the environment), made on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Context()
    return _default


def set_default_context(ctx):
    """Use `ctx` (a Context) for the module-level functions from now on."""
    global _default
    if not isinstance(ctx, Context):
        raise TypeError(f"ctx: expected a fijit.Context, got {type(ctx).__name__}")
    _default = ctx
