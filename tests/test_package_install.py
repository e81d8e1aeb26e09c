"""Real `pip install` builds: what a configuration puts in the package and what
`import infini.ops` then exposes.

Installs go into `--target` directories without build isolation (the test
environment has scikit-build-core), from a copy of the build inputs so an
`ops.json` in the working tree never leaks in. Set
`INFINI_OPS_TEST_ISOLATED_BUILD=1` to also run an isolated build, which
downloads scikit-build-core from the package index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SMOKE_OPS = (
    "add mul relu cast cat gemm matmul linear rms_norm swiglu silu_and_mul "
    "causal_softmax causal_softmax_infinilm abs clamp exp"
).split()

BUILD_INPUTS = ("pyproject.toml", "CMakeLists.txt", "cmake", "scripts", "src", "docs")

# What the subprocess prints: the public names that are not modules (the
# operators' functions and classes), and Add's active CPU slots if it exists.
SURFACE_PROBE = """
import json, types
import infini.ops as ops
names = sorted(
    name for name in dir(ops)
    if not name.startswith("_") and not isinstance(getattr(ops, name), types.ModuleType)
)
add = getattr(ops, "Add", None)
slots = add.active_implementation_indices("cpu") if add is not None else None
print(json.dumps({"file": ops.__file__, "names": names, "add_cpu_slots": slots}))
"""


def _have_build_tools() -> bool:
    try:
        import scikit_build_core  # noqa: F401
    except ImportError:
        return False
    return shutil.which("cmake") is not None and shutil.which("ninja") is not None


pytestmark = pytest.mark.skipif(
    not _have_build_tools(), reason="scikit-build-core, cmake and ninja are needed"
)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    destination = tmp_path_factory.mktemp("source") / "repo"
    destination.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "_generated", "*.pyc")
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, destination / name, ignore=ignore)
        elif path.is_file():
            shutil.copy2(path, destination / name)
    return destination


def pip_install(
    source: Path, target: Path, *config_settings: str, isolated: bool = False
) -> str:
    """Install `source` into `target`; returns pip's (verbose) output."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps"]
    if not isolated:
        command.append("--no-build-isolation")
    command += ["--target", str(target), str(source)]
    command += [f"--config-settings=cmake.define.{s}" for s in config_settings]
    if not any(s.startswith("INFINI_OPS_PRECOMPILE=") for s in config_settings):
        # Kernels compiled at build time take minutes; not what these test.
        command.append("--config-settings=cmake.define.INFINI_OPS_PRECOMPILE=none")
    # Verbose output carries the CMake status lines and warnings.
    command.append("--verbose")
    result = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert result.returncode == 0, result.stdout[-8000:]
    return result.stdout


def installed_manifest(target: Path) -> dict:
    path = target / "infini/ops/_generated/manifest.json"
    return json.loads(path.read_text())


def surface(target: Path) -> dict:
    """Import the installed package in a fresh interpreter and describe it."""
    environment = {**os.environ, "PYTHONPATH": str(target)}
    # The installed build's own manifest, not a developer's source-tree one.
    environment.pop("INFINI_OPS_MANIFEST", None)
    result = subprocess.run(
        [sys.executable, "-c", SURFACE_PROBE],
        capture_output=True,
        text=True,
        env=environment,
        cwd=target,
    )
    assert result.returncode == 0, result.stderr
    description = json.loads(result.stdout.splitlines()[-1])
    assert Path(description["file"]).is_relative_to(target)
    return description


def expected_names(manifest: dict) -> list[str]:
    if not manifest["python_bindings"]:
        return []
    names = []
    for op, info in manifest["operators"].items():
        names += [op, info["class"]]
    return sorted(names)


def has_cpu_add(source: Path) -> bool:
    ops = source / "src/infini/ops"
    return (ops / "base/add.py").is_file() and (ops / "native/cpu/ops/add.py").is_file()


