#!/usr/bin/env python3
"""CPU tests of the fijit Python package (no GPU, no torch): struct layouts and versions
against the C headers (a generated C program of _Static_asserts: nothing hand-kept),
defaults and the version from the library, library discovery and its API check, Spec
parse/format/check, error mapping, prewarm / stats / explain, a variant compile error
with the snippet's line numbers, `python -m fijit` (the C CLI), names that follow the
peers, an import graph without circles, the wheel refusing an unbuilt tree, and an
offline `pip install` into a fresh venv.

    python3 tests/python/test_package.py [build-dir]      (make test-python)

Prints one line per check; exit status 1 if any failed.
"""
import ast
import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
LIB = os.path.join(BUILD, "libfijit.so")
PKG = os.path.join(ROOT, "python")
sys.path.insert(0, PKG)
os.environ["FIJIT_LIBRARY"] = LIB
for var in ("FIJIT_ARCH", "FIJIT_JIT", "FIJIT_LOG", "FIJIT_MAX_CACHE_SIZE", "FIJIT_TEMPLATE_DIR"):
    os.environ.pop(var, None)
WORK = tempfile.mkdtemp(prefix="fijit-py.")
os.environ["FIJIT_CACHE_DIR"] = os.path.join(WORK, "cache")

import fijit  # noqa: E402
from fijit import _structs as S  # noqa: E402
from fijit import errors as E  # noqa: E402

from checks import check, failures, finish, raises  # noqa: E402,F401


def run(cmd, env=None, cwd=None):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


# ---- struct layouts and constants vs the C header --------------------------------------
def c_type_size(ctype):
    return ctypes.sizeof(ctype)


def layout_program():
    lines = ["#include <stddef.h>", "#include \"fijit.h\"",
             "#define SAME(what, a, b) _Static_assert((a) == (b), what)"]
    for cls in S.ALL:
        t = cls.c_name
        lines.append(f"SAME(\"sizeof {t}\", sizeof({t}), {ctypes.sizeof(cls)});")
        for fname, ftype in cls._fields_:
            off = getattr(cls, fname).offset
            lines.append(f"SAME(\"{t}.{fname} offset\", offsetof({t}, {fname}), {off});")
            lines.append(f"SAME(\"{t}.{fname} size\", sizeof((({t} *)0)->{fname}), "
                         f"{c_type_size(ftype)});")
    # enums and versions the package writes
    for prefix, table in (("FI_KIND_", S.KIND), ("FI_DTYPE_", S.DTYPE), ("FI_MASK_", S.MASK)):
        for name, value in table.items():
            lines.append(f"SAME(\"{prefix}{name.upper()}\", {prefix}{name.upper()}, {value});")
    pos_c = {"none": "FI_POS_NONE", "rope": "FI_POS_ROPE_LLAMA", "alibi": "FI_POS_ALIBI"}
    for name, value in S.POS.items():
        lines.append(f"SAME(\"{pos_c[name]}\", {pos_c[name]}, {value});")
    for name in ("VARG_FLOAT", "VARG_INT", "VARG_PTR", "VARIANT_REPLACE"):
        lines.append(f"SAME(\"FI_{name}\", FI_{name}, {getattr(S, name)});")
    for cls in S.ALL:
        if hasattr(cls, "VERSION"):
            macro = "FI_" + cls.c_name[len("fi_"):].upper() + "_VERSION"
            lines.append(f"SAME(\"{macro}\", {macro}, {cls.VERSION});")
    for code, cls in E.BY_CODE.items():
        lines.append(f"SAME(\"{cls.__name__} code\", {code}, {code});")
    return "\n".join(lines) + "\nint main(void) { return 0; }\n"


src = os.path.join(WORK, "layout.c")
with open(src, "w") as f:
    f.write(layout_program())
cc = os.environ.get("CC", "cc")
r = run([cc, "-std=c11", "-fsyntax-only", "-I", os.path.join(ROOT, "include"), src])
nfields = sum(len(c._fields_) for c in S.ALL)
check(f"layout: {len(S.ALL)} structs, {nfields} fields, enums and versions match the header",
      r.returncode == 0, r.stderr[-2000:])
# The check itself can fail: a wrong offset must be caught.
with open(src, "w") as f:
    f.write(layout_program().replace("offsetof(fi_decode_args, kv_len), ",
                                     "offsetof(fi_decode_args, kv_len) + 4, "))
