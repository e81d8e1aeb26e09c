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


@requires_interpreter
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
def test_gemm_transposed_batched_strided_and_empty(dtype, tolerance):
    _skip_without_slot_nine("Gemm")
    # 2-D, `b` transposed (column-major), `alpha`.
    a = torch.randn(5, 33, dtype=dtype)
    b = torch.randn(20, 33, dtype=dtype)
    y = torch.empty(5, 20, dtype=dtype)
    infini.ops.gemm(a, b, None, 0.5, None, 0, 1, y, implementation_index=9)
    expected = (0.5 * a.double() @ b.double().t()).to(dtype)
    torch.testing.assert_close(y, expected, rtol=tolerance, atol=tolerance)
    # Batched, `a` transposed and strided, a 2-D `b` shared by the batch.
    a = torch.randn(2, 14, 6, dtype=dtype)[:, ::2]  # op(a): (2, 6, 7)
    b = torch.randn(7, 9, dtype=dtype)
    y = torch.empty(2, 6, 9, dtype=dtype)
    infini.ops.gemm(a, b, None, None, None, 1, 0, y, implementation_index=9)
    expected = (a.double().transpose(1, 2) @ b.double()).to(dtype)
    torch.testing.assert_close(y, expected, rtol=tolerance, atol=tolerance)
    # No inner dimension: zeros; no rows: nothing to do.
    y = torch.full((3, 4), float("nan"), dtype=dtype)
    empty_a, empty_b = torch.empty(3, 0, dtype=dtype), torch.empty(0, 4, dtype=dtype)
    infini.ops.gemm(empty_a, empty_b, y, implementation_index=9)
    assert torch.equal(y, torch.zeros(3, 4, dtype=dtype))
    infini.ops.gemm(
        torch.empty(0, 3, dtype=dtype),
        torch.empty(3, 4, dtype=dtype),
        torch.empty(0, 4, dtype=dtype),
        implementation_index=9,
    )


@requires_interpreter
def test_gemm_in_float64_and_into_an_aliased_output():
    _skip_without_slot_nine("Gemm")
    a = torch.randn(3, 3, 8, dtype=torch.float64)
    b = torch.randn(1, 8, 8, dtype=torch.float64)  # batch of one, shared
    expected = a @ b
    infini.ops.gemm(a, b, a, implementation_index=9)  # `y` is `a`
    torch.testing.assert_close(a, expected, rtol=1e-12, atol=1e-12)


def _attention_reference(query, key, value, **options):
    import torch.nn.functional as F

    if options.get("enable_gqa"):
        ratio = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(ratio, -3)
        value = value.repeat_interleave(ratio, -3)
        options = {**options, "enable_gqa": False}
    mask = options.get("attn_mask")
    if mask is not None and mask.is_floating_point():
        options["attn_mask"] = mask.double()
    result = F.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), **options
    )
    return result.nan_to_num(0.0)  # a row with nothing left is 0 (the base)


@requires_interpreter
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
def test_attention_causal_grouped_query(dtype, tolerance):
    _skip_without_slot_nine("ScaledDotProductAttention")
    # Two query heads per key/value head; the value has fewer features; the
    # query is transposed in memory.
    query = torch.randn(1, 9, 4, 16, dtype=dtype).transpose(1, 2)
    key = torch.randn(1, 2, 11, 16, dtype=dtype)
    value = torch.randn(1, 2, 11, 8, dtype=dtype)
    out = torch.empty(1, 4, 9, 8, dtype=dtype)
    infini.ops.scaled_dot_product_attention(
        query, key, value, None, 0.0, True, None, True, out, implementation_index=9
    )
    expected = _attention_reference(query, key, value, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, expected.to(dtype), rtol=tolerance, atol=tolerance)


