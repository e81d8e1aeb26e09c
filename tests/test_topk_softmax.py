import pytest
import torch

import infini.ops
from tests._routing import distinct_scores, token_expert_indices, topk_gating_reference
from tests.utils import Payload, empty_strided

# Weights are float32 softmax probabilities (a few ulps from the float64
# reference); scores are tie-free (see `distinct_scores`), so ids are exact.
DTYPES = (
    (torch.float32, 1e-5, 1e-6),
    (torch.float16, 1e-5, 1e-6),
    (torch.bfloat16, 1e-5, 1e-6),
)

# tokens, experts, topk, renormalize, bias, gating strides, smoke
CASES = (
    (16, 64, 8, True, False, None, True),
    (1, 8, 2, False, False, None, True),
    (33, 256, 8, True, True, None, False),
    (16, 8, 2, True, True, None, False),
    (5, 7, 3, False, True, (1, 5), False),
    (4, 64, 2, True, False, (130, 2), False),
    (0, 64, 8, True, False, None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _topk_softmax(gating, bias, padding, renormalize, weights, ids, token_ids, index):
    infini.ops.topk_softmax(
        gating,
        bias,
        padding,
        renormalize,
        weights,
        ids,
        token_ids,
        implementation_index=index,
    )
    return weights, ids, token_ids


def _torch_topk_softmax(gating, bias, padding, renormalize, weights, ids, token_ids, _):
    tokens, topk = weights.shape
    w, i = topk_gating_reference(
        gating, bias, padding, renormalize, 1.0, topk, "softmax", ids.dtype
    )
    return w.to(weights.dtype), i, token_expert_indices(tokens, topk).to(ids.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, experts, topk, renormalize, with_bias, strides, dtype, rtol, atol",
    list(_params()),
)
def test_topk_softmax(
    tokens,
    experts,
    topk,
    renormalize,
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
    token_ids = empty_strided((tokens, topk), dtype=torch.int32, device=device)
    return Payload(
        _topk_softmax,
        _torch_topk_softmax,
        (
            gating,
            bias,
            None,
            renormalize,
            weights,
            ids,
            token_ids,
            implementation_index,
        ),
        rtol=rtol,
        atol=atol,
    )


def test_topk_softmax_padding_and_index_dtypes(device, implementation_index):
    tokens, experts, topk = 9, 16, 4
    gating = distinct_scores(tokens, experts, device=device)
    padding = torch.tensor([0, 1, 0, 0, 1, 0, 0, 0, 1], dtype=torch.bool)
    weights = torch.empty(tokens, topk, dtype=torch.bfloat16, device=device)
    ids = torch.empty(tokens, topk, dtype=torch.int64, device=device)
    token_ids = torch.empty(tokens, topk, dtype=torch.uint32, device=device)
    _topk_softmax(
        gating, None, padding, True, weights, ids, token_ids, implementation_index
    )
    expected_w, expected_i = topk_gating_reference(
        gating, None, padding, True, 1.0, topk, "softmax", torch.int64
    )
    assert torch.allclose(weights.double(), expected_w, rtol=1e-2, atol=1e-3)
    assert torch.equal(ids, expected_i)
    assert bool((ids[padding] == -1).all()) and bool((weights[padding] == 0).all())
    assert torch.equal(
        token_ids.view(torch.int32).long(), token_expert_indices(tokens, topk)
    )


def test_topk_softmax_uint32_padding_ids_are_all_ones(device, implementation_index):
    gating = distinct_scores(3, 8, device=device)
    padding = torch.tensor([1, 0, 1], dtype=torch.int32)
    weights = torch.empty(3, 2, device=device)
    ids = torch.empty(3, 2, dtype=torch.uint32, device=device)
    token_ids = torch.empty(3, 2, dtype=torch.int32, device=device)
    _topk_softmax(
        gating, None, padding, False, weights, ids, token_ids, implementation_index
    )
    raw = ids.view(torch.int32)
    assert bool((raw[0] == -1).all()) and bool((raw[2] == -1).all())
    assert torch.equal(raw[1].long(), torch.softmax(gating[1], -1).topk(2).indices)


def test_topk_softmax_ties_go_to_the_lower_expert(device, implementation_index):
    gating = torch.zeros(2, 8, device=device)
    gating[1, 5] = 1.0
    weights = torch.empty(2, 3, device=device)
    ids = torch.empty(2, 3, dtype=torch.int32, device=device)
    token_ids = torch.empty(2, 3, dtype=torch.int32, device=device)
    _topk_softmax(gating, None, None, False, weights, ids, token_ids, None)
    assert ids.tolist() == [[0, 1, 2], [5, 0, 1]]


def test_topk_softmax_many_tokens_run_in_parallel(device, implementation_index):
    tokens, experts, topk = 2048, 64, 8
    gating = torch.randn(tokens, experts, device=device)
    bias = torch.randn(experts, device=device) * 0.1
    weights = torch.empty(tokens, topk, device=device)
    ids = torch.empty(tokens, topk, dtype=torch.int32, device=device)
    token_ids = torch.empty(tokens, topk, dtype=torch.int32, device=device)
    _topk_softmax(
        gating, bias, None, True, weights, ids, token_ids, implementation_index
    )
    expected_w, expected_i = topk_gating_reference(
        gating, bias, None, True, 1.0, topk, "softmax", torch.int32
    )
    assert torch.equal(ids, expected_i)
    assert torch.allclose(weights.double(), expected_w, rtol=1e-5, atol=1e-6)


def test_topk_softmax_outputs_overlapping_the_input(device, implementation_index):
    # `topk_weights` written over `gating_output` itself: inputs are read first.
    gating = distinct_scores(6, 8, device=device)
    expected_w, expected_i = topk_gating_reference(
        gating, None, None, True, 1.0, 8, "softmax", torch.int32
    )
    ids = torch.empty(6, 8, dtype=torch.int32, device=device)
    token_ids = torch.empty(6, 8, dtype=torch.int32, device=device)
    _topk_softmax(gating, None, None, True, gating, ids, token_ids, None)
    assert torch.equal(ids, expected_i)
    assert torch.allclose(gating.double(), expected_w, rtol=1e-5, atol=1e-6)
    # A transposed view of the same storage.
    gating = distinct_scores(8, 8, device=device)
    expected_w, _ = topk_gating_reference(
        gating, None, None, False, 1.0, 8, "softmax", torch.int32
    )
    ids = torch.empty(8, 8, dtype=torch.int32, device=device)
    token_ids = torch.empty(8, 8, dtype=torch.int32, device=device)
    _topk_softmax(gating, None, None, False, gating.t(), ids, token_ids, None)
    assert torch.allclose(gating.t().double(), expected_w, rtol=1e-5, atol=1e-6)


def _outputs(tokens, topk, weight_dtype=torch.float32, id_dtype=torch.int32):
    return (
        torch.full((tokens, topk), 7.0, dtype=weight_dtype),
        torch.full((tokens, topk), 7, dtype=id_dtype),
        torch.full((tokens, topk), 7, dtype=torch.int32),
    )


@pytest.mark.parametrize(
    "gating_shape, gating_dtype, bias_shape, padding_shape, out_shape, id_dtype, match",
    [
        (
            (4, 8),
            torch.int32,
            None,
            None,
            (4, 2),
            torch.int32,
            "`gating_output` has dtype int32",
        ),
        (
            (4, 8, 1),
            torch.float32,
            None,
            None,
            (4, 2),
            torch.int32,
            "`gating_output` must have 2 dimensions",
        ),
        (
            (4, 8),
            torch.float32,
            (7,),
            None,
            (4, 2),
            torch.int32,
            "`bias` must have shape \\(8,\\)",
        ),
        (
            (4, 8),
            torch.float32,
            None,
            (3,),
            (4, 2),
            torch.int32,
            "`is_padding` must have shape \\(4,\\)",
        ),
        (
            (4, 8),
            torch.float32,
            None,
            None,
            (5, 2),
            torch.int32,
            "`topk_weights` must have shape",
        ),
        ((4, 8), torch.float32, None, None, (4, 9), torch.int32, "`topk` = 9"),
        (
            (4, 8),
            torch.float32,
            None,
            None,
            (4, 2),
            torch.int16,
            "`topk_indices` has dtype int16",
        ),
    ],
)
def test_topk_softmax_rejects_bad_arguments_without_writing(
    gating_shape,
    gating_dtype,
    bias_shape,
    padding_shape,
    out_shape,
    id_dtype,
    match,
    device,
):
    gating = torch.zeros(gating_shape, dtype=gating_dtype, device=device)
    bias = None if bias_shape is None else torch.zeros(bias_shape, device=device)
    padding = (
        None
        if padding_shape is None
        else torch.zeros(padding_shape, dtype=torch.bool, device=device)
    )
    weights, ids, token_ids = _outputs(*out_shape, id_dtype=id_dtype)
    with pytest.raises(ValueError, match=f"`topk_softmax`: {match}"):
        infini.ops.topk_softmax(gating, bias, padding, True, weights, ids, token_ids)
    assert bool((weights == 7).all()) and bool((ids == 7).all())
    assert bool((token_ids == 7).all())


def test_topk_softmax_rejects_broadcast_output(device):
    gating = torch.zeros(4, 8, device=device)
    weights = torch.empty(1, 2, device=device).expand(4, 2)
    ids = torch.empty(4, 2, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`topk_softmax`: `topk_weights` is written"):
        infini.ops.topk_softmax(gating, None, None, True, weights, ids, ids.clone())
