"""`WITH_TRITON` on a machine without a CUDA toolkit: Triton's own `ptxas`
stands in for `nvcc` when it is CUDA 12.0 or later (cross-builds, CI)."""

import os
import stat

import pytest

from tests.test_build_configure import (
    CMAKE,
    TRITON_OPTIONS,
    configure,
    copy_source,
    fails,
    fake_python,
    manifest_of,
)

pytestmark = [
    pytest.mark.skipif(CMAKE is None, reason="cmake is not installed"),
    pytest.mark.skipif(
        os.environ.get("INFINI_OPS_TRITON_INTERPRET", "")[:1] not in ("", "0"),
        reason="configure tests do not depend on the interpreter test mode; the "
        "normal run covers them",
    ),
]


def _fake_ptxas(python, release: str):
    """Gives the fake `triton` module of `python` a `ptxas` of `release`."""
    modules = python.parent / "fake-modules"
    ptxas = modules / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    ptxas.parent.mkdir(parents=True, exist_ok=True)
    ptxas.write_text(
        "#!/bin/sh\necho 'ptxas: NVIDIA (R) Ptx optimizing assembler'\n"
        f"echo 'Cuda compilation tools, release {release}, V{release}.86'\n"
    )
    ptxas.chmod(ptxas.stat().st_mode | stat.S_IEXEC)
    return ptxas


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return copy_source(tmp_path_factory.mktemp("source") / "repo")


def test_triton_without_nvcc_uses_the_ptxas_triton_ships(source, tmp_path):
    python = fake_python(tmp_path, provide=("triton",))
    ptxas = _fake_ptxas(python, "12.9")
    result = configure(
        source,
        tmp_path / "build",
        "WITH_CPU=ON",
        *TRITON_OPTIONS,
        python=python,
        environment={"PATH": str(tmp_path / "empty")},
    )
    assert f"CUDA 12.9 ({ptxas})" in result.stdout
    manifest = manifest_of(tmp_path / "build")
    assert manifest["devices"] == ["cpu", "nvidia"]
    assert manifest["backends"]["triton"] is True
    add = manifest["operators"]["add"]["implementations"]
    assert {(i["slot"], i["backend"]) for i in add if "nvidia" in i["devices"]} >= {
        (0, "native"),
        (10, "triton"),
    }


def test_triton_rejects_an_old_ptxas(source, tmp_path):
    python = fake_python(tmp_path, provide=("triton",))
    ptxas = _fake_ptxas(python, "11.8")
    message = fails(
        source,
        tmp_path / "build",
        *TRITON_OPTIONS,
        python=python,
        environment={"PATH": str(tmp_path / "empty")},
    )
    assert (
        f"`WITH_TRITON` requires CUDA Toolkit 12.0 or later, but `{ptxas}` is "
        "release 11.8."
    ) in message
