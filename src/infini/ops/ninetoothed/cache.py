"""Where generated NineToothed sources live, and how they are written.

The directory is the Triton cache directory of InfiniOps (the one the Triton
JIT backend uses: `INFINI_OPS_TRITON_CACHE_DIR`, else the platform cache
directory, ``$XDG_CACHE_HOME/infiniops/triton`` or
``$HOME/.cache/infiniops/triton``, else ``<tempdir>/infiniops/triton``),
subdirectory ``ninetoothed``; `infini.ops.runtime.cache` holds the rule for
both backends.

Each source is named by its operator and the SHA-256 fingerprint of
everything it was generated from (`generation._fingerprint`), and its first
line repeats the fingerprint: an entry for another NineToothed, Triton or
kernel version is never read. Files are written to a temporary name and
moved into place, so a reader never sees half a file. Compiled kernels are
kept by Triton's own compile cache, keyed by the source.
"""

from __future__ import annotations

from pathlib import Path

from infini.ops.runtime.cache import triton_cache_directory


def cache_directory() -> Path:
    return triton_cache_directory() / "ninetoothed"


def generated_source_path(name: str, fingerprint: str) -> Path:
    return cache_directory() / f"{name}-{fingerprint[:32]}.py"
