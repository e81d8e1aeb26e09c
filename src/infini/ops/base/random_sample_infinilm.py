"""`random_sample_infinilm`: InfiniLM's single-row random sampling."""

from __future__ import annotations

import math

from infini.ops.base._sampling import LOGITS_DTYPES, TOKEN_DTYPES
from infini.ops.core.operator import Operator


class RandomSampleInfinilm(Operator):
    """Samples one token of the 1-D `logits` ``(vocab,)`` into the 0-d `out`
    (int32 or int64).

    The result is ``argmax(logits)`` (the first largest) unless
    ``random_val > 0``, ``topp > 0``, ``topk > 1`` and ``temperature > 0``.
    Otherwise, with the logits sorted in decreasing order (ties to the lower
    token id), ``probs = softmax(sorted / temperature)`` and ``cum`` its
    running sum, the result is the token at the first position where
    ``cum >= min(cum[min(topk, vocab) - 1], topp) * random_val``
    (``searchsorted``). Computed in float64 after reading the logits.

    `random_val` must be in [0, 1], `temperature` non-negative.
    `logits`: float32, float16 or bfloat16, any stride.
    """

    name = "random_sample_infinilm"
    trace_name = "RandomSampleInfinilm"
    overloads = (
        "logits: Tensor, random_val: float, topp: float, topk: int, "
        "temperature: float, out: Tensor!",
    )

    # `random_val` is new on every call, and the sampling parameters change
    # per request: none of them may build a new operator.
    call_scalars = ("random_val", "topp", "topk", "temperature")

    def __init__(self, args) -> None:
        super().__init__(args)
        logits, out = args.logits, args.out
        self.require_dtype("logits", logits, LOGITS_DTYPES)
        self.require_ndim("logits", logits, (1,))
        if logits.shape[0] < 1:
            raise self.error("`logits` must hold at least 1 token, got shape (0,).")
        self.require_dtype("out", out, TOKEN_DTYPES)
        self.require_ndim("out", out, (0,))
        self.vocab = logits.shape[0]
        self.bind_call(args.random_val, args.topp, args.topk, args.temperature)

    def bind_call(
        self, random_val: float, topp: float, topk: int, temperature: float
    ) -> None:
        """Checks the call's sampling parameters and keeps them for `launch`
        (`self.random_val`, `self.topp`, `self.topk`, `self.temperature`)."""
        if not 0.0 <= random_val <= 1.0:
            raise self.error(f"`random_val` must be in [0, 1], got {random_val}.")
        if not temperature >= 0.0 or math.isinf(temperature):
            raise self.error(
                "`temperature` must be a finite non-negative number, got "
                f"{temperature}."
            )
        if math.isnan(topp):
            raise self.error("`topp` must be a number, got nan.")
        self.random_val, self.topp = random_val, topp
        self.topk, self.temperature = topk, temperature
