"""CPU `moe_wna16_gemm` (slot 0): parallel over (token block, column chunk)
tasks. A task widens its block's input rows to float32 once, then for each
of its output columns dequantises that column of the block's expert from the
packed codes into a float32 row (one row of one expert: no dequantised copy
of the weights is kept) and takes its dot product with every row."""

from __future__ import annotations

from functools import cache

import numba
import numpy as np
from numba import prange

from infini.ops.base.moe_wna16_gemm import MoeWna16Gemm
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.dtype_io import loader, storer
from infini.ops.native.cpu.jit import kernel
from infini.ops.native.cpu.memory import STORAGE, element_array

# Output columns per task, at most: enough work to amortise widening the
# block's input rows.
MAX_COLUMN_CHUNK = 64


def _reach(shape, strides) -> int:
    """Elements a view spans from its first one (0 when it is empty)."""
    return span(shape, strides)


@cache
def wna16_kernel(dtype: str, index_dtype: str, bit: int, zeros: bool, weights: bool):
    """``run(...)`` on addresses and strides in elements (see the call in
    `CpuMoeWna16Gemm.launch`)."""
    storage = STORAGE[dtype]
    index = STORAGE[index_dtype]
    load = loader(dtype)
    store = storer(dtype)
    default_zero = 8 if bit == 4 else 128

    @kernel(parallel=True, fastmath={"reassoc", "contract"})
    def run(
        out_address, out_reach, out_token, out_slot, out_column,
        input_address, input_reach, input_row, input_column,
        codes_address, codes_reach, codes_expert, codes_row, codes_byte,
        scales_address, scales_reach, scales_expert, scales_row, scales_group,
        zeros_address, zeros_reach, zeros_expert, zeros_row, zeros_group,
        weights_address, weights_reach, weights_token, weights_slot,
        ids_address, ids_count, ids_stride, experts_address, experts_stride,
        post_pad_address, m, k, n, experts, top_k, group, groups, block_m,
        blocks, column_chunk,
    ):  # fmt: skip
        out = element_array(out_address, out_reach, storage)
        input = element_array(input_address, input_reach, storage)
        codes = element_array(codes_address, codes_reach, np.uint8)
        scales = element_array(scales_address, scales_reach, storage)
        zero_codes = element_array(zeros_address, zeros_reach, np.uint8)
        routing = element_array(weights_address, weights_reach, np.float32)
        ids = element_array(ids_address, ids_count * ids_stride, index)
        block_experts = element_array(experts_address, blocks * experts_stride, index)
        post_pad = element_array(post_pad_address, 1, index)[0]
        for row in prange(m * top_k):
            token = row // top_k
            slot = row - token * top_k
            for column in range(n):
                store(
                    out, token * out_token + slot * out_slot + column * out_column, 0.0
                )
        active = min(blocks, (max(post_pad, 0) + block_m - 1) // block_m)
        chunks = (n + column_chunk - 1) // column_chunk
        for task in prange(active * chunks):
            block = task // chunks
            chunk = task - block * chunks
            expert = block_experts[block * experts_stride]
            if expert < 0 or expert >= experts:
                continue
            entries = np.empty(block_m, np.int64)
            count = 0
            for r in range(block_m):
                place = block * block_m + r
                if place >= ids_count:
                    break
                entry = ids[place * ids_stride]
                if entry < 0 or entry // top_k >= m:
                    break
                entries[count] = entry
                count += 1
            if count == 0:
                continue
            rows = np.empty((count, k), np.float32)
            for r in range(count):
                start = (entries[r] // top_k) * input_row
                for p in range(k):
                    rows[r, p] = load(input, start + p * input_column)
            weight = np.empty(k, np.float32)
            first = chunk * column_chunk
            for column in range(first, min(n, first + column_chunk)):
                codes_start = expert * codes_expert + column * codes_row
                scales_start = expert * scales_expert + column * scales_row
                for g in range(groups):
                    scale = load(scales, scales_start + g * scales_group)
                    zero = default_zero
                    if zeros:
                        if bit == 4:
                            byte = zero_codes[
                                expert * zeros_expert
                                + (column // 2) * zeros_row
                                + g * zeros_group
                            ]
                            zero = (np.int32(byte) >> ((column & 1) * 4)) & 15
                        else:
                            zero = np.int32(
                                zero_codes[
                                    expert * zeros_expert
                                    + column * zeros_row
                                    + g * zeros_group
                                ]
                            )
                    if bit == 4:
                        for pair in range(g * group // 2, (g + 1) * group // 2):
                            byte = np.int32(codes[codes_start + pair * codes_byte])
                            weight[2 * pair] = np.float32((byte & 15) - zero) * scale
                            weight[2 * pair + 1] = (
                                np.float32((byte >> 4) - zero) * scale
                            )
                    else:
                        for p in range(g * group, (g + 1) * group):
                            code = np.int32(codes[codes_start + p * codes_byte])
                            weight[p] = np.float32(code - zero) * scale
                for r in range(count):
                    total = np.float32(0.0)
                    for p in range(k):
                        total += rows[r, p] * weight[p]
                    entry = entries[r]
                    token = entry // top_k
                    slot = entry - token * top_k
                    if weights:
                        total *= routing[token * weights_token + slot * weights_slot]
                    store(
                        out,
                        token * out_token + slot * out_slot + column * out_column,
                        total,
                    )
        return 0

    return run


@cache
def scatter_kernel(dtype: str):
    """Copies a packed ``(rows, n)`` result into the output's strides."""
    storage = STORAGE[dtype]

    @kernel
    def run(out_address, out_reach, out_token, out_slot, out_column, source_address,
            top_k, rows, n):  # fmt: skip
        out = element_array(out_address, out_reach, storage)
        source = element_array(source_address, rows * n, storage)
        for row in range(rows):
            token = row // top_k
            slot = row - token * top_k
            for column in range(n):
                out[token * out_token + slot * out_slot + column * out_column] = source[
                    row * n + column
                ]
        return 0

    return run


@implementation(operator="moe_wna16_gemm", devices=("cpu",), slot=0)
class CpuMoeWna16Gemm(MoeWna16Gemm):
    def __init__(self, args) -> None:
        super().__init__(args)
        output = args.output
        self.top_k = args.top_k
        if output.ndim == 3:
            self.out_strides = output.strides
        else:
            row, column = output.strides
            self.out_strides = (row * self.top_k, row, column)
        self.views = {}
        for name in ("output", "input", "b_qweight", "b_scales", "b_qzeros"):
            meta = getattr(args, name)
            if meta is not None:
                self.views[name] = (_reach(meta.shape, meta.strides), meta.strides)
        weights = args.topk_weights
        self.weights_view = (
            (0, (0, 0))
            if weights is None
            else (_reach(weights.shape, weights.strides), weights.strides)
        )
        self.ids = (args.sorted_token_ids.shape[0], args.sorted_token_ids.strides[0])
        self.experts_stride = args.expert_ids.strides[0]
        self.block_m = args.block_size_m
        threads = numba.get_num_threads()
        self.column_chunk = max(
            1, min(MAX_COLUMN_CHUNK, -(-self.n // max(1, 4 * threads)))
        )
        self.run = wna16_kernel(
            self.dtype,
            args.sorted_token_ids.dtype,
            args.bit,
            args.b_qzeros is not None,
            weights is not None,
        )
        self.scatter = scatter_kernel(self.dtype)
        self.rows = self.m * self.top_k
        self.staging = np.empty(self.rows * self.n, STORAGE[self.dtype])
        element = output.element_size
        self.out_bytes = self.views["output"][0] * element
        self.extents = []
        for name in (
            "input", "b_qweight", "b_scales", "b_qzeros", "topk_weights",
            "sorted_token_ids", "expert_ids", "num_tokens_post_pad",
        ):  # fmt: skip
            meta = getattr(args, name)
            self.extents.append(
                0
                if meta is None
                else _reach(meta.shape, meta.strides) * meta.element_size
            )

    def _overlaps(self, output, tensors) -> bool:
        low = output.data_ptr()
        high = low + self.out_bytes
        for tensor, extent in zip(tensors, self.extents):
            if tensor is None or not extent:
                continue
            start = tensor.data_ptr()
            if start < high and low < start + extent:
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
        staged = self._overlaps(output, inputs)
        if staged:
            out_address = self.staging.ctypes.data
            out_reach = self.rows * self.n
            out_strides = (self.top_k * self.n, self.n, 1)
        else:
            out_address = output.data_ptr()
            out_reach = self.views["output"][0]
            out_strides = self.out_strides
        input_reach, input_strides = self.views["input"]
        codes_reach, codes_strides = self.views["b_qweight"]
        scales_reach, scales_strides = self.views["b_scales"]
        zeros_reach, zeros_strides = self.views.get("b_qzeros", (0, (0, 0, 0)))
        weights_reach, weights_strides = self.weights_view
        self.run(
            out_address, out_reach, *out_strides,
            input.data_ptr(), input_reach, *input_strides,
            b_qweight.data_ptr(), codes_reach, *codes_strides,
            b_scales.data_ptr(), scales_reach, *scales_strides,
            0 if b_qzeros is None else b_qzeros.data_ptr(), zeros_reach,
            *zeros_strides,
            0 if topk_weights is None else topk_weights.data_ptr(), weights_reach,
            *weights_strides,
            sorted_token_ids.data_ptr(), *self.ids,
            expert_ids.data_ptr(), self.experts_stride,
            num_tokens_post_pad.data_ptr(), self.m, self.k, self.n, self.experts,
            self.top_k, self.group, self.groups, self.block_m, self.blocks,
            self.column_chunk,
        )  # fmt: skip
        if staged:
            self.scatter(
                output.data_ptr(), self.views["output"][0], *self.out_strides,
                out_address, self.top_k, self.rows, self.n,
            )  # fmt: skip

    @classmethod
    def precompile(cls) -> int:
        """Compiles the kernel of each activation dtype and bit width, with
        zero points and top-k weights and without (int32 routing ids)."""
        import torch

        import infini.ops
        from infini.ops.base.moe_wna16_gemm import WNA16_DTYPES

        calls = 0
        m, k, n, experts, top_k, block = 2, 32, 8, 2, 2, 4
        ids = torch.tensor([0, 2, 4, 4, 1, 3, 4, 4], dtype=torch.int32)
        expert_ids = torch.tensor([0, 1], dtype=torch.int32)
        post_pad = torch.tensor([8], dtype=torch.int32)
        for name in WNA16_DTYPES:
            dtype = getattr(torch, name)
            input = torch.zeros(m, k, dtype=dtype)
            scales = torch.ones(experts, n, 1, dtype=dtype)
            output = torch.empty(m, top_k, n, dtype=dtype)
            for bit in (4, 8):
                codes = torch.zeros(experts, n, k * bit // 8, dtype=torch.uint8)
                zeros = torch.zeros(experts, n * bit // 8, 1, dtype=torch.uint8)
                for zeros_or_none, weights in (
                    (None, None),
                    (zeros, torch.ones(m, top_k)),
                ):
                    infini.ops.moe_wna16_gemm(
                        input, codes, scales, zeros_or_none, weights, ids,
                        expert_ids, post_pad, top_k, block, 16, k, bit, output,
                        implementation_index=0,
                    )  # fmt: skip
                    calls += 1
        return calls
