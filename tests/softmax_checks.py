"""The tests of the softmax operators (`softmax`, `softmax_infinilm`,
`scaled_softmax`, `scaled_softmax_infinilm`), parametrised by the
operator's name: each test module takes `softmax_tests(<its operator>)`."""

from __future__ import annotations

import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# float32: `exp(x - max)` carries the rounding of `x - max` (|x - max| ulps)
# plus the exponential's own, a few ulps against the float64 reference.
# 16-bit results round once from float32.
TOLERANCES = {
    torch.float32: (1e-5, 1e-7),
    torch.float64: (1e-12, 1e-15),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

# shape, dim, input strides, out strides, dtypes, smoke. Kept few: every
# (dtype, layout class, serial or parallel) pair compiles a kernel.
CASES = (
    ((3, 3), -1, None, None, (F32, F16, BF16), True),
    ((32, 512), -1, None, None, (F32, F16, BF16), True),
    ((2, 7, 9), 1, None, None, (F32, BF16), False),  # a middle dimension
    ((4, 13), 0, None, (1, 4), (F32,), False),
    ((13, 33), -1, (1, 13), (40, 1), (F32, BF16), False),  # transposed input
    ((3, 5, 33), -1, (0, 33, 1), None, (F32,), False),  # stride-0 broadcast
    ((2, 4097), -1, None, None, (F32,), False),
    ((128, 1024), -1, None, None, (F32,), False),  # parallel rows
    ((2, 0, 5), -1, None, None, (F32,), False),
    ((2, 3, 0), -1, None, None, (F32,), False),
    ((), 0, None, None, (F32,), False),
)


def params():
    for *case, dtypes, smoke in CASES:
        for dtype in dtypes:
            marks = pytest.mark.smoke if smoke and dtype == F32 else ()
            yield pytest.param(*case, dtype, *TOLERANCES[dtype], marks=marks)


def call(op: str, input, out, dim, scale, dtype=None, index=None):
    """Runs `op` (a softmax or a scaled softmax) and returns `out`."""
    function = getattr(infini.ops, op)
    if op.startswith("scaled_"):
        result = function(input, scale, out, implementation_index=index)
    else:
        result = function(input, dim, dtype, out, implementation_index=index)
    assert result is None
    return out


def reference(input, dim, scale, out_dtype):
    x = input.double() * scale
    return torch.softmax(x, dim).to(out_dtype)


def check_cases(
    op, shape, dim, input_strides, out_strides, dtype, rtol, atol, device, index
):
    scale = 0.37 if op.startswith("scaled_") else 1.0
    if op.startswith("scaled_"):
        dim = -1
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    expected = reference(input, dim, scale, dtype)
    call(op, input, out, dim, scale, index=index)
    assert torch.allclose(out, expected, rtol=rtol, atol=atol)


def check_float64_and_special_values(op, device, index):
    scale = 0.5 if op.startswith("scaled_") else 1.0
    input = torch.randn(3, 7, 33, dtype=torch.float64, device=device)
    out = torch.empty_like(input)
    call(op, input, out, -1, scale, index=index)
    expected = reference(input, -1, scale, torch.float64)
    assert torch.allclose(out, expected, rtol=1e-12, atol=1e-15)

    inf, nan = float("inf"), float("nan")
    input = torch.tensor(
        [
            [1e4, 0.0, -1e4],
            [-inf, 3.0, -inf],
            [-inf, -inf, -inf],
            [nan, 1.0, 2.0],
            [inf, 1.0, 2.0],
            [-100.0, -200.0, 0.0],
        ],
        device=device,
    )
    out = torch.empty_like(input)
    call(op, input, out, -1, scale, index=index)
    expected = torch.softmax(input.double() * scale, -1).float()
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-30, equal_nan=True)


def check_in_place_and_overlap(op, device, index):
    scale = 2.0 if op.startswith("scaled_") else 1.0
    input = torch.randn(3, 33, 40, dtype=torch.float16, device=device)
    expected = reference(input, -1, scale, torch.float16)
    call(op, input, input, -1, scale, index=index)
    assert torch.allclose(input, expected, rtol=1e-3, atol=1e-3)

    storage = torch.randn(40 * 32, device=device)
    input = storage[: 32 * 32].view(32, 32)
    expected = reference(input, -1, scale, torch.float32)
    out = storage[8 * 32 :].view(32, 32).t()
    call(op, input, out, -1, scale, index=index)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-7)


