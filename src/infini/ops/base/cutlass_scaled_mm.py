"""`cutlass_scaled_mm`: an int8 matrix product with per-tensor, per-row and
per-column scales and an optional bias (vLLM `cutlass_scaled_mm`, the
W8A8 linear layer)."""

from __future__ import annotations

from infini.ops.core.dtypes import dtype_name
from infini.ops.core.operator import Operator

SCALED_MM_INPUT_DTYPES = ("int8",)
SCALED_MM_OUT_DTYPES = ("float32", "float16", "bfloat16")


def vector_stride(meta) -> int:
    """The element stride along the one dimension of a scale or bias vector
    that has more than one element (0 when it has a single element)."""
    for size, stride in zip(meta.shape, meta.strides):
        if size > 1:
            return stride
    return 0


class CutlassScaledMm(Operator):
    """``out = scale_a * (scale_b * (a @ b)) + bias``, rounded once to
    `out_dtype`, as vLLM documents `cutlass_scaled_mm`: ``torch.mm(scale_a *
    a, scale_b * b).to(out_dtype)`` with the scales broadcast NumPy-style,
    and its CUTLASS epilogue computes it from the int32 accumulator.

    - `a` ``(m, k)`` and `b` ``(k, n)`` are int8 with any strides (vLLM
      passes `b` column-major, the transpose of an ``(n, k)`` weight; that
      layout is read in place, others are packed first). ``a @ b`` is exact
      in int32 (it wraps only past ``2**31``, which needs ``k >= 2**17``).
    - `scale_a` (float32) holds one element (per tensor) or `m` (per row:
      ``(m, 1)`` or ``(m,)``); `scale_b` (float32) one element or `n` (per
      column: ``(1, n)`` or ``(n,)``). As in vLLM only the element count
      tells the kinds apart; a vector may have any strides. vLLM's blockwise
      group scales (DeepSeek-style ``(m, k / 128)``) are not supported.
    - `bias` (optional) holds `n` elements of `out_dtype`, added per column.
    - Each result is computed in float32 as vLLM's epilogue does:
      ``t = scale_b[j] * float32(acc)``, then ``scale_a[i] * t + bias[j]``
      with one rounding (a fused multiply-add), then rounded once to
      `out_dtype`.
    - `out_dtype` is float32, float16 or bfloat16 and `out` ``(m, n)`` has
      that dtype (vLLM's wrapper allows only the 16-bit types; float32 is an
      extension here). vLLM also accepts float8 inputs; this library has no
      float8 dtype, so only int8 is supported. `out` may have any strides
      and may overlap the inputs (they are read first).
    """

    name = "cutlass_scaled_mm"
    trace_name = "CutlassScaledMm"
    overloads = (
        "a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, "
        "bias: Tensor|None = None, out_dtype: dtype, out: Tensor!",
    )
    defaults = {"bias": None}

    def __init__(self, args) -> None:
        super().__init__(args)
        a, b, out, bias = args.a, args.b, args.out, args.bias
        self.require_dtype("a", a, SCALED_MM_INPUT_DTYPES)
        self.require_dtype("b", b, SCALED_MM_INPUT_DTYPES)
        self.require_ndim("a", a, (2,))
        self.require_ndim("b", b, (2,))
        m, k = a.shape
        if b.shape[0] != k:
            raise self.error(
                f"`b` must have shape (k, n) with k = {k} (the columns of `a`), "
                f"got {b.shape}."
            )
        n = b.shape[1]
        out_dtype = dtype_name(args.out_dtype)
        if out_dtype not in SCALED_MM_OUT_DTYPES:
            raise self.error(
                f"`out_dtype` must be one of {', '.join(SCALED_MM_OUT_DTYPES)}, "
                f"got {args.out_dtype}."
            )
        if out.dtype != out_dtype:
            raise self.error(
                f"`out` has dtype {out.dtype} but `out_dtype` is {out_dtype}; "
                "they must match."
            )
        self.require_shape("out", out, (m, n), "(rows of `a`, columns of `b`)")
        self.require_writable("out", out)
        for name, meta, count, kind in (
            ("scale_a", args.scale_a, m, "rows of `a`"),
            ("scale_b", args.scale_b, n, "columns of `b`"),
        ):
            self.require_dtype(name, meta, ("float32",))
            self._require_vector(name, meta, count, kind, allow_single=True)
        if bias is not None:
            if bias.dtype != out_dtype:
                raise self.error(
                    f"`bias` has dtype {bias.dtype} but `out_dtype` is "
                    f"{out_dtype}; they must match."
                )
            self._require_vector("bias", bias, n, "columns of `b`", False)
        self.m, self.k, self.n = m, k, n
        self.out_dtype = out_dtype

    def _require_vector(self, name, meta, count, kind, allow_single) -> None:
        long_dimensions = sum(size > 1 for size in meta.shape)
        if meta.ndim > 2 or long_dimensions > 1:
            raise self.error(
                f"`{name}` must be a vector (at most one dimension longer than "
                f"1), got shape {meta.shape}."
            )
        if meta.numel == count or (allow_single and meta.numel == 1):
            return
        expected = f"1 or {count}" if allow_single else f"{count}"
        raise self.error(
            f"`{name}` must hold {expected} elements ({kind}), got shape {meta.shape}."
        )
