"""On-disk caches of generated and compiled kernels, shared by the backends
that launch through a runtime here (the Triton JIT backend, NineToothed).

Only the standard library is used.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def triton_cache_directory() -> Path:
    """The Triton cache directory of InfiniOps: `INFINI_OPS_TRITON_CACHE_DIR`,
    else the platform cache directory (``%LOCALAPPDATA%\\infiniops\\triton``
    on Windows, ``$XDG_CACHE_HOME/infiniops/triton``,
    ``$HOME/.cache/infiniops/triton``), else ``<tempdir>/infiniops/triton``.
    Read at every call, so that a changed environment takes effect."""
    configured = os.environ.get("INFINI_OPS_TRITON_CACHE_DIR")
    if configured:
        return Path(configured)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"], "infiniops", "triton")
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"], "infiniops", "triton")
    if os.environ.get("HOME"):
        return Path(os.environ["HOME"], ".cache", "infiniops", "triton")
    return Path(tempfile.gettempdir(), "infiniops", "triton")


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
