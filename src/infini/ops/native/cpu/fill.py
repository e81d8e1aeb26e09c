"""Filling a tensor with one bit pattern (`fill`, `zeros_infinilm`)."""

from __future__ import annotations

from functools import cache

import numpy as np

from .dtype_io import BITS_DTYPE
from .layout import ElementwisePlan, chunking
from .memory import STORAGE


@cache
def fill_kernels(bits: str):
    """Kernels storing one `bits` pattern (an unsigned type of the element
    size) into every element of a one-operand `ElementwisePlan`: `(serial, parallel)`
    strided, then `(serial, parallel)` contiguous."""
    from numba import prange

    from .jit import kernel
    from .memory import element_array

    storage = STORAGE[bits]

    def run(
        out_address, out_span, inner, offsets, step, chunk_size, chunks, total, value
    ):
        o = element_array(out_address, out_span, storage)
        pattern = storage(value)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            row = start // inner
            first = start - row * inner
            while start < stop:
                count = min(inner - first, stop - start)
                base = offsets[0, row] + first * step
                if step == 1:
                    oc = o[base : base + count]
                    for i in range(count):
                        oc[i] = pattern
                else:
                    ob, os = np.uint64(base), np.uint64(step)
                    for i in range(count):
                        o[ob + np.uint64(i) * os] = pattern
                start += count
                row += 1
                first = 0

    def flat(out_address, total, chunk_size, chunks, value):
        o = element_array(out_address, total, storage)
        pattern = storage(value)
        for chunk in prange(chunks):
            start = chunk * chunk_size
            stop = min(start + chunk_size, total)
            oc = o[start:stop]
            for i in range(stop - start):
                oc[i] = pattern

    return (
        kernel(run),
        kernel(run, parallel=True),
        kernel(flat),
        kernel(flat, parallel=True),
    )


class FillLaunch:
    """Writes one bit pattern into every element of tensors laid out as
    `out`; `value` is the pattern as a `numpy.uint64` (see `bits_of`)."""

    def __init__(self, out) -> None:
        self.plan = plan = ElementwisePlan(out.shape, [tuple(out.strides)])
        self.numel = plan.numel
        self.chunk_size, self.chunks = chunking(plan)
        self.total = plan.rows * plan.inner
        self.flat = plan.rows == 1 and plan.inner_strides == (1,)
        kernels = fill_kernels(BITS_DTYPE[out.element_size])
        parallel = self.chunks > 1
        if self.flat:
            self.kernel = kernels[3] if parallel else kernels[2]
        else:
            self.kernel = kernels[1] if parallel else kernels[0]

    def __call__(self, out_address: int, value) -> None:
        if self.numel == 0:
            return
        if self.flat:
            self.kernel(out_address, self.total, self.chunk_size, self.chunks, value)
            return
        plan = self.plan
        self.kernel(
            out_address,
            plan.spans[0],
            plan.inner,
            plan.row_offsets,
            plan.inner_strides[0],
            self.chunk_size,
            self.chunks,
            self.total,
            value,
        )


def bits_of(tensor) -> np.uint64:
    """The bit pattern of the single element of `tensor` (a torch tensor),
    zero-extended (one kernel signature whatever the pattern)."""
    import torch

    size = tensor.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return np.uint64(int(tensor.reshape(1).view(view)[0]) % (1 << (8 * size)))
