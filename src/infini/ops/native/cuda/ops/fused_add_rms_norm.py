"""CUDA-like `fused_add_rms_norm` (slot 0) in Triton, in place on `input`
and `residual`: a tile of rows per program.

``residual = input + residual`` (added in the compute type, rounded to the
dtype), then ``input = residual / sqrt(mean(residual^2) + epsilon) *
weight`` normalising the rounded `residual`. Each element is read before the
program that owns its row writes it. Rows longer than one block take two
passes, the second reading back the rounded `residual` the first wrote. A
`weight` inside the memory of `input` or `residual` is copied first (every
row reads all of it).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.fused_add_rms_norm import FusedAddRmsNorm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_or_zero, round_as, store_as
from infini.ops.native.cuda.rows import RowPlan, row_blocks, row_offsets2
from infini.ops.runtime.triton import Kernel, Pointer, require_device


@triton.jit
def fused_add_rms_norm_kernel(
    input,
    residual,
    weight,
    geometry,
    rows,
    hidden,
    input_row_stride,
    residual_row_stride,
    input_step,
    residual_step,
    weight_step,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    COMPUTE: tl.constexpr,
    EPS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    input_base, residual_base = row_offsets2(
        row, geometry, input_row_stride, residual_row_stride, NDIM
    )
    input_base = input_base[:, None]
    residual_base = residual_base[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if SINGLE:
        mask = row_mask[:, None] & (columns < hidden)
        residual_pointer = residual + residual_base + columns * residual_step
        x = load_or_zero(input + input_base + columns * input_step, mask, COMPUTE)
        r = load_or_zero(residual_pointer, mask, COMPUTE)
        total = round_as(x + r, residual)
        mean_square = tl.sum(total * total, axis=1) / hidden
        scale = (1.0 / tl.sqrt(mean_square + EPS))[:, None]
        result = total * scale
        if HAS_WEIGHT:
            w = load_or_zero(weight + columns * weight_step, columns < hidden, COMPUTE)
            result = result * w
        store_as(residual_pointer, total, mask)
        store_as(input + input_base + columns * input_step, result, mask)
    else:
        squares = tl.zeros([ROWS, BLOCK], dtype=COMPUTE)
        for start in range(0, hidden, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < hidden)
            residual_pointer = residual + residual_base + index * residual_step
            x = load_or_zero(input + input_base + index * input_step, mask, COMPUTE)
            r = load_or_zero(residual_pointer, mask, COMPUTE)
            total = round_as(x + r, residual)
            squares += total * total
            store_as(residual_pointer, total, mask)
        scale = (1.0 / tl.sqrt(tl.sum(squares, axis=1) / hidden + EPS))[:, None]
        # The second pass reads what the first wrote.
        tl.debug_barrier()
        for start in range(0, hidden, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < hidden)
            r = load_or_zero(
                residual + residual_base + index * residual_step, mask, COMPUTE
            )
            result = r * scale
            if HAS_WEIGHT:
                w = load_or_zero(weight + index * weight_step, index < hidden, COMPUTE)
                result = result * w
            store_as(input + input_base + index * input_step, result, mask)


KERNEL = Kernel(fused_add_rms_norm_kernel)


@implementation(
    operator="fused_add_rms_norm",
    devices="cuda_like",
    slot=0,
)
class CudaFusedAddRmsNorm(FusedAddRmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, residual, weight = args.input, args.residual, args.weight
        hidden = input.shape[-1]
        self.plan = plan = RowPlan(
            input.shape[:-1], [input.strides[:-1], residual.strides[:-1]], self.device
        )
        self.empty = plan.rows == 0 or hidden == 0
        per_program, block, single, warps = row_blocks(hidden, plan.rows)
        has_weight = weight is not None
        wide = "float64" in (input.dtype, weight.dtype if has_weight else "")
        self._launch = KERNEL.bind(
            grid=(-(-plan.rows // per_program),),
            arguments=(
                input,
                residual,
                weight if has_weight else Pointer(input.dtype),
                plan.geometry_pointer,
                plan.rows,
                hidden,
                *plan.row_strides,
                input.strides[-1],
                residual.strides[-1],
                weight.strides[0] if has_weight else 0,
            ),
            constexprs={
                "NDIM": plan.ndim,
                "ROWS": per_program,
                "BLOCK": block,
                "SINGLE": single,
                "COMPUTE": tl.float64 if wide else tl.float32,
                "EPS": float(self.epsilon),
                "HAS_WEIGHT": has_weight,
            },
            device=self.device,
            num_warps=warps,
        )
        size = input.element_size
        self.extents = (
            _span(input) * size,
            _span(residual) * size,
            _span(weight) * weight.element_size if has_weight else 0,
        )

    def launch(self, stream, input, residual, weight) -> None:
        if self.empty:
            return
        geometry = self.plan.geometry_or(input)
        if weight is None:
            weight = input
        elif self._weight_overlaps(input, residual, weight):
            with stream_context(self.device, stream):
                weight = weight.clone()
        self._launch(stream, input, residual, weight, geometry)

    def _weight_overlaps(self, input, residual, weight) -> bool:
        input_bytes, residual_bytes, weight_bytes = self.extents
        address = weight.data_ptr()
        for other, nbytes in ((input, input_bytes), (residual, residual_bytes)):
            start = other.data_ptr()
            if address < start + nbytes and start < address + weight_bytes:
                return True
        return False


def _span(meta) -> int:
    """Elements from the first to one past the last element of `meta`."""
    if meta.numel == 0:
        return 0
    return 1 + sum(
        (size - 1) * abs(stride) for size, stride in zip(meta.shape, meta.strides)
    )
