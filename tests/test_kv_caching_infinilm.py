import pytest
import torch

import infini.ops
from tests.utils import Payload

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# batch, kv heads, new tokens, head size, value head size, cache length, smoke
CASES = (
    (2, 8, 16, 128, 128, 64, True),
    (4, 8, 1, 128, 128, 32, False),
    (1, 32, 16, 64, 64, 40, False),
    (3, 3, 5, 24, 40, 11, True),
    (2, 2, 0, 16, 16, 4, False),
)


def _params():
    for *case, smoke in CASES:
        for dtype in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, marks=marks)


def _kv_caching_infinilm(k, v, past_kv_lengths, k_cache, v_cache, index):
    result = infini.ops.kv_caching_infinilm(
        k, v, past_kv_lengths, k_cache, v_cache, implementation_index=index
    )
    assert result is None
    return k_cache, v_cache


def _torch_kv_caching_infinilm(k, v, past_kv_lengths, k_cache, v_cache, index):
    seq = k.shape[2]
    for b, past in enumerate(past_kv_lengths.tolist()):
        k_cache[b, :, past : past + seq] = k[b]
        v_cache[b, :, past : past + seq] = v[b]
    return k_cache, v_cache


def _inputs(batch, heads, seq, head_size, head_size_v, length, dtype):
    k = torch.randn(batch, heads, seq, head_size, dtype=dtype)
    v = torch.randn(batch, heads, seq, head_size_v, dtype=dtype)
    past_kv_lengths = torch.randint(0, length - seq + 1, (batch,))
    k_cache = torch.randn(batch, heads, length, head_size).to(dtype)
    v_cache = torch.randn(batch, heads, length, head_size_v).to(dtype)
    return k, v, past_kv_lengths, k_cache, v_cache


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "batch, heads, seq, head_size, head_size_v, length, dtype", list(_params())
)
def test_kv_caching_infinilm(
    batch,
    heads,
    seq,
    head_size,
    head_size_v,
    length,
    dtype,
    device,
    implementation_index,
):
    tensors = _inputs(batch, heads, seq, head_size, head_size_v, length, dtype)
    return Payload(
        _kv_caching_infinilm,
        _torch_kv_caching_infinilm,
        (*[t.to(device) for t in tensors], implementation_index),
        rtol=0,
        atol=0,
    )


def test_kv_caching_infinilm_strided(device, implementation_index):
    """`k`/`v` come from a (batch, seq, heads, head) projection through a
    transposed view; the caches are column slices; lengths are int32."""
    batch, heads, seq, head_size, length = 2, 3, 4, 16, 9
    projection = torch.randn(batch, seq, heads, 2 * head_size, device=device)
    k = projection[..., :head_size].transpose(1, 2)
    v = projection[..., head_size:].transpose(1, 2)
    k_cache = torch.zeros(batch, heads, length, head_size * 2, device=device)
    k_cache = k_cache[..., head_size:]
    v_cache = torch.zeros(batch, length, heads, head_size, device=device)
    v_cache = v_cache.transpose(1, 2)
    past_kv_lengths = torch.tensor([5, 0], dtype=torch.int32, device=device)
    args = (k, v, past_kv_lengths, k_cache, v_cache)
    expected = _torch_kv_caching_infinilm(*[a.clone() for a in args], None)
    output = _kv_caching_infinilm(*args, implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


def test_kv_caching_infinilm_large_runs_in_parallel(device, implementation_index):
    tensors = _inputs(2, 8, 128, 128, 128, 256, torch.float32)
    args = [t.to(device) for t in tensors]
    expected = _torch_kv_caching_infinilm(*[a.clone() for a in args], None)
    output = _kv_caching_infinilm(*args, implementation_index)
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])


