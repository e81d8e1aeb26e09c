import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: `exp` and the two roundings of `input * (gate / (1 + exp(-gate)))`
# land within two ulps of the float64 reference. 16-bit results round once
# from float32; a float32 difference can flip that rounding by one ulp,
# 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-6, 1e-7),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# shape, input strides, gate strides, out strides, smoke
CASES = (
    ((13, 4), None, None, None, True),
    ((16, 5632), None, None, None, True),
    ((13, 4), (10, 1), (10, 1), (10, 1), False),
    ((13, 4), (0, 1), None, None, False),
    ((13, 4), None, (1, 0), (1, 13), False),
    ((13, 4, 4), None, None, None, False),
    ((4097,), None, None, None, False),
    ((4, 4, 5632), (45056, 5632, 1), None, (45056, 5632, 1), False),
    ((0, 5), None, None, None, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _swiglu(input, gate, out, implementation_index):
    infini.ops.swiglu(input, gate, out, implementation_index=implementation_index)
    return out


def _torch_swiglu(input, gate, out, implementation_index):
    result = input.double() * torch.nn.functional.silu(gate.double())
    return result.to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, gate_strides, out_strides, dtype, rtol, atol",
    list(_params()),
)
def test_swiglu(
    shape,
    input_strides,
    gate_strides,
    out_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    gate = randn_strided(shape, gate_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _swiglu,
        _torch_swiglu,
        (input, gate, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_swiglu_float64(device, implementation_index):
    input = torch.randn(7, 33, dtype=torch.float64, device=device)
    gate = torch.randn(7, 33, dtype=torch.float64, device=device)
    out = torch.empty_like(input)
    _swiglu(input, gate, out, implementation_index)
    expected = input * torch.nn.functional.silu(gate)
    assert torch.allclose(out, expected, rtol=1e-14, atol=1e-15)


def test_swiglu_extreme_gates_like_torch(device, implementation_index):
    gate = torch.tensor(
        [-1e4, -100.0, -89.0, -20.0, 0.0, 20.0, 100.0, 1e4, float("inf"), float("nan")],
        device=device,
    )
    input = torch.full_like(gate, 3.0)
    out = torch.empty_like(gate)
    _swiglu(input, gate, out, implementation_index)
    # Against float64: below -88 torch's float32 kernel underflows to -0,
    # while the true (and our) result is a tiny normal or subnormal number.
    expected = (input.double() * torch.nn.functional.silu(gate.double())).float()
    tiny = torch.finfo(torch.float32).tiny
    # Each element matches float64, or torch's own float32 result (the
    # CUDA-like Triton kernel underflows below -88 exactly as torch does).
    like_torch = input * torch.nn.functional.silu(gate)
    close = torch.isclose(out, expected, rtol=1e-6, atol=tiny, equal_nan=True)
    close |= torch.isclose(out, like_torch, rtol=1e-6, atol=0.0, equal_nan=True)
    assert bool(close.all()), (out, expected)


def test_swiglu_broadcasts_inputs_of_lower_rank(device, implementation_index):
    input = torch.randn(5, 1, 3, device=device)
    gate = torch.randn(4, 1, device=device)
    out = torch.empty(5, 4, 3, device=device)
    _swiglu(input, gate, out, implementation_index)
    expected = input * torch.nn.functional.silu(gate)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("target", ["input", "gate"])
def test_swiglu_in_place(target, device, implementation_index):
    input = torch.randn(33, 17, device=device)
    gate = torch.randn(33, 17, device=device)
    expected = input * torch.nn.functional.silu(gate)
    out = input if target == "input" else gate
    _swiglu(input, gate, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


def test_swiglu_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(64 * 64, device=device)
    input = storage.view(64, 64)
    gate = torch.randn(64, 64, device=device)
    expected = input * torch.nn.functional.silu(gate)
    out = storage.view(64, 64).t()
    _swiglu(input, gate, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-7)


def test_swiglu_rejects_shapes_that_do_not_broadcast(device):
    input = torch.randn(4, 5, device=device)
    gate = torch.randn(4, 6, device=device)
    with pytest.raises(ValueError, match="`swiglu`: the inputs do not broadcast"):
        infini.ops.swiglu(input, gate, torch.empty(4, 5, device=device))


def test_swiglu_rejects_wrong_output_shape_without_writing(device):
    input = torch.randn(4, 5, device=device)
    out = torch.full((4, 4), 7.0, device=device)
    with pytest.raises(
        ValueError, match="`swiglu`: `out` must have the broadcast shape"
    ):
        infini.ops.swiglu(input, input, out)
    assert bool((out == 7.0).all())


def test_swiglu_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 5, device=device)
    gate = torch.randn(4, 5, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="`swiglu`: `gate` has dtype float16"):
        infini.ops.swiglu(input, gate, torch.empty_like(input))


def test_swiglu_rejects_unsupported_dtype(device):
    input = torch.ones(4, 5, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`swiglu`: `input` has dtype int32"):
        infini.ops.swiglu(input, input, torch.empty_like(input))


def test_swiglu_rejects_broadcast_output(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(1, 5, device=device).expand(4, 5)
    with pytest.raises(
        ValueError, match="`swiglu`: `out` is written but has a stride-0"
    ):
        infini.ops.swiglu(input, input, out)


def test_swiglu_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match="`swiglu`: `gate` must be a tensor"):
        infini.ops.swiglu(input, 1.0, torch.empty_like(input))
    with pytest.raises(TypeError, match="`swiglu`: incompatible function arguments"):
        infini.ops.swiglu(input, input)
