"""Where generated NineToothed sources live, and how they are written.

The directory is the Triton cache directory of InfiniOps (the one the Triton
JIT backend uses: `INFINI_OPS_TRITON_CACHE_DIR`, else the platform cache
directory, ``$XDG_CACHE_HOME/infiniops/triton`` or
``$HOME/.cache/infiniops/triton``, else ``<tempdir>/infiniops/triton``),
subdirectory ``ninetoothed``. Backends do not import each other, so the
rule is spelled out here as well.

Each source is named by its operator and the SHA-256 fingerprint of
everything it was generated from (`generation._fingerprint`), and its first
line repeats the fingerprint: an entry for another NineToothed, Triton or
kernel version is never read. Files are written to a temporary name and
moved into place, so a reader never sees half a file. Compiled kernels are
kept by Triton's own compile cache, keyed by the source.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def cache_directory() -> Path:
    configured = os.environ.get("INFINI_OPS_TRITON_CACHE_DIR")
    if configured:
        root = Path(configured)
    elif sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        root = Path(os.environ["LOCALAPPDATA"], "infiniops", "triton")
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"], "infiniops", "triton")
    elif os.environ.get("HOME"):
        root = Path(os.environ["HOME"], ".cache", "infiniops", "triton")
    else:
        root = Path(tempfile.gettempdir(), "infiniops", "triton")
    return root / "ninetoothed"


def generated_source_path(name: str, fingerprint: str) -> Path:
    return cache_directory() / f"{name}-{fingerprint[:32]}.py"


def write_atomically(path: Path, data: bytes) -> None:
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
