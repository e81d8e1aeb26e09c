"""The passes the RMS normalisation row bodies are built from (`rms_norm`,
`add_rms_norm`, `fused_add_rms_norm`; each body is in its operator's file).

An operand is ``(view, step, load, store)`` (`rows.row_kernels`). Sums of
squares run in float32 blocks of `SUM_BLOCK` elements added in float64.
"""

from __future__ import annotations

import numpy as np

from .jit import helper
from .rows import SUM_BLOCK, unsigned


@helper
def sum_squares(source, cols, compute):
    """The sum of the squares of a row, in float64 over float32 blocks (in
    `compute`, the scratch row's type)."""
    view, step, load = source[0], source[1], source[2]
    total = 0.0
    for start in range(0, cols, SUM_BLOCK):
        partial = compute(0)
        for j in range(start, min(start + SUM_BLOCK, cols)):
            value = compute(load(view, unsigned(j * step)))
            partial += value * value
        total += partial
    return total


@helper
def normalize(out, source, weight, cols, total, eps, compute):
    """``out = source / sqrt(total / cols + eps) * weight`` (`source` read
    again: it may be `out` itself, element for element)."""
    out_view, out_step, store_out = out[0], out[1], out[3]
    view, step, load = source[0], source[1], source[2]
    weight_view, weight_step, load_weight = weight[0], weight[1], weight[2]
    scale = compute(1.0 / np.sqrt(total / cols + eps))
    for j in range(cols):
        value = compute(load(view, j * step)) * compute(
            load_weight(weight_view, j * weight_step)
        )
        store_out(out_view, j * out_step, value * scale)


@helper
def add_squares(a, b, sum_out, narrow, cols, compute):
    """Writes ``a + b`` to `sum_out`; returns the sum of the squares of
    the sums passed through `narrow`."""
    a_view, a_step, load_a = a[0], a[1], a[2]
    b_view, b_step, load_b = b[0], b[1], b[2]
    sum_view, sum_step, store_sum = sum_out[0], sum_out[1], sum_out[3]
    total = 0.0
    for start in range(0, cols, SUM_BLOCK):
        partial = compute(0)
        for j in range(start, min(start + SUM_BLOCK, cols)):
            value = compute(load_a(a_view, unsigned(j * a_step))) + compute(
                load_b(b_view, unsigned(j * b_step))
            )
            store_sum(sum_view, unsigned(j * sum_step), value)
            value = compute(narrow(value))
            partial += value * value
        total += partial
    return total


@helper
def normalize_sum(out, a, b, weight, cols, total, eps, compute):
    """``out = (a + b) / sqrt(total / cols + eps) * weight``."""
    out_view, out_step, store_out = out[0], out[1], out[3]
    a_view, a_step, load_a = a[0], a[1], a[2]
    b_view, b_step, load_b = b[0], b[1], b[2]
    weight_view, weight_step, load_weight = weight[0], weight[1], weight[2]
    scale = compute(1.0 / np.sqrt(total / cols + eps))
    for j in range(cols):
        value = compute(load_a(a_view, j * a_step)) + compute(
            load_b(b_view, j * b_step)
        )
        value = value * compute(load_weight(weight_view, j * weight_step))
        store_out(out_view, j * out_step, value * scale)
