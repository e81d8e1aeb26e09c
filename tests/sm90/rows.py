"""sm_90 examples of the row kernels (`native/cuda/rows.py`): norms,
softmaxes, rotary embeddings and embedding lookups."""

from tests.sm90 import MEMORY, Example
from tests.sm90 import meta as m

EXAMPLES = {
    "rms_norm": [
        Example(
            lambda: {
                "input": m((2, 3, 9000), "bfloat16", (0, 9000, 1)),
                "weight": m((9000,), "float32"),
                "eps": 1e-6,
                "out": m((2, 3, 9000), "bfloat16"),
            },
            label="looped rows",
        ),
        Example(
            lambda: {
                "input": m((64, 4096), "bfloat16"),
                "weight": m((4096,), "bfloat16"),
                "eps": 1e-6,
                "out": m((64, 4096), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "causal_softmax": [
        Example(
            lambda: {"input": m((2, 4, 64), "float16"), "out": m((2, 4, 64), "float16")}
        ),
        Example(
            lambda: {"input": m((4, 64, 1024)), "out": m((4, 64, 1024))},
            MEMORY,
            "contiguous",
        ),
    ],
    "add_rms_norm": [
        Example(
            lambda: {
                "input": m((3, 96), "bfloat16"),
                "residual": m((3, 96), "bfloat16"),
                "weight": m((96,), "bfloat16"),
                "eps": 1e-6,
                "out": m((3, 96), "bfloat16"),
                "residual_out": m((3, 96), "bfloat16"),
            }
        ),
        Example(
            lambda: {
                "input": m((64, 4096), "bfloat16"),
                "residual": m((64, 4096), "bfloat16"),
                "weight": m((4096,), "bfloat16"),
                "eps": 1e-6,
                "out": m((64, 4096), "bfloat16"),
                "residual_out": m((64, 4096), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "fused_add_rms_norm": [
        Example(
            lambda: {
                "input": m((3, 96), "float16"),
                "residual": m((3, 96), "float16"),
                "weight": m((96,), "float16"),
                "epsilon": 1e-6,
            }
        ),
        Example(
            lambda: {
                "input": m((64, 4096), "bfloat16"),
                "residual": m((64, 4096), "bfloat16"),
                "weight": m((4096,), "bfloat16"),
                "epsilon": 1e-6,
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "softmax": [
        Example(
            lambda: {
                "input": m((4, 100), "float16"),
                "dim": -1,
                "dtype": None,
                "out": m((4, 100), "float16"),
            }
        ),
        Example(
            lambda: {
                "input": m((64, 4096)),
                "dim": -1,
                "dtype": None,
                "out": m((64, 4096)),
            },
            MEMORY,
            "contiguous",
        ),
    ],
    "rotary_embedding": [
        Example(
            lambda: {
                "positions": m((5,), "int64"),
                "query": m((5, 4 * 64), "bfloat16"),
                "key": m((5, 2 * 64), "bfloat16"),
                "cos_sin_cache": m((32, 64), "float32"),
                "head_size": 64,
                "is_neox": True,
                "rope_dim_offset": 0,
                "inverse": False,
            }
        )
    ],
    "embedding": [
        Example(
            lambda: {
                "input": m((7,), "int64"),
                "weight": m((50, 64), "bfloat16"),
                "padding_idx": None,
                "max_norm": None,
                "norm_type": 2.0,
                "scale_grad_by_freq": False,
                "sparse": False,
                "out": m((7, 64), "bfloat16"),
            }
        )
    ],
    "softmax_infinilm": [
        Example(
            lambda: {
                "input": m((64, 4096), "bfloat16"),
                "dim": -1,
                "dtype": "float32",
                "out": m((64, 4096), "float32"),
            },
            MEMORY,
            "contiguous",
        ),
        Example(
            lambda: {
                "input": m((8, 16, 33), "float16"),
                "dim": 1,
                "dtype": None,
                "out": m((8, 16, 33), "float16"),
            },
            label="middle dim",
        ),
    ],
    "causal_softmax_infinilm": [
        Example(
            lambda: {
                "input": m((4, 64, 1024), "bfloat16"),
                "out": m((4, 64, 1024), "bfloat16"),
            },
            MEMORY,
            "contiguous",
        ),
        Example(
            lambda: {"input": m((2, 3, 9000)), "out": m((2, 3, 9000))},
            label="looped rows",
        ),
    ],
    "rotary_embedding_infinilm": [
        Example(
            lambda: {
                "input": m((16, 32, 128), "bfloat16"),
                "pos_ids": m((16,), "int64"),
                "sin_table": m((4096, 64), "float32"),
                "cos_table": m((4096, 64), "float32"),
                "is_neox": False,
                "out": m((16, 32, 128), "bfloat16"),
            },
            MEMORY,
            "half-split",
        ),
        Example(
            lambda: {
                "input": m((2, 8, 32, 128)),
                "pos_ids": m((2, 8), "int32"),
                "sin_table": m((4096, 64)),
                "cos_table": m((4096, 64)),
                "is_neox": True,
                "out": m((2, 8, 32, 128)),
            },
            MEMORY,
            "interleaved",
        ),
        Example(
            lambda: {
                "input": m((7, 3, 80), "float16", (400, 128, 2)),
                "pos_ids": m((7,), "int64"),
                "sin_table": m((64, 40), "float16"),
                "cos_table": m((64, 40), "float16"),
                "is_neox": True,
                "out": m((7, 3, 80), "float16"),
            },
            label="strided, head 80",
        ),
    ],
}
