"""sm_90 examples of the GGML (GGUF) block-quantised kernels
(`native/cuda/ggml.py`): every block layout family for dequantisation and
the decode product, and the prefill product (tensor cores)."""

from infini.ops.base._ggml import GGML_TYPES, row_bytes
from tests.sm90 import MEMORY, OTHER, PRODUCT, Example
from tests.sm90 import meta as m

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 2, 3, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 10, 11, 12, 13, 14


def _weight(quant_type, rows, cols):
    return m((rows, row_bytes(quant_type, cols)), "uint8")


def _dequantize(quant_type, dtype="float32", rows=64, cols=1024, kind=OTHER):
    return Example(
        lambda: {
            "weight": _weight(quant_type, rows, cols),
            "quant_type": quant_type,
            "m": rows,
            "n": cols,
            "out": m((rows, cols), dtype),
        },
        kind,
        f"{GGML_TYPES[quant_type].name} to {dtype}",
    )


def _product(quant_type, tokens, rows, cols, dtype="float32", kind=OTHER, label=""):
    return Example(
        lambda: {
            "weight": _weight(quant_type, rows, cols),
            "x": m((tokens, cols), dtype),
            "quant_type": quant_type,
            "row": rows,
            "out": m((tokens, rows), dtype),
        },
        kind,
        label or f"{GGML_TYPES[quant_type].name}, {tokens} tokens, {dtype}",
    )


EXAMPLES = {
    "ggml_dequantize": [
        _dequantize(Q4_0, "float16"),
        _dequantize(Q4_1),
        _dequantize(Q5_0, "bfloat16"),
        _dequantize(Q5_1),
        _dequantize(Q8_0),
        _dequantize(Q2_K),
        _dequantize(Q3_K, "bfloat16"),
        # Q4_K's code bytes are 16-byte aligned in every block.
        _dequantize(Q4_K, kind=MEMORY),
        _dequantize(Q5_K, "float16", kind=MEMORY),
        _dequantize(Q6_K),
    ],
    "ggml_mul_mat_vec_a8": [
        # SmolLM2-135M's ffn_down (576 x 1536, Q4_1): 20-byte blocks put the
        # code bytes on 4-byte boundaries, so the weight loads are 32-bit
        # (the 128-bit loads in the report are the activation codes').
        _product(Q4_1, 1, 576, 1536, label="SmolLM2 ffn_down Q4_1, 1 token"),
        _product(Q4_0, 8, 576, 1536, "bfloat16"),
        _product(Q5_1, 3, 576, 1536, "float16"),
        _product(Q8_0, 1, 576, 1536),
        _product(Q2_K, 2, 512, 1536),
        _product(Q3_K, 1, 512, 1536, "bfloat16"),
        # Q4_K/Q5_K code bytes are 16-byte aligned: 128-bit weight loads.
        _product(Q4_K, 1, 576, 1536, kind=MEMORY),
        _product(Q5_K, 4, 576, 1536, "float16", kind=MEMORY),
        _product(Q6_K, 1, 576, 1536),
        # More tokens than decoding: the tensor-core kernel's narrow tiles.
        _product(Q4_K, 12, 576, 1536, kind=PRODUCT),
    ],
    "ggml_mul_mat_a8": [
        _product(Q4_0, 128, 576, 1536, kind=PRODUCT),
        _product(Q4_1, 512, 1536, 576, "bfloat16", kind=PRODUCT),
        _product(Q5_0, 64, 576, 1536, "float16", kind=PRODUCT),
        _product(Q8_0, 128, 576, 1536, kind=PRODUCT),
        _product(Q2_K, 128, 512, 1536, kind=PRODUCT),
        _product(Q3_K, 128, 512, 1536, "bfloat16", kind=PRODUCT),
        _product(Q4_K, 128, 576, 1536, kind=PRODUCT),
        _product(Q5_K, 33, 576, 1536, kind=PRODUCT),
        _product(Q6_K, 128, 576, 1536, "float16", kind=PRODUCT),
    ],
}
