"""`python -m infini.ops precompile` runs each operator's hooks in a pool of
worker processes (`infini.ops.core.precompile`, issue 24 item 5): every
selected instantiation is reported once, in a process other than the
parent, a failing hook fails the command without stopping the others, and
`--jobs` is validated. The hooks here are stand-ins written by the test
(the real ones compile for minutes); `test_cache_faults.py` covers
processes compiling into one cache at once."""

from __future__ import annotations

import os
import textwrap

import pytest

from infini.ops.__main__ import main
from infini.ops.core.precompile import precompile_instantiations

_HOOKS = """
import os
from pathlib import Path

RECORD = Path(os.environ["TEST_PRECOMPILE_RECORD"])


def _record(name):
    with open(RECORD / f"{name}-{os.getpid()}", "w") as file:
        file.write(name)


class AlphaCpu:
    name, implementation_slot = "alpha", 0

    @classmethod
    def precompile(cls):
        _record("alpha")
        return 3


class BetaCpu:
    name, implementation_slot = "beta", 0

    @classmethod
    def precompile(cls):
        _record("beta")
        raise RuntimeError("beta cannot compile")


class GammaCpu:
    name, implementation_slot = "gamma", 0

    @classmethod
    def precompile(cls):
        _record("gamma")
        return 0


class DeltaTorch:  # A slot whose kernels are compiled already: no hook.
    name, implementation_slot = "delta", 8
"""


@pytest.fixture
def hooks(tmp_path, monkeypatch):
    (tmp_path / "precompile_hooks_for_test.py").write_text(textwrap.dedent(_HOOKS))
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TEST_PRECOMPILE_RECORD", str(record))
    return record


def _instantiations():
    module = "precompile_hooks_for_test"
    return [
        {"operator": "alpha", "device": "cpu", "slot": 0, "module": module},
        {"operator": "beta", "device": "cpu", "slot": 0, "module": module},
        {"operator": "gamma", "device": "cpu", "slot": 0, "module": module},
        {"operator": "delta", "device": "cpu", "slot": 8, "module": module},
        {"operator": "unselected", "device": "cpu", "slot": 0, "module": module},
    ]


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_selected_instantiation_runs_once(hooks, capsys, jobs):
    selected = ["alpha", "beta", "gamma", "delta"]
    status = precompile_instantiations(_instantiations(), selected, jobs)
    output = capsys.readouterr().out.splitlines()
    assert status == 1  # `beta` failed; the others still ran.
    assert "alpha on cpu slot 0: compiled by 3 warm-up calls in" in "\n".join(output)
    assert (
        "beta on cpu slot 0: precompile failed: RuntimeError: beta cannot compile"
        in output
    )
    assert "gamma on cpu slot 0: compiles on first use" in output
    assert "delta on cpu slot 8: nothing to compile" in output
    assert output[-1] == "precompile failed for 1: beta on cpu slot 0"
    assert f"with {jobs} processes" in output[-2]
    runs = sorted(path.name.split("-") for path in hooks.iterdir())
    assert [name for name, _ in runs] == ["alpha", "beta", "gamma"]
    workers = {int(pid) for _, pid in runs}
    if jobs == 1:
        assert workers == {os.getpid()}
    else:
        assert os.getpid() not in workers


def test_jobs_must_be_positive(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["precompile", "--jobs", "0"])
    assert raised.value.code == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
