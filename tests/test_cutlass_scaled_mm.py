import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER

DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# (m, k, n): a 64-byte multiple of `k`, a `k` tail, tails of rows and
# columns, more rows than a task's row block, `k` of 1 and 0, no rows.
SHAPES = (
    (1, 64, 4),
    (5, 70, 6),
    (16, 256, 40),
    (33, 130, 17),
    (67, 192, 72),
    (2, 1, 3),
    (4, 0, 4),
    (0, 8, 4),
)

# How each scale is given: per tensor (two shapes), per row / per column.
SCALES = (
    ("tensor", "tensor"),
    ("tensor-2d", "column"),
    ("row", "tensor"),
    ("row", "column-1d"),
)


def _scale(kind, count, row):
    values = torch.rand(count) / 64 + 1 / 512
    if kind == "tensor":
        return values[:1]
    if kind == "tensor-2d":
        return values[:1].reshape(1, 1)
    if kind == "column-1d":
        return values
    return values.reshape(count, 1) if row else values.reshape(1, count)


def _reference(a, b, scale_a, scale_b, bias, dtype):
    """vLLM's epilogue in float32: ``t = scale_b * float(acc)``, then
    ``scale_a * t + bias`` rounded once (exact in float64, then rounded)."""
    accumulator = (a.long() @ b.long()).float()
    scaled = scale_b.reshape(1, -1) * accumulator
    value = scale_a.reshape(-1, 1).double() * scaled.double()
    if bias is not None:
        value = value + bias.double()
    return value.float().to(dtype)


def _check(a, b, scale_a, scale_b, bias, dtype, out, implementation_index):
    expected = _reference(a, b, scale_a, scale_b, bias, dtype)
    infini.ops.cutlass_scaled_mm(
        a, b, scale_a, scale_b, bias, dtype, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


# Triton's interpreter spends milliseconds on each step of a kernel: under
# it each (shape, scales, bias) combination runs in one dtype (a Latin
# square: every pair of shape, scales, bias and dtype still meets).
COMBINATIONS = [
    pytest.param(
        *shape, scales, with_bias, dtype, id=f"{shape}-{scales}-{with_bias}-{dtype}"
    )
    for shape_index, shape in enumerate(SHAPES)
    for scales_index, scales in enumerate(SCALES)
    for bias_index, with_bias in enumerate((False, True))
    for dtype_index, dtype in enumerate(DTYPES)
    if not TRITON_INTERPRETER
    or (shape_index + scales_index + bias_index + dtype_index) % 3 == 0
]


@pytest.mark.parametrize("m, k, n, scale_kinds, with_bias, dtype", COMBINATIONS)
def test_cutlass_scaled_mm(
    m, k, n, scale_kinds, with_bias, dtype, device, implementation_index
):
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device)
    # vLLM's layout: the transpose of an (n, k) weight.
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device).t()
    scale_a = _scale(scale_kinds[0], max(m, 1), True).to(device)
    if scale_a.numel() not in (1, m):
        scale_a = scale_a[:1]
    scale_b = _scale(scale_kinds[1], n, False).to(device)
    bias = torch.randn(n, device=device).to(dtype) if with_bias else None
    out = torch.full((m, n), float("nan"), dtype=dtype, device=device)
    _check(a, b, scale_a, scale_b, bias, dtype, out, implementation_index)


def test_cutlass_scaled_mm_extreme_values(device, implementation_index):
    # -128 * -128 at every step: the largest sums, and the sign-flip of the
    # fast tile at its extremes.
    k = 4096 + 33
    a = torch.full((6, k), -128, dtype=torch.int8, device=device)
    a[1] = 127
    b = torch.full((k, 5), -128, dtype=torch.int8, device=device)
    b[:, 2] = 127
    scale = torch.ones(1, device=device)
    out = torch.empty(6, 5, device=device)
    _check(a, b, scale, scale, None, torch.float32, out, implementation_index)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cutlass_scaled_mm_layouts(dtype, device, implementation_index):
    m, k, n = 9, 100, 13
    # A row-major `b`, a transposed `a`, strided scales and bias, and a
    # transposed output: every operand with other strides than vLLM's.
    a = torch.randint(-128, 128, (k, m), dtype=torch.int8, device=device).t()
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device=device)
    scale_a = (torch.rand(m, 2, device=device) / 64)[:, :1]
    scale_b = (torch.rand(2, n, device=device) / 64)[:1, :]
    bias = torch.randn(n, 3, device=device).to(dtype)[:, 1]
    out = torch.empty(n, m, dtype=dtype, device=device).t()
    _check(a, b, scale_a, scale_b, bias, dtype, out, implementation_index)


