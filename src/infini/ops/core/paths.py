"""The one directory under which InfiniOps keeps what it writes at run time
(docs/behaviour.md, "Cache directory"): compiled CPU kernels
(``<root>/numba``), Triton and NineToothed kernels (``<root>/triton``) and
the files derived from model files (``<root>/models``).

Only the standard library is used; every function reads the environment at
each call, so a changed variable takes effect.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# The directory name under the platform's cache directory.
CACHE_NAME = "infiniops"


def cache_root() -> Path:
    """``$INFINI_OPS_CACHE_DIR``, else ``%LOCALAPPDATA%\\infiniops`` on
    Windows, else ``$XDG_CACHE_HOME/infiniops``, else
    ``~/.cache/infiniops`` when the home directory is writable, else
    ``<tempdir>/infiniops``."""
    explicit = os.environ.get("INFINI_OPS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"], CACHE_NAME)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg, CACHE_NAME)
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if home not in ("", "/", "~") and os.access(home, os.W_OK):
        return Path(home, ".cache", CACHE_NAME)
    return Path(tempfile.gettempdir(), CACHE_NAME)


def cache_directory(kind: str, override: str | None = None) -> Path:
    """``<cache root>/<kind>``, or the directory the environment variable
    `override` names when it is set (``INFINI_OPS_TRITON_CACHE_DIR``,
    ``INFINI_OPS_MODEL_CACHE``)."""
    if override:
        configured = os.environ.get(override)
        if configured:
            return Path(configured)
    return cache_root() / kind
