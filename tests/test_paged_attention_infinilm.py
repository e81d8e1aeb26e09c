import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided

# Float32 results differ from the float64 reference by the float32 rounding
# of the scores and the polynomial `exp` (a few ulps); 16-bit results round
# once from float32, and an ulp flip is 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)


def reference(
    q, k_cache, v_cache, block_tables, seq_lens, cum, slopes, scale, window=0
):
    """Gathers each sequence's pages and computes
    ``softmax(q K^T * scale + alibi, causal) V`` in float64; a sequence's
    queries are its last tokens (decode: `cum` is None, one token each).
    A `window` W > 0 also masks keys W or more positions before the query
    (transformers' sliding mask: visible when ``q_idx - kv_idx < W``)."""
    tokens, heads, head_size = q.shape
    kv_heads, block_size = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros(tokens, heads, head_size, dtype=torch.float64)
    for s in range(block_tables.shape[0]):
        n = int(seq_lens[s])
        start, stop = (int(cum[s]), int(cum[s + 1])) if cum is not None else (s, s + 1)
        if n == 0 or stop == start:
            continue
        positions = torch.arange(n)
        blocks = block_tables[s][positions // block_size].long()
        offsets = positions % block_size
        keys = k_cache[blocks, :, offsets, :].double()  # (n, kv_heads, d)
        values = v_cache[blocks, :, offsets, :].double()
        keys = keys.repeat_interleave(heads // kv_heads, 1)
        values = values.repeat_interleave(heads // kv_heads, 1)
        queries = q[start:stop].double()
        scores = torch.einsum("mhd,nhd->hmn", queries, keys) * scale
        query_positions = n - (stop - start) + torch.arange(stop - start)
        distance = positions[None, None, :] - query_positions[None, :, None]
        if slopes is not None:
            scores = scores + slopes.double()[:, None, None] * distance
        scores = scores.masked_fill(distance > 0, float("-inf"))
        if window > 0:
            scores = scores.masked_fill(distance <= -window, float("-inf"))
        weights = torch.softmax(scores, -1)
        out[start:stop] = torch.einsum("hmn,nhd->mhd", weights, values)
    return out


def make_cache(blocks, kv_heads, block_size, head_size, dtype, layout="NHD"):
    """A cache of shape (blocks, kv_heads, block_size, head_size); "NHD"
    stores it as (blocks, block_size, kv_heads, head_size) and permutes."""
    if layout == "NHD":
        storage = torch.randn(blocks, block_size, kv_heads, head_size, dtype=dtype)
        return storage.permute(0, 2, 1, 3)
    return torch.randn(blocks, kv_heads, block_size, head_size, dtype=dtype)


def make_tables(seq_lens, block_size, max_blocks, blocks, dtype=torch.int32):
    """Block tables using distinct random blocks; unused entries hold -1,
    which must never be read."""
    table = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int64)
    free = torch.randperm(blocks)
    used = 0
    for s, n in enumerate(seq_lens):
        count = -(-n // block_size)
        table[s, :count] = free[used : used + count]
        used += count
    return table.to(dtype)


# seq_lens, heads, kv_heads, head_size, block_size, alibi, cache layout, smoke
CASES = (
    ((1, 13, 33), 32, 8, 128, 16, False, "HND", True),
    ((1, 13, 33), 8, 8, 64, 8, True, "NHD", False),
    ((100, 0, 17), 4, 1, 64, 16, False, "HND", False),
)


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _paged_attention(q, k_cache, v_cache, tables, lengths, slopes, scale, out, index):
    infini.ops.paged_attention_infinilm(
        q, k_cache, v_cache, tables, lengths, slopes, scale, out,
        implementation_index=index,
    )  # fmt: skip
    return out


def _torch_paged_attention(q, k_cache, v_cache, tables, lengths, slopes, scale, out,
                           index):  # fmt: skip
    return reference(q, k_cache, v_cache, tables, lengths, None, slopes, scale).to(
        out.dtype
    )


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "seq_lens, heads, kv_heads, head_size, block_size, alibi, layout, dtype, rtol, "
    "atol",
    list(_params()),
)
def test_paged_attention_infinilm(
    seq_lens,
    heads,
    kv_heads,
    head_size,
    block_size,
    alibi,
    layout,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    seqs = len(seq_lens)
    max_blocks = -(-max(seq_lens) // block_size) + 1
    blocks = seqs * max_blocks + 3
    k_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype, layout)
    v_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype, layout)
    tables = make_tables(seq_lens, block_size, max_blocks, blocks)
    lengths = torch.tensor(seq_lens, dtype=torch.int32)
    # `q` strided: every other token row of a larger tensor.
    q = torch.randn(2 * seqs, heads, head_size, dtype=dtype)[::2]
    out = empty_strided((seqs, heads, head_size), None, dtype=dtype)
    slopes = torch.rand(heads) if alibi else None
    scale = head_size**-0.5
    args = (q, k_cache, v_cache, tables, lengths, slopes, scale, out)
    return Payload(
        _paged_attention,
        _torch_paged_attention,
        (*(a.to(device) if torch.is_tensor(a) else a for a in args),)
        + (implementation_index,),
        rtol=rtol,
        atol=atol,
    )


def test_paged_attention_infinilm_int64_indices_and_strided_out(
    device, implementation_index
):
    seq_lens = (5, 40)
    k_cache = make_cache(8, 2, 16, 64, torch.float32).to(device)
    v_cache = make_cache(8, 2, 16, 64, torch.float32).to(device)
    tables = make_tables(seq_lens, 16, 4, 8, torch.int64).to(device)
    lengths = torch.tensor(seq_lens, dtype=torch.int64, device=device)
    q = torch.randn(2, 4, 64, device=device)
    out = torch.empty(4, 2, 64, device=device).transpose(0, 1)
    _paged_attention(q, k_cache, v_cache, tables, lengths, None, 0.1, out,
                     implementation_index)  # fmt: skip
    expected = reference(q, k_cache, v_cache, tables, lengths, None, None, 0.1)
    assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_paged_attention_infinilm_zero_sequences(device, implementation_index):
    k_cache = torch.randn(2, 2, 16, 64, device=device)
    q = torch.empty(0, 4, 64, device=device)
    out = torch.empty(0, 4, 64, device=device)
    tables = torch.empty(0, 3, dtype=torch.int32, device=device)
    lengths = torch.empty(0, dtype=torch.int32, device=device)
    _paged_attention(q, k_cache, k_cache, tables, lengths, None, 0.1, out,
                     implementation_index)  # fmt: skip


@pytest.mark.parametrize(
    "seq_lens, table_edit, match",
    [
        ((5, 40), (1, 2, 8), r"`block_tables\[1, 2\]` is 8, out of the range \[0, 8\)"),
        ((5, 40), (0, 0, -1), r"`block_tables\[0, 0\]` is -1"),
        ((5, 65), None, r"`seq_lens\[1\]` is 65, out of the range \[0, 64\]"),
        ((-1, 3), None, r"`seq_lens\[0\]` is -1"),
    ],
)
def test_paged_attention_infinilm_rejects_bad_indices_without_writing(
    seq_lens, table_edit, match, device
):
    k_cache = torch.randn(8, 2, 16, 64, device=device)
    tables = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=torch.int32)
    if table_edit is not None:
        row, column, value = table_edit
        tables[row, column] = value
    lengths = torch.tensor(seq_lens, dtype=torch.int32)
    q = torch.randn(2, 4, 64, device=device)
    out = torch.full((2, 4, 64), 7.0, device=device)
    with pytest.raises(ValueError, match=f"`paged_attention_infinilm`: {match}"):
        infini.ops.paged_attention_infinilm(
            q, k_cache, k_cache, tables.to(device), lengths.to(device), None, 0.1, out
        )
    assert bool((out == 7.0).all())


def test_paged_attention_infinilm_unused_table_entries_are_not_read(device):
    k_cache = torch.randn(4, 1, 16, 8, device=device)
    tables = torch.tensor([[2, -5, 99]], dtype=torch.int32, device=device)
    lengths = torch.tensor([16], dtype=torch.int32, device=device)
    q = torch.randn(1, 2, 8, device=device)
    out = torch.empty_like(q)
    infini.ops.paged_attention_infinilm(q, k_cache, k_cache, tables, lengths, None,
                                        1.0, out)  # fmt: skip
    expected = reference(q, k_cache, k_cache, tables, lengths, None, None, 1.0)
    assert torch.allclose(out.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "q_shape, cache_shape, table_shape, lengths_shape, out_shape, match",
    [
        ((2, 4, 64), (8, 3, 16, 64), (2, 4), (2,), (2, 4, 64), "the 3 kv heads"),
        ((2, 4, 64), (8, 2, 16, 32), (2, 4), (2,), (2, 4, 64), "`k_cache` must be"),
        (
            (2, 4, 64),
            (8, 2, 16, 64),
            (3, 4),
            (3,),
            (2, 4, 64),
            "`q` must have one token",
        ),
        ((2, 4, 64), (8, 2, 16, 64), (2, 4), (3,), (2, 4, 64), "`seq_lens` must"),
        ((2, 4, 64), (8, 2, 16, 64), (2, 4), (2,), (2, 4, 65), "`out` must have"),
        ((2, 4, 64), (8, 2, 16, 64), (2,), (2,), (2, 4, 64), "`block_tables` must"),
    ],
)
def test_paged_attention_infinilm_rejects_bad_shapes(
    q_shape, cache_shape, table_shape, lengths_shape, out_shape, match, device
):
    q = torch.randn(q_shape, device=device)
    cache = torch.randn(cache_shape, device=device)
    tables = torch.zeros(table_shape, dtype=torch.int32, device=device)
    lengths = torch.ones(lengths_shape, dtype=torch.int32, device=device)
    out = torch.empty(out_shape, device=device)
    with pytest.raises(ValueError, match=f"`paged_attention_infinilm`: {match}"):
        infini.ops.paged_attention_infinilm(q, cache, cache, tables, lengths, None,
                                            0.1, out)  # fmt: skip


def test_paged_attention_infinilm_rejects_bad_dtypes(device):
    q = torch.randn(2, 4, 64, device=device)
    cache = torch.randn(8, 2, 16, 64, device=device)
    tables = torch.zeros(2, 4, dtype=torch.int32, device=device)
    lengths = torch.ones(2, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`k_cache` has dtype float16"):
        infini.ops.paged_attention_infinilm(
            q, cache.half(), cache, tables, lengths, None, 0.1, torch.empty_like(q)
        )
    with pytest.raises(ValueError, match="`block_tables` has dtype float32"):
        infini.ops.paged_attention_infinilm(
            q, cache, cache, tables.float(), lengths, None, 0.1, torch.empty_like(q)
        )
    with pytest.raises(ValueError, match="`alibi_slopes` must have shape \\(4,\\)"):
        infini.ops.paged_attention_infinilm(
            q, cache, cache, tables, lengths, torch.ones(2, device=device), 0.1,
            torch.empty_like(q),
        )  # fmt: skip


# -- the sliding `window` (our extension, docs/behaviour.md, "Sliding-window
# attention"): a query at position `p` attends keys ``p - window < j <= p``,
# as transformers' Gemma-3 mask (``q_idx - kv_idx < sliding_window``) and
# llama.cpp's do. The prefill tests reuse these helpers.


def window_inputs(query_lens, seq_lens, heads, kv_heads, head_size, block_size,
                  dtype, index_dtype=torch.int32):  # fmt: skip
    """Shuffled paged caches of `seq_lens` tokens and the queries: ``(q,
    k_cache, v_cache, tables, lengths, cum_seq_lens_q)``."""
    seqs, tokens = len(seq_lens), sum(query_lens)
    max_blocks = -(-max(seq_lens) // block_size) + 1
    blocks = seqs * max_blocks + 3
    k_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype)
    v_cache = make_cache(blocks, kv_heads, block_size, head_size, dtype, "HND")
    tables = make_tables(seq_lens, block_size, max_blocks, blocks, index_dtype)
    lengths = torch.tensor(seq_lens, dtype=index_dtype)
    cum = torch.tensor(
        [0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=index_dtype
    )
    q = torch.randn(tokens, heads, head_size, dtype=dtype)
    return q, k_cache, v_cache, tables, lengths, cum


def _decode_window(inputs, slopes, scale, window, device, index):
    q, k_cache, v_cache, tables, lengths, _ = (x.to(device) for x in inputs)
    out = torch.empty_like(q)
    infini.ops.paged_attention_infinilm(
        q, k_cache, v_cache, tables, lengths, slopes, scale, out,
        window=window, implementation_index=index,
    )  # fmt: skip
    return out.cpu()


def _decode_expected(inputs, slopes, scale, window):
    q, k_cache, v_cache, tables, lengths, _ = inputs
    return reference(q, k_cache, v_cache, tables, lengths, None, slopes, scale, window)


# Lengths against windows smaller than some and larger than others (1: only
# the token itself; a length; one more than it; beyond every length).
DECODE_WINDOWS = (1, 5, 13, 14, 64, 600)
DECODE_LENGTHS = (1, 13, 33, 100, 0, 517)


@pytest.mark.parametrize("window", DECODE_WINDOWS)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES, ids=str)
def test_paged_attention_infinilm_window(
    window, dtype, rtol, atol, device, implementation_index
):
    inputs = window_inputs(
        (1,) * len(DECODE_LENGTHS), DECODE_LENGTHS, 8, 2, 64, 16, dtype
    )
    actual = _decode_window(inputs, None, 0.125, window, device, implementation_index)
    expected = _decode_expected(inputs, None, 0.125, window)
    assert torch.allclose(actual.double(), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("seq_lens", ((700,), (300, 1000), (129, 5)))
@pytest.mark.parametrize("window", (0, 200, 512))
@pytest.mark.parametrize("alibi", (False, True))
def test_paged_attention_infinilm_split_keys(
    seq_lens, window, alibi, device, implementation_index
):
    """Few (sequence, kv head) tasks over long sequences: the CPU kernel
    splits each sequence's keys into ranges on several threads and merges
    their softmax states; the results are those of one pass."""
    inputs = window_inputs((1,) * len(seq_lens), seq_lens, 4, 1, 64, 16, torch.float32)
    slopes = torch.rand(4) if alibi else None
    actual = _decode_window(
        inputs, None if slopes is None else slopes.to(device), 0.125, window,
        device, implementation_index,
    )  # fmt: skip
    expected = _decode_expected(inputs, slopes, 0.125, window)
    assert torch.allclose(actual.double(), expected, rtol=1e-5, atol=1e-5)


def test_paged_attention_infinilm_window_with_alibi_and_int64(
    device, implementation_index
):
    """ALiBi distances count from the query's position, windowed or not."""
    inputs = window_inputs((1, 1), (20, 90), 4, 4, 32, 16, torch.float32, torch.int64)
    slopes = torch.rand(4)
    actual = _decode_window(
        inputs, slopes.to(device), 0.2, 7, device, implementation_index
    )
    expected = _decode_expected(inputs, slopes, 0.2, 7)
    assert torch.allclose(actual.double(), expected, rtol=1e-5, atol=1e-5)


def test_paged_attention_infinilm_window_gemma3_shapes(device, implementation_index):
    """Gemma-3 270M: 4 query heads on 1 kv head of 256 features and a
    window of 512, at lengths around it."""
    inputs = window_inputs((1, 1, 1), (600, 512, 513), 4, 1, 256, 16, torch.float32)
    scale = 256**-0.5
    actual = _decode_window(inputs, None, scale, 512, device, implementation_index)
    expected = _decode_expected(inputs, None, scale, 512)
    assert torch.allclose(actual.double(), expected, rtol=1e-5, atol=1e-5)
    # The window changes the result where the sequence is longer than it.
    unwindowed = _decode_expected(inputs, None, scale, 0)
    assert torch.allclose(unwindowed[1], expected[1])
    assert not torch.allclose(unwindowed[0], expected[0], rtol=1e-3, atol=1e-3)


def test_paged_attention_infinilm_window_zero_is_the_default(
    device, implementation_index
):
    inputs = window_inputs((1, 1), (9, 30), 2, 1, 16, 4, torch.float32)
    windowed = _decode_window(inputs, None, 0.3, 0, device, implementation_index)
    q, k_cache, v_cache, tables, lengths, _ = (x.to(device) for x in inputs)
    out = torch.empty_like(q)
    infini.ops.paged_attention_infinilm(
        q, k_cache, v_cache, tables, lengths, None, 0.3, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    assert torch.equal(windowed, out.cpu())


def test_paged_attention_infinilm_rejects_negative_window(device):
    inputs = window_inputs((1,), (4,), 2, 1, 16, 4, torch.float32)
    with pytest.raises(
        ValueError, match="`paged_attention_infinilm`: `window` must be 0"
    ):
        _decode_window(inputs, None, 0.3, -1, device, None)
