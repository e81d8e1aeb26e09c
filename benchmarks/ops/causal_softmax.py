import torch

import infini.ops
from benchmarks.harness import HEADS, Case, nbytes

# Attention scores are heads x tokens x tokens: at 2048 tokens, 32 heads
# of float32 would be 512 MiB, so long prompts use fewer heads.
MAX_SCORE_ELEMENTS = 32 * 1024 * 1024


def score_shape(tokens):
    heads = HEADS
    while heads > 1 and heads * tokens * tokens > MAX_SCORE_ELEMENTS:
        heads //= 2
    return heads, tokens, tokens


def cases(tokens, dtype, function=None):
    function = function or infini.ops.causal_softmax
    shape = score_shape(tokens)
    x = torch.randn(shape, dtype=dtype)
    out = torch.empty_like(x)
    mask = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
    yield Case(
        str(shape),
        lambda: function(x, out),
        lambda: torch.softmax(x.masked_fill(mask, float("-inf")), -1, out=out),
        nbytes(x, out),
        x.numel(),
        fused=True,
    )
