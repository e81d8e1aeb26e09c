"""A damaged kernel cache entry is a miss (docs/behaviour.md, "Damaged cache
entries"): whatever a cache file holds (truncated, garbage, another
version's, unreadable), the run gives the right result, rebuilds the entry,
replaces the file atomically, and logs one warning naming it.

Numba kernels run in child processes, each with its own
`INFINI_OPS_CACHE_DIR` (a damaged cache used to kill every later run): the
cheapest kernels there are, `add` and `relu` on a 5 x 3 float32 tensor.
The Triton and NineToothed caches are read by plain Python functions,
which are damaged and read in this process. Root reads a mode-000 file, so
as root an unreadable file is read by a child without the capabilities
that override file permissions."""

from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._elf import elf_binary

pytest.importorskip("numba")

WAYS = ("truncated", "garbage", "other_version", "unreadable")

# Runs `add` and `relu` once, checks them against torch, and prints the
# number of Numba compilations.
_CHILD = """
import json, os, pathlib, torch, infini.ops
from numba.core import event
from infini.ops.native.cpu import jit
# Only the kernels a test ships: an installed package's own would fill the
# cache with every kernel it compiled at build time.
jit._SHIPPED_KERNELS = pathlib.Path(os.environ.get("TEST_SHIPPED_KERNELS", os.devnull))
x = torch.randn(5, 3, generator=torch.Generator().manual_seed(24))
added, rectified = torch.empty(5, 3), torch.empty(5, 3)
with event.install_recorder("numba:compile") as recorder:
    infini.ops.add(x, x, added, implementation_index=0)
    infini.ops.relu(x, rectified, implementation_index=0)
assert torch.equal(added, x + x), "wrong `add`"
assert torch.equal(rectified, torch.relu(x)), "wrong `relu`"
print(json.dumps({"compiles": sum(1 for _, e in recorder.buffer if e.is_start)}))
"""

# `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH`, and `PR_CAPBSET_DROP`.
_READ_OVERRIDES = (1, 2)
_PR_CAPBSET_DROP = 24


def _unprivileged() -> None:
    """Runs in the child before `exec`: drops root's capabilities to read
    and write any file, so that a mode-000 file is unreadable."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _READ_OVERRIDES:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run_python(code: str, environment: dict, unprivileged=False) -> tuple[str, str]:
    """Runs `code` in a child Python with `environment` added to this one's
    (without the rights to read mode-000 files when `unprivileged`); asserts
    it succeeds and returns its output's last line and its stderr."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_unprivileged if unprivileged else None,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1], result.stderr


def _child(cache: Path, *, shipped: Path | None = None, unprivileged=False):
    """Runs `_CHILD` on `cache`: (number of compilations, stderr)."""
    environment = {"INFINI_OPS_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    if shipped is not None:
        environment["TEST_SHIPPED_KERNELS"] = str(shipped)
    line, stderr = _run_python(_CHILD, environment, unprivileged)
    return json.loads(line)["compiles"], stderr


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "kernel cache file" in line]


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """A cache holding the kernels of `_CHILD`, copied by each test."""
    cache = tmp_path_factory.mktemp("filled") / "cache"
    compiles, stderr = _child(cache)
    assert compiles > 0 and not _warnings(stderr), stderr
    return cache


