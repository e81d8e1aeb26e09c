import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# One float32 sum of `topk` terms against float64: a few ulps; 16-bit
# outputs round once.
DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# tokens, topk, hidden, input strides, output strides, masked, smoke
CASES = (
    (16, 2, 64, None, None, False, True),
    (33, 8, 64, None, None, True, False),
    # Slots summed four at a time, then the rest (six, five after masking).
    (7, 6, 96, None, None, False, False),
    (9, 5, 40, (400, 80, 1), None, True, False),
    (1, 2, 4096, None, None, False, False),
    (5, 3, 33, (200, 40, 1), (1, 5), True, False),
    (4, 2, 8, (2, 1, 8), None, False, False),
    (0, 2, 64, None, None, True, False),
    (3, 0, 8, None, None, False, False),
    # Rows longer than a program's block (GPUs and the interpreter alike).
    (2, 3, 9000, None, None, True, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float16 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _moe_sum(input, topk_ids, expert_map, output, implementation_index):
    if topk_ids is None and expert_map is None:
        infini.ops.moe_sum(input, output, implementation_index=implementation_index)
    else:
        infini.ops.moe_sum(
            input,
            topk_ids,
            expert_map,
            output,
            implementation_index=implementation_index,
        )
    return output


def _torch_moe_sum(input, topk_ids, expert_map, output, _=None):
    x = input.double()
    if topk_ids is not None:
        ids = topk_ids.long()
        if expert_map is not None:
            inside = (ids >= 0) & (ids < expert_map.shape[0])
            mapped = expert_map.long()[ids.clamp(0, expert_map.shape[0] - 1)]
            ids = torch.where(inside, mapped, torch.full_like(ids, -1))
        x = x * (ids >= 0).unsqueeze(-1)
    return x.sum(dim=1).to(output.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, topk, hidden, input_strides, output_strides, masked, dtype, rtol, atol",
    list(_params()),
)
def test_moe_sum(
    tokens,
    topk,
    hidden,
    input_strides,
    output_strides,
    masked,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(
        (tokens, topk, hidden), input_strides, dtype=dtype, device=device
    )
    output = empty_strided((tokens, hidden), output_strides, dtype=dtype, device=device)
    topk_ids = (
        torch.randint(-1, 8, (tokens, topk), dtype=torch.int32, device=device)
        if masked
        else None
    )
    return Payload(
        _moe_sum,
        _torch_moe_sum,
        (input, topk_ids, None, output, implementation_index),
        rtol=rtol,
        atol=atol,
    )


@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_moe_sum_expert_map(id_dtype, device, implementation_index):
    input = torch.randn(9, 4, 32, device=device)
    topk_ids = torch.randint(-1, 10, (9, 4), dtype=id_dtype, device=device)
    topk_ids[0, 0] = 12  # outside the map: skipped
    expert_map = torch.tensor([0, -1, 1, -1, 2, 3, -1, -1, 4, -1], dtype=id_dtype)
    output = torch.empty(9, 32, device=device)
    _moe_sum(input, topk_ids, expert_map, output, implementation_index)
    expected = _torch_moe_sum(input, topk_ids, expert_map, output)
    assert torch.allclose(output, expected, rtol=1e-5, atol=1e-5)


def test_moe_sum_many_tokens_run_in_parallel(device, implementation_index):
    input = torch.randn(512, 8, 256, dtype=torch.bfloat16, device=device)
    output = torch.empty(512, 256, dtype=torch.bfloat16, device=device)
    _moe_sum(input, None, None, output, implementation_index)
    expected = _torch_moe_sum(input, None, None, output)
    assert torch.allclose(output.float(), expected.float(), rtol=1e-2, atol=1e-2)


def test_moe_sum_output_overlapping_input(device, implementation_index):
    input = torch.randn(6, 2, 16, device=device)
    expected = _torch_moe_sum(input, None, None, input[:, 0])
    _moe_sum(input, None, None, input[:, 0], implementation_index)
    assert torch.allclose(input[:, 0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "input_shape, output_shape, ids_shape, use_map, output_dtype, match",
    [
        (
            (4, 2, 8),
            (4, 9),
            None,
            False,
            torch.float32,
            "`output` must have shape \\(4, 8\\)",
        ),
        ((4, 8), (4, 8), None, False, torch.float32, "`input` must have 3 dimensions"),
        (
            (4, 2, 8),
            (4, 8),
            (4, 3),
            False,
            torch.float32,
            "`topk_ids` must have shape \\(4, 2\\)",
        ),
        ((4, 2, 8), (4, 8), None, True, torch.float32, "`expert_map` needs `topk_ids`"),
        ((4, 2, 8), (4, 8), None, False, torch.float16, "`output` has dtype float16"),
    ],
)
def test_moe_sum_rejects_bad_arguments(
    input_shape, output_shape, ids_shape, use_map, output_dtype, match, device
):
    input = torch.randn(input_shape, device=device)
    output = torch.full(output_shape, 7.0, dtype=output_dtype, device=device)
    topk_ids = None if ids_shape is None else torch.zeros(ids_shape, dtype=torch.int32)
    expert_map = torch.zeros(4, dtype=torch.int32) if use_map else None
    with pytest.raises(ValueError, match=f"`moe_sum`: {match}"):
        infini.ops.moe_sum(input, topk_ids, expert_map, output)
    assert bool((output == 7).all())
