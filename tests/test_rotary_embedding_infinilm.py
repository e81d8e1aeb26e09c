import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# input shape, input strides, out strides, pos_ids shape, smoke
CASES = (
    ((16, 32, 128), None, None, (16,), True),
    ((1, 8, 128), None, None, (1,), False),
    ((7, 3, 64), (400, 128, 2), None, (7,), False),
    ((2, 5, 4, 32), None, (1280, 32, 320, 1), (2, 5), True),
    ((2, 5, 4, 32), None, None, (5,), False),
    ((0, 4, 16), None, None, (0,), False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            for is_neox in (False, True):
                marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
                yield pytest.param(*case, is_neox, dtype, rtol, atol, marks=marks)


def _rotary_embedding_infinilm(
    input, pos_ids, sin_table, cos_table, is_neox, out, implementation_index
):
    result = infini.ops.rotary_embedding_infinilm(
        input,
        pos_ids,
        sin_table,
        cos_table,
        is_neox,
        out,
        implementation_index=implementation_index,
    )
    assert result is None
    return out


def _torch_rotary_embedding_infinilm(
    input, pos_ids, sin_table, cos_table, is_neox, out, implementation_index
):
    x = input.double()
    if input.ndim == 4 and pos_ids.ndim == 1:
        pos_ids = pos_ids.expand(input.shape[0], -1)
    # Broadcast over heads: (..., seq, 1, half).
    sin = sin_table.double()[pos_ids.long()].unsqueeze(-2)
    cos = cos_table.double()[pos_ids.long()].unsqueeze(-2)
    if is_neox:  # interleaved pairs, the reverse of vLLM's naming
        first, second = x[..., 0::2], x[..., 1::2]
    else:
        first, second = x.chunk(2, dim=-1)
    rotated_first = first * cos - second * sin
    rotated_second = second * cos + first * sin
    if is_neox:
        result = torch.stack((rotated_first, rotated_second), dim=-1).flatten(-2)
    else:
        result = torch.cat((rotated_first, rotated_second), dim=-1)
    return result.to(out.dtype)


def _tables(max_position, half, dtype, device):
    angles = torch.rand(max_position, half, device=device) * 6.0
    return angles.sin().to(dtype), angles.cos().to(dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, out_strides, pos_shape, is_neox, dtype, rtol, atol",
    list(_params()),
)
def test_rotary_embedding_infinilm(
    shape,
    input_strides,
    out_strides,
    pos_shape,
    is_neox,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    pos_ids = torch.randint(0, 50, pos_shape, device=device)
    sin_table, cos_table = _tables(50, shape[-1] // 2, dtype, device)
    return Payload(
        _rotary_embedding_infinilm,
        _torch_rotary_embedding_infinilm,
        (input, pos_ids, sin_table, cos_table, is_neox, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_rotary_embedding_infinilm_in_place_int32_float32_tables(
    device, implementation_index
):
    input = torch.randn(6, 4, 32, dtype=torch.bfloat16, device=device)
    pos_ids = torch.randint(0, 20, (6,), dtype=torch.int32, device=device)
    sin_table, cos_table = _tables(20, 16, torch.float32, device)
    expected = _torch_rotary_embedding_infinilm(
        input, pos_ids, sin_table, cos_table, False, input, None
    )
    _rotary_embedding_infinilm(
        input, pos_ids, sin_table, cos_table, False, input, implementation_index
    )
    torch.testing.assert_close(input, expected, rtol=1e-2, atol=1e-2)


def test_rotary_embedding_infinilm_overlapping_output_reads_input_first(
    device, implementation_index
):
    storage = torch.randn(10 * 4 * 32, device=device)
    input = storage[: 8 * 4 * 32].view(8, 4, 32)
    out = storage[2 * 4 * 32 :].view(8, 4, 32)
    pos_ids = torch.randint(0, 20, (8,), device=device)
    sin_table, cos_table = _tables(20, 16, torch.float32, device)
    expected = _torch_rotary_embedding_infinilm(
        input, pos_ids, sin_table, cos_table, True, out, None
    )
    _rotary_embedding_infinilm(
        input, pos_ids, sin_table, cos_table, True, out, implementation_index
    )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", (-3, 20))
def test_rotary_embedding_infinilm_rejects_positions_out_of_range(bad, device):
    input = torch.randn(2, 5, 4, 32, device=device)
    out = torch.full_like(input, 7.0)
    pos_ids = torch.randint(0, 20, (5,), device=device)
    pos_ids[3] = bad
    sin_table, cos_table = _tables(20, 16, torch.float32, device)
    with pytest.raises(
        ValueError,
        match=rf"`rotary_embedding_infinilm`: `pos_ids\[3\]` is {bad}, out of the "
        r"range \[0, 20\)",
    ):
        infini.ops.rotary_embedding_infinilm(
            input, pos_ids, sin_table, cos_table, False, out
        )
    assert bool((out == 7.0).all())


@pytest.mark.parametrize(
    "input_shape, pos_shape, table_shape, out_shape, match",
    [
        ((4, 2, 32), (4,), (8, 16), (4, 2, 31), "`out` must have shape"),
        ((4, 2, 31), (4,), (8, 16), (4, 2, 31), "the head dimension of `input`"),
        ((4, 32), (4,), (8, 16), (4, 32), "`input` must have 3 or 4 dimensions"),
        ((4, 2, 32), (5,), (8, 16), (4, 2, 32), "`pos_ids` must have shape \\(4,\\)"),
        ((3, 4, 2, 32), (3,), (8, 16), (3, 4, 2, 32), "`pos_ids` must have shape"),
        ((4, 2, 32), (4,), (8, 32), (4, 2, 32), "`sin_table` must have shape"),
    ],
)
def test_rotary_embedding_infinilm_rejects_bad_shapes(
    input_shape, pos_shape, table_shape, out_shape, match, device
):
    input = torch.randn(input_shape, device=device)
    pos_ids = torch.zeros(pos_shape, dtype=torch.int64, device=device)
    table = torch.randn(table_shape, device=device)
    out = torch.empty(out_shape, device=device)
    with pytest.raises(ValueError, match=f"`rotary_embedding_infinilm`: {match}"):
        infini.ops.rotary_embedding_infinilm(input, pos_ids, table, table, True, out)


def test_rotary_embedding_infinilm_rejects_bad_dtypes(device):
    input = torch.randn(4, 2, 32, device=device)
    pos_ids = torch.zeros(4, dtype=torch.int64, device=device)
    table = torch.randn(8, 16, device=device)
    out = torch.empty_like(input)
    with pytest.raises(ValueError, match="`rotary_embedding_infinilm`: `out` has"):
        infini.ops.rotary_embedding_infinilm(
            input, pos_ids, table, table, True, out.half()
        )
    with pytest.raises(ValueError, match="`rotary_embedding_infinilm`: `pos_ids` has"):
        infini.ops.rotary_embedding_infinilm(
            input, pos_ids.float(), table, table, True, out
        )
    with pytest.raises(ValueError, match="`rotary_embedding_infinilm`: `cos_table`"):
        infini.ops.rotary_embedding_infinilm(
            input, pos_ids, table, table.half(), True, out
        )


@pytest.mark.parametrize("is_neox", (False, True))
def test_rotary_embedding_infinilm_odd_head_strided_tables_and_positions(
    is_neox, device, implementation_index
):
    # A head of 80 (40 pairs: a padded tile), float16 tables read through
    # a column stride for bfloat16 data, and positions with a stride.
    input = randn_strided((2, 5, 3, 80), None, dtype=torch.bfloat16, device=device)
    out = empty_strided(
        (2, 5, 3, 80), (80, 480, 160, 1), dtype=torch.bfloat16, device=device
    )
    pos_ids = torch.randint(0, 30, (2, 10), device=device)[:, ::2]
    sin, cos = _tables(30, 80, torch.float16, device)
    sin_table, cos_table = sin[:, ::2], cos[:, 1::2]
    expected = _torch_rotary_embedding_infinilm(
        input, pos_ids, sin_table, cos_table, is_neox, out, None
    )
    _rotary_embedding_infinilm(
        input, pos_ids, sin_table, cos_table, is_neox, out, implementation_index
    )
    torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
