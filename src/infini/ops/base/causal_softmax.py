"""`causal_softmax`: softmax over the last dimension under a causal mask."""

from __future__ import annotations

from infini.ops.core.operator import Operator

CAUSAL_SOFTMAX_DTYPES = ("float32", "float64", "float16", "bfloat16")


class CausalSoftmax(Operator):
    """Softmax over the last dimension under a bottom-right aligned causal
    mask.

    - For `input` of shape ``(..., q, k)``, element ``(i, j)`` is masked
      (excluded, and written as 0) when ``j > i + (k - q)``. Any number of
      leading dimensions: every ``(q, k)`` matrix is computed (the original
      computed only the first of a 4-D input).
    - When ``k < q`` the first ``q - k`` rows have no unmasked element; they
      are NaN, as `torch.softmax` of a row of `-inf`. A row with a NaN or
      `+inf` taking part is NaN throughout, masked elements included, also
      as torch computes it.
    - Computed in float32 (float64 for float64), each result rounded once.
    - float32, float64, float16 and bfloat16; `out` has `input`'s shape and
      dtype, any strides, and may alias `input` (in place) or overlap it.
    """

    name = "causal_softmax"
    trace_name = "CausalSoftmax"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        self.require_dtype("input", input, CAUSAL_SOFTMAX_DTYPES)
        self.require_same_dtype("input", {"input": input, "out": out})
        if input.ndim < 2:
            raise self.error(
                "`input` must have at least 2 dimensions (..., q, k), got shape "
                f"{input.shape}."
            )
        self.require_shape("out", out, input.shape, "(the shape of `input`)")
        self.require_writable("out", out)
