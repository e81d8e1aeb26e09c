"""`python -m infini.ops` and `examples/generate.py` report bad input as one
line on stderr with exit status 2 (usage) or 1 (runtime), a traceback only
with `--debug`, and survive a reader that closes their output early.

Each case runs the command in a child process, on a tiny model file written
here where a model is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import infini.ops
from tests._tiny_gguf import SIZES, save_byte_tokenizer, write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]
GENERATE = ROOT / "examples" / "generate.py"
# The children import the same `infini.ops` as this process (the source
# tree or the installed package).
PACKAGE_ROOT = Path(infini.ops.__file__).resolve().parents[2]
MODULE = "python -m infini.ops"


def child(arguments: list[str], tmp_path: Path, **environment: str):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, (str(PACKAGE_ROOT), env.get("PYTHONPATH")))
    )
    env["INFINI_OPS_MODEL_CACHE"] = str(tmp_path / "model-cache")
    env.update(environment)
    return subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def one_error_line(result, status: int, prog: str) -> str:
    """The single stderr line of a failed run, after checking the status."""
    lines = result.stderr.splitlines()
    assert result.returncode == status, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0][len(f"{prog}: error: ") :]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("gguf")
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    write_tiny_llama(path)
    return path


@pytest.fixture(scope="module")
def truncated_model(tiny_model) -> Path:
    data = tiny_model.read_bytes()
    path = tiny_model.with_name("truncated.gguf")
    path.write_bytes(data[: len(data) // 2])
    return path


def test_info_survives_a_closed_pipe(tmp_path):
    reading, writing = os.pipe()
    os.close(reading)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "infini.ops", "info"],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
            timeout=120,
        )
    finally:
        os.close(writing)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_info_piped_to_head(tmp_path):
    result = subprocess.run(
        f"set -o pipefail; {sys.executable} -m infini.ops info | head -1",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("InfiniOps ")
    assert result.stdout.count("\n") == 1


def test_unknown_command_is_a_usage_error(tmp_path):
    result = child(["-m", "infini.ops", "frobnicate"], tmp_path)
    message = one_error_line(result, 2, MODULE)
    assert message.startswith("argument command: invalid choice: 'frobnicate'")
    assert message.endswith("(see --help)")


def test_missing_manifest_is_one_line(tmp_path):
    missing = tmp_path / "no-manifest.json"
    result = child(
        ["-m", "infini.ops", "info"], tmp_path, INFINI_OPS_MANIFEST=str(missing)
    )
    message = one_error_line(result, 1, MODULE)
    assert message.startswith(f"infini.ops has no build manifest ({missing}")


def test_empty_prompt_is_a_usage_error(tmp_path):
    result = child([str(GENERATE), ""], tmp_path)
    assert one_error_line(result, 2, "generate.py") == (
        "the prompt is empty: give the text to continue."
    )
    result = child([str(GENERATE), "Hi", "--batch-prompts", "Yes", ""], tmp_path)
    assert one_error_line(result, 2, "generate.py") == (
        "--batch-prompts: prompt 2 is empty."
    )


def test_bad_weights_is_a_usage_error(tmp_path):
    result = child([str(GENERATE), "Hi", "--weights", "float64"], tmp_path)
    message = one_error_line(result, 2, "generate.py")
    assert message.startswith(
        "argument --weights/--dtype: invalid choice: 'float64'"
    ), message


def test_missing_model_file_is_a_usage_error(tmp_path):
    missing = tmp_path / "absent.gguf"
    result = child([str(GENERATE), "Hi", "--model", str(missing)], tmp_path)
    assert one_error_line(result, 2, "generate.py") == (
        f"--model {missing}: no such file."
    )


def test_damaged_model_file_is_one_line(tmp_path, truncated_model):
    result = child([str(GENERATE), "Hi", "--model", str(truncated_model)], tmp_path)
    message = one_error_line(result, 1, "generate.py")
    size = truncated_model.stat().st_size
    assert message.startswith(f"{truncated_model}: truncated: tensor `"), message
    assert message.endswith(f" of a {size:,}-byte file."), message


def test_debug_shows_the_traceback(tmp_path, truncated_model):
    result = child(
        [str(GENERATE), "Hi", "--model", str(truncated_model), "--debug"], tmp_path
    )
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "ModelFileError" in result.stderr


def test_prompt_longer_than_the_context_is_a_usage_error(
    tmp_path, tiny_model, monkeypatch
):
    pytest.importorskip("tokenizers")
    from infini.ops.models import model_cache_dir

    # The tokenizer the first run would convert (with transformers, for
    # seconds) is put where later runs find it.
    monkeypatch.setenv("INFINI_OPS_MODEL_CACHE", str(tmp_path / "model-cache"))
    save_byte_tokenizer(model_cache_dir(tiny_model) / "tokenizer.json")
    context = SIZES["context_length"]
    # The tiny tokenizer has no merges: one token per byte.
    prompt = "x" * (context - 2)
    result = child(
        [str(GENERATE), prompt, "--model", str(tiny_model), "--max-tokens", "4"],
        tmp_path,
    )
    assert one_error_line(result, 2, "generate.py") == (
        f"a prompt of {context - 2} tokens plus --max-tokens 4 exceeds the "
        f"model's context of {context} tokens."
    )
