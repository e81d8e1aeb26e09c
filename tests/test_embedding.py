import pytest
import torch
import torch.nn.functional as F

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# input shape, input strides, weight shape, weight strides, out strides, smoke
CASES = (
    ((16,), None, (32000, 128), None, None, True),
    ((1,), None, (1000, 4096), None, None, False),
    ((3, 7), (1, 3), (50, 33), (40, 1), None, True),
    ((2, 3, 4), None, (10, 8), (1, 10), (200, 50, 10, 1), False),
    ((), None, (5, 8), None, None, False),
    ((0, 3), None, (5, 8), None, None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype in DTYPES:
            for index_dtype in (torch.int64, torch.int32):
                marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
                yield pytest.param(*case, dtype, index_dtype, marks=marks)


def _embedding(input, weight, out, index):
    result = infini.ops.embedding(input, weight, out, implementation_index=index)
    assert result is None
    return out


def _torch_embedding(input, weight, out, index):
    return F.embedding(input.long(), weight)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "input_shape, input_strides, weight_shape, weight_strides, out_strides, dtype, "
    "index_dtype",
    list(_params()),
)
def test_embedding(
    input_shape,
    input_strides,
    weight_shape,
    weight_strides,
    out_strides,
    dtype,
    index_dtype,
    device,
    implementation_index,
):
    input = randint_strided(
        0, weight_shape[0], input_shape, input_strides, dtype=index_dtype, device=device
    )
    weight = randn_strided(weight_shape, weight_strides, dtype=dtype, device=device)
    out = empty_strided(
        (*input_shape, weight_shape[1]), out_strides, dtype=dtype, device=device
    )
    return Payload(
        _embedding,
        _torch_embedding,
        (input, weight, out, implementation_index),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("padding_idx", (None, 3, -2))
def test_embedding_full_overload_without_max_norm(
    padding_idx, device, implementation_index
):
    input = torch.randint(0, 20, (4, 5), device=device)
    weight = torch.randn(20, 16, device=device)
    original = weight.clone()
    out = torch.empty(4, 5, 16, device=device)
    infini.ops.embedding(
        input,
        weight,
        padding_idx,
        None,
        2.0,
        False,
        False,
        out,
        implementation_index=implementation_index,
    )
    assert torch.equal(out, F.embedding(input, original, padding_idx))
    assert torch.equal(weight, original)


@pytest.mark.parametrize("padding_idx", (-1, 0, 19))
def test_embedding_legacy_overload(padding_idx, device, implementation_index):
    input = torch.randint(0, 20, (6,), dtype=torch.int32, device=device)
    weight = torch.randn(20, 16, dtype=torch.bfloat16, device=device)
    out = torch.empty(6, 16, dtype=torch.bfloat16, device=device)
    infini.ops.embedding(
        input,
        weight,
        padding_idx,
        True,
        False,
        out,
        implementation_index=implementation_index,
    )
    assert torch.equal(out, F.embedding(input.long(), weight))


@pytest.mark.parametrize(
    "dtype, norm_type",
    [
        (torch.float32, 2.0),
        (torch.float32, 1.0),
        (torch.float32, 3.0),
        (torch.float32, float("inf")),
        (torch.float32, 0.0),
        (torch.bfloat16, 2.0),
        (torch.float16, 0.5),
    ],
)
def test_embedding_max_norm_renormalises_weight_in_place(
    dtype, norm_type, device, implementation_index
):
    # Repeated indices (each selected row is renormalised once) and rows that
    # are never selected (left alone).
    input = torch.randint(0, 30, (5, 9), device=device)
    input[0, :3] = 7
    weight = torch.randn(40, 24, dtype=dtype, device=device) * 2
    expected_weight = weight.clone()
    max_norm = {0.0: 20.0, float("inf"): 1.5}.get(norm_type, 3.0)
    expected = F.embedding(input, expected_weight, None, max_norm, norm_type)
    out = torch.empty(5, 9, 24, dtype=dtype, device=device)
    infini.ops.embedding(
        input,
        weight,
        None,
        max_norm,
        norm_type,
        False,
        False,
        out,
        implementation_index=implementation_index,
    )
    tolerance = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(weight, expected_weight, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)
    assert not torch.equal(weight, weight.new_zeros(()).expand_as(weight))


def test_embedding_output_overlapping_weight_reads_weight_first(
    device, implementation_index
):
    storage = torch.randn(64, 8, device=device)
    weight = storage[:40]
    input = torch.randint(0, 40, (30,), device=device)
    expected = F.embedding(input, weight.clone())
    out = storage[20:50]
    _embedding(input, weight, out, implementation_index)
    assert torch.equal(out, expected)


def test_embedding_large_runs_in_parallel(device, implementation_index):
    input = torch.randint(0, 1000, (2048,), device=device)
    weight = torch.randn(1000, 256, device=device)
    out = torch.empty(2048, 256, device=device)
    _embedding(input, weight, out, implementation_index)
    assert torch.equal(out, F.embedding(input, weight))


@pytest.mark.parametrize("bad", (-1, 20))
@pytest.mark.parametrize("max_norm", (None, 1.0))
def test_embedding_rejects_indices_out_of_range(bad, max_norm, device):
    input = torch.randint(0, 20, (3, 4), device=device)
    input[2, 1] = bad
    weight = torch.randn(20, 8, device=device) * 5
    original = weight.clone()
    out = torch.full((3, 4, 8), 7.0, device=device)
    with pytest.raises(
        ValueError,
        match=rf"`embedding`: `input\[2, 1\]` is {bad}, out of the range \[0, 20\)",
    ):
        infini.ops.embedding(input, weight, None, max_norm, 2.0, False, False, out)
    assert bool((out == 7.0).all())
    assert torch.equal(weight, original)


@pytest.mark.parametrize(
    "input_shape, weight_shape, out_shape, match",
    [
        ((4,), (10, 8), (4, 7), "`out` must have shape \\(4, 8\\)"),
        ((4,), (10, 8), (8,), "`out` must have shape \\(4, 8\\)"),
        ((4,), (80,), (4, 8), "`weight` must have 2 dimensions"),
    ],
)
def test_embedding_rejects_bad_shapes(
    input_shape, weight_shape, out_shape, match, device
):
    input = torch.zeros(input_shape, dtype=torch.int64, device=device)
    weight = torch.randn(weight_shape, device=device)
    out = torch.empty(out_shape, device=device)
    with pytest.raises(ValueError, match=f"`embedding`: {match}"):
        infini.ops.embedding(input, weight, out)


def test_embedding_rejects_bad_dtypes_and_arguments(device):
    input = torch.zeros(4, dtype=torch.int64, device=device)
    weight = torch.randn(10, 8, device=device)
    out = torch.empty(4, 8, device=device)
    with pytest.raises(ValueError, match="`embedding`: `input` has dtype float32"):
        infini.ops.embedding(input.float(), weight, out)
    with pytest.raises(ValueError, match="`embedding`: `out` has dtype float16"):
        infini.ops.embedding(input, weight, out.half())
    with pytest.raises(ValueError, match="`embedding`: `weight` has dtype int32"):
        infini.ops.embedding(input, weight.int(), out.int())
    with pytest.raises(ValueError, match="`embedding`: `padding_idx` must be in"):
        infini.ops.embedding(input, weight, 10, None, 2.0, False, False, out)
    with pytest.raises(ValueError, match="`embedding`: `padding_idx` must be in"):
        infini.ops.embedding(input, weight, -11, False, False, out)
    with pytest.raises(ValueError, match="`embedding`: `weight` is written"):
        infini.ops.embedding(
            input, weight[:1].expand(10, 8), None, 1.0, 2.0, False, False, out
        )
