"""Cases and checks shared by the tests of unary elementwise operators
(`silu`, `sigmoid`, `gelu` and their InfiniLM variants): one body per kind
of check, parametrised by the operator's name and PyTorch reference."""

from __future__ import annotations

import pytest
import torch

import infini.ops
from infini.ops.core.schema import GENERATED_ATEN_SLOT
from tests.utils import Payload, empty_strided, randn_strided

# 16-bit results round once from float32; a float32 difference can flip
# that rounding by one ulp (2^-11 for float16, 2^-8 for bfloat16).
LOW_PRECISION_TOLERANCES = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
ALL = (F32, F64 := torch.float64, F16, BF16)

# shape, input strides, out strides, dtypes, smoke. Kept few: every
# (dtype, layout class, serial or parallel) pair compiles a kernel.
CASES = (
    ((13, 4), None, None, (F32, F16, BF16, F64), True),
    ((13, 4), (1, 13), None, (F32, F16), False),  # transposed input
    ((13, 4), (10, 1), (10, 1), (BF16,), False),  # padded rows
    ((13, 4), (0, 1), None, (F32,), False),  # stride-0 broadcast input
    ((13, 4), None, (1, 13), (F32,), False),  # column-major output
    ((16, 5632), None, None, (F32, BF16), True),  # LLM size: parallel
    ((64, 2048), (1, 64), None, (F32,), False),  # parallel and strided
    ((0, 5), None, None, (F32,), False),
    ((), None, None, (F32,), False),
)
# For operators whose kernels differ from `silu`'s only in the transform:
# the layouts that the shared machinery handles alike are tested once.
LEAN_CASES = (
    ((13, 4), None, None, (F32, F16, BF16, F64), True),
    ((13, 4), (1, 13), None, (F32,), False),
    ((13, 4), (10, 1), (10, 1), (BF16,), False),
    ((13, 4), (0, 1), None, (F32,), False),
    ((16, 5632), None, None, (F32,), True),
    ((0, 5), None, None, (F32,), False),
    ((), None, None, (F32,), False),
)


def case_params(float32_tolerances, cases=CASES):
    """`(shape, input_strides, out_strides, dtype, rtol, atol)` params."""
    tolerances = dict(LOW_PRECISION_TOLERANCES)
    tolerances[F32] = float32_tolerances
    tolerances[F64] = (1e-12, 1e-14)
    for shape, input_strides, out_strides, dtypes, smoke in cases:
        for dtype in dtypes:
            rtol, atol = tolerances[dtype]
            marks = pytest.mark.smoke if smoke and dtype == F32 else ()
            yield pytest.param(
                shape,
                input_strides,
                out_strides,
                dtype,
                rtol,
                atol,
                marks=marks,
                id=f"{shape}-{input_strides}-{out_strides}-{str(dtype)[6:]}",
            )


# The generated ATen slot runs PyTorch's own kernels: the float64-level bounds
# below are claims about our native kernels, which ATen's float32 kernels do
# not meet (torch's `gelu` is about 3e-7 off, its tails underflow early).
ATEN_SLOT = GENERATED_ATEN_SLOT
ATEN_FLOAT32_RTOL = 1e-5
ATEN_FLOAT32_ATOL = 1e-6


def skip_for_aten(implementation_index) -> None:
    if implementation_index == ATEN_SLOT:
        pytest.skip(
            "accuracy beyond PyTorch's own kernels is a native-slot claim; "
            "slot 8 is ATen, checked against torch in test_torch_ops.py"
        )


def call(op: str, input, out, scalars=(), implementation_index=None):
    result = getattr(infini.ops, op)(
        input, *scalars, out, implementation_index=implementation_index
    )
    assert result is None
    return out


