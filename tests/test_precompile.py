"""Every CPU operator has a `precompile` hook, so that `python -m infini.ops
precompile` leaves no kernel to compile at the first call (issue 3).

The hooks themselves are not run here (together they compile for minutes);
`benchmarks/first_call.py` checks that a first call after `precompile`
compiles nothing."""

import importlib

import pytest

from infini.ops.core.manifest import load_manifest

pytest.importorskip("numba")


# Operators whose CPU implementation compiles nothing (NumPy's BLAS on views
# of the tensors): they need no hook.
def _cpu_classes():
    """(operator, implementation class) of every native CPU implementation
    in the build."""
    found = []
    for name, info in sorted(load_manifest()["operators"].items()):
        for entry in info["implementations"]:
            if "cpu" in entry["devices"] and entry["backend"] == "native":
                module = importlib.import_module(entry["module"])
                found.append((name, getattr(module, entry["class"])))
    return found


def test_every_cpu_operator_has_a_precompile_hook():
    classes = _cpu_classes()
    assert classes, "the build has no native CPU implementation"
    missing = [
        name for name, cls in classes if not callable(getattr(cls, "precompile", None))
    ]
    assert not missing, f"CPU operators without a `precompile` hook: {missing}"
