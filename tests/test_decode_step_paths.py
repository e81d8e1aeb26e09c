"""The CPU paths that keep a decode step's small calls cheap (issue 22 item
1) give the results of the paths they stand beside:

- the greedy choice (`top_k == 1`) read in place, on the calling thread or
  the pool, against torch's argmax and the documented order (NaN largest,
  ties to the lower index, -0.0 equal to +0.0);
- `rotary_embedding` and `paged_attention_infinilm` on the calling thread
  (small work) against the pool (large work), bit for bit, and against torch;
- launches that remember addresses needing no staging still stage a later
  call whose operands overlap.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import infini.ops
from infini.ops.native.cpu import attention, sampling

VOCAB = 49152


def _greedy(logits, top_k=None, out_dtype=torch.int32):
    rows = logits.shape[0]
    if top_k is None:
        top_k = torch.ones(1, dtype=torch.int32)
    out = torch.full((rows,), -1, dtype=out_dtype)
    options = ("top_k_first", True, False, 7, 3)
    infini.ops.top_k_top_p_sampling_from_logits(
        logits, top_k, torch.ones(1), None, *options, out, implementation_index=0
    )
    return out


def _first_of_order(row):
    """The first token in rank order: the first NaN, else the first index
    of the largest value (-0.0 == +0.0)."""
    values = row.double().tolist()
    for index, value in enumerate(values):
        if math.isnan(value):
            return index
    best = max(values)
    return values.index(best)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("rows", [1, 8, 32])
def test_greedy_choice_is_torch_argmax(dtype, strided, rows):
    # Few distinct values: every row has many ties for its maximum. 32 rows
    # of the vocabulary exceed `GREEDY_SERIAL_LOGITS`: the pool's path.
    generator = torch.Generator().manual_seed(rows)
    logits = torch.randint(-40, 8, (rows, 2 * VOCAB), generator=generator)
    logits = logits.to(dtype) / 4
    logits = logits[:, ::2] if strided else logits[:, :VOCAB]
    expected = torch.argmax(logits.float(), dim=-1).to(torch.int32)
    assert torch.equal(_greedy(logits), expected)
    assert torch.equal(_greedy(logits, out_dtype=torch.int64), expected.long())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_greedy_choice_special_values(dtype):
    nan, inf = float("nan"), float("inf")
    rows = []

    def row(**values):
        row = torch.full((VOCAB,), -5.0)
        for index, value in values.items():
            row[int(index.removeprefix("at"))] = value
        rows.append(row)

    row(at10=-0.0, at3000=0.0)  # zeros tie across blocks: the first one
    row(at10=0.0, at3000=-0.0)
    row(at5=-0.0)  # the largest is -0.0
    row(at7=inf, at9=inf, at4000=1e4)
    row(at100=nan, at50=inf, at200=nan)
    row(at3=-nan)  # a NaN with its sign bit set still ranks first
    row(at40000=2.0, at1024=2.0, at1023=1.0)  # a tie at a block's start
    rows.append(torch.full((VOCAB,), -inf))
    rows.append(torch.full((VOCAB,), nan))
    logits = torch.stack(rows).to(dtype)
    expected = [_first_of_order(r) for r in logits]
    assert _greedy(logits).tolist() == expected


def test_greedy_rows_beside_sampled_rows():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(6, VOCAB, generator=generator) * 3
    top_k = torch.tensor([1, 20, 1, 0, 1, 5], dtype=torch.int32)
    chosen = _greedy(logits, top_k)
    argmax = torch.argmax(logits, dim=-1)
    for row in range(6):
        if top_k[row] == 1:
            assert chosen[row] == argmax[row]
        else:
            ranked = torch.sort(logits[row], descending=True).indices
            allowed = ranked[: int(top_k[row])] if top_k[row] > 0 else ranked
            assert int(chosen[row]) in set(allowed.tolist())


def test_greedy_choice_is_the_model_sampler_choice():
    from infini.ops.models.sampling import Sampler

    logits = torch.randn(4, VOCAB) * 3
    sampler = Sampler(4)
    for _ in range(3):
        chosen = torch.from_numpy(sampler(logits).copy())
        assert torch.equal(chosen, torch.argmax(logits, dim=-1).to(torch.int32))


def _rotate_reference(x, cos, sin):
    first, second = x.double().chunk(2, dim=-1)
    cos, sin = cos.double().unsqueeze(-2), sin.double().unsqueeze(-2)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rotary_small_work_matches_large_work(dtype):
    # 96 tokens x 12 heads x 32 pairs pass the parallel threshold; one token
    # at a time is the calling thread's path.
    tokens, heads, kv_heads, head_size = 96, 9, 3, 64
    generator = torch.Generator().manual_seed(0)
    positions = torch.randint(0, 512, (tokens,), dtype=torch.int32)
    angles = torch.rand(512, head_size // 2, generator=generator) * 6
    cache = torch.cat((angles.cos(), angles.sin()), -1)
    query = torch.randn(tokens, heads * head_size, generator=generator).to(dtype)
    key = torch.randn(tokens, kv_heads * head_size, generator=generator).to(dtype)
    large_q, large_k = query.clone(), key.clone()
    infini.ops.rotary_embedding(
        positions, large_q, large_k, cache, head_size, True, implementation_index=0
    )
    small_q, small_k = query.clone(), key.clone()
    for token in range(tokens):
        infini.ops.rotary_embedding(
            positions[token : token + 1],
            small_q[token : token + 1],
            small_k[token : token + 1],
            cache,
            head_size,
            True,
            implementation_index=0,
        )
    assert torch.equal(small_q, large_q)
    assert torch.equal(small_k, large_k)
    cos, sin = cache[positions.long()].chunk(2, dim=-1)
    expected = _rotate_reference(query.view(tokens, heads, head_size), cos, sin)
    tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(
        small_q.view(tokens, heads, head_size).double(),
        expected,
        rtol=tolerance,
        atol=tolerance,
    )


@pytest.mark.parametrize("seqs, context", [(1, 64), (8, 64), (3, 700)])
def test_paged_attention_calling_thread_matches_pool(monkeypatch, seqs, context):
    heads, kv_heads, head_size, block_size = 9, 3, 64, 16
    generator = torch.Generator().manual_seed(seqs)
    per_seq = -(-context // block_size)
    blocks = seqs * per_seq
    k_cache = torch.randn(blocks, kv_heads, block_size, head_size, generator=generator)
    v_cache = torch.randn(blocks, kv_heads, block_size, head_size, generator=generator)
    tables = torch.randperm(blocks, generator=generator).to(torch.int32)
    tables = tables.view(seqs, per_seq)
    lengths = torch.full((seqs,), context, dtype=torch.int32)
    query = torch.randn(seqs, heads, head_size, generator=generator)
    scale = head_size**-0.5
    arguments = (query, k_cache, v_cache, tables, lengths, None, scale)
    results = []
    for serial in (0, 1 << 40):
        monkeypatch.setattr(attention, "SERIAL_KEY_ELEMENTS", serial)
        out = torch.empty_like(query)
        infini.ops.paged_attention_infinilm(*arguments, out, implementation_index=0)
        results.append(out)
    assert torch.equal(results[0], results[1])

    def gather(cache):
        pages = cache[tables.long()].permute(0, 2, 1, 3, 4)
        return pages.reshape(seqs, kv_heads, -1, head_size)[:, :, :context]

    expected = F.scaled_dot_product_attention(
        query[:, :, None].double(),
        gather(k_cache).double(),
        gather(v_cache).double(),
        scale=scale,
        enable_gqa=True,
    )[:, :, 0]
    torch.testing.assert_close(results[0].double(), expected, rtol=1e-4, atol=1e-5)


def test_greedy_rows_reach_both_paths():
    # `test_greedy_choice_is_torch_argmax`'s 8 rows run on the calling
    # thread and its 32 rows on the pool.
    assert 8 * VOCAB <= sampling.GREEDY_SERIAL_LOGITS < 32 * VOCAB


def test_row_launch_stages_an_overlap_after_remembered_calls():
    weight = torch.randn(576)
    x, out = torch.randn(2, 576), torch.empty(2, 576)
    for _ in range(2):  # the second call finds its addresses remembered
        infini.ops.rms_norm(x, weight, 1e-5, out, implementation_index=0)
        torch.testing.assert_close(out, F.rms_norm(x, (576,), weight, 1e-5))
    # The same geometry, `out` one row past `x` in one buffer.
    buffer = torch.randn(3, 576)
    expected = F.rms_norm(buffer[:2].clone(), (576,), weight, 1e-5)
    infini.ops.rms_norm(buffer[:2], weight, 1e-5, buffer[1:], implementation_index=0)
    torch.testing.assert_close(buffer[1:], expected)


def test_cache_write_copies_a_source_in_a_cache_after_remembered_calls():
    kv_heads, block_size, head_size = 3, 16, 64
    k_cache = torch.randn(4, kv_heads, block_size, head_size)
    v_cache = torch.randn(4, kv_heads, block_size, head_size)
    slots = torch.tensor([17], dtype=torch.int32)
    key, value = (
        torch.randn(1, kv_heads, head_size),
        torch.randn(1, kv_heads, head_size),
    )
    for _ in range(2):
        infini.ops.paged_caching_infinilm(
            key, value, slots, k_cache, v_cache, implementation_index=0
        )
        assert torch.equal(k_cache[1, :, 1], key[0])
        assert torch.equal(v_cache[1, :, 1], value[0])
    # A key that is a view of the key cache (from block 1, slot 2 on): the
    # write copies it aside before writing.
    source = torch.as_strided(
        k_cache,
        (1, kv_heads, head_size),
        key.stride(),
        k_cache[1, 0, 2].storage_offset(),
    )
    expected = source.clone()
    infini.ops.paged_caching_infinilm(
        source, value, slots, k_cache, v_cache, implementation_index=0
    )
    assert torch.equal(k_cache[1, :, 1], expected[0])


def test_paged_attention_stages_an_overlap_after_remembered_calls():
    heads, kv_heads, head_size, block_size = 9, 3, 64, 16
    k_cache = torch.randn(4, kv_heads, block_size, head_size)
    v_cache = torch.randn(4, kv_heads, block_size, head_size)
    tables = torch.tensor([[2, 0]], dtype=torch.int32)
    lengths = torch.tensor([20], dtype=torch.int32)
    query = torch.randn(1, heads, head_size)
    arguments = (k_cache, v_cache, tables, lengths, None, head_size**-0.5)
    out = torch.empty_like(query)
    for _ in range(2):  # the second call finds its addresses remembered
        infini.ops.paged_attention_infinilm(
            query, *arguments, out, implementation_index=0
        )
    # In place: the output is the query, read before it is written.
    in_place = query.clone()
    infini.ops.paged_attention_infinilm(
        in_place, *arguments, in_place, implementation_index=0
    )
    assert torch.equal(in_place, out)
