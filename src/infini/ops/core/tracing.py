"""`INFINI_OPS_TRACE_CALLS`: one JSON line on stderr per cached-path call."""

from __future__ import annotations

import os
import sys


def _enabled() -> bool:
    value = os.environ.get("INFINI_OPS_TRACE_CALLS", "")
    return bool(value) and not value.startswith("0")


# Read once per process, as the original does.
TRACE_CALLS = _enabled()

_LINES: dict[tuple[str, str, int], str] = {}


def trace_call(operator_name: str, device_type: str, implementation: int) -> None:
    key = (operator_name, device_type, implementation)
    line = _LINES.get(key)
    if line is None:
        # Written by hand rather than with `json.dumps` to pin the separators
        # (`": "` and `", "`) and the key order of the original's format.
        line = (
            '[INFINI_OPS_TRACE_CALLS] {"operator_name": "'
            + operator_name
            + '", "device_type": "'
            + device_type
            + '", "implementation": '
            + str(implementation)
            + "}\n"
        )
        _LINES[key] = line
    sys.stderr.write(line)
