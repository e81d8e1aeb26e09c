"""The CPU softmax shared by `softmax`, `scaled_softmax`, `causal_softmax`
and their InfiniLM variants: the row body (`softmax_row`, run by the row
driver in `rows.py`), its launch (`softmax_launch`), and the classes mixed
into the implementations (`SoftmaxLaunch`, `CausalSoftmaxLaunch`).
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from .dtype_io import identity, rounding
from .jit import helper
from .numeric import bits_float32, float32_bits
from .rows import (
    SUM_BLOCK,
    RowLaunch,
    RowOperand,
    precompile_calls,
    unsigned,
)

# `exp` in float32 without a library call, so that loops over it vectorise,
# for the arguments softmax has (``x - max(x)``: at most 0, or NaN):
# ``exp(x) = 2^k * exp(r)`` with ``k = rint(x / ln 2)`` and
# ``|r| <= ln(2) / 2``, `exp(r)` from a degree-6 polynomial fitted for
# relative error (1.9e-9, well under float32's half ulp; with float32
# rounding the result is within 2 ulps) and `2^k` built from its bits.
# Arguments are clamped at ``-127 ln 2``, where ``k = -127`` gives the bits
# of +0 for `2^k`: results that far below the normal range are 0 without a
# compare and select.
_LOG2E = np.float32(1.4426950408889634)
_LN2_HIGH = np.float32(0.693145751953125)
_LN2_LOW = np.float32(1.4286067653e-06)
_EXP_FLOOR = np.float32(-127 * 0.6931471805599453)
_EXP_C2 = np.float32(0.49999991059303284)
_EXP_C3 = np.float32(0.16666419804096222)
_EXP_C4 = np.float32(0.04166822507977486)
_EXP_C5 = np.float32(0.008374815806746483)
_EXP_C6 = np.float32(0.001383684459142387)


@helper
def exp_nonpositive_float32(x):
    """`exp(x)` in float32 for ``x <= 0`` within 2 ulps down to float32's
    smallest normal number (1.2e-38), 0 or a subnormal below it, and NaN for
    NaN. Without branches (a NaN is kept by a bit select), so that loops over
    it vectorise and Numba inlines it cleanly more than once."""
    clamped = max(x, _EXP_FLOOR)
    k = np.rint(clamped * _LOG2E)
    r = clamped - k * _LN2_HIGH - k * _LN2_LOW
    p = _EXP_C6 * r + _EXP_C5
    p = p * r + _EXP_C4
    p = p * r + _EXP_C3
    p = p * r + _EXP_C2
    p = p * r + np.float32(1)
    p = p * r + np.float32(1)
    power = bits_float32(np.uint32(np.int32(k) + np.int32(127)) << np.uint32(23))
    result = p * power
    nan_mask = np.uint32(0) - np.uint32(x != x)
    bits = (float32_bits(result) & ~nan_mask) | (float32_bits(x) & nan_mask)
    return bits_float32(bits)


def exp_nonpositive(x):
    """`exp(x)` for ``x <= 0`` in the type of `x`: `exp_nonpositive_float32`
    for float32, the library's `exp` for float64 (kernels only)."""
    raise NotImplementedError


@overload(exp_nonpositive, inline="always")
def _exp_nonpositive(x):
    if x == types.float64:
        return lambda x: np.exp(x)
    return lambda x: exp_nonpositive_float32(x)


# Maxima as integer maxima, which vectorise (a float maximum does not: its
# NaN rules make it order dependent). A float32's order key is its bit
# pattern with the magnitude bits flipped when negative: keys order as the
# values, and a (positive) NaN above `inf`, so that a NaN maximum still
# makes the row NaN. float64 values are their own keys.


def order_key(value):
    raise NotImplementedError


def key_value(key):
    raise NotImplementedError


@overload(order_key, inline="always")
def _order_key(value):
    if value == types.float64:
        return lambda value: value

    def key32(value):
        bits = np.int32(float32_bits(value))
        return np.int32(bits ^ ((bits >> np.int32(31)) & np.int32(0x7FFFFFFF)))

    return key32


@overload(key_value, inline="always")
def _key_value(key):
    if key == types.float64:
        return lambda key: key

    def value32(key):
        bits = np.int32(key ^ ((key >> np.int32(31)) & np.int32(0x7FFFFFFF)))
        return bits_float32(np.uint32(bits))

    return value32


