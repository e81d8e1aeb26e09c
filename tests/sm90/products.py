"""sm_90 examples of the product kernels (`native/cuda/products.py`) and of
`cutlass_scaled_mm`: large 16-bit (int8) products on the tensor cores,
decode-sized ones on the memory-bound rows kernel, and float32 / float64
tiles (IEEE multiply-adds) that must not spill."""

from tests.sm90 import MEMORY, OTHER, PRODUCT, Example
from tests.sm90 import meta as m


def _gemm(dtype, m_, n, k, label, kind=PRODUCT, trans_b=0):
    b_shape = (n, k) if trans_b else (k, n)
    return Example(
        lambda: {
            "a": m((m_, k), dtype),
            "b": m(b_shape, dtype),
            "c": None,
            "alpha": 1.0,
            "beta": 0.0,
            "trans_a": 0,
            "trans_b": trans_b,
            "y": m((m_, n), dtype),
        },
        kind,
        label,
    )


def _linear(dtype, tokens, out_features, in_features, label, kind=PRODUCT, bias=False):
    return Example(
        lambda: {
            "input": m((tokens, in_features), dtype),
            "weight": m((out_features, in_features), dtype),
            "bias": m((out_features,), dtype) if bias else None,
            "out": m((tokens, out_features), dtype),
        },
        kind,
        label,
    )


def _matmul(dtype, input_shape, other_shape, out_shape, label, kind=PRODUCT):
    return Example(
        lambda: {
            "input": m(input_shape, dtype),
            "other": m(other_shape, dtype),
            "out": m(out_shape, dtype),
        },
        kind,
        label,
    )


def _scaled_mm(m_, n, k, label, out_dtype="bfloat16", bias=True):
    return Example(
        lambda: {
            "a": m((m_, k), "int8"),
            # vLLM's layout: the transpose of an (n, k) weight.
            "b": m((k, n), "int8", (1, k)),
            "scale_a": m((m_, 1), "float32"),
            "scale_b": m((1, n), "float32"),
            "bias": m((n,), out_dtype) if bias else None,
            "out_dtype": out_dtype,
            "out": m((m_, n), out_dtype),
        },
        PRODUCT,
        label,
    )


EXAMPLES = {
    "gemm": [
        _gemm("bfloat16", 4096, 4096, 4096, "bfloat16 4096^3"),
        _gemm("float16", 4096, 4096, 4096, "float16 4096^3, b transposed", trans_b=1),
        _gemm("bfloat16", 256, 320, 2048, "bfloat16 medium"),
        _gemm("float16", 12, 4096, 4096, "float16 12 rows"),
        _gemm("bfloat16", 1, 4096, 4096, "bfloat16 decode", MEMORY, trans_b=1),
        _gemm("float32", 1024, 1024, 1024, "float32 tiles", kind=OTHER),
        _gemm("float64", 512, 512, 512, "float64 tiles", kind=OTHER),
    ],
    "linear": [
        _linear("bfloat16", 4096, 4096, 4096, "bfloat16 prefill"),
        _linear("float16", 512, 11008, 4096, "float16 prefill, bias", bias=True),
        _linear("bfloat16", 8, 4096, 4096, "bfloat16 8 rows"),
        _linear("bfloat16", 1, 4096, 4096, "bfloat16 decode", MEMORY),
        _linear("float32", 4, 4096, 4096, "float32 decode 4 rows", MEMORY),
        _linear("float32", 1, 576, 576, "float32 decode, narrow", MEMORY),
        _linear("float32", 512, 1536, 576, "float32 prefill", kind=OTHER),
        _linear("float16", 2, 4096, 4096, "float16 decode, bias", MEMORY, bias=True),
    ],
    "matmul": [
        _matmul(
            "bfloat16",
            (8, 512, 1024),
            (8, 1024, 512),
            (8, 512, 512),
            "bfloat16 batched",
        ),
        _matmul("float16", (4096, 4096), (4096, 4096), (4096, 4096), "float16 4096^3"),
        _matmul(
            "float16", (4096,), (4096, 4096), (4096,), "float16 vector-matrix", MEMORY
        ),
        _matmul(
            "float32", (4096, 4096), (4096,), (4096,), "float32 matrix-vector", MEMORY
        ),
        _matmul(
            "float64",
            (2, 3, 40, 40),
            (3, 40, 40),
            (2, 3, 40, 40),
            "float64 batch table",
            OTHER,
        ),
    ],
    "cutlass_scaled_mm": [
        _scaled_mm(4096, 4096, 4096, "int8 4096^3, bfloat16"),
        _scaled_mm(256, 1024, 2048, "int8 medium, float16", "float16", bias=False),
        _scaled_mm(8, 4096, 4096, "int8 decode, float32", "float32"),
    ],
}
