"""`top_k_top_p_sample_infinilm`: seeded per-row top-k / top-p sampling."""

from __future__ import annotations

from infini.ops.base._sampling import TopKTopPSampling, seed_bits


class TopKTopPSampleInfinilm(TopKTopPSampling):
    """Samples one token per row of `logits` ``(batch, vocab)`` into `out`
    ``(batch,)`` (int32 or int64) with the filters of `top_k_top_p_sampler`
    (`k`, `p`: None, or CPU tensors ``(batch,)`` or ``(1,)``; ``k <= 0`` or
    ``k >= vocab`` and ``p >= 1`` disable them), drawing from a counter-based
    generator: row ``r`` uses the uniform number ``uniform(seed, offset,
    r)``. Equal `seed` and `offset` give equal results; changing either
    gives independent draws. `logits`: float32, float16 or bfloat16, any
    strides. Zero rows are allowed.
    """

    name = "top_k_top_p_sample_infinilm"
    trace_name = "TopKTopPSampleInfinilm"
    overloads = (
        "logits: Tensor, k: Tensor|None, p: Tensor|None, seed: int, offset: int, "
        "out: Tensor!",
    )
    defaults = {"k": None, "p": None}
    # A new seed or offset on every call must not build a new operator.
    call_scalars = ("seed", "offset")

    def __init__(self, args) -> None:
        super().__init__(args)
        self.bind_call(args.seed, args.offset)

    def bind_call(self, seed: int, offset: int) -> None:
        """`self.seed` and `self.offset`: the call's values modulo 2**64
        (`numpy.uint64`), read by `launch`."""
        self.seed, self.offset = seed_bits(seed), seed_bits(offset)
