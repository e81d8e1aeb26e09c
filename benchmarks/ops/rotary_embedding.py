import torch

import infini.ops
from benchmarks.harness import HEAD_SIZE, HEADS, KV_HEADS, Case, nbytes

MAX_POSITION = 4096


def rotate(x, cos, sin, is_neox):
    """vLLM's PyTorch reference rotation of `x` (tokens, heads, rot dim),
    written back in place (both halves are new tensors before the writes)."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if is_neox:
        first, second = x.chunk(2, dim=-1)
    else:
        first, second = x[..., 0::2], x[..., 1::2]
    rotated_first = first * cos - second * sin
    rotated_second = second * cos + first * sin
    first.copy_(rotated_first)
    second.copy_(rotated_second)


def cases(tokens, dtype):
    positions = torch.randint(0, MAX_POSITION, (tokens,))
    query = torch.randn(tokens, HEADS * HEAD_SIZE, dtype=dtype)
    key = torch.randn(tokens, KV_HEADS * HEAD_SIZE, dtype=dtype)
    # Unit-circle entries: the rotations repeat in place for every timed
    # call, and must keep the values' size.
    angles = torch.rand(MAX_POSITION, HEAD_SIZE // 2) * 6.0
    cos_sin_cache = torch.cat((angles.cos(), angles.sin()), -1).to(dtype)

    def eager():
        cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
        rotate(query.view(tokens, HEADS, HEAD_SIZE), cos, sin, True)
        rotate(key.view(tokens, KV_HEADS, HEAD_SIZE), cos, sin, True)

    yield Case(
        f"q ({tokens}, {HEADS}x{HEAD_SIZE}), k {KV_HEADS} heads",
        lambda: infini.ops.rotary_embedding(
            positions, query, key, cos_sin_cache, HEAD_SIZE, True
        ),
        eager,
        # Query and key read and written, one cache row read per token.
        2 * nbytes(query, key) + tokens * HEAD_SIZE * dtype.itemsize,
        query.numel(),
        fused=True,
    )
