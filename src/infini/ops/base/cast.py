"""`cast`: ``out = input.to(out.dtype)``."""

from __future__ import annotations

from infini.ops.core.operator import Operator


class Cast(Operator):
    """``out = input.to(out.dtype)`` for any pair of dtypes (the twelve
    InfiniOps types and `bool`), any shapes and strides.

    `input` and `out` have one shape; `out` must not broadcast (no stride-0
    dimension). Conversions follow torch on CPU:

    - float to integer truncates toward zero (to `uint8` through `int64`, so
      ``-1.5`` gives 255); out-of-range values and NaN are undefined in torch
      and give what x86-64 conversion instructions give;
    - to float16/bfloat16, values round to nearest even through float32 (as
      torch's ``Half(float)``/``BFloat16(float)`` constructors do, so a
      float64 or int64 source is rounded twice);
    - to `bool`, nonzero (NaN included) is `True`;
    - integer to integer keeps the low bits (two's complement), as C does;
    - NaN and infinities survive float-to-float conversions.

    `out` may alias or overlap `input`; results are as if `input` were read
    first.
    """

    name = "cast"
    trace_name = "Cast"
    overloads = ("input: Tensor, out: Tensor!",)

    def __init__(self, args) -> None:
        super().__init__(args)
        self.require_shape("out", args.out, args.input.shape, "to match `input`")
        self.require_writable("out", args.out)
