import pytest
import torch

import infini.ops
from tests.utils import Payload

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = {
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}

# tokens, slots written, heads, head size, value head size, blocks, block size,
# HND layout, negative slots, smoke
CASES = (
    (16, 16, 8, 128, 128, 8, 16, False, False, True),
    (1, 1, 8, 128, 128, 4, 16, True, False, False),
    (16, 16, 32, 64, 64, 4, 16, True, False, False),
    (9, 7, 3, 24, 40, 4, 5, False, True, True),
    (4, 0, 2, 16, 16, 2, 4, False, False, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, marks=marks)


def _reshape_and_cache_flash(
    key, value, slot_mapping, k_scale, v_scale, mode, key_cache, value_cache, index
):
    result = infini.ops.reshape_and_cache_flash(
        key,
        value,
        slot_mapping,
        k_scale,
        v_scale,
        mode,
        key_cache,
        value_cache,
        implementation_index=index,
    )
    assert result is None
    return key_cache, value_cache


def _to_cache(tensor, scale, mode):
    if mode == "auto":
        return tensor
    return (tensor.float() / scale.float()).to(FP8_DTYPES[mode]).view(torch.uint8)


def _torch_reshape_and_cache_flash(
    key, value, slot_mapping, k_scale, v_scale, mode, key_cache, value_cache, index
):
    count = slot_mapping.shape[0]
    valid = slot_mapping >= 0
    slots = slot_mapping[valid].long()
    block_size = key_cache.shape[1]
    blocks, offsets = slots // block_size, slots % block_size
    key_cache[blocks, offsets] = _to_cache(key[:count][valid], k_scale, mode)
    value_cache[blocks, offsets] = _to_cache(value[:count][valid], v_scale, mode)
    return key_cache, value_cache


def _cache(blocks, block_size, heads, head_size, hnd, dtype):
    if hnd:
        # HND storage seen through a permuted (NHD) view.
        storage = torch.randint(0, 100, (blocks, heads, block_size, head_size))
        return storage.to(dtype).permute(0, 2, 1, 3)
    return torch.randint(0, 100, (blocks, block_size, heads, head_size)).to(dtype)


def _inputs(
    tokens,
    count,
    heads,
    head_size,
    head_size_v,
    blocks,
    block_size,
    hnd,
    negative,
    dtype,
    mode,
):
    key = torch.randn(tokens, heads, head_size, dtype=dtype)
    value = torch.randn(tokens, heads, head_size_v, dtype=dtype)
    slot_mapping = torch.randperm(blocks * block_size)[:count]
    if negative:
        slot_mapping[1::3] = -1
    cache_dtype = dtype if mode == "auto" else torch.uint8
    key_cache = _cache(blocks, block_size, heads, head_size, hnd, cache_dtype)
    value_cache = _cache(blocks, block_size, heads, head_size_v, hnd, cache_dtype)
    return key, value, slot_mapping, key_cache, value_cache


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, count, heads, head_size, head_size_v, blocks, block_size, hnd, "
    "negative, dtype",
    list(_params()),
)
def test_reshape_and_cache_flash(
    tokens,
    count,
    heads,
    head_size,
    head_size_v,
    blocks,
    block_size,
    hnd,
    negative,
    dtype,
    device,
    implementation_index,
):
    key, value, slot_mapping, key_cache, value_cache = _inputs(
        tokens,
        count,
        heads,
        head_size,
        head_size_v,
        blocks,
        block_size,
        hnd,
        negative,
        dtype,
        "auto",
    )
    scale = torch.ones(1, device=device)
    return Payload(
        _reshape_and_cache_flash,
        _torch_reshape_and_cache_flash,
        (
            key.to(device),
            value.to(device),
            slot_mapping.to(device),
            scale,
            scale,
            "auto",
            key_cache.to(device),
            value_cache.to(device),
            implementation_index,
        ),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize(
    "mode, dtype, slot_dtype, hnd",
    [
        ("fp8_e4m3", torch.float32, torch.int32, True),
        ("fp8", torch.float16, torch.int64, False),
        ("fp8_e5m2", torch.bfloat16, torch.int64, False),
    ],
)
def test_reshape_and_cache_flash_fp8(
    mode, dtype, slot_dtype, hnd, device, implementation_index
):
    key, value, slot_mapping, key_cache, value_cache = _inputs(
        10, 8, 4, 32, 32, 3, 8, hnd, True, dtype, mode
    )
    exponents = torch.randint(-12, 8, key.shape)
    key = (key.float() * 2.0**exponents).to(dtype)
    args = [
        key.to(device),
        value.to(device),
        slot_mapping.to(slot_dtype).to(device),
        torch.tensor([0.25], device=device),
        torch.tensor([1.5], device=device),
        mode,
        key_cache.to(device),
        value_cache.to(device),
    ]
    expected = _torch_reshape_and_cache_flash(
        *[a.clone() if isinstance(a, torch.Tensor) else a for a in args], None
    )
    output = _reshape_and_cache_flash(*args, implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_reshape_and_cache_flash_rejects_slots_past_the_cache(device):
    key, value, slot_mapping, key_cache, value_cache = _inputs(
        6, 5, 2, 16, 16, 2, 4, False, False, torch.float32, "auto"
    )
    slot_mapping[4] = 100
    before = key_cache.clone(), value_cache.clone()
    scale = torch.ones(1)
    with pytest.raises(
        ValueError,
        match=r"`reshape_and_cache_flash`: `slot_mapping\[4\]` is 100, but the cache "
        r"has 8 slots",
    ):
        infini.ops.reshape_and_cache_flash(
            key, value, slot_mapping, scale, scale, "auto", key_cache, value_cache
        )
    assert torch.equal(key_cache, before[0]) and torch.equal(value_cache, before[1])


@pytest.mark.parametrize(
    "key_shape, value_shape, slots, cache_shape, match",
    [
        ((4, 2, 16), (4, 2, 16), 5, (2, 4, 2, 16), "`slot_mapping` has 5 slots"),
        ((4, 2, 16), (4, 3, 16), 4, (2, 4, 2, 16), "`value` of shape"),
        ((4, 2, 16), (4, 2, 16), 4, (2, 4, 3, 16), "`key_cache` must have shape"),
        ((4, 2, 16), (4, 2, 8), 4, (2, 4, 2, 16), "`value_cache` must have shape"),
        ((4, 2, 16), (4, 2, 16), 4, (2, 4, 32), "`key_cache` must have 4"),
    ],
)
def test_reshape_and_cache_flash_rejects_bad_shapes(
    key_shape, value_shape, slots, cache_shape, match, device
):
    key = torch.randn(key_shape, device=device)
    value = torch.randn(value_shape, device=device)
    slot_mapping = torch.arange(slots, device=device)
    scale = torch.ones(1, device=device)
    key_cache = torch.zeros(cache_shape, device=device)
    with pytest.raises(ValueError, match=f"`reshape_and_cache_flash`: {match}"):
        infini.ops.reshape_and_cache_flash(
            key, value, slot_mapping, scale, scale, "auto", key_cache, key_cache.clone()
        )


def test_reshape_and_cache_flash_rejects_bad_modes_and_dtypes(device):
    key = torch.randn(4, 2, 16, device=device)
    cache = torch.zeros(2, 4, 2, 16, device=device)
    slots = torch.arange(4, device=device)
    scale = torch.ones(1, device=device)
    with pytest.raises(ValueError, match="`reshape_and_cache_flash`: `kv_cache_dtype`"):
        infini.ops.reshape_and_cache_flash(
            key, key, slots, scale, scale, "fp16", cache, cache
        )
    with pytest.raises(ValueError, match="`reshape_and_cache_flash`: `key_cache` has"):
        infini.ops.reshape_and_cache_flash(
            key, key, slots, scale, scale, "fp8_e4m3", cache, cache
        )
    with pytest.raises(ValueError, match="`reshape_and_cache_flash`: `value` has"):
        infini.ops.reshape_and_cache_flash(
            key, key.half(), slots, scale, scale, "auto", cache, cache
        )
