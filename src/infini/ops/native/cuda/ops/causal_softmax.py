"""CUDA-like `causal_softmax` (slot 0) in Triton: a tile of rows per program.

Row ``r`` of the flattened ``(..., q, k)`` input is query ``i = r % q``; its
columns ``j <= i + (k - q)`` take part, the rest are written as 0 (NaN when
the row is NaN, as torch computes it). Rows longer than one block run an
online maximum and sum, then a second pass writes.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.causal_softmax import CausalSoftmax
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import load_as, store_as
from infini.ops.native.cuda.rows import RowPlan, row_blocks, row_offsets2
from infini.ops.runtime.triton import Kernel, OverlapGuard, require_device, staging_like


@triton.jit
def causal_softmax_kernel(
    out,
    input,
    geometry,
    rows,
    queries,
    keys,
    out_row_stride,
    input_row_stride,
    out_step,
    input_step,
    NDIM: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    COMPUTE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = row < rows
    out_base, input_base = row_offsets2(
        row, geometry, out_row_stride, input_row_stride, NDIM
    )
    out_base = out_base[:, None]
    input_base = input_base[:, None]
    # The last column row `row` may attend to.
    limit = (row % queries + (keys - queries))[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if SINGLE:
        mask = row_mask[:, None] & (columns < keys)
        x = load_as(input + input_base + columns * input_step, mask, COMPUTE)
        x = tl.where(mask & (columns <= limit), x, -float("inf"))
        maximum = tl.max(x, axis=1)[:, None]
        exponent = tl.exp(x - maximum)
        total = tl.sum(tl.where(columns < keys, exponent, 0.0), axis=1)[:, None]
        # `total * 0` keeps masked elements NaN in a NaN row, 0 otherwise.
        result = tl.where(columns <= limit, exponent / total, total * 0.0)
        store_as(out + out_base + columns * out_step, result, mask)
    else:
        maximum = tl.full([ROWS, 1], -float("inf"), COMPUTE)
        total = tl.zeros([ROWS, 1], dtype=COMPUTE)
        for start in range(0, keys, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < keys)
            x = load_as(input + input_base + index * input_step, mask, COMPUTE)
            x = tl.where(mask & (index <= limit), x, -float("inf"))
            chunk_maximum = tl.maximum(maximum, tl.max(x, axis=1)[:, None])
            # The first chunk always holds a valid column unless the whole
            # row is masked (then the row is NaN, as the reference says).
            rescale = tl.where(
                chunk_maximum == maximum, 1.0, tl.exp(maximum - chunk_maximum)
            )
            exponent = tl.where(index < keys, tl.exp(x - chunk_maximum), 0.0)
            total = total * rescale + tl.sum(exponent, axis=1)[:, None]
            maximum = chunk_maximum
        for start in range(0, keys, BLOCK):
            index = start + columns
            mask = row_mask[:, None] & (index < keys)
            x = load_as(input + input_base + index * input_step, mask, COMPUTE)
            result = tl.where(index <= limit, tl.exp(x - maximum) / total, total * 0.0)
            store_as(out + out_base + index * out_step, result, mask)


KERNEL = Kernel(causal_softmax_kernel)


@implementation(
    operator="causal_softmax",
    devices="cuda_like",
    slot=0,
)
class CudaCausalSoftmax(CausalSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, out = args.input, args.out
        queries, keys = input.shape[-2], input.shape[-1]
        self.plan = plan = RowPlan(
            input.shape[:-1], [out.strides[:-1], input.strides[:-1]], self.device
        )
        self.empty = plan.rows == 0 or keys == 0
        per_program, block, single, warps = row_blocks(keys, plan.rows)
        wide = input.dtype == "float64"
        self._launch = KERNEL.bind(
            grid=(-(-plan.rows // per_program),),
            arguments=(
                out,
                input,
                plan.geometry_pointer,
                plan.rows,
                max(queries, 1),
                keys,
                *plan.row_strides,
                out.strides[-1],
                input.strides[-1],
            ),
            constexprs={
                "NDIM": plan.ndim,
                "ROWS": per_program,
                "BLOCK": block,
                "SINGLE": single,
                "COMPUTE": tl.float64 if wide else tl.float32,
            },
            device=self.device,
            num_warps=warps,
        )
        self.overlap = OverlapGuard(out, (input,))

    def launch(self, stream, input, out) -> None:
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
