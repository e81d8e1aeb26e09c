import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from infini.ops.core.manifest import load_manifest
from tests.utils import Payload, empty_strided, randn_strided

# A k-term float32 dot product carries about sqrt(k) * eps * |a| |b| of
# rounding that depends on the summation order (BLAS blocking), an absolute
# error on entries that cancel: measured 4e-5 at k = 2048 against float64.
# 16-bit results round once from float32; a float32 difference can flip that
# rounding by one ulp, 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-5, 1e-4),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)

# op(a) shape, op(b) shape, y shape, then the strides of op(a), op(b) and y
# (`None` = contiguous). With `trans_*` set, the tensor passed is the
# transpose of op(a) / op(b) (a column-major view of the same memory).
CASES = (
    ((1, 2048), (2048, 2048), (1, 2048), None, None, None, True),
    ((4, 48, 64), (4, 64, 6), (4, 48, 6), None, None, None, True),
    ((2, 4, 2048), (2, 2048, 256), (2, 4, 256), None, None, None, False),
    ((1, 2048), (2048, 2048), (1, 2048), (4096, 1), (4096, 1), (4096, 1), False),
    ((6, 2048), (2048, 320), (6, 320), (2048, 1), (1, 2048), (330, 1), False),
    ((13, 33), (33, 1), (13, 1), (1, 13), (40, 2), (3, 1), False),
    ((3, 13, 17), (3, 17, 5), (3, 13, 5), (300, 20, 1), (0, 5, 1), (65, 1, 13), False),
)
# (alpha, beta, trans_a, trans_b); all `None` calls the short overload.
SCALARS = (
    (None, None, None, None),
    (1.0, 1.0, False, False),
    (1.0, 0.0, False, False),
    (0.5, 0.0, True, False),
    (-2.0, 1.0, False, True),
    (1.0, None, True, True),
)

# Triton's interpreter loads about ten million elements a second and spends
# milliseconds on each step of a kernel: under it the cases keep their
# layouts (strides included) at a smaller size, and each (case, scalars)
# pair runs in one dtype (a Latin square: every pair of case, scalars and
# dtype still meets).
INTERPRETER_SIZES = {2048: 288, 320: 40, 256: 48}


def _interpreter_case(case):
    if not TRITON_INTERPRETER:
        return case
    shapes = tuple(
        tuple(INTERPRETER_SIZES.get(size, size) for size in shape) for shape in case[:3]
    )
    return (*shapes, *case[3:])


def _params():
    for case_index, (*case, smoke) in enumerate(CASES):
        # The original's smoke cases: float32, no transposes, alpha 1, beta 1
        # for a(1, 2048) b(2048, 2048) and 0 for the batched one.
        beta = 1.0 if case[0] == (1, 2048) else 0.0
        case = _interpreter_case(case)
        for scalar_index, scalars in enumerate(SCALARS):
            for dtype_index, (dtype, rtol, atol) in enumerate(DTYPES):
                if TRITON_INTERPRETER and (case_index + scalar_index + dtype_index) % 3:
                    continue
                wanted = smoke and scalars == (1.0, beta, False, False)
                marks = pytest.mark.smoke if wanted and dtype == torch.float32 else ()
                yield pytest.param(*case, *scalars, dtype, rtol, atol, marks=marks)


def _gemm(a, b, y, alpha, beta, trans_a, trans_b, implementation_index):
    if (alpha, beta, trans_a, trans_b) == (None, None, None, None):
        infini.ops.gemm(a, b, y, implementation_index=implementation_index)
    else:
        infini.ops.gemm(
            a,
            b,
            None,
            alpha,
            beta,
            trans_a,
            trans_b,
            y,
            implementation_index=implementation_index,
        )
    return y


def _op(tensor, transposed):
    return tensor.transpose(-1, -2) if transposed else tensor