r = run([cc, "-std=c11", "-fsyntax-only", "-I", os.path.join(ROOT, "include"), src])
check("layout: a shifted field is caught", r.returncode != 0 and "kv_len" in r.stderr)
e = raises(lambda: setattr(S.PrefillArgs(), "soft_cap", 1.0), AttributeError)
check("structs refuse a field they lack", isinstance(e, AttributeError) and "soft_cap" in str(e))
for code, cls in E.BY_CODE.items():
    lname = fijit._lib.lib().fi_error_name(code).decode()
    if not issubclass(cls, fijit.Error) or cls.code != code or not lname.startswith("FI_E"):
        check(f"error class of {code}", False, f"{cls.__name__} / {lname}")
check("every error code has a fijit.Error subclass", len(E.BY_CODE) == 11)

# ---- defaults and the version come from the library ------------------------------------
with open(os.path.join(ROOT, "include", "fijit.h")) as f:
    header = f.read()
HEADER_VERSION = ".".join(re.search(rf"^#define FIJIT_VERSION_{part} (\d+)$", header, re.M).group(1)
                          for part in ("MAJOR", "MINOR", "PATCH"))
versioned = [c for c in S.ALL if hasattr(c, "VERSION")]
made = {c: fijit._lib.new_struct(c) for c in versioned}
check(f"new_struct: every versioned struct ({len(versioned)}) at its VERSION from fi_<struct>_init",
      versioned == [c for c in S.ALL if c._fields_[0][0] == "version"]
      and all(s.version == c.VERSION for c, s in made.items()))
bdp, dec = made[S.BatchDecodePlanArgs], made[S.DecodeArgs]
check("new_struct: the *_INIT defaults are the library's (page_size 16, window_left -1)",
      (bdp.page_size, bdp.window_left, dec.window_left, made[S.JitOptions].jit) == (16, -1, -1, 1)
      and S.DecodeArgs().window_left == 0, repr((bdp.page_size, bdp.window_left)))
check("new_struct: fields given override the defaults, and each call is a fresh struct",
      fijit._lib.new_struct(S.DecodeArgs, window_left=7).window_left == 7
      and fijit._lib.new_struct(S.DecodeArgs).window_left == -1)
check("fijit.__version__ is the library's, as fijit.h writes it",
      fijit.__version__ == fijit.library_version() == HEADER_VERSION, fijit.__version__)
restated = []
for dirpath, _dirs, files in os.walk(PKG):
    for fname in files:
        if fname.endswith((".py", ".toml")):
            with open(os.path.join(dirpath, fname)) as f:
                if HEADER_VERSION in f.read():
                    restated.append(fname)
check(f"the version {HEADER_VERSION} is written nowhere in python/", not restated, repr(restated))

# ---- library discovery and version -----------------------------------------------------
PROBE = "import fijit, sys; print(fijit.library_path())"


def probe(pkg_parent, extra_env, drop_library=True):
    env = {k: v for k, v in os.environ.items() if k not in ("FIJIT_LIBRARY", "LD_LIBRARY_PATH")}
    if not drop_library:
        env["FIJIT_LIBRARY"] = os.environ["FIJIT_LIBRARY"]
    env.update(extra_env)
    env["PYTHONPATH"] = pkg_parent
    return run([sys.executable, "-c", PROBE], env=env, cwd=WORK)


r = probe(PKG, {"FIJIT_LIBRARY": LIB})
check("discovery: $FIJIT_LIBRARY", r.returncode == 0 and r.stdout.strip() == LIB, r.stderr)
r = probe(PKG, {"FIJIT_LIBRARY": "/nonexistent/libfijit.so"})
check("discovery: a missing $FIJIT_LIBRARY is a clear error naming it",
      r.returncode != 0 and "LibraryError" in r.stderr and "/nonexistent/libfijit.so" in r.stderr,
      r.stderr[-500:])
