"""The on-disk cache of compiled Triton JIT kernels and auto-tuning results.

Directory: `INFINI_OPS_TRITON_CACHE_DIR`, else the platform cache directory
(``%LOCALAPPDATA%\\infiniops\\triton`` on Windows, ``$XDG_CACHE_HOME/
infiniops/triton``, ``$HOME/.cache/infiniops/triton``), else
``<tempdir>/infiniops/triton``.

Each entry is named by the FNV-1a 64-bit hash of its identity (16 hex
digits); the identity is stored inside, so a hash collision or a stale entry
(another Triton version or kernel source, which change the identity) is
rejected on read, like a corrupt one, and so is a binary that is empty,
truncated or another kernel's (`binary_problem`). Files are written to a
temporary name and moved into place, so readers never see half a file. A
file that exists but is rejected is reported once (`report_damaged_entry`,
docs/behaviour.md, "Damaged cache entries"); the caller compiles and writes
the entry again.

- ``<stem>.json``: Triton's kernel metadata plus `cache_identity` and
  `binary_ext`; ``<stem>.<binary_ext>`` (e.g. ``cubin``): the binary.
- ``<stem>.autotune``: ``{"cache_identity", "config": {num_warps,
  num_stages, constexprs}}``, the winning candidate of an auto-tuning run.
"""

from __future__ import annotations

import json
from pathlib import Path

from infini.ops.core.cache_faults import report_damaged_entry
from infini.ops.core.config import CompileConfig
from infini.ops.runtime.cache import binary_problem, write_atomically
from infini.ops.runtime.cache import triton_cache_directory as cache_directory

_INT32 = range(-(2**31), 2**31)


def fnv1a_64(text: str) -> str:
    """The FNV-1a 64-bit hash of `text` (UTF-8) in 16 lower-case hex digits."""
    value = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        value ^= byte
        value = (value * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def identity(*fields) -> str:
    """Length-prefixed fields, ``<len>:<value>|`` each: unambiguous whatever
    the values contain."""
    return "".join(f"{len(str(field))}:{field}|" for field in fields)


def cache_path(identity_text: str, suffix: str, directory: Path | None = None) -> Path:
    return (directory or cache_directory()) / f"{fnv1a_64(identity_text)}{suffix}"


def write_kernel_artifact(
    identity_text: str, metadata: dict, binary_ext: str, binary: bytes
) -> tuple[Path, Path]:
    """Writes a compiled kernel; returns the JSON and binary paths."""
    json_path = cache_path(identity_text, ".json")
    binary_path = json_path.with_suffix(f".{binary_ext}")
    record = dict(metadata, cache_identity=identity_text, binary_ext=binary_ext)
    # The binary first: a reader that finds the JSON finds the binary too.
    write_atomically(binary_path, binary)
    write_atomically(json_path, json.dumps(record, default=vars).encode("utf-8"))
    return json_path, binary_path


def read_kernel_artifact(identity_text: str) -> tuple[dict, Path, Path] | None:
    """``(metadata, json path, binary path)`` of a cached kernel, or `None`
    when it is missing, corrupt, for another identity, or unusable."""
    json_path = cache_path(identity_text, ".json")
    try:
        record = json.loads(json_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        report_damaged_entry(json_path, error)
        return None
    problem = _kernel_record_problem(record, identity_text)
    if problem is not None:
        report_damaged_entry(json_path, problem)
        return None
    binary_ext = record["binary_ext"]
    binary_path = json_path.with_suffix(f".{binary_ext}")
    try:
        binary = binary_path.read_bytes()
    except OSError as error:
        report_damaged_entry(binary_path, error)
        return None
    problem = binary_problem(binary, binary_ext, record["name"])
    if problem is not None:
        report_damaged_entry(binary_path, problem)
        return None
    return record, json_path, binary_path


def _kernel_record_problem(record, identity_text: str) -> str | None:
    """What makes a kernel's JSON record unusable, or `None`."""
    if not isinstance(record, dict):
        return "not a kernel record"
    if record.get("cache_identity") != identity_text:
        return "another identity (a stale or foreign entry)"
    name = record.get("name")
    binary_ext = record.get("binary_ext")
    if not isinstance(name, str) or not name:
        return "no kernel name"
    if not isinstance(binary_ext, str) or not binary_ext.isalnum():
        return "no valid binary extension"
    for field in ("num_warps", "shared", "global_scratch_size", "profile_scratch_size"):
        value = record.get(field)
        if type(value) is not int or value not in _INT32:
            return f"`{field}` is not an int32"
    if record["num_warps"] == 0:
        return "zero warps"
    # Kernels needing scratch memory are refused (docs/behaviour.md, "Triton kernel
    # cache").
    if record["global_scratch_size"] or record["profile_scratch_size"]:
        return "needs scratch memory"
    if not isinstance(record.get("target"), dict):
        return "no target"
    return None


def write_auto_tuning_config(identity_text: str, config: CompileConfig) -> Path:
    path = cache_path(identity_text, ".autotune")
    record = {"cache_identity": identity_text, "config": config.to_json()}
    write_atomically(path, json.dumps(record).encode("utf-8"))
    return path


def read_auto_tuning_config(identity_text: str) -> CompileConfig | None:
    """The cached winner of an auto-tuning run, or `None` (missing, corrupt,
    another identity, zero warps or stages)."""
    path = cache_path(identity_text, ".autotune")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        report_damaged_entry(path, error)
        return None
    try:
        if record["cache_identity"] != identity_text:
            report_damaged_entry(path, "another identity (a stale or foreign entry)")
            return None
        config = record["config"]
        num_warps, num_stages = config["num_warps"], config["num_stages"]
        constexprs = config["constexprs"]
        valid = (
            type(num_warps) is int
            and type(num_stages) is int
            and num_warps > 0
            and num_stages > 0
            and isinstance(constexprs, dict)
            and all(type(value) is int for value in constexprs.values())
        )
    except (KeyError, TypeError, AttributeError) as error:
        report_damaged_entry(path, error)
        return None
    if not valid:
        report_damaged_entry(path, "not a compile config")
        return None
    return CompileConfig(num_warps, num_stages, tuple(sorted(constexprs.items())))
