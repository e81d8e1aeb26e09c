import pytest
import torch

import infini.ops
from tests.utils import Payload

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# tokens, kv heads, head size, value head size, blocks, block size,
# negative slots, smoke
CASES = (
    (16, 8, 128, 128, 8, 16, False, True),
    (1, 8, 128, 128, 4, 16, False, False),
    (16, 32, 64, 64, 4, 16, False, False),
    (7, 3, 24, 40, 4, 5, True, True),
    (0, 2, 16, 16, 2, 4, False, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, marks=marks)


def _paged_caching_infinilm(k, v, slot_mapping, k_cache, v_cache, index):
    result = infini.ops.paged_caching_infinilm(
        k, v, slot_mapping, k_cache, v_cache, implementation_index=index
    )
    assert result is None
    return k_cache, v_cache


def _torch_paged_caching_infinilm(k, v, slot_mapping, k_cache, v_cache, index):
    valid = slot_mapping >= 0
    slots = slot_mapping[valid].long()
    block_size = k_cache.shape[2]
    blocks, offsets = slots // block_size, slots % block_size
    # Advanced indices around a slice put the token dimension first.
    k_cache[blocks, :, offsets, :] = k[valid]
    v_cache[blocks, :, offsets, :] = v[valid]
    return k_cache, v_cache


def _inputs(tokens, heads, head_size, head_size_v, blocks, block_size, negative, dtype):
    k = torch.randn(tokens, heads, head_size, dtype=dtype)
    v = torch.randn(tokens, heads, head_size_v, dtype=dtype)
    slot_mapping = torch.randperm(blocks * block_size)[:tokens]
    if negative:
        slot_mapping[::2] = -1
    k_cache = torch.randn(blocks, heads, block_size, head_size).to(dtype)
    v_cache = torch.randn(blocks, heads, block_size, head_size_v).to(dtype)
    return k, v, slot_mapping, k_cache, v_cache


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, heads, head_size, head_size_v, blocks, block_size, negative, dtype",
    list(_params()),
)
def test_paged_caching_infinilm(
    tokens,
    heads,
    head_size,
    head_size_v,
    blocks,
    block_size,
    negative,
    dtype,
    device,
    implementation_index,
):
    tensors = _inputs(
        tokens, heads, head_size, head_size_v, blocks, block_size, negative, dtype
    )
    return Payload(
        _paged_caching_infinilm,
        _torch_paged_caching_infinilm,
        (*[t.to(device) for t in tensors], implementation_index),
        rtol=0,
        atol=0,
    )


def test_paged_caching_infinilm_strided(device, implementation_index):
    """`k`/`v` are slices of a fused buffer, the caches have gaps, and the
    slots are an int32 strided view."""
    tokens, heads, head_size, blocks, block_size = 6, 2, 16, 3, 4
    kv = torch.randn(tokens, heads, 2, head_size, device=device)
    k, v = kv[:, :, 0], kv[:, :, 1]
    k_cache = torch.zeros(blocks, heads, block_size, head_size * 2, device=device)
    k_cache = k_cache[..., ::2]
    v_cache = torch.zeros(blocks, block_size, heads, head_size, device=device)
    v_cache = v_cache.transpose(1, 2)
    slots = torch.randperm(blocks * block_size, device=device)[: tokens * 2]
    slot_mapping = slots.to(torch.int32)[::2]
    args = (k, v, slot_mapping, k_cache, v_cache)
    expected = _torch_paged_caching_infinilm(*[a.clone() for a in args], None)
    output = _paged_caching_infinilm(*args, implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_paged_caching_infinilm_rejects_slots_past_the_cache(device):
    k, v, slot_mapping, k_cache, v_cache = _inputs(
        5, 2, 16, 16, 2, 4, False, torch.float32
    )
    slot_mapping[2] = 8
    before = k_cache.clone(), v_cache.clone()
    with pytest.raises(
        ValueError,
        match=r"`paged_caching_infinilm`: `slot_mapping\[2\]` is 8, but the cache "
        r"has 8 slots",
    ):
        infini.ops.paged_caching_infinilm(k, v, slot_mapping, k_cache, v_cache)
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


@pytest.mark.parametrize(
    "k_shape, v_shape, slots, cache_shape, match",
    [
        ((4, 2, 16), (4, 2, 16), 5, (2, 2, 4, 16), "`slot_mapping` must have"),
        ((4, 2, 16), (3, 2, 16), 4, (2, 2, 4, 16), "`v` of shape"),
        ((4, 2, 16), (4, 2, 16), 4, (2, 4, 2, 16), "`k_cache` must have shape"),
        ((4, 2, 16), (4, 2, 8), 4, (2, 2, 4, 16), "`v_cache` must have shape"),
        ((4, 32), (4, 32), 4, (2, 2, 4, 16), "`k` must have 3"),
    ],
)
def test_paged_caching_infinilm_rejects_bad_shapes(
    k_shape, v_shape, slots, cache_shape, match, device
):
    k = torch.randn(k_shape, device=device)
    v = torch.randn(v_shape, device=device)
    slot_mapping = torch.arange(slots, device=device)
    cache = torch.zeros(cache_shape, device=device)
    with pytest.raises(ValueError, match=f"`paged_caching_infinilm`: {match}"):
        infini.ops.paged_caching_infinilm(k, v, slot_mapping, cache, cache.clone())


def test_paged_caching_infinilm_rejects_bad_dtypes(device):
    k = torch.randn(4, 2, 16, device=device)
    cache = torch.zeros(2, 2, 4, 16, device=device)
    slots = torch.arange(4, device=device)
    with pytest.raises(ValueError, match="`paged_caching_infinilm`: `k_cache` has"):
        infini.ops.paged_caching_infinilm(k, k, slots, cache.half(), cache)
    with pytest.raises(ValueError, match="`paged_caching_infinilm`: `slot_mapping`"):
        infini.ops.paged_caching_infinilm(k, k, slots.float(), cache, cache)
    with pytest.raises(ValueError, match="`paged_caching_infinilm`: `k` has dtype"):
        infini.ops.paged_caching_infinilm(
            k.int(), k.int(), slots, cache.int(), cache.int()
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_caching_infinilm_many_tokens(dtype, device, implementation_index):
    """Enough tokens for several programs of a tiled kernel, with padding
    slots among them."""
    tensors = _inputs(160, 8, 128, 128, 96, 16, True, dtype)
    args = [t.to(device) for t in tensors]
    expected = _torch_paged_caching_infinilm(*[a.clone() for a in args], None)
    output = _paged_caching_infinilm(*args, implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_paged_caching_infinilm_sources_inside_the_caches(device, implementation_index):
    """`k` and `v` are views of cache blocks that other slots overwrite: the
    caches get the values the sources held before the call."""
    blocks, heads, block_size, head_size = 4, 2, 4, 8
    k_cache = torch.randn(blocks, heads, block_size, head_size, device=device)
    v_cache = torch.randn(blocks, heads, block_size, head_size, device=device)
    # Tokens are the offsets of block 1 (a (block_size, heads, head) view).
    k, v = k_cache[1].transpose(0, 1), v_cache[1].transpose(0, 1)
    slot_mapping = torch.tensor([5, 4, 7, 9], device=device)
    expected = _torch_paged_caching_infinilm(
        k.clone(), v.clone(), slot_mapping, k_cache.clone(), v_cache.clone(), None
    )
    output = _paged_caching_infinilm(
        k, v, slot_mapping, k_cache, v_cache, implementation_index
    )
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])
