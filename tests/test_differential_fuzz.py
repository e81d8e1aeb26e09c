"""A differential fuzz of every operator with a native CPU implementation
against a float64 torch reference, at every active CPU slot (issue 26).

The harness is `tests/_fuzz.py`, the per-operator cases
`tests/_fuzz_specs.py`. Each case draws dtypes, sizes (0, 1, primes,
powers of two and their neighbours), input layouts (transposed, stepped,
expanded, offset), output layouts (transposed, stepped, offset, inside a
sentinel-filled buffer) and scalar arguments; it checks the result, that
no input changed and that nothing outside the outputs was written.

- The normal run uses the fixed seed `tests._fuzz.DEFAULT_SEED` and a few
  cases per operator and slot (about a minute on two workers).
- ``INFINI_OPS_FUZZ_SEED``, ``INFINI_OPS_FUZZ_CASES`` (cases per operator
  and slot) and ``INFINI_OPS_FUZZ_OPS`` (comma-separated operators) run
  other or more cases; every failure prints its seed and the command that
  reruns it alone.
- The products, convolutions, attention and quantised operators (the groups
  marked in `FUZZ`) run in a child process per group, so that a crash is
  reported with its case instead of ending the run.

Under `INFINI_OPS_TRITON_INTERPRET=1` the harness deselects this module
(it names no operator): the CUDA-like kernels have their own fuzz in
`tests/test_triton_differential_fuzz.py`.
"""

from __future__ import annotations

import json
import os

import pytest

import infini.ops
from infini.ops.core.schema import class_name_of
from tests._fuzz import describe, env_cases, env_ops, env_seed, run_in_child, run_pairs
from tests._fuzz_specs import CASES, FUZZ
from tests.test_hostile_matrix import IMPLEMENTATIONS

TEST_FILE = "tests/test_differential_fuzz.py"


def _slots(operator: str) -> list[int]:
    cls = getattr(infini.ops, class_name_of(operator), None)
    return list(cls.active_implementation_indices("cpu")) if cls else []


def _selected(operator: str) -> bool:
    chosen = env_ops()
    return chosen is None or operator in chosen


PAIRS = [
    (operator, slot)
    for operator in IMPLEMENTATIONS
    if operator in FUZZ and _selected(operator)
    for slot in _slots(operator)
]
IN_PROCESS = [(o, s) for o, s in PAIRS if FUZZ[o].group is None]
# One child process per group, all slots (a child's start is most of a
# small group's time).
GROUPS: dict[str, list[tuple[str, int]]] = {}
for _operator, _slot in PAIRS:
    if FUZZ[_operator].group is not None:
        GROUPS.setdefault(FUZZ[_operator].group, []).append((_operator, _slot))


def test_every_native_cpu_operator_has_a_fuzz_entry():
    # A new operator needs an entry in `tests/_fuzz_specs.py`.
    if not IMPLEMENTATIONS:
        pytest.skip("the build has no native CPU implementation")
    missing = sorted(set(IMPLEMENTATIONS) - set(FUZZ))
    assert not missing, f"no fuzz entry in tests/_fuzz_specs.py for {missing}"


def _log(what, slot, summary):
    # ``INFINI_OPS_FUZZ_LOG=<file>``: one JSON line of counts per test, for
    # long runs that report how many cases ran.
    path = os.environ.get("INFINI_OPS_FUZZ_LOG")
    if path:
        with open(path, "a") as log:
            line = {"what": what, "slot": slot, "seed": env_seed(), **summary}
            log.write(json.dumps(line) + "\n")


def _assert_clean(summary, cases):
    failures = summary["failures"]
    assert not failures, f"{len(failures)} failing case(s) of {cases}:\n" + "\n".join(
        describe(f, TEST_FILE) for f in failures[:10]
    )


@pytest.mark.parametrize(
    "operator, slot", [pytest.param(o, s, id=f"{o}-{s}") for o, s in IN_PROCESS]
)
def test_fuzz(operator, slot):
    cases = env_cases(CASES.get(operator, CASES["default"]))
    summary = run_pairs([(operator, slot)], env_seed(), cases, FUZZ)
    _log(operator, slot, summary)
    _assert_clean(summary, cases)
    counts = summary["counts"]
    # Refusals are only for layouts (or dtypes) a slot does not accept: most
    # cases must run, or the entry draws the wrong calls.
    assert counts["ok"] * 2 >= cases or cases < 4, counts


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_fuzz_in_a_child_process(group):
    pairs = GROUPS[group]
    cases = max(env_cases(CASES.get(o, CASES["default"])) for o, _ in pairs)
    summary = run_in_child(pairs, env_seed(), cases)
    _log(group, None, summary)
    _assert_clean(summary, cases)
