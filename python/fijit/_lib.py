"""Finding, loading and declaring libfijit.so, and the structs the package hands it.

Search order: $FIJIT_LIBRARY (a path), then a libfijit.so shipped next to this package
(the wheel built from the repo carries build/libfijit.so), then the system loader
(LD_LIBRARY_PATH, the ldconfig cache: what `make install` provides).

The package's version is the library's (fi_version_string). What the two must agree
on are the struct layouts: each struct of _structs.py mirrors one version of its C
struct, and a library accepts the versions it still reads (older callers keep
working). A library is refused when it lacks fi_<struct>_init for a struct or does
not accept the version mirrored here. Defaults come from the same functions
(new_struct), so the package restates none of the *_INIT macros.

load_library(path) opens one given file instead (a Context made with library=path
uses it: A/B benchmarks bind several builds of libfijit.so in one process, one per
Context). Every handle is checked and declared the same way.
"""
import ctypes
import os
import threading

from . import _structs as S
from .errors import Error, LibraryError, check

_HERE = os.path.dirname(os.path.abspath(__file__))
_SONAMES = ("libfijit.so.0", "libfijit.so")
# The structs with a version and an fi_<struct>_init.
_VERSIONED = tuple(cls for cls in S.ALL if getattr(cls, "VERSION", None))

_lock = threading.Lock()
_lib = None
_path = None
_by_path = {}    # realpath -> handle opened by load_library
_defaults = {}   # (struct class, handle) -> the struct as fi_<struct>_init made it


def _candidates():
    """(description, path or soname) in search order."""
    env = os.environ.get("FIJIT_LIBRARY")
    if env:
        # An explicit choice is the only one tried: a typo must not load another copy.
        return [("$FIJIT_LIBRARY", env)]
    out = []
    for name in ("libfijit.so", "libfijit.so.0"):
        out.append(("next to the package", os.path.join(_HERE, name)))
    for name in _SONAMES:
        out.append(("system loader", name))
    return out


def _open():
    tried = []
    for how, what in _candidates():
        if os.sep in what and not os.path.exists(what):
            tried.append(f"{what} ({how}: no such file)")
            continue
        try:
            return ctypes.CDLL(what), what
        except OSError as e:
            tried.append(f"{what} ({how}: {e})")
    raise LibraryError("fijit: cannot load libfijit.so; tried:\n  " + "\n  ".join(tried) +
                       "\nBuild it with `make` and set FIJIT_LIBRARY=/path/to/build/libfijit.so, "
                       "install it (`make install`), or install the package from a built tree.")


def _check_api(lib, path):
    """Refuse a library that is not fijit or does not take the package's struct layouts."""
    try:
        version = lib.fi_version_string
    except AttributeError:
        raise LibraryError(f"fijit: {path} has no fi_version_string(): not a fijit library")
    version.restype, version.argtypes = ctypes.c_char_p, []
    version = version().decode()
    for cls in _VERSIONED:
        name = cls.c_name + "_init"
        if not hasattr(lib, name):
            raise LibraryError(f"fijit: {path} is fijit {version}, which has no {name}(): this "
                               "package needs the library it came with (or a newer one)")
        try:
            new_struct(cls, lib)
        except Error as e:
            raise LibraryError(f"fijit: {path} is fijit {version} and does not accept "
                               f"{cls.c_name} version {cls.VERSION}, the layout this package "
                               f"uses ({e.message}); use the package that came with that "
                               "library") from None


def new_struct(cls, handle=None, **fields):
    """A `cls` (a versioned struct of _structs.py) at the package's version, holding the
    defaults of fi_<struct>_init of the library `handle` (None: the package's library),
    then `fields`. The library is asked once per struct; later calls copy that."""
    handle = handle or lib()
    template = _defaults.get((cls, handle))
    if template is None:
        template = cls()
        check(getattr(handle, cls.c_name + "_init")(ctypes.byref(template), cls.VERSION),
              cls.c_name + "_init", handle)
        _defaults[(cls, handle)] = template
    s = cls.from_buffer_copy(template)
    for name, value in fields.items():
        setattr(s, name, value)
    return s


