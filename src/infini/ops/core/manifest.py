"""The build manifest written by the configure step (`scripts/generate_manifest.py`).

It says which devices and backends the build has and, per operator, its
overloads and which implementation module serves each (slot, platform).
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from .schema import MANIFEST_NAME, TORCH_METADATA_NAME

# `INFINI_OPS_MANIFEST` points a source checkout at a manifest written by
# `scripts/generate_manifest.py` (see "Developing" in README.md), so tests can
# run against the sources without reinstalling; installed packages read
# their own.
MANIFEST_PATH = Path(
    os.environ.get("INFINI_OPS_MANIFEST")
    or Path(__file__).resolve().parent.parent / "_generated" / MANIFEST_NAME
)


# The ATen backend's metadata (`scripts/generate_torch_ops.py`) lies beside the
# manifest a source checkout points at, and in `infini/ops/` when installed
# (beside the package's `__init__.py`; docs/behaviour.md, "Package layout").
TORCH_METADATA_PATH = (
    MANIFEST_PATH.parent / TORCH_METADATA_NAME
    if os.environ.get("INFINI_OPS_MANIFEST")
    else Path(__file__).resolve().parent.parent / TORCH_METADATA_NAME
)


@cache
def load_torch_metadata() -> dict:
    """The ATen metadata of a `WITH_TORCH` build (slot 8)."""
    try:
        text = TORCH_METADATA_PATH.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportError(
            f"infini.ops has no ATen metadata ({TORCH_METADATA_PATH} is missing); "
            "it is written with the manifest when the build has `WITH_TORCH`."
        ) from None
    return json.loads(text)


@cache
def load_manifest() -> dict:
    try:
        text = MANIFEST_PATH.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportError(
            f"infini.ops has no build manifest ({MANIFEST_PATH} is missing): "
            "install the package with `python -m pip install .` (see README.md) "
            "instead of importing it from the source tree."
        ) from None
    return json.loads(text)