def test_cutlass_scaled_mm_output_overlapping_inputs(device, implementation_index):
    m, k, n = 4, 80, 6
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device).t()
    scale = torch.full((1,), 0.01, device=device)
    out = torch.randn(m, n, device=device)
    # The bias is row 0 of the output: it must be read before it is written.
    bias = out[0]
    expected = _reference(a, b, scale, scale, bias.clone(), torch.float32)
    infini.ops.cutlass_scaled_mm(
        a, b, scale, scale, bias, torch.float32, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


# (m, k, n, programs wanted, the configuration expected): small products on
# each GPU configuration of `products.gpu_product_config` for int8 (the
# wanted program count lowered so that the large tiles are chosen).
GPU_CONFIGURATIONS = (
    (9, 300, 40, 264, (16, 16, 256)),
    (3, 200, 70, 1, (16, 64, 256)),
    (40, 130, 200, 1, (64, 128, 128)),
    (70, 200, 150, 1, (128, 128, 128)),
    (40, 100, 50, 264, (64, 64, 128)),
)


@pytest.mark.skipif(
    not TRITON_INTERPRETER,
    reason="runs the CUDA-like kernel's GPU configurations under Triton's "
    "interpreter (INFINI_OPS_TRITON_INTERPRET=1)",
)
@pytest.mark.parametrize("m, k, n, programs, expected", GPU_CONFIGURATIONS, ids=str)
def test_cutlass_scaled_mm_gpu_configurations(m, k, n, programs, expected, monkeypatch):
    from infini.ops.native.cuda import products

    monkeypatch.setattr(products, "product_config", products.gpu_product_config)
    monkeypatch.setattr(products, "TARGET_PROGRAMS", programs)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8).t()
    scale_a = torch.rand(m, 1) / 64
    scale_b = torch.rand(1, n) / 64
    bias = torch.randn(n).bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16)
    operator = infini.ops.CutlassScaledMm(
        a, b, scale_a, scale_b, bias, torch.bfloat16, out
    )
    config = operator._operator.config
    assert (config.block_m, config.block_n, config.block_k) == expected
    operator(a, b, scale_a, scale_b, bias, torch.bfloat16, out)
    expected_out = _reference(a, b, scale_a, scale_b, bias, torch.bfloat16)
    torch.testing.assert_close(out, expected_out, rtol=0, atol=0)


# Shapes no other test uses: the dispatcher builds a fresh operator for them.
@pytest.mark.skipif(
    TRITON_INTERPRETER,
    reason="forces a tile of the CPU kernel, which the interpreter's runs "
    "(CPU tensors standing for a GPU) do not reach",
)
@pytest.mark.parametrize("m, k, n", ((4, 131, 8), (3, 65, 5)))
def test_cutlass_scaled_mm_portable_tile(m, k, n, monkeypatch):
    # The loop tile of CPUs without AVX-512 VNNI, forced on this one.
    from infini.ops.native.cpu.ops import cutlass_scaled_mm as cpu

    chosen = []
    kernel_of = cpu.scaled_mm_kernel

    def recording(dtype, vnni):
        chosen.append(vnni)
        return kernel_of(dtype, vnni)

    monkeypatch.setattr(cpu, "int8_dot_instructions", lambda: False)
    monkeypatch.setattr(cpu, "scaled_mm_kernel", recording)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8).t()
    scale_a = torch.rand(m, 1) / 64
    scale_b = torch.rand(1, n) / 64
    bias = torch.randn(n).bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16)
    _check(a, b, scale_a, scale_b, bias, torch.bfloat16, out, 0)
    assert chosen == [False]


def _inputs(m=4, k=8, n=6, dtype=torch.float32):
    return [
        torch.zeros(m, k, dtype=torch.int8),
        torch.zeros(k, n, dtype=torch.int8),
        torch.ones(1),
        torch.ones(1),
        None,
        dtype,
        torch.empty(m, n, dtype=dtype),
    ]


def _with(position, value, **shape):
    arguments = _inputs(**shape)
    arguments[position] = value
    return arguments


@pytest.mark.parametrize(
    "arguments, message",
    [
        (_with(0, torch.zeros(4, 8)), "`a` has dtype float32"),
        (_with(1, torch.zeros(8, 6, dtype=torch.uint8)), "`b` has dtype uint8"),
        (_with(0, torch.zeros(4, 8, 1, dtype=torch.int8)), "`a` must have 2"),
        (_with(1, torch.zeros(7, 6, dtype=torch.int8)), "`b` must have shape"),
        (_with(5, torch.float64), "`out_dtype` must be one of"),
        (_with(5, torch.float16), "`out` has dtype float32 but `out_dtype`"),
        (_with(6, torch.empty(4, 5)), "`out` must have shape"),
        (_with(2, torch.ones(1).half()), "`scale_a` has dtype float16"),
        (_with(2, torch.ones(3)), "`scale_a` must hold 1 or 4 elements"),
        (_with(3, torch.ones(4)), "`scale_b` must hold 1 or 6 elements"),
        (_with(3, torch.ones(2, 3)), "`scale_b` must be a vector"),
        (_with(4, torch.ones(6).half()), "`bias` has dtype float16"),
        (_with(4, torch.ones(1)), "`bias` must hold 6 elements"),
        (_with(6, torch.empty(4, 1).expand(4, 6)), "`out` is written but"),
    ],
)
def test_cutlass_scaled_mm_rejects(arguments, message, device, implementation_index):
    out = arguments[-1]
    before = out.clone()
    with pytest.raises(ValueError, match=message) as error:
        infini.ops.cutlass_scaled_mm(
            *arguments, implementation_index=implementation_index
        )
    assert "cutlass_scaled_mm" in str(error.value)
    assert torch.equal(out, before) or torch.isnan(before).any()
