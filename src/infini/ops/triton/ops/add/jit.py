"""Triton JIT `add` (slot 10, NVIDIA): a masked elementwise add.

As in the original (docs/behaviour.md, "Triton JIT backend"): all tensors contiguous
with one shape and `alpha` 1; here anything else is a `ValueError` rather than a silent
no-op. Default config: 4 warps, 3 stages, ``BLOCK_SIZE=1024``; the tuning value is
`num_elements`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.add import Add
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.runtime.triton import OverlapGuard, staging_like
from infini.ops.triton.jit.operator import TritonJitOperator


@triton.jit
def kernel(input_ptr, other_ptr, output_ptr, num_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < num_elements
    x = tl.load(input_ptr + offsets, mask=mask)
    y = tl.load(other_ptr + offsets, mask=mask)
    # Self-contained (no helper calls); 16-bit floats add in float32 and
    # round once, bfloat16 by its bits (exact on GPUs and the interpreter).
    if x.dtype == tl.bfloat16:
        x32 = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
            tl.float32, bitcast=True
        )
        y32 = (y.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(
            tl.float32, bitcast=True
        )
        total = x32 + y32
        bits = total.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        upper = tl.where(total != total, 0x7FC0, rounded)
        result = upper.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    elif x.dtype == tl.float16:
        result = (x.to(tl.float32) + y.to(tl.float32)).to(tl.float16)
    elif x.dtype == tl.int1:
        result = x | y
    else:
        result = x + y
    tl.store(output_ptr + offsets, result, mask=mask)


@implementation(operator="add", devices=("nvidia",), slot=10)
class TritonJitAdd(Add, TritonJitOperator):
    kernel = kernel
    default_constexprs = {"BLOCK_SIZE": 1024}
    written = (2,)

    def __init__(self, args) -> None:
        super().__init__(args)
        input, other, out = args.input, args.other, args.out
        for name, meta in (("input", input), ("other", other), ("out", out)):
            if tuple(meta.shape) != tuple(out.shape):
                raise self.error(
                    "the Triton JIT implementation (slot 10) needs `input`, "
                    f"`other` and `out` of one shape (no broadcasting); `{name}` "
                    f"is {tuple(meta.shape)}, `out` is {tuple(out.shape)}."
                )
            if not meta.is_contiguous():
                raise self.error(
                    f"the Triton JIT implementation (slot 10) needs contiguous "
                    f"tensors; `{name}` has strides {meta.strides}."
                )
        if self.alpha != 1:
            raise self.error(
                "the Triton JIT implementation (slot 10) supports only `alpha` 1, "
                f"got {self.alpha}."
            )
        numel = out.numel
        self.empty = numel == 0
        self.overlap = OverlapGuard(out, (input, other))
        self.setup_jit(
            getattr(args, "config", None),
            arguments=(input, other, out, numel),
            tuning_values={"num_elements": numel},
            grid=lambda constexprs: (-(-numel // constexprs["BLOCK_SIZE"]),),
        )

    def launch(self, stream, input, other, out) -> None:
        if self.empty:
            return
        if self.overlap(out, (input, other)):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self.launch_jit(stream, input, other, staging)
                out.copy_(staging)
            return
        self.launch_jit(stream, input, other, out)
