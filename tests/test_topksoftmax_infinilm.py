import pytest
import torch

import infini.ops
from tests._routing import distinct_scores
from tests.utils import Payload, empty_strided

# float32 probabilities (a few ulps from the float64 reference), rounded once
# for 16-bit `values`; scores are tie-free, so indices are exact.
# tokens, experts, topk, norm, input strides, values dtype, index dtype, smoke
CASES = (
    (16, 64, 8, True, None, torch.float32, torch.int32, True),
    (1, 8, 2, False, None, torch.float32, torch.int64, True),
    (33, 256, 8, False, None, torch.float32, torch.int32, False),
    (5, 7, 7, True, (1, 5), torch.float32, torch.int32, False),
    (16, 64, 2, True, None, torch.bfloat16, torch.int32, False),
    (0, 64, 8, True, None, torch.float32, torch.int32, False),
    (3, 8, 0, True, None, torch.float32, torch.int64, False),
)
INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _params():
    for *case, smoke in CASES:
        for dtype in INPUT_DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, marks=marks)


def _topksoftmax(input, topk, norm, values, indices, implementation_index):
    infini.ops.topksoftmax_infinilm(
        input, topk, norm, values, indices, implementation_index=implementation_index
    )
    return values, indices


def _torch_topksoftmax(input, topk, norm, values, indices, _=None):
    result = torch.softmax(input.double(), dim=1).topk(topk, dim=1)
    selected = result.values
    if norm:
        selected = selected / selected.sum(dim=1, keepdim=True)
    return selected.to(values.dtype), result.indices.to(indices.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, experts, topk, norm, strides, values_dtype, index_dtype, dtype",
    list(_params()),
)
def test_topksoftmax_infinilm(
    tokens,
    experts,
    topk,
    norm,
    strides,
    values_dtype,
    index_dtype,
    dtype,
    device,
    implementation_index,
):
    input = distinct_scores(tokens, experts, dtype, device, strides)
    values = empty_strided((tokens, topk), dtype=values_dtype, device=device)
    indices = empty_strided((tokens, topk), dtype=index_dtype, device=device)
    tolerance = TOLERANCE[values_dtype]
    return Payload(
        _topksoftmax,
        _torch_topksoftmax,
        (input, topk, norm, values, indices, implementation_index),
        rtol=tolerance,
        atol=tolerance * 0.1,
    )


def test_topksoftmax_infinilm_many_tokens(device, implementation_index):
    input = torch.randn(1024, 64, device=device)
    values = torch.empty(1024, 8, device=device)
    indices = torch.empty(1024, 8, dtype=torch.int32, device=device)
    _topksoftmax(input, 8, True, values, indices, implementation_index)
    expected_values, expected_indices = _torch_topksoftmax(
        input, 8, True, values, indices
    )
    assert torch.equal(indices, expected_indices)
    assert torch.allclose(values, expected_values, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "topk, values_shape, index_dtype, match",
    [
        (9, (4, 9), torch.int32, "`topk` must be in \\[0, 8\\]"),
        (2, (4, 3), torch.int32, "`values` must have shape \\(4, 2\\)"),
        (2, (3, 2), torch.int32, "`values` must have shape \\(tokens, topk\\)"),
        (2, (4, 2), torch.uint8, "`indices` has dtype uint8"),
    ],
)
def test_topksoftmax_infinilm_rejects_bad_arguments(
    topk, values_shape, index_dtype, match, device
):
    input = torch.randn(4, 8, device=device)
    values = torch.full(values_shape, 7.0, device=device)
    indices = torch.full(values_shape, 7, dtype=index_dtype, device=device)
    with pytest.raises(ValueError, match=f"`topksoftmax_infinilm`: {match}"):
        infini.ops.topksoftmax_infinilm(input, topk, True, values, indices)
    assert bool((values == 7).all())