def payload(
    op,
    reference,
    scalars,
    shape,
    input_strides,
    out_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
    scale=1.0,
):
    """The `auto_act_and_assert` payload of one case; `reference(input)`
    computes in float64."""
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    if scale != 1.0 and input.numel():
        # Scaled through the whole storage (stride-0 views cannot be written).
        base = torch.as_strided(
            input, (input.untyped_storage().nbytes() // input.element_size(),), (1,)
        )
        base.mul_(scale)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    if implementation_index == ATEN_SLOT and dtype == torch.float32:
        rtol, atol = max(rtol, ATEN_FLOAT32_RTOL), max(atol, ATEN_FLOAT32_ATOL)

    def function(input, out):
        return call(op, input, out, scalars, implementation_index)

    def expected(input, out):
        return reference(input.double()).to(dtype)

    return Payload(function, expected, (input, out), rtol=rtol, atol=atol)


SPECIAL_VALUES = (
    -float("inf"),
    -1e4,
    -100.0,
    -89.0,
    -88.5,
    -20.0,
    -1e-30,
    -0.0,
    0.0,
    1e-30,
    1e-3,
    0.5,
    20.0,
    88.5,
    89.0,
    100.0,
    1e4,
    float("inf"),
    float("nan"),
)


def check_special_values(
    op, reference, scalars, dtype, device, implementation_index, rtol
):
    skip_for_aten(implementation_index)
    input = torch.tensor(SPECIAL_VALUES, dtype=dtype, device=device)
    out = torch.empty_like(input)
    call(op, input, out, scalars, implementation_index)
    expected = reference(input.double()).to(dtype)
    # Results below the normal range have fewer significant bits.
    tiny = torch.finfo(dtype).tiny
    assert torch.allclose(out, expected, rtol=rtol, atol=tiny, equal_nan=True), (
        out,
        expected,
    )
    # Signs of zeros and infinities are those of the reference.
    finite = expected.isfinite() & (expected == 0)
    assert torch.equal(out[finite].signbit(), expected[finite].signbit())


def check_sweep(
    op, reference, scalars, low, high, device, implementation_index, rtol, atol
):
    """Dense float32 inputs over `[low, high]` (every binade of the exp
    polynomial's argument range) against the float64 reference."""
    skip_for_aten(implementation_index)
    input = torch.linspace(low, high, 200_003, dtype=torch.float32, device=device)
    out = torch.empty_like(input)
    call(op, input, out, scalars, implementation_index)
    expected = reference(input.double())
    error = (out.double() - expected).abs()
    bound = atol + rtol * expected.abs()
    worst = int((error - bound).argmax())
    assert bool((error <= bound).all()), (
        f"x={float(input[worst])}: got {float(out[worst])}, expected "
        f"{float(expected[worst])}"
    )


def check_in_place(op, reference, scalars, device, implementation_index, rtol):
    skip_for_aten(implementation_index)
    input = torch.randn(33, 17, device=device)
    expected = reference(input.double()).float()
    call(op, input, input, scalars, implementation_index)
    assert torch.allclose(input, expected, rtol=rtol, atol=1e-7)


def check_partial_overlap(op, reference, scalars, device, implementation_index, rtol):
    skip_for_aten(implementation_index)
    # `out = input.t()`: every element but the diagonal is another's input.
    input = torch.randn(40, 40, device=device)
    expected = reference(input.double()).float()
    call(op, input, input.t(), scalars, implementation_index)
    assert torch.allclose(input.t(), expected, rtol=rtol, atol=1e-7)


def check_rejections(op, scalars, device):
    input = torch.randn(4, 5, device=device)
    with pytest.raises(ValueError, match=f"`{op}`: `input` has dtype int32"):
        integer = torch.ones(4, 5, dtype=torch.int32, device=device)
        call(op, integer, torch.empty_like(integer), scalars)
    with pytest.raises(ValueError, match=f"`{op}`: `out` has dtype float16"):
        call(op, input, torch.empty(4, 5, dtype=torch.float16, device=device), scalars)
    out = torch.full((4, 4), 7.0, device=device)
    with pytest.raises(ValueError, match=f"`{op}`: `out` must have shape \\(4, 5\\)"):
        call(op, input, out, scalars)
    assert bool((out == 7.0).all())
    with pytest.raises(
        ValueError, match=f"`{op}`: `out` is written but has a stride-0"
    ):
        call(op, input, torch.empty(1, 5, device=device).expand(4, 5), scalars)
    with pytest.raises(ValueError, match=f"`{op}`: `input` must be a tensor"):
        call(op, [1.0, 2.0], input, scalars)
    with pytest.raises(TypeError, match=f"`{op}`: incompatible function arguments"):
        getattr(infini.ops, op)(input)
