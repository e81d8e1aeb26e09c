"""The build manifest written by the configure step (`scripts/generate_manifest.py`).

It says which devices and backends the build has and, per operator, its
overloads and which implementation module serves each (slot, platform).
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

# `INFINI_OPS_MANIFEST` points a source checkout at a manifest written by
# `scripts/generate_manifest.py` (see "Developing" in README.md), so tests can
# run against the sources without reinstalling; installed packages read
# their own.
MANIFEST_PATH = Path(
    os.environ.get("INFINI_OPS_MANIFEST")
    or Path(__file__).resolve().parent.parent / "_generated" / "manifest.json"
)


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
