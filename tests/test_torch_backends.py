"""The hand-written PyTorch implementations at the original's slots: `add`@1,
`gemm`@2, `reshape_and_cache`@1, `rotary_embedding`@1,
`scaled_dot_product_attention`@1 (their operator tests cover them too; these
check what is particular to the torch versions)."""

import pytest
import torch
import torch.nn.functional as F

import infini.ops


def _needs(cls_name, slot):
    cls = getattr(infini.ops, cls_name, None)
    if cls is None or slot not in cls.active_implementation_indices("cpu"):
        pytest.skip(f"{cls_name} has no slot {slot} on cpu in this build")


@pytest.mark.smoke
def test_add_slot_1_rounds_half_precision_once():
    _needs("Add", 1)
    a = torch.randn(64, 33, dtype=torch.bfloat16)
    b = torch.randn(64, 33, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    infini.ops.add(a, b, 2.5, out, implementation_index=1)
    expected = (a.double() + 2.5 * b.double()).to(torch.bfloat16)
    assert torch.equal(out, expected)


def test_add_slot_1_wraps_wide_unsigned_and_ignores_stream_on_cpu():
    _needs("Add", 1)
    a = torch.tensor([4294967295, 7], dtype=torch.uint32)
    b = torch.tensor([2, 1], dtype=torch.uint32)
    out = torch.empty_like(a)
    infini.ops.add(a, b, out, stream=12345, implementation_index=1)
    assert out.tolist() == [1, 8]


@pytest.mark.smoke
def test_gemm_slot_2_ignores_the_old_output_and_broadcasts_batches():
    _needs("Gemm", 2)
    a = torch.randn(5, 7)  # a 2-D operand shared by every batch
    b = torch.randn(3, 7, 4)
    y = torch.full((3, 5, 4), float("nan"))
    infini.ops.gemm(a, b, None, 0.5, 1.0, 0, 0, y, implementation_index=2)
    assert torch.allclose(y, 0.5 * (a @ b), rtol=1e-5, atol=1e-5)
    y2 = torch.empty(5, 4)
    infini.ops.gemm(a.t(), b[0].t(), None, None, None, 1, 1, y2, implementation_index=2)
    assert torch.allclose(y2, a @ b[0], rtol=1e-5, atol=1e-5)


def test_gemm_slot_2_output_aliasing_an_input():
    _needs("Gemm", 2)
    a = torch.randn(6, 6)
    b = torch.randn(6, 6)
    expected = a @ b
    infini.ops.gemm(a, b, a, implementation_index=2)
    assert torch.allclose(a, expected, rtol=1e-5, atol=1e-5)


def test_reshape_and_cache_slot_1_fp8_saturates_and_skips_negative_slots():
    _needs("ReshapeAndCache", 1)
    tokens, heads, head_size, block_size, x = 3, 2, 8, 4, 4
    key = torch.randn(tokens, heads, head_size) * 100
    key[0, 0, 0] = 1e6  # saturates to the largest finite e4m3 value
    value = torch.randn(tokens, heads, head_size)
    key_cache = torch.zeros(2, heads, head_size // x, block_size, x, dtype=torch.uint8)
    value_cache = torch.zeros(2, heads, head_size, block_size, dtype=torch.uint8)
    slots = torch.tensor([5, -1, 0])
    scale = torch.tensor([2.0])
    infini.ops.reshape_and_cache(
        key,
        value,
        key_cache,
        value_cache,
        slots,
        scale,
        scale,
        "fp8",
        implementation_index=1,
    )
    fp8 = torch.float8_e4m3fn
    stored = key_cache.view(fp8)[1, :, :, 1, :].float().reshape(heads, head_size)
    expected = (key[0] / 2).clamp(-448, 448).to(fp8).float()
    assert torch.equal(stored, expected) and stored[0, 0] == 448
    assert torch.equal(
        value_cache.view(fp8)[0, :, :, 0].float(), (value[2] / 2).to(fp8).float()
    )
    # Token 1 (slot -1) wrote nothing: only slots 5 and 0 are non-zero.
    written = (value_cache != 0).any(dim=(1, 2)).nonzero().tolist()
    assert written == [[0, 0], [1, 1]]


def test_reshape_and_cache_slot_1_checks_slots_before_writing():
    _needs("ReshapeAndCache", 1)
    key = torch.randn(2, 1, 4)
    key_cache = torch.zeros(1, 1, 1, 2, 4)
    value_cache = torch.zeros(1, 1, 4, 2)
    with pytest.raises(ValueError, match="`reshape_and_cache`"):
        infini.ops.reshape_and_cache(
            key,
            key,
            key_cache,
            value_cache,
            torch.tensor([0, 2]),
            torch.ones(1),
            torch.ones(1),
            "auto",
            implementation_index=1,
        )
    assert not key_cache.any() and not value_cache.any()


@pytest.mark.parametrize("is_neox", [False, True])
def test_rotary_embedding_slot_1_inverse_undoes_the_rotation(is_neox):
    _needs("RotaryEmbedding", 1)
    positions = torch.tensor([0, 3, 7])
    query = torch.randn(3, 2 * 16)
    key = torch.randn(3, 1, 16)
    cache = torch.randn(8, 8)
    q0, k0 = query.clone(), key.clone()
    arguments = (positions, query, key, cache, 16, is_neox)
    infini.ops.rotary_embedding(*arguments, 4, False, implementation_index=1)
    assert not torch.allclose(query, q0)
    # Rows of this cache are not unit rotations, so undo with the inverse of
    # a unit cache instead: cos^2 + sin^2 = 1.
    angles = torch.rand(8, 4)
    unit = torch.cat([angles.cos(), angles.sin()], dim=1)
    query, key = q0.clone(), k0.clone()
    arguments = (positions, query, key, unit, 16, is_neox)
    infini.ops.rotary_embedding(*arguments, 4, False, implementation_index=1)
    infini.ops.rotary_embedding(*arguments, 4, True, implementation_index=1)
    assert torch.allclose(query, q0, atol=1e-5) and torch.allclose(key, k0, atol=1e-5)


def test_scaled_dot_product_attention_slot_1_dropout_matches_torch():
    _needs("ScaledDotProductAttention", 1)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    out = torch.empty(2, 4, 5, 8)
    torch.manual_seed(7)
    infini.ops.scaled_dot_product_attention(
        q, k, v, None, 0.3, False, None, False, out, implementation_index=1
    )
    torch.manual_seed(7)
    expected = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_scaled_dot_product_attention_slot_1_half_precision_and_gqa():
    _needs("ScaledDotProductAttention", 1)
    q = torch.randn(1, 4, 6, 16, dtype=torch.float16)
    k = torch.randn(1, 2, 9, 16, dtype=torch.float16)
    v = torch.randn(1, 2, 9, 16, dtype=torch.float16)
    out = torch.empty(1, 4, 6, 16, dtype=torch.float16)
    infini.ops.scaled_dot_product_attention(
        q, k, v, None, 0.0, True, 0.2, True, out, implementation_index=1
    )
    expected = F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=True, scale=0.2, enable_gqa=True
    ).half()
    assert torch.allclose(out, expected, rtol=1e-3, atol=1e-3)


def test_stream_context_wraps_the_callers_stream_once_per_device(monkeypatch):
    """`core.streams.stream_context(device, stream)`, which the torch
    implementations and the Triton launches share: nothing for stream 0 or the
    CPU; otherwise the framework's external stream of that device, wrapped
    once per handle."""
    from infini.ops.core import streams
    from infini.ops.core.devices import Device

    if streams.TRITON_INTERPRETER:
        pytest.skip("the interpreter test mode runs everything on CPU tensors")

    wrapped = []

    class FakeExternalStream:
        def __init__(self, handle, device):
            wrapped.append((handle, device))

    class FakeCuda:
        ExternalStream = FakeExternalStream

        @staticmethod
        def stream(external):
            return ("on", external)

    monkeypatch.setattr(torch, "cuda", FakeCuda)
    monkeypatch.setattr(streams, "_EXTERNAL_STREAMS", {})
    cpu, gpu = Device("cpu", 0), Device("nvidia", 1)
    with streams.stream_context(cpu, 1234), streams.stream_context(gpu, 0):
        pass
    assert wrapped == []
    first = streams.stream_context(gpu, 1234)
    again = streams.stream_context(gpu, 1234)
    assert first[0] == "on" and first[1] is again[1]
    streams.stream_context(Device("iluvatar", 0), 1234)
    assert wrapped == [(1234, "cuda:1"), (1234, "cuda:0")]
