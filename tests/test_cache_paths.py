"""One cache root for everything InfiniOps writes at run time
(docs/behaviour.md, "Cache directory"): CPU kernels, Triton/NineToothed
kernels and model files' derived data, chosen by `INFINI_OPS_CACHE_DIR`,
`XDG_CACHE_HOME` and `HOME`. Each case runs in a child process with only
the variables it means set, as a user's shell would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Prints where each cache goes; `model_cache_dir` needs an existing file.
PROBE = """
import json, sys
from infini.ops.core.paths import cache_root
from infini.ops.runtime.cache import triton_cache_directory
from infini.ops.native.cpu.jit import kernel_cache_dir
from infini.ops.ninetoothed.cache import generated_source_path
from infini.ops.models import model_cache_dir
print(json.dumps({
    "root": str(cache_root()),
    "numba": str(kernel_cache_dir().parent),
    "triton": str(triton_cache_directory()),
    "ninetoothed": str(generated_source_path("add", "0" * 64).parent),
    "models": str(model_cache_dir(sys.argv[1]).parent),
}))
"""

VARIABLES = (
    "INFINI_OPS_CACHE_DIR",
    "XDG_CACHE_HOME",
    "INFINI_OPS_TRITON_CACHE_DIR",
    "INFINI_OPS_MODEL_CACHE",
    "HOME",
)


def where(tmp_path: Path, **variables: str) -> dict[str, Path]:
    environment = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    environment["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir(exist_ok=True)
    environment.update(variables)
    source = Path(__file__).resolve().parents[1] / "src"
    if "INFINI_OPS_MANIFEST" in os.environ:
        # A source-tree run (README, "Developing"): import that tree.
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, (str(source), os.environ.get("PYTHONPATH")))
        )
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(model)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    return {k: Path(v) for k, v in json.loads(result.stdout.splitlines()[-1]).items()}


def assert_under(paths: dict[str, Path], root: Path) -> None:
    assert paths["root"] == root
    assert paths["numba"] == root / "numba"
    assert paths["triton"] == root / "triton"
    assert paths["ninetoothed"] == root / "triton" / "ninetoothed"
    assert paths["models"] == root / "models"


@pytest.mark.skipif(sys.platform == "win32", reason="LOCALAPPDATA comes first there")
def test_home_cache_by_default(tmp_path):
    assert_under(where(tmp_path), tmp_path / "home" / ".cache" / "infiniops")


@pytest.mark.skipif(sys.platform == "win32", reason="LOCALAPPDATA comes first there")
def test_xdg_cache_home_moves_every_cache(tmp_path):
    xdg = tmp_path / "xdg"
    assert_under(where(tmp_path, XDG_CACHE_HOME=str(xdg)), xdg / "infiniops")


def test_infini_ops_cache_dir_wins_over_xdg(tmp_path):
    root = tmp_path / "root"
    paths = where(
        tmp_path, INFINI_OPS_CACHE_DIR=str(root), XDG_CACHE_HOME=str(tmp_path / "x")
    )
    assert_under(paths, root)


def test_per_cache_variables_override_the_root(tmp_path):
    root = tmp_path / "root"
    triton, models = tmp_path / "triton", tmp_path / "models"
    paths = where(
        tmp_path,
        INFINI_OPS_CACHE_DIR=str(root),
        INFINI_OPS_TRITON_CACHE_DIR=str(triton),
        INFINI_OPS_MODEL_CACHE=str(models),
    )
    assert paths["numba"] == root / "numba"
    assert paths["triton"] == triton
    assert paths["ninetoothed"] == triton / "ninetoothed"
    assert paths["models"] == models
