import pytest
import torch

import infini.ops


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
