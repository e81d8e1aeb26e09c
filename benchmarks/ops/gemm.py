import torch

import infini.ops
from benchmarks.harness import HIDDEN, Case

# Products are compute-bound and slow on a small CPU: no 2048-token point.
MAX_TOKENS = 512
# torch's CPU float16 matrix product has no fast kernel (measured with torch
# 2.13 on a 2-core x86 host: about 2 s at 16 tokens, a minute or more at 512),
# so a 512-token float16 point would stall the whole benchmark for many
# minutes; float16 keeps the decode points (1 and 16 tokens), where the ratio
# to torch is still shown. torch's bfloat16 product is fast (about 0.3 s at
# 512 tokens), so bfloat16 keeps every point.
MAX_TOKENS_FLOAT16 = 16


def skipped(tokens, dtype) -> bool:
    """Whether the (tokens, dtype) point is left out of the product
    benchmarks (`gemm`, `linear`, `matmul`)."""
    if dtype == torch.float16:
        return tokens > MAX_TOKENS_FLOAT16
    return tokens > MAX_TOKENS


def cases(tokens, dtype):
    if skipped(tokens, dtype):
        return
    a = torch.randn(tokens, HIDDEN, dtype=dtype)
    b = torch.randn(HIDDEN, HIDDEN, dtype=dtype) / HIDDEN**0.5
    y = torch.empty(tokens, HIDDEN, dtype=dtype)
    yield Case(
        f"({tokens}, {HIDDEN}) x ({HIDDEN}, {HIDDEN})",
        lambda: infini.ops.gemm(a, b, y),
        lambda: torch.mm(a, b, out=y),
        None,
        b.numel(),
    )
