"""The CPU causal softmax shared by `causal_softmax` and
`causal_softmax_infinilm`: the row softmax (`softmax_row`) with the causal
mask on."""

from __future__ import annotations

from .rows import softmax_launch


class CausalSoftmaxLaunch:
    """Plans and launches the row kernel; mixed into the implementations,
    whose base validates the arguments first."""

    def plan(self, input, out) -> None:
        self.launch_rows = softmax_launch(input, out, input.ndim - 1, 1.0, causal=True)

    def launch(self, stream, input, out) -> None:
        self.launch_rows(out, input)
