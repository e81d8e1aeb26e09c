import pytest
import torch

import infini.ops
from tests._routing import gpu_sort_tiles


def _reference(topk_ids, expert_map, num_experts, block_size, sorted_len, blocks):
    """vLLM's `moe_align_block_size` with entries in ascending order within
    each expert (the GPU kernel's order within an expert is unspecified)."""
    flat = topk_ids.flatten().long()
    numel = flat.numel()
    if expert_map is not None:
        inside = (flat >= 0) & (flat < expert_map.numel())
        mapped = expert_map.long()[flat.clamp(0, max(expert_map.numel() - 1, 0))]
        flat = torch.where(inside, mapped, torch.full_like(flat, -1))
    sorted_ids = torch.full((sorted_len,), numel, dtype=torch.int64)
    expert_ids = torch.zeros(blocks, dtype=torch.int64)
    position = 0
    for expert in range(num_experts):
        entries = (flat == expert).nonzero().flatten()
        sorted_ids[position : position + entries.numel()] = entries
        padded = -(-entries.numel() // block_size) * block_size
        expert_ids[position // block_size : (position + padded) // block_size] = expert
        position += padded
    return sorted_ids, expert_ids, position


def _run(topk_ids, expert_map, num_experts, block_size, dtype=torch.int32, index=None):
    numel = topk_ids.numel()
    sorted_len = numel + num_experts * (block_size - 1)
    blocks = -(-sorted_len // block_size)
    sorted_ids = torch.full((sorted_len,), -7, dtype=dtype)
    expert_ids = torch.full((blocks,), -7, dtype=dtype)
    total = torch.full((1,), -7, dtype=dtype)
    infini.ops.moe_align_block_size(
        topk_ids,
        expert_map,
        num_experts,
        block_size,
        sorted_ids,
        expert_ids,
        total,
        implementation_index=index,
    )
    expected = _reference(
        topk_ids, expert_map, num_experts, block_size, sorted_len, blocks
    )
    assert torch.equal(sorted_ids.long(), expected[0])
    assert torch.equal(expert_ids.long(), expected[1])
    assert int(total) == expected[2]


# tokens, topk, num_experts, block_size, smoke
CASES = (
    (16, 2, 8, 16, True),
    (33, 8, 64, 64, False),
    (1, 8, 256, 16, False),
    (512, 8, 256, 64, False),
    (7, 3, 5, 4, False),
    (0, 2, 8, 16, False),
    (13, 1, 3, 1, False),
    (1, 1, 3, 2, False),
)


@pytest.mark.parametrize(
    "tokens, topk, num_experts, block_size",
    [
        pytest.param(*case[:-1], marks=pytest.mark.smoke if case[-1] else ())
        for case in CASES
    ],
)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_moe_align_block_size(
    tokens, topk, num_experts, block_size, id_dtype, device, implementation_index
):
    topk_ids = (
        torch.stack([torch.randperm(num_experts)[:topk] for _ in range(tokens)])
        if tokens
        else torch.empty(0, topk, dtype=torch.long)
    )
    _run(
        topk_ids.to(id_dtype),
        None,
        num_experts,
        block_size,
        id_dtype,
        implementation_index,
    )


def test_moe_align_block_size_strided_ids_and_invalid_entries(
    device, implementation_index
):
    storage = torch.randint(-2, 10, (12, 6), dtype=torch.int32)
    topk_ids = storage[:, ::2].t()  # (3, 12) transposed, strided
    _run(topk_ids, None, 8, 4, torch.int64, implementation_index)


def test_moe_align_block_size_expert_map(device, implementation_index):
    topk_ids = torch.randint(0, 16, (20, 4), dtype=torch.int64)
    expert_map = torch.full((16,), -1, dtype=torch.int32)
    expert_map[4:8] = torch.arange(4, dtype=torch.int32)
    _run(topk_ids, expert_map, 4, 8, torch.int32, implementation_index)


@pytest.mark.parametrize(
    "tokens, num_experts, block_size, direct_limit, with_map, dtype",
    [
        # Three chunks of 16 entries, two expert blocks, the scan launch.
        (20, 12, 4, 32, False, torch.int64),
        # The same without the scan (the placing kernel sums the table).
        (21, 12, 8, 4096, True, torch.int32),
        # Long padding (several padding steps), one expert block.
        (9, 5, 13, 32, False, torch.int32),
    ],
)
def test_moe_align_block_size_chunks_and_expert_blocks(
    tokens,
    num_experts,
    block_size,
    direct_limit,
    with_map,
    dtype,
    monkeypatch,
    device,
    implementation_index,
):
    gpu_sort_tiles(monkeypatch, direct_limit=direct_limit)
    # Ids below 0 and past the experts (or the map) are skipped.
    topk_ids = torch.randint(-1, num_experts + 3, (tokens, 2), dtype=dtype)
    expert_map = None
    if with_map:
        expert_map = torch.randperm(num_experts + 2).to(torch.int32) - 2
    _run(topk_ids, expert_map, num_experts, block_size, dtype, implementation_index)


def test_moe_align_block_size_ids_of_three_dimensions(device, implementation_index):
    # Strides that merge into no fewer than three dimensions.
    topk_ids = torch.randint(0, 6, (6, 9, 8), dtype=torch.int64)[::2, ::3, ::2]
    _run(topk_ids, None, 6, 4, torch.int32, implementation_index)


def test_moe_align_block_size_outputs_overlapping_the_ids(device, implementation_index):
    # `sorted_token_ids` over the ids' own memory: the ids are read first.
    tokens, topk, num_experts, block_size = 6, 2, 4, 4
    numel = tokens * topk
    length = numel + num_experts * (block_size - 1)
    storage = torch.zeros(length, dtype=torch.int32)
    topk_ids = storage[:numel].view(tokens, topk)
    topk_ids.copy_(torch.randint(0, num_experts, (tokens, topk)))
    expected = _reference(
        topk_ids.clone(), None, num_experts, block_size, length, length // block_size
    )
    expert_ids = torch.empty(length // block_size, dtype=torch.int32)
    total = torch.empty(1, dtype=torch.int32)
    infini.ops.moe_align_block_size(
        topk_ids,
        None,
        num_experts,
        block_size,
        storage,
        expert_ids,
        total,
        implementation_index=implementation_index,
    )
    assert torch.equal(storage.long(), expected[0])
    assert torch.equal(expert_ids.long(), expected[1])
    assert int(total) == expected[2]


@pytest.mark.parametrize(
    "sorted_len, blocks, total_shape, num_experts, block_size, match",
    [
        (10, 10, (1,), 8, 4, "`sorted_token_ids` must hold at least 34"),
        (34, 7, (1,), 8, 4, "`experts_ids` must hold at least 8"),
        (34, 9, (2,), 8, 4, "`num_tokens_post_pad` must have exactly one element"),
        (34, 9, (1,), 0, 4, "`num_experts` must be at least 1"),
        (34, 9, (1,), 8, 0, "`block_size` must be at least 1"),
    ],
)
def test_moe_align_block_size_rejects_bad_arguments(
    sorted_len, blocks, total_shape, num_experts, block_size, match, device
):
    topk_ids = torch.zeros(5, 2, dtype=torch.int32)
    sorted_ids = torch.full((sorted_len,), 7, dtype=torch.int32)
    expert_ids = torch.full((blocks,), 7, dtype=torch.int32)
    total = torch.full(total_shape, 7, dtype=torch.int32)
    with pytest.raises(ValueError, match=f"`moe_align_block_size`: {match}"):
        infini.ops.moe_align_block_size(
            topk_ids, None, num_experts, block_size, sorted_ids, expert_ids, total
        )
    assert bool((sorted_ids == 7).all()) and bool((expert_ids == 7).all())
