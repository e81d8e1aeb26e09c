import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, KV_HEADS, Case

CONTEXT = 512
BLOCK_SIZE = 16
# A sliding window (Gemma-3's) over a context four times its length.
WINDOW = 512
WINDOWED_CONTEXT = 4 * WINDOW


def paged_inputs(seqs, context, dtype):
    """A shuffled paged cache holding `context` tokens for each sequence."""
    per_seq = context // BLOCK_SIZE
    blocks = seqs * per_seq
    k_cache = torch.randn(blocks, KV_HEADS, BLOCK_SIZE, HEAD_SIZE, dtype=dtype)
    v_cache = torch.randn(blocks, KV_HEADS, BLOCK_SIZE, HEAD_SIZE, dtype=dtype)
    tables = torch.randperm(blocks, dtype=torch.int32).view(seqs, per_seq)
    lengths = torch.full((seqs,), context, dtype=torch.int32)
    return k_cache, v_cache, tables, lengths


def gather(cache, tables):
    """(seqs, kv_heads, tokens, head_size): the eager gather of the pages."""
    pages = cache[tables.long()]  # (seqs, blocks, kv_heads, block, head)
    seqs, blocks = tables.shape
    return pages.permute(0, 2, 1, 3, 4).reshape(
        seqs, KV_HEADS, blocks * BLOCK_SIZE, HEAD_SIZE
    )


def cases(tokens, dtype):
    # Decode: `tokens` sequences of one new token each (batches of 512 or
    # more sequences of 512 tokens do not fit the benchmark's budget).
    if tokens > 16:
        return
    seqs = tokens
    k_cache, v_cache, tables, lengths = paged_inputs(seqs, CONTEXT, dtype)
    q = torch.randn(seqs, HEADS, HEAD_SIZE, dtype=dtype)
    out = torch.empty_like(q)
    scale = HEAD_SIZE**-0.5

    def eager():
        keys, values = gather(k_cache, tables), gather(v_cache, tables)
        return F.scaled_dot_product_attention(
            q[:, :, None], keys, values, scale=scale, enable_gqa=True
        )

    yield Case(
        f"{seqs} seqs x kv {CONTEXT}",
        lambda: infini.ops.paged_attention_infinilm(
            q, k_cache, v_cache, tables, lengths, None, scale, out
        ),
        eager,
        None,
        q.numel(),
    )

    # The same decode with a sliding window over a longer context: the
    # eager side gathers only the pages of the last `WINDOW` keys.
    k_cache, v_cache, tables, lengths = paged_inputs(seqs, WINDOWED_CONTEXT, dtype)
    window_pages = tables[:, -WINDOW // BLOCK_SIZE :]

    def eager_windowed():
        keys = gather(k_cache, window_pages)
        values = gather(v_cache, window_pages)
        return F.scaled_dot_product_attention(
            q[:, :, None], keys, values, scale=scale, enable_gqa=True
        )

    yield Case(
        f"{seqs} seqs x kv {WINDOWED_CONTEXT}, window {WINDOW}",
        lambda: infini.ops.paged_attention_infinilm(
            q, k_cache, v_cache, tables, lengths, None, scale, out, window=WINDOW
        ),
        eager_windowed,
        None,
        q.numel(),
    )
