"""`zeros_infinilm`: ``out.zero_()``."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class ZerosInfinilm(Operator):
    """``out.zero_()``: every element of `out` becomes zero (``+0.0`` for
    floats). `input` only supplies the metadata: it must have `out`'s shape
    and dtype, and its data is never read (``out`` may be `input`).

    Every dtype (the twelve InfiniOps types and `bool`), any strides;
    `out` must not broadcast; zero-size tensors are allowed.
    """

    name = "zeros_infinilm"
    trace_name = "ZerosInfinilm"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        self.require_same_dtype("input", {"input": input, "out": out})
        self.require_shape("out", out, input.shape, "to match `input`")
        self.require_writable("out", out)
