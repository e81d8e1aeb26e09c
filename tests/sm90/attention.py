"""sm_90 examples of the attention kernels over the paged cache."""

from tests.sm90 import Example
from tests.sm90 import meta as m

EXAMPLES = {
    "paged_attention_infinilm": [
        Example(
            lambda: {
                "q": m((2, 4, 64), "float16"),
                "k_cache": m((6, 2, 16, 64), "float16"),
                "v_cache": m((6, 2, 16, 64), "float16"),
                "block_tables": m((2, 3), "int32"),
                "seq_lens": m((2,), "int32"),
                "alibi_slopes": None,
                "scale": 0.125,
                "out": m((2, 4, 64), "float16"),
            }
        )
    ],
}