bare = os.path.join(WORK, "bare")
shutil.copytree(os.path.join(PKG, "fijit"), os.path.join(bare, "fijit"),
                ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
nextto = os.path.join(WORK, "nextto")
shutil.copytree(os.path.join(bare, "fijit"), os.path.join(nextto, "fijit"))
shutil.copy(os.path.realpath(LIB), os.path.join(nextto, "fijit", "libfijit.so"))
r = probe(nextto, {})
check("discovery: libfijit.so next to the package",
      r.returncode == 0 and r.stdout.strip() == os.path.join(nextto, "fijit", "libfijit.so"),
      r.stdout + r.stderr)
r = probe(bare, {"LD_LIBRARY_PATH": BUILD})
check("discovery: the system loader (LD_LIBRARY_PATH)",
      r.returncode == 0 and r.stdout.strip() == "libfijit.so.0", r.stdout + r.stderr)
if ctypes.util.find_library("fijit") is None:
    r = probe(bare, {})
    check("discovery: none found is a clear error listing what was tried",
          r.returncode != 0 and "cannot load libfijit.so" in r.stderr
          and "next to the package" in r.stderr and "system loader" in r.stderr, r.stderr[-800:])
else:
    print("note: a libfijit is installed system-wide; the none-found case is not checked")
def fake_library(name, text):
    src = os.path.join(WORK, name + ".c")
    with open(src, "w") as f:
        f.write('const char *fi_version_string(void) { return "0.9.0"; }\n' + text)
    path = os.path.join(WORK, name + ".so")
    run([cc, "-shared", "-fPIC", "-o", path, src])
    return path


fake = fake_library("libfake", "")
r = probe(PKG, {"FIJIT_LIBRARY": fake})
check("API: a library without fi_<struct>_init is refused naming its version and the function",
      r.returncode != 0 and "0.9.0" in r.stderr and "fi_jit_spec_init" in r.stderr, r.stderr[-500:])
refusing = fake_library("librefusing", "".join(
    f"int {c.c_name}_init(void *out, unsigned v) {{ (void)out; (void)v; return -1; }}\n"
    for c in S.ALL if hasattr(c, "VERSION")) +
    'const char *fi_last_error(void) { return "version 1 is not one this library accepts"; }\n'
    'const char *fi_error_name(int c) { (void)c; return "FI_EINVALID"; }\n')
r = probe(PKG, {"FIJIT_LIBRARY": refusing})
check("API: a library refusing the package's struct version is refused naming struct and version",
      r.returncode != 0 and "0.9.0" in r.stderr
      and f"fi_jit_spec version {S.JitSpec.VERSION}" in r.stderr
      and "not one this library accepts" in r.stderr, r.stderr[-500:])

# ---- a library per Context (A/B benchmarks bind several builds in one process) ----------
other_dir = os.path.join(WORK, "other")
os.makedirs(other_dir)
other = os.path.join(other_dir, "libfijit.so")
shutil.copy(os.path.realpath(LIB), other)
ctx_b = fijit.Context(os.path.join(WORK, "cache_b"), library=other)
check("Context(library=path) binds that file, not the default library",
      ctx_b.library_path == other and ctx_b.lib is not fijit._lib.lib()
      and fijit._lib.load_library(other) is ctx_b.lib, f"{ctx_b.library_path}")
e = raises(lambda: ctx_b.register_variant(None, os.path.join(WORK, "missing-in-b.cuh")),
           fijit.NotFoundError)
check("an error of a Context on another library carries that library's message",
      isinstance(e, fijit.NotFoundError) and "missing-in-b.cuh" in e.message, repr(e))
check("a spec string is parsed and prewarmed through the Context's library",
      ctx_b.prewarm("decode q=fp16 hd=64", "sm_90")[0][2] in ("compiled", "cached"))
e = raises(lambda: fijit._lib.load_library(os.path.join(WORK, "nowhere", "libfijit.so")),
           fijit.LibraryError)
check("load_library: a missing file is LibraryError naming it",
      isinstance(e, fijit.LibraryError) and "nowhere" in str(e), repr(e))
e = raises(lambda: fijit.Context(library=fake), fijit.LibraryError)
check("Context(library=) checks the library too",
      isinstance(e, fijit.LibraryError) and "0.9.0" in str(e), repr(e))
e = raises(lambda: fijit.Context(cache_dir=tempfile.mkdtemp(), remote="bogus://x"), fijit.Error)
check("Context(remote=) reaches fi_jit_options: a bad URL is InvalidError naming it",
      isinstance(e, fijit.InvalidError) and "bogus://" in str(e) and "expected redis://" in str(e), repr(e))
ctx_b.close()

# ---- one ctypes binding in the repo: the GPU tests and benchmarks go through python/fijit
bindings = []
for top in ("tests", "bench", "examples", "tools"):
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
        for fname in files:
            if fname.endswith(".py"):
                path = os.path.join(dirpath, fname)
                with open(path) as f:
                    text = f.read()
                if path == os.path.abspath(__file__):
                    continue
                # Struct mirrors anywhere; prototypes of fijit's functions (fi_*).
                # A test may still bind another library (the CUDA driver's cu*).
                for needle in ("ctypes.Structure", "ctypes.Union", "_fields_ ="):
                    if needle in text:
                        bindings.append(f"{os.path.relpath(path, ROOT)}: {needle}")
                for m in re.finditer(r"\bfi_\w+\.(argtypes|restype)\b", text):
                    bindings.append(f"{os.path.relpath(path, ROOT)}: {m.group(0)}")
check("no ctypes struct or fijit prototype outside python/fijit", not bindings,
      "; ".join(bindings))
import fijit.testing as fijit_py  # noqa: E402  (the GPU tests' and benchmarks' layer; no torch)
fj = fijit_py.Fijit(other)
check("fijit.testing: Fijit(lib) binds that file through the package",
      fj.lib is fijit._lib.load_library(other) and fijit_py.DecodeArgs is S.DecodeArgs
      and isinstance(fijit_py.BatchPrefillArgs(), S.BatchPrefillArgs)
      and fijit_py.BatchPrefillArgs().version == S.BatchPrefillArgs.VERSION)
e = raises(lambda: setattr(fijit_py.BatchPrefillArgs(), "window_left", 3), AttributeError)
check("fijit.testing: its structs refuse a field they lack",
      isinstance(e, AttributeError) and "window_left" in str(e), repr(e))
e = raises(lambda: fj.register_variant_file(os.path.join(WORK, "missing-fp.cuh")),
           fijit_py.FijitError)
check("fijit.testing: failures are fijit.Error with the library's message",
      isinstance(e, fijit.NotFoundError) and "missing-fp.cuh" in str(e), repr(e))
fj.close()

# ---- Spec ------------------------------------------------------------------------------
s = fijit.Spec.parse("prefill hd=64 q=bf16 mask=causal pos=rope softcap=1")
check("Spec.parse fills defaults (kv, o from q)",
      (s.kind, s.q_dtype, s.kv_dtype, s.o_dtype, s.head_dim, s.mask, s.pos, s.soft_cap) ==
      ("prefill", "bf16", "bf16", "bf16", 64, "causal", "rope", True), repr(s))
text = str(s)
check("Spec formats canonically and round-trips",
      text == "prefill q=bf16 kv=bf16 o=bf16 hd=64 mask=causal pos=rope softcap=1"
      and fijit.Spec.parse(text) == s, text)
check("Spec() defaults mirror FI_JIT_SPEC_INIT",
      str(fijit.Spec()) == "decode q=fp16 kv=fp16 o=fp16 hd=128 mask=none pos=none softcap=0")
e = raises(lambda: fijit.Spec.parse("decode q=fp99"), fijit.InvalidError)
check("Spec.parse: a bad value is InvalidError (a ValueError) with the code name and message",
      isinstance(e, fijit.InvalidError) and isinstance(e, ValueError) and e.code == -1
      and e.name == "FI_EINVALID" and "fp99" in e.message and "fi_jit_spec_parse" in str(e),
      repr(e))
e = raises(lambda: fijit.Spec.parse("decode q=fp16 hd=96"), fijit.UnsupportedError)
check("Spec.parse refuses what str() would: head_dim 96, naming the field",
      isinstance(e, fijit.UnsupportedError) and "head_dim 96" in e.message, repr(e))
every = fijit.accepted_specs()
prefill_specs = fijit.accepted_specs("prefill")
check("accepted_specs: the library's tuple space, each spec valid and written back as parsed",
      len(every) > len(prefill_specs) > 0 and all(x.kind == "prefill" for x in prefill_specs)
      and all(fijit.Spec.parse(str(x)) == x for x in every[::37])
      and fijit.Spec.parse("prefill q=bf16 hd=192 hd_vo=128 mask=causal") in prefill_specs
      and fijit.Spec(head_dim=96) not in every, f"{len(every)} specs")
e = raises(lambda: fijit.Spec(head_dim=96).check(), fijit.Error)
check("Spec.check refuses head_dim 96 naming the field",
      isinstance(e, fijit.Error) and "head_dim" in str(e), repr(e))
fp8 = dict(kind="prefill", q_dtype="fp8_e4m3", o_dtype="bf16")
e = raises(lambda: fijit.Spec(head_dim=64, **fp8).check(), fijit.UnsupportedError)
check("Spec.check: fp8 prefill at hd 128 accepted, at hd 64 UnsupportedError naming head_dim",
      str(fijit.Spec(**fp8).check()).startswith("prefill q=fp8_e4m3 kv=fp8_e4m3 o=bf16 hd=128")
      and isinstance(e, fijit.UnsupportedError) and "head_dim" in str(e), repr(e))
e = raises(lambda: fijit.Spec(kv_dtype="fp16", **fp8).check(), fijit.UnsupportedError)
check("Spec.check: fp8 q with fp16 kv is UnsupportedError",
      isinstance(e, fijit.UnsupportedError) and "kv" in str(e), repr(e))
e = raises(lambda: fijit.Spec(mask="diagonal"), ValueError)
check("Spec() refuses an unknown name", isinstance(e, ValueError) and "mask" in str(e))
mla = fijit.Spec.parse("prefill q=bf16 hd=192 hd_vo=128 mask=causal")
check("Spec: MLA's prefill (hd 192, hd_vo 128) round-trips; hd_vo equal to hd is no field",
      mla.head_dim_vo == 128 and str(mla.check()).endswith(" hd_vo=128")
      and fijit.Spec.parse(str(mla)) == mla and fijit.Spec(head_dim_vo=128) == fijit.Spec()
      and "hd_vo" not in str(fijit.Spec(head_dim_vo=128)), str(mla))
e = raises(lambda: fijit.Spec(kind="decode", head_dim=192, head_dim_vo=128).check(),
           fijit.UnsupportedError)
check("Spec.check: decode with hd_vo is UnsupportedError naming head_dim",
      isinstance(e, fijit.UnsupportedError) and "head_dim" in str(e), repr(e))

# ---- errors from a context -------------------------------------------------------------
unsafe = os.path.join(WORK, "unsafe")
os.makedirs(unsafe)
os.chmod(unsafe, 0o777)
e = raises(lambda: fijit.Context(unsafe), fijit.UnsafeCacheDirError)
check("a world-writable cache dir is UnsafeCacheDirError (FI_EPERM)",
      isinstance(e, fijit.UnsafeCacheDirError) and e.name == "FI_EPERM" and e.message, repr(e))
ctx = fijit.Context(os.path.join(WORK, "ctxcache"))
e = raises(lambda: ctx.register_variant("bad name!", "struct Variant : fijit::DefaultVariant {};\n"),
           fijit.InvalidError)
check("a bad variant name is InvalidError", isinstance(e, fijit.InvalidError), repr(e))
e = raises(lambda: ctx.register_variant(None, os.path.join(WORK, "missing.cuh")),
           fijit.NotFoundError)
check("a missing variant file is NotFoundError", isinstance(e, fijit.NotFoundError), repr(e))

# ---- prewarm, stats, explain, a variant that does not compile ---------------------------
SPEC = "decode q=fp16 hd=64"
res = fijit.prewarm([SPEC], arch="sm_90a")
check("prewarm compiles without a GPU",
      [(str(sp), a, o) for sp, a, o in res] ==
      [("decode q=fp16 kv=fp16 o=fp16 hd=64 mask=none pos=none softcap=0", "sm_90a", "compiled")],
      repr(res))
res = fijit.prewarm(SPEC, arch="sm_90a")
check("prewarm again: cached", res[0][2] == "cached", repr(res))
st = fijit.stats()
check("stats: one compile, one entry, one disk hit",
      set(st) == set(S.STATS_COUNTERS) and st["compiles"] == 1 and st["entries"] == 1
      and st["disk_hits"] == 1 and st["compile_ns"] > 0, repr(st))
text = fijit.explain(SPEC, "sm_90a")
check("explain names the arch and the spec", "sm_90a" in text and "hd=64" in text, text[:300])
broken = os.path.join(WORK, "broken.cuh")
with open(broken, "w") as f:
    f.write("// Uses a name that does not exist.\n"
            "struct Variant : fijit::DefaultVariant {\n"
            "    template <class P>\n"
            "    static __device__ __forceinline__ float query_transform(const P &p, float q, int h, int d)\n"
            "    { return undefined_scale * q * p.sm_scale; }\n"
            "};\n")
name = fijit.register_variant(None, broken)
e = raises(lambda: fijit.prewarm(f"{SPEC} variant={name}", arch="sm_90a"), fijit.CompileError)
check("a variant that does not compile is CompileError with the snippet's file and line",
      isinstance(e, fijit.CompileError) and e.name == "FI_ECOMPILE"
      and f"{broken}(5)" in e.message and "undefined_scale" in e.message, repr(e)[:1500])
check("the compile failure is counted", fijit.stats()["compile_failures"] == 1)

# ---- explain with the unit and its PTX; get_kernel -----------------------------------------
text = fijit.explain(SPEC, "sm_90a", source=True, ptx=True)
unit_at, ptx_at = text.find("\n---- translation unit ----\n"), text.find("\n---- PTX ----\n")
check("explain(source=True, ptx=True): the key's fields, then the unit, then its PTX",
      0 < unit_at < ptx_at and "hd=64" in text[:unit_at]
      and "constexpr int kHeadDim = 64;" in text[unit_at:ptx_at]
      and '#include "decode/decode.cuh"' in text[unit_at:ptx_at]
      and ".target sm_90a" in text[ptx_at:] and "fi_decode_kernel" in text[ptx_at:]
      and fijit.explain(SPEC, "sm_90a") == text[:unit_at], text[:200])
check("explain(source=True) alone: no PTX part",
      "---- PTX ----" not in fijit.explain(SPEC, "sm_90a", source=True))
e = raises(lambda: fijit.explain("decode q=fp16 hd=96", "sm_90a", source=True),
           fijit.UnsupportedError)
check("explain(source=True) of a spec fijit does not build: UnsupportedError naming head_dim",
      isinstance(e, fijit.UnsupportedError) and "head_dim" in str(e), repr(e))
e = raises(lambda: fijit.get_kernel(SPEC), fijit.Error)
check("get_kernel without a GPU driver: NoDeviceError saying so (nothing crashes)",
      isinstance(e, fijit.NoDeviceError) and "libcuda" in str(e), repr(e))
e = raises(lambda: fijit.get_kernel("decode q=fp99"), fijit.InvalidError)
check("get_kernel of a bad spec: InvalidError before any driver call",
      isinstance(e, fijit.InvalidError) and "fp99" in str(e), repr(e))

# ---- python -m fijit: the C CLI ---------------------------------------------------------
env = dict(os.environ, PYTHONPATH=PKG, FIJIT_BUILD_DIR=BUILD)
r = run([sys.executable, "-m", "fijit", "--version"], env=env)
cli = run([os.path.join(BUILD, "fijit"), "--version"])
check("python -m fijit --version is the C CLI's",
      r.returncode == 0 and r.stdout == cli.stdout and r.stdout.strip() == f"fijit {HEADER_VERSION}",
      r.stdout + r.stderr)
r = run([sys.executable, "-m", "fijit", "prewarm", "--kernel", "decode", "--dtype", "fp16",
         "--head-dim", "64", "--arch", "sm_90a"], env=env)
check("python -m fijit prewarm: the cached spec, exit 0",
      r.returncode == 0 and r.stdout.startswith("cached    decode q=fp16 kv=fp16 o=fp16 hd=64")
      and "1 spec, 0 compiled, 1 already cached, 0 failed" in r.stdout, r.stdout + r.stderr)
r = run([sys.executable, "-m", "fijit", "prewarm", "-j", "2", "--kernel", "decode", "--dtype",
         "fp16,bf16", "--head-dim", "64", "--mask", "window", "--arch", "sm_90a"], env=env)
check("python -m fijit prewarm -j 2: two specs on two workers",
      r.returncode == 0 and "2 specs, 2 compiled" in r.stdout and "(-j 2)" in r.stdout,
      r.stdout + r.stderr)
r = run([sys.executable, "-m", "fijit", "prewarm", "--dtype", "fp99"], env=env)
check("python -m fijit prewarm: a bad dtype is exit 2 naming it",
      r.returncode == 2 and "fp99" in r.stderr, r.stdout + r.stderr)
r = run([sys.executable, "-m", "fijit", "stats", "--json"], env=env)
check("python -m fijit stats --json", r.returncode == 0 and '"entries":3' in r.stdout, r.stdout)
r = run([sys.executable, "-m", "fijit", "--version"],  # the package away from the source tree
        env=dict(env, PYTHONPATH=bare, FIJIT_BUILD_DIR=os.path.join(WORK, "nowhere"),
                 PATH="/nonexistent"), cwd=WORK)
if r.returncode == 2:
    check("python -m fijit without the CLI: exit 2 saying where it looked",
          "not installed" in r.stderr and "nowhere" in r.stderr, r.stderr)
else:
    print("note: a fijit command is installed for this interpreter; the not-found case is not "
          "checked")

# ---- names that follow the peers, an import graph without circles -------------------------
def module_ast(name):
    with open(os.path.join(PKG, "fijit", *name.split(".")) + ".py") as f:
        return ast.parse(f.read())


def function(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


# flash-attn's softcap slot holds the soft-cap under the package's name for it.
FLASH_VARLEN = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                "dropout_p", "softmax_scale", "causal", "window_size", "logits_soft_cap",
                "alibi_slopes"]
fn = function(module_ast("attention"), "varlen_prefill")
got = [a.arg for a in fn.args.args]
check("varlen_prefill takes flash_attn_varlen_func's arguments in its order",
      got == FLASH_VARLEN, repr(got))
# ---- logits_soft_cap, and softcap= as its deprecated alias -----------------------------------
import warnings  # noqa: E402
from fijit._callspec import soft_cap_arg  # noqa: E402
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    alias = soft_cap_arg(None, 30, "fijit.decode")
    plain = soft_cap_arg(25.0, None, "fijit.decode")
check("softcap= still works for one release, with a DeprecationWarning naming the new name",
      alias == 30.0 and plain == 25.0 and soft_cap_arg(None, None, "f") == 0.0
      and [w.category for w in caught] == [DeprecationWarning]
      and "logits_soft_cap" in str(caught[0].message), repr([str(w.message) for w in caught]))
e = raises(lambda: soft_cap_arg(30.0, 30.0, "fijit.prefill"), TypeError)
check("logits_soft_cap and softcap both given: TypeError naming both",
      isinstance(e, TypeError) and "logits_soft_cap" in str(e) and "softcap" in str(e), repr(e))
for bad in (-1.0, float("nan"), float("inf")):
    e = raises(lambda: soft_cap_arg(bad, None, "fijit.prefill"), ValueError)
    check(f"logits_soft_cap={bad}: ValueError", isinstance(e, ValueError), repr(e))
SOFT_CAP_TAKERS = {"attention": ("decode", "prefill", "varlen_prefill"),
                   "plans": ("plan",), "mla": ("plan", "mla_decode"),
                   "padded": ("plan", "padded_attention")}
missing = []
for m, names in SOFT_CAP_TAKERS.items():
    tree = module_ast(m)
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in names):
        args = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
        calls_helper = any(isinstance(c, ast.Call) and getattr(c.func, "id", "") == "soft_cap_arg"
                           for c in ast.walk(fn))
        if not ("logits_soft_cap" in args and "softcap" in args and calls_helper):
            missing.append(f"{m}.{fn.name}({', '.join(args)})")
