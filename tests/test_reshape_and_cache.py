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

# tokens, heads, head size, blocks, block size, x, negative slots, smoke
CASES = (
    (16, 8, 128, 8, 16, 8, False, True),
    (1, 8, 128, 4, 16, 8, False, False),
    (16, 32, 64, 4, 16, 4, False, False),
    (7, 3, 24, 4, 5, 4, True, True),
    (0, 2, 16, 2, 4, 8, False, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, marks=marks)


def _reshape_and_cache(
    key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, mode, index
):
    result = infini.ops.reshape_and_cache(
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        k_scale,
        v_scale,
        mode,
        implementation_index=index,
    )
    assert result is None
    return key_cache, value_cache


def _to_cache(tensor, scale, mode):
    if mode == "auto":
        return tensor
    return (tensor.float() / scale.float()).to(FP8_DTYPES[mode]).view(torch.uint8)


def _torch_reshape_and_cache(
    key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, mode, index
):
    valid = slot_mapping >= 0
    slots = slot_mapping[valid].long()
    block_size, x = key_cache.shape[3], key_cache.shape[4]
    blocks, offsets = slots // block_size, slots % block_size
    keys = _to_cache(key[valid], k_scale, mode)
    values = _to_cache(value[valid], v_scale, mode)
    heads, head_size = key.shape[1:]
    key_cache[blocks, :, :, offsets, :] = keys.reshape(-1, heads, head_size // x, x)
    value_cache[blocks, :, :, offsets] = values
    return key_cache, value_cache


def _inputs(tokens, heads, head_size, blocks, block_size, x, negative, dtype, mode):
    key = torch.randn(tokens, heads, head_size, dtype=dtype)
    value = torch.randn(tokens, heads, head_size, dtype=dtype)
    slot_mapping = torch.randperm(blocks * block_size)[:tokens]
    if negative:
        slot_mapping[::3] = -1
    cache_dtype = dtype if mode == "auto" else torch.uint8
    key_cache = torch.randint(
        0, 100, (blocks, heads, head_size // x, block_size, x)
    ).to(cache_dtype)
    value_cache = torch.randint(0, 100, (blocks, heads, head_size, block_size)).to(
        cache_dtype
    )
    return key, value, key_cache, value_cache, slot_mapping


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "tokens, heads, head_size, blocks, block_size, x, negative, dtype",
    list(_params()),
)
def test_reshape_and_cache(
    tokens,
    heads,
    head_size,
    blocks,
    block_size,
    x,
    negative,
    dtype,
    device,
    implementation_index,
):
    key, value, key_cache, value_cache, slot_mapping = _inputs(
        tokens, heads, head_size, blocks, block_size, x, negative, dtype, "auto"
    )
    scale = torch.ones(1)
    return Payload(
        _reshape_and_cache,
        _torch_reshape_and_cache,
        (
            key.to(device),
            value.to(device),
            key_cache.to(device),
            value_cache.to(device),
            slot_mapping.to(device),
            scale.to(device),
            scale.to(device),
            "auto",
            implementation_index,
        ),
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize(
    "mode, dtype, slot_dtype",
    [
        ("fp8", torch.float32, torch.int64),
        ("fp8_e4m3", torch.bfloat16, torch.int64),
        ("fp8_e5m2", torch.float16, torch.int32),
    ],
)
def test_reshape_and_cache_fp8(mode, dtype, slot_dtype, device, implementation_index):
    key, value, key_cache, value_cache, slot_mapping = _inputs(
        9, 4, 32, 3, 8, 16, True, dtype, mode
    )
    # Values across the fp8 range, including subnormals.
    exponents = torch.randint(-12, 8, key.shape)
    key = (key.float() * 2.0**exponents).to(dtype)
    slot_mapping = slot_mapping.to(slot_dtype)
    k_scale, v_scale = torch.tensor([0.5]), torch.tensor([3.0])
    args = [
        t.to(device) if isinstance(t, torch.Tensor) else t
        for t in (
            key,
            value,
            key_cache,
            value_cache,
            slot_mapping,
            k_scale,
            v_scale,
            mode,
        )
    ]
    expected = _torch_reshape_and_cache(
        *[a.clone() if isinstance(a, torch.Tensor) else a for a in args], None
    )
    output = _reshape_and_cache(*args, implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


@pytest.mark.parametrize(
    "mode, values, expected",
    [
        (
            "fp8_e4m3",
            [1000.0, -1000.0, float("inf"), float("-inf"), float("nan"), 448.0, 464.0],
            [0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0x7E, 0x7E],
        ),
        (
            "fp8_e5m2",
            [1e6, -1e6, float("inf"), float("-inf"), float("nan"), 57344.0, 61440.0],
            [0x7B, 0xFB, 0x7B, 0xFB, 0x7F, 0x7B, 0x7B],
        ),
    ],
)
def test_reshape_and_cache_fp8_saturates(
    mode, values, expected, device, implementation_index
):
    key = torch.tensor(values, device=device).view(len(values), 1, 1)
    key_cache = torch.zeros(len(values), 1, 1, 1, 1, dtype=torch.uint8, device=device)
    value_cache = torch.zeros(len(values), 1, 1, 1, dtype=torch.uint8, device=device)
    slot_mapping = torch.arange(len(values), device=device)
    scale = torch.ones(1, device=device)
    _reshape_and_cache(
        key,
        key.clone(),
        key_cache,
        value_cache,
        slot_mapping,
        scale,
        scale,
        mode,
        implementation_index,
    )
    assert key_cache.flatten().tolist() == expected
    assert value_cache.flatten().tolist() == expected


def test_reshape_and_cache_strided(device, implementation_index):
    """`key` and `value` are slices of a fused QKV buffer and the caches are
    views with gaps."""
    tokens, heads, head_size, blocks, block_size, x = 6, 2, 16, 3, 4, 4
    qkv = torch.randn(tokens, 3, heads, head_size, device=device)
    key, value = qkv[:, 1], qkv[:, 2]
    key_cache = torch.zeros(blocks, heads, head_size // x, block_size * 2, x)[
        :, :, :, ::2
    ]
    value_cache = torch.zeros(blocks, heads + 1, head_size, block_size)[:, 1:]
    slot_mapping = torch.randperm(blocks * block_size, device=device)[:tokens]
    args = (key, value, key_cache, value_cache, slot_mapping)
    scale = torch.ones(1, device=device)
    expected = _torch_reshape_and_cache(
        *[a.clone() for a in args], scale, scale, "auto", None
    )
    output = _reshape_and_cache(*args, scale, scale, "auto", implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_reshape_and_cache_large_runs_in_parallel(device, implementation_index):
    key, value, key_cache, value_cache, slot_mapping = _inputs(
        256, 8, 128, 32, 16, 8, True, torch.bfloat16, "auto"
    )
    args = [t.to(device) for t in (key, value, key_cache, value_cache, slot_mapping)]
    scale = torch.ones(1, device=device)
    expected = _torch_reshape_and_cache(
        *[a.clone() for a in args], scale, scale, "auto", None
    )
    output = _reshape_and_cache(*args, scale, scale, "auto", implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_reshape_and_cache_rejects_slots_past_the_cache(device):
    key, value, key_cache, value_cache, slot_mapping = _inputs(
        5, 2, 16, 2, 4, 8, False, torch.float32, "auto"
    )
    slot_mapping[3] = 8
    before = key_cache.clone(), value_cache.clone()
    scale = torch.ones(1)
    with pytest.raises(
        ValueError,
        match=r"`reshape_and_cache`: `slot_mapping\[3\]` is 8, but the cache has 8 "
        r"slots",
    ):
        infini.ops.reshape_and_cache(
            key, value, key_cache, value_cache, slot_mapping, scale, scale, "auto"
        )
    assert torch.equal(key_cache, before[0]) and torch.equal(value_cache, before[1])


@pytest.mark.parametrize(
    "key_shape, key_cache_shape, value_cache_shape, slots, match",
    [
        ((4, 2, 16), (2, 2, 2, 4, 8), (2, 2, 16, 4), 5, "`slot_mapping` must have"),
        ((4, 2, 16), (2, 2, 3, 4, 5), (2, 2, 16, 4), 4, "the last dimension of"),
        ((4, 2, 16), (2, 3, 2, 4, 8), (2, 2, 16, 4), 4, "`key_cache` must have"),
        ((4, 2, 16), (2, 2, 2, 4, 8), (2, 2, 16, 5), 4, "`value_cache` must have"),
        ((4, 32), (2, 2, 2, 4, 8), (2, 2, 16, 4), 4, "`key` must have 3"),
        ((4, 2, 16), (2, 2, 2, 4), (2, 2, 16, 4), 4, "`key_cache` must have 5"),
    ],
)
def test_reshape_and_cache_rejects_bad_shapes(
    key_shape, key_cache_shape, value_cache_shape, slots, match, device
):
    key = torch.randn(key_shape, device=device)
    key_cache = torch.zeros(key_cache_shape, device=device)
    value_cache = torch.zeros(value_cache_shape, device=device)
    slot_mapping = torch.arange(slots, device=device)
    scale = torch.ones(1, device=device)
    with pytest.raises(ValueError, match=f"`reshape_and_cache`: {match}"):
        infini.ops.reshape_and_cache(
            key, key.clone(), key_cache, value_cache, slot_mapping, scale, scale, "auto"
        )


def test_reshape_and_cache_rejects_bad_modes_and_dtypes(device):
    key = torch.randn(4, 2, 16, device=device)
    key_cache = torch.zeros(2, 2, 2, 4, 8, device=device)
    value_cache = torch.zeros(2, 2, 16, 4, device=device)
    slots = torch.arange(4, device=device)
    scale = torch.ones(1, device=device)

    def call(*args):
        infini.ops.reshape_and_cache(*args)

    with pytest.raises(ValueError, match="`reshape_and_cache`: `kv_cache_dtype` must"):
        call(key, key, key_cache, value_cache, slots, scale, scale, "int8")
    with pytest.raises(ValueError, match="`reshape_and_cache`: `key_cache` has dtype"):
        call(key, key, key_cache, value_cache, slots, scale, scale, "fp8")
    with pytest.raises(ValueError, match="`reshape_and_cache`: `value_cache` has"):
        call(key, key, key_cache, value_cache.half(), slots, scale, scale, "auto")
    with pytest.raises(ValueError, match="`reshape_and_cache`: `slot_mapping` has"):
        call(key, key, key_cache, value_cache, slots.float(), scale, scale, "auto")
    byte_caches = key_cache.to(torch.uint8), value_cache.to(torch.uint8)
    with pytest.raises(ValueError, match="`reshape_and_cache`: `k_scale` must be"):
        call(key, key, *byte_caches, slots, torch.ones(2), scale, "fp8")
    with pytest.raises(ValueError, match="`reshape_and_cache`: `v_scale` must be"):
        call(key, key, *byte_caches, slots, scale, scale.double(), "fp8_e5m2")


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_and_cache_runs_of_three(dtype, device, implementation_index):
    """`x` (the run length of the key cache's last dimension) need not be a
    power of two nor a 16-byte run."""
    key, value, key_cache, value_cache, slot_mapping = _inputs(
        6, 2, 24, 3, 4, 3, True, dtype, "auto"
    )
    args = [t.to(device) for t in (key, value, key_cache, value_cache, slot_mapping)]
    scale = torch.ones(1, device=device)
    expected = _torch_reshape_and_cache(
        *[a.clone() for a in args], scale, scale, "auto", None
    )
    output = _reshape_and_cache(*args, scale, scale, "auto", implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_reshape_and_cache_sources_inside_the_caches(device, implementation_index):
    """`key` is a view of the key cache that the write overwrites: the caches
    get the values it held before the call."""
    blocks, heads, head_size, block_size = 3, 2, 8, 4
    shape = (blocks, heads, 1, block_size, head_size)
    key_cache = torch.randn(shape, device=device)
    value_cache = torch.randn(blocks, heads, head_size, block_size, device=device)
    # With `x` the whole head, token `t` of the view is offset `t` of block 1.
    key = key_cache[1, :, 0].transpose(0, 1)
    value = torch.randn(block_size, heads, head_size, device=device)
    slot_mapping = torch.tensor([5, 4, 11, 2], device=device)
    scale = torch.ones(1, device=device)
    expected = _torch_reshape_and_cache(
        key.clone(), value, key_cache.clone(), value_cache.clone(), slot_mapping,
        scale, scale, "auto", None,
    )  # fmt: skip
    output = _reshape_and_cache(
        key, value, key_cache, value_cache, slot_mapping, scale, scale, "auto",
        implementation_index,
    )  # fmt: skip
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])
