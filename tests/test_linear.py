import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: the summation order of a k-term dot product (BLAS blocking) moves
# results by about sqrt(k) * eps * |x| |w|, an absolute error where the sum
# cancels. 16-bit results round once from float32; a float32 difference can
# flip that rounding by one ulp, 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# input shape, weight shape, input strides, weight strides, out strides, smoke
CASES = (
    ((4, 64), (32, 64), None, None, None, True),
    ((2, 4, 64), (32, 64), None, None, None, True),
    ((64,), (32, 64), None, None, None, False),
    ((13, 33), (17, 33), (1, 13), None, None, False),
    ((13, 33), (17, 33), None, (1, 17), (1, 13), False),
    ((3, 5, 33), (7, 33), (400, 40, 1), (66, 2), None, False),
    ((3, 5, 33), (7, 33), (0, 33, 1), None, (1, 3, 15), False),
    ((2, 1, 4097), (3, 4097), None, None, None, False),
    ((0, 64), (32, 64), None, None, None, False),
    ((2, 20, 70), (50, 70), None, (1, 50), (1400, 70, 1), False),
    # More rows than the narrow-weight kernel takes (a prefill's products).
    ((48, 96), (80, 96), None, None, None, False),
    ((40, 64), (24, 64), (1, 40), None, (30, 1), False),
)


def _params():
    for *case, smoke in CASES:
        for has_bias in (False, True):
            for dtype, rtol, atol in DTYPES:
                # Smoke: float32, without bias for 2-D input, with for 3-D.
                wanted = smoke and has_bias == (len(case[0]) == 3)
                marks = pytest.mark.smoke if wanted and dtype == torch.float32 else ()
                yield pytest.param(*case, has_bias, dtype, rtol, atol, marks=marks)


def _linear(input, weight, bias, out, implementation_index):
    infini.ops.linear(
        input, weight, bias, out, implementation_index=implementation_index
    )
    return out


