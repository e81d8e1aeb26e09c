"""The differential fuzz (`tests/test_differential_fuzz.py`) of the
CUDA-like kernels at slot 0, under the Triton interpreter
(``INFINI_OPS_TRITON_INTERPRET=1``, README "Testing GPU kernels on a CPU"):
the same entries (`tests/_fuzz_specs.py`) at small sizes, one case per
operator by default (the interpreter runs every kernel program in Python;
``INFINI_OPS_FUZZ_CASES`` / ``INFINI_OPS_FUZZ_SEED`` / ``INFINI_OPS_FUZZ_OPS``
run more or other cases).

Outside the interpreter this module has nothing to run: the native CPU
slots have their own fuzz."""

from __future__ import annotations

import pytest

from infini.ops.core.devices import TRITON_INTERPRETER
from tests._fuzz import Draw, describe, env_cases, env_ops, env_seed, run_pairs
from tests._fuzz_specs import FUZZ

TEST_FILE = "tests/test_triton_differential_fuzz.py"


def _cuda_like_slot_zero() -> list[str]:
    if not TRITON_INTERPRETER:
        return []
    from infini.ops.core.manifest import load_manifest

    chosen = env_ops()
    return sorted(
        name
        for name, info in load_manifest()["operators"].items()
        if any(
            "nvidia" in entry["devices"] and entry["slot"] == 0
            for entry in info["implementations"]
        )
        and (chosen is None or name in chosen)
    )


OPERATORS = _cuda_like_slot_zero()


@pytest.fixture
def small_cases(monkeypatch):
    monkeypatch.setattr(Draw, "small", True)


def test_every_cuda_like_operator_has_a_fuzz_entry():
    if not TRITON_INTERPRETER:
        pytest.skip(
            "the CUDA-like kernels run here under INFINI_OPS_TRITON_INTERPRET=1"
        )
    missing = sorted(set(OPERATORS) - set(FUZZ))
    assert not missing, f"no fuzz entry in tests/_fuzz_specs.py for {missing}"


@pytest.mark.parametrize("operator", [o for o in OPERATORS if o in FUZZ])
def test_fuzz_under_the_interpreter(operator, small_cases):
    cases = env_cases(1)
    summary = run_pairs([(operator, 0)], env_seed(), cases, FUZZ)
    failures = summary["failures"]
    assert not failures, f"{len(failures)} failing case(s) of {cases}:\n" + "\n".join(
        describe(f, TEST_FILE) for f in failures[:10]
    )
