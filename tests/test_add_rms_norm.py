import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: the sum of squares runs in another order than the float64
# reference (vector lanes). 16-bit results round once from float32.
DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# shape, input strides, residual strides, out strides, eps, smoke
CASES = (
    ((1, 64), None, None, None, 1e-6, True),
    ((2, 4, 2048), None, None, None, None, True),
    ((2, 4, 2048), None, None, None, "absent", False),
    ((13, 33), (40, 1), (1, 13), (1, 13), 1e-5, False),
    ((3, 5, 33), (0, 33, 1), None, None, 1e-6, False),
    ((0, 64), None, None, None, 1e-6, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            if case[1:4] != [None] * 3 and dtype == torch.float16:
                continue  # strided layouts: float32 and bfloat16 suffice
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _add_rms_norm(input, residual, weight, out, residual_out, eps, index):
    if eps == "absent":
        result = infini.ops.add_rms_norm(
            input, residual, weight, out, residual_out, implementation_index=index
        )
    else:
        result = infini.ops.add_rms_norm(
            input, residual, weight, eps, out, residual_out, implementation_index=index
        )
    assert result is None
    return out, residual_out


def _torch_add_rms_norm(input, residual, weight, out, residual_out, eps, index):
    eps = 1e-6 if eps in (None, "absent") else eps
    # Added in float32 (float64 for float64) and rounded once.
    wide = torch.float64 if input.dtype == torch.float64 else torch.float32
    total = input.to(wide) + residual.to(wide)
    x = total.double()
    normed = x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * weight.double()
    return normed.to(out.dtype), total.to(residual_out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "shape, input_strides, residual_strides, out_strides, eps, dtype, rtol, atol",
    list(_params()),
)
def test_add_rms_norm(
    shape,
    input_strides,
    residual_strides,
    out_strides,
    eps,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    residual = randn_strided(shape, residual_strides, dtype=dtype, device=device)
    weight = randn_strided(shape[-1:], None, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    residual_out = empty_strided(shape, None, dtype=dtype, device=device)
    return Payload(
        _add_rms_norm,
        _torch_add_rms_norm,
        (input, residual, weight, out, residual_out, eps, implementation_index),
        rtol=rtol,
        atol=atol,
    )


def test_add_rms_norm_float64_and_mixed_weight(device, implementation_index):
    input = torch.randn(3, 7, 96, dtype=torch.float64, device=device)
    residual = torch.randn_like(input)
    weight = torch.randn(96, dtype=torch.float64, device=device)
    out, residual_out = torch.empty_like(input), torch.empty_like(input)
    _add_rms_norm(
        input, residual, weight, out, residual_out, 1e-5, implementation_index
    )
    expected = _torch_add_rms_norm(input, residual, weight, out, residual_out, 1e-5, 0)
    assert torch.allclose(out, expected[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(residual_out, input + residual)

    input = torch.randn(5, 64, dtype=torch.bfloat16, device=device)
    weight = torch.randn(64, dtype=torch.float32, device=device)
    out, residual_out = torch.empty_like(input), torch.empty_like(input)
    _add_rms_norm(input, input, weight, out, residual_out, 1e-6, implementation_index)
    expected = _torch_add_rms_norm(input, input, weight, out, residual_out, 1e-6, 0)
    assert torch.allclose(out, expected[0], rtol=1e-2, atol=1e-2)


def test_add_rms_norm_in_place_and_overlapping(device, implementation_index):
    input = torch.randn(33, 40, device=device)
    residual = torch.randn(33, 40, device=device)
    weight = torch.randn(40, device=device)
    expected = _torch_add_rms_norm(input, residual, weight, input, input, 1e-6, 0)
    # vLLM's usage: the sum goes back into `residual`, the result into `input`.
    _add_rms_norm(input, residual, weight, input, residual, 1e-6, implementation_index)
    assert torch.allclose(input, expected[0], rtol=1e-5, atol=1e-5)
    assert torch.allclose(residual, expected[1], rtol=1e-6, atol=1e-6)

    storage = torch.randn(40 * 32, device=device)
    input = storage[: 32 * 32].view(32, 32)
    residual = torch.randn(32, 32, device=device)
    weight = storage[-32:]
    expected = _torch_add_rms_norm(input, residual, weight, input, input, 1e-6, 0)
    out = storage[8 * 32 :].view(32, 32).t()
    residual_out = torch.empty(32, 32, device=device)
    _add_rms_norm(
        input, residual, weight, out, residual_out, 1e-6, implementation_index
    )
    assert torch.allclose(out, expected[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
def test_add_rms_norm_16_bit_normalises_the_unrounded_sum_in_place(
    dtype, device, implementation_index
):
    # A 16-bit `residual_out` does not hold the float32 sum that is
    # normalised: it is added again from the inputs, or kept aside when
    # `residual_out` is an input (then the inputs are overwritten first).
    input = torch.randn(33, 4100, dtype=dtype, device=device)
    residual = torch.randn(33, 4100, dtype=dtype, device=device)
    weight = torch.randn(4100, dtype=dtype, device=device)
    expected = _torch_add_rms_norm(input, residual, weight, input, input, 1e-6, 0)
    rtol = atol = 1e-3 if dtype == torch.float16 else 1e-2
    layouts = (
        ("separate", lambda a, r: (torch.empty_like(a), torch.empty_like(a))),
        ("vllm", lambda a, r: (a, r)),
        ("sum_into_input", lambda a, r: (torch.empty_like(a), a)),
    )
    for name, outputs in layouts:
        a, r = input.clone(), residual.clone()
        out, residual_out = outputs(a, r)
        _add_rms_norm(a, r, weight, out, residual_out, 1e-6, implementation_index)
        assert torch.allclose(out, expected[0], rtol=rtol, atol=atol), name
        assert torch.equal(residual_out, expected[1]), name


def test_add_rms_norm_large_rows_run_in_parallel(device, implementation_index):
    input = torch.randn(256, 1024, device=device)[:, ::2]
    residual = torch.randn(256, 512, device=device)
    weight = torch.randn(512, device=device)
    out, residual_out = torch.empty(256, 512), torch.empty(256, 512)
    _add_rms_norm(
        input, residual, weight, out, residual_out, 1e-6, implementation_index
    )
    expected = _torch_add_rms_norm(input, residual, weight, out, residual_out, 1e-6, 0)
    assert torch.allclose(out, expected[0], rtol=1e-5, atol=1e-5)
    assert torch.allclose(residual_out, expected[1], rtol=0, atol=0)


@pytest.mark.parametrize(
    "name, shape, match",
    [
        ("residual", (4, 63), "`residual` must have shape \\(4, 64\\)"),
        ("weight", (63,), "`weight` must have shape \\(64,\\) to match"),
        ("out", (4, 63), "`out` must have shape \\(4, 64\\)"),
        ("residual_out", (5, 64), "`residual_out` must have shape \\(4, 64\\)"),
    ],
)
def test_add_rms_norm_rejects_bad_shapes_without_writing(name, shape, match, device):
    tensors = {
        "input": torch.randn(4, 64, device=device),
        "residual": torch.randn(4, 64, device=device),
        "weight": torch.randn(64, device=device),
        "out": torch.full((4, 64), 7.0, device=device),
        "residual_out": torch.full((4, 64), 7.0, device=device),
    }
    tensors[name] = torch.full(shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`add_rms_norm`: {match}"):
        infini.ops.add_rms_norm(eps=1e-6, **tensors)
    assert bool((tensors["out"] == 7.0).all())
    assert bool((tensors["residual_out"] == 7.0).all())


def test_add_rms_norm_rejects_bad_dtypes(device):
    input = torch.randn(4, 8, device=device)
    weight = torch.randn(8, device=device)
    half = torch.empty(4, 8, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="`add_rms_norm`: `residual_out` has dtype"):
        infini.ops.add_rms_norm(input, input, weight, torch.empty_like(input), half)
    integer = torch.ones(4, 8, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`add_rms_norm`: `input` has dtype int32"):
        infini.ops.add_rms_norm(integer, integer, weight, integer, integer)
    with pytest.raises(ValueError, match="`add_rms_norm`: `out` is written but"):
        infini.ops.add_rms_norm(
            input, input, weight, input[:1].expand(4, 8), torch.empty_like(input)
        )
