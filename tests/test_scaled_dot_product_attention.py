import pytest
import torch
import torch.nn.functional as F

import infini.ops
from tests.utils import Payload, empty_strided, randn_strided

# Float32 results differ from the float64 reference by the float32 rounding
# of the scores and the polynomial `exp` (a few ulps); 16-bit results round
# once from float32, and an ulp flip is 2^-8 relative for bfloat16.
DTYPES = (
    (torch.float32, 1e-5, 1e-5),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-2, 1e-2),
)


def _reference(query, key, value, mask=None, causal=False, scale=None, gqa=False):
    """``softmax(q k^T * scale + mask) v`` in float64; rows with nothing
    visible are 0, as torch computes them."""
    q, k, v = query.double(), key.double(), value.double()
    if gqa and q.ndim >= 3:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], -3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], -3)
    length, keys = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if causal:
        visible = torch.ones(length, keys, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~visible, float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.double()
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ v


def _sdpa(query, key, value, mask, causal, scale, gqa, out, index):
    infini.ops.scaled_dot_product_attention(
        query, key, value, mask, 0.0, causal, scale, gqa, out,
        implementation_index=index,
    )  # fmt: skip
    return out


def _torch_sdpa(query, key, value, mask, causal, scale, gqa, out, index):
    return _reference(query, key, value, mask, causal, scale, gqa).to(out.dtype)


# query, key, value shapes, mask (None, "bool" or "float" with its shape),
# is_causal, scale, enable_gqa, query strides, smoke
CASES = (
    # Decode, GQA 32/8, head 128.
    ((1, 32, 1, 128), (1, 8, 33, 128), (1, 8, 33, 128), None, False, None, True,
     None, True),
    # Prefill (the online kernel), causal, GQA 32/8, head 128.
    ((1, 32, 65, 128), (1, 8, 65, 128), (1, 8, 65, 128), None, True, None, True,
     None, True),
    ((2, 3, 13, 16), (2, 3, 33, 16), (2, 3, 33, 8), ("bool", (13, 33)), False, 0.3,
     False, None, False),
    ((2, 4, 13, 16), (2, 1, 33, 16), (1, 4, 33, 16), ("float", (4, 1, 33)), False,
     None, False, (16, 13 * 16 * 2, 32, 1), False),
    ((2, 4, 70, 32), (2, 2, 90, 32), (2, 2, 90, 32), ("bool", (2, 1, 70, 90)),
     False, None, True, None, False),
    ((3, 33, 64), (3, 13, 64), (3, 13, 64), None, True, None, False, None, False),
    # Long non-causal queries (the BLAS path), float mask, GQA.
    ((1, 4, 520, 32), (1, 2, 96, 32), (1, 2, 96, 32), ("float", (520, 96)), False,
     None, True, None, False),
    ((0, 4, 3, 8), (0, 4, 5, 8), (0, 4, 5, 8), None, False, None, False, None,
     False),
    ((2, 2, 3, 8), (2, 2, 0, 8), (2, 2, 0, 8), None, False, None, False, None,
     False),
)  # fmt: skip


def _params():
    for *case, smoke in CASES:
        for dtype, rtol, atol in DTYPES:
            marks = pytest.mark.smoke if smoke and dtype == torch.float32 else ()
            yield pytest.param(*case, dtype, rtol, atol, marks=marks)


def _mask(spec, dtype, device):
    if spec is None:
        return None
    kind, shape = spec
    if kind == "bool":
        mask = torch.rand(shape, device=device) > 0.3
        # Hide every key of the first row: it must come out as 0.
        mask.view(-1, shape[-1])[0] = False
        return mask
    return torch.randn(shape, device=device).to(dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, mask, causal, scale, gqa, q_strides, dtype, rtol, atol",
    list(_params()),
)
def test_scaled_dot_product_attention(
    q_shape,
    k_shape,
    v_shape,
    mask,
    causal,
    scale,
    gqa,
    q_strides,
    dtype,
    rtol,
    atol,
    device,
    implementation_index,
):
    query = randn_strided(q_shape, q_strides, dtype=dtype, device=device)
    key = randn_strided(k_shape, None, dtype=dtype, device=device)
    value = randn_strided(v_shape, None, dtype=dtype, device=device)
    if gqa:
        batch = q_shape[:-2]
    else:
        batch = torch.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    out = empty_strided(batch + (q_shape[-2], v_shape[-1]), None, dtype=dtype,
                        device=device)  # fmt: skip
    return Payload(
        _sdpa,
        _torch_sdpa,
        (query, key, value, _mask(mask, dtype, device), causal, scale, gqa, out,
         implementation_index),
        rtol=rtol,
        atol=atol,
    )  # fmt: skip


def test_scaled_dot_product_attention_short_overload(device, implementation_index):
    query = torch.randn(2, 5, 16, device=device)
    key = torch.randn(2, 7, 16, device=device)
    value = torch.randn(2, 7, 16, device=device)
    out = torch.empty(2, 5, 16, device=device).transpose(0, 1).contiguous()
    out = out.transpose(0, 1)
    infini.ops.scaled_dot_product_attention(
        query, key, value, out, implementation_index=implementation_index
    )
    assert torch.allclose(out.double(), _reference(query, key, value), atol=1e-5)


# Causal queries run the online kernel; long non-causal ones the BLAS path.
@pytest.mark.parametrize("length, causal", [(13, True), (80, True), (520, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scaled_dot_product_attention_dropout_matches_torch_with_the_same_seed(
    length, causal, dtype, device, implementation_index
):
    if implementation_index == 9:
        # The mask comes from torch's generator on the host; NineToothed's
        # kernel refuses 0 < dropout_p < 1 (tests/test_ninetoothed.py).
        pytest.skip("slot 9 refuses 0 < dropout_p < 1")
    query = torch.randn(2, 4, length, 32, dtype=dtype, device=device)
    key = torch.randn(2, 2, length + 3, 32, dtype=dtype, device=device)
    value = torch.randn(2, 2, length + 3, 32, dtype=dtype, device=device)
    out = torch.empty_like(query)
    torch.manual_seed(1234)
    infini.ops.scaled_dot_product_attention(
        query, key, value, None, 0.25, causal, None, True, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    after_ours = torch.rand(3)
    torch.manual_seed(1234)
    expected = F.scaled_dot_product_attention(
        query, key, value, dropout_p=0.25, is_causal=causal, enable_gqa=True
    )
    after_torch = torch.rand(3)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.allclose(out.float(), expected.float(), rtol=tolerance,
                          atol=tolerance)  # fmt: skip
    # The generator advanced exactly as torch advances it.
    assert torch.equal(after_ours, after_torch)


def test_scaled_dot_product_attention_dropout_one_gives_zeros(
    device, implementation_index
):
    query = torch.randn(1, 2, 3, 8, device=device)
    out = torch.full_like(query, 7.0)
    infini.ops.scaled_dot_product_attention(
        query, query, query, None, 1.0, False, None, False, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    assert bool((out == 0).all())


def test_scaled_dot_product_attention_output_aliasing_query(
    device, implementation_index
):
    query = torch.randn(2, 3, 9, 16, device=device)
    key = torch.randn(2, 3, 11, 16, device=device)
    expected = _reference(query, key, key)
    infini.ops.scaled_dot_product_attention(
        query, key, key, query, implementation_index=implementation_index
    )
    assert torch.allclose(query.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"k": (2, 3, 5, 8)}, "with `enable_gqa`, the heads of `key`"),
        ({"gqa": False, "k": (2, 2, 5, 8)}, "the batch dimensions of `query`"),
        ({"k": (2, 4, 5, 7)}, "`key` must have 8 features"),
        ({"v": (2, 4, 6, 8)}, "`value` must have 5 positions"),
        ({"out": (2, 4, 3, 9)}, r"`out` must have shape \(2, 4, 3, 8\)"),
        ({"mask": torch.ones(3, 5, dtype=torch.bool), "causal": True},
         "`attn_mask` must be None when `is_causal`"),
        ({"mask": torch.ones(3, 5, dtype=torch.int32)}, "`attn_mask` must be bool"),
        ({"mask": torch.ones(2, 3, 3, 5, dtype=torch.bool)},
         "`attn_mask` of shape"),
        ({"dropout": 1.5}, r"`dropout_p` must lie in \[0, 1\]"),
        ({"dropout": -0.1}, r"`dropout_p` must lie in \[0, 1\]"),
    ],
)  # fmt: skip
def test_scaled_dot_product_attention_rejects_bad_arguments(kwargs, match, device):
    query = torch.randn(2, 4, 3, 8, device=device)
    key = torch.randn(kwargs.get("k", (2, 2, 5, 8)), device=device)
    value = torch.randn(kwargs.get("v", (2, 2, 5, 8)), device=device)
    out = torch.full(kwargs.get("out", (2, 4, 3, 8)), 7.0, device=device)
    mask = kwargs.get("mask")
    with pytest.raises(ValueError, match=f"`scaled_dot_product_attention`: {match}"):
        infini.ops.scaled_dot_product_attention(
            query, key, value, None if mask is None else mask.to(device),
            kwargs.get("dropout", 0.0), kwargs.get("causal", False), None,
            kwargs.get("gqa", True), out,
        )  # fmt: skip
    assert bool((out == 7.0).all())


def test_scaled_dot_product_attention_rejects_mixed_dtypes(device):
    query = torch.randn(1, 2, 3, 8, device=device)
    with pytest.raises(ValueError, match="`value` has dtype float16"):
        infini.ops.scaled_dot_product_attention(
            query, query, query.half(), torch.empty_like(query)
        )
