"""`matmul`: ``out = torch.matmul(input, other)``."""

from __future__ import annotations

from infini.ops.core.geometry import broadcast_shape
from infini.ops.core.operator import Operator

MATMUL_DTYPES = ("float32", "float64", "float16", "bfloat16")


class Matmul(Operator):
    """``out = torch.matmul(input, other)``.

    - 1-D by 1-D is a dot product (`out` is 0-D); a 1-D `input` is a row and
      a 1-D `other` a column, their added dimension dropped from `out`.
    - 2-D or batched: ``(..., m, k) @ (..., k, n) -> (..., m, n)``, the batch
      dimensions broadcast (size 1 or missing dimensions, or stride 0).
    - Any strides; `out` must not have stride-0 dimensions.
    - float32, float64, float16 and bfloat16, one dtype for all tensors;
      16-bit floats are multiplied in float32 and rounded once.
    - `out` may alias or overlap the inputs: they are read first.
    """

    name = "matmul"
    trace_name = "Matmul"
    overloads = ("input: Tensor, other: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, other, out = args.input, args.other, args.out
        self.require_dtype("input", input, MATMUL_DTYPES)
        self.require_same_dtype("input", {"input": input, "other": other, "out": out})
        for name, meta in (("input", input), ("other", other)):
            if meta.ndim < 1:
                raise self.error(
                    f"`{name}` must have at least 1 dimension, got a scalar."
                )
        k = input.shape[-1]
        k_other = other.shape[-2] if other.ndim >= 2 else other.shape[0]
        if k != k_other:
            raise self.error(
                f"`input` {input.shape} and `other` {other.shape} cannot be "
                f"multiplied: {k} != {k_other} in the contracted dimension."
            )
        batch = broadcast_shape(input.shape[:-2], other.shape[:-2])
        if batch is None:
            raise self.error(
                f"the batch dimensions of `input` {input.shape} and `other` "
                f"{other.shape} do not broadcast."
            )
        expected = tuple(batch)
        if input.ndim >= 2:
            expected += (input.shape[-2],)
        if other.ndim >= 2:
            expected += (other.shape[-1],)
        self.require_shape("out", out, expected, "(the product's shape)")
        self.require_writable("out", out)
