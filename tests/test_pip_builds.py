"""Every build the README documents, installed through pip as the README
writes it, and what the installed package then offers.

Each case is one README command (`pip install ".[dev]"` or `pip install .`
with its `-C cmake.define.X=Y` options, build isolation included), run with
`--no-deps` (the dependencies are this environment's) into a scratch
`--target` directory, with `INFINI_OPS_PRECOMPILE=none` (the precompile step
takes minutes and has its own tests, `tests/test_precompile.py`). The
installed manifest and the classes' `active_implementation_indices`, read by
a fresh interpreter that imports the installed package, must show the
devices, backends and slots the README promises.

An isolated build fetches scikit-build-core from the package index and runs
the configure-time checks from pip's build environment, which is where the
NineToothed check used to fail (issue 25). The matrix takes a few minutes,
so it runs when `INFINI_OPS_TEST_PIP_BUILDS=1` (a step of its own in
`.ci/run`, after the linked providers are installed);
`tests/test_package_install.py` keeps the quick non-isolated installs in the
main suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_build_configure import copy_source
from tests.test_package_install import SMOKE_OPS, installed_manifest

pytestmark = pytest.mark.skipif(
    os.environ.get("INFINI_OPS_TEST_PIP_BUILDS") != "1",
    reason="the pip-install matrix takes minutes: set INFINI_OPS_TEST_PIP_BUILDS=1 "
    "(its own step in .ci/run)",
)

# Prints `{class: {device: slots}}` for the classes and devices asked for, and
# where the package was imported from.
PROBE = """
import json, sys
import infini.ops as ops
wanted = json.loads(sys.argv[1])
slots = {
    name: {
        device: getattr(ops, name).active_implementation_indices(device)
        for device in devices
    }
    for name, devices in wanted.items()
    if hasattr(ops, name)
}
print(json.dumps({"file": ops.__file__, "slots": slots}))
"""


@dataclass(frozen=True)
class Build:
    """One README install: its `-C cmake.define` options, and what it must
    give. `slots` maps a class and a device to the active slots, `devices`
    and `backends` are the manifest's; `operators`, when set, is the exact
    operator set."""

    name: str
    defines: tuple[str, ...]
    slots: dict[str, dict[str, list[int]]]
    devices: tuple[str, ...]
    backends: tuple[str, ...]
    operators: frozenset[str] | None = None
    needs: tuple[str, ...] = field(default=())
    extra: str = "[dev]"


# "Install and run", "Build options" (AUTO_DETECT_BACKENDS), "NVIDIA and
# CUDA-like GPUs", "NineToothed backend", "Linked providers" and "Operator
# selection" of README.md. torch is importable here, so a pip build
# auto-detects it unless `AUTO_DETECT_BACKENDS=OFF`.
BUILDS = (
    Build(
        "cpu",
        ("WITH_CPU=ON", "AUTO_DETECT_BACKENDS=OFF"),
        {"Add": {"cpu": [0]}, "RmsNorm": {"cpu": [0]}, "Abs": {}},
        ("cpu",),
        (),
    ),
    Build(
        "cpu-torch",
        ("WITH_CPU=ON",),
        {"Add": {"cpu": [0, 1, 8]}, "RmsNorm": {"cpu": [0]}, "Abs": {"cpu": [8]}},
        ("cpu",),
        ("torch",),
    ),
    Build(
        "nvidia-triton",
        ("WITH_CPU=ON", "WITH_NVIDIA=ON", "WITH_TRITON=ON"),
        {
            "Add": {"cpu": [0, 1, 8], "nvidia": [0, 1, 8, 10]},
            "RmsNorm": {"cpu": [0], "nvidia": [0, 10]},
        },
        ("cpu", "nvidia"),
        ("torch", "triton"),
        needs=("triton",),
    ),
    Build(
        "nvidia-ninetoothed",
        ("WITH_NVIDIA=ON", "WITH_NINETOOTHED=ON"),
        {"RmsNorm": {"cpu": [0], "nvidia": [0, 9]}, "Add": {"nvidia": [0, 1, 8, 9]}},
        ("cpu", "nvidia"),
        ("torch", "ninetoothed"),
        needs=("ninetoothed",),
        extra="",
    ),
    Build(
        "linked",
        ("WITH_CPU=ON", "WITH_LINKED=ON"),
        {"RmsNorm": {"cpu": [0, 16]}, "DequantizeNf4": {"cpu": [0, 16]}},
        ("cpu",),
        ("torch", "linked"),
        needs=("vllm", "bitsandbytes"),
    ),
    Build(
        "smoke",
        ("INFINI_OPS_SMOKE_BUILD=ON",),
        # The smoke ATen set is `abs clamp exp relu` (README, "Operator
        # selection"): `add` keeps its native and hand-written torch slots.
        {
            "Add": {"cpu": [0, 1]},
            "Relu": {"cpu": [0, 8]},
            "Abs": {"cpu": [8]},
            "Softmax": {},
        },
        ("cpu",),
        ("torch",),
        operators=frozenset(SMOKE_OPS),
    ),
    Build(
        "ops-list",
        ("INFINI_OPS_OPS=add,rms_norm",),
        {"Add": {"cpu": [0, 1, 8]}, "RmsNorm": {"cpu": [0]}, "Mul": {}},
        ("cpu",),
        ("torch",),
        operators=frozenset({"add", "rms_norm"}),
    ),
    Build(
        "ops-json",
        (),
        {"Add": {"cpu": [0, 8]}, "RmsNorm": {"cpu": [0]}, "Mul": {}},
        ("cpu",),
        ("torch",),
        operators=frozenset({"add", "rms_norm"}),
    ),
)

# The `ops.json` of the "ops-json" case, at the source root, where an empty
# `INFINI_OPS_OPS` finds it (README, "Operator selection").
OPS_JSON = {
    "add": {"implementations": [0, 8]},
    "rms_norm": "src/infini/ops/native/cpu/ops/rms_norm.py",
}


def importable(module: str) -> bool:
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], check=False)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return copy_source(tmp_path_factory.mktemp("source") / "repo")


def pip_install(source: Path, target: Path, build: Build) -> float:
    """Runs the README's command for `build` (isolated, into `target`);
    returns the seconds it took."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--target",
        str(target),
        f"{source}{build.extra}",
        "-C",
        "cmake.define.INFINI_OPS_PRECOMPILE=none",
    ]
    for define in build.defines:
        command += ["-C", f"cmake.define.{define}"]
    # The caller's source-tree manifest must not reach the build's scripts.
    environment = {k: v for k, v in os.environ.items() if k != "INFINI_OPS_MANIFEST"}
    start = time.perf_counter()
    result = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 0, (
        f"`pip install` of the {build.name} build failed:\n{result.stdout[-8000:]}"
    )
    return seconds


