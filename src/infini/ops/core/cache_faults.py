"""Reporting damaged entries of the on-disk kernel caches (docs/behaviour.md,
"Damaged cache entries").

A cache entry that cannot be read, or reads as something other than what
was written for this version (truncated, garbage, another version, no read
permission), is a miss: the caller compiles or regenerates the entry and
writes it back atomically. Each damaged file is reported once per process,
as one warning on the ``infini.ops.cache`` logger naming the file.

Only the standard library is used.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

LOGGER = logging.getLogger("infini.ops.cache")

_REPORTED: set[str] = set()
_LOCK = threading.Lock()


def report_damaged_entry(path: str | Path, problem: object) -> None:
    """Logs once per process that the cache file `path` is damaged and is
    treated as a miss; `problem` says what was wrong (text or the error
    raised while reading it)."""
    key = str(path)
    with _LOCK:
        if key in _REPORTED:
            return
        _REPORTED.add(key)
    if isinstance(problem, BaseException):
        problem = f"{type(problem).__name__}: {problem}"
    LOGGER.warning(
        "InfiniOps: ignoring the damaged kernel cache file %s (%s); "
        "the entry is rebuilt and replaced.",
        key,
        problem,
    )


def report_unwritable_entry(path: str | Path, error: OSError) -> None:
    """Logs once per process that the cache file `path` could not be
    written: the kernel is used from memory and rebuilt in a later
    process."""
    key = f"write:{path}"
    with _LOCK:
        if key in _REPORTED:
            return
        _REPORTED.add(key)
    LOGGER.warning(
        "InfiniOps: could not write the kernel cache file %s (%s: %s); "
        "the kernel is not cached.",
        path,
        type(error).__name__,
        error,
    )