check("every call that takes a soft-cap names it logits_soft_cap and maps softcap= through "
      "soft_cap_arg", not missing, "; ".join(missing))
takers = [n.name for n in ast.walk(module_ast("attention")) if isinstance(n, ast.FunctionDef)
          and "workspace" in [a.arg for a in n.args.kwonlyargs]]
check("fijit.decode and fijit.prefill take workspace=",
      {"decode", "prefill"} <= set(takers), repr(takers))

plans_tree = module_ast("plans")
docs = {n.name: ast.get_docstring(n) or "" for n in plans_tree.body if isinstance(n, ast.ClassDef)}
check("the plans say where they differ from FlashInfer's argument order",
      all("FlashInfer" in docs[c] and "order" in docs[c]
          for c in ("BatchDecodePlan", "BatchPrefillPlan")), repr(docs)[:500])


# The structs the torch-only paths build (run on a GPU only): every field they name exists.
unknown, calls = [], 0
for m in ("attention", "plans", "context", "spec", "mla", "padded"):
    for node in ast.walk(module_ast(m)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "new_struct":
            cls = getattr(S, node.args[0].attr)
            calls += 1
            names = {f for f, _ in cls._fields_}
            unknown += [f"{m}: {cls.c_name}.{k.arg}" for k in node.keywords
                        if k.arg is not None and k.arg not in names]
check(f"new_struct calls ({calls}) name only fields their struct has", calls >= 10 and not unknown,
      "; ".join(unknown))


def package_modules():
    out = []
    for dirpath, _dirs, files in os.walk(os.path.join(PKG, "fijit")):
        for fname in files:
            if fname.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, fname), PKG)[:-3].replace(os.sep, ".")
                out.append(rel[:-len(".__init__")] if rel.endswith(".__init__") else rel)
    return sorted(out)


