"""CUDA-like `moe_wna16_gemm` (slot 0) in Triton: the expert GEMM of a
mixture-of-experts layer on 4- or 8-bit group-quantised weights.

Two launches on the caller's stream:

1. `zero_kernel` zeroes the whole output (entries no block processes stay 0).
2. `wna16_kernel` runs one program per (block of `block_size_m` places of
   `sorted_token_ids`, tile of `BLOCK_N` output columns). A program skips a
   block at or past `num_tokens_post_pad` or of an expert outside
   ``[0, experts)``, keeps the places before the first padding entry, gathers
   their tokens' input rows as an ``(BLOCK_M, BLOCK_K)`` tile, and walks `k`
   in steps of `BLOCK_K` features: it loads the expert's packed codes as an
   ``(BLOCK_N, BLOCK_K)`` byte tile along the contiguous byte dimension (for
   4 bits ``BLOCK_K / 2`` bytes, unpacked low nibble first with `tl.join`),
   subtracts the zero points and multiplies on the tensor cores with float32
   accumulation.

   When `BLOCK_K` divides the group size (the usual case: `BLOCK_K` is the
   largest power of two dividing the group, at most 128), a step lies in one
   quantisation group: the codes minus the zero points are small integers
   (|value| <= 255), exact in float16, bfloat16 and float32, so the product
   takes them as they are and the column's scale multiplies the step's
   partial sums afterwards. The result is the float32 sum of exact products
   scaled once per group, as accurate as the CPU kernel's float32
   dequantisation. For group sizes that are not a multiple of 16, each
   weight is dequantised in float32 (per-feature scale and zero point) and
   fed to the product as the sum of two 16-bit halves (``hi + lo``), which
   holds every bit of ``(code - zero) * scale``.

   float32 activations multiply in IEEE float32 (no TF32). Under Triton's
   interpreter, whose `tl.dot` cannot multiply bfloat16 (stored as integers
   there), bfloat16 operands are widened to float32 first: the operands are
   exact in both types, so the arithmetic is the same.

   Each entry's row is multiplied by its top-k weight (float32) and rounded
   once into ``output[token, slot]``.

`block_size_m` is the tile of `moe_align_block_size`'s layout and sets the
rows a program covers (padded to a power of two, at least 16, for
`tl.dot`); `block_size_n` and `block_size_k` only describe vLLM's launch,
so the tiles here are chosen from the geometry. An output that shares memory
with any input is computed into a staging buffer first (the zeroing pass
would otherwise overwrite inputs before they are read).
"""

from __future__ import annotations

import triton
import triton.language as tl

from infini.ops.base.moe_wna16_gemm import MoeWna16Gemm
from infini.ops.core.geometry import ranges_overlap, span
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.native.cuda.elementwise import store_as
from infini.ops.runtime.triton import (
    INTERPRETER,
    Kernel,
    Pointer,
    next_power_of_two,
    require_device,
    staging_like,
)

# Output columns per program. 64 keeps the dequantised weight tile at 64
# values a thread (four warps) for `BLOCK_K` 128; the interpreter runs a
# program as NumPy steps, so it takes wide tiles.
GPU_BLOCK_N = 64
INTERPRETER_BLOCK_N = 256
# Features per step, at most: a power of two dividing the group size.
GPU_BLOCK_K = 128
INTERPRETER_BLOCK_K = 512
# The step when the group size is not a multiple of 16 (per-feature scales).
GENERIC_BLOCK_K = 64
# The zeroing pass: elements per program.
ZERO_ROWS = 16
ZERO_COLUMNS = 128


@triton.jit
def zero_kernel(
    out,
    rows,
    n,
    top_k,
    out_token,
    out_slot,
    out_column,
    ROWS: tl.constexpr,
    COLUMNS: tl.constexpr,
):
    entry = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    column = tl.program_id(1).to(tl.int64) * COLUMNS + tl.arange(0, COLUMNS)
    token = entry // top_k
    slot = entry - token * top_k
    offsets = (token * out_token + slot * out_slot)[:, None] + column[None, :] * (
        out_column
    )
    mask = (entry < rows)[:, None] & (column < n)[None, :]
    store_as(out + offsets, tl.zeros([ROWS, COLUMNS], dtype=tl.float32), mask)


