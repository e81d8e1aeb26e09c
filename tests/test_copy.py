import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided


def _copy(src, out, implementation_index):
    result = infini.ops.copy(src, False, out, implementation_index=implementation_index)
    assert result is None
    return out


def _torch_copy(src, out, implementation_index):
    return out.copy_(src)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "src_shape, src_strides, out_shape, out_strides, src_dtype, out_dtype",
    [
        pytest.param(
            (13, 4),
            None,
            (13, 4),
            None,
            torch.float32,
            torch.float32,
            marks=pytest.mark.smoke,
        ),
        ((13, 4), (1, 13), (13, 4), None, torch.float16, torch.float16),
        ((13, 4), None, (13, 4), (1, 13), torch.int64, torch.int64),
        ((13, 4), (10, 1), (13, 4), (10, 1), torch.bfloat16, torch.bfloat16),
        ((4,), None, (13, 4), None, torch.float32, torch.float32),
        ((13, 1), None, (13, 4), None, torch.int8, torch.int8),
        ((13, 4), (0, 1), (13, 4), None, torch.float32, torch.float32),
        pytest.param(
            (13, 4),
            None,
            (13, 4),
            None,
            torch.float32,
            torch.float16,
            marks=pytest.mark.smoke,
        ),
        ((13, 4), (1, 13), (13, 4), None, torch.bfloat16, torch.float32),
        ((13, 4), None, (13, 4), None, torch.float64, torch.int32),
        ((13, 4), None, (13, 4), None, torch.int32, torch.float64),
        ((13, 4), None, (13, 4), None, torch.float32, torch.bool),
        ((2048, 4096), None, (2048, 4096), None, torch.float32, torch.float32),
        ((64, 2048), (1, 64), (64, 2048), None, torch.bfloat16, torch.bfloat16),
        ((0, 4), None, (0, 4), None, torch.float32, torch.float32),
        ((), None, (), None, torch.float32, torch.float32),
    ],
)
def test_copy(
    src_shape,
    src_strides,
    out_shape,
    out_strides,
    src_dtype,
    out_dtype,
    device,
    implementation_index,
):
    src = randn_strided(src_shape, src_strides, dtype=torch.float32, device=device)
    src = (src * 50).to(src_dtype)
    out = empty_strided(out_shape, out_strides, dtype=out_dtype, device=device)
    # A copy (with torch's conversions) is exact.
    return Payload(_copy, _torch_copy, (src, out, implementation_index), rtol=0, atol=0)


def test_copy_keeps_nan_payloads_and_negative_zero(device, implementation_index):
    bits = torch.tensor([0x7FC00001, -0x80000000, 0x7F800000, -1], dtype=torch.int32)
    src = bits.view(torch.float32).to(device)
    out = torch.empty_like(src)
    _copy(src, out, implementation_index)
    assert torch.equal(out.view(torch.int32), src.view(torch.int32))


@pytest.mark.parametrize("non_blocking", [False, True])
def test_copy_non_blocking_keywords(non_blocking, device, implementation_index):
    src = torch.randn(5, 6, device=device)
    out = torch.empty_like(src)
    infini.ops.copy(
        src=src,
        non_blocking=non_blocking,
        out=out,
        implementation_index=implementation_index,
    )
    assert torch.equal(out, src)


def test_copy_partially_overlapping_reads_src_first(device, implementation_index):
    storage = torch.randn(100, device=device)
    src = storage[:90]
    expected = src.clone()
    _copy(src, storage[3:93], implementation_index)
    assert torch.equal(storage[3:93], expected)
    square = torch.randn(30, 30, device=device)
    expected = square.clone()
    _copy(square, square.t(), implementation_index)
    # `out` (the transposed view) holds the original `square`.
    assert torch.equal(square.t(), expected)


def test_copy_onto_itself(device, implementation_index):
    # Same elements, same addresses: written in place, no staging needed.
    src = torch.randn(8, 8, device=device)
    expected = src.clone()
    _copy(src, src, implementation_index)
    assert torch.equal(src, expected)


def test_copy_rejects_bad_arguments(device):
    src = torch.randn(4, 5, device=device)
    out = torch.full((4, 6), 7.0, device=device)
    with pytest.raises(ValueError, match="`copy`: `src` of shape \\(4, 5\\) does not"):
        infini.ops.copy(src, False, out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`copy`: `src` of shape"):
        infini.ops.copy(src, False, torch.empty(5, device=device))
    with pytest.raises(ValueError, match="`copy`: `out` is written but has a stride-0"):
        infini.ops.copy(src, False, torch.empty(1, 5, device=device).expand(4, 5))
    with pytest.raises(ValueError, match="`copy`: `src` must be a tensor"):
        infini.ops.copy([1.0], False, src)
    with pytest.raises(TypeError, match="`copy`: incompatible function arguments"):
        infini.ops.copy(src, src)
