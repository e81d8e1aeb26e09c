"""`flash_attn_with_kvcache` against a float64 reference written here: the
new keys (rotated) land in the cache, then every query attends to its
sequence's cached keys with flash-attn's masks."""

import pytest
import torch

import infini.ops
from tests.test_flash_attn_varlen_func import DTYPES, attend


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of ``x`` ``(tokens, heads, dim)`` in float64, token
    `t` at angle row ``positions[t]``."""
    x = x.double().clone()
    half = cos.shape[1]
    c = cos[positions].double()[:, None, :]
    s = sin[positions].double()[:, None, :]
    if interleaved:
        first, second = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
    else:
        first, second = slice(0, half), slice(half, 2 * half)
    a, b = x[..., first].clone(), x[..., second].clone()
    x[..., first] = a * c - b * s
    x[..., second] = b * c + a * s
    return x


def reference(
    q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
    cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
    alibi_slopes=None, softmax_scale=None, causal=False, window_size=(-1, -1),
    softcap=0.0, rotary_interleaved=True,
):  # fmt: skip
    """The expected output, log-sum-exp and caches."""
    batch, length_q, heads, _ = q.shape
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    if block_table is None:
        capacity = k_cache.shape[1]
    else:
        capacity = block_table.shape[1] * k_cache.shape[1]
    out = torch.zeros(batch, length_q, heads, v_cache.shape[-1], dtype=torch.float64)
    lse = torch.zeros(batch, heads, length_q, dtype=torch.float64)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    per_token = causal or left >= 0 or right >= 0
    for b in range(batch):
        if cache_seqlens is None:
            base = capacity
        elif isinstance(cache_seqlens, int):
            base = cache_seqlens
        else:
            base = int(cache_seqlens[b])
        entry = b if cache_batch_idx is None else int(cache_batch_idx[b])

        def slots(positions, b=b, entry=entry):
            if block_table is None:
                return torch.full_like(positions, entry), positions
            size = k_cache.shape[1]
            return block_table[b][positions // size].long(), positions % size

        if new:
            positions = base + torch.arange(new)
            keys = k[b].double()
            if rotary_cos is not None:
                keys = rotate(keys, rotary_cos, rotary_sin, positions,
                              rotary_interleaved)  # fmt: skip
            blocks, offsets = slots(positions)
            k_cache[blocks, offsets] = keys.to(k_cache.dtype)
            v_cache[blocks, offsets] = v[b]
        end = base + new
        start = 0 if cache_leftpad is None else int(cache_leftpad[b])
        positions = torch.arange(start, end)
        blocks, offsets = slots(positions)
        query = q[b].double()
        if rotary_cos is not None:
            steps = torch.arange(length_q) if per_token else torch.zeros(length_q)
            query = rotate(query, rotary_cos, rotary_sin, base + steps.long(),
                           rotary_interleaved)  # fmt: skip
        slopes = alibi_slopes
        if slopes is not None and slopes.dim() == 2:
            slopes = slopes[b]
        out[b], lse[b] = attend(
            query, k_cache[blocks, offsets], v_cache[blocks, offsets], positions,
            torch.arange(length_q) + end - length_q, scale, causal, window_size,
            softcap, slopes,
        )  # fmt: skip
    return out, lse, k_cache, v_cache


def _paged_table(batch, max_blocks, blocks):
    return torch.randperm(blocks)[: batch * max_blocks].view(batch, max_blocks).int()


# Each case: (batch, query tokens, new tokens, heads, kv heads, capacity,
# paged block size or None, cache_seqlens kind: "tensor" / "int" / None,
# extra keyword arguments as a function of (batch, heads, dtype)).
CASES = [
    pytest.param(3, 1, 1, 4, 2, 40, None, "tensor", lambda b, h, d: {
        "causal": True}, id="decode-append"),
    pytest.param(2, 3, 3, 4, 1, 24, None, "tensor", lambda b, h, d: {
        "causal": True, "rotary": (8, True)}, id="rotary-interleaved-causal"),
    pytest.param(2, 2, 2, 2, 2, 24, None, "int", lambda b, h, d: {
        "rotary": (4, False)}, id="rotary-neox-not-causal-int-seqlens"),
    pytest.param(2, 2, 2, 4, 2, 48, 8, "int", lambda b, h, d: {
        "causal": True, "alibi_slopes": torch.rand(b, h)}, id="paged-alibi-batch"),
    pytest.param(3, 2, 0, 4, 2, 80, None, "tensor", lambda b, h, d: {
        "cache_batch_idx": torch.tensor([4, 0, 2], dtype=torch.int32),
        "cache_leftpad": torch.tensor([3, 0, 10], dtype=torch.int32),
        "window_size": (5, 0), "softcap": 3.0}, id="batch-idx-leftpad-window"),
    pytest.param(2, 2, 1, 2, 2, 30, None, "tensor", lambda b, h, d: {
        "cache_leftpad": torch.tensor([7, 2], dtype=torch.int32),
        "rotary": (4, True)}, id="leftpad-rotary"),
    pytest.param(2, 4, 2, 2, 1, 16, 4, "tensor", lambda b, h, d: {
        "causal": True, "rotary": (8, False),
        "alibi_slopes": torch.rand(h)}, id="paged-q-longer-than-keys"),
    pytest.param(2, 3, 0, 4, 4, 70, None, None, lambda b, h, d: {
        "softmax_scale": 0.2}, id="whole-cache"),
]  # fmt: skip


def _inputs(batch, length_q, new, heads, kv_heads, capacity, block_size, kind,
            extra, dtype):  # fmt: skip
    head_dim = 32
    q = torch.randn(batch, length_q, heads, head_dim, dtype=dtype)
    arguments = dict(extra(batch, heads, dtype))
    if block_size is None:
        entries = batch + 3
        k_cache = torch.randn(entries, capacity, kv_heads, head_dim, dtype=dtype)
    else:
        max_blocks = capacity // block_size
        blocks = batch * max_blocks + 3
        k_cache = torch.randn(blocks, block_size, kv_heads, head_dim, dtype=dtype)
        arguments["block_table"] = _paged_table(batch, max_blocks, blocks)
    v_cache = torch.randn_like(k_cache)
    if new:
        arguments["k"] = torch.randn(batch, new, kv_heads, head_dim, dtype=dtype)
        arguments["v"] = torch.randn(batch, new, kv_heads, head_dim, dtype=dtype)
    lengths = torch.randint(0, capacity - new + 1, (batch,))
    lengths[0] = capacity - new  # a full cache
    if "cache_leftpad" in arguments:
        lengths = torch.maximum(lengths, arguments["cache_leftpad"].long())
    if kind == "tensor":
        arguments["cache_seqlens"] = lengths.int()
    elif kind == "int":
        arguments["cache_seqlens"] = int(lengths[-1])
    rotary = arguments.pop("rotary", None)
    if rotary is not None:
        half, interleaved = rotary
        # Queries past the new keys rotate past the cache's capacity.
        angles = torch.rand(capacity + length_q, half) * 6.3
        arguments["rotary_cos"] = angles.cos().to(dtype)
        arguments["rotary_sin"] = angles.sin().to(dtype)
        arguments["rotary_interleaved"] = interleaved
    return q, k_cache, v_cache, arguments


def call(q, k_cache, v_cache, out, softmax_lse=None, index=None, **arguments):
    full = dict(
        k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
        cache_batch_idx=None, cache_leftpad=None, block_table=None,
        alibi_slopes=None, softmax_scale=None, causal=False, window_size=[-1, -1],
        softcap=0.0, rotary_interleaved=True, num_splits=0,
        return_softmax_lse=softmax_lse is not None,
    )  # fmt: skip
    full.update(arguments)
    full["window_size"] = list(full["window_size"])
    infini.ops.flash_attn_with_kvcache(
        q, k_cache, v_cache, *full.values(), out, softmax_lse,
        implementation_index=index,
    )  # fmt: skip


@pytest.mark.parametrize(
    "batch, length_q, new, heads, kv_heads, capacity, block_size, kind, extra", CASES
)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES, ids=str)
def test_flash_attn_with_kvcache(
    batch, length_q, new, heads, kv_heads, capacity, block_size, kind, extra, dtype,
    rtol, atol, device, implementation_index,
):  # fmt: skip
    q, k_cache, v_cache, arguments = _inputs(
        batch, length_q, new, heads, kv_heads, capacity, block_size, kind, extra,
        dtype,
    )  # fmt: skip
    expected, expected_lse, expected_k, expected_v = reference(
        q, k_cache, v_cache, **arguments
    )
    out = torch.full((batch, length_q, heads, 32), 7.0, dtype=dtype)
    lse = torch.full((batch, heads, length_q), 7.0)

    def on(value):
        return value.to(device) if torch.is_tensor(value) else value

    k_cache, v_cache, out, lse = (on(t) for t in (k_cache, v_cache, out, lse))
    call(
        on(q), k_cache, v_cache, out, lse, implementation_index,
        **{name: on(value) for name, value in arguments.items()},
    )  # fmt: skip
    assert torch.allclose(out.cpu().double(), expected, rtol=rtol, atol=atol)
    lse = lse.cpu().double()
    assert torch.equal(lse.isinf(), expected_lse.isinf())
    finite = expected_lse.isfinite()
    assert torch.allclose(lse[finite], expected_lse[finite], rtol=1e-4, atol=1e-4)
    # Appended keys are rotated in float32 here and in float64 there.
    assert torch.allclose(k_cache.cpu().double(), expected_k.double(), rtol=rtol,
                          atol=atol)  # fmt: skip
    assert torch.equal(v_cache.cpu(), expected_v)


def test_flash_attn_with_kvcache_plain_overload(device, implementation_index):
    q = torch.randn(2, 3, 4, 16, device=device)
    k_cache = torch.randn(2, 9, 2, 16, device=device)
    v_cache = torch.randn(2, 9, 2, 16, device=device)
    out = torch.empty_like(q)
    infini.ops.flash_attn_with_kvcache(
        q, k_cache, v_cache, out, implementation_index=implementation_index
    )
    expected, *_ = reference(q.cpu(), k_cache.cpu(), v_cache.cpu())
    assert torch.allclose(out.cpu().double(), expected, rtol=1e-4, atol=1e-4)


def test_flash_attn_with_kvcache_decoding_loop_reuses_the_operator(device):
    """An integer `cache_seqlens` that grows every step (a per-call value)."""
    q = torch.randn(1, 1, 4, 16)
    k_cache = torch.zeros(1, 8, 2, 16)
    v_cache = torch.zeros(1, 8, 2, 16)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    angles = torch.rand(8, 4)
    rotary = dict(rotary_cos=angles.cos(), rotary_sin=angles.sin())
    for step in range(5):
        k, v = torch.randn(1, 1, 2, 16), torch.randn(1, 1, 2, 16)
        out = torch.empty_like(q)
        call(q, k_cache, v_cache, out, k=k, v=v, cache_seqlens=step, causal=True,
             **rotary)  # fmt: skip
        expected, _, expected_k, expected_v = reference(
            q, expected_k, expected_v, k=k, v=v, cache_seqlens=step, causal=True,
            **rotary,
        )  # fmt: skip
        assert torch.allclose(out.double(), expected, rtol=1e-4, atol=1e-4)
        assert torch.allclose(k_cache, expected_k, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="`cache_seqlens` is 8, out of the range "
                       r"\[0, 7\]"):  # fmt: skip
        call(q, k_cache, v_cache, out, k=k, v=v, cache_seqlens=8, **rotary)


def _small():
    q = torch.randn(2, 1, 4, 16)
    cache = torch.randn(3, 8, 2, 16)
    new = torch.randn(2, 1, 2, 16)
    return q, cache, cache.clone(), new, torch.empty(2, 1, 4, 16)


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(q=torch.randn(2, 1, 4, 16, dtype=torch.float64)), "`q` has dtype"),
        (dict(), "`cache_seqlens` is required with `k` and `v`"),
        (dict(v=None, k=torch.randn(2, 1, 2, 16)), "`k` and `v` must be given"),
        (dict(k_cache=torch.randn(3, 8, 3, 16), v_cache=torch.randn(3, 8, 3, 16)),
         "not a multiple of the 3 heads"),
        (dict(out=torch.empty(2, 1, 4, 8)), "`out` must have shape"),
        (dict(rotary_cos=torch.ones(8, 4), cache_seqlens=1),
         "`rotary_cos` and `rotary_sin` must"),
        (dict(rotary_cos=torch.ones(8, 9), rotary_sin=torch.ones(8, 9),
              cache_seqlens=1), "`rotary_cos` .* must have between 1 and"),
        (dict(block_table=torch.zeros(2, 1, dtype=torch.int32), cache_seqlens=0,
              cache_batch_idx=torch.zeros(2, dtype=torch.int32)),
         "`cache_batch_idx` selects rows of a dense cache"),
        (dict(cache_seqlens=torch.zeros(2, dtype=torch.int64)),
         "`cache_seqlens` has dtype int64"),
        (dict(cache_seqlens=0, return_softmax_lse=True),
         "`return_softmax_lse` is set but `softmax_lse` is None"),
        (dict(cache_seqlens=0, num_splits=-1), "`num_splits` must be 0 or more"),
        (dict(cache_seqlens=0, alibi_slopes=torch.rand(2)), "`alibi_slopes` must"),
        (dict(cache_seqlens=0, window_size=[1, 2, 3]), "`window_size` must be"),
    ],
)  # fmt: skip
def test_flash_attn_with_kvcache_rejects(changes, match, device):
    q, k_cache, v_cache, new, out = _small()
    arguments = dict(q=q, k_cache=k_cache, v_cache=v_cache, out=out, k=new, v=new)
    arguments.update(changes)
    if arguments["k"] is None:
        arguments["v"] = None
    with pytest.raises(ValueError, match=f"`flash_attn_with_kvcache`: .*{match}"):
        call(**arguments)


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(cache_seqlens=torch.tensor([3, 8], dtype=torch.int32)),
         r"`cache_seqlens` of sequence 1 is 8, out of the range \[0, 7\]"),
        (dict(cache_seqlens=torch.tensor([-1, 2], dtype=torch.int32)),
         r"`cache_seqlens` of sequence 0 is -1"),
        (dict(cache_batch_idx=torch.tensor([0, 3], dtype=torch.int32)),
         r"`cache_batch_idx\[1\]` is 3, out of the range \[0, 3\)"),
        (dict(cache_leftpad=torch.tensor([4, 0], dtype=torch.int32)),
         r"`cache_leftpad\[0\]` is 4, out of the range \[0, 3\]"),
        (dict(rotary_cos=torch.ones(4, 4), rotary_sin=torch.ones(4, 4)),
         r"sequence 1 needs rotary positions up to 5 but `rotary_cos` has 4 rows"),
    ],
)  # fmt: skip
def test_flash_attn_with_kvcache_rejects_bad_indices_without_writing(
    changes, match, device
):
    q, k_cache, v_cache, new, out = _small()
    out.fill_(7.0)
    arguments = dict(cache_seqlens=torch.tensor([3, 5], dtype=torch.int32))
    arguments.update(changes)
    before = k_cache.clone()
    with pytest.raises(ValueError, match=f"`flash_attn_with_kvcache`: {match}"):
        call(q, k_cache, v_cache, out, k=new, v=new, **arguments)
    assert bool((out == 7.0).all())
    assert torch.equal(k_cache, before)


def test_flash_attn_with_kvcache_rejects_bad_block(device):
    q, _, _, new, out = _small()
    cache = torch.randn(4, 4, 2, 16)
    table = torch.tensor([[0, 1], [2, 7]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"`block_table\[1, 1\]` is 7, out of the "
                       r"range \[0, 4\)"):  # fmt: skip
        call(q, cache, cache.clone(), out, k=new, v=new, block_table=table,
             cache_seqlens=torch.tensor([2, 4], dtype=torch.int32))  # fmt: skip
