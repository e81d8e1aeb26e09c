"""Streaming (non-temporal) stores of the CPU elementwise kernels: `add`,
`mul` and bit copies write outputs of operations moving more than twice the
last-level cache past the cache. The streaming kernels are forced here on
small tensors (`streaming_outputs`) and must compute exactly what the
regular ones do."""

import pytest
import torch

import infini.ops

memory = pytest.importorskip("infini.ops.native.cpu.memory")
elementwise = pytest.importorskip("infini.ops.native.cpu.elementwise")
conversions = pytest.importorskip("infini.ops.native.cpu.conversions")
layout = pytest.importorskip("infini.ops.native.cpu.layout")

# Large enough for several parallel chunks, with a partial last one.
SHAPE = (67, 1031)
DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
OPERATORS = (infini.ops.Add, infini.ops.Mul, infini.ops.Copy)


@pytest.fixture
def streamed():
    """Operators built inside the test stream whatever their size."""
    for operator in OPERATORS:
        operator.clear_cache()
    with memory.streaming_outputs():
        yield
    for operator in OPERATORS:
        operator.clear_cache()


def _inputs(dtype):
    if dtype.is_floating_point:
        return torch.randn(SHAPE, dtype=dtype), torch.randn(SHAPE, dtype=dtype)
    return (
        torch.randint(-1000, 1000, SHAPE, dtype=dtype),
        torch.randint(-1000, 1000, SHAPE, dtype=dtype),
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_streamed_add_mul_and_copy_match_the_regular_kernels(dtype):
    a, b = _inputs(dtype)
    calls = (
        lambda out: infini.ops.add(a, b, 3.0, out, implementation_index=0),
        lambda out: infini.ops.mul(a, b, out, implementation_index=0),
        lambda out: infini.ops.copy(a, False, out, implementation_index=0),
    )
    references = (torch.add(a, b, alpha=3), a * b, a)
    for call, reference in zip(calls, references):
        for operator in OPERATORS:
            operator.clear_cache()
        regular = torch.empty_like(a)
        call(regular)
        torch.testing.assert_close(regular, reference, rtol=1e-6, atol=1e-6)
        with memory.streaming_outputs():
            for operator in OPERATORS:
                operator.clear_cache()
            streamed = torch.empty_like(a)
            call(streamed)
        assert torch.equal(streamed, regular)
    for operator in OPERATORS:
        operator.clear_cache()


def test_streamed_in_place_add(streamed):
    a, b = _inputs(torch.float32)
    expected = a + b
    infini.ops.add(a, b, a, implementation_index=0)
    assert torch.equal(a, expected)


def _meta(tensor):
    from infini.ops.core.tensor import TensorMeta

    dtype = str(tensor.dtype).removeprefix("torch.")
    return TensorMeta(tuple(tensor.shape), tuple(tensor.stride()), dtype, "cpu")


def test_streaming_kernels_are_picked_only_where_they_may_be():
    from infini.ops.native.cpu.ops.add import _add

    big = _meta(torch.empty(SHAPE))
    half = _meta(torch.empty(SHAPE, dtype=torch.float16))
    regular, streaming = elementwise.flat_binary_kernels(_add, "float32")[1:]
    half_regular = elementwise.flat_binary_kernels(_add, "float16")[1]
    copy = conversions.copy_kernels(4)
    with memory.streaming_outputs():
        binary = elementwise.BinaryElementwise
        assert binary(_add, big, big, big, 1.0, True).kernel is streaming
        unary = elementwise.UnaryElementwise(big, big, copy, True)
        assert unary.pass_.kernel is copy[6]
        # Not asked for (compute-bound callers), or a 16-bit output.
        assert binary(_add, big, big, big, 1.0).kernel is regular
        assert binary(_add, half, half, half, 1.0, True).kernel is half_regular
    # Outside the block, these small tensors are stored as usual.
    assert binary(_add, big, big, big, 1.0, True).kernel is regular


def test_only_native_outputs_of_large_operations_stream():
    threshold = memory.streaming_threshold()
    assert threshold > 0
    assert layout.streams("float32", threshold + 1)
    # A copy of exactly twice the cache may still be read back from it.
    assert not layout.streams("float32", threshold)
    # 16-bit floats and bool are rounded or normalised by their storers.
    assert not layout.streams("float16", threshold + 1)
    assert not layout.streams("bool", threshold + 1)
    with memory.streaming_outputs():
        assert layout.streams("int64", 1)
    assert memory.streaming_threshold() == threshold
