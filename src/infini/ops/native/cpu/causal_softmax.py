"""The CPU softmax launch shared by `softmax`, `scaled_softmax`,
`causal_softmax` and their InfiniLM variants: the row softmax
(`softmax_row`), mixed into the implementations."""

from __future__ import annotations

from .rows import precompile_calls, softmax_launch


class SoftmaxLaunch:
    """Plans and launches the row softmax; mixed into the implementations,
    whose base validates the arguments first. `precompile_scalars` are the
    arguments the operator takes between `input` and `out`."""

    precompile_scalars: tuple = ()

    def plan(self, input, out, dim: int, scale: float = 1.0, causal=False) -> None:
        self.launch_rows = softmax_launch(input, out, dim, scale, causal)

    def launch(self, stream, input, out) -> None:
        self.launch_rows(out, input)

    @classmethod
    def precompile(cls) -> int:
        import torch

        import infini.ops

        function = getattr(infini.ops, cls.name)

        def call(dtype, shape):
            input = torch.zeros(shape, dtype=dtype)
            out = torch.empty_like(input)
            function(input, *cls.precompile_scalars, out, implementation_index=0)

        return precompile_calls(call)


class CausalSoftmaxLaunch(SoftmaxLaunch):
    """The softmax over the last dimension under the causal mask."""

    def plan(self, input, out) -> None:
        super().plan(input, out, input.ndim - 1, causal=True)