def _torch_linear(input, weight, bias, out, implementation_index):
    result = torch.nn.functional.linear(
        input.double(), weight.double(), None if bias is None else bias.double()
    )
    return result.to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "input_shape, weight_shape, input_strides, weight_strides, out_strides, "
    "has_bias, dtype, rtol, atol",
    list(_params()),
)
def test_linear(
    input_shape,
    weight_shape,
    input_strides,
    weight_strides,
    out_strides,
    has_bias,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    input = randn_strided(input_shape, input_strides, dtype=dtype, device=device)
    weight = randn_strided(weight_shape, weight_strides, dtype=dtype, device=device)
    bias = None
    if has_bias:
        bias = randn_strided(weight_shape[:1], (3,), dtype=dtype, device=device)
    out_shape = input_shape[:-1] + weight_shape[:1]
    out = empty_strided(out_shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _linear,
        _torch_linear,
        (input, weight, bias, out, implementation_index),
        rtol=rtol,
        atol=atol,
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("native", [False, True], ids=["widened", "sixteen_bit"])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "out_is_input"])
def test_linear_sixteen_bit_prefill_rows_at_slot_0(monkeypatch, dtype, native, layout):
    """A prefill's 16-bit product (more rows than the narrow-weight kernel
    takes) gives the float64 result rounded once, whether it widens the
    operands to float32 (a CPU without 16-bit matrix instructions) or runs
    torch's 16-bit matmul on them as they are (a CPU with them: forced here
    on any CPU), into a contiguous, a padded or an aliased output."""
    if 0 not in infini.ops.Linear.active_implementation_indices("cpu"):
        pytest.skip("this build has no CPU linear at slot 0")
    from infini.ops.native.cpu import blas

    monkeypatch.setattr(blas, "has_sixteen_bit_instructions", lambda _: native)
    infini.ops.Linear.clear_cache()
    _, rtol, atol = next(d for d in DTYPES if d[0] == dtype)
    generator = torch.Generator().manual_seed(22)
    weight = torch.randn(64, 80, generator=generator).to(dtype)
    if layout == "out_is_input":
        # `out` is `input`'s own memory: its rows are read before written.
        storage = torch.randn(48, 80, generator=generator).to(dtype)
        input, out = storage, storage[:, :64]
    elif layout == "strided":
        input = torch.randn(80, 48, generator=generator).to(dtype).t()
        out = torch.empty(48, 70, dtype=dtype)[:, :64]
    else:
        input = torch.randn(48, 80, generator=generator).to(dtype)
        out = torch.empty(48, 64, dtype=dtype)
    expected = (input.double() @ weight.double().T).to(dtype)
    try:
        infini.ops.linear(input, weight, None, out, implementation_index=0)
    finally:
        infini.ops.Linear.clear_cache()
    torch.testing.assert_close(out.double(), expected.double(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype, rtol, atol", DTYPES, ids=str)
@pytest.mark.parametrize("tokens", [1, 3, 4, 5, 9, 32])
@pytest.mark.parametrize(
    "layout", ["contiguous", "strided", "out_is_input", "out_in_weight"]
)
@pytest.mark.parametrize("depth", [70, 200])
def test_linear_decode_rows(dtype, rtol, atol, tokens, layout, depth, device):
    """A decode step's few rows (the weight-rows kernel on the CPU, run on
    the caller's memory): rows with a padded stride, an output that is a
    column slice of a wider buffer, an output in the input's own memory,
    and one in the weight's (staged: the weight is read while written).
    Both depths leave values past the last whole vector step (the bfloat16
    kernel's 32), 200 after whole unrolled runs as well."""
    generator = torch.Generator().manual_seed(tokens)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(dtype).to(device)

    weight = randn(40, depth)
    if layout == "strided":
        input = randn(tokens, depth + 20)[:, 3 : depth + 3]
        out = torch.empty(tokens, 100, dtype=dtype, device=device)[:, 50:90]
    elif layout == "out_is_input":
        input = randn(tokens, depth)
        out = input[:, 10:50]
    elif layout == "out_in_weight":
        input = randn(tokens, depth)
        storage = randn(40 * depth + tokens * 40)
        weight = storage[: 40 * depth].view(40, depth)
        out = storage[40 * depth - 20 : 40 * depth - 20 + tokens * 40].view(tokens, 40)
    else:
        input = randn(tokens, depth)
        out = torch.empty(tokens, 40, dtype=dtype, device=device)
    expected = (input.double() @ weight.double().T).to(dtype)
    infini.ops.linear(input, weight, None, out)
    torch.testing.assert_close(out.double(), expected.double(), rtol=rtol, atol=atol)


def test_linear_float64(device, implementation_index):
    input = torch.randn(3, 5, 33, dtype=torch.float64, device=device)
    weight = torch.randn(7, 33, dtype=torch.float64, device=device)
    bias = torch.randn(7, dtype=torch.float64, device=device)
    out = torch.empty(3, 5, 7, dtype=torch.float64, device=device)
    _linear(input, weight, bias, out, implementation_index)
    expected = torch.nn.functional.linear(input, weight, bias)
    assert torch.allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_linear_output_rows_that_do_not_merge(dtype, device, implementation_index):
    """A 3-D input times the weight into an `out` whose leading dimensions
    cannot be merged into one (rows padded per outer index)."""
    x = torch.randn(5, 3, 7, dtype=dtype, device=device)
    weight = torch.randn(4, 7, dtype=dtype, device=device)
    buffer = torch.full((5, 13), -1.0, dtype=dtype, device=device)
    out = buffer[:, :12].view(5, 3, 4)
    infini.ops.linear(x, weight, None, out, implementation_index=implementation_index)
    torch.testing.assert_close(out, x @ weight.T)
    assert bool((buffer[:, 12] == -1.0).all())


def test_linear_without_in_features_is_the_bias(device, implementation_index):
    input = torch.randn(4, 0, device=device)
    weight = torch.randn(3, 0, device=device)
    bias = torch.randn(3, device=device)
    out = torch.full((4, 3), float("nan"), device=device)
    _linear(input, weight, bias, out, implementation_index)
    assert torch.equal(out, bias.expand(4, 3))
    _linear(input, weight, None, out, implementation_index)
    assert torch.equal(out, torch.zeros(4, 3, device=device))


@pytest.mark.parametrize("target", ["input", "bias"])
def test_linear_output_aliases_input(target, device, implementation_index):
    input = torch.randn(16, 16, device=device)
    weight = torch.randn(16, 16, device=device)
    bias = torch.randn(16, 16, device=device)[0]
    expected = torch.nn.functional.linear(input, weight, bias)
    # `out` is `input` itself, or a matrix whose first row is `bias`.
    out = input if target == "input" else torch.as_strided(bias, (16, 16), (16, 1))
    _linear(
        input,
        weight,
        bias.clone() if target == "input" else bias,
        out,
        implementation_index,
    )
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_linear_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(24 * 16, device=device)
    input = storage[: 16 * 16].view(16, 16)
    weight = torch.randn(16, 16, device=device)
    expected = input @ weight.T
    out = storage[8 * 16 :].view(16, 16).t()
    _linear(input, weight, None, out, implementation_index)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "input_shape, weight_shape, bias_shape, out_shape, match",
    [
        ((4, 64), (32, 63), None, (4, 32), "`in_features` = 63"),
        ((4, 64), (64,), None, (4,), "`weight` must have 2 dimensions"),
        ((4, 64), (32, 64), (31,), (4, 32), "`bias` must have shape \\(32,\\)"),
        ((4, 64), (32, 64), None, (4, 31), "`out` must have shape \\(4, 32\\)"),
        ((2, 4, 64), (32, 64), None, (8, 32), "`out` must have shape"),
    ],
)
def test_linear_rejects_bad_shapes_without_writing(
    input_shape, weight_shape, bias_shape, out_shape, match, device
):
    input = torch.randn(input_shape, device=device)
    weight = torch.randn(weight_shape, device=device)
    bias = None if bias_shape is None else torch.randn(bias_shape, device=device)
    out = torch.full(out_shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`linear`: .*{match}"):
        infini.ops.linear(input, weight, bias, out)
    assert bool((out == 7.0).all())


def test_linear_rejects_scalar_input(device):
    with pytest.raises(ValueError, match="`linear`: `input` must have at least 1"):
        infini.ops.linear(
            torch.tensor(1.0, device=device),
            torch.randn(3, 1, device=device),
            None,
            torch.empty(3, device=device),
        )


def test_linear_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 8, device=device)
    weight = torch.randn(3, 8, device=device)
    bias = torch.randn(3, dtype=torch.float64, device=device)
    with pytest.raises(ValueError, match="`linear`: `bias` has dtype float64"):
        infini.ops.linear(input, weight, bias, torch.empty(4, 3, device=device))


def test_linear_rejects_unsupported_dtype(device):
    input = torch.ones(4, 8, dtype=torch.int64, device=device)
    weight = torch.ones(3, 8, dtype=torch.int64, device=device)
    out = torch.empty(4, 3, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="`linear`: `input` has dtype int64"):
        infini.ops.linear(input, weight, None, out)


def test_linear_rejects_broadcast_output(device):
    input = torch.randn(4, 8, device=device)
    weight = torch.randn(3, 8, device=device)
    out = torch.empty(1, 3, device=device).expand(4, 3)
    with pytest.raises(
        ValueError, match="`linear`: `out` is written but has a stride-0"
    ):
        infini.ops.linear(input, weight, None, out)


def test_linear_rejects_non_tensor_arguments(device):
    input = torch.randn(4, 8, device=device)
    weight = torch.randn(3, 8, device=device)
    out = torch.empty(4, 3, device=device)
    with pytest.raises(ValueError, match="`linear`: `bias` must be a tensor"):
        infini.ops.linear(input, weight, 1.0, out)
    with pytest.raises(TypeError, match="`linear`: incompatible function arguments"):
        infini.ops.linear(input, weight, out)
