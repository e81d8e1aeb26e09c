"""`argsort` (docs/behaviour.md, "Overload binding"): the current and the deprecated
argument order."""

import pytest
import torch

import infini.ops


@pytest.mark.parametrize("shape, dim", [((13, 4), 0), ((13, 4, 4), -1), ((7,), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort(shape, dim, descending, device, implementation_index):
    input = torch.randn(shape, device=device)
    out = torch.empty(shape, dtype=torch.int64, device=device)
    infini.ops.argsort(
        input, dim, descending, True, out, implementation_index=implementation_index
    )
    expected = torch.argsort(input, dim=dim, descending=descending, stable=True)
    assert torch.equal(out, expected)


def test_argsort_deprecated_overload_is_chosen_by_bool_types(
    device, implementation_index
):
    # Ties make the stable order observable.
    input = torch.tensor([3.0, 1.0, 3.0, 1.0, 2.0], device=device)
    out = torch.empty(5, dtype=torch.int64, device=device)
    # (True, 0, True): `dim` rejects nothing, but `descending` (bool) rejects 0
    # in the strict pass, so this is (stable, dim, descending).
    infini.ops.argsort(input, True, 0, True, out, implementation_index=8)
    assert out.tolist() == [0, 2, 4, 1, 3]
    infini.ops.argsort(input, 0, False, True, out, implementation_index=8)
    assert out.tolist() == [1, 3, 4, 0, 2]
    infini.ops.argsort(input=input, stable=True, dim=0, descending=False, out=out)
    assert out.tolist() == [1, 3, 4, 0, 2]
