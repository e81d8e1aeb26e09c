"""`flash_attn_varlen_func`: every active slot (CPU slot 0; the NVIDIA torch
backend, slot 8, where built) against a float64 reference written here.

The torch backend's computation is also checked on the CPU by calling its
function directly, so CPU-only CI covers it."""

import math

import pytest
import torch

import infini.ops
from infini.ops.torch.ops.flash_attn_varlen_func import varlen_attention

# Results differ from the float64 reference by the float32 scores and the
# polynomial `exp` (a few ulps); 16-bit outputs round once from float32.
DTYPES = (
    (torch.float32, 1e-4, 1e-4),
    (torch.float16, 2e-3, 2e-3),
    (torch.bfloat16, 2e-2, 2e-2),
)


def attend(
    query,
    keys,
    values,
    key_positions,
    query_positions,
    scale,
    causal=False,
    window=(-1, -1),
    softcap=0.0,
    slopes=None,
):
    """``softmax(query keys^T * scale + bias, masks) values`` in float64 for
    one sequence: `query` is ``(Lq, heads, dim)``, `keys` and `values`
    ``(Lk, kv_heads, dim)``; masks and ALiBi compare `key_positions`
    ``(Lk,)`` with `query_positions` ``(Lq,)``. Returns the output ``(Lq,
    heads, dim_v)`` and the log-sum-exp ``(heads, Lq)`` (-inf where no key is
    visible, whose output row is 0)."""
    query, keys, values = query.double(), keys.double(), values.double()
    groups = query.shape[1] // keys.shape[1]
    keys = keys.repeat_interleave(groups, 1)
    values = values.repeat_interleave(groups, 1)
    scores = torch.einsum("qhd,khd->hqk", query, keys) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    distance = (key_positions[None, :] - query_positions[:, None]).double()
    if slopes is not None:
        scores = scores - slopes.double()[:, None, None] * distance.abs()[None]
    left, right = window
    if causal:
        right = 0
    keep = torch.ones_like(distance, dtype=torch.bool)
    if right >= 0:
        keep &= distance <= right
    if left >= 0:
        keep &= distance >= -left
    scores = scores.masked_fill(~keep[None], -math.inf)
    lse = torch.logsumexp(scores, -1)
    weights = torch.nan_to_num(torch.exp(scores - lse[..., None]), nan=0.0)
    return torch.einsum("hqk,khd->qhd", weights, values), lse


