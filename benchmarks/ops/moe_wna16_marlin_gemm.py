"""The gate/up product of a MoE layer with 4-bit GPTQ experts (8 experts,
top-2, ``(2048, 1408)`` per expert, groups of 128) in the Marlin layout,
against dequantising the routed experts from the same Marlin tensors and
multiplying their tokens with `torch.matmul`."""

import torch

import infini.ops
from benchmarks.harness import Case, nbytes
from infini.ops.base._marlin import (
    SCALE_PERM,
    WEIGHT_TYPE_IDS,
    block_shape,
    chunk_source,
)

EXPERTS, TOP_K, SIZE_K, SIZE_N, GROUP = 8, 2, 2048, 1408, 128
BLOCK = 16
BITS = 4


def _unpack_index(size_k, size_n):
    """Flat Marlin code position of each ``(k, n)``, row-major."""
    rows_per_block, columns_per_block = block_shape(False)
    sources = torch.tensor(chunk_source(BITS, False))
    position = torch.arange(size_k * size_n)
    row_block = position // (rows_per_block * size_n)
    chunk = (position % (rows_per_block * size_n)) // 1024
    row = row_block * rows_per_block + sources[position % 1024, 0]
    column = chunk * columns_per_block + sources[position % 1024, 1]
    index = torch.empty_like(position)
    index[row * size_n + column] = position
    return index


def cases(tokens, dtype):
    pack = 32 // BITS
    groups = SIZE_K // GROUP
    weight = torch.randint(
        -(2**31), 2**31, (EXPERTS, SIZE_K // 16, SIZE_N * 16 // pack), dtype=torch.int32
    )
    scales = (torch.rand(EXPERTS, groups, SIZE_N) / 64 + 1 / 256).to(dtype)
    a = torch.randn(tokens, SIZE_K).to(dtype)
    topk_weights, topk_ids = torch.rand(tokens, EXPERTS).topk(TOP_K, dim=1)
    topk_ids = topk_ids.int()
    places = tokens * TOP_K + EXPERTS * (BLOCK - 1)
    sorted_ids = torch.empty(places, dtype=torch.int32)
    expert_ids = torch.empty(places // BLOCK, dtype=torch.int32)
    padded = torch.empty(1, dtype=torch.int32)
    infini.ops.moe_align_block_size(
        topk_ids, None, EXPERTS, BLOCK, sorted_ids, expert_ids, padded
    )
    type_id = {name: id for id, name in WEIGHT_TYPE_IDS.items()}["uint4b8"]
    workspace = torch.zeros(1, dtype=torch.int32)
    out = torch.empty(tokens * TOP_K, SIZE_N, dtype=dtype)

    def ours():
        infini.ops.moe_wna16_marlin_gemm(
            a, weight, None, scales, None, None, None, None, None, workspace,
            sorted_ids, expert_ids, padded, topk_weights, BLOCK, TOP_K, True,
            type_id, tokens, SIZE_N, SIZE_K, True, False, True, False, -1, -1, -1,
            out,
        )  # fmt: skip

    code_index = _unpack_index(SIZE_K, SIZE_N)
    shifts = torch.arange(pack) * BITS
    inverse = torch.tensor(SCALE_PERM).argsort()
    scale_columns = (torch.arange(SIZE_N) // 64) * 64 + inverse[
        torch.arange(SIZE_N) % 64
    ]
    flat_ids = topk_ids.reshape(-1).long()
    flat_weights = topk_weights.reshape(-1, 1).to(dtype)

    def reference():
        for e in flat_ids.unique().tolist():
            entries = (flat_ids == e).nonzero().squeeze(1)
            words = weight[e].reshape(-1).long() & 0xFFFFFFFF
            codes = ((words.unsqueeze(1) >> shifts) & 15).reshape(-1)[code_index]
            logical_scales = scales[e][:, scale_columns]
            dequantised = (codes.view(SIZE_K, SIZE_N) - 8).to(dtype).view(
                groups, GROUP, SIZE_N
            ) * logical_scales.unsqueeze(1)
            product = torch.matmul(
                a[entries // TOP_K], dequantised.view(SIZE_K, SIZE_N)
            )
            out[entries] = product * flat_weights[entries]

    routed = flat_ids.unique().numel()
    yield Case(
        f"{EXPERTS}x({SIZE_K}, {SIZE_N}) 4-bit, {tokens}x top-{TOP_K}",
        ours,
        reference,
        nbytes(a, out) + routed * (weight[0].numel() * 4 + scales[0].numel() * 2),
        out.numel() + routed * SIZE_K * SIZE_N,
    )
