import pytest
import torch

import infini.ops
from tests.utils import Payload, randn_strided

ALL_DTYPES = (
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
)


def _zeros(input, out, implementation_index):
    result = infini.ops.zeros_infinilm(
        input, out, implementation_index=implementation_index
    )
    assert result is None
    return out


def _torch_zeros(input, out, implementation_index):
    return out.zero_()


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, strides",
    [
        pytest.param((13, 4), None, marks=pytest.mark.smoke),
        ((13, 4), (1, 13)),
        ((13, 4), (10, 2)),
        ((16, 5632), None),
        ((64, 2048), (1, 64)),
        ((0, 4), None),
        ((), None),
    ],
)
def test_zeros_infinilm(shape, strides, dtype, device, implementation_index):
    out = randn_strided(shape, strides, dtype=dtype, device=device)
    return Payload(
        _zeros, _torch_zeros, (out, out, implementation_index), rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_zeros_infinilm_every_dtype_leaves_gaps_alone(
    dtype, device, implementation_index
):
    storage = torch.ones(40, device=device).to(dtype)
    out = storage.view(8, 5)[:, :3]
    _zeros(out, out, implementation_index)
    assert not bool(out.any())
    assert bool(storage.view(8, 5)[:, 3:].all())


def test_zeros_infinilm_writes_positive_zero(device, implementation_index):
    out = torch.full((9,), -1.5, dtype=torch.float64, device=device)
    _zeros(torch.empty_like(out), out, implementation_index)
    assert not bool(out.signbit().any())


def test_zeros_infinilm_rejects_bad_arguments(device):
    out = torch.full((4, 5), 7.0, device=device)
    with pytest.raises(ValueError, match="`zeros_infinilm`: `out` must have shape"):
        infini.ops.zeros_infinilm(torch.empty(5, 4, device=device), out)
    with pytest.raises(ValueError, match="`zeros_infinilm`: `out` has dtype float32"):
        infini.ops.zeros_infinilm(out.half(), out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`zeros_infinilm`: `out` is written"):
        broadcast = torch.empty(1, 5, device=device).expand(4, 5)
        infini.ops.zeros_infinilm(broadcast, broadcast)
