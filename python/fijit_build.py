"""A PEP 517 build backend in the standard library alone, so that `pip install ./python`
works on machines with no package index (no setuptools/wheel to fetch). It builds one
wheel: the fijit package, plus libfijit.so from $FIJIT_BUILD_DIR or ../build when one
is there (then the wheel is tagged for this platform)."""
import base64
import hashlib
import os
import sysconfig
import zipfile

NAME, VERSION = "fijit", "0.2.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def _library():
    """The built library to ship, or None."""
    build = os.environ.get("FIJIT_BUILD_DIR") or os.path.join(HERE, "..", "build")
    for name in ("libfijit.so.0.2.0", "libfijit.so"):
        path = os.path.join(build, name)
        if os.path.isfile(path):
            return os.path.realpath(path)
    return None


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
    lib = _library()
    if lib:
        with open(lib, "rb") as fh:
            yield f"{NAME}/libfijit.so", fh.read()


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            "Summary: JIT-compiled, cached attention kernels for PyTorch\n"
            "Requires-Python: >=3.8\n").encode()


def _tag():
    if _library():
        return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-any"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    tag = _tag()
    wheel_name = f"{NAME}-{VERSION}-{tag}.whl"
    dist_info = f"{NAME}-{VERSION}.dist-info"
    wheel_meta = (f"Wheel-Version: 1.0\nGenerator: fijit_build\n"
                  f"Root-Is-Purelib: {'true' if tag.endswith('any') else 'false'}\n"
                  f"Tag: {tag}\n").encode()
    entries = list(_files()) + [(f"{dist_info}/METADATA", _metadata()),
                                (f"{dist_info}/WHEEL", wheel_meta)]
    record = [_record_line(n, d) for n, d in entries] + [f"{dist_info}/RECORD,,"]
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
        zf.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []
