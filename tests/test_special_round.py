"""`special_round` and `round` (docs/behaviour.md, "Operators with several call forms"):
both overloads, at slot 8."""

import pytest
import torch

import infini.ops


@pytest.mark.parametrize("decimals", [None, 0, 2, -1])
def test_special_round(decimals, dtype, device, implementation_index):
    input = torch.randn(13, 4, device=device, dtype=dtype) * 50
    out = torch.empty_like(input)
    if decimals is None:
        infini.ops.special_round(input, out, implementation_index=implementation_index)
        expected = torch.special.round(input)
    else:
        infini.ops.special_round(
            input, decimals, out, implementation_index=implementation_index
        )
        expected = torch.special.round(input, decimals=decimals)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("decimals", [None, 1])
def test_round(decimals, device):
    if not hasattr(infini.ops, "Round"):
        pytest.skip("`round` is not in this build")
    input = torch.tensor([0.5, 1.5, 2.5, -0.5, 0.25, 1.25], device=device)
    out = torch.empty_like(input)
    if decimals is None:
        infini.ops.round(input, out, implementation_index=8)
        expected = torch.round(input)
    else:
        infini.ops.round(input, decimals, out, implementation_index=8)
        expected = torch.round(input, decimals=decimals)
    assert torch.equal(out, expected)  # half to even, as torch


def test_special_round_trace_name():
    assert infini.ops.SpecialRound.__name__ == "SpecialRound"
    assert infini.ops._entries["special_round"].trace_name == "special::Round"