@requires_interpreter
def test_attention_masks_several_key_tiles_and_empty_sequences():
    _skip_without_slot_nine("ScaledDotProductAttention")
    attention = infini.ops.scaled_dot_product_attention
    # A bool mask broadcast over the heads, with a row masked throughout,
    # and more keys than one tile holds (the online softmax across tiles).
    query, key = torch.randn(2, 3, 8), torch.randn(2, 300, 8)
    value = torch.randn(2, 300, 5)
    mask = torch.rand(3, 300) > 0.5
    mask[1] = False
    out = torch.empty(2, 3, 5)
    attention(
        query, key, value, mask, 0.0, False, 0.7, False, out, implementation_index=9
    )
    expected = _attention_reference(query, key, value, attn_mask=mask, scale=0.7)
    torch.testing.assert_close(out, expected.float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(out[:, 1], torch.zeros(2, 5))
    # An additive float16 mask, broadcast along the queries.
    query, key, value = (torch.randn(3, 6, dtype=torch.float16) for _ in range(3))
    mask = torch.randn(1, 3, dtype=torch.float16)
    out = torch.empty(3, 6, dtype=torch.float16)
    attention(
        query, key, value, mask, 0.0, False, None, False, out, implementation_index=9
    )
    expected = _attention_reference(query, key, value, attn_mask=mask)
    torch.testing.assert_close(out, expected.half(), rtol=2e-3, atol=2e-3)
    # No keys: zeros; no queries: nothing to do.
    out = torch.full((2, 4), float("nan"))
    attention(
        torch.randn(2, 3),
        torch.empty(0, 3),
        torch.empty(0, 4),
        out,
        implementation_index=9,
    )
    assert torch.equal(out, torch.zeros(2, 4))
    attention(
        torch.empty(0, 3),
        torch.randn(2, 3),
        torch.randn(2, 4),
        torch.empty(0, 4),
        implementation_index=9,
    )


@requires_interpreter
def test_attention_refuses_at_slot_nine_what_it_does_not_support():
    _skip_without_slot_nine("ScaledDotProductAttention")
    query, key, value = torch.randn(6, 2, 4), torch.randn(2, 2, 4), torch.randn(3, 2, 4)
    out = torch.full((6, 2, 4), 7.0)
    for arguments, words in (
        ((query, key, key, None, 0.5, False, None, True), "`dropout_p`"),
        ((query, key, value, None, 0.0, False, None, True), "divide one another"),
        (
            (torch.randn(2, 0), torch.randn(3, 0), torch.randn(3, 4), None, 0.0)
            + (False, None, False),
            "E = 0",
        ),
    ):
        target = out if arguments[0] is query else torch.full((2, 4), 7.0)
        with pytest.raises(ValueError, match="scaled_dot_product_attention") as error:
            infini.ops.scaled_dot_product_attention(
                *arguments, target, implementation_index=9
            )
        assert "slot 9" in str(error.value) and words in str(error.value)
        assert torch.equal(target, torch.full_like(target, 7.0))
    # Everything dropped draws nothing: zeros, as at every slot.
    infini.ops.scaled_dot_product_attention(
        query, key, key, None, 1.0, False, None, True, out, implementation_index=9
    )
    assert torch.equal(out, torch.zeros_like(out))


def _rope_reference(positions, tensor, cache, head_size, neox, offset=0, inverse=False):
    """The rotated copy of `tensor` in float64."""
    half = cache.shape[1] // 2
    table = cache.double()[positions.long()].unsqueeze(-2)
    cos, sin = table[..., :half], table[..., half:]
    sin = -sin if inverse else sin
    result = tensor.double().clone()
    heads = result.view(*positions.shape, -1, head_size)
    part = heads[..., offset : offset + 2 * half]
    first = part[..., :half] if neox else part[..., 0::2]
    second = part[..., half:] if neox else part[..., 1::2]
    x, y = first.clone(), second.clone()
    first.copy_(x * cos - y * sin)
    second.copy_(y * cos + x * sin)
    return result


@requires_interpreter
@pytest.mark.parametrize("neox", (True, False), ids=("neox", "gptj"))
@pytest.mark.parametrize("dtype, tolerance", DTYPES, ids=str)
def test_rotary_embedding(dtype, tolerance, neox):
    _skip_without_slot_nine("RotaryEmbedding")
    # Flattened query, structured key with one head (GQA), a rotary part
    # after an offset, a cache of another dtype.
    positions = torch.randint(0, 10, (5,))
    cache = torch.randn(10, 12, dtype=torch.float32)
    query = torch.randn(5, 3 * 16, dtype=dtype)
    key = torch.randn(5, 1, 16, dtype=dtype)
    expected_query = _rope_reference(positions, query, cache, 16, neox, offset=2)
    expected_key = _rope_reference(positions, key, cache, 16, neox, offset=2)
    infini.ops.rotary_embedding(
        positions, query, key, cache, 16, neox, 2, False, implementation_index=9
    )
    torch.testing.assert_close(
        query, expected_query.to(dtype), rtol=tolerance, atol=tolerance
    )
    torch.testing.assert_close(
        key, expected_key.to(dtype), rtol=tolerance, atol=tolerance
    )
    # 2-D int32 positions, a transposed query, no key, the inverse rotation.
    positions = torch.randint(0, 10, (2, 3), dtype=torch.int32)
    query = torch.randn(3, 2, 2, 16, dtype=dtype).transpose(0, 1)
    cache = cache.to(dtype)
    expected = _rope_reference(positions, query, cache, 16, neox, inverse=True)
    infini.ops.rotary_embedding(
        positions, query, None, cache, 16, neox, 0, True, implementation_index=9
    )
    torch.testing.assert_close(
        query, expected.to(dtype), rtol=tolerance, atol=tolerance
    )


@requires_interpreter
def test_rotary_embedding_without_tokens_and_with_a_bad_position():
    _skip_without_slot_nine("RotaryEmbedding")
    cache = torch.randn(4, 8)
    query = torch.empty(0, 8)
    infini.ops.rotary_embedding(
        torch.empty(0, dtype=torch.int64),
        query,
        None,
        cache,
        8,
        True,
        implementation_index=9,
    )
    query = torch.randn(2, 8)
    before = query.clone()
    with pytest.raises(ValueError, match="rotary_embedding"):
        infini.ops.rotary_embedding(
            torch.tensor([1, 4]), query, None, cache, 8, True, implementation_index=9
        )
    assert torch.equal(query, before)
