"""The operators the original has only on GPUs run on the CPU here (native
slot 0), as do the quantised-weight operators of this edition."""

import pytest

import infini.ops
from infini.ops.core.schema import class_name_of

# The catalog's operators without any function in the original's CPU build.
GPU_ONLY_IN_THE_ORIGINAL = (
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "conv_infinilm",
    "cutlass_scaled_mm",
    "get_cutlass_moe_mm_data",
    "moe_wna16_gemm",
    "moe_wna16_marlin_gemm",
    "gptq_marlin_repack",
    "awq_marlin_repack",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attention",
)
QUANTISED = (
    "ggml_dequantize",
    "ggml_mul_mat_vec_a8",
    "ggml_mul_mat_a8",
    "dequantize_nf4",
    "dequantize_blockwise_8bit",
)


@pytest.mark.parametrize("name", GPU_ONLY_IN_THE_ORIGINAL + QUANTISED)
def test_cpu_slot_0(name):
    if not hasattr(infini.ops, name):
        pytest.skip(f"`{name}` is not selected in this build")
    assert callable(getattr(infini.ops, name))
    cls = getattr(infini.ops, class_name_of(name))
    assert 0 in cls.active_implementation_indices("cpu")
