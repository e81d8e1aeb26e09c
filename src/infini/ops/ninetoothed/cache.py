"""Where generated NineToothed sources live, and how they are written.

The directory is the Triton cache directory of InfiniOps (the one the Triton
JIT backend uses: `INFINI_OPS_TRITON_CACHE_DIR`, else ``<cache root>/triton``
with the root of `infini.ops.core.paths.cache_root`),
subdirectory ``ninetoothed``; `infini.ops.runtime.cache` holds the rule for
both backends.

Each source is named by its operator and the SHA-256 fingerprint of
everything it was generated from (`generation._fingerprint`), and its first
line repeats the fingerprint: an entry for another NineToothed, Triton or
kernel version is never read. The header also holds the SHA-256 of the
source below it, so a truncated or altered file is never imported: it is
reported once (docs/behaviour.md, "Damaged cache entries") and generated
again. Files are written to a temporary name and moved into place, so a
reader never sees half a file. Compiled kernels are
kept by Triton's own compile cache, keyed by the source.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infini.ops.core.cache_faults import report_damaged_entry
from infini.ops.runtime.cache import triton_cache_directory

# The first line of a generated source: this prefix, then the JSON header.
HEADER_PREFIX = "# infini-ops-ninetoothed: "


def cache_directory() -> Path:
    return triton_cache_directory() / "ninetoothed"


def generated_source_path(name: str, fingerprint: str) -> Path:
    return cache_directory() / f"{name}-{fingerprint[:32]}.py"


def _source_digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def generated_text(header: dict, source: str) -> str:
    """The file text of a generated source: the header line (with the
    source's SHA-256 added), then the source."""
    header = dict(header, source_sha256=_source_digest(source))
    return f"{HEADER_PREFIX}{json.dumps(header, sort_keys=True)}\n{source}"


def read_generated_header(path: Path, fingerprint: str) -> dict | None:
    """The header of the cached source at `path` written for
    `fingerprint`, or `None`: missing, or damaged (unreadable, truncated,
    altered, or for another fingerprint), which is reported."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        report_damaged_entry(path, error)
        return None
    first, _, source = text.partition("\n")
    header = None
    if first.startswith(HEADER_PREFIX):
        try:
            header = json.loads(first[len(HEADER_PREFIX) :])
        except ValueError:
            header = None
    if not isinstance(header, dict):
        report_damaged_entry(path, "no generated-source header")
        return None
    if header.get("fingerprint") != fingerprint:
        report_damaged_entry(path, "written for another fingerprint")
        return None
    if header.get("source_sha256") != _source_digest(source):
        report_damaged_entry(path, "the source does not match its checksum")
        return None
    return header
