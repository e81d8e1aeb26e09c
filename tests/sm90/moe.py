"""sm_90 examples of the quantised mixture-of-experts product."""

from tests.sm90 import PRODUCT, Example
from tests.sm90 import meta as m


def _wna16(tokens, dtype, bit, block_m, zeros=True, group=128):
    """A Mixtral-sized expert layer (8 experts, k = 4096, n = 2 x 1792) on
    `tokens` tokens routed to two experts each."""
    experts, k, n, top_k = 8, 4096, 3584, 2
    places = tokens * top_k + experts * (block_m - 1)
    return lambda: {
        "input": m((tokens, k), dtype),
        "b_qweight": m((experts, n, k * bit // 8), "uint8"),
        "b_scales": m((experts, n, k // group), dtype),
        "b_qzeros": m((experts, n * bit // 8, k // group), "uint8") if zeros else None,
        "topk_weights": m((tokens, top_k), "float32"),
        "sorted_token_ids": m((places,), "int32"),
        "expert_ids": m((places // block_m,), "int32"),
        "num_tokens_post_pad": m((1,), "int32"),
        "top_k": top_k,
        "block_size_m": block_m,
        "block_size_n": 64,
        "block_size_k": 128,
        "bit": bit,
        "output": m((tokens, top_k, n), dtype),
    }


EXAMPLES = {
    "moe_wna16_gemm": [
        Example(_wna16(4, "float16", 4, 16), PRODUCT, "decode-int4-float16"),
        Example(_wna16(4, "bfloat16", 4, 16), PRODUCT, "decode-int4-bfloat16"),
        Example(_wna16(512, "float16", 8, 64, False), PRODUCT, "prefill-int8-float16"),
        Example(_wna16(512, "bfloat16", 4, 64), PRODUCT, "prefill-int4-bfloat16"),
    ],
}
