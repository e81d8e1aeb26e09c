"""`top_k_top_p_sampler`: vLLM-style per-row top-k / top-p sampling."""

from __future__ import annotations

from infini.ops.base._sampling import TopKTopPSampling


class TopKTopPSampler(TopKTopPSampling):
    """Samples one token per row of `logits` ``(batch, vocab)`` into `out`
    ``(batch,)`` (int32, or int64), as vLLM's `TopKTopPSampler`:

    - top-k (`k`: None, or int32/int64 ``(batch,)`` or ``(1,)`` for every
      row) keeps the `k` largest logits of the row (ties to the lower
      token id); ``k <= 0`` or ``k >= vocab`` keeps every token;
    - top-p (`p`: None, or float32/float64 ``(batch,)`` or ``(1,)``) then
      keeps, in order of decreasing logit, the tokens while the probability
      mass before them (after top-k, renormalised) is below `p`, at least
      one token; ``p >= 1`` keeps every token;
    - a token is drawn from the kept ones in proportion to
      ``softmax(logits)``.

    `k` and `p` live on the CPU whatever the device of `logits`. The random
    numbers come from torch's default CPU generator (one 64-bit draw per
    call), so `torch.manual_seed` makes results reproducible. `logits`:
    float32, float16 or bfloat16, any strides. Zero rows are allowed.
    """

    name = "top_k_top_p_sampler"
    trace_name = "TopKTopPSampler"
    overloads = ("logits: Tensor, k: Tensor|None, p: Tensor|None, out: Tensor!",)
    defaults = {"k": None, "p": None}
