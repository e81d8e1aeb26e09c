"""The NineToothed backend (slot 9): generation, its cache, and every slot-9
kernel on CPU tensors through Triton's interpreter.

The operator tests (`tests/test_<op>.py`) run slot 9 as well once a manifest
has it; these cases are the small, fast selection CI runs for slot 9 (fp32,
fp16 and bf16; strided, transposed, broadcast and zero-size operands).
"""

from __future__ import annotations

import pytest
import torch

import infini.ops
from tests.ninetoothed_interpreter import (
    check_interpretable,
    no_driver,
    requires_interpreter,
    slot_nine_is_active,
)

pytest.importorskip("ninetoothed")

DTYPES = (
    (torch.float32, 1e-5),
    (torch.float16, 2e-3),
    (torch.bfloat16, 1.6e-2),
)


@pytest.fixture
def cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("INFINI_OPS_TRITON_CACHE_DIR", str(tmp_path))
    return tmp_path / "ninetoothed"


def _generate(ndim=2, block=64):
    from infini.ops.ninetoothed import generation
    from infini.ops.ninetoothed.ops import rms_norm

    generation._LOADED.clear()
    return rms_norm.source(ndim, block)


# -- generation and its cache ------------------------------------------------------


def test_generation_asks_no_driver_and_is_interpretable(cache_directory, monkeypatch):
    no_driver(monkeypatch)
    source = _generate(3, 64)
    (path,) = cache_directory.glob("rms_norm-*.py")
    check_interpretable(path.read_text())
    # Pointers, sizes and strides in the order of the specs, constexprs last.
    assert source.parameters[:2] == (
        "ninetoothed_input_pointer",
        "ninetoothed_input_size_0",
    )
    assert source.parameters.index("eps") < source.parameters.index(
        "ninetoothed_out_pointer"
    )
    assert list(source.constexprs) == ["ninetoothed_constexpr_prefix_compute"]


def test_a_cached_source_is_reused_and_a_stale_one_is_replaced(
    cache_directory, monkeypatch
):
    from infini.ops.ninetoothed import generation

    _generate()
    (path,) = cache_directory.glob("rms_norm-*.py")
    first = path.read_text()

    def refuse(*arguments):
        raise AssertionError("generated again")

    with monkeypatch.context() as patch:
        patch.setattr(generation, "_generate", refuse)
        _generate()  # read back from the cache
    path.write_text(first.replace('"fingerprint": "', '"fingerprint": "stale', 1))
    _generate()
    assert path.read_text() == first
    assert not list(cache_directory.glob(".*.tmp"))


# -- kernels through the interpreter -------------------------------------------------


def _skip_without_slot_nine(name):
    cls = getattr(infini.ops, name, None)
    if cls is None or not slot_nine_is_active(cls):
        pytest.skip(f"this build has no slot-9 `{name}` (WITH_NINETOOTHED)")


def _rms_norm_reference(input, weight, eps=1e-6):
    x = input.double()
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * weight.double()


@requires_interpreter
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape, layout",
    [
        ((3, 40), "contiguous"),
        ((2, 3, 70), "transposed"),
        ((2, 2, 3, 33), "strided"),
        ((1, 600), "contiguous"),  # more than one block per row
        ((0, 16), "contiguous"),
    ],
)
def test_rms_norm(shape, layout, dtype, tolerance):
    _skip_without_slot_nine("RmsNorm")
    if layout == "transposed":
        dims = tuple(reversed(range(len(shape))))
        input = torch.randn(tuple(reversed(shape)), dtype=dtype).permute(dims)
    elif layout == "strided":
        input = torch.randn(*shape[:-1], shape[-1] * 2, dtype=dtype)[..., ::2]
    else:
        input = torch.randn(shape, dtype=dtype)
    weight = torch.randn(shape[-1], dtype=dtype)
    out = torch.empty(shape, dtype=dtype)
    infini.ops.rms_norm(input, weight, 1e-6, out, implementation_index=9)
    expected = _rms_norm_reference(input, weight).to(dtype)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)


@requires_interpreter
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
def test_binary_operators_broadcast_and_transposed(dtype, tolerance):
    _skip_without_slot_nine("Add")
    input = torch.randn(6, 5, dtype=dtype).t()  # (5, 6), transposed
    other = torch.randn(1, 6, dtype=dtype).expand(5, 6)  # stride-0 rows
    out = torch.empty(5, 6, dtype=dtype)
    infini.ops.add(input, other, 2.0, out, implementation_index=9)
    expected = (input.double() + 2.0 * other.double()).to(dtype)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)
    infini.ops.mul(input, other, out, implementation_index=9)
    expected = (input.double() * other.double()).to(dtype)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)
    empty = torch.empty(0, 6, dtype=dtype)
    infini.ops.add(empty, empty, empty, implementation_index=9)


@requires_interpreter
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
def test_activations(dtype, tolerance):
    _skip_without_slot_nine("Silu")
    silu = torch.nn.functional.silu
    input = torch.randn(4, 20, dtype=dtype)[:, ::2]
    gate = torch.randn(4, 10, dtype=dtype)
    out = torch.empty(4, 10, dtype=dtype)
    infini.ops.silu(input, out, implementation_index=9)
    torch.testing.assert_close(
        out, silu(input.double()).to(dtype), rtol=tolerance, atol=tolerance
    )
    infini.ops.swiglu(input, gate, out, implementation_index=9)
    expected = (input.double() * silu(gate.double())).to(dtype)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)
    for approximate in ("none", "tanh"):
        infini.ops.gelu(input, approximate, out, implementation_index=9)
        expected = torch.nn.functional.gelu(input.double(), approximate=approximate)
        torch.testing.assert_close(
            out, expected.to(dtype), rtol=tolerance, atol=tolerance
        )
    both = torch.randn(4, 20, dtype=dtype)
    infini.ops.silu_and_mul(both, out, implementation_index=9)
    expected = (silu(both[:, :10].double()) * both[:, 10:].double()).to(dtype)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)


@requires_interpreter
def test_an_output_overlapping_its_input_reads_the_input_first():
    _skip_without_slot_nine("RmsNorm")
    input = torch.randn(8, 8)
    weight = torch.randn(8)
    expected = _rms_norm_reference(input, weight).float()
    out = input.t()
    infini.ops.rms_norm(input, weight, 1e-6, out, implementation_index=9)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@requires_interpreter
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
def test_softmax_along_a_middle_dimension_and_causal_softmax(dtype, tolerance):
    _skip_without_slot_nine("Softmax")
    input = torch.randn(3, 40, 5, dtype=dtype)
    out = torch.empty(3, 40, 5, dtype=dtype)
    infini.ops.softmax(input, 1, None, out, implementation_index=9)
    expected = torch.softmax(input.double(), 1).to(dtype)
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)
    for rows, columns in ((3, 5), (5, 3)):
        input = torch.randn(2, columns, rows, dtype=dtype).transpose(1, 2)
        out = torch.empty(2, rows, columns, dtype=dtype)
        infini.ops.causal_softmax(input, out, implementation_index=9)
        mask = torch.ones(rows, columns).tril(columns - rows).bool()
        masked = input.double().masked_fill(~mask, float("-inf"))
        expected = torch.softmax(masked, -1).masked_fill(~mask, 0)
        # Rows with nothing unmasked are NaN throughout, as torch gives them.
        expected[:, : max(rows - columns, 0)] = float("nan")
        expected = expected.to(dtype)
        torch.testing.assert_close(
            out, expected, rtol=tolerance, atol=tolerance, equal_nan=True
        )