def probe(target: Path, wanted: dict[str, list[str]]) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(target)}
    environment.pop("INFINI_OPS_MANIFEST", None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(wanted)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=target,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.splitlines()[-1])
    assert Path(answer["file"]).is_relative_to(target)
    return answer["slots"]


@pytest.mark.parametrize("build", BUILDS, ids=lambda build: build.name)
def test_readme_build_installs(build, source, tmp_path):
    missing = [module for module in build.needs if not importable(module)]
    if missing:
        pytest.skip(f"the {build.name} build needs {', '.join(missing)}")
    if build.name == "ops-json":
        (source / "ops.json").write_text(json.dumps(OPS_JSON))
    try:
        seconds = pip_install(source, tmp_path / "site", build)
    finally:
        (source / "ops.json").unlink(missing_ok=True)
    print(f"{build.name}: pip install took {seconds:.1f} s")

    manifest = installed_manifest(tmp_path / "site")
    assert manifest["devices"] == list(build.devices)
    enabled = sorted(name for name, on in manifest["backends"].items() if on)
    assert enabled == sorted(("native", *build.backends))
    assert manifest["python_bindings"] is True
    if build.operators is not None:
        assert set(manifest["operators"]) == build.operators

    wanted = {
        name: list(by_device) or ["cpu"] for name, by_device in build.slots.items()
    }
    slots = probe(tmp_path / "site", wanted)
    for name, by_device in build.slots.items():
        if not by_device:
            assert name not in slots, f"{name} is not part of the {build.name} build"
            continue
        assert slots[name] == by_device, name