@helper
def softmax_row(operands, cols, row, params, scratch, narrow):
    """Operands (out, input); params (scale, q, exps_in_out).

    ``out = softmax(narrow(input) * scale)`` over the row. With ``q > 0`` a
    bottom-right aligned causal mask applies: in row `row` (of `q` rows per
    matrix) the first ``row % q + cols - q + 1`` elements take part, the
    rest are written as 0. A row with no element taking part is NaN, as
    `torch.softmax` of all `-inf`, and so is a whole row whose softmax is NaN
    (a NaN or `inf` taking part).

    Three passes: the maximum, the exponentials and their sum (float32
    partial sums of `SUM_BLOCK` elements added in float64), the scaling.
    With `exps_in_out` (an output in the compute type) the exponentials go
    to `out` and are scaled there; else to the scratch row, so that each
    result is rounded once.
    """
    out, out_step, store = operands[0][0], operands[0][1], operands[0][3]
    x, x_step, load = operands[1][0], operands[1][1], operands[1][2]
    out_load = operands[0][2]
    compute = scratch.dtype.type
    scale = compute(params[0])
    q = params[1]
    valid = cols if q <= 0 else row % q + cols - q + 1
    if valid <= 0:
        for j in range(cols):
            store(out, j * out_step, np.nan)
        return
    maximum = order_key(compute(-np.inf))
    for j in range(valid):
        value = compute(narrow(load(x, j * x_step))) * scale
        maximum = max(maximum, order_key(value))
    maximum = key_value(maximum)
    total = 0.0
    if params[2]:
        for start in range(0, valid, SUM_BLOCK):
            partial = compute(0)
            for j in range(start, min(start + SUM_BLOCK, valid)):
                value = compute(narrow(load(x, unsigned(j * x_step)))) * scale
                exponential = exp_nonpositive(value - maximum)
                store(out, unsigned(j * out_step), exponential)
                partial += exponential
            total += partial
        inverse = compute(1.0 / total)
        for j in range(valid):
            store(out, j * out_step, compute(out_load(out, j * out_step)) * inverse)
    else:
        for start in range(0, valid, SUM_BLOCK):
            partial = compute(0)
            for j in range(start, min(start + SUM_BLOCK, valid)):
                value = compute(narrow(load(x, unsigned(j * x_step)))) * scale
                exponential = exp_nonpositive(value - maximum)
                scratch[unsigned(j)] = exponential
                partial += exponential
            total += partial
        inverse = compute(1.0 / total)
        for j in range(valid):
            store(out, j * out_step, scratch[j] * inverse)
    # Masked elements are `exp(-inf - max) / total`: 0, or NaN when the row
    # is NaN (a NaN or infinite input), as in torch.
    masked = compute(0.0 if total == total else np.nan)
    for j in range(valid, cols):
        store(out, unsigned(j * out_step), masked)


def softmax_launch(input, out, dim: int, scale: float, causal: bool) -> RowLaunch:
    """`softmax_row` over dimension `dim` of `input` into `out` (metadata),
    with inputs multiplied by `scale` and, when `causal`, the causal mask
    over the last two dimensions (`dim` then is the last one).

    Computed in float32, float64 when `out` is float64; an input of
    another dtype than `out` is converted first (16-bit outputs round it,
    as ``input.to(dtype)`` would)."""
    ndim = input.ndim
    if ndim == 0:
        shape, in_strides, out_strides = (1,), (1,), (1,)
    else:
        order = [d for d in range(ndim) if d != dim] + [dim]
        shape = tuple(input.shape[d] for d in order)
        in_strides = tuple(input.strides[d] for d in order)
        out_strides = tuple(out.strides[d] for d in order)
    operands = [
        RowOperand(out, out_strides, written=True),
        RowOperand(input, in_strides),
    ]
    narrow = rounding(out.dtype) if input.dtype != out.dtype else identity
    compute = "float64" if out.dtype == "float64" else "float32"
    # The exponentials are kept in `out` when it holds them exactly.
    exps_in_out = out.dtype == compute
    params = (float(scale), input.shape[-2] if causal else 0, exps_in_out)
    return RowLaunch(softmax_row, shape, operands, params, narrow, compute)


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
