"""A PEP 517 build backend in the standard library alone, so that `pip install ./python`
works on machines with no package index (no setuptools/wheel to fetch). It builds one
wheel, tagged for this platform: the fijit package with libfijit.so beside it, and the
fijit command (the C CLI, which `python -m fijit` runs), both from $FIJIT_BUILD_DIR or
../build. A tree where they are not built is refused, saying what to run. The version
is the library's, read from include/fijit.h (the one place it is written)."""
import base64
import hashlib
import os
import re
import stat
import sysconfig
import zipfile

NAME = "fijit"
HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "include", "fijit.h")


class BuildError(RuntimeError):
    pass


def _version():
    """"MAJOR.MINOR.PATCH" from fijit.h's FIJIT_VERSION_* macros."""
    try:
        with open(HEADER) as f:
            text = f.read()
    except OSError as e:
        raise BuildError(f"fijit: cannot read the version from {HEADER}: {e}") from None
    parts = [re.search(rf"^#define FIJIT_VERSION_{p} (\d+)$", text, re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise BuildError(f"fijit: {HEADER} lacks FIJIT_VERSION_MAJOR/MINOR/PATCH")
    return ".".join(m.group(1) for m in parts)


def _built(name):
    """A built file of the C tree (realpath), or BuildError saying how to build it."""
    build = os.path.abspath(os.environ.get("FIJIT_BUILD_DIR") or os.path.join(HERE, "..", "build"))
    path = os.path.join(build, name)
    if not os.path.isfile(path):
        raise BuildError(f"fijit: {path} is missing: the wheel ships the built library and CLI; "
                         f"run `make build/libfijit.so build/fijit` first (or point "
                         f"FIJIT_BUILD_DIR at a build directory)")
    return os.path.realpath(path)


def _files():
    """(archive name, bytes) of the package."""
    root = os.path.join(HERE, NAME)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path, "rb") as fh:
                    yield os.path.relpath(path, HERE).replace(os.sep, "/"), fh.read()
    with open(_built("libfijit.so"), "rb") as fh:
        yield f"{NAME}/libfijit.so", fh.read()


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: JIT-compiled, cached attention kernels for PyTorch\n"
            "Requires-Python: >=3.8\n").encode()


def _tag():
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version, tag = _version(), _tag()
    wheel_name = f"{NAME}-{version}-{tag}.whl"
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_meta = (f"Wheel-Version: 1.0\nGenerator: fijit_build\nRoot-Is-Purelib: false\n"
                  f"Tag: {tag}\n").encode()
    with open(_built("fijit"), "rb") as fh:
        cli = (f"{NAME}-{version}.data/scripts/fijit", fh.read())  # installed as `fijit`
    entries = list(_files()) + [cli, (f"{dist_info}/METADATA", _metadata(version)),
                                (f"{dist_info}/WHEEL", wheel_meta)]
    record = [_record_line(n, d) for n, d in entries] + [f"{dist_info}/RECORD,,"]
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            executable = name.endswith(".so") or name == cli[0]
            # A regular file's mode: installers make a file executable only with S_IFREG.
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
        zf.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []
