"""The interpreter test mode of the NineToothed backend (slot 9).

Under `INFINI_OPS_TRITON_INTERPRET=1` Triton's interpreter runs the slot-9
kernels on CPU tensors, through the same planning and launch code as on a
GPU. NineToothed's own code paths fail or mislead there in three ways, and
this module is where the tests deal with them (the package's import path
does not change for tests):

1. No driver is active, so anything that asks for device properties fails
   with ``0 active drivers`` (NineToothed's code generator does, for its
   auto-tuner). Our arrangements take integer block sizes and our generator
   fills in the limits itself; `no_driver` makes any driver query fail
   loudly, so a test proves that generation never asks.
2. The interpreter does not treat a string annotation
   ``triton.language.constexpr`` (``from __future__ import annotations``) as a
   constexpr (``arange's arguments must be of type tl.constexpr``).
3. Builtin `max`/`min` in a kernel are not mapped to `tl.maximum` /
   `tl.minimum` by the interpreter and give wrong values without an error.

`check_interpretable` rejects generated sources with 2 or 3.
"""

from __future__ import annotations

import ast

import pytest

from infini.ops.core.devices import TRITON_INTERPRETER

requires_interpreter = pytest.mark.skipif(
    not TRITON_INTERPRETER,
    reason="runs the slot-9 kernels through Triton's interpreter "
    "(INFINI_OPS_TRITON_INTERPRET=1)",
)


def slot_nine_is_active(operator_class) -> bool:
    return 9 in operator_class.active_implementation_indices("nvidia")


def no_driver(monkeypatch) -> None:
    """Makes any query of Triton's active driver fail for the rest of the
    test (`monkeypatch` undoes it)."""
    import triton.runtime

    def refuse(self):
        raise AssertionError("Triton's active driver was queried")

    monkeypatch.setattr(type(triton.runtime.driver), "active", property(refuse))


def check_interpretable(source: str) -> None:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            raise AssertionError("a `from __future__` import makes annotations strings")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("max", "min")
        ):
            raise AssertionError(f"builtin `{node.func.id}` in a kernel")
        if isinstance(node, ast.arg) and isinstance(node.annotation, ast.Constant):
            raise AssertionError(f"string annotation on `{node.arg}`")