@triton.jit
def wna16_kernel(
    out,
    input,
    qweight,
    scales,
    zeros,
    topk_weights,
    ids,
    expert_ids,
    post_pad,
    m,
    n,
    k,
    experts,
    top_k,
    ids_count,
    block_m,
    group,
    out_token,
    out_slot,
    out_column,
    input_row,
    input_column,
    qweight_expert,
    qweight_row,
    qweight_byte,
    scales_expert,
    scales_row,
    scales_group,
    zeros_expert,
    zeros_row,
    zeros_group,
    weights_token,
    weights_slot,
    ids_stride,
    experts_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BIT: tl.constexpr,
    HAS_ZEROS: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    PER_BLOCK: tl.constexpr,
    DOT: tl.constexpr,
):
    # The loop body calls no `@triton.jit` helper: the interpreter patches
    # `triton.language` on every helper call, which would dominate its time.
    block = tl.program_id(0).to(tl.int64)
    padded = tl.load(post_pad).to(tl.int64)
    expert = tl.load(expert_ids + block * experts_stride).to(tl.int64)
    if (block * block_m < padded) & (expert >= 0) & (expert < experts):
        r = tl.arange(0, BLOCK_M)
        place = block * block_m + r
        in_block = (r < block_m) & (place < ids_count)
        entry = tl.load(ids + place * ids_stride, mask=in_block, other=-1)
        entry = entry.to(tl.int64)
        # Places are taken up to the first padding entry (vLLM's order).
        bad = (~in_block) | (entry < 0) | (entry >= m * top_k)
        valid = r < tl.min(tl.where(bad, r, BLOCK_M), axis=0)
        entry = tl.where(valid, entry, 0)
        token = entry // top_k
        slot = entry - token * top_k
        column = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        column_mask = column < n
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        rows = input + token[:, None] * input_row
        codes_rows = qweight + expert * qweight_expert + column[:, None] * qweight_row
        scales_rows = scales + expert * scales_expert + column * scales_row
        if BIT == 4:
            zeros_rows = zeros + expert * zeros_expert + (column // 2) * zeros_row
            default_zero = 8
        else:
            zeros_rows = zeros + expert * zeros_expert + column * zeros_row
            default_zero = 128
        # The nibble of a column's 4-bit zero point: low for even columns.
        zero_shift = ((column & 1) * 4).to(tl.int32)
        # int64 index arithmetic in the loop: the interpreter checks every
        # narrower integer sum and product for overflow, at several NumPy
        # steps each.
        feature_step = tl.arange(0, BLOCK_K).to(tl.int64)
        pair_step = tl.arange(0, BLOCK_K // 2).to(tl.int64)
        group_size = tl.cast(group, tl.int64)
        for start in range(0, k, BLOCK_K):
            feature = start + feature_step
            a_mask = valid[:, None]
            if not PER_BLOCK:
                a_mask = a_mask & (feature < k)[None, :]
            a = tl.load(rows + feature[None, :] * input_column, mask=a_mask, other=0)
            if DOT != a.dtype:
                # bfloat16 under the interpreter: widened by moving its bits.
                a = a.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
                a = a.to(tl.float32, bitcast=True)
            # The codes of features `start ...`: a (BLOCK_N, BLOCK_K) tile read
            # along the contiguous byte dimension.
            if BIT == 4:
                pair = start // 2 + pair_step
                code_mask = column_mask[:, None]
                if not PER_BLOCK:
                    code_mask = code_mask & (pair < k // 2)[None, :]
                packed = tl.load(
                    codes_rows + pair[None, :] * qweight_byte, mask=code_mask, other=0
                ).to(tl.int32)
                # Feature 2p is the low nibble of byte p, 2p + 1 the high one.
                codes = tl.reshape(
                    tl.join(packed & 15, packed >> 4), [BLOCK_N, BLOCK_K]
                )
            else:
                code_mask = column_mask[:, None]
                if not PER_BLOCK:
                    code_mask = code_mask & (feature < k)[None, :]
                codes = tl.load(
                    codes_rows + feature[None, :] * qweight_byte,
                    mask=code_mask,
                    other=0,
                ).to(tl.int32)
            if PER_BLOCK:
                # One group per step: exact integer weights, scaled after.
                group_index = start // group_size
                scale = tl.load(
                    scales_rows + group_index * scales_group, mask=column_mask, other=0
                )
                if scale.dtype == tl.bfloat16:
                    scale = scale.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
                    scale = scale.to(tl.float32, bitcast=True)
                else:
                    scale = scale.to(tl.float32)
                if HAS_ZEROS:
                    zero = tl.load(
                        zeros_rows + group_index * zeros_group,
                        mask=column_mask,
                        other=0,
                    ).to(tl.int32)
                    if BIT == 4:
                        zero = (zero >> zero_shift) & 15
                    w = codes.to(tl.float32) - zero.to(tl.float32)[:, None]
                else:
                    w = codes.to(tl.float32) - default_zero
                w = w.to(DOT)
                if DOT == tl.float32:
                    partial = tl.dot(a, tl.trans(w), input_precision="ieee")
                else:
                    partial = tl.dot(a, tl.trans(w))
                acc += partial * scale[None, :]
            else:
                group_index = (feature // group_size)[None, :]
                mask = column_mask[:, None] & (feature < k)[None, :]
                scale = tl.load(
                    scales_rows[:, None] + group_index * scales_group,
                    mask=mask,
                    other=0,
                )
                if scale.dtype == tl.bfloat16:
                    scale = scale.to(tl.uint16, bitcast=True).to(tl.uint32) << 16
                    scale = scale.to(tl.float32, bitcast=True)
                else:
                    scale = scale.to(tl.float32)
                if HAS_ZEROS:
                    zero = tl.load(
                        zeros_rows[:, None] + group_index * zeros_group,
                        mask=mask,
                        other=0,
                    ).to(tl.int32)
                    if BIT == 4:
                        zero = (zero >> zero_shift[:, None]) & 15
                    w = (codes.to(tl.float32) - zero.to(tl.float32)) * scale
                else:
                    w = (codes.to(tl.float32) - default_zero) * scale
                w = tl.where(mask, w, 0.0)
                if DOT == tl.float32:
                    acc = tl.dot(a, tl.trans(w), acc, input_precision="ieee")
                else:
                    # Two 16-bit halves carry every bit of the float32 weight.
                    high = w.to(DOT)
                    low = (w - high.to(tl.float32)).to(DOT)
                    acc = tl.dot(a, tl.trans(high), acc)
                    acc = tl.dot(a, tl.trans(low), acc)
        if HAS_WEIGHTS:
            routing = tl.load(
                topk_weights + token * weights_token + slot * weights_slot,
                mask=valid,
                other=0.0,
            )
            acc = acc * routing[:, None]
        store_as(
            out
            + (token * out_token + slot * out_slot)[:, None]
            + column[None, :] * out_column,
            acc,
            valid[:, None] & column_mask[None, :],
        )


ZERO_KERNEL = Kernel(zero_kernel)
KERNEL = Kernel(wna16_kernel)

TRITON_DTYPE = {"float16": tl.float16, "bfloat16": tl.bfloat16, "float32": tl.float32}


def step_features(group: int, k: int) -> tuple[int, bool]:
    """`(BLOCK_K, PER_BLOCK)`: the largest power of two dividing `group`, at
    most the cap, when it is at least 16 (`tl.dot`'s smallest step), with
    one group per step; otherwise `GENERIC_BLOCK_K` with per-feature
    scales."""
    cap = INTERPRETER_BLOCK_K if INTERPRETER else GPU_BLOCK_K
    step = group & -group
    if step >= 16:
        return min(step, cap), True
    return max(16, min(GENERIC_BLOCK_K, next_power_of_two(k))), False


@implementation(operator="moe_wna16_gemm", devices=("nvidia",), slot=0)
class CudaMoeWna16Gemm(MoeWna16Gemm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        input, output = args.input, args.output
        qweight, scales, zeros = args.b_qweight, args.b_scales, args.b_qzeros
        weights = args.topk_weights
        top_k, n = args.top_k, self.n
        self.rows = self.m * top_k
        if output.ndim == 3:
            out_strides = output.strides
        else:
            out_strides = (top_k * output.strides[0], *output.strides)
        self.zero = ZERO_KERNEL.bind(
            grid=(-(-self.rows // ZERO_ROWS), -(-n // ZERO_COLUMNS)),
            arguments=(output, self.rows, n, top_k, *out_strides),
            constexprs={"ROWS": ZERO_ROWS, "COLUMNS": ZERO_COLUMNS},
            device=self.device,
        )
        block_n_cap = INTERPRETER_BLOCK_N if INTERPRETER else GPU_BLOCK_N
        block_n = min(block_n_cap, max(16, next_power_of_two(n)))
        block_k, per_block = step_features(self.group, self.k)
        dot = TRITON_DTYPE[self.dtype]
        if INTERPRETER and self.dtype == "bfloat16":
            dot = tl.float32
        ids, expert_ids = args.sorted_token_ids, args.expert_ids
        blocks = self.blocks if self.rows and n else 0
        self.product = KERNEL.bind(
            grid=(blocks, -(-n // block_n)),
            arguments=(
                output,
                input,
                qweight,
                scales,
                zeros if zeros is not None else Pointer("uint8"),
                weights if weights is not None else Pointer("float32"),
                ids,
                expert_ids,
                args.num_tokens_post_pad,
                self.m,
                n,
                self.k,
                self.experts,
                top_k,
                ids.shape[0],
                args.block_size_m,
                self.group,
                *out_strides,
                *input.strides,
                *qweight.strides,
                *scales.strides,
                *(zeros.strides if zeros is not None else (0, 0, 0)),
                *(weights.strides if weights is not None else (0, 0)),
                ids.strides[0],
                expert_ids.strides[0],
            ),
            constexprs={
                "BLOCK_M": max(16, next_power_of_two(args.block_size_m)),
                "BLOCK_N": block_n,
                "BLOCK_K": block_k,
                "BIT": args.bit,
                "HAS_ZEROS": zeros is not None,
                "HAS_WEIGHTS": weights is not None,
                "PER_BLOCK": per_block,
                "DOT": dot,
            },
            device=self.device,
        )
        # Bytes each operand reaches, for the overlap test at launch.
        self.out_extent = span(output.shape, output.strides), output.element_size
        self.extents = tuple(
            (0, 1)
            if meta is None
            else (span(meta.shape, meta.strides), meta.element_size)
            for meta in (
                input, qweight, scales, zeros, weights, ids, expert_ids,
                args.num_tokens_post_pad,
            )
        )  # fmt: skip

    def _overlaps(self, output, inputs) -> bool:
        out_span, out_size = self.out_extent
        address = output.data_ptr()
        for tensor, (extent, size) in zip(inputs, self.extents):
            if tensor is not None and ranges_overlap(
                address, out_span, out_size, tensor.data_ptr(), extent, size
            ):
                return True
        return False

    def launch(
        self, stream, input, b_qweight, b_scales, b_qzeros, topk_weights,
        sorted_token_ids, expert_ids, num_tokens_post_pad, output,
    ) -> None:  # fmt: skip
        if self.rows == 0 or self.n == 0:
            return
        inputs = (
            input, b_qweight, b_scales, b_qzeros, topk_weights, sorted_token_ids,
            expert_ids, num_tokens_post_pad,
        )  # fmt: skip
        zeros = b_scales if b_qzeros is None else b_qzeros
        weights = b_scales if topk_weights is None else topk_weights
        tensors = (
            input, b_qweight, b_scales, zeros, weights, sorted_token_ids,
            expert_ids, num_tokens_post_pad,
        )  # fmt: skip
        if not self._overlaps(output, inputs):
            self.zero(stream, output)
            self.product(stream, output, *tensors)
            return
        with stream_context(self.device, stream):
            staging = staging_like(output)
            self.zero(stream, staging)
            self.product(stream, staging, *tensors)
            output.copy_(staging)
