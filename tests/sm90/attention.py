"""sm_90 examples of the attention kernels over the paged cache."""

from tests.sm90 import OTHER, PRODUCT, Example
from tests.sm90 import meta as m


def _prefill(dtype, head_size, heads=32, kv_heads=8, tokens=512, seqs=4, **extra):
    """A prefill call shaped like the Llama runner's: `q` and `out` are
    (tokens, heads, head_size) views of wider rows (the fused qkv buffer
    and the attention output), tables and lengths int32, block size 16."""
    width = (heads + 2 * kv_heads) * head_size

    def arguments():
        return {
            "q": m((tokens, heads, head_size), dtype, (width, head_size, 1)),
            "k_cache": m((256, kv_heads, 16, head_size), dtype),
            "v_cache": m((256, kv_heads, 16, head_size), dtype),
            "block_tables": m((seqs, 64), "int32"),
            "seq_lens": m((seqs,), "int32"),
            "cum_seq_lens_q": m((seqs + 1,), "int32"),
            "alibi_slopes": extra.get("alibi_slopes"),
            "scale": head_size**-0.5,
            "out": m((tokens, heads, head_size), dtype),
            "window": extra.get("window", 0),
        }

    return arguments


def _decode(dtype, head_size, heads, kv_heads, window):
    def arguments():
        return {
            "q": m((2, heads, head_size), dtype),
            "k_cache": m((6, kv_heads, 16, head_size), dtype),
            "v_cache": m((6, kv_heads, 16, head_size), dtype),
            "block_tables": m((2, 3), "int32"),
            "seq_lens": m((2,), "int32"),
            "alibi_slopes": None,
            "scale": head_size**-0.5,
            "out": m((2, heads, head_size), dtype),
            "window": window,
        }

    return arguments


EXAMPLES = {
    "paged_attention_infinilm": [
        Example(_decode("float16", 64, 4, 2, 0)),
        # Gemma-3 270M's local layers: a sliding window of 512.
        Example(_decode("bfloat16", 256, 4, 1, 512), label="Gemma-3, window 512"),
    ],
    "paged_attention_prefill_infinilm": [
        Example(_prefill("bfloat16", 128), PRODUCT, "bfloat16, head 128, GQA 4"),
        Example(_prefill("float16", 128), PRODUCT, "float16, head 128, GQA 4"),
        Example(
            _prefill("float16", 64, heads=16, kv_heads=16),
            PRODUCT,
            "float16, head 64, MHA",
        ),
        Example(
            _prefill(
                "bfloat16",
                64,
                heads=8,
                kv_heads=8,
                alibi_slopes=m((8,), "float32"),
            ),
            PRODUCT,
            "bfloat16, head 64, ALiBi",
        ),
        Example(_prefill("float32", 128), OTHER, "float32, head 128"),
        Example(
            _prefill("float16", 256, heads=8, kv_heads=8),
            PRODUCT,
            "float16, head 256",
        ),
        Example(
            _prefill("bfloat16", 80, heads=12, kv_heads=4, tokens=3, seqs=3),
            PRODUCT,
            "bfloat16, head 80, 3 tokens",
        ),
        Example(
            _prefill("bfloat16", 256, heads=4, kv_heads=1, window=512),
            PRODUCT,
            "Gemma-3: bfloat16, head 256, GQA 4, window 512",
        ),
    ],
}
