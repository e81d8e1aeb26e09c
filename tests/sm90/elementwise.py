"""sm_90 examples of the elementwise kernels (`native/cuda/elementwise.py`
and the operators built on its templates)."""

from tests.sm90 import MEMORY, Example
from tests.sm90 import meta as m


def _unary(dtype, shape=(8, 3), strides=None):
    return lambda: {"input": m(shape, dtype, strides), "out": m(shape, dtype)}


def _flat(dtype):
    """A contiguous, aligned unary call: the fast path with vector loads."""
    return Example(_unary(dtype, (64, 1024)), MEMORY, "contiguous")


EXAMPLES = {
    "add": [
        Example(
            lambda: {
                "input": m((4, 5), "bfloat16"),
                "other": m((5,), "bfloat16"),
                "alpha": 2.0,
                "out": m((4, 5), "bfloat16", (1, 4)),
            },
            label="broadcast, transposed out",
        ),
        Example(
            lambda: {
                "input": m((64, 1024)),
                "other": m((64, 1024)),
                "alpha": 1.0,
                "out": m((64, 1024)),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "mul": [
        Example(
            lambda: {
                "input": m((64,), "int32"),
                "other": m((64,), "int32"),
                "out": m((64,), "int32"),
            },
            label="int32",
        ),
        Example(
            lambda: {
                "input": m((64, 1024), "bfloat16"),
                "other": m((64, 1024), "bfloat16"),
                "out": m((64, 1024), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "relu": [Example(_unary("bfloat16")), _flat("float16")],
    "cast": [
        Example(lambda: {"input": m((8,), "float64"), "out": m((8,), "bfloat16")}),
        Example(
            lambda: {"input": m((64, 1024)), "out": m((64, 1024), "bfloat16")},
            MEMORY,
            "contiguous",
        ),
    ],
    "swiglu": [
        Example(
            lambda: {
                "input": m((4, 64), "float16"),
                "gate": m((4, 64), "float16"),
                "out": m((4, 64), "float16"),
            },
            MEMORY,
        )
    ],
    "silu_and_mul": [
        Example(
            lambda: {"input": m((4, 128), "bfloat16"), "out": m((4, 64), "bfloat16")}
        ),
        Example(
            lambda: {
                "input": m((64, 2048), "bfloat16"),
                "out": m((64, 1024), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "gelu_tanh_and_mul": [
        Example(
            lambda: {"input": m((4, 128), "float16"), "out": m((4, 64), "float16")}
        ),
        Example(
            lambda: {
                "input": m((64, 2048), "bfloat16"),
                "out": m((64, 1024), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "sigmoid": [Example(_unary("float16")), _flat("float32")],
    "silu": [Example(_unary("bfloat16", strides=(1, 8))), _flat("bfloat16")],
    "gelu": [
        Example(
            lambda: {
                "input": m((8, 33)),
                "approximate": "none",
                "out": m((8, 33)),
            }
        ),
        Example(
            lambda: {
                "input": m((64, 1024), "bfloat16"),
                "approximate": "tanh",
                "out": m((64, 1024), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "copy": [
        Example(
            lambda: {
                "src": m((16, 8), "float16", (1, 16)),
                "non_blocking": False,
                "out": m((16, 8), "float16"),
            }
        ),
        Example(
            lambda: {
                "src": m((64, 1024), "float16"),
                "non_blocking": False,
                "out": m((64, 1024), "float16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "fill": [
        Example(
            lambda: {
                "input": m((5, 7), "bfloat16"),
                "value": 1.5,
                "out": m((5, 7), "bfloat16"),
            }
        ),
        # No loads to check: the flat path stores 128 bits at a time.
        Example(
            lambda: {
                "input": m((64, 1024)),
                "value": 0.5,
                "out": m((64, 1024)),
            },
            label="contiguous",
        ),
    ],
    "gelu_infinilm": [
        Example(
            lambda: {
                "input": m((64, 1024), "bfloat16"),
                "approximate": "none",
                "out": m((64, 1024), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        )
    ],
    "gelutanh_infinilm": [Example(_unary("float16", strides=(1, 8))), _flat("float32")],
    "relu_infinilm": [_flat("bfloat16")],
    "sigmoid_infinilm": [_flat("bfloat16")],
    "silu_and_mul_infinilm": [
        Example(
            lambda: {
                "input": m((64, 2048), "float16"),
                "out": m((64, 1024), "float16"),
            },
            MEMORY,
            "contiguous",
        )
    ],
    "rearrange_infinilm": [
        Example(
            lambda: {
                "input": m((64, 1024), "bfloat16"),
                "out": m((64, 1024), "bfloat16", (1, 64)),
            },
            label="transposed out",
        ),
        Example(
            lambda: {"input": m((64, 1024)), "out": m((64, 1024))},
            MEMORY,
            "contiguous",
        ),
    ],
    # A fill reads nothing but its scalar: only stores to check.
    "zeros_infinilm": [
        Example(
            lambda: {"input": m((64, 1024)), "out": m((64, 1024))},
            label="contiguous",
        ),
        Example(
            lambda: {"input": m((5, 7), "bool"), "out": m((5, 7), "bool", (1, 5))},
            label="bool, transposed",
        ),
    ],
}