def _copy(filled: Path, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    return cache


def _kernel_file(cache: Path, family: str, suffix: str) -> Path:
    (path,) = (cache / "numba").glob(f"*/elementwise/*{family}*{suffix}")
    return path


def _damage(path: Path, way: str, donor: Path | None = None) -> None:
    """Damages the cache file `path` in one of `WAYS`. `donor`, for data
    files of another version: a file of another kernel."""
    data = path.read_bytes()
    if way == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif way == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif way == "other_version":
        if path.suffix == ".nbi":
            # The index of another Numba version: its version stamp first.
            with open(path, "rb") as file:
                pickle.load(file)
                rest = file.read()
            path.write_bytes(pickle.dumps("0.1.0", protocol=-1) + rest)
        elif donor is not None:
            path.write_bytes(donor.read_bytes())
        else:
            path.write_text('{"cache_identity": "another version"}')
    elif way == "unreadable":
        path.chmod(0)
    else:
        raise AssertionError(way)


def _needs_unprivileged(way: str) -> bool:
    """Root reads mode-000 files: the unreadable case runs in a child
    without the capabilities that let it (skipped where root cannot drop
    them: a container without `CAP_SETPCAP`)."""
    if way != "unreadable" or os.geteuid() != 0:
        return False
    if not _can_drop_capabilities():
        pytest.skip("root reads mode-000 files and cannot drop that right here")
    return True


@functools.cache
def _can_drop_capabilities() -> bool:
    try:
        subprocess.run(
            [sys.executable, "-c", "pass"], preexec_fn=_unprivileged, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


@pytest.mark.parametrize("way", WAYS)
def test_a_damaged_numba_index_and_data_file_are_misses(filled_cache, tmp_path, way):
    cache = _copy(filled_cache, tmp_path)
    index = _kernel_file(cache, "flat_binary", ".nbi")
    data = _kernel_file(cache, "unary_kernels", ".nbc")
    donor = _kernel_file(cache, "flat_binary", ".nbc")
    unprivileged = _needs_unprivileged(way)
    damaged = {}
    for path in (index, data):
        _damage(path, way, donor)
        damaged[path] = path.read_bytes() if way != "unreadable" else None

    compiles, stderr = _child(cache, unprivileged=unprivileged)
    assert compiles >= 2, stderr  # both damaged kernels compiled again
    warnings = _warnings(stderr)
    for path in damaged:
        assert sum(str(path) in line for line in warnings) == 1, stderr
    assert len(warnings) == 2, stderr
    assert "Traceback" not in stderr, stderr
    for path, content in damaged.items():
        # Replaced by a whole, readable file.
        assert path.stat().st_mode & 0o444, path
        assert path.read_bytes() != content, path
    assert not list(cache.rglob("*.tmp*")), "a temporary file was left behind"

    compiles, stderr = _child(cache, unprivileged=unprivileged)
    assert compiles == 0 and not _warnings(stderr), stderr


def test_damaged_shipped_kernels_are_copied_then_rebuilt(filled_cache, tmp_path):
    """Kernels a build shipped (`infini/ops/_kernels/<version>`) are copied
    into an empty cache; damaged ones are compiled again and replaced
    there, and the next run loads every kernel."""
    (version,) = (filled_cache / "numba").iterdir()
    shipped = tmp_path / "_kernels"
    shutil.copytree(version, shipped / version.name)
    (truncated,) = shipped.glob("*/elementwise/*flat_binary*.nbc")
    _damage(truncated, "truncated")
    (garbage,) = shipped.glob("*/elementwise/*unary_kernels*.nbi")
    _damage(garbage, "garbage")
    cache = tmp_path / "cache"

    compiles, stderr = _child(cache, shipped=shipped)
    assert compiles >= 2, stderr
    warnings = _warnings(stderr)
    assert len(warnings) == 2, stderr
    for source in (truncated, garbage):
        copied = cache / "numba" / source.relative_to(shipped)
        assert sum(str(copied) in line for line in warnings) == 1, stderr
        assert copied.read_bytes() not in (b"", source.read_bytes()), copied

    compiles, stderr = _child(cache, shipped=shipped)
    assert compiles == 0 and not _warnings(stderr), stderr


def _start(cache: Path) -> subprocess.Popen:
    environment = {**os.environ, "INFINI_OPS_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_fill_one_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    processes = [_start(cache), _start(cache)]
    for process in processes:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        assert not _warnings(stderr), stderr
    compiles, stderr = _child(cache)
    assert compiles == 0 and not _warnings(stderr), stderr


def test_a_run_killed_while_filling_the_cache_leaves_no_damaged_entry(tmp_path):
    cache = tmp_path / "cache"
    # Killed once as soon as the kernel directory exists, once after the
    # first data file is written (so the second kernel is being compiled).
    killed = 0
    for ready in ("elementwise", "elementwise/*.nbc"):
        process = _start(cache)
        deadline = time.monotonic() + 600
        while not list((cache / "numba").glob(f"*/{ready}")):
            if process.poll() is not None:
                break  # Finished first: nothing to kill at this point.
            assert time.monotonic() < deadline
            time.sleep(0.02)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            killed += 1
        stdout, stderr = process.communicate()
        assert process.returncode in (0, -signal.SIGKILL), stderr[-3000:]
    assert killed, "no run was killed while filling the cache"
    compiles, stderr = _child(cache)
    assert not _warnings(stderr), stderr
    compiles, stderr = _child(cache)
    assert compiles == 0 and not _warnings(stderr), stderr


# The Triton JIT and NineToothed caches: read in this process.


@pytest.fixture
def triton_cache(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "triton"
    monkeypatch.setenv("INFINI_OPS_TRITON_CACHE_DIR", str(directory))
    return directory


_IDENTITY = "9:kernel-v1|4:cuda|"
_METADATA = {
    "name": "add_kernel",
    "num_warps": 4,
    "shared": 0,
    "global_scratch_size": 0,
    "profile_scratch_size": 0,
    "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
}


_BINARY = elf_binary("add_kernel")


def test_binary_problem_finds_truncated_foreign_and_garbage_binaries():
    from infini.ops.runtime.cache import binary_problem

    assert binary_problem(_BINARY, "cubin", "add_kernel") is None
    assert binary_problem(b"", "cubin", "add_kernel") == "empty"
    for size in (10, 64, len(_BINARY) // 2, len(_BINARY) - 1):
        problem = binary_problem(_BINARY[:size], "cubin", "add_kernel")
        assert problem is not None and ("truncated" in problem or "ELF" in problem)
    assert "another kernel" in binary_problem(
        elf_binary("mul_kernel"), "cubin", "add_kernel"
    )
    assert "ELF" in binary_problem(os.urandom(len(_BINARY)), "cubin", "add_kernel")
    # Binaries of other backends are opaque: only an empty one is known damaged.
    assert binary_problem(b"anything", "bin", "add_kernel") is None


def _read_in_child(code: str, directory: Path) -> str:
    """Runs `code` (which prints a result) in an unprivileged child
    (`_unprivileged`); returns its output's last line, then its stderr."""
    line, stderr = _run_python(
        code, {"INFINI_OPS_TRITON_CACHE_DIR": str(directory)}, unprivileged=True
    )
    return line + "\n" + stderr


def _triton_reads(code: str, directory: Path, caplog) -> tuple[str, list[str]]:
    """(the printed result, the damage warnings) of reading in this process,
    (`_read_in_child` reads a mode-000 file when this is root)."""
    caplog.clear()
    namespace: dict = {}
    with caplog.at_level(logging.WARNING, logger="infini.ops.cache"):
        exec(code.replace("print(", "result = ("), namespace)  # noqa: S102
    warnings = [r.getMessage() for r in caplog.records if "kernel cache" in r.msg]
    return str(namespace["result"]), warnings


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", ["json", "cubin", "autotune"])
def test_a_damaged_triton_cache_file_is_a_miss(triton_cache, caplog, kind, way):
    from infini.ops.core.config import CompileConfig
    from infini.ops.triton.jit import cache

    json_path, binary_path = cache.write_kernel_artifact(
        _IDENTITY, _METADATA, "cubin", _BINARY
    )
    config = CompileConfig(4, 3, (("BLOCK", 128),))
    autotune_path = cache.write_auto_tuning_config(_IDENTITY, config)
    path = {"json": json_path, "cubin": binary_path, "autotune": autotune_path}[kind]
    donor = None
    if kind == "cubin":
        donor = path.with_name("donor.cubin")
        donor.write_bytes(elf_binary("mul_kernel"))
    _damage(path, way, donor)
    reader = "read_auto_tuning_config" if kind == "autotune" else "read_kernel_artifact"
    code = (
        "from infini.ops.triton.jit import cache\n"
        f"print(cache.{reader}({_IDENTITY!r}) is None)\n"
        f"print(cache.{reader}({_IDENTITY!r}) is None)\n"
    )
    if _needs_unprivileged(way):
        output = _read_in_child(code, triton_cache)
        missed, warnings = output.splitlines()[0], _warnings(output)
    else:
        missed, warnings = _triton_reads(code, triton_cache, caplog)
    assert missed == "True"
    assert len(warnings) == 1 and str(path) in warnings[0], warnings

    # Written again, atomically (no temporary file is left), and read.
    if kind == "autotune":
        cache.write_auto_tuning_config(_IDENTITY, config)
        assert cache.read_auto_tuning_config(_IDENTITY) == config
    else:
        cache.write_kernel_artifact(_IDENTITY, _METADATA, "cubin", _BINARY)
        record, _, read_binary = cache.read_kernel_artifact(_IDENTITY)
        assert record["name"] == "add_kernel"
        assert read_binary.read_bytes() == _BINARY
    assert not list(triton_cache.glob("*.tmp"))


def test_a_missing_triton_entry_is_a_silent_miss(triton_cache, caplog):
    from infini.ops.triton.jit import cache

    with caplog.at_level(logging.WARNING, logger="infini.ops.cache"):
        assert cache.read_kernel_artifact(_IDENTITY) is None
        assert cache.read_auto_tuning_config(_IDENTITY) is None
    assert not caplog.records


@pytest.mark.parametrize("way", WAYS)
def test_a_damaged_ninetoothed_source_is_a_miss(triton_cache, caplog, way):
    from infini.ops.ninetoothed import cache
    from infini.ops.runtime.cache import write_atomically

    fingerprint = "f" * 64
    path = cache.generated_source_path("add", fingerprint)
    header = {"fingerprint": fingerprint, "kernel": "add_kernel"}
    text = cache.generated_text(header, "def add_kernel():\n    return 1\n" * 8)
    write_atomically(path, text.encode())
    assert cache.read_generated_header(path, fingerprint)["kernel"] == "add_kernel"
    if way == "other_version":
        # Another generator's file under this name: the same header line,
        # another source (its checksum no longer matches).
        path.write_text(text.replace("return 1", "return 2"))
    else:
        _damage(path, way)
    code = (
        "from pathlib import Path\n"
        "from infini.ops.ninetoothed import cache\n"
        f"print(cache.read_generated_header(Path({str(path)!r}), {fingerprint!r}))\n"
    )
    if _needs_unprivileged(way):
        output = _read_in_child(code, triton_cache)
        result, warnings = output.splitlines()[0], _warnings(output)
    else:
        result, warnings = _triton_reads(code, triton_cache, caplog)
    assert result == "None"
    assert len(warnings) == 1 and str(path) in warnings[0], warnings
    write_atomically(path, text.encode())
    assert cache.read_generated_header(path, fingerprint)["kernel"] == "add_kernel"


# Triton's own compile cache (`TRITON_CACHE_DIR`), which every compile of a
# CUDA-like kernel goes through: compiled here for sm_90, as a GPU run does.

# Compiles the `add` JIT kernel for sm_90 with `BLOCK_SIZE` from the
# environment and prints its cubin's SHA-256 and its Triton cache entry.
_TRITON_COMPILE = """
import hashlib, os, pathlib
from triton.backends.compiler import GPUTarget
from infini.ops.runtime.triton import ast_source, compile_source
from infini.ops.triton.ops.add.jit import kernel
from tests.sm90 import meta
block = int(os.environ.get("TEST_BLOCK_SIZE", "256"))
arguments = (meta((1024,)), meta((1024,)), meta((1024,)), 1024)
source = ast_source(kernel, arguments, {"BLOCK_SIZE": block}, True)
compiled = compile_source(source, GPUTarget("cuda", 90, 32), {"num_warps": 4})
entry = pathlib.Path(next(iter(compiled.metadata_group.values()))).parent
print(hashlib.sha256(compiled.asm["cubin"]).hexdigest() + " " + str(entry))
"""


def _compile_add(triton_own: Path, *, block=256, unprivileged=False):
    """(cubin SHA-256, cache entry, damage warnings) of `_TRITON_COMPILE` in a
    child process with Triton's cache in `triton_own`."""
    environment = {
        "TRITON_CACHE_DIR": str(triton_own),
        "TEST_BLOCK_SIZE": str(block),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1])] + sys.path),
    }
    line, stderr = _run_python(_TRITON_COMPILE, environment, unprivileged)
    digest, entry = line.split(" ", 1)
    return digest, Path(entry), _warnings(stderr)


@pytest.fixture(scope="module")
def triton_own_cache(tmp_path_factory):
    """Triton's cache holding the `add` kernel at two block sizes: (the
    directory, the cubin's SHA-256, its entry, the other block size's entry)."""
    from infini.ops.core.devices import TRITON_INTERPRETER

    if TRITON_INTERPRETER:
        pytest.skip("compiles real kernels: runs without INFINI_OPS_TRITON_INTERPRET")
    pytest.importorskip("triton")
    directory = tmp_path_factory.mktemp("triton-own") / "cache"
    digest, entry, warnings = _compile_add(directory)
    _, other_entry, _ = _compile_add(directory, block=512)
    assert not warnings and entry != other_entry
    return directory, digest, entry, other_entry


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", ["metadata", "cubin", "group"])
def test_a_damaged_entry_of_tritons_own_cache_is_a_miss(
    triton_own_cache, tmp_path, kind, way
):
    """Triton reads a cache hit's files unchecked; `compile_source` checks
    them, compiles a damaged entry again (which replaces its files) and
    warns once, naming the entry."""
    filled, digest, entry, other_entry = triton_own_cache
    cache = tmp_path / "cache"
    shutil.copytree(filled, cache)
    for group in cache.glob("*/__grp__*"):  # Its paths are absolute.
        group.write_text(group.read_text().replace(str(filled), str(cache)))
    entry, other_entry = cache / entry.name, cache / other_entry.name
    name = {"metadata": "kernel.json", "cubin": "kernel.cubin"}.get(
        kind, "__grp__kernel.json"
    )
    path, donor = entry / name, other_entry / name
    if kind == "cubin":
        donor.write_bytes(elf_binary("mul_kernel"))  # Another kernel's binary.
    # Otherwise the other block size's file: its metadata, or its group, which
    # names its files, names another hash.
    _damage(path, way, donor)
    again, rebuilt, warnings = _compile_add(
        cache, unprivileged=_needs_unprivileged(way)
    )
    assert again == digest and rebuilt == entry
    if kind == "group" and way != "other_version":
        # Triton itself treats a group file it cannot parse as a silent miss.
        assert not warnings, warnings
    else:
        assert len(warnings) == 1 and str(entry) in warnings[0], warnings
    # The entry was replaced: the next compile reads it, silently.
    path.chmod(0o644)
    assert _compile_add(cache) == (digest, entry, [])