def check_rejects_bad_arguments(op, device):
    input = torch.randn(4, 5, device=device)
    out = torch.full((5, 4), 7.0, device=device)
    with pytest.raises(ValueError, match=f"`{op}`: `out` must have shape \\(4, 5\\)"):
        call(op, input, out, -1, 1.0)
    assert bool((out == 7.0).all())
    half = torch.empty(4, 5, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match=f"`{op}`: `out` has dtype float16"):
        call(op, input, half, -1, 1.0)
    integer = torch.ones(4, 5, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=f"`{op}`: `input` has dtype int32"):
        call(op, integer, integer, -1, 1.0)
    with pytest.raises(ValueError, match=f"`{op}`: `out` is written but"):
        call(op, input, torch.empty(1, 5, device=device).expand(4, 5), -1, 1.0)


def check_dtype_converts_input_first(op, input_dtype, dtype, rtol, atol, device, index):
    input = randn_strided((5, 40), None, dtype=input_dtype, device=device) * 4
    out_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype

    def run(input, out):
        return call(op, input, out, 1, 1.0, dtype, index)

    def expected(input, out):
        return torch.softmax(input.to(out_dtype).double(), 1).to(out_dtype)

    out = torch.empty(5, 40, dtype=out_dtype, device=device)
    return Payload(run, expected, (input, out), rtol=rtol, atol=atol)


def check_rejects_bad_dim_and_dtype(op, device):
    function = getattr(infini.ops, op)
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match=f"`{op}`: `dim` must be in \\[-2, 1\\]"):
        function(input, 2, None, torch.empty_like(input))
    with pytest.raises(ValueError, match=f"`{op}`: `out` has dtype float32 but"):
        function(input, 1, torch.float16, torch.empty_like(input))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        function(input, 1.0, None, torch.empty_like(input))


def check_scales(op, scale, device, index):
    input = torch.randn(6, 50, device=device)
    out = torch.empty_like(input)
    call(op, input, out, -1, scale, index=index)
    expected = torch.softmax(input.double() * scale, -1).float()
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-7)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        getattr(infini.ops, op)(input, "0.5", torch.empty_like(input))


def softmax_tests(op: str) -> dict:
    """The test functions of `op`'s test module, by name."""

    @pytest.mark.parametrize(
        "shape, dim, input_strides, out_strides, dtype, rtol, atol", list(params())
    )
    def test_cases(
        shape, dim, input_strides, out_strides, dtype, rtol, atol, device,
        implementation_index,
    ):  # fmt: skip
        check_cases(
            op, shape, dim, input_strides, out_strides, dtype, rtol, atol, device,
            implementation_index,
        )  # fmt: skip

    def test_float64_and_special_values(device, implementation_index):
        check_float64_and_special_values(op, device, implementation_index)

    def test_in_place_and_overlap(device, implementation_index):
        check_in_place_and_overlap(op, device, implementation_index)

    def test_rejects_bad_arguments(device):
        check_rejects_bad_arguments(op, device)

    tests = {
        f"test_{op}": test_cases,
        f"test_{op}_float64_and_special_values": test_float64_and_special_values,
        f"test_{op}_in_place_and_overlap": test_in_place_and_overlap,
        f"test_{op}_rejects_bad_arguments": test_rejects_bad_arguments,
    }
    if op.startswith("scaled_"):

        @pytest.mark.parametrize("scale", [0.0, -1.5, 30.0])
        def test_scales(scale, device, implementation_index):
            check_scales(op, scale, device, implementation_index)

        tests[f"test_{op}_scales"] = test_scales
    else:

        @pytest.mark.auto_act_and_assert
        @pytest.mark.parametrize(
            "input_dtype, dtype, rtol, atol",
            [
                (torch.float16, torch.float32, 1e-5, 1e-7),
                (torch.float32, torch.bfloat16, 1e-2, 1e-2),
                (torch.bfloat16, "float64", 1e-12, 1e-15),
            ],
        )
        def test_dtype_converts_input_first(
            input_dtype, dtype, rtol, atol, device, implementation_index
        ):
            return check_dtype_converts_input_first(
                op, input_dtype, dtype, rtol, atol, device, implementation_index
            )

        def test_rejects_bad_dim_and_dtype(device):
            check_rejects_bad_dim_and_dtype(op, device)

        tests[f"test_{op}_dtype_converts_input_first"] = test_dtype_converts_input_first
        tests[f"test_{op}_rejects_bad_dim_and_dtype"] = test_rejects_bad_dim_and_dtype
    for name, test in tests.items():
        test.__name__ = test.__qualname__ = name
    return tests
