"""CUDA-like `add_rms_norm` (slot 0) in Triton: a tile of rows per program.

``residual_out = input + residual`` (added in the compute type, rounded
once), ``out = (input + residual) / sqrt(mean((input + residual)^2) + eps)
* weight`` normalising the unrounded sum. Rows longer than one block take
two passes, the second adding the inputs again; `residual_out` is then
staged when it overlaps an input (the first pass would overwrite what the
second reads).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.add_rms_norm import AddRmsNorm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_or_zero, store_as
from infini.ops.native.cuda.rows import RowPlan, row_blocks, row_offsets4
from infini.ops.runtime.triton import Kernel, OverlapGuard, require_device, staging_like


@triton.jit
def add_rms_norm_kernel(
    out,
    residual_out,
    input,
    residual,
    weight,
    geometry,
    rows,
    hidden,
    out_row_stride,
    residual_out_row_stride,
    input_row_stride,
    residual_row_stride,
    out_step,
    residual_out_step,
    input_step,
    residual_step,
    weight_step,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    COMPUTE: tl.constexpr,
    EPS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    out_base, residual_out_base, input_base, residual_base = row_offsets4(
        row,
        geometry,
        out_row_stride,
        residual_out_row_stride,
        input_row_stride,
        residual_row_stride,
        NDIM,
    )
    out_base = out_base[:, None]
    residual_out_base = residual_out_base[:, None]
    input_base = input_base[:, None]
    residual_base = residual_base[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if SINGLE:
        mask = row_mask[:, None] & (columns < hidden)
        x = load_or_zero(input + input_base + columns * input_step, mask, COMPUTE)
        r = load_or_zero(
            residual + residual_base + columns * residual_step, mask, COMPUTE
        )
        total = x + r
        mean_square = tl.sum(total * total, axis=1) / hidden
        scale = (1.0 / tl.sqrt(mean_square + EPS))[:, None]
        w = load_or_zero(weight + columns * weight_step, columns < hidden, COMPUTE)
        store_as(
            residual_out + residual_out_base + columns * residual_out_step, total, mask
        )
        store_as(out + out_base + columns * out_step, total * scale * w, mask)
    else:
        squares = tl.zeros([ROWS, BLOCK], dtype=COMPUTE)
        for start in range(0, hidden, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < hidden)
            x = load_or_zero(input + input_base + index * input_step, mask, COMPUTE)
            r = load_or_zero(
                residual + residual_base + index * residual_step, mask, COMPUTE
            )
            total = x + r
            squares += total * total
            store_as(
                residual_out + residual_out_base + index * residual_out_step,
                total,
                mask,
            )
        scale = (1.0 / tl.sqrt(tl.sum(squares, axis=1) / hidden + EPS))[:, None]
        for start in range(0, hidden, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < hidden)
            x = load_or_zero(input + input_base + index * input_step, mask, COMPUTE)
            r = load_or_zero(
                residual + residual_base + index * residual_step, mask, COMPUTE
            )
            w = load_or_zero(weight + index * weight_step, index < hidden, COMPUTE)
            store_as(out + out_base + index * out_step, (x + r) * scale * w, mask)


KERNEL = Kernel(add_rms_norm_kernel)


@implementation(
    operator="add_rms_norm",
    devices="cuda_like",
    slot=0,
)
class CudaAddRmsNorm(AddRmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, residual, weight = args.input, args.residual, args.weight
        out, residual_out = args.out, args.residual_out
        hidden = input.shape[-1]
        self.plan = plan = RowPlan(
            input.shape[:-1],
            [
                out.strides[:-1],
                residual_out.strides[:-1],
                input.strides[:-1],
                residual.strides[:-1],
            ],
            self.device,
        )
        self.empty = plan.rows == 0 or hidden == 0
        per_program, block, single, warps = row_blocks(hidden, plan.rows)
        wide = "float64" in (input.dtype, weight.dtype)
        self._launch = KERNEL.bind(
            grid=(-(-plan.rows // per_program),),
            arguments=(
                out,
                residual_out,
                input,
                residual,
                weight,
                plan.geometry_pointer,
                plan.rows,
                hidden,
                *plan.row_strides,
                out.strides[-1],
                residual_out.strides[-1],
                input.strides[-1],
                residual.strides[-1],
                weight.strides[0],
            ),
            constexprs={
                "NDIM": plan.ndim,
                "ROWS": per_program,
                "BLOCK": block,
                "SINGLE": single,
                "COMPUTE": tl.float64 if wide else tl.float32,
                "EPS": float(self.eps),
            },
            device=self.device,
            num_warps=warps,
        )
        self.out_overlap = OverlapGuard(out, (input, residual, weight))
        # Two passes read the inputs twice: any overlap of `residual_out`
        # with them is staged, even element for element.
        self.two_passes = not single
        self.residual_overlap = OverlapGuard(residual_out, (input, residual, weight))

    def _stages_residual(self, residual_out, inputs) -> bool:
        if not self.two_passes:
            return self.residual_overlap(residual_out, inputs)
        start = residual_out.data_ptr()
        end = start + self.residual_overlap.guard.out_bytes
        for tensor, (nbytes, _) in zip(inputs, self.residual_overlap.guard.inputs):
            address = tensor.data_ptr()
            if address < end and start < address + nbytes:
                return True
        return False

    def launch(self, stream, input, residual, weight, out, residual_out) -> None:
        if self.empty:
            return
        geometry = self.plan.geometry_or(out)
        inputs = (input, residual, weight)
        stage_out = self.out_overlap(out, inputs)
        stage_residual = self._stages_residual(residual_out, inputs)
        if not (stage_out or stage_residual):
            self._launch(stream, out, residual_out, *inputs, geometry)
            return
        with stream_context(self.device, stream):
            out_target = staging_like(out) if stage_out else out
            residual_target = (
                staging_like(residual_out) if stage_residual else residual_out
            )
            self._launch(stream, out_target, residual_target, *inputs, geometry)
            if stage_out:
                out.copy_(out_target)
            if stage_residual:
                residual_out.copy_(residual_target)
