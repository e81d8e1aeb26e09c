"""`flash_attention` against a float64 reference written here: one sequence,
packed sequences (`cu_seqlens_q` / `cu_seqlens_kv`), or paged keys."""

import math

import pytest
import torch

import infini.ops
from tests.test_flash_attn_varlen_func import DTYPES, attend


def reference(query, key, value, cu_q, cu_kv, table, scale, causal, left, right):
    heads = query.shape[1]
    out = torch.zeros(query.shape, dtype=torch.float64)
    if table is not None:
        seqs = table.shape[0]
        starts_q = cu_q.tolist() if cu_q is not None else list(range(seqs + 1))
    elif cu_q is not None:
        starts_q = cu_q.tolist()
    else:
        starts_q = [0, query.shape[0]]
    if cu_kv is not None:
        starts_k = cu_kv.tolist()
    elif cu_q is not None:
        starts_k = cu_q.tolist()
    else:
        starts_k = [0, key.shape[0]]
    for s in range(len(starts_q) - 1):
        qb, qe = starts_q[s], starts_q[s + 1]
        length_k = starts_k[s + 1] - starts_k[s]
        if table is None:
            keys = key[starts_k[s] : starts_k[s + 1]]
            values = value[starts_k[s] : starts_k[s + 1]]
        else:
            pages = table[s, : -(-length_k // key.shape[1])].long()
            keys = key[pages].flatten(0, 1)[:length_k]
            values = value[pages].flatten(0, 1)[:length_k]
        out[qb:qe], _ = attend(
            query[qb:qe], keys, values, torch.arange(length_k),
            torch.arange(qe - qb) + length_k - (qe - qb), scale, causal,
            (left, right),
        )  # fmt: skip
    assert out.shape[1] == heads
    return out


def _cu(lengths, dtype):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=dtype)


def _paged(lengths, kv_heads, head_size, block_size, dtype):
    max_blocks = max(-(-n // block_size) for n in lengths) + 1
    blocks = len(lengths) * max_blocks + 2
    cache = torch.randn(blocks, block_size, kv_heads, head_size, dtype=dtype)
    table = torch.randperm(blocks)[: len(lengths) * max_blocks]
    return cache, table.view(len(lengths), max_blocks).int()


# (query lengths or None, key lengths, heads, kv heads, causal, window
# (left, right), paged block size or None, offsets dtype, keys packed like
# the queries)
CASES = [
    pytest.param((5,), (9,), 4, 2, True, (-1, -1), None, None, False,
                 id="one-sequence-causal"),
    pytest.param((3, 6, 1), (3, 8, 70), 4, 1, False, (4, 2), None, torch.int64,
                 False, id="packed-window-int64"),
    pytest.param((4, 7), None, 2, 2, True, (-1, -1), None, torch.int32, True,
                 id="packed-self-attention"),
    pytest.param(None, (5, 22, 0), 8, 2, False, (-1, -1), 8, torch.int32, False,
                 id="paged-decode"),
    pytest.param((3, 1), (20, 9), 4, 2, True, (6, -1), 4, torch.int64, False,
                 id="paged-prefill-window"),
]  # fmt: skip


@pytest.mark.parametrize(
    "lengths_q, lengths_k, heads, kv_heads, causal, window, block_size, "
    "index_dtype, like_queries",
    CASES,
)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES, ids=str)
def test_flash_attention(
    lengths_q, lengths_k, heads, kv_heads, causal, window, block_size, index_dtype,
    like_queries, dtype, rtol, atol, device, implementation_index,
):  # fmt: skip
    head_size = 32
    if lengths_q is None:
        tokens = len(lengths_k)
    else:
        tokens = sum(lengths_q)
    query = torch.randn(tokens, heads, head_size, dtype=dtype)
    cu_q = None
    if lengths_q is not None and (index_dtype is not None):
        cu_q = _cu(lengths_q, index_dtype)
    cu_kv = table = None
    if like_queries:
        key = torch.randn(tokens, kv_heads, head_size, dtype=dtype)
    elif block_size is None:
        key = torch.randn(sum(lengths_k), kv_heads, head_size, dtype=dtype)
        if index_dtype is not None:
            cu_kv = _cu(lengths_k, index_dtype)
    else:
        key, table = _paged(lengths_k, kv_heads, head_size, block_size, dtype)
        cu_kv = _cu(lengths_k, index_dtype)
    value = torch.randn_like(key)
    output = torch.full_like(query, 7.0)
    scale = 0.7 / math.sqrt(head_size)

    def on(tensor):
        return None if tensor is None else tensor.to(device)

    output = on(output)
    infini.ops.flash_attention(
        on(query), on(key), on(value), on(cu_q), on(cu_kv), on(table), heads,
        kv_heads, head_size, scale, causal, window[0], window[1],
        block_size or 0, output, implementation_index=implementation_index,
    )  # fmt: skip
    expected = reference(query, key, value, cu_q, cu_kv, table, scale, causal, *window)
    assert torch.allclose(output.cpu().double(), expected, rtol=rtol, atol=atol)


def _arguments(**changes):
    query = torch.randn(3, 4, 16)
    key = torch.randn(10, 2, 16)
    arguments = dict(
        query=query, key=key, value=key.clone(), cu_seqlens_q=None,
        cu_seqlens_kv=None, block_table=None, num_heads=4, num_kv_heads=2,
        head_size=16, scale=0.25, causal=False, window_left=-1, window_right=-1,
        block_size=0, output=torch.full((3, 4, 16), 7.0),
    )  # fmt: skip
    arguments.update(changes)
    return arguments


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(num_heads=3), "`num_heads` \\(3\\) must be a positive multiple"),
        (dict(head_size=8), "`query` must have shape \\(3, 4, 8\\)"),
        (dict(num_kv_heads=4), "`key` must have shape \\(10, 4, 16\\)"),
        (dict(query=torch.randn(3, 4, 16, dtype=torch.float64)),
         "`query` has dtype float64"),
        (dict(output=torch.empty(3, 4, 8)), "`output` must have shape"),
        (dict(cu_seqlens_kv=torch.tensor([0, 10])),
         "`cu_seqlens_kv` without `cu_seqlens_q` is ambiguous"),
        (dict(cu_seqlens_q=torch.tensor([0, 3], dtype=torch.int32),
              cu_seqlens_kv=torch.tensor([0, 10])), "`cu_seqlens_kv` has dtype"),
        (dict(cu_seqlens_q=torch.tensor([0, 3.0])), "`cu_seqlens_q` has dtype"),
        (dict(block_table=torch.zeros(3, 2, dtype=torch.int32),
              key=torch.randn(4, 8, 2, 16), value=torch.randn(4, 8, 2, 16),
              block_size=16), "`block_size` is 16 but `key`"),
        (dict(block_table=torch.zeros(3, 2, dtype=torch.int32),
              key=torch.randn(4, 8, 2, 16), value=torch.randn(4, 8, 2, 16),
              block_size=8), "`cu_seqlens_kv` is required with `block_table`"),
        (dict(block_table=torch.zeros(2, 2, dtype=torch.int32),
              key=torch.randn(4, 8, 2, 16), value=torch.randn(4, 8, 2, 16),
              cu_seqlens_kv=torch.tensor([0, 1, 2]), block_size=8),
         "one token per sequence: 2 rows, got 3"),
    ],
)  # fmt: skip
def test_flash_attention_rejects(changes, match, device):
    with pytest.raises(ValueError, match=f"`flash_attention`: .*{match}"):
        infini.ops.flash_attention(**_arguments(**changes))


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(cu_seqlens_q=torch.tensor([0, 2, 1])),
         r"`cu_seqlens_q\[2\]` is 1; cumulative"),
        (dict(cu_seqlens_q=torch.tensor([0, 2, 4])),
         r"`cu_seqlens_q\[2\]` is 4, past the 3 tokens of `query`"),
        (dict(cu_seqlens_q=torch.tensor([0, 2, 3]),
              cu_seqlens_kv=torch.tensor([0, 5, 11])),
         r"`cu_seqlens_kv\[2\]` is 11, past the 10 tokens of `key`"),
        (dict(block_table=torch.tensor([[0, 1], [2, 4], [3, 3]], dtype=torch.int32),
              key=torch.randn(4, 8, 2, 16), value=torch.randn(4, 8, 2, 16),
              cu_seqlens_kv=torch.tensor([0, 1, 10, 11], dtype=torch.int32),
              block_size=8),
         r"`block_table\[1, 1\]` is 4, out of the range \[0, 4\)"),
    ],
)  # fmt: skip
def test_flash_attention_rejects_bad_offsets_without_writing(changes, match, device):
    arguments = _arguments(**changes)
    with pytest.raises(ValueError, match=f"`flash_attention`: {match}"):
        infini.ops.flash_attention(**arguments)
    assert bool((arguments["output"] == 7.0).all())
