import pytest
import torch

import infini.ops
from tests._routing import gpu_sort_tiles

# (tokens, topk, num_experts): at most 64 entries (vLLM swaps M and N),
# more than 64, one expert, experts left without tokens, no tokens.
CASES = (
    (4, 2, 8),
    (7, 3, 5),
    (40, 2, 16),
    (33, 8, 64),
    (5, 1, 1),
    (3, 2, 32),
    (0, 2, 4),
)


def _reference(topk_ids, num_experts, n, k, is_gated, with_blockscale):
    """vLLM's documented outputs, written directly in PyTorch: entries of an
    expert in their order in `topk_ids`, invalid ids mapped to the total."""
    flat = topk_ids.reshape(-1).long()
    topk = topk_ids.shape[1]
    valid = (flat >= 0) & (flat < num_experts)
    counts = torch.bincount(flat[valid], minlength=num_experts)
    offsets = torch.zeros(num_experts + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(counts, 0)
    total = int(offsets[-1])
    gated_n = 2 * n if is_gated else n
    swap = not with_blockscale and flat.numel() <= 64
    if swap:
        sizes1 = torch.stack(
            (torch.full_like(counts, gated_n), counts, torch.full_like(counts, k)), 1
        )
        sizes2 = torch.stack(
            (torch.full_like(counts, k), counts, torch.full_like(counts, n)), 1
        )
    else:
        sizes1 = torch.stack(
            (counts, torch.full_like(counts, gated_n), torch.full_like(counts, k)), 1
        )
        sizes2 = torch.stack(
            (counts, torch.full_like(counts, k), torch.full_like(counts, n)), 1
        )
    # A stable sort by expert gives each entry its place.
    keys = torch.where(valid, flat, num_experts)
    order = torch.sort(keys, stable=True).indices[:total]
    input_permutation = order // topk
    output_permutation = torch.full_like(flat, total)
    output_permutation[order] = torch.arange(total)
    blockscale = torch.zeros(num_experts + 1, dtype=torch.long)
    blockscale[1:] = torch.cumsum((counts + 127) // 128 * 128, 0)
    return (
        offsets.int(),
        sizes1.int(),
        sizes2.int(),
        input_permutation.int(),
        output_permutation.int(),
        blockscale.int(),
    )


def _outputs(entries, num_experts, device):
    def filled(*shape):
        return torch.full(shape, -7, dtype=torch.int32, device=device)

    return [
        filled(num_experts + 1),
        filled(num_experts, 3),
        filled(num_experts, 3),
        filled(entries),
        filled(entries),
    ]


@pytest.mark.parametrize("tokens, topk, num_experts", CASES)
@pytest.mark.parametrize("is_gated", (True, False))
@pytest.mark.parametrize("with_blockscale", (False, True))
def test_get_cutlass_moe_mm_data(
    tokens, topk, num_experts, is_gated, with_blockscale, device, implementation_index
):
    n, k = 96, 64
    topk_ids = torch.randint(0, num_experts, (tokens, topk), dtype=torch.int32)
    if tokens > 1:
        topk_ids[1, 0] = -1  # an entry dropped by expert parallelism
    outputs = _outputs(tokens * topk, num_experts, device)
    blockscale = (
        torch.full((num_experts + 1,), -7, dtype=torch.int32, device=device)
        if with_blockscale
        else None
    )
    infini.ops.get_cutlass_moe_mm_data(
        topk_ids.to(device), num_experts, n, k, is_gated, *outputs, blockscale,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected = _reference(topk_ids, num_experts, n, k, is_gated, with_blockscale)
    total = int(expected[0][-1])
    names = ("expert_offsets", "problem_sizes1", "problem_sizes2")
    for name, got, want in zip(names, outputs, expected):
        assert torch.equal(got.cpu(), want), name
    # Places past the total are left as they were.
    assert torch.equal(outputs[3][:total].cpu(), expected[3])
    assert (outputs[3][total:] == -7).all()
    assert torch.equal(outputs[4].cpu(), expected[4])
    if with_blockscale:
        assert torch.equal(blockscale.cpu(), expected[5])


def test_get_cutlass_moe_mm_data_default_overload_and_strides(
    device, implementation_index
):
    # The overload without `is_gated` (gated), strided ids and outputs, and
    # ids outside [0, num_experts) that belong to no expert.
    num_experts, n, k = 6, 32, 48
    topk_ids = torch.randint(0, num_experts, (3, 10, 2), dtype=torch.int32)[:, :, 1]
    topk_ids[0, 3] = num_experts
    topk_ids[2, 9] = -3
    base = torch.full((num_experts + 1, 2), -7, dtype=torch.int32, device=device)
    offsets = base[:, 0]
    sizes1 = torch.full((3, num_experts), -7, dtype=torch.int32, device=device).t()
    sizes2 = torch.full((num_experts, 3), -7, dtype=torch.int32, device=device)
    input_permutation = torch.full((60,), -7, dtype=torch.int32, device=device)[::2]
    output_permutation = torch.full((35,), -7, dtype=torch.int32, device=device)
    infini.ops.get_cutlass_moe_mm_data(
        topk_ids.to(device), num_experts, n, k, offsets, sizes1, sizes2,
        input_permutation, output_permutation,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected = _reference(topk_ids, num_experts, n, k, True, False)
    total = int(expected[0][-1])
    assert torch.equal(offsets.cpu(), expected[0])
    assert torch.equal(sizes1.cpu(), expected[1])
    assert torch.equal(sizes2.cpu(), expected[2])
    assert torch.equal(input_permutation[:total].cpu(), expected[3])
    assert torch.equal(output_permutation[:30].cpu(), expected[4])
    assert (output_permutation[30:] == -7).all()


@pytest.mark.parametrize(
    "tokens, topk, num_experts, direct_limit, with_blockscale",
    [
        # Five chunks of 16 entries, three expert blocks, the scan launch.
        (23, 3, 20, 32, True),
        # The same without the scan (the placing kernel sums the table).
        (22, 3, 20, 4096, False),
    ],
)
def test_get_cutlass_moe_mm_data_chunks_and_expert_blocks(
    tokens,
    topk,
    num_experts,
    direct_limit,
    with_blockscale,
    monkeypatch,
    device,
    implementation_index,
):
    gpu_sort_tiles(monkeypatch, direct_limit=direct_limit)
    n, k = 32, 16
    # Ids below 0 and past the experts belong to no expert.
    topk_ids = torch.randint(-1, num_experts + 2, (tokens, topk), dtype=torch.int32)
    outputs = _outputs(tokens * topk, num_experts, device)
    blockscale = (
        torch.full((num_experts + 1,), -7, dtype=torch.int32)
        if with_blockscale
        else None
    )
    infini.ops.get_cutlass_moe_mm_data(
        topk_ids, num_experts, n, k, False, *outputs, blockscale,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected = _reference(topk_ids, num_experts, n, k, False, with_blockscale)
    total = int(expected[0][-1])
    for got, want in zip(outputs[:3], expected[:3]):
        assert torch.equal(got, want)
    assert torch.equal(outputs[3][:total], expected[3])
    assert (outputs[3][total:] == -7).all()
    assert torch.equal(outputs[4], expected[4])
    if with_blockscale:
        assert torch.equal(blockscale, expected[5])


def test_get_cutlass_moe_mm_data_permutation_over_the_ids(device, implementation_index):
    # `output_permutation` over the ids' own memory: the ids are read first.
    tokens, topk, num_experts = 5, 2, 3
    topk_ids = torch.randint(0, num_experts, (tokens, topk), dtype=torch.int32)
    expected = _reference(topk_ids.clone(), num_experts, 8, 8, True, False)
    outputs = _outputs(tokens * topk, num_experts, device)
    outputs[4] = topk_ids.view(-1)
    infini.ops.get_cutlass_moe_mm_data(
        topk_ids, num_experts, 8, 8, True, *outputs, None,
        implementation_index=implementation_index,
    )  # fmt: skip
    assert torch.equal(outputs[0], expected[0])
    assert torch.equal(outputs[3], expected[3])
    assert torch.equal(topk_ids.view(-1), expected[4])


def _arguments(**changes):
    values = {
        "topk_ids": torch.zeros(4, 2, dtype=torch.int32),
        "num_experts": 8,
        "n": 16,
        "k": 16,
        "is_gated": True,
        "expert_offsets": torch.zeros(9, dtype=torch.int32),
        "problem_sizes1": torch.zeros(8, 3, dtype=torch.int32),
        "problem_sizes2": torch.zeros(8, 3, dtype=torch.int32),
        "input_permutation": torch.zeros(8, dtype=torch.int32),
        "output_permutation": torch.zeros(8, dtype=torch.int32),
        "blockscale_offsets": None,
    }
    values.update(changes)
    return list(values.values())


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            _arguments(topk_ids=torch.zeros(4, 2, dtype=torch.int64)),
            "`topk_ids` has dtype int64",
        ),
        (_arguments(topk_ids=torch.zeros(8, dtype=torch.int32)), "`topk_ids` must"),
        (_arguments(num_experts=0), "`num_experts` must be positive"),
        (_arguments(n=-1), "`n` must not be negative"),
        (
            _arguments(expert_offsets=torch.zeros(8, dtype=torch.int32)),
            "`expert_offsets` must hold at least 9",
        ),
        (
            _arguments(problem_sizes1=torch.zeros(8, 2, dtype=torch.int32)),
            r"`problem_sizes1` must have shape \(8, 3\)",
        ),
        (
            _arguments(problem_sizes2=torch.zeros(8, 3)),
            "`problem_sizes2` has dtype float32",
        ),
        (
            _arguments(input_permutation=torch.zeros(7, dtype=torch.int32)),
            "`input_permutation` must hold at least 8",
        ),
        (
            _arguments(output_permutation=torch.zeros(1, dtype=torch.int32).expand(8)),
            "`output_permutation` is written but",
        ),
        (
            _arguments(blockscale_offsets=torch.zeros(3, dtype=torch.int32)),
            "`blockscale_offsets` must hold at least 9",
        ),
    ],
)
def test_get_cutlass_moe_mm_data_rejects(
    arguments, message, device, implementation_index
):
    with pytest.raises(ValueError, match=message) as error:
        infini.ops.get_cutlass_moe_mm_data(
            *arguments, implementation_index=implementation_index
        )
    assert "get_cutlass_moe_mm_data" in str(error.value)
