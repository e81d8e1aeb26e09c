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
