import pytest
import torch

import infini.ops
from tests._routing import distinct_scores
from tests.utils import Payload, empty_strided

# tokens, experts, groups, topk_group, topk, renormalize, scale, scoring_func,
# score strides, smoke
CASES = (
    (16, 256, 8, 4, 8, True, 2.5, 1, None, True),
    (1, 64, 8, 3, 6, True, 1.0, 1, None, True),
    (33, 256, 8, 4, 8, False, 1.0, 0, None, False),
    (7, 16, 4, 2, 3, True, 1.0, 0, (1, 7), False),
    (5, 12, 6, 6, 12, False, 0.5, 1, None, False),
    (0, 64, 8, 4, 8, True, 1.0, 1, None, False),
)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _params():
    for *case, smoke in CASES:
        for dtype in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, marks=marks)


def _grouped_topk(
    scores,
    bias,
    groups,
    topk_group,
    topk,
    renormalize,
    scale,
    func,
    values,
    indices,
    index,
):
    infini.ops.grouped_topk(
        scores,
        bias,
        groups,
        topk_group,
        topk,
        renormalize,
        scale,
        func,
        values,
        indices,
        implementation_index=index,
    )
    return values, indices


def _torch_grouped_topk(
    scores,
    bias,
    groups,
    topk_group,
    topk,
    renormalize,
    scale,
    func,
    values,
    indices,
    _=None,
):
    """vLLM's `biased_grouped_topk`, in float64, with the selected experts
    listed by decreasing selection score."""
    tokens, experts = scores.shape
    if tokens == 0:
        return values.clone(), indices.clone()
    s = scores.double()
    s = torch.sigmoid(s) if func == 1 else s
    choice = s + bias.double()
    group_scores = choice.view(tokens, groups, -1).topk(2, dim=-1).values.sum(-1)
    group_idx = group_scores.topk(topk_group, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1).bool()
    expert_mask = group_mask.repeat_interleave(experts // groups, dim=1)
    masked = choice.masked_fill(~expert_mask, float("-inf"))
    ids = masked.topk(topk, dim=-1).indices
    weights = s.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return (weights * scale).to(values.dtype), ids.to(indices.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, experts, groups, topk_group, topk, renormalize, scale, func, strides, "
    "dtype",
    list(_params()),
)
def test_grouped_topk(
    tokens,
    experts,
    groups,
    topk_group,
    topk,
    renormalize,
    scale,
    func,
    strides,
    dtype,
    device,
    implementation_index,
):
    scores = distinct_scores(tokens, experts, dtype, device, strides)
    # A small random float32 bias (below the scores' 1/32 spacing) keeps the
    # selection order of the experts and leaves no ties between groups.
    bias = torch.rand(experts, device=device) / 128
    values = empty_strided((tokens, topk), device=device)
    indices = empty_strided((tokens, topk), dtype=torch.int32, device=device)
    return Payload(
        _grouped_topk,
        _torch_grouped_topk,
        (
            scores,
            bias,
            groups,
            topk_group,
            topk,
            renormalize,
            scale,
            func,
            values,
            indices,
            implementation_index,
        ),
        rtol=1e-5,
        atol=1e-6,
    )


def test_grouped_topk_many_tokens_int64_indices(device, implementation_index):
    tokens, experts = 512, 256
    scores = torch.randn(tokens, experts, device=device)
    bias = torch.randn(experts, device=device) * 0.1
    values = torch.empty(tokens, 8, device=device)
    indices = torch.empty(tokens, 8, dtype=torch.int64, device=device)
    _grouped_topk(
        scores, bias, 8, 4, 8, True, 2.5, 1, values, indices, implementation_index
    )
    expected_values, expected_indices = _torch_grouped_topk(
        scores, bias, 8, 4, 8, True, 2.5, 1, values, indices
    )
    assert torch.equal(indices, expected_indices)
    assert torch.allclose(values, expected_values, rtol=1e-5, atol=1e-6)


def test_grouped_topk_only_selected_groups_contribute(device, implementation_index):
    # Group 1 holds the single best expert but group 0 has the best pair.
    scores = torch.tensor([[5.0, 5.0, 0.0, 9.0, 0.0, 0.0]], device=device)
    bias = torch.zeros(6, device=device)
    values = torch.empty(1, 2, device=device)
    indices = torch.empty(1, 2, dtype=torch.int32, device=device)
    _grouped_topk(
        scores, bias, 2, 1, 2, False, 1.0, 0, values, indices, implementation_index
    )
    assert indices.tolist() == [[0, 1]] and values.tolist() == [[5.0, 5.0]]


def test_grouped_topk_nan_ranks_first(device, implementation_index):
    # Group 0's score is NaN (its best pair holds a NaN): it is kept first,
    # and its NaN expert is picked first.
    nan = float("nan")
    scores = torch.tensor([[0.1, nan, 0.3, 0.2, 0.5, 0.4, 0.0, -1.0]], device=device)
    bias = torch.zeros(8, device=device)
    values = torch.empty(1, 3, device=device)
    indices = torch.empty(1, 3, dtype=torch.int64, device=device)
    _grouped_topk(
        scores, bias, 4, 2, 3, False, 1.0, 0, values, indices, implementation_index
    )
    assert indices.tolist() == [[1, 4, 5]]
    assert values[0, 0].isnan()
    assert torch.equal(values[0, 1:], torch.tensor([0.5, 0.4], device=device))


@pytest.mark.parametrize(
    "experts, groups, topk_group, topk, func, values_dtype, match",
    [
        (
            64,
            7,
            4,
            8,
            1,
            torch.float32,
            "`num_expert_group` must be a positive divisor",
        ),
        (8, 8, 4, 2, 1, torch.float32, "every group needs at least two experts"),
        (64, 8, 9, 8, 1, torch.float32, "`topk_group` must be in \\[1, 8\\]"),
        (64, 8, 2, 17, 1, torch.float32, "`topk` must be in \\[1, 16\\]"),
        (64, 8, 4, 8, 2, torch.float32, "`scoring_func` must be 0"),
        (64, 8, 4, 8, 1, torch.float16, "`topk_values` has dtype float16"),
    ],
)
def test_grouped_topk_rejects_bad_arguments(
    experts, groups, topk_group, topk, func, values_dtype, match, device
):
    scores = torch.randn(4, experts, device=device)
    bias = torch.zeros(experts, device=device)
    values = torch.full((4, topk), 7.0, dtype=values_dtype, device=device)
    indices = torch.full((4, topk), 7, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=f"`grouped_topk`: {match}"):
        infini.ops.grouped_topk(
            scores, bias, groups, topk_group, topk, True, 1.0, func, values, indices
        )
    assert bool((values == 7).all()) and bool((indices == 7).all())
