"""Real CMake configures of the repository: options, detection, validation, install.

Each test configures a copy of the build inputs (`CMakeLists.txt`, `cmake/`,
`scripts/`, `src/`, ...) so that an `ops.json` in the working tree never
changes what a test sees. Error messages are compared with whitespace
collapsed, because CMake re-wraps the text of `message(FATAL_ERROR ...)`.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CMAKE = shutil.which("cmake")
NINJA = shutil.which("ninja")

pytestmark = pytest.mark.skipif(
    CMAKE is None or NINJA is None, reason="cmake and ninja are needed"
)

SMOKE_OPS = (
    "add mul relu cast cat gemm matmul linear rms_norm swiglu silu_and_mul "
    "causal_softmax causal_softmax_infinilm abs clamp exp"
).split()

# Variables that steer detection; the tests set the ones they mean to.
DETECTION_VARIABLES = (
    "MACA_PATH",
    "NEUWARE_HOME",
    "MUSA_ROOT",
    "MUSA_HOME",
    "MUSA_PATH",
    "ASCEND_HOME_PATH",
    "DTK_ROOT",
    "PPU_SDK_HOME",
    "THEAD_HOME",
    "INFINI_RT_ROOT",
    "CUDA_HOME",
    "CUDA_PATH",
)

BUILD_INPUTS = ("pyproject.toml", "CMakeLists.txt", "cmake", "scripts", "src", "docs")


def copy_source(destination: Path) -> Path:
    """Copy what a configure reads into `destination` (no `ops.json`)."""
    ignore = shutil.ignore_patterns("__pycache__", "_generated", "*.pyc")
    destination.mkdir(parents=True)
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, destination / name, ignore=ignore)
        elif path.is_file():
            shutil.copy2(path, destination / name)
    return destination


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return copy_source(tmp_path_factory.mktemp("source") / "repo")


def has_operator(source: Path, op: str, implementation: str) -> bool:
    ops = source / "src/infini/ops"
    return (ops / "base" / f"{op}.py").is_file() and (ops / implementation).is_file()


def configure(
    source: Path,
    build: Path,
    *definitions: str,
    python: str | Path = sys.executable,
    environment: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in DETECTION_VARIABLES}
    env.update(environment or {})
    command = [
        CMAKE,
        "-S",
        str(source),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={NINJA}",
        f"-DPython_EXECUTABLE={python}",
        *(f"-D{definition}" for definition in definitions),
    ]
    if not any(d.startswith("INFINI_OPS_PRECOMPILE=") for d in definitions):
        # Compiling kernels at configure time takes minutes; the tests of
        # that step ask for it.
        command.append("-DINFINI_OPS_PRECOMPILE=none")
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def fails(*arguments, **keywords) -> str:
    """Configure, expect failure, and return stderr with whitespace collapsed."""
    result = configure(*arguments, check=False, **keywords)
    assert result.returncode != 0, result.stdout
    return " ".join(result.stderr.split())


def manifest_of(build: Path) -> dict:
    return json.loads((build / "generated/manifest.json").read_text())


def install(build: Path, prefix: Path) -> None:
    result = subprocess.run(
        [CMAKE, "--install", str(build), "--prefix", str(prefix)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def fake_python(
    directory: Path, *, hide: tuple[str, ...] = (), provide: tuple[str, ...] = ()
) -> Path:
    """An interpreter (a wrapper around this one) that cannot import `hide`
    and can import stub modules `provide`."""
    modules = directory / "fake-modules"
    for name in hide:
        _write(
            modules / name / "__init__.py",
            f'raise ImportError("simulated: {name} is not installed")\n',
        )
    for name in provide:
        _write(modules / name / "__init__.py", '__version__ = "3.0.0"\n')
    script = directory / "python"
    _write(
        script,
        f'#!/bin/sh\nPYTHONPATH="{modules}${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec "{sys.executable}" "$@"\n',
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def fake_nvcc(directory: Path, release: str) -> Path:
    nvcc = directory / "bin" / "nvcc"
    _write(
        nvcc,
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {release}, V{release}.1'\n",
    )
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    return directory


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _torch_importable() -> bool:
    result = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    return result.returncode == 0


# -- Defaults ------------------------------------------------------------------


@pytest.mark.smoke
def test_defaults_give_a_cpu_build(source, tmp_path):
    result = configure(source, tmp_path / "build")
    assert "No device option is on: enabling WITH_CPU" in result.stdout
    manifest = manifest_of(tmp_path / "build")
    assert manifest["devices"] == ["cpu"]
    assert manifest["backends"] == {
        "native": True,
        "torch": False,
        "triton": False,
        "ninetoothed": False,
        "linked": False,
    }
    assert manifest["python_bindings"] is False
    options = manifest["options"]
    expected_off = [
        "WITH_NVIDIA",
        "WITH_ILUVATAR",
        "WITH_HYGON",
        "WITH_THEAD",
        "WITH_METAX",
        "WITH_CAMBRICON",
        "WITH_MOORE",
        "WITH_ASCEND",
        "WITH_TORCH",
        "WITH_LINKED",
        "WITH_NINETOOTHED",
        "WITH_TRITON",
        "AUTO_DETECT_DEVICES",
        "AUTO_DETECT_BACKENDS",
        "GENERATE_PYTHON_BINDINGS",
        "INFINI_OPS_BUILD_DOCS",
        "INFINI_OPS_SMOKE_BUILD",
    ]
    assert {name: options[name] for name in expected_off} == dict.fromkeys(
        expected_off, False
    )
    assert options["WITH_CPU"] is True
    assert options["GENERATE_OPERATOR_CALL_INSTANTIATIONS"] is True
    assert options["BUILD_ASCEND_CUSTOM"] is True
    assert options["INFINI_RT_ROOT"] == ""
    assert options["INFINI_OPS_OPS"] == ""
    assert options["INFINI_OPS_TORCH_OPS"] == ""
    # Every operator is either implemented on the CPU or bound without an
    # active slot (every base is in the default selection).
    for info in manifest["operators"].values():
        assert all("cpu" in i["devices"] for i in info["implementations"])
    if has_operator(source, "add", "native/cpu/ops/add.py"):
        assert {"operator": "add", "device": "cpu", "slot": 0} in [
            {k: e[k] for k in ("operator", "device", "slot")}
            for e in manifest["instantiations"]
        ]


def test_instantiations_off(source, tmp_path):
    configure(source, tmp_path / "build", "GENERATE_OPERATOR_CALL_INSTANTIATIONS=OFF")
    manifest = manifest_of(tmp_path / "build")
    assert manifest["instantiations"] == []
    assert manifest["options"]["GENERATE_OPERATOR_CALL_INSTANTIATIONS"] is False


def test_gpu_with_cpu_off_has_no_cpu_device(source, tmp_path):
    configure(source, tmp_path / "build", "WITH_NVIDIA=ON")
    assert manifest_of(tmp_path / "build")["devices"] == ["nvidia"]


def test_cambricon_is_not_exclusive(source, tmp_path):
    configure(
        source, tmp_path / "build", "WITH_CPU=ON", "WITH_NVIDIA=ON", "WITH_CAMBRICON=ON"
    )
    assert manifest_of(tmp_path / "build")["devices"] == ["cpu", "nvidia", "cambricon"]


# -- Conflicts -----------------------------------------------------------------

EXCLUSIVE_MESSAGE = (
    "`WITH_NVIDIA`, `WITH_ILUVATAR`, `WITH_HYGON`, `WITH_THEAD`, `WITH_METAX`, "
    "`WITH_MOORE`, and `WITH_ASCEND` are mutually exclusive. Build one GPU "
    "backend at a time."
)


@pytest.mark.parametrize(
    "options",
    [
        ("WITH_NVIDIA", "WITH_METAX"),
        ("WITH_ILUVATAR", "WITH_HYGON"),
        ("WITH_THEAD", "WITH_NVIDIA"),
        ("WITH_MOORE", "WITH_ASCEND", "WITH_METAX"),
    ],
)
def test_more_than_one_gpu_backend_fails(source, tmp_path, options):
    message = fails(source, tmp_path / "build", *(f"{o}=ON" for o in options))
    assert EXCLUSIVE_MESSAGE in message
    for option in options:
        assert f"`{option}`" in message.split("Enabled:")[1]


def test_ninetoothed_requires_nvidia(source, tmp_path):
    message = fails(source, tmp_path / "build", "WITH_NINETOOTHED=ON")
    assert "`WITH_NINETOOTHED` requires `WITH_NVIDIA`" in message


def test_ninetoothed_with_nvidia(source, tmp_path):
    configure(source, tmp_path / "build", "WITH_NVIDIA=ON", "WITH_NINETOOTHED=ON")
    assert manifest_of(tmp_path / "build")["backends"]["ninetoothed"] is True


def test_triton_requires_nvidia(source, tmp_path):
    message = fails(source, tmp_path / "build", "WITH_TRITON=ON")
    assert "`WITH_TRITON` requires `WITH_NVIDIA`" in message


def test_triton_requires_python_bindings(source, tmp_path):
    message = fails(source, tmp_path / "build", "WITH_TRITON=ON", "WITH_NVIDIA=ON")
    assert "`WITH_TRITON` requires `GENERATE_PYTHON_BINDINGS`" in message


TRITON_OPTIONS = ("WITH_TRITON=ON", "WITH_NVIDIA=ON", "GENERATE_PYTHON_BINDINGS=ON")


def test_triton_requires_the_triton_package(source, tmp_path):
    python = fake_python(tmp_path, hide=("triton",))
    message = fails(source, tmp_path / "build", *TRITON_OPTIONS, python=python)
    assert (
        f"`WITH_TRITON` requires the `triton` package, but `{python}` cannot import "
        "it (ImportError: simulated: triton is not installed)."
    ) in message


def test_triton_requires_cuda_12(source, tmp_path):
    python = fake_python(tmp_path, provide=("triton",))
    cuda = fake_nvcc(tmp_path / "cuda-11.8", "11.8")
    message = fails(
        source,
        tmp_path / "build",
        *TRITON_OPTIONS,
        python=python,
        environment={"CUDA_HOME": str(cuda)},
    )
    assert (
        "`WITH_TRITON` requires CUDA Toolkit 12.0 or later, but "
        f"`{cuda}/bin/nvcc` is release 11.8."
    ) in message


def test_triton_requires_nvcc(source, tmp_path):
    python = fake_python(tmp_path, provide=("triton",))
    message = fails(
        source,
        tmp_path / "build",
        *TRITON_OPTIONS,
        python=python,
        environment={"PATH": str(tmp_path / "empty")},
    )
    assert (
        "`WITH_TRITON` requires CUDA Toolkit 12.0 or later, but no `nvcc` was "
        "found in `CUDA_HOME`, `CUDA_PATH` or on `PATH`."
    ) in message


def test_triton_with_everything_it_needs(source, tmp_path):
    python = fake_python(tmp_path, provide=("triton",))
    cuda = fake_nvcc(tmp_path / "cuda-13.0", "13.0")
    result = configure(
        source,
        tmp_path / "build",
        *TRITON_OPTIONS,
        python=python,
        environment={"CUDA_PATH": str(cuda)},
    )
    assert "CUDA 13.0" in result.stdout
    manifest = manifest_of(tmp_path / "build")
    assert manifest["backends"]["triton"] is True
    assert manifest["devices"] == ["nvidia"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on PATH")
def test_triton_finds_nvcc_on_path(source, tmp_path):
    python = fake_python(tmp_path, provide=("triton",))
    result = configure(source, tmp_path / "build", *TRITON_OPTIONS, python=python)
    assert f"({shutil.which('nvcc')})" in result.stdout


@pytest.mark.parametrize("option", ["WITH_TORCH", "WITH_LINKED"])
def test_torch_options_require_torch(source, tmp_path, option):
    python = fake_python(tmp_path, hide=("torch",))
    message = fails(source, tmp_path / "build", f"{option}=ON", python=python)
    assert f"`{option}` requires an importable `torch`" in message
    assert f"(tried: {python}; ImportError: simulated: torch is not installed)" in (
        message
    )


@pytest.mark.skipif(not _torch_importable(), reason="torch is not installed")
def test_torch_and_linked_with_torch(source, tmp_path):
    # Selecting only `add` leaves every linked provider unresolved, so the
    # configure needs none of them installed.
    result = configure(
        source,
        tmp_path / "build",
        "WITH_TORCH=ON",
        "WITH_LINKED=ON",
        "INFINI_OPS_OPS=add",
    )
    assert "Found PyTorch" in result.stdout
    backends = manifest_of(tmp_path / "build")["backends"]
    assert backends["torch"] is True
    assert backends["linked"] is True


# -- Auto-detection -----------------------------------------------------------


@pytest.mark.skipif(not _torch_importable(), reason="torch is not installed")
def test_torch_detection_sees_through_pip_build_isolation(source, tmp_path):
    # pip's isolated builds hide site-packages with a `sitecustomize` on
    # `PYTHONPATH` plus `PYTHONNOUSERSITE`; this one does the same.
    _write(
        tmp_path / "isolation/sitecustomize.py",
        "import sys\n"
        "sys.path[:] = [p for p in sys.path\n"
        "               if 'site-packages' not in p and 'dist-packages' not in p]\n",
    )
    environment = {"PYTHONPATH": str(tmp_path / "isolation"), "PYTHONNOUSERSITE": "1"}
    hidden = subprocess.run(
        [sys.executable, "-c", "import torch"],
        env={**os.environ, **environment},
        capture_output=True,
    )
    assert hidden.returncode != 0, "the simulated isolation does not hide torch"

    result = configure(
        source, tmp_path / "build", "AUTO_DETECT_BACKENDS=ON", environment=environment
    )
    assert (
        f"({sys.executable}, with PYTHONPATH and PYTHONNOUSERSITE unset): "
        "enabling WITH_TORCH"
    ) in result.stdout
    assert manifest_of(tmp_path / "build")["backends"]["torch"] is True


def test_backend_detection_without_torch_keeps_torch_off(source, tmp_path):
    python = fake_python(tmp_path, hide=("torch",))
    # Only the build interpreter is a candidate that exists for sure; others
    # (python3 on PATH, /usr/bin/python3) are not reachable with an empty PATH.
    result = configure(
        source,
        tmp_path / "build",
        "AUTO_DETECT_BACKENDS=ON",
        python=python,
        environment={"PATH": str(tmp_path / "empty")},
        check=False,
    )
    if "Auto-detected PyTorch" in result.stdout:
        pytest.skip(
            "an absolute fallback interpreter (e.g. /usr/bin/python3) has torch"
        )
    assert result.returncode == 0, result.stderr
    assert "PyTorch not found" in result.stdout
    assert manifest_of(tmp_path / "build")["backends"]["torch"] is False


DEVICE_CASES = {
    "nothing": ({}, {}, ["cpu"]),
    "nvidia": ({"dev/nvidia0": ""}, {}, ["cpu", "nvidia"]),
    "iluvatar": ({"dev/iluvatar0": ""}, {}, ["cpu", "iluvatar"]),
    "hygon-default-dtk": ({"opt/dtk/cuda/cuda-12/bin/nvcc": ""}, {}, ["cpu", "hygon"]),
    "hygon-dtk-root": (
        {"dtk/cuda/bin/nvcc": ""},
        {"DTK_ROOT": "{root}/dtk"},
        ["cpu", "hygon"],
    ),
    "metax-pci": (
        {"sys/bus/pci/devices/0000:01:00.0/vendor": "0x9999\n"},
        {},
        ["cpu", "metax"],
    ),
    "other-pci": (
        {"sys/bus/pci/devices/0000:01:00.0/vendor": "0x10de\n"},
        {},
        ["cpu"],
    ),
    "metax-env": ({}, {"MACA_PATH": "/opt/maca"}, ["cpu", "metax"]),
    "cambricon": ({}, {"NEUWARE_HOME": "/opt/neuware"}, ["cpu", "cambricon"]),
    "moore": ({}, {"MUSA_PATH": "/opt/musa"}, ["cpu", "moore"]),
    "ascend-env": ({}, {"ASCEND_HOME_PATH": "/opt/ascend"}, ["cpu", "ascend"]),
    "ascend-device": ({"dev/davinci0": ""}, {}, ["cpu", "ascend"]),
    "thead-sdk": ({}, {"PPU_SDK_HOME": "/opt/ppu"}, ["cpu", "thead"]),
    "thead-home": ({}, {"THEAD_HOME": "/opt/thead"}, ["cpu", "thead"]),
    "nvidia-and-metax": (
        {"dev/nvidia0": ""},
        {"MACA_PATH": "/opt/maca"},
        ["cpu", "metax"],
    ),
    "nvidia-and-cambricon": (
        {"dev/nvidiactl": ""},
        {"NEUWARE_HOME": "/opt/neuware"},
        ["cpu", "cambricon"],
    ),
}


@pytest.mark.parametrize("case", DEVICE_CASES)
def test_device_detection(source, tmp_path, case):
    files, environment, devices = DEVICE_CASES[case]
    root = tmp_path / "root"
    root.mkdir()
    for name, text in files.items():
        _write(root / name, text)
    environment = {k: v.format(root=root) for k, v in environment.items()}
    result = configure(
        source,
        tmp_path / "build",
        "AUTO_DETECT_DEVICES=ON",
        f"INFINI_OPS_DETECT_ROOT={root}",
        environment=environment,
    )
    assert manifest_of(tmp_path / "build")["devices"] == devices
    assert "Auto-detected CPU: enabling WITH_CPU (always)" in result.stdout
    if case.startswith("nvidia-and-"):
        assert "Skipping auto-detected NVIDIA environment" in result.stdout


def test_two_detected_gpus_conflict(source, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    message = fails(
        source,
        tmp_path / "build",
        "AUTO_DETECT_DEVICES=ON",
        f"INFINI_OPS_DETECT_ROOT={root}",
        environment={"MACA_PATH": "/opt/maca", "MUSA_ROOT": "/opt/musa"},
    )
    assert EXCLUSIVE_MESSAGE in message
    assert "Enabled: `WITH_METAX`, `WITH_MOORE`." in message


def test_detection_is_not_remembered(source, tmp_path):
    build = tmp_path / "build"
    configure(source, build, "AUTO_DETECT_DEVICES=ON", environment={"MUSA_HOME": "/x"})
    assert manifest_of(build)["devices"] == ["cpu", "moore"]
    configure(source, build, "AUTO_DETECT_DEVICES=OFF")
    assert manifest_of(build)["devices"] == ["cpu"]


# -- InfiniRT ------------------------------------------------------------------


def test_infini_rt_root_requires_the_header(source, tmp_path):
    root = tmp_path / "rt"
    root.mkdir()
    message = fails(source, tmp_path / "build", f"INFINI_RT_ROOT={root}")
    assert (
        f"`INFINI_RT_ROOT` is `{root}`, but `{root}/include/infini/rt.h` "
        "does not exist."
    ) in message


def test_infini_rt_root_requires_the_library(source, tmp_path):
    root = tmp_path / "rt"
    _write(root / "include/infini/rt.h", "")
    message = fails(
        source, tmp_path / "build", environment={"INFINI_RT_ROOT": str(root)}
    )
    assert f"`{root}/lib/libinfinirt.so` does not exist." in message


def test_infini_rt_library_is_installed_beside_the_package(source, tmp_path):
    root = tmp_path / "rt"
    _write(root / "include/infini/rt.h", "")
    _write(root / "lib/libinfinirt.so.1", "not really an ELF file")
    (root / "lib/libinfinirt.so").symlink_to("libinfinirt.so.1")
    build = tmp_path / "build"
    configure(source, build, f"INFINI_RT_ROOT={root}")
    assert manifest_of(build)["options"]["INFINI_RT_ROOT"] == str(root)
    install(build, tmp_path / "prefix")
    library = tmp_path / "prefix/infini/libinfinirt.so"
    assert library.is_file() and not library.is_symlink()
    assert library.read_text() == "not really an ELF file"


# -- Operator selection ----------------------------------------------------------


def test_bad_ops_json_names_file_and_entry(source, tmp_path):
    config = _write(tmp_path / "my ops.json", '{"add": {"implementations": [40]}}')
    message = fails(source, tmp_path / "build", f"INFINI_OPS_OPS={config}")
    assert (
        f"{config}: 'add' implementations must contain integers between 0 and 31"
    ) in message


def test_ops_json_duplicate_key(source, tmp_path):
    config = _write(tmp_path / "ops.json", '{"add": "a.py", "add": "b.py"}')
    message = fails(source, tmp_path / "build", f"INFINI_OPS_OPS={config}")
    assert f"failed to read {config}: duplicate key 'add'" in message


def test_ops_json_unknown_operator(source, tmp_path):
    config = _write(tmp_path / "ops.json", '{"no_such_op": {"implementations": "all"}}')
    message = fails(source, tmp_path / "build", f"INFINI_OPS_OPS={config}")
    assert (
        f"{config}: operator 'no_such_op' is not available for the active devices"
    ) in message


def test_missing_selection_file(source, tmp_path):
    message = fails(source, tmp_path / "build", "INFINI_OPS_OPS=foo.json")
    assert f"Operator selection `{source}/foo.json` does not exist." in message


def test_implicit_ops_json(tmp_path):
    source = copy_source(tmp_path / "repo")
    if not has_operator(source, "add", "native/cpu/ops/add.py"):
        pytest.skip("the tree has no CPU add yet")
    _write(source / "ops.json", '{"add": {"implementations": [0]}}')
    result = configure(source, tmp_path / "build")
    assert f"Operator selection: {source}/ops.json (implicit)" in result.stdout
    manifest = manifest_of(tmp_path / "build")
    assert list(manifest["operators"]) == ["add"]
    assert manifest["options"]["INFINI_OPS_OPS"] == f"{source}/ops.json"

    # Any inline list, the smoke list included, beats the implicit file.
    result = configure(source, tmp_path / "build", "INFINI_OPS_SMOKE_BUILD=ON")
    assert "(implicit)" not in result.stdout
    operators = manifest_of(tmp_path / "build")["operators"]
    assert set(operators) <= set(SMOKE_OPS)


def test_adding_ops_json_reconfigures(tmp_path):
    source = copy_source(tmp_path / "repo")
    if not has_operator(source, "add", "native/cpu/ops/add.py"):
        pytest.skip("the tree has no CPU add yet")
    build = tmp_path / "build"
    configure(source, build)
    _write(source / "ops.json", '{"add": {"implementations": [0]}}')
    result = subprocess.run(
        [CMAKE, "--build", str(build)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(manifest_of(build)["operators"]) == ["add"]


def test_ops_json_selection_installs_only_that_operator(source, tmp_path):
    if not has_operator(source, "add", "native/cpu/ops/add.py"):
        pytest.skip("the tree has no CPU add yet")
    config = _write(tmp_path / "ops.json", '{"add": {"implementations": [0]}}')
    build = tmp_path / "build"
    configure(source, build, f"INFINI_OPS_OPS={config}")
    prefix = tmp_path / "prefix"
    install(build, prefix)
    package = prefix / "infini/ops"
    manifest = json.loads((package / "_generated/manifest.json").read_text())
    assert list(manifest["operators"]) == ["add"]
    implementations = manifest["operators"]["add"]["implementations"]
    assert [i["slot"] for i in implementations if "cpu" in i["devices"]] == [0]
    assert (package / "_generated/__init__.py").read_text() == ""
    assert (package / "__init__.py").is_file()
    assert (package / "base/add.py").is_file()
    assert not list(package.rglob("__pycache__"))
    assert sorted(p.name for p in (package / "_generated").iterdir()) == [
        "__init__.py",
        "manifest.json",
    ]


def test_inline_allowlist(source, tmp_path):
    result = configure(source, tmp_path / "build", "INFINI_OPS_OPS=add, no_such_op")
    manifest = manifest_of(tmp_path / "build")
    assert set(manifest["operators"]) <= {"add"}
    assert manifest["options"]["INFINI_OPS_OPS"] == "add;no_such_op"
    assert "operator(s) not available for active devices: no_such_op" in result.stderr


def test_smoke_build(source, tmp_path):
    result = configure(source, tmp_path / "build", "INFINI_OPS_SMOKE_BUILD=ON")
    manifest = manifest_of(tmp_path / "build")
    assert set(manifest["operators"]) <= set(SMOKE_OPS)
    if has_operator(source, "add", "native/cpu/ops/add.py"):
        assert "add" in manifest["operators"]
    assert manifest["options"]["INFINI_OPS_OPS"] == ";".join(SMOKE_OPS)
    assert manifest["options"]["INFINI_OPS_TORCH_OPS"] == "abs;clamp;exp;relu"
    assert manifest["options"]["INFINI_OPS_SMOKE_BUILD"] is True
    assert f"smoke operator allowlist: {', '.join(SMOKE_OPS)}" in result.stdout
    missing = [op for op in SMOKE_OPS if op not in manifest["operators"]]
    if missing:
        warning = " ".join(result.stderr.split())
        assert (
            f"operator(s) not available for active devices: {', '.join(missing)}"
        ) in warning


def test_smoke_build_on_nvidia_adds_its_operators(source, tmp_path):
    result = configure(
        source, tmp_path / "build", "INFINI_OPS_SMOKE_BUILD=ON", "WITH_NVIDIA=ON"
    )
    allowlist = manifest_of(tmp_path / "build")["options"]["INFINI_OPS_OPS"]
    assert allowlist.split(";") == [*SMOKE_OPS, "cutlass_scaled_mm", "moe_sum"]
    assert "smoke operator allowlist" in result.stdout


# -- Docs ----------------------------------------------------------------------


def _sphinx_importable() -> bool:
    result = subprocess.run(
        [sys.executable, "-c", "import sphinx"], capture_output=True
    )
    return result.returncode == 0


@pytest.mark.skipif(not _sphinx_importable(), reason="sphinx is not installed")
def test_docs_target(source, tmp_path):
    build = tmp_path / "build"
    configure(source, build, "INFINI_OPS_BUILD_DOCS=ON")
    result = subprocess.run(
        [CMAKE, "--build", str(build), "--target", "infiniops_docs"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    html = build / "docs/reference/html"
    assert (html / "index.html").is_file()
    for op in manifest_of(build)["operators"]:
        page = (html / f"{op}.html").read_text()
        assert f"infini.ops.{op}" in page


def test_docs_without_sphinx_fail_clearly(source, tmp_path):
    python = fake_python(tmp_path, hide=("sphinx",))
    message = fails(
        source,
        tmp_path / "build",
        "INFINI_OPS_BUILD_DOCS=ON",
        python=python,
        environment={"PATH": str(tmp_path / "empty")},
    )
    assert (
        f"`INFINI_OPS_BUILD_DOCS` requires Sphinx, but `{python}` cannot import "
        "`sphinx`"
    ) in message


def test_docs_generator_writes_one_page_per_operator(tmp_path):
    _write(
        tmp_path / "src/infini/ops/base/rms_norm.py",
        textwrap.dedent(
            '''\
            class RmsNorm:
                """``out = input / rms(input) * weight``."""

                name = "rms_norm"
                overloads = (
                    "input: Tensor, weight: Tensor, eps: float = 1e-6, out: Tensor!",
                )
            '''
        ),
    )
    implementation = {
        "slot": 0,
        "backend": "native",
        "module": "infini.ops.native.cpu.ops.rms_norm",
        "class": "CpuRmsNorm",
        "devices": ["cpu"],
    }
    manifest = {
        "package_version": "0.1.0",
        "devices": ["cpu"],
        "backends": {"native": True, "torch": False},
        "operators": {
            "rms_norm": {
                "class": "RmsNorm",
                "base_module": "infini.ops.base.rms_norm",
                "overloads": [
                    "input: Tensor, weight: Tensor, eps: float = 1e-6, out: Tensor!"
                ],
                "implementations": [implementation],
            }
        },
    }
    path = _write(tmp_path / "manifest.json", json.dumps(manifest))
    _write(tmp_path / "pages/stale.rst", "")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts/generate_api_docs.py"),
            "--manifest",
            str(path),
            "--source-dir",
            str(tmp_path),
            "--output-dir",
            str(tmp_path / "pages"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == [
        "index.rst",
        "rms_norm.rst",
    ]
    index = (tmp_path / "pages/index.rst").read_text()
    assert index.startswith("InfiniOps 0.1.0 operator reference\n")
    assert "   rms_norm\n" in index
    page = (tmp_path / "pages/rms_norm.rst").read_text()
    assert (
        ".. py:function:: infini.ops.rms_norm(input: Tensor, weight: Tensor, "
        "eps: float = 1e-6, out: Tensor, *, stream: int = 0, "
        "implementation_index: int | None = None)"
    ) in page
    assert "Writes ``out``." in page
    assert "``out = input / rms(input) * weight``." in page
    assert ".. py:class:: infini.ops.RmsNorm" in page
    assert "``infini.ops.native.cpu.ops.rms_norm.CpuRmsNorm``" in page


# -- Kernels compiled at build time ------------------------------------------------


def test_precompiled_kernels_are_installed_with_the_package(source, tmp_path):
    build = tmp_path / "build"
    result = configure(
        source,
        build,
        "WITH_CPU=ON",
        "GENERATE_PYTHON_BINDINGS=ON",
        "INFINI_OPS_PRECOMPILE=embedding",
    )
    assert "embedding on cpu slot 0: compiled by" in result.stdout
    install(build, tmp_path / "prefix")
    shipped = list((tmp_path / "prefix/infini/ops/_kernels").iterdir())
    # One folder, named like the run-time cache: version and source hash.
    assert len(shipped) == 1
    assert shipped[0].name.startswith(manifest_of(build)["package_version"] + "-")
    assert any(shipped[0].rglob("*.nbi")) and any(shipped[0].rglob("*.nbc"))


def test_precompile_is_skipped_when_numba_cannot_be_imported(source, tmp_path):
    python = fake_python(tmp_path, hide=("numba",))
    build = tmp_path / "build"
    result = configure(
        source,
        build,
        "WITH_CPU=ON",
        "GENERATE_PYTHON_BINDINGS=ON",
        "INFINI_OPS_PRECOMPILE=embedding",
        python=python,
    )
    assert "cannot import numba and torch" in result.stdout
    install(build, tmp_path / "prefix")
    assert not (tmp_path / "prefix/infini/ops/_kernels").exists()
