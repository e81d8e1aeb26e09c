"""CUDA-like `ggml_dequantize` (slot 0) in Triton: GGML block-quantised
weights (GGUF) to float32, float16 or bfloat16.

Each program dequantises a (rows x 512 values) tile, as many rows as make
2048 values: the per-type group helper of `infini.ops.native.cuda.ggml` loads
each group's code bytes as one contiguous run (vector loads as wide as the
block layout and the row stride's alignment allow), unpacks them with shifts
and masks and scales them with the block's float16 factors; the values come
out in column order, are rounded once to `out`'s dtype and stored as
contiguous row segments. The float32 arithmetic is llama.cpp's reference
order with no fused multiply-add, so float32 results equal
`gguf.quants.dequantize` bit for bit. An `out` overlapping `weight` is
computed into a staging buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.ggml_dequantize import GgmlDequantize
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import store_as
from infini.ops.native.cuda.ggml import (
    group_constexprs,
    groups_per_step,
    tile_values,
    weight_row_stride,
    weight_values,
)
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    OverlapGuard,
    next_power_of_two,
    require_device,
    staging_like,
)


@triton.jit
def ggml_dequantize_kernel(
    out,
    weight,
    one,
    rows,
    groups,
    weight_stride,
    out_stride,
    TYPE: tl.constexpr,
    GROUP: tl.constexpr,
    PER_BLOCK: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    OFFSET: tl.constexpr,
    STRIDE_ALIGN: tl.constexpr,
    ROWS: tl.constexpr,
    STEP: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    first = tl.program_id(1) * STEP
    values = weight_values(
        weight,
        row * weight_stride * STRIDE_ALIGN,
        row_mask,
        first,
        groups,
        one,
        STEP,
        TYPE,
        GROUP,
        PER_BLOCK,
        BLOCK_BYTES,
        OFFSET,
        True,
    )
    index = first + tl.arange(0, STEP)
    column = (index * GROUP)[None, :, None] + tl.arange(0, GROUP)[None, None, :]
    mask = (row_mask[:, None] & (index < groups)[None, :])[:, :, None]
    store_as(out + (row * out_stride)[:, None, None] + column, values, mask)


KERNEL = Kernel(ggml_dequantize_kernel)


@implementation(operator="ggml_dequantize", devices="cuda_like", slot=0)
class CudaGgmlDequantize(GgmlDequantize):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        weight, out = args.weight, args.out
        geometry = group_constexprs(args.quant_type)
        stride_units, alignment = weight_row_stride(weight)
        group = geometry["GROUP"]
        groups = self.cols // group
        # 512 values of a row per program (256 under the interpreter, so that
        # tests have several column tiles), as many rows as make a tile.
        step = groups_per_step(group, groups, 256 if INTERPRETER else 512)
        per_program = max(1, tile_values() // (step * group))
        per_program = min(per_program, next_power_of_two(self.rows))
        self.empty = self.rows == 0
        self._launch = KERNEL.bind(
            grid=(-(-self.rows // per_program), -(-groups // step)),
            arguments=(
                out,
                weight,
                1.0,
                self.rows,
                groups,
                stride_units,
                out.strides[0],
            ),
            constexprs={**geometry, **alignment, "ROWS": per_program, "STEP": step},
            device=self.device,
        )
        self.overlap = OverlapGuard(out, (weight,))

    def launch(self, stream, weight, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (weight,)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, weight)
                out.copy_(staging)
            return
        self._launch(stream, out, weight)
