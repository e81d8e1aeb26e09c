"""`relu`: ``out = relu(input)``."""

from __future__ import annotations

from infini.ops.core.dtypes import DTYPE_NAMES
from infini.ops.core.operator import Operator


class Relu(Operator):
    """``out = relu(input)``: negative elements become ``+0``, others are kept.

    Every float and integer dtype, not `bool` (torch rejects it too); `input`
    and `out` share one dtype and one shape. As in torch, ``-0.0`` stays
    ``-0.0``, ``-inf`` becomes ``0`` and NaNs pass through unchanged, sign bit
    and payload included; unsigned integers are copied. `out` must not
    broadcast (no stride-0 dimension); it may be `input` itself or overlap it
    in any way (``relu(x, x.t())``): results are as if `input` were read first.
    """

    name = "relu"
    trace_name = "Relu"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.require_dtype("input", args.input, DTYPE_NAMES)
        self.require_same_dtype("input", {"input": args.input, "out": args.out})
        self.require_shape("out", args.out, args.input.shape, "to match `input`")
        self.require_writable("out", args.out)