def reference(q, k, v, cu_q, cu_k, scale, causal, window, softcap, slopes, table):
    """Per sequence `attend` with bottom-right positions; paged keys are
    gathered through `table` first."""
    heads = q.shape[1]
    out = torch.zeros(q.shape[0], heads, v.shape[-1], dtype=torch.float64)
    lse = torch.full((heads, q.shape[0]), -math.inf, dtype=torch.float64)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    cu_q, cu_k = cu_q.tolist(), cu_k.tolist()
    for index in range(len(cu_q) - 1):
        qb, qe, kb, ke = cu_q[index], cu_q[index + 1], cu_k[index], cu_k[index + 1]
        length_q, length_k = qe - qb, ke - kb
        if table is None:
            keys, values = k[kb:ke], v[kb:ke]
        else:
            pages = table[index, : -(-length_k // k.shape[1])].long()
            keys = k[pages].flatten(0, 1)[:length_k]
            values = v[pages].flatten(0, 1)[:length_k]
        if slopes is not None and slopes.dim() == 2:
            row_slopes = slopes[index]
        else:
            row_slopes = slopes
        result, row_lse = attend(
            q[qb:qe],
            keys,
            values,
            torch.arange(length_k),
            torch.arange(length_q) + length_k - length_q,
            scale,
            causal,
            window,
            softcap,
            row_slopes,
        )
        out[qb:qe] = result
        lse[:, qb:qe] = row_lse
    return out, lse


def _packed(lengths, heads, head_dim, dtype, device="cpu"):
    total = sum(lengths)
    tensor = torch.randn(total, heads, head_dim, dtype=dtype, device=device)
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    return tensor, starts.to(torch.int32).to(device)


def _paged(lengths, kv_heads, head_dim, block_size, dtype):
    """A paged cache in random distinct blocks (unused table entries -1) and
    the packed keys it holds."""
    max_blocks = max(-(-n // block_size) for n in lengths) + 1
    blocks = len(lengths) * max_blocks + 2
    cache = torch.randn(blocks, block_size, kv_heads, head_dim, dtype=dtype)
    table = torch.full((len(lengths), max_blocks), -1, dtype=torch.int32)
    free = torch.randperm(blocks)
    used = 0
    for s, n in enumerate(lengths):
        count = -(-n // block_size)
        table[s, :count] = free[used : used + count].int()
        used += count
    return cache, table


# (query lengths, key lengths, heads, kv heads, causal, window, scale,
# softcap, alibi: None / "head" / "batch", paged block size or None)
CASES = [
    pytest.param((3, 5), (4, 5), 4, 4, False, (-1, -1), None, 0.0, None, None,
                 id="smoke"),
    pytest.param((3, 5), (4, 5), 4, 2, True, (-1, -1), None, 0.0, None, None,
                 id="gqa-causal"),
    pytest.param((2, 7), (9, 4), 4, 1, True, (-1, -1), None, 0.0, None, None,
                 id="mqa-causal-q-shorter-and-longer"),
    pytest.param((6, 1), (6, 9), 2, 1, False, (2, 1), 0.3, 0.0, None, None,
                 id="window"),
    pytest.param((4, 2), (7, 2), 2, 2, True, (3, -1), None, 5.0, None, None,
                 id="softcap-causal-window"),
    pytest.param((5, 3), (70, 3), 4, 2, False, (-1, -1), None, 0.0, "head", None,
                 id="alibi-heads-two-tiles"),
    pytest.param((40, 3), (70, 5), 8, 2, True, (-1, -1), None, 0.0, "batch", None,
                 id="alibi-batch-causal-many-tasks"),
    pytest.param((3, 0, 4), (0, 5, 20), 4, 2, False, (-1, -1), None, 0.0, None,
                 None, id="empty-sequences"),
    pytest.param((3, 5), (21, 5), 4, 2, True, (-1, -1), None, 0.0, None, 8,
                 id="paged"),
    pytest.param((1, 1, 2), (75, 5, 33), 4, 4, False, (16, 0), None, 2.0, "head",
                 16, id="paged-decode-window-softcap-alibi"),
]  # fmt: skip


def _case_tensors(lengths_q, lengths_k, heads, kv_heads, alibi, block_size, dtype):
    q, cu_q = _packed(lengths_q, heads, 32, dtype)
    _, cu_k = _packed(lengths_k, kv_heads, 1, dtype)
    if block_size is None:
        k, _ = _packed(lengths_k, kv_heads, 32, dtype)
        v, _ = _packed(lengths_k, kv_heads, 32, dtype)
        table = None
    else:
        k, table = _paged(lengths_k, kv_heads, 32, block_size, dtype)
        v = torch.randn_like(k)
    slopes = None
    if alibi == "head":
        slopes = torch.rand(heads)
    elif alibi == "batch":
        slopes = torch.rand(len(lengths_q), heads)
    return q, k, v, cu_q, cu_k, slopes, table


@pytest.mark.parametrize(
    "lengths_q, lengths_k, heads, kv_heads, causal, window, scale, softcap, alibi, "
    "block_size",
    CASES,
)
@pytest.mark.parametrize("dtype, rtol, atol", DTYPES, ids=str)
def test_flash_attn_varlen_func(
    lengths_q,
    lengths_k,
    heads,
    kv_heads,
    causal,
    window,
    scale,
    softcap,
    alibi,
    block_size,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    q, k, v, cu_q, cu_k, slopes, table = _case_tensors(
        lengths_q, lengths_k, heads, kv_heads, alibi, block_size, dtype
    )
    out = torch.full_like(q, 7.0, device=device)
    lse = torch.full((heads, q.shape[0]), 7.0, device=device)
    on = [None if t is None else t.to(device) for t in (q, k, v, cu_q, cu_k)]
    infini.ops.flash_attn_varlen_func(
        *on, None if slopes is None else slopes.to(device),
        None if table is None else table.to(device),
        max(lengths_q), max(lengths_k), 0.0, scale, causal, list(window), softcap,
        False, False, out, lse, None,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected, expected_lse = reference(
        q, k, v, cu_q, cu_k, scale, causal, window, softcap, slopes, table
    )
    assert torch.allclose(out.cpu().double(), expected, rtol=rtol, atol=atol)
    lse = lse.cpu().double()
    assert torch.equal(lse.isinf(), expected_lse.isinf())
    finite = expected_lse.isfinite()
    assert torch.allclose(lse[finite], expected_lse[finite], rtol=1e-4, atol=1e-4)


def test_flash_attn_varlen_func_short_overload_strided_operands(
    device, implementation_index
):
    """The 8-argument overload; `q`, `k`, `out` and `cu_seqlens_q` strided;
    rows past the last offset are neither read nor written."""
    heads, kv_heads = 4, 2
    q = torch.randn(2 * 10, heads, 32)[::2]
    k = torch.randn(12, kv_heads, 64)[..., ::2]
    v = torch.randn(12, kv_heads, 32)
    cu_q = torch.tensor([0, 0, 4, 0, 9], dtype=torch.int32)[::2]
    cu_k = torch.tensor([0, 5, 11], dtype=torch.int32)
    out = torch.full((heads, 10, 32), 7.0).transpose(0, 1)
    on = [t.to(device) for t in (q, k, v, cu_q, cu_k)]
    infini.ops.flash_attn_varlen_func(
        *on, 5, 6, out, implementation_index=implementation_index
    )
    expected, _ = reference(q, k, v, cu_q, cu_k, None, False, (-1, -1), 0.0, None, None)
    assert torch.allclose(out[:9].double(), expected[:9], rtol=1e-4, atol=1e-4)
    assert bool((out[9] == 7.0).all())


def test_flash_attn_varlen_func_max_seqlen_is_per_call(device):
    q, cu = _packed((3, 6), 2, 16, torch.float32, device)
    out = torch.empty_like(q)
    infini.ops.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6, out)
    first = out.clone()
    infini.ops.flash_attn_varlen_func(q, q, q, cu, cu, 9, 8, out)
    assert torch.equal(first, out)
    with pytest.raises(ValueError, match="sequence 1 has 6 query tokens, more than "
                       "`max_seqlen_q` = 5"):  # fmt: skip
        infini.ops.flash_attn_varlen_func(q, q, q, cu, cu, 5, 6, out)
    with pytest.raises(ValueError, match="sequence 1 has 6 keys, more than "
                       "`max_seqlen_k` = 4"):  # fmt: skip
        infini.ops.flash_attn_varlen_func(q, q, q, cu, cu, 6, 4, out)


def _full(*tensors, **changes):
    q, k, v, cu_q, cu_k, out = tensors
    arguments = dict(
        q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, alibi_slopes=None,
        block_table=None, max_seqlen_q=64, max_seqlen_k=64, dropout_p=0.0,
        softmax_scale=None, causal=False, window_size=[-1, -1], softcap=0.0,
        deterministic=False, return_attn_probs=False, out=out, softmax_lse=None,
        s_dmask=None,
    )  # fmt: skip
    arguments.update(changes)
    infini.ops.flash_attn_varlen_func(**arguments)


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(dropout_p=0.1), "`dropout_p` must be 0"),
        (dict(s_dmask=torch.empty(1)), "`s_dmask` must be None"),
        (dict(q=torch.randn(5, 4, 16, dtype=torch.float64)), "`q` has dtype float64"),
        (dict(k=torch.randn(9, 3, 16)), "not a multiple of the 3 heads of `k`"),
        (dict(k=torch.randn(9, 2, 8)), "`k` must be \\(total_k"),
        (dict(v=torch.randn(8, 2, 16)), "`v` must match `k`"),
        (dict(out=torch.empty(5, 4, 8)), "`out` must have shape \\(5, 4, 16\\)"),
        (dict(cu_seqlens_q=torch.tensor([0, 5])), "`cu_seqlens_q` has dtype int64"),
        (dict(cu_seqlens_k=torch.tensor([0, 9], dtype=torch.int32)),
         "must both have batch \\+ 1 entries"),
        (dict(alibi_slopes=torch.rand(3)), "`alibi_slopes` must be \\(4,\\)"),
        (dict(window_size=[1]), "`window_size` must be \\(left, right\\)"),
        (dict(softmax_lse=torch.empty(5, 4)), "`softmax_lse` must have shape"),
        (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)),
         "`k` must have 4 dimensions"),
        (dict(max_seqlen_q=-1), "`max_seqlen_q` must be 0 or more"),
    ],
)  # fmt: skip
def test_flash_attn_varlen_func_rejects(changes, match, device):
    q = torch.randn(5, 4, 16)
    k = torch.randn(9, 2, 16)
    cu_q = torch.tensor([0, 2, 5], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 9], dtype=torch.int32)
    out = torch.empty(5, 4, 16)
    if "k" in changes:
        changes.setdefault("v", changes["k"])
    with pytest.raises(ValueError, match=f"`flash_attn_varlen_func`: .*{match}"):
        _full(q, k, k, cu_q, cu_k, out, **changes)


