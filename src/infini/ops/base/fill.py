"""`fill`: every element of `out` becomes `value`."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Fill(Operator):
    """``out.fill_(value)``: every element of `out` is set to `value`.

    - `input` only supplies the metadata: it must have `out`'s shape and
      dtype, and its data is never read (``out`` may be `input`).
    - `value` is a Python float, converted to `out`'s dtype as
      ``Tensor.fill_`` converts it: truncated toward zero for integer
      dtypes, nonzero (NaN included) is `True` for `bool`, rounded to nearest
      even (through float32) for 16-bit floats. A value that does not fit
      (``300.0`` for `uint8`, ``1e6`` for float16, NaN or infinity for an
      integer dtype) is a `ValueError`, as torch raises.
    - Or `value` is a 0-d tensor of any dtype, read when the operator runs
      and converted as `cast` converts (no range check, as a device-side
      conversion cannot raise).
    - Every dtype (the twelve InfiniOps types and `bool`), any strides;
      `out` must not broadcast; zero-size tensors are allowed.
    """

    name = "fill"
    trace_name = "Fill"
    overloads = (
        "input: Tensor, value: float, out: Tensor!",
        "input: Tensor, value: Tensor, out: Tensor!",
    )

    def __init__(self, args) -> None:
        super().__init__(args)
        input, out, value = args.input, args.out, args.value
        self.require_same_dtype("input", {"input": input, "out": out})
        self.require_shape("out", out, input.shape, "to match `input`")
        self.require_writable("out", out)
        # The converted value (the float overload), as a 0-d torch tensor of
        # `out`'s dtype: converting now reports a value out of range before
        # anything is written.
        self.converted = None
        if args.overload_index == 0:
            self.converted = self._convert(value, out.dtype)
        elif value.ndim != 0:
            raise self.error(
                "`value` must be a 0-dimensional tensor (or a float), got shape "
                f"{value.shape}."
            )

    def _convert(self, value: float, dtype: str):
        import torch

        # Two elements: torch fills one-element tensors without the range
        # check.
        target = torch.empty(2, dtype=getattr(torch, dtype))
        try:
            target.fill_(value)
        except RuntimeError:
            raise self.error(
                f"`value` {value!r} cannot be converted to {dtype} without overflow."
            ) from None
        return target[0]
