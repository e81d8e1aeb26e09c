import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, KV_HEADS, Case

# Decode and short queries attend a 512-token context; prefill is causal
# self-attention over its own tokens.
CONTEXT = 512


def cases(tokens, dtype):
    keys = max(tokens, CONTEXT)
    causal = tokens == keys
    query = torch.randn(1, HEADS, tokens, HEAD_SIZE, dtype=dtype)
    key = torch.randn(1, KV_HEADS, keys, HEAD_SIZE, dtype=dtype)
    value = torch.randn(1, KV_HEADS, keys, HEAD_SIZE, dtype=dtype)
    out = torch.empty_like(query)
    yield Case(
        f"q {tokens}, kv {keys}{', causal' if causal else ''}",
        lambda: infini.ops.scaled_dot_product_attention(
            query, key, value, None, 0.0, causal, None, True, out
        ),
        lambda: F.scaled_dot_product_attention(
            query, key, value, is_causal=causal, enable_gqa=True
        ),
        None,
        query.numel(),
    )
