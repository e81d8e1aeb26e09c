"""sm_90 examples of the mixture-of-experts routing kernels
(`native/cuda/routing.py` and the operators built on it)."""

from tests.sm90 import MEMORY, Example
from tests.sm90 import meta as m


def _gating(dtype, tokens, experts, topk, bias_name, with_bias, ids_name, **extra):
    def arguments():
        return {
            "gating_output": m((tokens, experts), dtype),
            bias_name: m((experts,), "float32") if with_bias else None,
            "is_padding": None,
            "renormalize": True,
            **extra,
            "topk_weights": m((tokens, topk), "float32"),
            ids_name: m((tokens, topk), "int32"),
            "token_expert_indices": m((tokens, topk), "int32"),
        }

    return arguments


def _moe_align(tokens, topk, experts, block_size):
    numel = tokens * topk
    length = numel + experts * (block_size - 1)
    return lambda: {
        "topk_ids": m((tokens, topk), "int32"),
        "expert_map": None,
        "num_experts": experts,
        "block_size": block_size,
        "sorted_token_ids": m((length,), "int32"),
        "experts_ids": m((-(-length // block_size),), "int32"),
        "num_tokens_post_pad": m((1,), "int32"),
    }


def _moe_mm_data(tokens, topk, experts, blockscale):
    return lambda: {
        "topk_ids": m((tokens, topk), "int32"),
        "num_experts": experts,
        "n": 2048,
        "k": 7168,
        "is_gated": True,
        "expert_offsets": m((experts + 1,), "int32"),
        "problem_sizes1": m((experts, 3), "int32"),
        "problem_sizes2": m((experts, 3), "int32"),
        "input_permutation": m((tokens * topk,), "int32"),
        "output_permutation": m((tokens * topk,), "int32"),
        "blockscale_offsets": m((experts + 1,), "int32") if blockscale else None,
    }


def _moe_sum(dtype, tokens, topk, hidden, masked):
    return lambda: {
        "input": m((tokens, topk, hidden), dtype),
        "topk_ids": m((tokens, topk), "int32") if masked else None,
        "expert_map": m((256,), "int32") if masked else None,
        "output": m((tokens, hidden), dtype),
    }


EXAMPLES = {
    "topk_softmax": [
        Example(
            _gating("bfloat16", 6, 64, 8, "bias", False, "topk_indices"),
            label="64 experts",
        ),
        Example(
            _gating("float32", 256, 256, 8, "bias", True, "topk_indices"),
            label="256 experts, bias",
        ),
    ],
    "topk_sigmoid": [
        Example(
            _gating(
                "bfloat16",
                256,
                256,
                8,
                "e_score_correction_bias",
                True,
                "topk_ids",
                routed_scaling_factor=2.5,
            ),
            label="256 experts, bias",
        ),
    ],
    "topksoftmax_infinilm": [
        Example(
            lambda: {
                "input": m((64, 64), "bfloat16"),
                "topk": 8,
                "norm": True,
                "values": m((64, 8), "float32"),
                "indices": m((64, 8), "int32"),
            },
            label="64 experts",
        ),
    ],
    "grouped_topk": [
        Example(
            lambda: {
                "scores": m((64, 256), "bfloat16"),
                "bias": m((256,), "float32"),
                "num_expert_group": 8,
                "topk_group": 4,
                "topk": 8,
                "renormalize": True,
                "routed_scaling_factor": 2.5,
                "scoring_func": 1,
                "topk_values": m((64, 8), "float32"),
                "topk_indices": m((64, 8), "int32"),
            },
            label="DeepSeek-V3",
        ),
    ],
    "moe_sum": [
        Example(_moe_sum("bfloat16", 64, 8, 4096, False), MEMORY, "bfloat16"),
        Example(_moe_sum("float32", 64, 2, 1024, False), MEMORY, "float32"),
        Example(_moe_sum("bfloat16", 64, 8, 4096, True), MEMORY, "expert map"),
    ],
    "moe_align_block_size": [
        Example(_moe_align(16, 8, 8, 16), label="decode"),
        Example(_moe_align(4096, 8, 256, 64), label="prefill (scanned)"),
    ],
    "get_cutlass_moe_mm_data": [
        Example(_moe_mm_data(4, 2, 8, False), label="decode (swapped)"),
        Example(_moe_mm_data(4096, 8, 256, True), label="prefill (scanned)"),
    ],
}
