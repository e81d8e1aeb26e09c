import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, KV_HEADS, Case, nbytes

# Decode appends one token to each of `tokens` sequences holding up to
# `CONTEXT` tokens; prefill writes one sequence of `tokens` tokens.
CONTEXT = 512
PREFILL_TOKENS = 512


def cases(tokens, dtype):
    batch, seq = (1, tokens) if tokens >= PREFILL_TOKENS else (tokens, 1)
    length = CONTEXT + seq
    k = torch.randn(batch, KV_HEADS, seq, HEAD_SIZE, dtype=dtype)
    v = torch.randn(batch, KV_HEADS, seq, HEAD_SIZE, dtype=dtype)
    past_kv_lengths = torch.randint(0, CONTEXT + 1, (batch,))
    k_cache = torch.zeros(batch, KV_HEADS, length, HEAD_SIZE, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)

    def eager():
        if batch == 1:
            # One sequence: a plain slice copy.
            past = int(past_kv_lengths[0])
            k_cache[0, :, past : past + seq].copy_(k[0])
            v_cache[0, :, past : past + seq].copy_(v[0])
            return
        # Several: one `index_put_` per cache over (sequence, position).
        rows = torch.arange(batch)[:, None]
        positions = past_kv_lengths[:, None] + torch.arange(seq)
        k_cache[rows, :, positions] = k.transpose(1, 2)
        v_cache[rows, :, positions] = v.transpose(1, 2)

    yield Case(
        f"{batch} x ({KV_HEADS}, {seq}, {HEAD_SIZE}) x2",
        lambda: infini.ops.kv_caching_infinilm(k, v, past_kv_lengths, k_cache, v_cache),
        eager,
        2 * nbytes(k, v) + nbytes(past_kv_lengths),
        k.numel(),
    )
