"""CUDA-like `rms_norm` (slot 0) in Triton: one program per row."""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, store_as
from infini.ops.native.cuda.rows import RowPlan, row_blocks, row_offsets2
from infini.ops.runtime.triton import Kernel, OverlapGuard, require_device, staging_like


@triton.jit
def rms_norm_kernel(
    out,
    input,
    weight,
    geometry,
    rows,
    hidden,
    out_row_stride,
    input_row_stride,
    out_step,
    input_step,
    weight_step,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    COMPUTE: tl.constexpr,
    EPS: tl.constexpr,
):
    # A tile of ROWS rows by BLOCK columns; short rows share a program.
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    out_base, input_base = row_offsets2(
        row, geometry, out_row_stride, input_row_stride, NDIM
    )
    out_base = out_base[:, None]
    input_base = input_base[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if SINGLE:
        mask = row_mask[:, None] & (columns < hidden)
        x = load_as(input + input_base + columns * input_step, mask, COMPUTE)
        mean_square = tl.sum(x * x, axis=1) / hidden
        scale = (1.0 / tl.sqrt(mean_square + EPS))[:, None]
        w = load_as(weight + columns * weight_step, columns < hidden, COMPUTE)
        store_as(out + out_base + columns * out_step, x * scale * w, mask)
    else:
        total = tl.zeros([ROWS, BLOCK], dtype=COMPUTE)
        for start in range(0, hidden, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < hidden)
            x = load_as(input + input_base + index * input_step, mask, COMPUTE)
            total += x * x
        scale = (1.0 / tl.sqrt(tl.sum(total, axis=1) / hidden + EPS))[:, None]
        for start in range(0, hidden, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < hidden)
            x = load_as(input + input_base + index * input_step, mask, COMPUTE)
            w = load_as(weight + index * weight_step, index < hidden, COMPUTE)
            store_as(out + out_base + index * out_step, x * scale * w, mask)


KERNEL = Kernel(rms_norm_kernel)


@implementation(
    operator="rms_norm",
    devices="cuda_like",
    slot=0,
)
class CudaRmsNorm(RmsNorm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, weight, out = args.input, args.weight, args.out
        hidden = input.shape[-1]
        self.plan = plan = RowPlan(
            input.shape[:-1], [out.strides[:-1], input.strides[:-1]], self.device
        )
        self.empty = plan.rows == 0 or hidden == 0
        per_program, block, single, warps = row_blocks(hidden, plan.rows)
        wide = input.dtype == "float64"
        self._launch = KERNEL.bind(
            grid=(-(-plan.rows // per_program),),
            arguments=(
                out,
                input,
                weight,
                plan.geometry_pointer,
                plan.rows,
                hidden,
                *plan.row_strides,
                out.strides[-1],
                input.strides[-1],
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
        self.overlap = OverlapGuard(out, (input, weight))

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        geometry = self.plan.geometry_or(out)
        if self.overlap(out, (input, weight)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, input, weight, geometry)
                out.copy_(staging)
            return
        self._launch(stream, out, input, weight, geometry)