@pytest.mark.parametrize("bad", (-1, 8))
def test_kv_caching_infinilm_rejects_lengths_without_room(bad, device):
    k, v, past_kv_lengths, k_cache, v_cache = _inputs(
        3, 2, 3, 16, 16, 10, torch.float32
    )
    past_kv_lengths[1] = bad
    before = k_cache.clone(), v_cache.clone()
    with pytest.raises(
        ValueError,
        match=rf"`kv_caching_infinilm`: `past_kv_lengths\[1\]` is {bad}, but with 3 "
        r"new tokens and caches of length 10 it must lie in \[0, 7\]",
    ):
        infini.ops.kv_caching_infinilm(k, v, past_kv_lengths, k_cache, v_cache)
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


@pytest.mark.parametrize(
    "k_shape, v_shape, lengths, cache_shape, match",
    [
        ((2, 2, 3, 16), (2, 2, 3, 16), 3, (2, 2, 8, 16), "`past_kv_lengths` must"),
        ((2, 2, 3, 16), (2, 2, 4, 16), 2, (2, 2, 8, 16), "`v` of shape"),
        ((2, 2, 3, 16), (2, 2, 3, 16), 2, (3, 2, 8, 16), "`k_cache` must have shape"),
        ((2, 2, 3, 16), (2, 2, 3, 8), 2, (2, 2, 8, 16), "`v_cache` must have shape"),
        ((2, 2, 9, 16), (2, 2, 9, 16), 2, (2, 2, 8, 16), "`k` has 9 new tokens"),
        ((2, 3, 16), (2, 3, 16), 2, (2, 2, 8, 16), "`k` must have 4"),
    ],
)
def test_kv_caching_infinilm_rejects_bad_shapes(
    k_shape, v_shape, lengths, cache_shape, match, device
):
    k = torch.randn(k_shape, device=device)
    v = torch.randn(v_shape, device=device)
    past_kv_lengths = torch.zeros(lengths, dtype=torch.int64, device=device)
    cache = torch.zeros(cache_shape, device=device)
    with pytest.raises(ValueError, match=f"`kv_caching_infinilm`: {match}"):
        infini.ops.kv_caching_infinilm(k, v, past_kv_lengths, cache, cache.clone())


def test_kv_caching_infinilm_rejects_bad_dtypes(device):
    k = torch.randn(2, 2, 3, 16, device=device)
    cache = torch.zeros(2, 2, 8, 16, device=device)
    lengths = torch.zeros(2, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="`kv_caching_infinilm`: `v_cache` has"):
        infini.ops.kv_caching_infinilm(k, k, lengths, cache, cache.bfloat16())
    with pytest.raises(ValueError, match="`kv_caching_infinilm`: `past_kv_lengths`"):
        infini.ops.kv_caching_infinilm(k, k, lengths.float(), cache, cache)


@pytest.mark.parametrize("source_start, lengths", [(4, (0, 2)), (0, (2, 5))])
def test_kv_caching_infinilm_sources_inside_the_caches(
    source_start, lengths, device, implementation_index
):
    """`k` and `v` are views of the caches' own positions (a window moved
    back, or forward from the start: then `k` has the address and strides
    of `k_cache`): every row gets the values the sources held before the
    call, as if they had been copied first."""
    batch, heads, seq, head_size, length = 2, 3, 6, 16, 12
    k_cache = torch.randn(batch, heads, length, head_size, device=device)
    v_cache = torch.randn(batch, heads, length, head_size, device=device)
    window = slice(source_start, source_start + seq)
    k, v = k_cache[:, :, window], v_cache[:, :, window]
    past_kv_lengths = torch.tensor(lengths, device=device)
    expected = _torch_kv_caching_infinilm(
        k.clone(), v.clone(), past_kv_lengths, k_cache.clone(), v_cache.clone(), None
    )
    output = _kv_caching_infinilm(
        k, v, past_kv_lengths, k_cache, v_cache, implementation_index
    )
    assert torch.equal(output[0], expected[0])
    assert torch.equal(output[1], expected[1])
