"""CUDA-like `cutlass_scaled_mm` (slot 0, NVIDIA only as in the original) in
Triton: an int8 product with int32 accumulation, then vLLM's epilogue.

A program computes one ``BLOCK_M x BLOCK_N`` tile of `out` with the tiles
of `native/cuda/products.py` (grouped tile order, `tl.dot` on int8 tiles
into an int32 accumulator: IMMA/wgmma on the tensor cores), then, per
element in float32, ``t = scale_b[j] * float(acc)`` and ``scale_a[i] * t +
bias[j]`` as one fused multiply-add, rounded once to `out_dtype`. A
per-tensor scale is read with stride 0; per-row and per-column scales and
the bias with their own strides. Every operand is read in place whatever
its strides (vLLM passes `b` column-major: contiguous along K, as the
kernel streams it). Under Triton's interpreter the epilogue runs in
float64 instead of the fused multiply-add: the product of two float32
values is exact there, so the result is the fused one's, rounded to
float64 and then to float32, as the tests' reference rounds it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.cutlass_scaled_mm import CutlassScaledMm, vector_stride
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda import products
from infini.ops.native.cuda.elementwise import load_or_zero, store_as
from infini.ops.native.cuda.products import grouped_tile, tile_product
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    require_device,
    staging_like,
)


@triton.jit
def scaled_product_kernel(
    out,
    a,
    b,
    scale_a,
    scale_b,
    bias,
    m,
    n,
    k,
    a_row_stride,
    a_depth_stride,
    b_depth_stride,
    b_column_stride,
    out_row_stride,
    out_column_stride,
    scale_a_stride,
    scale_b_stride,
    bias_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    LARGE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EMULATE_FMA: tl.constexpr,
):
    _, tile_m, tile_n = grouped_tile(tl.program_id(0), m, n, BLOCK_M, BLOCK_N, GROUP_M)
    row = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    column = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    if LARGE:
        row = row.to(tl.int64)
        column = column.to(tl.int64)
        depth = depth.to(tl.int64)
    row_mask = row < m
    column_mask = column < n
    a_pointers = a + row[:, None] * a_row_stride + depth[None, :] * a_depth_stride
    b_pointers = b + depth[:, None] * b_depth_stride + column[None, :] * b_column_stride
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32)
    # int8 tiles go to `tl.dot` as they are (the interpreter multiplies them
    # in int32 too).
    acc = tile_product(
        acc, a_pointers, b_pointers, row_mask, column_mask, depth, k,
        a_depth_stride, b_depth_stride, BLOCK_K, EVEN_K, True, tl.int32, "ieee",
    )  # fmt: skip
    row_scale = tl.load(scale_a + row * scale_a_stride, mask=row_mask, other=0.0)
    column_scale = tl.load(
        scale_b + column * scale_b_stride, mask=column_mask, other=0.0
    )
    scaled = column_scale[None, :] * acc.to(tl.float32)
    if HAS_BIAS:
        shift = load_or_zero(bias + column * bias_stride, column_mask, tl.float32)
        if EMULATE_FMA:
            value = (
                row_scale.to(tl.float64)[:, None] * scaled.to(tl.float64)
                + shift.to(tl.float64)[None, :]
            ).to(tl.float32)
        else:
            value = tl.fma(row_scale[:, None], scaled, shift[None, :])
    else:
        value = row_scale[:, None] * scaled
    store_as(
        out + row[:, None] * out_row_stride + column[None, :] * out_column_stride,
        value,
        row_mask[:, None] & column_mask[None, :],
    )


KERNEL = Kernel(scaled_product_kernel)


@implementation(operator="cutlass_scaled_mm", devices=("nvidia",), slot=0)
class CudaCutlassScaledMm(CutlassScaledMm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        a, b, out, bias = args.a, args.b, args.out, args.bias
        scale_a, scale_b = args.scale_a, args.scale_b
        m, k, n = self.m, self.k, self.n
        self.empty = m == 0 or n == 0
        self.overlap = products.OverlapCheck(out, (a, b, scale_a, scale_b, bias))
        config = products.product_config(m, n, k, "int8")
        self.config = config
        layout = products.ProductLayout(
            (), (), (), (), m, n, k, a.strides, b.strides, out.strides,
            transposable=False,
        )  # fmt: skip
        tiles = -(-m // config.block_m) * -(-n // config.block_n)
        if tiles > products.MAX_PROGRAMS:
            raise self.error(
                f"the CUDA-like kernel (slot 0) cannot write `out` {(m, n)}: its "
                f"{tiles} tiles are more programs than one launch holds; split "
                "the call."
            )
        self._launch = KERNEL.bind(
            grid=(tiles,),
            arguments=(
                out,
                a,
                b,
                scale_a,
                scale_b,
                bias if bias is not None else Pointer(self.out_dtype),
                m,
                n,
                k,
                *a.strides,
                *b.strides,
                *out.strides,
                vector_stride(scale_a),
                vector_stride(scale_b),
                vector_stride(bias) if bias is not None else 0,
            ),
            constexprs={
                "BLOCK_M": config.block_m,
                "BLOCK_N": config.block_n,
                "BLOCK_K": config.block_k,
                "GROUP_M": config.group_m,
                "EVEN_K": k % config.block_k == 0,
                "LARGE": layout.large(),
                "HAS_BIAS": bias is not None,
                "EMULATE_FMA": INTERPRETER,
            },
            device=self.device,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )

    def launch(self, stream, a, b, scale_a, scale_b, bias, out) -> None:
        if self.empty:
            return
        inputs = (a, b, scale_a, scale_b, bias)
        if bias is None:
            bias = out
        if self.overlap(out, inputs):
            with stream_context(self.device, stream):
                staging = staging_like(out)
                self._launch(stream, staging, a, b, scale_a, scale_b, bias)
                out.copy_(staging)
            return
        self._launch(stream, out, a, b, scale_a, scale_b, bias)
