import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, KV_HEADS, Case, nbytes

CONTEXT = 512


def cases(tokens, dtype):
    # Decode (`tokens` < 16): `tokens` sequences of one query against 512
    # keys each. Prefill: two causal sequences of `tokens / 2` tokens. The
    # eager side is torch's SDPA per sequence, as a varlen batch needs.
    if tokens < 16:
        lengths_q, lengths_k, causal = [1] * tokens, [CONTEXT] * tokens, False
    else:
        lengths_q = lengths_k = [tokens // 2, tokens - tokens // 2]
        causal = True
    q = torch.randn(sum(lengths_q), HEADS, HEAD_SIZE, dtype=dtype)
    k = torch.randn(sum(lengths_k), KV_HEADS, HEAD_SIZE, dtype=dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    cu_q = torch.tensor([0, *torch.tensor(lengths_q).cumsum(0).tolist()]).int()
    cu_k = torch.tensor([0, *torch.tensor(lengths_k).cumsum(0).tolist()]).int()
    spans = list(
        zip(cu_q.tolist(), cu_q[1:].tolist(), cu_k.tolist(), cu_k[1:].tolist())
    )
    max_q, max_k = max(lengths_q), max(lengths_k)

    def eager():
        for q_begin, q_end, k_begin, k_end in spans:
            F.scaled_dot_product_attention(
                q[q_begin:q_end].transpose(0, 1), k[k_begin:k_end].transpose(0, 1),
                v[k_begin:k_end].transpose(0, 1), is_causal=causal, enable_gqa=True,
            )  # fmt: skip

    yield Case(
        f"{len(lengths_q)} seqs, q {max_q}, kv {max_k}"
        + (", causal" if causal else ""),
        lambda: infini.ops.flash_attn_varlen_func(
            q,
            k,
            v,
            cu_q,
            cu_k,
            None,
            None,
            max_q,
            max_k,
            0.0,
            None,
            causal,
            [-1, -1],
            0.0,
            False,
            False,
            out,
            None,
            None,
        ),  # fmt: skip
        eager,
        nbytes(q, k, v, out) if not causal else None,
        q.numel(),
    )
