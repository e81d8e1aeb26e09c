"""Hostile inputs: every rejected call raises a `ValueError`/`TypeError` that
names the operator and leaves every output's bytes as they were; accepted
odd inputs give torch's results.

Cases that could take the process down (huge zero-size shapes, very wide
rows) run in a child process, so that a crash fails one test only. The
generated ATen slot (8) is exercised only where the build has it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import infini.ops

CPU_ATEN = hasattr(infini.ops, "Abs") and 8 in (
    infini.ops.Abs.active_implementation_indices("cpu")
)
needs_aten = pytest.mark.skipif(not CPU_ATEN, reason="slot 8 is not in this build")


def _snapshot(tensors):
    # Every byte of each output's storage: a write anywhere (a stride-0 or
    # self-overlapping output included) shows.
    return [t.untyped_storage().tolist() for t in tensors]


def _unchanged(before, tensors) -> bool:
    return before == _snapshot(tensors)


def _rejects(operator, call, outputs, error=ValueError, match=""):
    """`call()` raises `error` naming `operator`; `outputs` are untouched."""
    if operator.islower() and not hasattr(infini.ops, operator):
        pytest.skip(f"`{operator}` is not in this build")
    before = _snapshot(outputs)
    named = f"`{operator}`" if operator.islower() else operator
    with pytest.raises(error, match=f"{named}.*{match}"):
        call()
    assert _unchanged(before, outputs), f"`{operator}` wrote before raising"


# -- slot 8 validates before it writes ---------------------------------------

WRONG_SHAPE_CASES = {
    "abs": lambda x, out: infini.ops.abs(x, out),
    "exp": lambda x, out: infini.ops.exp(x, out),
    "clamp": lambda x, out: infini.ops.clamp(x, -0.5, 0.5, out),
    "cumsum": lambda x, out: infini.ops.cumsum(x, 1, None, out),
    "sum": lambda x, out: infini.ops.sum(x, [1], False, None, out),
    "mean": lambda x, out: infini.ops.mean(x, [1], False, None, out),
    "var": lambda x, out: infini.ops.var(x, [1], 1.0, False, out),
    "where": lambda x, out: infini.ops.where(x > 0, x, x, out),
}


@needs_aten
@pytest.mark.parametrize("operator", sorted(WRONG_SHAPE_CASES))
def test_aten_rejects_a_wrong_shape_out_before_writing(operator):
    call = WRONG_SHAPE_CASES[operator]
    x = torch.randn(5, 12)
    out = torch.full((6, 12), 7.0)
    _rejects(operator, lambda: call(x, out), [out], match="`out` must have shape")
    assert out.shape == (6, 12)


@needs_aten
def test_aten_sort_rejects_wrong_shapes_of_both_outputs():
    x = torch.randn(5, 12)
    values = torch.full((6, 12), 7.0)
    indices = torch.full((6, 12), 7, dtype=torch.int64)
    _rejects(
        "sort",
        lambda: infini.ops.sort(x, -1, False, values, indices),
        [values, indices],
    )


@needs_aten
def test_aten_rejects_out_of_range_indices_before_writing():
    x = torch.randn(3, 4)
    out = torch.full((2, 4), 7.0)
    _rejects(
        "index_select",
        lambda: infini.ops.index_select(x, torch.tensor([0, 5]), 0, out),
        [out],
    )
    out = torch.full((3, 2), 7.0)
    _rejects(
        "gather",
        lambda: infini.ops.gather(x, torch.tensor([[0, 9]] * 3), 1, False, out),
        [out],
    )


@needs_aten
@pytest.mark.parametrize("operator", ["sum", "mean", "var", "abs"])
def test_aten_rejects_expanded_outputs(operator):
    x = torch.randn(5, 12)
    out = torch.zeros(1).expand(5)
    calls = {
        "sum": lambda: infini.ops.sum(x, [1], False, None, out),
        "mean": lambda: infini.ops.mean(x, [1], False, None, out),
        "var": lambda: infini.ops.var(x, [1], 1.0, False, out),
        "abs": lambda: infini.ops.abs(torch.randn(5), out),
    }
    _rejects(operator, calls[operator], [out], match="stride-0")


@needs_aten
def test_aten_data_dependent_shapes_are_checked_before_the_copy():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    out = torch.full((3, 1), 7, dtype=torch.int64)
    _rejects("nonzero", lambda: infini.ops.nonzero(x, out), [out])
    out = torch.empty(2, 1, dtype=torch.int64)
    infini.ops.nonzero(x, out)
    assert torch.equal(out, torch.nonzero(x))


# -- in-place calls on strided views -----------------------------------------

IN_PLACE_UNARY = ("abs", "exp", "neg", "sigmoid", "tanh", "sin", "sqrt", "erf")


def _strided_view(dtype):
    # Rows of 4 with gaps of 6 elements: not contiguous, not overlapping.
    return torch.rand(130, dtype=dtype).add_(0.1).as_strided((13, 4), (10, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_gelu_in_place_on_a_strided_view_every_slot(dtype):
    for index in infini.ops.Gelu.active_implementation_indices("cpu"):
        for approximate in ("none", "tanh"):
            x = _strided_view(dtype) - 0.5
            expected = torch.nn.functional.gelu(x.float(), approximate=approximate).to(
                dtype
            )
            infini.ops.gelu(x, approximate, x, implementation_index=index)
            torch.testing.assert_close(x, expected, rtol=1e-2, atol=1e-2)


@needs_aten
@pytest.mark.parametrize("operator", IN_PLACE_UNARY)
def test_aten_in_place_on_strided_views(operator):
    reference = getattr(torch, operator)
    for make in (
        _strided_view,
        lambda dtype: torch.rand(8, 6, dtype=dtype).add_(0.1).t(),
        lambda dtype: torch.rand(6, 16, dtype=dtype).add_(0.1)[:, ::3],
    ):
        x = make(torch.float32)
        expected = reference(x.clone())
        getattr(infini.ops, operator)(x, x, implementation_index=8)
        torch.testing.assert_close(x, expected)
        # Input and output overlapping without being the same elements.
        base = torch.rand(40).add_(0.1)
        source = base[:36].view(6, 6)
        destination = base[4:40].view(6, 6)
        expected = reference(source.clone())
        getattr(infini.ops, operator)(source, destination, implementation_index=8)
        torch.testing.assert_close(destination, expected)


@needs_aten
def test_aten_in_place_binary_forms_on_strided_views():
    x = _strided_view(torch.float32)
    other = torch.rand(13, 4)
    expected = x * other
    infini.ops.mul(x, other, x, implementation_index=8)
    torch.testing.assert_close(x, expected)
    x = torch.rand(8, 6).t()
    expected = torch.clamp(x, 0.2, 0.6)
    infini.ops.clamp(x, 0.2, 0.6, x, implementation_index=8)
    torch.testing.assert_close(x, expected)


# -- written tensors: no overlap with themselves or each other ---------------


def _self_overlapping(rows=4, columns=4, dtype=torch.float32):
    return torch.full((rows * 2 + columns,), 7.0, dtype=dtype).as_strided(
        (rows, columns), (2, 1)
    )


SELF_OVERLAP_CASES = {
    "add": lambda out: infini.ops.add(torch.randn(4, 4), torch.randn(4, 4), out),
    "relu": lambda out: infini.ops.relu(torch.randn(4, 4), out),
    "silu": lambda out: infini.ops.silu(torch.randn(4, 4), out),
    "rms_norm": lambda out: infini.ops.rms_norm(
        torch.randn(4, 4), torch.ones(4), 1e-6, out
    ),
    "softmax": lambda out: infini.ops.softmax(torch.randn(4, 4), -1, None, out),
    "cast": lambda out: infini.ops.cast(torch.randn(4, 4, dtype=torch.float64), out),
    "copy": lambda out: infini.ops.copy(torch.randn(4, 4), False, out),
    "gemm": lambda out: infini.ops.gemm(torch.randn(4, 3), torch.randn(3, 4), out),
    "exp": lambda out: infini.ops.exp(torch.randn(4, 4), out),
}


@pytest.mark.parametrize("operator", sorted(SELF_OVERLAP_CASES))
def test_outputs_overlapping_themselves_are_rejected(operator):
    out = _self_overlapping()
    _rejects(
        operator,
        lambda: SELF_OVERLAP_CASES[operator](out),
        [out],
        match="share memory",
    )


def test_written_tensors_sharing_memory_are_rejected():
    x, r, w = torch.randn(4, 8), torch.randn(4, 8), torch.ones(8)
    out = torch.full((4, 8), 7.0)
    _rejects(
        "add_rms_norm",
        lambda: infini.ops.add_rms_norm(x, r, w, 1e-6, out, out),
        [out],
        match="`out` and `residual_out`",
    )
    y = torch.randn(4, 8)
    _rejects(
        "fused_add_rms_norm",
        lambda: infini.ops.fused_add_rms_norm(y, y, w, 1e-6),
        [y],
        match="`input` and `residual`",
    )
    gating = torch.randn(4, 8)
    weights = torch.full((4, 2), 7.0)
    ids = torch.full((4, 2), 7, dtype=torch.int32)
    _rejects(
        "topk_softmax",
        lambda: infini.ops.topk_softmax(gating, None, None, True, weights, ids, ids),
        [weights, ids],
        match="`topk_indices` and `token_expert_indices`",
    )
    key = torch.randn(3, 2, 16)
    cache = torch.full((2, 4, 2, 16), 7.0)
    scale = torch.ones(1)
    _rejects(
        "reshape_and_cache_flash",
        lambda: infini.ops.reshape_and_cache_flash(
            key, key, torch.tensor([0, 1, 2]), scale, scale, "auto", cache, cache
        ),
        [cache],
        match="`key_cache` and `value_cache`",
    )
    positions = torch.arange(3)
    query = torch.randn(3, 2 * 16)
    cos_sin = torch.randn(8, 16)
    _rejects(
        "rotary_embedding",
        lambda: infini.ops.rotary_embedding(positions, query, query, cos_sin, 16, True),
        [query],
        match="`query` and `key`",
    )
    # Partial overlap counts too.
    buffer = torch.full((2, 4, 8), 7.0)
    _rejects(
        "add_rms_norm",
        lambda: infini.ops.add_rms_norm(
            x, r, w, 1e-6, buffer.view(8, 8)[:4], buffer.view(8, 8)[2:6]
        ),
        [buffer],
    )


# -- every error names the operator ------------------------------------------


@pytest.mark.parametrize(
    "operator, call",
    [
        ("abs", lambda m, x: infini.ops.abs(m, x)),
        ("abs", lambda m, x: infini.ops.abs(x, m)),
        ("add", lambda m, x: infini.ops.add(m, x, x)),
        ("rms_norm", lambda m, x: infini.ops.rms_norm(x, torch.ones(4), 1e-6, m)),
        ("gemm", lambda m, x: infini.ops.gemm(m, x, x)),
        ("cat", lambda m, x: infini.ops.cat([x, m], 0, x)),
    ],
)
def test_meta_tensors_are_rejected_naming_the_operator(operator, call):
    meta = torch.empty(4, 4, device="meta")
    x = torch.full((4, 4), 7.0)
    _rejects(operator, lambda: call(meta, x), [x], match="`meta`")


@pytest.mark.parametrize("index", [-1, 31, 1.0, "0", True])
def test_bad_implementation_indices_name_the_operator(index):
    x = torch.randn(3)
    out = torch.full((3,), 7.0)
    _rejects(
        "add", lambda: infini.ops.add(x, x, out, implementation_index=index), [out]
    )


NON_TENSOR_CASES = [
    ("add", lambda out: infini.ops.add([1.0, 2.0], torch.randn(2), out), ValueError),
    ("relu", lambda out: infini.ops.relu(None, out), ValueError),
    (
        "rms_norm",
        lambda out: infini.ops.rms_norm(torch.randn(2), 3, 1e-6, out),
        ValueError,
    ),
    ("gemm", lambda out: infini.ops.gemm(torch.randn(2, 2), "b", out), ValueError),
    (
        "add",
        lambda out: infini.ops.add(torch.randn(2), torch.randn(2), "x", out),
        TypeError,
    ),
]


@pytest.mark.parametrize("operator, call, error", NON_TENSOR_CASES)
def test_non_tensor_arguments(operator, call, error):
    out = torch.full((2,), 7.0)
    _rejects(operator, lambda: call(out), [out], error=error)


BAD_TENSOR_CASES = [
    # (operator, call(out), out) for wrong dtype, rank and shape.
    (
        "add",
        lambda out: infini.ops.add(torch.randn(4), torch.randn(4), out),
        torch.full((4,), 7, dtype=torch.int32),
    ),
    (
        "add",
        lambda out: infini.ops.add(torch.randn(4), torch.randn(5), out),
        torch.full((4,), 7.0),
    ),
    (
        "rms_norm",
        lambda out: infini.ops.rms_norm(torch.randn(4, 8), torch.ones(7), 1e-6, out),
        torch.full((4, 8), 7.0),
    ),
    (
        "rms_norm",
        lambda out: infini.ops.rms_norm(torch.randn(4, 8), torch.ones(8), 1e-6, out),
        torch.full((4, 8), 7, dtype=torch.int64),
    ),
    (
        "gemm",
        lambda out: infini.ops.gemm(torch.randn(4, 3), torch.randn(4, 3), out),
        torch.full((4, 3), 7.0),
    ),
    (
        "gemm",
        lambda out: infini.ops.gemm(torch.randn(4), torch.randn(4, 3), out),
        torch.full((4, 3), 7.0),
    ),
    (
        "softmax",
        lambda out: infini.ops.softmax(torch.randn(4, 8), 5, None, out),
        torch.full((4, 8), 7.0),
    ),
    (
        "silu",
        lambda out: infini.ops.silu(torch.randn(4, 8), out),
        torch.full((4, 9), 7.0),
    ),
    (
        "cat",
        lambda out: infini.ops.cat([torch.randn(2, 3), torch.randn(2, 4)], 0, out),
        torch.full((4, 3), 7.0),
    ),
    (
        "embedding",
        lambda out: infini.ops.embedding(torch.tensor([0, 9]), torch.randn(4, 3), out),
        torch.full((2, 3), 7.0),
    ),
]


@pytest.mark.parametrize("operator, call, out", BAD_TENSOR_CASES)
def test_bad_dtype_rank_shape_and_index(operator, call, out):
    _rejects(operator, lambda: call(out), [out], error=(ValueError, TypeError))


def test_nan_inf_and_zero_size_inputs_give_torch_results():
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 2.0]])
    out = torch.empty_like(x)
    infini.ops.relu(x, out)
    torch.testing.assert_close(out, torch.relu(x), equal_nan=True)
    infini.ops.add(x, x, out)
    torch.testing.assert_close(out, x + x, equal_nan=True)
    infini.ops.softmax(x[:, 3:], -1, None, out[:, 3:])
    torch.testing.assert_close(out[:, 3:], torch.softmax(x[:, 3:], -1))
    for shape in [(0,), (0, 4), (4, 0)]:
        empty = torch.empty(shape)
        infini.ops.add(empty, empty, torch.empty(shape))
        infini.ops.relu(empty, torch.empty(shape))
    infini.ops.rms_norm(torch.empty(0, 8), torch.ones(8), 1e-6, torch.empty(0, 8))
    infini.ops.gemm(torch.empty(3, 0), torch.empty(0, 2), torch.full((3, 2), 7.0))


# -- binding rules -----------------------------------------------------------


@needs_aten
def test_a_tensor_binds_to_a_tensor_list_along_its_first_dimension():
    stack = torch.randn(13, 4, 4, dtype=torch.float64)
    out = torch.empty(4, 4, dtype=torch.float64)
    for _ in range(2):  # the second call takes the cached path
        infini.ops.chain_matmul(stack, out)
        torch.testing.assert_close(out, torch.linalg.multi_dot(list(stack)))
    parts = torch.randn(2, 3, 5)
    out = torch.empty(6, 5)
    infini.ops.cat(parts, 0, out)
    torch.testing.assert_close(out, torch.cat(list(parts)))


# -- risky cases, each group in a child process ------------------------------

RISKY_CASES = {
    "zero_size_attention_with_a_huge_batch": """
        q = torch.empty(2**40, 2, 5, 0)
        slots = infini.ops.ScaledDotProductAttention.active_implementation_indices
        for index in slots("cpu"):
            infini.ops.scaled_dot_product_attention(
                q, q, q, torch.empty(2**40, 2, 5, 0), implementation_index=index
            )
    """,
    "zero_size_huge_shapes": """
        e = torch.empty(2**40, 0)
        infini.ops.add(e, e, torch.empty(2**40, 0))
        infini.ops.rms_norm(torch.empty(0, 2**20), torch.ones(2**20), 1e-6,
                            torch.empty(0, 2**20))
    """,
    "wide_rows": """
        x = torch.randn(2, 2**20)
        out = torch.empty_like(x)
        infini.ops.rms_norm(x, torch.ones(2**20), 1e-6, out)
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        infini.ops.softmax(x, -1, None, out)
        torch.testing.assert_close(out, torch.softmax(x, -1))
    """,
    "unsupported_dtypes": """
        for dtype in (torch.complex64, torch.float8_e4m3fn):
            x = torch.zeros(4, dtype=dtype)
            try:
                infini.ops.add(x, x, x)
            except ValueError as error:
                assert "`add`" in str(error), error
            else:
                raise AssertionError(dtype)
    """,
}


@pytest.mark.parametrize("case", sorted(RISKY_CASES))
def test_risky_case_in_a_child_process(case):
    source = "import torch\nimport infini.ops\n" + textwrap.dedent(RISKY_CASES[case])
    result = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]


# -- threads -----------------------------------------------------------------


def test_eight_threads_of_mixed_calls_match_torch():
    failures = []

    def work(number):
        generator = torch.Generator().manual_seed(number)
        rows = 3 + number
        columns = 8 + 4 * number
        weight = torch.rand(columns, generator=generator) + 0.5
        try:
            for step in range(100):
                x = torch.randn(rows, columns, generator=generator)
                y = torch.randn(rows, columns, generator=generator)
                out = torch.empty(rows, columns)
                kind = step % 4
                if kind == 0:
                    infini.ops.add(x, y, out)
                    expected = x + y
                elif kind == 1:
                    infini.ops.relu(x, out)
                    expected = torch.relu(x)
                elif kind == 2:
                    infini.ops.rms_norm(x, weight, 1e-6, out)
                    expected = (
                        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
                    )
                else:
                    infini.ops.mul(x, y, out)
                    expected = x * y
                torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append((number, repr(error)))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


# A build whose manifest lists no CPU implementation of `get_cutlass_moe_mm_data`
# (as a build for a device without one would): the function and the class
# exist, and a call raises naming the operator and the device, writing nothing.
_UNIMPLEMENTED_CALL = """
import torch, infini.ops
assert infini.ops.GetCutlassMoeMmData.active_implementation_indices("cpu") == []
ids = torch.zeros(4, 2, dtype=torch.int32)
outputs = [torch.zeros(9, dtype=torch.int32) for _ in range(5)]
try:
    infini.ops.get_cutlass_moe_mm_data(ids, 8, 16, 16, True, *outputs)
