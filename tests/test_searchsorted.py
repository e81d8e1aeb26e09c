"""`searchsorted` (docs/behaviour.md, "Operators with several call forms"): the four
overloads in binding order."""

import pytest
import torch

import infini.ops


def _sequence(device):
    return torch.tensor([[1.0, 3.0, 5.0, 7.0, 9.0], [2.0, 4.0, 6.0, 8.0, 10.0]]).to(
        device
    )


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
def test_searchsorted_tensor_values(right, out_int32, device, implementation_index):
    sequence = _sequence(device)
    values = torch.tensor([[3.0, 6.0, 9.0], [1.0, 6.0, 11.0]], device=device)
    dtype = torch.int32 if out_int32 else torch.int64
    out = torch.empty(2, 3, dtype=dtype, device=device)
    expected = torch.searchsorted(sequence, values, out_int32=out_int32, right=right)
    # Overload 3: (sorted_sequence, input, sorter, out_int32, right, side, out).
    infini.ops.searchsorted(
        sequence,
        values,
        None,
        out_int32,
        right,
        None,
        out,
        implementation_index=implementation_index,
    )
    assert torch.equal(out, expected)
    # Overload 4: `sorter` after `side`.
    out.fill_(-1)
    infini.ops.searchsorted(
        sequence,
        values,
        out_int32,
        right,
        None,
        None,
        out,
        implementation_index=implementation_index,
    )
    assert torch.equal(out, expected)


def test_searchsorted_scalar_value_side_and_sorter(device, implementation_index):
    sequence = torch.tensor([9.0, 1.0, 5.0, 3.0, 7.0], device=device)
    sorter = torch.argsort(sequence)
    out = torch.empty((), dtype=torch.int64, device=device)
    # Overload 1: a float value, `sorter` third; `side` overrides `right`.
    infini.ops.searchsorted(
        sequence,
        5.0,
        sorter,
        False,
        False,
        "right",
        out,
        implementation_index=implementation_index,
    )
    assert out.item() == torch.searchsorted(sequence, 5.0, side="right", sorter=sorter)
    # Overload 2: `sorter` last.
    infini.ops.searchsorted(
        sequence,
        5.0,
        False,
        False,
        "left",
        sorter,
        out,
        implementation_index=implementation_index,
    )
    assert out.item() == 2