def imports_of(module, tree):
    """The package's modules `module` imports, anywhere in it (function bodies too)."""
    package = module if module in ("fijit", "fijit.integrations") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "fijit")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "fijit":
                base = node.module
            else:
                continue
            for a in node.names:  # `from . import _structs` names a module
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


MODULES = package_modules()
graph = {m: imports_of(m, module_ast(m[len("fijit."):] if m != "fijit" else "__init__")
                       if m != "fijit.integrations"
                       else module_ast("integrations.__init__")) for m in MODULES}


def find_cycle(graph):
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state:
                cycle = visit(n)
                if cycle:
                    return cycle
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return None


cycle = find_cycle(graph)
check(f"the package's import graph ({len(MODULES)} modules, function-level imports too) has no "
      "circle", cycle is None and "fijit._ops" in graph["fijit.attention"], " -> ".join(cycle or []))
check("the circle finder finds one", find_cycle(dict(graph, **{"fijit.errors": {"fijit._lib"}}))
      is not None)
alone = []
for m in MODULES:
    r = run([sys.executable, "-c", f"import {m}"], env=env, cwd=WORK)
    torch_missing = "No module named 'torch'" in r.stderr
    if r.returncode != 0 and not torch_missing:
        alone.append(f"{m}: {r.stderr.strip().splitlines()[-1]}")
