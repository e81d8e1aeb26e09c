import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

ALL_DTYPES = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]


def _cat(tensors, dim, out, implementation_index):
    infini.ops.cat(tensors, dim, out, implementation_index=implementation_index)
    return out


def _torch_cat(tensors, dim, out, implementation_index):
    return torch.cat(tensors, dim)


# (member shapes, member strides (None: contiguous), dim, out shape, out strides)
CASES = [
    pytest.param(
        ((4, 64), (4, 64)), (None, None), 0, (8, 64), None, marks=pytest.mark.smoke
    ),
    pytest.param(
        ((4, 32), (4, 64)), (None, None), -1, (4, 96), None, marks=pytest.mark.smoke
    ),
    (((13, 4), (13, 4)), (None, None), 1, (13, 8), None),
    (((1,), (4097,), (13,)), (None, None, None), 0, (4111,), None),
    (((3, 5, 7), (3, 2, 7), (3, 1, 7)), (None, None, None), -2, (3, 8, 7), None),
    (((3, 5, 7), (3, 5, 7)), (None, None), 2, (3, 5, 14), None),
    # Strided and transposed members and outputs.
    (((13, 4), (13, 4)), ((10, 1), (1, 13)), 0, (26, 4), (10, 1)),
    (((13, 4), (13, 3)), ((1, 13), None), 1, (13, 7), (1, 13)),
    # Broadcast (stride-0) members.
    (((13, 4), (13, 4)), ((0, 1), (1, 0)), 0, (26, 4), None),
    # Zero-size members, and shape (0,) members, which torch skips.
    (((0, 4), (13, 4), (0, 4)), (None, None, None), 0, (13, 4), None),
    (((13, 0), (13, 4)), (None, None), 1, (13, 4), None),
    (((0,), (13, 4), (0,)), (None, None, None), 1, (13, 4), None),
    (((0, 4), (0, 4)), (None, None), 0, (0, 4), None),
    (((0,), (0,)), (None, None), 0, (0,), None),
    # A single member is a copy.
    (((13, 4),), (None,), 0, (13, 4), (1, 13)),
    # Large enough for the parallel kernel.
    (((16, 5632), (16, 5632)), (None, None), 0, (32, 5632), None),
    (((16, 2816), (16, 2816)), (None, (1, 16)), 1, (16, 5632), None),
]


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize("shapes, strides, dim, out_shape, out_strides", CASES)
def test_cat(
    shapes, strides, dim, out_shape, out_strides, dtype, device, implementation_index
):
    tensors = [
        randn_strided(shape, stride, dtype=dtype, device=device)
        for shape, stride in zip(shapes, strides, strict=True)
    ]
    out = empty_strided(out_shape, out_strides, dtype=dtype, device=device)
    # `cat` copies values: the result is exact.
    return Payload(
        _cat, _torch_cat, (tensors, dim, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cat_every_dtype_bit_for_bit(dtype, device, implementation_index):
    if dtype.is_floating_point:
        members = [torch.randn(5, 3, dtype=dtype, device=device) for _ in range(3)]
        # NaN payloads and signed zeros are copied verbatim.
        members[0][0] = torch.tensor([float("nan"), -0.0, -float("nan")])
    else:
        members = [
            randint_strided(0, 2 if dtype == torch.bool else 100, (5, 3), dtype=dtype)
            for _ in range(3)
        ]
    members[1] = members[1].t().contiguous().t()
    out = torch.empty(5, 9, dtype=dtype, device=device)
    infini.ops.cat(members, 1, out, implementation_index=implementation_index)
    expected = torch.cat(members, 1)
    if dtype.is_floating_point:
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
        out, expected = out.view(bits), expected.view(bits)
    assert torch.equal(out, expected)


def test_cat_accepts_tuples_and_keywords(device, implementation_index):
    members = (torch.randn(2, 3, device=device), torch.randn(1, 3, device=device))
    out = torch.empty(3, 3, device=device)
    infini.ops.cat(
        tensors=members, dim=0, out=out, implementation_index=implementation_index
    )
    assert torch.equal(out, torch.cat(members))


def test_cat_same_member_twice(device, implementation_index):
    member = torch.randn(4, 5, device=device)
    out = torch.empty(4, 10, device=device)
    infini.ops.cat([member, member], -1, out, implementation_index=implementation_index)
    assert torch.equal(out, torch.cat([member, member], -1))


def test_cat_member_that_is_its_own_slice_of_out(device, implementation_index):
    out = torch.randn(6, 8, device=device)
    first = out[:, :3]
    second = torch.randn(6, 5, device=device)
    expected = torch.cat([first, second], 1)
    infini.ops.cat([first, second], 1, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("layout", ["shifted", "swapped", "transposed"])
def test_cat_overlapping_output_reads_members_first(
    layout, device, implementation_index
):
    out = torch.randn(8, 6, device=device)
    if layout == "shifted":
        # Each member is a slice of `out` that another member's copy writes.
        members = [out[1:5], out[3:7]]
    elif layout == "swapped":
        members = [out[4:], out[:4]]
    else:
        # The first member is its own slice of `out`, transposed.
        members = [out[:6].t(), out[6:]]
    expected = torch.cat([m.clone() for m in members], 0)
    infini.ops.cat(members, 0, out, implementation_index=implementation_index)
    assert torch.equal(out, expected)


def test_cat_rejects_dim_out_of_range(device):
    members = [torch.randn(2, 3, device=device)] * 2
    out = torch.empty(4, 3, device=device)
    for dim in (2, -3, 100):
        with pytest.raises(ValueError, match=r"`cat`: `dim` must be in the range"):
            infini.ops.cat(members, dim, out)


def test_cat_rejects_mismatched_member_shapes_without_writing(device):
    out = torch.full((4, 3), 7.0, device=device)
    members = [torch.randn(2, 3, device=device), torch.randn(2, 4, device=device)]
    with pytest.raises(ValueError, match=r"`cat`: `tensors\[1\]` has shape \(2, 4\)"):
        infini.ops.cat(members, 0, out)
    assert bool((out == 7.0).all())


def test_cat_rejects_mismatched_ranks(device):
    out = torch.empty(4, 3, device=device)
    members = [torch.randn(2, 3, device=device), torch.randn(2, 3, 1, device=device)]
    with pytest.raises(ValueError, match=r"`cat`: `tensors\[1\]` has 3 dimensions"):
        infini.ops.cat(members, 0, out)


def test_cat_rejects_wrong_output_size(device):
    members = [torch.randn(2, 3, device=device)] * 2
    for shape in [(5, 3), (3, 3)]:
        out = torch.empty(shape, device=device)
        with pytest.raises(ValueError, match=r"`cat`: `out` has size \d along dim"):
            infini.ops.cat(members, 0, out)
    with pytest.raises(ValueError, match=r"`cat`: `tensors\[0\]` has shape \(2, 3\)"):
        infini.ops.cat(members, 0, torch.empty(4, 4, device=device))
    with pytest.raises(ValueError, match=r"`cat`: `out` must have shape \(0,\)"):
        infini.ops.cat([torch.empty(0, device=device)], 0, torch.empty(0, 2))


def test_cat_rejects_mismatched_dtypes(device):
    members = [torch.randn(2, 3, device=device), torch.randn(2, 3, device=device)]
    members[1] = members[1].double()
    with pytest.raises(ValueError, match=r"`cat`: `tensors\[1\]` has dtype float64"):
        infini.ops.cat(members, 0, torch.empty(4, 3, device=device))


def test_cat_rejects_zero_dimensional_output(device):
    members = [torch.tensor(1.0, device=device)] * 2
    with pytest.raises(ValueError, match=r"`cat`: `out` must have at least one dim"):
        infini.ops.cat(members, 0, torch.empty((), device=device))


def test_cat_rejects_broadcast_output(device):
    members = [torch.randn(2, 3, device=device)] * 2
    out = torch.empty(1, 3, device=device).expand(4, 3)
    with pytest.raises(ValueError, match="`cat`: `out` is written but has a stride-0"):
        infini.ops.cat(members, 0, out)


def test_cat_rejects_unsupported_dtype(device):
    members = [torch.randn(2, 3, dtype=torch.complex64, device=device)] * 2
    out = torch.empty(4, 3, dtype=torch.complex64, device=device)
    with pytest.raises(ValueError, match=r"`cat`: `tensors\[0\]` has unsupported"):
        infini.ops.cat(members, 0, out)


def test_cat_rejects_bad_arguments(device):
    member = torch.randn(2, 3, device=device)
    out = torch.empty(4, 3, device=device)
    with pytest.raises(ValueError, match=r"`cat`: `tensors\[1\]` must be a tensor"):
        infini.ops.cat([member, 1.0], 0, out)
    with pytest.raises(ValueError, match="`cat`: `tensors` must hold at least one"):
        infini.ops.cat([], 0, out)
    # A tensor binds as the list of its slices along dimension 0 (pybind11's
    # rule), which here have one dimension too few.
    with pytest.raises(ValueError, match="`cat`: `tensors\\[0\\]` has 1 dimensions"):
        infini.ops.cat(member, 0, out)
    with pytest.raises(TypeError, match="`cat`: incompatible function arguments"):
        infini.ops.cat([member, member], 0.0, out)
