"""On-disk caches of generated and compiled kernels, shared by the backends
that launch through a runtime here (the Triton JIT backend, NineToothed).

Only the standard library and `infini.ops.core` are used.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from infini.ops.core.paths import cache_directory


def triton_cache_directory() -> Path:
    """The Triton cache directory of InfiniOps: `INFINI_OPS_TRITON_CACHE_DIR`,
    else ``<cache root>/triton`` (`infini.ops.core.paths.cache_root`:
    ``$INFINI_OPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/infiniops``, else
    ``~/.cache/infiniops``). Read at every call, so that a changed
    environment takes effect."""
    return cache_directory("triton", "INFINI_OPS_TRITON_CACHE_DIR")


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to a temporary name beside `path` and moves it into
    place, so that a concurrent reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# The GPU binaries Triton writes are 64-bit ELF files (`cubin` for NVIDIA,
# `hsaco` for AMD); other backends' binaries are opaque bytes here.
ELF_BINARIES = frozenset({"cubin", "hsaco"})


def binary_problem(data: bytes, binary_ext: str, kernel_name: str) -> str | None:
    """What makes `data` an unusable `binary_ext` binary of the kernel
    `kernel_name`, or `None`: empty; for an ELF binary, not a whole 64-bit ELF
    file (a section or a header table past its end: truncated) or without the
    kernel's name (another kernel's file)."""
    if not data:
        return "empty"
    if binary_ext not in ELF_BINARIES:
        return None
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return "not a 64-bit ELF file"
    order = "little" if data[5] == 1 else "big"

    def field(offset: int, size: int) -> int:
        return int.from_bytes(data[offset : offset + size], order)

    program_table, section_table = field(0x20, 8), field(0x28, 8)
    program_entry, program_count = field(0x36, 2), field(0x38, 2)
    section_entry, section_count = field(0x3A, 2), field(0x3C, 2)
    end = max(
        program_table + program_entry * program_count,
        section_table + section_entry * section_count,
    )
    if end > len(data):
        return f"truncated: its header tables end at byte {end:,} of {len(data):,}"
    for index in range(section_count if section_entry >= 0x28 else 0):
        header = section_table + index * section_entry
        kind, offset, size = (
            field(header + 4, 4),
            field(header + 24, 8),
            field(header + 32, 8),
        )
        # SHT_NOBITS (8) sections occupy no bytes of the file.
        if kind != 8 and offset + size > len(data):
            return (
                f"truncated: section {index} ends at byte {offset + size:,} "
                f"of {len(data):,}"
            )
    # The kernel's symbol, a whole string of the ELF string table.
    if b"\0" + kernel_name.encode("utf-8") + b"\0" not in data:
        return f"does not hold the kernel `{kernel_name}` (another kernel's file)"
    return None
