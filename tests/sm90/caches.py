"""sm_90 examples of the KV-cache writes."""

from tests.sm90 import MEMORY, Example
from tests.sm90 import meta as m


def _paged_caching(dtype, k_strides=None, head_size=128, tokens=256):
    """`paged_caching_infinilm` of `tokens` tokens into 16-token blocks; with
    `k_strides` the sources are views of the Llama runner's fused qkv rows."""

    def arguments():
        shape = (tokens, 8, head_size)
        return {
            "k": m(shape, dtype, k_strides),
            "v": m(shape, dtype, k_strides),
            "slot_mapping": m((tokens,), "int32"),
            "k_cache": m((64, 8, 16, head_size), dtype),
            "v_cache": m((64, 8, 16, head_size), dtype),
        }

    return arguments


def _reshape_and_cache(dtype, mode, x):
    cache_dtype = dtype if mode == "auto" else "uint8"

    def arguments():
        return {
            "key": m((256, 8, 128), dtype),
            "value": m((256, 8, 128), dtype),
            "key_cache": m((64, 8, 128 // x, 16, x), cache_dtype),
            "value_cache": m((64, 8, 128, 16), cache_dtype),
            "slot_mapping": m((256,), "int64"),
            "k_scale": m((1,), "float32"),
            "v_scale": m((1,), "float32"),
            "kv_cache_dtype": mode,
        }

    return arguments


EXAMPLES = {
    "reshape_and_cache_flash": [
        Example(
            lambda: {
                "key": m((5, 2, 64), "float16"),
                "value": m((5, 2, 64), "float16"),
                "slot_mapping": m((5,), "int64"),
                "k_scale": m((1,), "float32"),
                "v_scale": m((1,), "float32"),
                "kv_cache_dtype": "auto",
                "key_cache": m((3, 16, 2, 64), "float16"),
                "value_cache": m((3, 16, 2, 64), "float16"),
            }
        )
    ],
    "paged_caching_infinilm": [
        Example(_paged_caching("bfloat16"), MEMORY, "contiguous"),
        Example(
            _paged_caching("float16", (6144, 128, 1)),
            MEMORY,
            "views of fused qkv rows",
        ),
        Example(_paged_caching("float32", head_size=40, tokens=3), label="head 40"),
    ],
    "kv_caching_infinilm": [
        Example(
            lambda: {
                "k": m((2, 8, 64, 128), "float16"),
                "v": m((2, 8, 64, 128), "float16"),
                "past_kv_lengths": m((2,), "int64"),
                "k_cache": m((2, 8, 512, 128), "float16"),
                "v_cache": m((2, 8, 512, 128), "float16"),
            },
            MEMORY,
            "contiguous",
        ),
        Example(
            lambda: {
                "k": m((2, 3, 4, 24), "bfloat16", (192, 24, 48, 1)),
                "v": m((2, 3, 4, 40), "bfloat16"),
                "past_kv_lengths": m((2,), "int32"),
                "k_cache": m((2, 3, 9, 24), "bfloat16"),
                "v_cache": m((2, 3, 9, 40), "bfloat16"),
            },
            label="odd heads, transposed k",
        ),
    ],
    "reshape_and_cache": [
        Example(_reshape_and_cache("float16", "auto", 8), MEMORY, "auto"),
        Example(_reshape_and_cache("bfloat16", "fp8_e4m3", 16), MEMORY, "fp8_e4m3"),
        Example(_reshape_and_cache("float32", "fp8_e5m2", 16), label="fp8_e5m2"),
    ],
}
