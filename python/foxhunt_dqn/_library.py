"""Finding, loading and negotiating with libfoxhunt_dqn.so."""

import ctypes
import json
import os
import threading
from pathlib import Path

from . import _abi
from .errors import LibraryError, LibraryNotFoundError

LIBRARY_ENV = "FOXHUNT_DQN_LIBRARY"
LIBRARY_NAME = "libfoxhunt_dqn.so"

_PACKAGE_DIR = Path(__file__).resolve().parent
# python/foxhunt_dqn -> python -> the repository root
_REPO_ROOT = _PACKAGE_DIR.parent.parent

_lock = threading.Lock()
_loaded = {}  # realpath -> Library


def candidate_paths():
    """Where find_library looks when neither an explicit path nor the env var is given: the
    package directory (an installed wheel may ship the library there), then
    <repo>/build*/libfoxhunt_dqn.so, newest first."""
    paths = [_PACKAGE_DIR / LIBRARY_NAME]
    builds = [p for p in _REPO_ROOT.glob("build*/" + LIBRARY_NAME) if p.is_file()]
    builds.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return paths + builds


def _named_file(p, what):
    """p itself when it is a file, p/libfoxhunt_dqn.so when it is a directory."""
    f = p / LIBRARY_NAME if p.is_dir() else p
    if not f.is_file():
        kind = f"the directory holds no {LIBRARY_NAME}" if p.is_dir() else "no such file"
        raise LibraryNotFoundError(None, "FHD_LIBRARY_NOT_FOUND", f"{what} {str(f)!r}: {kind}")
    return f


def find_library(path=None):
    """Path of the library to load: `path` if given, else $FOXHUNT_DQN_LIBRARY, else the first
    existing file of candidate_paths(). `path` and the variable may name the file or a
    directory holding libfoxhunt_dqn.so. Raises LibraryNotFoundError naming what was tried."""
    if path is not None:
        return _named_file(Path(os.fspath(path)), "library path")
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return _named_file(Path(env), f"{LIBRARY_ENV}={env!r}:")
    tried = candidate_paths()
    for p in tried:
        if p.is_file():
            return p
    raise LibraryNotFoundError(
        None,
        "FHD_LIBRARY_NOT_FOUND",
        f"{LIBRARY_NAME} not found: pass library=PATH, set {LIBRARY_ENV}, or build it "
        f"(cmake -S . -B build && cmake --build build --target foxhunt_dqn); looked in "
        + ", ".join(str(p) for p in [_PACKAGE_DIR, _REPO_ROOT / "build*"]),
    )