def test_smoke_build(source, tmp_path):
    target = tmp_path / "site"
    log = pip_install(source, target, "INFINI_OPS_SMOKE_BUILD=ON")
    manifest = installed_manifest(target)
    # pyproject.toml's defaults for pip builds.
    options = manifest["options"]
    assert options["AUTO_DETECT_DEVICES"] is True
    assert options["AUTO_DETECT_BACKENDS"] is True
    assert options["GENERATE_PYTHON_BINDINGS"] is True
    assert options["INFINI_OPS_SMOKE_BUILD"] is True
    assert options["INFINI_OPS_OPS"] == ";".join(SMOKE_OPS)
    assert manifest["python_bindings"] is True
    assert "cpu" in manifest["devices"]
    assert set(manifest["operators"]) <= set(SMOKE_OPS)
    assert "InfiniOps manifest: operators:" in log

    description = surface(target)
    assert description["names"] == expected_names(manifest)
    if has_cpu_add(source):
        assert description["add_cpu_slots"][0] == 0


def test_ops_json_selection(source, tmp_path):
    if not has_cpu_add(source):
        pytest.skip("the tree has no CPU add yet")
    config = tmp_path / "ops.json"
    config.write_text('{"add": {"implementations": [0]}}')
    target = tmp_path / "site"
    pip_install(source, target, f"INFINI_OPS_OPS={config}")
    manifest = installed_manifest(target)
    assert list(manifest["operators"]) == ["add"]
    assert manifest["options"]["INFINI_OPS_OPS"] == str(config)

    description = surface(target)
    assert description["names"] == ["Add", "add"]
    assert description["add_cpu_slots"] == [0]


def test_inline_allowlist(source, tmp_path):
    target = tmp_path / "site"
    pip_install(source, target, "INFINI_OPS_OPS=add,mul")
    manifest = installed_manifest(target)
    assert set(manifest["operators"]) <= {"add", "mul"}
    assert manifest["options"]["INFINI_OPS_OPS"] == "add;mul"
    description = surface(target)
    assert description["names"] == expected_names(manifest)
    assert set(description["names"]) <= {"Add", "add", "Mul", "mul"}


def test_user_definitions_override_pyproject_defaults(source, tmp_path):
    target = tmp_path / "site"
    pip_install(
        source,
        target,
        "AUTO_DETECT_BACKENDS=OFF",
        "GENERATE_PYTHON_BINDINGS=OFF",
        "INFINI_OPS_OPS=add",
    )
    manifest = installed_manifest(target)
    assert manifest["options"]["AUTO_DETECT_BACKENDS"] is False
    assert manifest["options"]["AUTO_DETECT_DEVICES"] is True
    assert manifest["backends"]["torch"] is False
    # Without bindings the manifest still lists the operators, but the package
    # exposes no generated functions or classes.
    assert manifest["python_bindings"] is False
    if has_cpu_add(source):
        assert list(manifest["operators"]) == ["add"]
    assert surface(target)["names"] == []


def test_conflicting_options_fail_the_install(source, tmp_path):
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--target",
        str(tmp_path / "site"),
        str(source),
        "--config-settings=cmake.define.WITH_NVIDIA=ON",
        "--config-settings=cmake.define.WITH_ASCEND=ON",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "are mutually exclusive. Build one GPU backend at a time." in output


@pytest.mark.skipif(
    os.environ.get("INFINI_OPS_TEST_ISOLATED_BUILD") != "1",
    reason="set INFINI_OPS_TEST_ISOLATED_BUILD=1 (downloads scikit-build-core)",
)
def test_isolated_build_detects_torch(source, tmp_path):
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("torch is not installed")
    target = tmp_path / "site"
    log = pip_install(source, target, "INFINI_OPS_OPS=add", isolated=True)
    assert "with PYTHONPATH and PYTHONNOUSERSITE unset): enabling WITH_TORCH" in log
    assert installed_manifest(target)["backends"]["torch"] is True
