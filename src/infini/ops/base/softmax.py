"""`softmax`: ``out = torch.softmax(input, dim, dtype)``."""

from __future__ import annotations

from infini.ops.core.dtypes import dtype_name
from infini.ops.core.operator import Operator

SOFTMAX_DTYPES = ("float32", "float64", "float16", "bfloat16")


class Softmax(Operator):
    """``out = torch.softmax(input, dim, dtype)``: ``exp(x - max) / sum``
    along `dim`.

    - `dim` may be negative; a 0-d `input` is one element (`dim` 0 or -1).
    - `dtype` (None, a `torch.dtype` or its name) converts `input` first,
      as torch does; `out` has that dtype (`input`'s when None) and
      `input`'s shape, any strides.
    - float32, float64, float16 and bfloat16; computed in float32 (float64
      for float64), each result rounded once. A slice holding a NaN or
      `+inf` is NaN, one of all `-inf` too, as in torch.
    - `out` may alias `input` (in place) or overlap it: inputs are read
      first.
    """

    name = "softmax"
    trace_name = "Softmax"
    overloads = ("input: Tensor, dim: int, dtype: dtype|None, out: Tensor!",)
    defaults = {"dtype": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        self.require_dtype("input", input, SOFTMAX_DTYPES)
        if args.dtype is None:
            self.require_same_dtype("input", {"input": input, "out": out})
        else:
            dtype = dtype_name(args.dtype)
            if dtype not in SOFTMAX_DTYPES:
                raise self.error(
                    f"`dtype` must be a float dtype ({', '.join(SOFTMAX_DTYPES)}) "
                    f"or None, got {args.dtype}."
                )
            if out.dtype != dtype:
                raise self.error(
                    f"`out` has dtype {out.dtype} but `dtype` is {dtype}; "
                    "they must match."
                )
        self.require_shape("out", out, input.shape, "(the shape of `input`)")
        self.require_writable("out", out)
        self.dim = normalize_dim(self, args.dim, input.ndim)


def normalize_dim(operator: Operator, dim: int, ndim: int) -> int:
    """`dim` as a non-negative index (a 0-d tensor counts as 1-D)."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise operator.error(
            f"`dim` must be in [{-rank}, {rank - 1}] for a {ndim}-dimensional "
            f"`input`, got {dim}."
        )
    return dim % rank
