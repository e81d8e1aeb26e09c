"""Compiling CPU kernels with Numba, and caching them on disk.

Kernels are cached under ``<cache root>/numba/<package version>-<source hash>``,
where the source hash covers every module of `infini.ops.native.cpu` (a kernel
inlines helpers from other modules, so a change to any of them must invalidate
the cache). The cache root is ``$INFINI_OPS_CACHE_DIR``, else
``$XDG_CACHE_HOME/infiniops`` (``~/.cache/infiniops``), else a directory under
the system temporary directory. Nothing is written into site-packages.

A build that compiled kernels ahead (`INFINI_OPS_PRECOMPILE`, README) ships
them as ``infini/ops/_kernels/<package version>-<source hash>``; the first
process of an install copies the files its cache directory lacks from
there (and marks the directory), so a fresh install loads those kernels
instead of compiling them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import types
from functools import cache
from pathlib import Path

import numba
from numba.core import caching
from numba.core.dispatcher import Dispatcher

_PACKAGE_DIR = Path(__file__).resolve().parent
# Kernels compiled when the package was built (see `_seed_from_package`).
_SHIPPED_KERNELS = _PACKAGE_DIR.parents[1] / "_kernels"


def cache_root() -> Path:
    explicit = os.environ.get("INFINI_OPS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "infiniops"
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "infiniops"
    home = Path.home()
    if str(home) not in ("", "/") and os.access(home, os.W_OK):
        return home / ".cache" / "infiniops"
    return Path(tempfile.gettempdir()) / "infiniops"


@cache
def kernel_source_fingerprint() -> str:
    digest = hashlib.sha256()
    digest.update(f"numba={numba.__version__}\n".encode())
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE_DIR)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@cache
def kernel_cache_dir() -> Path:
    from infini.ops.core.manifest import load_manifest

    version = load_manifest().get("package_version", "0")
    name = f"{version}-{kernel_source_fingerprint()}"
    directory = cache_root() / "numba" / name
    if not (directory / SEEDED_MARKER).is_file():
        _seed_from_package(_SHIPPED_KERNELS / name, directory)
    return directory


# Written into a cache directory once the shipped kernels are in it.
SEEDED_MARKER = ".seeded"


def _seed_from_package(shipped: Path, directory: Path) -> None:
    """Copies the kernels compiled at build time into the cache directory:
    each file it lacks (a kernel this directory already holds keeps its
    own index), each through a temporary file renamed into place, so a
    concurrent process sees a whole file or none. Then marks the directory,
    so later processes skip the walk."""
    if not shipped.is_dir():
        return
    try:
        for source in shipped.rglob("*"):
            if not source.is_file():
                continue
            target = directory / source.relative_to(shipped)
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            shutil.copyfile(source, partial)
            os.replace(partial, target)
        (directory / SEEDED_MARKER).touch()
    except OSError:
        pass  # A read-only cache root: Numba compiles what is missing.


class _KernelCacheLocator(caching._CacheLocator):
    """Locates the cache of functions defined in `infini.ops.native.cpu`."""

    def __init__(self, py_func, py_file):
        self._lineno = py_func.__code__.co_firstlineno
        # Numba names the file in its "cannot cache" warning.
        self._py_file = py_file
        relative = Path(py_file).resolve().relative_to(_PACKAGE_DIR)
        self._cache_path = str(kernel_cache_dir() / relative.with_suffix(""))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        # The directory is already keyed by the sources; file times change
        # on every install and must not invalidate the cache.
        return kernel_source_fingerprint()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            Path(py_file).resolve().relative_to(_PACKAGE_DIR)
        except (ValueError, OSError):
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


if _KernelCacheLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, _KernelCacheLocator)


def _stable_identity(value, depth: int = 0) -> object:
    """A process-independent description of a closure variable.

    Functions made by a factory share their qualified name, so a captured
    function is described by its name, its code and (recursively) what it
    captures itself: two kernels capturing different helpers of one
    factory must not share a cache entry."""
    if isinstance(value, Dispatcher):
        value = value.py_func
    # A Numba intrinsic: its identity is the function that defines it.
    definition = getattr(value, "_defn", None)
    if isinstance(definition, types.FunctionType):
        value = definition
    if isinstance(value, types.FunctionType):
        captured = ()
        if depth < 8:
            captured = tuple(
                _stable_identity(_cell_contents(cell), depth + 1)
                for cell in value.__closure__ or ()
            )
        code = hashlib.sha256(value.__code__.co_code).hexdigest()[:16]
        return (value.__module__, value.__qualname__, code, captured)
    if callable(value) and hasattr(value, "__qualname__"):
        return (getattr(value, "__module__", ""), value.__qualname__)
    if isinstance(value, (tuple, list)):
        return tuple(_stable_identity(item, depth) for item in value)
    return repr(value)


def _cell_contents(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # An empty cell: a name bound after the closure.
        return None


class _StableFunctionCache(caching.FunctionCache):
    """Numba keys cached closures on the pickled closure variables, and a
    pickled dispatcher carries a per-process id, so kernels made by factories
    would never be found again. Kernels here key closures on the names of the
    functions and the values of the constants they capture instead; changes
    to those functions are covered by the cache directory's source hash."""

    # The compile options (`parallel`, `fastmath`): the serial and parallel
    # kernels of one function must not share cache entries, or whichever is
    # compiled first would be loaded for the other.
    options = ""

    def _index_key(self, sig, codegen):
        code = self._py_func.__code__.co_code
        closure = self._py_func.__closure__ or ()
        captured = repr(tuple(_stable_identity(c.cell_contents) for c in closure))
        return (
            sig,
            codegen.magic_tuple(),
            (
                hashlib.sha256(code).hexdigest(),
                hashlib.sha256(captured.encode()).hexdigest(),
            ),
            self.options,
        )


def kernel(function=None, *, parallel: bool = False, fastmath=False):
    """`numba.njit` with the on-disk cache, `nogil`, and optional `prange`.

    Kernel factories may capture helpers and constants in closures; helpers
    must be module-level functions (their qualified names key the cache).
    """

    def decorate(function):
        dispatcher = numba.njit(nogil=True, parallel=parallel, fastmath=fastmath)(
            function
        )
        if _KernelCacheLocator.from_function(function, function.__code__.co_filename):
            dispatcher._cache = _StableFunctionCache(function)
            flags = (
                sorted(fastmath) if isinstance(fastmath, (set, frozenset)) else fastmath
            )
            dispatcher._cache.options = repr((parallel, flags))
        return dispatcher

    return decorate if function is None else decorate(function)


def helper(function):
    """A device function inlined into the kernels that call it."""
    return numba.njit(inline="always", cache=False, nogil=True)(function)
