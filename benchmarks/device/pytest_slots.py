"""A pytest plugin for the device check's test section: keeps only the
operator tests of the implementation slots named in
``INFINI_OPS_DEVICE_TEST_SLOTS`` (comma-separated, e.g. ``0``; unset or
``all`` keeps every slot). Tests without an `implementation_index`
parameter are kept.

    python -m pytest tests/test_rms_norm.py --devices nvidia \
        -p benchmarks.device.pytest_slots
"""

from __future__ import annotations

import os

# The hook pytest calls (named here so the dead-code check sees it used).
__all__ = ["pytest_collection_modifyitems"]


def pytest_collection_modifyitems(config, items):
    wanted = os.environ.get("INFINI_OPS_DEVICE_TEST_SLOTS", "all").strip()
    if wanted in ("", "all"):
        return
    slots = {int(slot) for slot in wanted.split(",") if slot.strip()}
    kept, deselected = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        index = callspec.params.get("implementation_index") if callspec else None
        (kept if index is None or index in slots else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
