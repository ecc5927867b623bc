"""Exceptions: one class per fijit error code, each carrying the code, its name
(fi_error_name) and the library's message for the failed call (fi_last_error).

Where a code has an obvious Python counterpart the class derives from it too, so
`except ValueError` catches an invalid argument the C library refused."""


class Error(Exception):
    """A fijit call returned a negative code. .code (int), .name ("FI_EINVALID"),
    .message (the library's words), .call (the C function)."""
    code = None

    def __init__(self, message, *, code=None, name=None, call=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.name = name
        self.call = call

    def __str__(self):
        head = f"{self.call}: " if self.call else ""
        tag = f" [{self.name}]" if self.name else ""
        return f"{head}{self.message}{tag}"


class LibraryError(ImportError):
    """libfijit.so could not be found or loaded, or its version does not match."""


class InvalidError(Error, ValueError):
    code = -1


class NotFoundError(Error, LookupError):
    code = -2


class CompileError(Error):
    """NVRTC rejected the source; for a variant the message carries NVRTC's log with
    the snippet's own file name and line numbers."""
    code = -3


class LoadError(Error):
    code = -4


class DiskError(Error):
    """FI_EIO: a file or database operation failed."""
    code = -5


class OutOfMemoryError(Error, MemoryError):
    code = -6


class UnsupportedError(Error, NotImplementedError):
    code = -7


class NoDeviceError(Error):
    code = -8


class CorruptError(Error):
    code = -9


class CudaError(Error):
    code = -10


class UnsafeCacheDirError(Error, PermissionError):
    """FI_EPERM: the cache directory belongs to someone else or is writable by others."""
    code = -11


BY_CODE = {c.code: c for c in (InvalidError, NotFoundError, CompileError, LoadError, DiskError,
                               OutOfMemoryError, UnsupportedError, NoDeviceError, CorruptError,
                               CudaError, UnsafeCacheDirError)}


def check(rc, call, lib):
    """Raise the Error subclass for a negative return code of `call`; return rc otherwise.
    `lib`: the library handle that made the call (its fi_last_error holds the message)."""
    if rc >= 0:
        return rc
    message = (lib.fi_last_error() or b"").decode(errors="replace") or "(no message)"
    name = (lib.fi_error_name(rc) or b"").decode(errors="replace")
    cls = BY_CODE.get(rc, Error)
    raise cls(message, code=rc, name=name, call=call)