@pytest.mark.parametrize(
    "cu_q, cu_k, table_edit, match",
    [
        ((0, 3, 2), (0, 4, 9), None, r"`cu_seqlens_q\[2\]` is 2; cumulative"),
        ((0, 2, 6), (0, 4, 9), None, r"`cu_seqlens_q\[2\]` is 6, past the 5 tokens"),
        ((-1, 2, 5), (0, 4, 9), None, r"`cu_seqlens_q\[0\]` is -1"),
        ((0, 2, 5), (0, 4, 10), None, r"`cu_seqlens_k\[2\]` is 10, past the 9"),
        ((0, 2, 5), (0, 5, 4), None, r"`cu_seqlens_k\[2\]` is 4; cumulative"),
    ],
)
def test_flash_attn_varlen_func_rejects_bad_offsets_without_writing(
    cu_q, cu_k, table_edit, match, device
):
    q = torch.randn(5, 4, 16)
    k = torch.randn(9, 2, 16)
    out = torch.full((5, 4, 16), 7.0)
    with pytest.raises(ValueError, match=f"`flash_attn_varlen_func`: {match}"):
        infini.ops.flash_attn_varlen_func(
            q, k, k, torch.tensor(cu_q, dtype=torch.int32),
            torch.tensor(cu_k, dtype=torch.int32), 64, 64, out,
        )  # fmt: skip
    assert bool((out == 7.0).all())


