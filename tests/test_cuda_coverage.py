"""The CUDA-like platforms have, at slot 0, every operator the original runs
natively there, and every operator the model runner calls.

The lists are the original's (its catalog of native slots per platform);
the check reads the manifest the build generator writes for a build of each
platform, so it holds whether or not this machine has that device."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The 41 operators of the original's shared CUDA templates, native on
# NVIDIA, Iluvatar, MetaX and Moore alike.
CUDA_TEMPLATE_OPERATORS = (
    "add",
    "add_rms_norm",
    "causal_softmax",
    "causal_softmax_infinilm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_infinilm",
    "convolution",
    "copy",
    "embedding",
    "fill",
    "fused_add_rms_norm",
    "gelu",
    "gelu_infinilm",
    "gelutanh_infinilm",
    "gemm",
    "kv_caching_infinilm",
    "mul",
    "paged_attention_infinilm",
    "paged_attention_prefill_infinilm",
    "paged_caching_infinilm",
    "random_sample_infinilm",
    "rearrange_infinilm",
    "relu",
    "relu_infinilm",
    "reshape_and_cache_flash",
    "rms_norm",
    "rotary_embedding",
    "rotary_embedding_infinilm",
    "sigmoid",
    "sigmoid_infinilm",
    "silu",
    "silu_and_mul",
    "silu_and_mul_infinilm",
    "softmax",
    "softmax_infinilm",
    "swiglu",
    "topk_softmax",
    "topksoftmax_infinilm",
    "zeros_infinilm",
)
# The 8 the original has natively on NVIDIA only (their own CUDA kernels).
NVIDIA_ONLY_OPERATORS = (
    "cutlass_scaled_mm",
    "get_cutlass_moe_mm_data",
    "grouped_topk",
    "moe_align_block_size",
    "moe_sum",
    "moe_wna16_gemm",
    "reshape_and_cache",
    "topk_sigmoid",
)
# The products a model on a GPU calls besides what the runner itself names
# (`infini.ops.models.OPERATORS`, added below).
PRODUCT_OPERATORS = ("linear", "matmul")


# What the runner calls on the CPU only: on a GPU its weights keep the
# file's layout (`docs/behaviour.md`, "Interleaved GGML weights").
CPU_ONLY_MODEL_OPERATORS = ("ggml_interleave", "ggml_mul_mat_interleaved_a8")


def _model_operators():
    from infini.ops.models import OPERATORS

    runner = tuple(name for name in OPERATORS if name not in CPU_ONLY_MODEL_OPERATORS)
    return runner + PRODUCT_OPERATORS


MODEL_OPERATORS = _model_operators()

EXPECTED = {
    "nvidia": CUDA_TEMPLATE_OPERATORS + NVIDIA_ONLY_OPERATORS + MODEL_OPERATORS,
    "iluvatar": CUDA_TEMPLATE_OPERATORS + MODEL_OPERATORS,
    "metax": CUDA_TEMPLATE_OPERATORS + MODEL_OPERATORS,
    "moore": CUDA_TEMPLATE_OPERATORS + MODEL_OPERATORS,
}


def test_the_lists_have_the_originals_counts():
    assert len(set(CUDA_TEMPLATE_OPERATORS)) == 41
    assert len(set(CUDA_TEMPLATE_OPERATORS + NVIDIA_ONLY_OPERATORS)) == 49


def _manifest(platform, tmp_path_factory):
    output = tmp_path_factory.mktemp(platform) / "manifest.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "generate_manifest.py"),
            "--source-dir",
            str(REPO),
            "--output",
            str(output),
            "--devices",
            f"cpu;{platform}",
            "--with-triton",
        ],
        check=True,
        capture_output=True,
    )
    return json.loads(output.read_text())


@pytest.mark.parametrize("platform", sorted(EXPECTED))
def test_cuda_like_slot_0_covers_the_original_and_the_model(platform, tmp_path_factory):
    operators = _manifest(platform, tmp_path_factory)["operators"]
    missing = []
    for name in sorted(set(EXPECTED[platform])):
        implementations = operators.get(name, {}).get("implementations", [])
        if not any(
            entry["slot"] == 0 and platform in entry["devices"]
            for entry in implementations
        ):
            missing.append(name)
    assert not missing, f"no slot 0 on {platform} for: {', '.join(missing)}"


def test_an_installed_cuda_like_build_reports_slot_0():
    """The installed build, when it has a CUDA-like device, reports what the
    manifest promises through `active_implementation_indices`."""
    import infini.ops
    from infini.ops.core.manifest import load_manifest
    from infini.ops.core.schema import class_name_of

    platforms = [p for p in EXPECTED if p in load_manifest()["devices"]]
    if not platforms:
        pytest.skip("the installed build has no CUDA-like device")
    for platform in platforms:
        for name in sorted(set(EXPECTED[platform])):
            cls = getattr(infini.ops, class_name_of(name), None)
            assert cls is not None, f"`{name}` is not in the build"
            assert 0 in cls.active_implementation_indices(platform), name
