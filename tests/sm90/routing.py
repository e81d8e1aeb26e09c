"""sm_90 examples of the mixture-of-experts routing kernels."""

from tests.sm90 import Example
from tests.sm90 import meta as m

EXAMPLES = {
    "topk_softmax": [
        Example(
            lambda: {
                "gating_output": m((6, 64), "bfloat16"),
                "bias": None,
                "is_padding": None,
                "renormalize": True,
                "topk_weights": m((6, 8), "float32"),
                "topk_indices": m((6, 8), "int32"),
                "token_expert_indices": m((6, 8), "int32"),
            }
        )
    ],
}
