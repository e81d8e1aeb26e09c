"""CUDA-like `silu_and_mul` (slot 0):
``out = silu(input[..., :h]) * input[..., h:]``.

When the last dimension of `input` and of `out` is contiguous (the usual
case), a row kernel runs: the leading dimensions are the rows (`RowPlan`,
any strides), a program takes a ``[ROWS, BLOCK]`` tile of rows by columns of
`out`, and reads the two halves of `input` at ``column`` and ``h + column``
of its rows. Within a row the addresses are provably consecutive, so
aligned rows are read and written with 128-bit accesses. Other layouts run
the gated elementwise template, which walks `out` in the order of its
strides (one index per element, through the geometry table: `input` and
`out` rows never merge into one dimension, since `input`'s rows are twice as
long).

Either way the arithmetic runs in float32 (float64 for float64) and is
rounded once; an `out` overlapping `input` other than element for element is
written through a staging buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import (
    GatedElementwise,
    compute_type,
    load_as,
    store_as,
)
from infini.ops.native.cuda.rows import RowPlan, row_offsets2
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
)

# Elements of `out` per program of the row kernel: 2048 keeps four warps
# busy with 128-bit accesses on GPUs; the interpreter runs a program as
# NumPy steps, so fewer, larger ones.
GPU_TILE = 2048
GPU_BLOCK_LIMIT = 1024
INTERPRETER_TILE = 32768


@triton.jit
def silu_and_mul(x, y):
    return (x / (1.0 + tl.exp(-x))) * y


@triton.jit
def gated_rows_kernel(
    out,
    input,
    geometry,
    rows,
    half,
    out_row_stride,
    input_row_stride,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    COMPUTE: tl.constexpr,
    FUNCTION: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    out_base, input_base = row_offsets2(
        row, geometry, out_row_stride, input_row_stride, NDIM
    )
    column = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :]
    mask = (row < rows)[:, None] & (column < half)
    first = input + input_base[:, None] + column
    x = load_as(first, mask, COMPUTE)
    y = load_as(first + half, mask, COMPUTE)
    store_as(out + out_base[:, None] + column, FUNCTION(x, y), mask)


ROWS_KERNEL = Kernel(gated_rows_kernel)


def row_tile(half: int, rows: int) -> tuple[int, int]:
    """`(ROWS, BLOCK)` of the row kernel for `rows` rows of `half` outputs."""
    if INTERPRETER:
        block = min(max(next_power_of_two(half), 16), INTERPRETER_TILE)
        tile = INTERPRETER_TILE
    else:
        block = min(max(next_power_of_two(half), 16), GPU_BLOCK_LIMIT)
        tile = GPU_TILE
    return max(1, min(tile // block, next_power_of_two(max(rows, 1)))), block


class GatedRows:
    """The row kernel of ``out = function(input[..., :h], input[..., h:])``
    planned for one geometry (shared by the gated activations:
    `gelu_tanh_and_mul` too); called as the operator's `launch`
    (``launch(stream, input, out)``)."""

    def __init__(self, operator, out, input, function) -> None:
        require_device(operator.name, operator.device)
        self.device = operator.device
        half = out.shape[-1]
        self.plan = plan = RowPlan(
            out.shape[:-1], [out.strides[:-1], input.strides[:-1]], self.device
        )
        self.empty = plan.rows == 0 or half == 0
        per_program, block = row_tile(half, plan.rows)
        self._launch = ROWS_KERNEL.bind(
            grid=(-(-plan.rows // per_program), -(-half // block)),
            arguments=(
                out,
                input,
                plan.geometry_pointer,
                plan.rows,
                half,
                *plan.row_strides,
            ),
            constexprs={
                "NDIM": plan.ndim,
                "ROWS": per_program,
                "BLOCK": block,
                "COMPUTE": compute_type(out.dtype),
                "FUNCTION": function,
            },
            device=self.device,
        )
        self.overlap = OverlapGuard(out, (input,))

    def __call__(self, stream: int, input, out) -> None:
        if self.empty:
            return
        geometry = self.plan.geometry_or(out)
        if self.overlap(out, (input,)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, input, geometry)
                out.copy_(staging)
            return
        self._launch(stream, out, input, geometry)


@implementation(operator="silu_and_mul", devices="cuda_like", slot=0)
class CudaSiluAndMul(SiluAndMul):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, out = args.input, args.out
        if input.strides[-1] == 1 and out.strides[-1] == 1:
            self.launch = GatedRows(self, out, input, silu_and_mul)
        else:
            self.launch = GatedElementwise(self, out, input, silu_and_mul)
