"""NineToothed `rms_norm` (slot 9, NVIDIA): one row per program.

Arrangement: the last dimension of `input`, `weight` (expanded to `input`'s
shape with stride-0 views) and `out` is cut into blocks of ``block``
elements, and each program gets every block of one row. Application: the
sum of squares over the blocks, then the scaled product written block by
block. Any rank, any strides, float32/float64/float16/bfloat16, a `weight`
of another float dtype; 16-bit floats are computed in float32. The kernel
does not depend on the row length, so one compiled kernel per rank, dtypes
and block size serves every shape (the ahead-of-time variants).
"""

from __future__ import annotations

import ninetoothed.language as ntl
import triton.language as tl

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.ninetoothed.generation import TensorSpec, kernel_source
from infini.ops.ninetoothed.language import upcast
from infini.ops.ninetoothed.launch import bind_kernel, tensor_operand
from infini.ops.runtime.triton import (
    INTERPRETER,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
)

# Columns per block: the row length rounded up to a power of two, between
# these bounds (the interpreter runs a block as one NumPy step).
MIN_BLOCK = 16
MAX_BLOCK = 4096 if not INTERPRETER else 16384


def arrangement(input, weight, eps, hidden, out, compute, *, block):
    leading = input.ndim - 1

    def rows(tensor):
        # (rows..., blocks) of (block,) tiles, then one row of blocks per program.
        tiled = tensor.tile((1,) * leading + (block,))
        tiled = tiled.tile((1,) * leading + (-1,))
        tiled.dtype = tiled.dtype.squeeze(tuple(range(leading)))
        tiled.dtype.dtype = tiled.dtype.dtype.squeeze(tuple(range(leading)))
        return tiled

    return rows(input), rows(weight), eps, hidden, rows(out), compute


def application(input, weight, eps, hidden, out, compute):
    total = ntl.zeros(input.dtype.shape, dtype=compute)
    for index in range(input.shape[0]):
        x = upcast(input[index])
        total += x * x
    scale = 1.0 / ntl.sqrt(ntl.sum(total) / hidden + eps)
    for index in range(input.shape[0]):
        x = upcast(input[index])
        w = upcast(weight[index])
        out[index] = x * scale * w


def specs(ndim: int) -> tuple[TensorSpec, ...]:
    return (
        TensorSpec("input", ndim, other=0),
        TensorSpec("weight", ndim, other=0),
        TensorSpec("eps", 0),
        TensorSpec("hidden", 0),
        TensorSpec("out", ndim),
        TensorSpec("compute", 0, constexpr=True),
    )


def source(ndim: int, block: int):
    return kernel_source(
        "rms_norm", arrangement, application, specs(ndim), {"block": block}
    )


@implementation(operator="rms_norm", devices=("nvidia",), slot=9)
class NineToothedRmsNorm(RmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, weight, out = args.input, args.weight, args.out
        hidden = input.shape[-1]
        self.empty = input.numel == 0
        # A 1-D input is one row: the kernel sees a (1, hidden) view.
        shape = tuple(input.shape) if input.ndim > 1 else (1, hidden)
        input_strides = (
            tuple(input.strides) if input.ndim > 1 else (0,) + tuple(input.strides)
        )
        out_strides = tuple(out.strides) if out.ndim > 1 else (0,) + tuple(out.strides)
        weight_strides = (0,) * (len(shape) - 1) + (weight.strides[0],)
        block = min(max(next_power_of_two(hidden), MIN_BLOCK), MAX_BLOCK)
        if self.empty:
            return
        self._launch = bind_kernel(
            source(len(shape), block),
            {
                "input": tensor_operand(input, shape, input_strides),
                "weight": tensor_operand(weight, shape, weight_strides),
                "eps": float(self.eps),
                "hidden": hidden,
                "out": tensor_operand(out, shape, out_strides),
                "compute": tl.float64 if input.dtype == "float64" else tl.float32,
            },
            self.device,
            num_warps=4 if block <= 1024 else 8,
        )
        self.overlap = OverlapGuard(out, (input, weight))

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (input, weight)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, input, weight, staging)
                out.copy_(staging)
            return
        self._launch(stream, input, weight, out)