except ValueError as error:
    assert "GetCutlassMoeMmData" in str(error) and "device cpu" in str(error), error
else:
    raise AssertionError("no error")
assert all(not output.any() for output in outputs), "written before raising"
print("ok")
"""


def test_an_operator_without_an_implementation_here_is_still_bound(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from infini.ops.core.manifest import (
        TORCH_METADATA_NAME,
        TORCH_METADATA_PATH,
        load_manifest,
    )

    manifest = json.loads(json.dumps(load_manifest()))
    entry = manifest["operators"].get("get_cutlass_moe_mm_data")
    if entry is None:
        pytest.skip("an ops.json or allowlist build")
    entry["implementations"] = []
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    if TORCH_METADATA_PATH.is_file():
        (tmp_path / TORCH_METADATA_NAME).write_bytes(TORCH_METADATA_PATH.read_bytes())
    result = subprocess.run(
        [sys.executable, "-c", _UNIMPLEMENTED_CALL],
        env={**os.environ, "INFINI_OPS_MANIFEST": str(path)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@needs_aten
def test_max_unpool_both_overloads_give_torch_results():
    functional = torch.nn.functional
    x = torch.randn(1, 2, 8, 8)
    pooled, indices = functional.max_pool2d(x, 2, return_indices=True)
    expected = functional.max_unpool2d(pooled, indices, 2)
    for call in (
        lambda out: infini.ops.max_unpool2d(pooled, indices, [2], None, [0], None, out),
        lambda out: infini.ops.max_unpool2d(pooled, indices, [8, 8], out),
    ):
        out = torch.full(expected.shape, 7.0)
        call(out)
        assert torch.equal(out, expected)
    x = torch.randn(1, 2, 4, 4, 4)
    pooled, indices = functional.max_pool3d(x, 2, return_indices=True)
    expected = functional.max_unpool3d(pooled, indices, 2)
    out = torch.full(expected.shape, 7.0)
    infini.ops.max_unpool3d(pooled, indices, [2], None, [0], None, out)
    assert torch.equal(out, expected)
