"""Compiling CPU kernels with Numba, and caching them on disk.

Kernels are cached under ``<cache root>/numba/<package version>-<source hash>``,
where the source hash covers every module of `infini.ops.native.cpu` (a kernel
inlines helpers from other modules, so a change to any of them must invalidate
the cache). The cache root is `infini.ops.core.paths.cache_root`
(``$INFINI_OPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/infiniops``, else
``~/.cache/infiniops``). Nothing is written into site-packages.

A build that compiled kernels ahead (`INFINI_OPS_PRECOMPILE`, README) ships
them as ``infini/ops/_kernels/<package version>-<source hash>``; the first
process of an install copies the files its cache directory lacks from
there (and marks the directory), so a fresh install loads those kernels
instead of compiling them.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import platform
import shutil
import types
from contextlib import contextmanager
from functools import cache
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

import numba
from numba.core import caching
from numba.core.dispatcher import Dispatcher

from infini.ops.core.cache_faults import report_damaged_entry, report_unwritable_entry
from infini.ops.core.paths import cache_root

_PACKAGE_DIR = Path(__file__).resolve().parent
# Kernels compiled when the package was built (see `_seed_from_package`).
_SHIPPED_KERNELS = _PACKAGE_DIR.parents[1] / "_kernels"


@cache
def compiled_with(*features: str) -> bool:
    """Whether the kernels are compiled for an x86-64 CPU with every one of
    the LLVM `features` (``"avx2"``, ``"avx512vnni"``): the host's, or,
    with `NUMBA_CPU_NAME` set, the features `NUMBA_CPU_FEATURES` gives. A
    kernel that calls x86 intrinsics asks this first."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    from numba.core import config

    if config.CPU_NAME and config.CPU_NAME != "host":
        given = (config.CPU_FEATURES or "").split(",")
        return all(f"+{feature}" in given for feature in features)
    import llvmlite.binding

    host = llvmlite.binding.get_host_cpu_features()
    return all(host.get(feature) for feature in features)


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
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # A read-only cache root: Numba compiles what is missing.
    for source in shipped.rglob("*"):
        target = directory / source.relative_to(shipped)
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            if not source.is_file() or target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, partial)
            os.replace(partial, target)
        except OSError as error:
            # An unreadable shipped file is skipped (its kernel compiles on
            # first use); a damaged one is copied and then rejected on load
            # like any damaged entry (`_CheckedCacheFile`).
            report_damaged_entry(source, error)
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass
    try:
        (directory / SEEDED_MARKER).touch()
    except OSError:
        pass


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
        code = _code_digest(value.__code__)
        return (value.__module__, value.__qualname__, code, captured)
    if callable(value) and hasattr(value, "__qualname__"):
        return (getattr(value, "__module__", ""), value.__qualname__)
    if isinstance(value, (tuple, list)):
        return tuple(_stable_identity(item, depth) for item in value)
    return repr(value)


def _code_digest(code) -> str:
    """The bytecode and the constants of a code object: two lambdas of one
    factory that differ only in a constant must not share a cache entry.
    Nested code objects are described the same way (their `repr` holds an
    address that changes with every process)."""
    digest = hashlib.sha256(code.co_code)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            constant = _code_digest(constant)
        digest.update(b"\0" + repr(constant).encode())
    return digest.hexdigest()[:16]


