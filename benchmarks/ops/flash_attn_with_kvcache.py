import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, KV_HEADS, Case, nbytes

CONTEXT = 512


def cases(tokens, dtype):
    # Decode (`tokens` < 16): `tokens` sequences with 512 cached tokens each
    # append one token and attend. Prefill: one sequence appends `tokens`
    # tokens after 512 cached ones (chunked prefill, bottom-right causal).
    # The eager side writes the new keys into the cache and runs torch's
    # SDPA per sequence (with a mask built once, outside the timing).
    if tokens < 16:
        batch, new = tokens, 1
    else:
        batch, new = 1, tokens
    capacity = CONTEXT + new
    k_cache = torch.randn(batch, capacity, KV_HEADS, HEAD_SIZE, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, new, HEADS, HEAD_SIZE, dtype=dtype)
    k = torch.randn(batch, new, KV_HEADS, HEAD_SIZE, dtype=dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    seqlens = torch.full((batch,), CONTEXT, dtype=torch.int32)
    mask = torch.ones(new, capacity, dtype=torch.bool).tril(CONTEXT)

    def eager():
        k_cache[:, CONTEXT:] = k
        v_cache[:, CONTEXT:] = v
        for b in range(batch):
            F.scaled_dot_product_attention(
                q[b].transpose(0, 1), k_cache[b].transpose(0, 1),
                v_cache[b].transpose(0, 1), attn_mask=None if new == 1 else mask,
                enable_gqa=True,
            )  # fmt: skip

    yield Case(
        f"{batch} seqs, q {new}, kv {capacity}, causal",
        lambda: infini.ops.flash_attn_with_kvcache(
            q,
            k_cache,
            v_cache,
            k,
            v,
            None,
            None,
            seqlens,
            None,
            None,
            None,
            None,
            None,
            True,
            [-1, -1],
            0.0,
            True,
            0,
            False,
            out,
            None,
        ),  # fmt: skip
        eager,
        nbytes(q, k_cache, v_cache, out) if new == 1 else None,
        q.numel(),
    )
