"""sm_90 examples of the token sampling kernels."""

from tests.sm90 import MEMORY, OTHER, Example
from tests.sm90 import meta as m


def _sampling(rows, vocab, dtype="float32", per_row=False, indices=False):
    """`top_k_top_p_sampling_from_logits` on `rows` rows of `vocab` logits;
    each operator holds its greedy and its sampled launch."""
    values = rows if per_row else 1
    return lambda: {
        "logits": m((rows, vocab), dtype),
        "top_k": m((values,), "int32"),
        "top_p": m((values,), "float32"),
        "indices": m((rows,), "int32") if indices else None,
        "filter_apply_order": "top_k_first",
        "deterministic": True,
        "check_nan": False,
        "seed": 0,
        "offset": 0,
        "out": m((rows,), "int32"),
    }


EXAMPLES = {
    "random_sample_infinilm": [
        Example(
            lambda: {
                "logits": m((32000,), "float16"),
                "random_val": 0.5,
                "topp": 0.9,
                "topk": 50,
                "temperature": 0.8,
                "out": m((), "int64"),
            },
            OTHER,
            "vocab-32000-float16",
        ),
    ],
    "top_k_top_p_sampling_from_logits": [
        # The model runner's greedy decoding: float32 logits of a 49,152-token
        # vocabulary, streamed with 128-bit loads.
        Example(_sampling(8, 49152), MEMORY, "vocab-49152-float32"),
        Example(
            _sampling(64, 151936, "bfloat16", per_row=True),
            OTHER,
            "vocab-151936-bfloat16",
        ),
        Example(_sampling(512, 8, "float16", indices=True), OTHER, "vocab-8-indices"),
    ],
}