class Library:
    """One loaded libfoxhunt_dqn.so and its v1 function table.

    Use load_library() rather than the constructor: it loads each file once per process.
    Attributes: path, version (library version string), abi_major, abi_minor, api (the
    ctypes FhdApiV1 table; its function pointers are also cached as attributes of
    ``self.fn``)."""

    def __init__(self, path):
        self.path = Path(path)
        try:
            self._dll = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise LibraryError(
                None, "FHD_LIBRARY_LOAD_FAILED", f"cannot load {str(self.path)!r}: {exc}"
            ) from exc
        try:
            entry = getattr(self._dll, _abi.ENTRY_SYMBOL)
        except AttributeError:
            raise LibraryError(
                None,
                "FHD_LIBRARY_LOAD_FAILED",
                f"{str(self.path)!r} does not export {_abi.ENTRY_SYMBOL}; is it libfoxhunt_dqn?",
            ) from None
        entry.restype = ctypes.c_void_p
        entry.argtypes = []
        base_addr = entry()
        if not base_addr:
            raise LibraryError(
                None, "FHD_LIBRARY_LOAD_FAILED", f"{_abi.ENTRY_SYMBOL} returned NULL"
            )
        # fhd_api_base is frozen; still, read only what its struct_size says exists.
        base_size = ctypes.c_uint32.from_address(base_addr).value
        if base_size < ctypes.sizeof(_abi.FhdApiBase):
            raise LibraryError(
                None,
                "FHD_ERR_STRUCT_SIZE",
                f"fhd_api_base.struct_size is {base_size}; at least "
                f"{ctypes.sizeof(_abi.FhdApiBase)} is required",
            )
        base = _abi.FhdApiBase.from_address(base_addr)
        self.version = base.version.decode("utf-8", "replace") if base.version else "?"
        self.newest_abi_major = int(base.abi_major)
        err = _abi.FhdError.new()
        api_addr = base.get_api(_abi.ABI_MAJOR, ctypes.byref(err))
        if not api_addr:
            msg = err.message.decode("utf-8", "replace") or "get_api returned NULL"
            raise LibraryError(
                err.code or _abi.ERR_UNSUPPORTED_VERSION,
                "FHD_ERR_UNSUPPORTED_VERSION",
                f"{str(self.path)!r} (version {self.version}, newest ABI major "
                f"{self.newest_abi_major}) does not provide ABI major {_abi.ABI_MAJOR}, "
                f"which this binding is written for: {msg}",
            )
        size = ctypes.c_uint32.from_address(api_addr).value
        major = ctypes.c_uint32.from_address(api_addr + 4).value
        if major != _abi.ABI_MAJOR:
            raise LibraryError(
                _abi.ERR_UNSUPPORTED_VERSION,
                "FHD_ERR_UNSUPPORTED_VERSION",
                f"get_api({_abi.ABI_MAJOR}) returned a table of ABI major {major}",
            )
        need = max(_abi.member_end(m) for m in _abi.REQUIRED_MEMBERS)
        if size < need:
            missing = [m for m in _abi.REQUIRED_MEMBERS if _abi.member_end(m) > size]
            raise LibraryError(
                _abi.ERR_STRUCT_SIZE,
                "FHD_ERR_STRUCT_SIZE",
                f"the library's fhd_api_v1 table is {size} bytes; this binding needs {need} "
                f"(missing: {', '.join(missing)})",
            )
        self.api = _abi.FhdApiV1.from_address(api_addr)
        self.abi_major = int(self.api.abi_major)
        self.abi_minor = int(self.api.abi_minor)
        self.table_size = size
        # Minor 1 (FHD_API_HAS(api, obs_info)): the library has obs_info and reads the
        # trailing *_u8 and valid fields of the argument structs.
        self.has_minor1 = _abi.has_member(size, "obs_info")
        # Cache the function objects: reading a CFUNCTYPE field builds a new object each time.
        self.fn = _Functions(self.api, size)
        self._manifest_text = None

    def status_name(self, code):
        return self.fn.status_name(int(code)).decode("utf-8", "replace")

    def status_message(self, code):
        return self.fn.status_message(int(code)).decode("utf-8", "replace")

    def manifest_text(self):
        if self._manifest_text is None:
            self._manifest_text = self.fn.manifest().decode("utf-8")
        return self._manifest_text

    def manifest(self):
        """The library's manifest.json, parsed (a new dict each call)."""
        return json.loads(self.manifest_text())

    def __repr__(self):
        return (
            f"<foxhunt_dqn.Library {str(self.path)!r} version {self.version} "
            f"ABI {self.abi_major}.{self.abi_minor}>"
        )


class _Functions:
    __slots__ = _abi.API_MEMBERS

    def __init__(self, api, table_size):
        # A member the table does not hold is None: it is never read past the table's end.
        for name in _abi.API_MEMBERS:
            present = _abi.has_member(table_size, name)
            setattr(self, name, getattr(api, name) if present else None)


def load_library(path=None):
    """Load (once per file and process) and return the Library.

    `path`: a file or a directory holding libfoxhunt_dqn.so; None means $FOXHUNT_DQN_LIBRARY,
    then the package directory, then <repo>/build*/. An already loaded Library passes through.
    """
    if isinstance(path, Library):
        return path
    p = find_library(path)
    key = os.path.realpath(p)
    with _lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = Library(p)
            _loaded[key] = lib
    return lib


def manifest(library=None):
    """The manifest of the library (see load_library for `library`), as a dict."""
    return load_library(library).manifest()