check(f"each of the {len(MODULES)} modules imports alone (those needing torch fail only for it)",
      not alone, "; ".join(alone))

# ---- torch is optional -----------------------------------------------------------------
try:
    import torch  # noqa: F401
    print("note: torch is importable here; the no-torch check is skipped")
except ImportError:
    e = raises(lambda: fijit.prefill, ImportError)
    check("without torch, fijit imports and fijit.prefill raises ImportError saying how to "
          "install it", isinstance(e, ImportError) and "fijit.prefill needs PyTorch" in str(e)
          and "pip install torch" in str(e), repr(e))

# ---- the wheel: refused from an unbuilt tree; installed offline into a fresh venv ---------
empty_build = os.path.join(WORK, "unbuilt")
os.makedirs(empty_build)
r = run([sys.executable, "-c", "import sys, fijit_build; fijit_build.build_wheel(sys.argv[1])",
         WORK], env=dict(os.environ, FIJIT_BUILD_DIR=empty_build), cwd=PKG)
check("wheel: an unbuilt tree is refused saying what to build",
      r.returncode != 0 and "BuildError" in r.stderr and empty_build in r.stderr
      and "make build/libfijit.so build/fijit" in r.stderr
      and not any(n.endswith(".whl") for n in os.listdir(WORK)), r.stderr[-800:])
