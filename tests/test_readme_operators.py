"""README.md's operator table is what the sources give
(`scripts/generate_operator_table.py`), and its counted claims (operator
counts, which operators have which CPU slots) are what a build gives."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

pytest.importorskip("torchgen")

import torch  # noqa: E402
from generate_operator_table import (  # noqa: E402
    operator_table,
    readme_table,
    torch_minor_version,
)
from source_scan import scan_bases  # noqa: E402


def test_readme_operator_table_matches_the_sources():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = readme_table(readme)
    written = readme[start:end]
    # The slot-8 entries come from the installed torch's schema: another
    # torch release may bind other operators, so only the one the table was
    # written with can check it.
    recorded = re.search(r"With torch (\d+\.\d+) ", written)
    assert recorded, "the table does not say which torch it was generated with"
    if recorded[1] != torch_minor_version(torch.__version__):
        pytest.skip(f"the table was generated with torch {recorded[1]}")
    assert written == operator_table(REPO), (
        "README.md's operator table is stale: run "
        "`python scripts/generate_operator_table.py --write`"
    )


# The operators the original runs on a kernel of its own (native, Triton,
# NineToothed) or of a linked library on some device: 63 of the 549 of its
# catalog. Every other operator of the catalog it has only through PyTorch.
ORIGINAL_OWN_KERNELS = """
add add_rms_norm awq_marlin_repack cast cat causal_softmax
causal_softmax_infinilm conv1d conv2d conv3d conv_infinilm convolution copy
cutlass_scaled_mm embedding fill flash_attn_varlen_func
flash_attn_with_kvcache fused_add_rms_norm gelu gelu_infinilm
gelutanh_infinilm gemm get_cutlass_moe_mm_data gptq_marlin_repack
grouped_topk kv_caching_infinilm linear matmul moe_align_block_size moe_sum
moe_wna16_gemm moe_wna16_marlin_gemm mul paged_attention_infinilm
paged_attention_prefill_infinilm paged_caching_infinilm
random_sample_infinilm rearrange_infinilm relu relu_infinilm
reshape_and_cache reshape_and_cache_flash rms_norm rotary_embedding
rotary_embedding_infinilm scaled_softmax scaled_softmax_infinilm sigmoid
sigmoid_infinilm silu silu_and_mul silu_and_mul_infinilm softmax
softmax_infinilm swiglu top_k_top_p_sample_infinilm top_k_top_p_sampler
top_k_top_p_sampling_from_logits topk_sigmoid topk_softmax
topksoftmax_infinilm zeros_infinilm
""".split()


@pytest.fixture(scope="module")
def default_build() -> dict:
    """The manifest of a default pip build here: the CPU with the ATen
    backend (`WITH_TORCH` is auto-detected)."""
    import tempfile

    from build_model import BuildConfiguration
    from generate_manifest import build_manifest, generate_aten_metadata

    configuration = BuildConfiguration(devices=("cpu",), with_torch=True)
    with tempfile.TemporaryDirectory() as directory:
        configuration.torch_metadata = generate_aten_metadata(
            REPO, configuration, Path(directory), log=lambda line: None
        )
        return build_manifest(REPO, configuration, warn=lambda line: None)


def cpu_slots(manifest: dict, name: str) -> list[int]:
    return sorted(
        entry["slot"]
        for entry in manifest["operators"][name]["implementations"]
        if "cpu" in entry["devices"]
    )


def readme_text() -> str:
    """README.md with its lines joined, so a claim may wrap."""
    return " ".join((REPO / "README.md").read_text(encoding="utf-8").split())


def claim(pattern: str) -> re.Match:
    found = re.search(pattern, readme_text())
    assert found, f"README.md no longer says {pattern!r}"
    return found


def test_readme_operator_count_is_the_default_builds(default_build):
    """ "all N operators of a default build" (README, "torch.compile"); the
    ATen part of the count depends on the torch release, as the table's."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    recorded = re.search(r"With torch (\d+\.\d+) ", readme)
    if recorded[1] != torch_minor_version(torch.__version__):
        pytest.skip(f"the README's counts were made with torch {recorded[1]}")
    count = int(claim(r"all (\d+) operators of a default build")[1])
    assert count == len(default_build["operators"])


def test_readme_cpu_slot_claims(default_build):
    """Every operator the original runs on its own or a linked kernel has
    CPU slot 0; the README lists exactly the others with a hand-written base
    and no slot 0, and each has only slot 8 on the CPU."""
    own = claim(r"\((\d+) of the (\d+) operators of its catalog\) has a CPU")
    assert int(own[1]) == len(set(ORIGINAL_OWN_KERNELS)) == 63
    without_slot_0 = [
        n for n in ORIGINAL_OWN_KERNELS if 0 not in cpu_slots(default_build, n)
    ]
    assert not without_slot_0, f"no CPU slot 0: {without_slot_0}"

    listed = claim(
        r"The table's other (\d+) operators without slot 0 on the CPU \(([^)]*)\)"
    )
    names = re.findall(r"`(\w+)`", listed[2])
    assert int(listed[1]) == len(names)
    bases = scan_bases(REPO)
    expected = sorted(n for n in bases if 0 not in cpu_slots(default_build, n))
    assert sorted(names) == expected
    for name in names:
        assert cpu_slots(default_build, name) == [8], name
        assert name not in ORIGINAL_OWN_KERNELS


def test_readme_aten_list_count():
    """ "`scripts/torch_ops.yaml` lists the ATen names to expose (N;"."""
    count = int(
        claim(r"`scripts/torch_ops.yaml` lists the ATen names to expose \((\d+);")[1]
    )
    entries = [
        line
        for line in (REPO / "scripts/torch_ops.yaml").read_text().splitlines()
        if line.startswith("- ")
    ]
    assert count == len(entries)