def _cell_contents(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # An empty cell: a name bound after the closure.
        return None


# The start of every data file (``.nbc``) written here, followed by the
# SHA-256 of the source stamp, the file's name, its index key and the
# payload: a truncated, garbled or foreign data file (another version's, or
# another kernel's under this name) is told from a good one before it is
# unpickled.
_DATA_MAGIC = b"InfiniOps-kernel-1\0"
# Serialises the index updates of one cache directory across processes.
LOCK_NAME = ".lock"


class _CheckedCacheFile(caching.IndexDataCacheFile):
    """Numba's index and data files, where a file that cannot be read or
    is not what this version wrote is a miss instead of an error
    (docs/behaviour.md, "Damaged cache entries"): Numba's own `_load_index`
    raises `UnpicklingError` on a truncated index and fails every later
    run. A damaged entry is reported once (`report_damaged_entry`), the
    kernel compiles, and `save` replaces the file through a temporary name
    (`_open_for_write`), atomically.

    `save` also holds a lock on the cache directory while it reads and
    rewrites the index, and writes the data before the index names it:
    processes compiling at once (`precompile --jobs`) neither lose each
    other's entries nor see an index entry without its data."""

    def _load_index(self):
        try:
            with open(self._index_path, "rb") as file:
                version = pickle.load(file)
                stamp, overloads = pickle.loads(file.read())
        except FileNotFoundError:
            return {}
        except Exception as error:  # noqa: BLE001 - any damage is a miss
            report_damaged_entry(self._index_path, error)
            return {}
        if version != self._version or stamp != self._source_stamp:
            # The directory is keyed by this version and source hash, so
            # an index of another one is a foreign file.
            report_damaged_entry(self._index_path, "written by another version")
            return {}
        if not isinstance(overloads, dict):
            report_damaged_entry(self._index_path, "not an index")
            return {}
        return overloads

    def load(self, key):
        data_name = self._load_index().get(key)
        if data_name is None:
            return None
        path = self._data_path(data_name)
        try:
            with open(path, "rb") as file:
                blob = file.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            report_damaged_entry(path, error)
            return None
        header = len(_DATA_MAGIC)
        digest, payload = blob[header : header + 32], blob[header + 32 :]
        if not blob.startswith(_DATA_MAGIC) or digest != self._digest(
            data_name, key, payload
        ):
            report_damaged_entry(path, "truncated, altered or another kernel's")
            return None
        try:
            return pickle.loads(payload)
        except Exception as error:  # noqa: BLE001 - any damage is a miss
            report_damaged_entry(path, error)
            return None

    def save(self, key, data):
        try:
            with self._locked():
                overloads = self._load_index()
                data_name = overloads.get(key)
                if data_name is None:
                    used = set(overloads.values())
                    number = 1
                    while self._data_name(number) in used:
                        number += 1
                    data_name = self._data_name(number)
                payload = self._dump(data)
                digest = self._digest(data_name, key, payload)
                with self._open_for_write(self._data_path(data_name)) as file:
                    file.write(_DATA_MAGIC + digest + payload)
                overloads[key] = data_name
                self._save_index(overloads)
        except OSError as error:
            report_unwritable_entry(self._index_path, error)

    def _digest(self, data_name: str, key, payload: bytes) -> bytes:
        digest = hashlib.sha256()
        for part in (self._source_stamp, data_name, repr(key)):
            digest.update(part.encode() + b"\0")
        digest.update(payload)
        return digest.digest()

    @contextmanager
    def _locked(self):
        if fcntl is None:  # Windows: unlocked, as Numba's own cache.
            yield
            return
        with open(kernel_cache_dir() / LOCK_NAME, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


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

    def __init__(self, py_func):
        super().__init__(py_func)
        self._cache_file = _CheckedCacheFile(
            cache_path=self._cache_path,
            filename_base=self._impl.filename_base,
            source_stamp=self._impl.locator.get_source_stamp(),
        )

    def _load_overload(self, sig, target_context):
        try:
            return super()._load_overload(sig, target_context)
        except Exception as error:  # noqa: BLE001 - a bad entry is a miss
            # Data that passed the checksum but does not rebuild (a library
            # this process cannot load): compile instead.
            report_damaged_entry(self._cache_file._index_path, error)
            return None

    def _index_key(self, sig, codegen):
        closure = self._py_func.__closure__ or ()
        captured = repr(tuple(_stable_identity(c.cell_contents) for c in closure))
        return (
            sig,
            codegen.magic_tuple(),
            (
                _code_digest(self._py_func.__code__),
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


def chunk_kernels(body):
    """Serial and parallel kernels over the chunks of a job, both taking
    ``(chunks, arguments)`` and calling the kernel ``body(chunk, chunks,
    arguments)`` once per chunk (`arguments` a tuple the body unpacks). The
    body is compiled once, for both drivers, and the parallel passes see a
    one-call loop instead of analysing the whole body."""
    from numba import prange

    def serial(chunks, arguments):
        for chunk in range(chunks):
            body(chunk, chunks, arguments)

    def parallel(chunks, arguments):
        # `int64`: inside the parfor the index is unsigned, and the body
        # would be compiled a second time for it.
        for chunk in prange(chunks):
            body(numba.int64(chunk), chunks, arguments)

    # The drivers capture `body`, and the disk cache keys captured
    # functions on their names: make the drivers' names say which body.
    function = getattr(body, "py_func", body)
    name = f"{function.__module__}.{function.__qualname__}"
    serial.__qualname__ = f"chunk_kernels.serial[{name}]"
    parallel.__qualname__ = f"chunk_kernels.parallel[{name}]"
    return kernel(serial), kernel(parallel, parallel=True)
