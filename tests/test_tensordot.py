"""`tensordot` (docs/behaviour.md, "Operators with several call forms"): explicit lists,
a count, and a pair of lists."""

import pytest
import torch

import infini.ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_tensordot_three_overloads(dtype, device, implementation_index):
    a = torch.randn(3, 4, 5, dtype=dtype, device=device)
    b = torch.randn(4, 5, 6, dtype=dtype, device=device)
    expected = torch.tensordot(a, b, dims=2)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    out = torch.empty(3, 6, dtype=dtype, device=device)
    infini.ops.tensordot(a, b, [1, 2], [0, 1], out, implementation_index=8)
    assert torch.allclose(out, expected, rtol=tolerance, atol=tolerance)
    out.zero_()
    infini.ops.tensordot(a, b, 2, out, implementation_index=implementation_index)
    assert torch.allclose(out, expected, rtol=tolerance, atol=tolerance)
    out.zero_()
    infini.ops.tensordot(
        a, b, [[1, 2], [0, 1]], out, implementation_index=implementation_index
    )
    assert torch.allclose(out, expected, rtol=tolerance, atol=tolerance)


def test_tensordot_dims_zero_is_an_outer_product(device):
    a, b = torch.randn(2, 3, device=device), torch.randn(4, device=device)
    out = torch.empty(2, 3, 4, device=device)
    infini.ops.tensordot(a, b, 0, out, implementation_index=8)
    assert torch.allclose(out, torch.tensordot(a, b, dims=0))


def test_tensordot_rejects_bad_dims(device):
    a, b = torch.randn(2, 3, device=device), torch.randn(3, 4, device=device)
    out = torch.empty(2, 4, device=device)
    with pytest.raises(ValueError, match="`tensordot`: `dims` must be between 0"):
        infini.ops.tensordot(a, b, 3, out)
    with pytest.raises(ValueError, match="`tensordot`: `dims` must list as many"):
        infini.ops.tensordot(a, b, [[1], [0, 1]], out)
