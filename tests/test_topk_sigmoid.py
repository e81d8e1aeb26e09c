import pytest
import torch

import infini.ops
from tests._routing import distinct_scores, token_expert_indices, topk_gating_reference
from tests.utils import Payload, empty_strided

# Weights are float32 sigmoids (a few ulps from the float64 reference);
# scores are tie-free (see `distinct_scores`), so ids are exact.
DTYPES = (
    (torch.float32, 1e-5, 1e-6),
    (torch.float16, 1e-5, 1e-6),
    (torch.bfloat16, 1e-5, 1e-6),
)

# tokens, experts, topk, renormalize, scale, bias, gating strides, smoke
CASES = (
    (16, 64, 8, True, 2.5, True, None, True),
    (1, 8, 2, False, 1.0, False, None, True),
    (33, 256, 8, True, 1.0, True, None, False),
    (16, 8, 2, False, 0.5, True, None, False),
    (5, 7, 3, True, 1.0, False, (1, 5), False),
    (0, 64, 8, True, 1.0, True, None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _topk_sigmoid(gating, bias, padding, renorm, scale, weights, ids, tokens, index):
    infini.ops.topk_sigmoid(
        gating,
        bias,
        padding,
        renorm,
        scale,
        weights,
        ids,
        tokens,
        implementation_index=index,
    )
    return weights, ids, tokens


def _torch_topk_sigmoid(gating, bias, padding, renorm, scale, weights, ids, tokens, _):
    count, topk = weights.shape
    w, i = topk_gating_reference(
        gating, bias, padding, renorm, scale, topk, "sigmoid", ids.dtype
    )
    return w.to(weights.dtype), i, token_expert_indices(count, topk).to(tokens.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, experts, topk, renormalize, scale, with_bias, strides, dtype, rtol, atol",
    list(_params()),
)
def test_topk_sigmoid(
    tokens,
    experts,
    topk,
    renormalize,
    scale,
    with_bias,
    strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    gating = distinct_scores(tokens, experts, dtype, device, strides)
    bias = torch.rand(experts, device=device) * 0.01 if with_bias else None
    weights = empty_strided((tokens, topk), device=device)
    ids = empty_strided((tokens, topk), dtype=torch.int32, device=device)
    token_ids = empty_strided((tokens, topk), dtype=torch.int64, device=device)
    return Payload(
        _topk_sigmoid,
        _torch_topk_sigmoid,
        (
            gating,
            bias,
            None,
            renormalize,
            scale,
            weights,
            ids,
            token_ids,
            implementation_index,
        ),
        rtol=rtol,
        atol=atol,
    )


def test_topk_sigmoid_bias_changes_selection_not_weights(device, implementation_index):
    gating = torch.tensor([[2.0, 1.0, 0.0, -1.0]], device=device)
    bias = torch.tensor([0.0, 0.0, 0.0, 5.0], device=device)
    weights = torch.empty(1, 2, device=device)
    ids = torch.empty(1, 2, dtype=torch.int64, device=device)
    token_ids = torch.empty(1, 2, dtype=torch.int32, device=device)
    _topk_sigmoid(
        gating, bias, None, False, 1.0, weights, ids, token_ids, implementation_index
    )
    assert ids.tolist() == [[3, 0]]
    assert torch.allclose(weights, torch.sigmoid(gating[0, [3, 0]]).unsqueeze(0))


def test_topk_sigmoid_padding_rows(device, implementation_index):
    gating = distinct_scores(4, 16, device=device)
    padding = torch.tensor([0, 0, 1, 0], dtype=torch.uint8)
    weights = torch.empty(4, 4, dtype=torch.float16, device=device)
    ids = torch.empty(4, 4, dtype=torch.int32, device=device)
    token_ids = torch.empty(4, 4, dtype=torch.int32, device=device)
    _topk_sigmoid(
        gating, None, padding, True, 2.0, weights, ids, token_ids, implementation_index
    )
    expected_w, expected_i = topk_gating_reference(
        gating, None, padding, True, 2.0, 4, "sigmoid", torch.int32
    )
    assert torch.equal(ids, expected_i) and ids[2].tolist() == [-1] * 4
    assert torch.allclose(weights.double(), expected_w, rtol=1e-3, atol=1e-3)


def test_topk_sigmoid_many_tokens_run_in_parallel(device, implementation_index):
    tokens, experts, topk = 512, 256, 8
    gating = torch.randn(tokens, experts, device=device)
    bias = torch.randn(experts, device=device) * 0.1
    weights = torch.empty(tokens, topk, device=device)
    ids = torch.empty(tokens, topk, dtype=torch.int32, device=device)
    token_ids = torch.empty(tokens, topk, dtype=torch.int32, device=device)
    _topk_sigmoid(
        gating, bias, None, True, 2.5, weights, ids, token_ids, implementation_index
    )
    expected_w, expected_i = topk_gating_reference(
        gating, bias, None, True, 2.5, topk, "sigmoid", torch.int32
    )
    assert torch.equal(ids, expected_i)
    assert torch.allclose(weights.double(), expected_w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "bias_shape, out_topk, id_dtype, match",
    [
        ((63,), 2, torch.int32, "`e_score_correction_bias` must have shape \\(64,\\)"),
        (None, 65, torch.int32, "`topk` = 65"),
        (None, 2, torch.float32, "`topk_ids` has dtype float32"),
    ],
)
def test_topk_sigmoid_rejects_bad_arguments_without_writing(
    bias_shape, out_topk, id_dtype, match, device
):
    gating = torch.zeros(4, 64, device=device)
    bias = None if bias_shape is None else torch.zeros(bias_shape, device=device)
    weights = torch.full((4, out_topk), 7.0, device=device)
    ids = torch.full((4, out_topk), 7, dtype=id_dtype, device=device)
    token_ids = torch.full((4, out_topk), 7, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=f"`topk_sigmoid`: {match}"):
        infini.ops.topk_sigmoid(gating, bias, None, True, 1.0, weights, ids, token_ids)
    assert bool((weights == 7).all()) and bool((token_ids == 7).all())


def test_topk_sigmoid_nan_ranks_first_like_torch_topk(device, implementation_index):
    nan = float("nan")
    gating = torch.tensor([[0.5, nan, 2.0, nan, -1.0]], device=device)
    weights = torch.empty(1, 3, device=device)
    ids = torch.empty(1, 3, dtype=torch.int64, device=device)
    token_ids = torch.empty(1, 3, dtype=torch.int32, device=device)
    _topk_sigmoid(
        gating, None, None, False, 1.0, weights, ids, token_ids, implementation_index
    )
    assert ids.tolist() == [[1, 3, 2]]
    assert torch.equal(ids, torch.sigmoid(gating).topk(3).indices)