def _torch_gemm(a, b, y, alpha, beta, trans_a, trans_b, implementation_index):
    product = _op(a, trans_a).double() @ _op(b, trans_b).double()
    return (product * (1.0 if alpha is None else alpha)).to(y.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "a_shape, b_shape, y_shape, a_strides, b_strides, y_strides, "
    "alpha, beta, trans_a, trans_b, dtype, rtol, atol",
    list(_params()),
)
def test_gemm(
    a_shape,
    b_shape,
    y_shape,
    a_strides,
    b_strides,
    y_strides,
    alpha,
    beta,
    trans_a,
    trans_b,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    a = _op(randn_strided(a_shape, a_strides, dtype=dtype, device=device), trans_a)
    b = _op(randn_strided(b_shape, b_strides, dtype=dtype, device=device), trans_b)
    y = empty_strided(y_shape, y_strides, dtype=dtype, device=device)
    if implementation_index in (0, 2) and dtype == torch.float32:
        # Both slots run torch's BLAS for these products (slot 0 for more
        # than 32 rows or a weight not transposed: `native/cpu/blas.py`),
        # whose k-blocking leaves up to ~1.1e-4 of cancellation error at
        # k = 2048 (scaled by `alpha`).
        atol = 3e-4 * abs(1.0 if alpha is None else alpha)
    return Payload(
        _gemm,
        _torch_gemm,
        (a, b, y, alpha, beta, trans_a, trans_b, implementation_index),
        rtol=rtol,
        atol=atol,
    )


@pytest.mark.parametrize(
    "a_shape, b_shape, y_shape",
    [
        ((5, 7), (3, 7, 4), (3, 5, 4)),  # a 2-D `a` is shared by every batch
        ((1, 5, 7), (3, 7, 4), (3, 5, 4)),  # so is a batch of 1
        ((3, 5, 7), (7, 4), (3, 5, 4)),
    ],
)
def test_gemm_broadcasts_batch(a_shape, b_shape, y_shape, device, implementation_index):
    a = torch.randn(a_shape, device=device)
    b = torch.randn(b_shape, device=device)
    y = torch.empty(y_shape, device=device)
    _gemm(a, b, y, 2.0, None, None, None, implementation_index)
    assert torch.allclose(y, 2.0 * torch.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gemm_shared_batch_fills_every_batch_of_y(dtype, device, implementation_index):
    """`y`'s batch comes from neither operand (both shared): every batch of
    `y` is written, and nothing outside it."""
    a = torch.randn(1, 4, 5, dtype=dtype, device=device)
    b = torch.randn(1, 5, 6, dtype=dtype, device=device)
    y = torch.full((3, 4, 6), float("nan"), dtype=dtype, device=device)
    _gemm(a, b, y, None, None, None, None, implementation_index)
    torch.testing.assert_close(y, torch.matmul(a, b).expand(3, 4, 6))
    buffer = torch.full((128,), -1.0, dtype=dtype, device=device)
    y = buffer.as_strided((4, 4, 7), (32, 8, 1))
    a = torch.randn(1, 4, 19, dtype=dtype, device=device)
    b = torch.randn(19, 7, dtype=dtype, device=device)
    _gemm(a, b, y, None, None, None, None, implementation_index)
    torch.testing.assert_close(y, torch.matmul(a, b).expand(4, 4, 7))
    written = torch.zeros(128, dtype=torch.bool, device=device)
    written.as_strided((4, 4, 7), (32, 8, 1)).fill_(True)
    assert bool((buffer[~written] == -1.0).all())


def test_gemm_float64(device, implementation_index):
    a = torch.randn(3, 33, 13, dtype=torch.float64, device=device)
    b = torch.randn(3, 17, 33, dtype=torch.float64, device=device)
    y = torch.empty(3, 13, 17, dtype=torch.float64, device=device)
    _gemm(a, b, y, 0.25, 0.0, 1, 1, implementation_index)
    expected = 0.25 * a.transpose(1, 2) @ b.transpose(1, 2)
    assert torch.allclose(y, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "m, k, n", [(0, 4, 5), (4, 0, 5), (4, 5, 0), (0, 0, 0)], ids=str
)
def test_gemm_zero_size(m, k, n, device, implementation_index):
    a = torch.randn(m, k, device=device)
    b = torch.randn(k, n, device=device)
    y = torch.full((m, n), float("nan"), device=device)
    _gemm(a, b, y, 3.0, None, None, None, implementation_index)
    # k == 0: an empty sum is 0.
    assert torch.equal(y, torch.zeros(m, n, device=device))


# 16: a few rows (the rows kernel of the CUDA-like slot under the
# interpreter); 40: tiles.
@pytest.mark.parametrize("size", [16, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("target", ["a", "b"])
def test_gemm_output_aliases_input(target, dtype, size, device, implementation_index):
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    expected = (a.float() @ b.float()).to(dtype)
    y = a if target == "a" else b
    _gemm(a, b, y, None, None, None, None, implementation_index)
    assert torch.allclose(y.float(), expected.float(), rtol=1e-2, atol=1e-4)


def test_gemm_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    storage = torch.randn(20 * 16, device=device)
    a = storage[: 16 * 16].view(16, 16)
    b = torch.randn(16, 16, device=device)
    expected = a @ b
    y = storage[4 * 16 :].view(16, 16).t()  # overlaps most of `a`, transposed
    _gemm(a, b, y, None, None, None, None, implementation_index)
    assert torch.allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_gemm_many_tiles(device, implementation_index):
    # More tile rows than a band of the grouped tile order holds and
    # partial tiles along both edges (with the interpreter's 64-wide tiles).
    a = torch.randn(580, 60, device=device)
    b = torch.randn(70, 60, device=device).t()
    y = torch.empty(580, 70, device=device)
    _gemm(a, b, y, -1.5, None, None, None, implementation_index)
    expected = -1.5 * (a.double() @ b.double())
    assert torch.allclose(y.double(), expected, rtol=1e-5, atol=1e-4)


# (m, n, k, dtype, trans_b, programs wanted, the configuration expected):
# small products on each GPU configuration of `products.gpu_product_config`
# (the wanted program count lowered so that the large tiles are chosen).
GPU_CONFIGURATIONS = (
    (1, 6, 700, torch.float32, True, 264, ("rows", 1, 1, 256)),
    (3, 40, 70, torch.bfloat16, False, 264, ("rows", 4, 16, 64)),
    (2, 24, 600, torch.float16, True, 1, ("rows", 2, 4, 512)),
    (4, 5, 70, torch.float64, True, 264, ("rows", 4, 1, 128)),
    (12, 70, 300, torch.bfloat16, True, 264, ("tiles", 16, 16, 128)),
    (9, 70, 50, torch.float16, False, 1, ("tiles", 16, 64, 64)),
    (100, 150, 200, torch.bfloat16, True, 1, ("tiles", 128, 128, 64)),
    (40, 200, 70, torch.float16, False, 1, ("tiles", 64, 128, 64)),
    (40, 50, 130, torch.bfloat16, False, 264, ("tiles", 64, 64, 64)),
    (20, 100, 50, torch.float32, True, 264, ("tiles", 64, 64, 16)),
    (14, 40, 40, torch.float32, False, 264, ("tiles", 16, 16, 32)),
    (20, 40, 50, torch.float64, False, 264, ("tiles", 32, 32, 16)),
)


@pytest.mark.skipif(
    not TRITON_INTERPRETER,
    reason="runs the CUDA-like kernel's GPU configurations under Triton's "
    "interpreter (INFINI_OPS_TRITON_INTERPRET=1)",
)
@pytest.mark.parametrize(
    "m, n, k, dtype, trans_b, programs, expected", GPU_CONFIGURATIONS, ids=str
)
def test_gemm_gpu_configurations(
    m, n, k, dtype, trans_b, programs, expected, monkeypatch
):
    from infini.ops.native.cuda import products

    monkeypatch.setattr(products, "product_config", products.gpu_product_config)
    monkeypatch.setattr(products, "TARGET_PROGRAMS", programs)
    a = torch.randn(m, k, dtype=dtype)
    b = torch.randn(n, k, dtype=dtype) if trans_b else torch.randn(k, n, dtype=dtype)
    y = torch.empty(m, n, dtype=dtype)
    operator = infini.ops.Gemm(a, b, None, 0.75, None, 0, int(trans_b), y)
    config = operator._operator.plan.config
    assert (config.kernel, config.block_m, config.block_n, config.block_k) == expected
    operator(a, b, None, 0.75, None, 0, int(trans_b), y)
    reference = 0.75 * (a.double() @ _op(b, trans_b).double())
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    if dtype in (torch.float16, torch.bfloat16):
        reference = reference.to(dtype).double()
        tolerance = 1e-2
    assert torch.allclose(y.double(), reference, rtol=tolerance, atol=tolerance)


@pytest.mark.skipif(
    not TRITON_INTERPRETER,
    reason="forces the CUDA-like kernels' 64-bit offsets under Triton's "
    "interpreter (INFINI_OPS_TRITON_INTERPRET=1)",
)
@pytest.mark.parametrize("m", [3, 40])
def test_gemm_int64_offsets(m, monkeypatch):
    # Operands past 2**31 elements take 64-bit index arithmetic (`LARGE`);
    # a lowered limit runs that code on a small product.
    from infini.ops.native.cuda import products

    monkeypatch.setattr(products, "INT32_LIMIT", 1)
    a = torch.randn(m, 70)
    b = torch.randn(50, 70).t()
    y = torch.empty(m, 50)
    operator = infini.ops.Gemm(a, b, None, 2.0, None, 0, 0, y)
    assert operator._operator.plan._launch.constexprs["LARGE"]
    operator(a, b, None, 2.0, None, 0, 0, y)
    assert torch.allclose(y, 2.0 * (a @ b), rtol=1e-5, atol=1e-5)


def test_gemm_class_builds_once_and_runs(device):
    a = torch.randn(4, 8, device=device)
    b = torch.randn(8, 3, device=device)
    y = torch.empty(4, 3, device=device)
    operator = infini.ops.Gemm(a, b, y)
    for _ in range(2):
        a.normal_()
        assert operator(a, b, y) is None
        assert torch.allclose(y, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.smoke
def test_gemm_inactive_platforms_report_no_implementations():
    # docs/behaviour.md, "Operator classes": platforms outside the build have no slots;
    # the CPU has the native slot, plus the hand-written torch one (2) with torch.
    manifest = load_manifest()
    for platform in ("nvidia", "iluvatar"):
        if platform not in manifest["devices"]:
            assert infini.ops.Gemm.active_implementation_indices(platform) == []
    expected = [0, 2] if manifest["backends"].get("torch") else [0]
    assert infini.ops.Gemm.active_implementation_indices("cpu") == expected


def test_gemm_rejects_c(device):
    a = torch.randn(4, 5, device=device)
    b = torch.randn(5, 6, device=device)
    y = torch.full((4, 6), 7.0, device=device)
    c = torch.zeros(4, 6, device=device)
    with pytest.raises(ValueError, match="`gemm`: `c` is not supported yet"):
        infini.ops.gemm(a, b, c, 1.0, 1.0, 0, 0, y)
    assert bool((y == 7.0).all())


@pytest.mark.parametrize(
    "a_shape, b_shape, y_shape, trans_a, match",
    [
        ((4, 5), (6, 7), (4, 7), 0, "inner dimensions"),
        ((5, 4), (5, 7), (4, 7), 0, "inner dimensions"),
        ((4, 5), (5, 7), (4, 6), 0, "`y` must have shape"),
        ((4, 5), (5, 7), (2, 4, 7), 0, "`y` must have 2 dimensions"),
        ((2, 4, 5), (3, 5, 7), (3, 4, 7), 0, "`a` has batch size 2"),
        ((5,), (5, 7), (7,), 0, "`a` must have 2 or 3 dimensions"),
        ((1, 2, 4, 5), (5, 7), (1, 2, 4, 7), 0, "`a` must have 2 or 3 dimensions"),
    ],
)
def test_gemm_rejects_bad_shapes_without_writing(
    a_shape, b_shape, y_shape, trans_a, match, device
):
    a = torch.randn(a_shape, device=device)
    b = torch.randn(b_shape, device=device)
    y = torch.full(y_shape, 7.0, device=device)
    with pytest.raises(ValueError, match=f"`gemm`: .*{match}"):
        infini.ops.gemm(a, b, None, None, None, trans_a, 0, y)
    assert bool((y == 7.0).all())


def test_gemm_rejects_mismatched_dtypes(device):
    a = torch.randn(4, 5, device=device)
    b = torch.randn(5, 6, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="`gemm`: `b` has dtype float16"):
        infini.ops.gemm(a, b, torch.empty(4, 6, device=device))


def test_gemm_rejects_unsupported_dtype(device):
    a = torch.ones(4, 5, dtype=torch.int32, device=device)
    b = torch.ones(5, 6, dtype=torch.int32, device=device)
    y = torch.empty(4, 6, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`gemm`: `y` has dtype int32"):
        infini.ops.gemm(a, b, y)


def test_gemm_rejects_broadcast_output(device):
    a = torch.randn(4, 5, device=device)
    b = torch.randn(5, 6, device=device)
    y = torch.empty(1, 6, device=device).expand(4, 6)
    with pytest.raises(ValueError, match="`gemm`: `y` is written but has a stride-0"):
        infini.ops.gemm(a, b, y)


def test_gemm_rejects_non_tensor_arguments(device):
    b = torch.randn(5, 6, device=device)
    y = torch.empty(4, 6, device=device)
    with pytest.raises(ValueError, match="`gemm`: `a` must be a tensor"):
        infini.ops.gemm([[1.0] * 5] * 4, b, y)
    with pytest.raises(TypeError, match="`gemm`: incompatible function arguments"):
        infini.ops.gemm(b, b, None, "2", None, 0, 0, y)
