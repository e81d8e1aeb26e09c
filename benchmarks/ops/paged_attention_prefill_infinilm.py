import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, Case
from benchmarks.ops.paged_attention_infinilm import gather, paged_inputs

CONTEXT = 512


def cases(tokens, dtype):
    # One sequence: `tokens` new tokens at the end of a context of at least
    # 512 (chunked prefill for 16 tokens).
    if tokens < 16:
        return
    context = max(tokens, CONTEXT)
    k_cache, v_cache, tables, lengths = paged_inputs(1, context, dtype)
    cum = torch.tensor([0, tokens], dtype=torch.int32)
    q = torch.randn(tokens, HEADS, HEAD_SIZE, dtype=dtype)
    out = torch.empty_like(q)
    scale = HEAD_SIZE**-0.5
    # Bottom-right causal mask, built once (not timed).
    mask = torch.ones(tokens, context, dtype=torch.bool).tril(context - tokens)

    def eager():
        keys, values = gather(k_cache, tables), gather(v_cache, tables)
        return F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys, values, attn_mask=mask, scale=scale,
            enable_gqa=True,
        )  # fmt: skip

    yield Case(
        f"q {tokens}, kv {context}, causal",
        lambda: infini.ops.paged_attention_prefill_infinilm(
            q, k_cache, v_cache, tables, lengths, cum, None, scale, out
        ),
        eager,
        None,
        q.numel(),
    )
