"""`gemm`: ``y = alpha * op(a) @ op(b)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator

GEMM_DTYPES = ("float32", "float64", "float16", "bfloat16")


class Gemm(Operator):
    """``y = alpha * op(a) @ op(b)`` (ONNX style), where ``op(t)`` is `t` with
    its last two dimensions swapped when `trans_a` / `trans_b` is truthy.

    - `a`, `b` and `y` are 2-D, or batched 3-D: ``op(a)`` is ``(m, k)`` or
      ``(batch, m, k)``, ``op(b)`` is ``(k, n)`` or ``(batch, k, n)`` and `y`
      is ``(m, n)`` or ``(batch, m, n)``, with as many dimensions as the
      larger of `a` and `b`. A batch dimension of size 1 or stride 0 (an
      expanded tensor), or a 2-D operand in a batched product, is shared by
      every batch.
    - Any strides: transposed (column-major) and strided operands need no
      copy by the caller. `y` must not have stride-0 dimensions.
    - `alpha` of `None` means 1; `trans_a` / `trans_b` of `None` mean 0.
    - `c` must be `None`: the original asserts "not supported yet" for a C
      input, so `beta` has nothing to scale and is ignored (the product is
      not accumulated into `y`). A `c` tensor raises `ValueError`.
    - float32, float64, float16 and bfloat16; `a`, `b` and `y` share one
      dtype. 16-bit floats are multiplied in float32 and rounded once.
    - `y` may alias or overlap `a` or `b`: the inputs are read first.
    """

    name = "gemm"
    trace_name = "Gemm"
    overloads = (
        "a: Tensor, b: Tensor, y: Tensor!",
        "a: Tensor, b: Tensor, c: Tensor|None, alpha: float|None, beta: float|None, "
        "trans_a: int|None, trans_b: int|None, y: Tensor!",
    )
    defaults = {
        "c": None,
        "alpha": None,
        "beta": None,
        "trans_a": None,
        "trans_b": None,
    }

    def __init__(self, args) -> None:
        super().__init__(args)
        a, b, y = args.a, args.b, args.y
        if args.c is not None:
            raise self.error(
                "`c` is not supported yet (as in the original); pass `c=None` and "
                "add the C term separately. `beta` is ignored when `c` is None."
            )
        self.require_dtype("y", y, GEMM_DTYPES)
        self.require_same_dtype("y", {"y": y, "a": a, "b": b})
        for name, meta in (("a", a), ("b", b), ("y", y)):
            self.require_ndim(name, meta, (2, 3))
        if y.ndim != max(a.ndim, b.ndim):
            raise self.error(
                f"`y` must have {max(a.ndim, b.ndim)} dimensions to hold the product "
                f"of `a` {a.shape} and `b` {b.shape}, got shape {y.shape}."
            )
        self.require_writable("y", y)
        self.alpha = 1.0 if args.alpha is None else args.alpha
        self.trans_a = bool(args.trans_a)
        self.trans_b = bool(args.trans_b)
        # The shapes of op(a) and op(b).
        self.a_shape = _swap_last(a.shape) if self.trans_a else a.shape
        self.b_shape = _swap_last(b.shape) if self.trans_b else b.shape
        self.a_strides = _swap_last(a.strides) if self.trans_a else a.strides
        self.b_strides = _swap_last(b.strides) if self.trans_b else b.strides
        m, k = self.a_shape[-2:]
        k_b, n = self.b_shape[-2:]
        if k != k_b:
            raise self.error(
                f"the inner dimensions of op(`a`) {self.a_shape} and op(`b`) "
                f"{self.b_shape} differ ({k} != {k_b}); check `trans_a` / `trans_b`."
            )
        batch = y.shape[:-2]
        expected = batch + (m, n)
        if tuple(y.shape) != expected:
            raise self.error(
                f"`y` must have shape {expected} for op(`a`) {self.a_shape} and "
                f"op(`b`) {self.b_shape}, got {y.shape}."
            )
        for name, shape in (("a", a.shape), ("b", b.shape)):
            if len(shape) == 3 and shape[0] not in (1, batch[0]):
                raise self.error(
                    f"`{name}` has batch size {shape[0]} but `y` has {batch[0]}; a "
                    "batch dimension must match or be 1."
                )
        self.m, self.n, self.k = m, n, k


def _swap_last(values: tuple) -> tuple:
    return tuple(values[:-2]) + (values[-1], values[-2])