@pytest.mark.parametrize(
    "lengths, edit, match",
    [
        ((5, 20), (1, 2, 9), r"`block_table\[1, 2\]` is 9, out of the range \[0, 9\)"),
        ((5, 20), (0, 0, -1), r"`block_table\[0, 0\]` is -1"),
        ((5, 33), None, r"sequence 1 has 33 keys \(from `cu_seqlens_k`\), more than "
         r"the 32"),
    ],
)  # fmt: skip
def test_flash_attn_varlen_func_rejects_bad_block_table(lengths, edit, match, device):
    cache = torch.randn(9, 8, 2, 16)
    table = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=torch.int32)
    if edit is not None:
        table[edit[0], edit[1]] = edit[2]
    q = torch.randn(2, 4, 16)
    cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    cu_k = torch.tensor([0, lengths[0], sum(lengths)], dtype=torch.int32)
    out = torch.full((2, 4, 16), 7.0)
    with pytest.raises(ValueError, match=f"`flash_attn_varlen_func`: {match}"):
        _full(q, cache, cache, cu_q, cu_k, out, block_table=table)
    assert bool((out == 7.0).all())


# The torch backend (slot 8) on the CPU, called directly.
@pytest.mark.parametrize(
    "lengths_q, lengths_k, heads, kv_heads, causal, window, scale, softcap, alibi, "
    "block_size",
    CASES,
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_varlen_attention_math_on_cpu(
    lengths_q,
    lengths_k,
    heads,
    kv_heads,
    causal,
    window,
    scale,
    softcap,
    alibi,
    block_size,
    dtype,
):
    q, k, v, cu_q, cu_k, slopes, table = _case_tensors(
        lengths_q, lengths_k, heads, kv_heads, alibi, block_size, dtype
    )
    out = torch.empty_like(q)
    lse = torch.empty(heads, q.shape[0])
    varlen_attention(
        q, k, v, cu_q, cu_k, out, lse,
        scale=q.shape[2] ** -0.5 if scale is None else scale, causal=causal,
        window=window, softcap=softcap, alibi_slopes=slopes, block_table=table,
    )  # fmt: skip
    expected, expected_lse = reference(
        q, k, v, cu_q, cu_k, scale, causal, window, softcap, slopes, table
    )
    tolerance = 1e-5 if dtype == torch.float32 else 2e-3
    assert torch.allclose(out.double(), expected, rtol=tolerance, atol=tolerance)
    assert torch.allclose(lse.double(), expected_lse, rtol=1e-5, atol=1e-5)


def test_flash_attn_varlen_func_torch_backend_on_cuda():
    """Slot 8 through the public call, where it is built and a GPU exists."""
    if not hasattr(infini.ops, "FlashAttnVarlenFunc"):
        pytest.skip("flash_attn_varlen_func is not in this build")
    indices = infini.ops.FlashAttnVarlenFunc.active_implementation_indices("nvidia")
    if 8 not in indices or not torch.cuda.is_available():
        pytest.skip("needs the NVIDIA torch backend and a CUDA device")
    q, k, v, cu_q, cu_k, slopes, table = _case_tensors(
        (3, 5), (21, 5), 4, 2, "batch", 8, torch.float16
    )
    out = torch.empty_like(q, device="cuda")
    lse = torch.empty(4, q.shape[0], device="cuda")
    on = [t.cuda() for t in (q, k, v, cu_q, cu_k, slopes, table)]
    infini.ops.flash_attn_varlen_func(
        *on, 5, 21, 0.0, None, True, [-1, -1], 0.0, False, False, out, lse, None,
        implementation_index=8,
    )  # fmt: skip
    expected, expected_lse = reference(
        q, k, v, cu_q, cu_k, None, True, (-1, -1), 0.0, slopes, table
    )
    assert torch.allclose(out.cpu().double(), expected, rtol=2e-3, atol=2e-3)
    assert torch.allclose(lse.cpu().double(), expected_lse, rtol=1e-4, atol=1e-4)