venv = os.path.join(WORK, "venv")
r = run([sys.executable, "-m", "venv", venv])
if r.returncode != 0:
    check("offline install: python3 -m venv (Debian: python3-venv)", False, r.stderr[-500:])
else:
    pip = os.path.join(venv, "bin", "pip")
    r = run([pip, "install", "-q", "--no-build-isolation", "--no-index", PKG],
            env=dict(os.environ, FIJIT_BUILD_DIR=BUILD, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    check("offline install: pip install --no-build-isolation --no-index ./python",
          r.returncode == 0, r.stdout[-500:] + r.stderr[-1500:])
    env = {k: v for k, v in os.environ.items()
           if k not in ("FIJIT_LIBRARY", "PYTHONPATH", "FIJIT_BUILD_DIR")}
    py = os.path.join(venv, "bin", "python")
    r = run([py, "-c", "import fijit; print(fijit.library_path()); print(fijit.__version__)"],
            env=env, cwd=WORK)
    check("offline install: the installed package loads the library it carries",
          r.returncode == 0 and r.stdout.split()[0].startswith(venv)
          and r.stdout.split()[1] == HEADER_VERSION, r.stdout + r.stderr)
    r = run([os.path.join(venv, "bin", "fijit"), "--version"], env=env, cwd=WORK)
    check("offline install: the wheel installs the C CLI as the fijit command",
          r.returncode == 0 and r.stdout.strip() == f"fijit {HEADER_VERSION}", r.stdout + r.stderr)
    r = run([py, "-m", "fijit", "prewarm", "--kernel", "decode", "--dtype", "fp16",
             "--head-dim", "64", "--arch", "sm_90a"], env=env, cwd=WORK)
    check("offline install: python -m fijit prewarm from the venv runs that command",
          r.returncode == 0 and "1 already cached" in r.stdout and "(-j " in r.stdout,
          r.stdout + r.stderr)

shutil.rmtree(WORK, ignore_errors=True)
finish("test_package")
