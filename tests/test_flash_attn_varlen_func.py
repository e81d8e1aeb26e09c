"""`flash_attn_varlen_func`: the torch backend (slot 8, NVIDIA only).

The computation is also checked on the CPU by calling the backend's function
directly, so CPU-only CI covers it."""

import math

import pytest
import torch

import infini.ops
from infini.ops.torch.ops.flash_attn_varlen_func import varlen_attention

# (query lengths, key lengths, heads, kv heads, causal, window, scale, softcap)
CASES = [
    pytest.param((3, 5), (4, 5), 4, 4, False, (-1, -1), None, 0.0, id="smoke"),
    pytest.param((3, 5), (4, 5), 4, 2, True, (-1, -1), None, 0.0, id="gqa-causal"),
    pytest.param((6, 1), (6, 9), 2, 1, False, (2, 1), 0.3, 0.0, id="window"),
    pytest.param((4, 2), (7, 2), 2, 2, True, (-1, -1), None, 5.0, id="softcap"),
]


def _packed(lengths, heads, head_dim, dtype, device):
    total = sum(lengths)
    tensor = torch.randn(total, heads, head_dim, dtype=dtype, device=device)
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    return tensor, starts.to(torch.int32).to(device)


def _reference(q, k, v, cu_q, cu_k, causal, window, scale, softcap):
    """Per sequence and head, in float64, with explicit bottom-right masks."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float64)
    lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=torch.float64)
    groups = q.shape[1] // k.shape[1]
    scale = q.shape[2] ** -0.5 if scale is None else scale
    left, right = window
    if causal:
        right = 0
    for index in range(len(cu_q) - 1):
        qb, qe, kb, ke = cu_q[index], cu_q[index + 1], cu_k[index], cu_k[index + 1]
        for head in range(q.shape[1]):
            query = q[qb:qe, head].double()
            key = k[kb:ke, head // groups].double()
            value = v[kb:ke, head // groups].double()
            scores = query @ key.T * scale
            if softcap > 0:
                scores = torch.tanh(scores / softcap) * softcap
            for row in range(qe - qb):
                position = row + (ke - kb) - (qe - qb)
                for column in range(ke - kb):
                    if (right >= 0 and column > position + right) or (
                        left >= 0 and column < position - left
                    ):
                        scores[row, column] = -math.inf
            row_lse = torch.logsumexp(scores, dim=-1)
            weights = torch.nan_to_num(torch.exp(scores - row_lse[:, None]))
            out[qb:qe, head] = weights @ value
            lse[head, qb:qe] = row_lse
    return out, lse


@pytest.mark.parametrize(
    "lengths_q, lengths_k, heads, kv_heads, causal, window, scale, softcap", CASES
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_varlen_attention_math_on_cpu(
    lengths_q, lengths_k, heads, kv_heads, causal, window, scale, softcap, dtype
):
    q, cu_q = _packed(lengths_q, heads, 64, dtype, "cpu")
    k, cu_k = _packed(lengths_k, kv_heads, 64, dtype, "cpu")
    v, _ = _packed(lengths_k, kv_heads, 64, dtype, "cpu")
    out = torch.empty_like(q)
    lse = torch.empty(heads, q.shape[0])
    varlen_attention(
        q,
        k,
        v,
        cu_q,
        cu_k,
        out,
        lse,
        scale=q.shape[2] ** -0.5 if scale is None else scale,
        causal=causal,
        window=window,
        softcap=softcap,
    )
    expected, expected_lse = _reference(
        q, k, v, cu_q.tolist(), cu_k.tolist(), causal, window, scale, softcap
    )
    tolerance = 1e-5 if dtype == torch.float32 else 1e-3
    assert torch.allclose(out.double(), expected, rtol=tolerance, atol=tolerance)
    assert torch.allclose(lse.double(), expected_lse, rtol=1e-5, atol=1e-5)


def _needs_operator():
    if not hasattr(infini.ops, "FlashAttnVarlenFunc"):
        pytest.skip("flash_attn_varlen_func is built for NVIDIA only")


@pytest.mark.smoke
@pytest.mark.parametrize(
    "lengths_q, lengths_k, heads, kv_heads, causal, window, scale, softcap", CASES
)
def test_flash_attn_varlen_func(
    lengths_q, lengths_k, heads, kv_heads, causal, window, scale, softcap
):
    _needs_operator()
    indices = infini.ops.FlashAttnVarlenFunc.active_implementation_indices("nvidia")
    if 8 not in indices or not torch.cuda.is_available():
        pytest.skip("needs the NVIDIA torch backend and a CUDA device")
    device, dtype = "cuda", torch.float16
    q, cu_q = _packed(lengths_q, heads, 64, dtype, device)
    k, cu_k = _packed(lengths_k, kv_heads, 64, dtype, device)
    v, _ = _packed(lengths_k, kv_heads, 64, dtype, device)
    out = torch.empty_like(q)
    lse = torch.empty(heads, q.shape[0], device=device)
    infini.ops.flash_attn_varlen_func(
        q,
        k,
        v,
        cu_q,
        cu_k,
        None,
        None,
        max(lengths_q),
        max(lengths_k),
        0.0,
        scale,
        causal,
        list(window),
        softcap,
        False,
        False,
        out,
        lse,
        None,
        implementation_index=8,
    )
    expected, expected_lse = _reference(
        q.cpu(),
        k.cpu(),
        v.cpu(),
        cu_q.tolist(),
        cu_k.tolist(),
        causal,
        window,
        scale,
        softcap,
    )
    assert torch.allclose(out.cpu().double(), expected, rtol=1e-3, atol=1e-3)
    assert torch.allclose(lse.cpu().double(), expected_lse, rtol=1e-4, atol=1e-4)
    short = torch.empty_like(q)
    infini.ops.flash_attn_varlen_func(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max(lengths_q),
        max(lengths_k),
        short,
        implementation_index=8,
    )
    if not causal and window == (-1, -1) and scale is None and softcap == 0:
        assert torch.equal(short, out)


def test_flash_attn_varlen_func_rejects_dropout_and_alibi():
    _needs_operator()
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    q, cu = _packed((3,), 2, 64, torch.float16, "cuda")
    out = torch.empty_like(q)
    arguments = [q, q, q, cu, cu, None, None, 3, 3, 0.5, None, False, [-1, -1]]
    with pytest.raises(ValueError, match="`flash_attn_varlen_func`: `dropout_p`"):
        infini.ops.flash_attn_varlen_func(
            *arguments, 0.0, False, False, out, None, None
        )
    arguments[5], arguments[9] = torch.ones(2, device="cuda"), 0.0
    with pytest.raises(ValueError, match="`alibi_slopes` is supported by the linked"):
        infini.ops.flash_attn_varlen_func(
            *arguments, 0.0, False, False, out, None, None
        )
