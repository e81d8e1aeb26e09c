import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, Case, nbytes

MAX_POSITION = 4096


def cases(tokens, dtype):
    half = HEAD_SIZE // 2
    input = torch.randn(tokens, HEADS, HEAD_SIZE, dtype=dtype)
    out = torch.empty_like(input)
    pos_ids = torch.randint(0, MAX_POSITION, (tokens,))
    angles = torch.rand(MAX_POSITION, half) * 6.0
    sin_table, cos_table = angles.sin().to(dtype), angles.cos().to(dtype)

    def eager():
        # `is_neox=False` is the half-split rotation (the reverse of vLLM's
        # naming); the halves go straight into `out`.
        sin = sin_table[pos_ids].unsqueeze(-2)
        cos = cos_table[pos_ids].unsqueeze(-2)
        first, second = input.chunk(2, dim=-1)
        torch.cat((first * cos - second * sin, second * cos + first * sin), -1, out=out)

    yield Case(
        f"({tokens}, {HEADS}, {HEAD_SIZE})",
        lambda: infini.ops.rotary_embedding_infinilm(
            input, pos_ids, sin_table, cos_table, False, out
        ),
        eager,
        nbytes(input, out) + 2 * tokens * half * dtype.itemsize,
        input.numel(),
        fused=True,
    )