def _declare(lib):
    """argtypes/restype of every function the package calls."""
    P = ctypes.POINTER
    vp, cp, ci, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
    protos = {
        "fi_version_number": (ci, []),
        "fi_version_string": (cp, []),
        "fi_last_error": (cp, []),
        "fi_error_name": (cp, [ci]),
        "fi_jit_spec_parse": (ci, [P(S.JitSpec), cp, sz, cp]),
        "fi_jit_spec_format": (ci, [cp, sz, P(S.JitSpec)]),
        "fi_jit_spec_check": (ci, [P(S.JitSpec)]),
        "fi_jit_spec_enumerate": (ci, [P(S.JitSpec), sz, ci]),
        "fi_jit_ctx_new": (ci, [P(vp), P(S.JitOptions)]),
        "fi_jit_ctx_free": (None, [vp]),
        "fi_jit_ctx_cache_dir": (cp, [vp]),
        "fi_jit_get_kernel": (ci, [P(P(S.JitKernel)), vp, P(S.JitSpec)]),
        "fi_jit_prewarm": (ci, [P(ci), vp, P(S.JitSpec), cp]),
        "fi_jit_explain": (ci, [vp, P(S.JitSpec), cp, WRITE_FN, vp]),
        "fi_jit_unit": (ci, [P(vp), P(sz), vp, P(S.JitSpec), cp, ci]),
        "fi_free": (None, [vp]),
        "fi_jit_variant_register": (ci, [vp, cp, cp, ctypes.c_uint]),
        "fi_jit_variant_register_file": (ci, [vp, cp, cp, ctypes.c_uint]),
        "fi_jit_stats_get": (ci, [P(S.JitStats), vp]),
        "fi_decode_workspace_size": (ci, [P(sz), P(S.JitSpec), P(S.DecodeArgs)]),
        "fi_decode_run": (ci, [vp, P(S.JitSpec), P(S.DecodeArgs), vp]),
        "fi_batch_decode_workspace_size": (ci, [P(sz), P(S.JitSpec), P(S.BatchDecodePlanArgs)]),
        "fi_batch_decode_plan_new": (ci, [P(vp), vp, P(S.JitSpec), P(S.BatchDecodePlanArgs)]),
        "fi_batch_decode_plan_workspace_size": (ci, [P(sz), vp]),
        "fi_batch_decode_plan_describe": (ci, [P(ci), P(ci), vp]),
        "fi_batch_decode_plan_upload": (ci, [vp, vp, sz]),
        "fi_batch_decode_plan_free": (None, [vp]),
        "fi_batch_decode_run": (ci, [vp, vp, P(S.BatchDecodeArgs), vp]),
        "fi_merge_states": (ci, [vp, P(S.JitSpec), P(S.MergeStatesArgs), vp]),
        "fi_prefill_workspace_size": (ci, [P(sz), P(S.JitSpec), P(S.PrefillArgs)]),
        "fi_prefill_run": (ci, [vp, P(S.JitSpec), P(S.PrefillArgs), vp]),
        "fi_batch_prefill_workspace_size": (ci, [P(sz), P(S.JitSpec), P(S.BatchPrefillPlanArgs)]),
        "fi_batch_prefill_plan_new": (ci, [P(vp), vp, P(S.JitSpec), P(S.BatchPrefillPlanArgs)]),
        "fi_batch_prefill_plan_workspace_size": (ci, [P(sz), vp]),
        "fi_batch_prefill_plan_upload": (ci, [vp, vp, sz]),
        "fi_batch_prefill_plan_free": (None, [vp]),
        "fi_batch_prefill_run": (ci, [vp, vp, P(S.BatchPrefillArgs), vp]),
        "fi_batch_mla_decode_workspace_size": (ci, [P(sz), P(S.JitSpec),
                                                    P(S.BatchMLADecodePlanArgs)]),
        "fi_batch_mla_decode_plan_new": (ci, [P(vp), vp, P(S.JitSpec),
                                              P(S.BatchMLADecodePlanArgs)]),
        "fi_batch_mla_decode_plan_workspace_size": (ci, [P(sz), vp]),
        "fi_batch_mla_decode_plan_describe": (ci, [P(ci), P(ci), vp]),
        "fi_batch_mla_decode_plan_upload": (ci, [vp, vp, sz]),
        "fi_batch_mla_decode_plan_free": (None, [vp]),
        "fi_batch_mla_decode_run": (ci, [vp, vp, P(S.BatchMLADecodeArgs), vp]),
    }
    for cls in _VERSIONED:
        protos[cls.c_name + "_init"] = (ci, [P(cls), ctypes.c_uint])
    for name, (restype, argtypes) in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            # An older 0.2 build (an A/B baseline) may lack a newer entry point: calling
            # it then fails by name (ctypes: "undefined symbol"), the rest still works.
            continue
        fn.restype = restype
        fn.argtypes = argtypes


# void (*write)(void *user, const char *text)
WRITE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


def lib():
    """The loaded, checked, declared library (loaded on first use)."""
    global _lib, _path
    if _lib is None:
        with _lock:
            if _lib is None:
                handle, path = _open()
                _declare(handle)
                _check_api(handle, path)
                _path = path
                _lib = handle
    return _lib


def load_library(path):
    """The library at `path` (a file, or a bare soname for the system loader), opened,
    checked and declared; one handle per file however often it is asked for.
    Unlike lib() this ignores $FIJIT_LIBRARY: the caller chose the file."""
    path = os.fspath(path)
    if os.sep in path:
        path = os.path.abspath(path)
        if not os.path.exists(path):
            raise LibraryError(f"fijit: cannot load {path}: no such file")
    key = os.path.realpath(path) if os.sep in path else path
    with _lock:
        handle = _by_path.get(key)
        if handle is None:
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                raise LibraryError(f"fijit: cannot load {path}: {e}")
            _declare(handle)
            _check_api(handle, path)
            _by_path[key] = handle
    return handle


def library_path():
    """What was loaded: a path or the soname the system loader resolved."""
    lib()
    return _path


def library_version():
    """The library's version ("MAJOR.MINOR.PATCH", from fijit.h): the package's version too."""
    return lib().fi_version_string().decode()
