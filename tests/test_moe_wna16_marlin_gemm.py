import pytest
import torch

import infini.ops
from tests._marlin import awq_pack, gptq_pack, marlin_bias, marlin_scales, marlin_zeros

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TOLERANCES = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}

# vLLM `ScalarType.id`s: name -> (id, bits, code bias, zero points).
TYPES = {
    "uint4b8": (1125899907892224, 4, 8, False),
    "uint8b128": (1125899923621888, 8, 128, False),
    "uint4": (1125899906843648, 4, 0, True),
    "uint8": (1125899906844672, 8, 0, True),
}


class Experts:
    """Random quantised experts: the logical codes, scales, zero points and
    biases, and their Marlin forms (weights repacked by the library's own
    repacks, the rest permuted by the test's helpers)."""

    def __init__(
        self, experts, size_k, size_n, type_name, groups, dtype, bias, act_order
    ):
        _, bits, code_bias, has_zeros = TYPES[type_name]
        self.bits, self.groups = bits, groups
        self.codes = torch.randint(0, 1 << bits, (experts, size_k, size_n))
        # Scales exact in every dtype: small multiples of a power of two.
        steps = torch.randint(1, 16, (experts, groups, size_n))
        self.scales = (steps.to(torch.float32) / 2 ** (bits + 6)).to(dtype)
        if has_zeros:
            self.zeros = torch.randint(0, 1 << bits, (experts, groups, size_n))
        else:
            self.zeros = torch.full((experts, groups, size_n), code_bias)
        self.bias = torch.randn(experts, size_n).to(dtype) if bias else None
        # Row `k` of the original matrix belongs to group `g_idx[k]`; with
        # act-order the groups are shuffled over the rows.
        group_size = size_k // groups
        rows = torch.arange(size_k) // group_size
        self.g_idx = torch.stack(
            [
                rows[torch.randperm(size_k)] if act_order else rows
                for _ in range(experts)
            ]
        )
        self.act_order = act_order
        packed = []
        self.perm, self.sorted_g_idx = [], []
        for e in range(experts):
            pack = 32 // bits
            out = torch.empty(size_k // 16, size_n * 16 // pack, dtype=torch.int32)
            if has_zeros:
                infini.ops.awq_marlin_repack(
                    awq_pack(self.codes[e], bits), size_k, size_n, bits, False, out
                )
            else:
                perm = (
                    torch.argsort(self.g_idx[e], stable=True).int()
                    if act_order
                    else torch.empty(0, dtype=torch.int32)
                )
                infini.ops.gptq_marlin_repack(
                    gptq_pack(self.codes[e], bits), perm, size_k, size_n, bits, False,
                    out,
                )  # fmt: skip
                if act_order:
                    self.perm.append(perm)
                    self.sorted_g_idx.append(self.g_idx[e][perm.long()].int())
            packed.append(out)
        self.b_q_weight = torch.stack(packed)
        self.b_scales = marlin_scales(self.scales).contiguous()
        self.b_zeros = marlin_zeros(self.zeros, bits) if has_zeros else None
        self.b_bias = None if self.bias is None else marlin_bias(self.bias)
        if act_order:
            self.perm = torch.stack(self.perm)
            self.sorted_g_idx = torch.stack(self.sorted_g_idx)
        else:
            self.perm = self.sorted_g_idx = None

    def dequantised(self, e):
        """Expert `e`'s ``(size_k, size_n)`` weight in float64."""
        group = self.g_idx[e]
        scales = self.scales[e].double()[group]
        zeros = self.zeros[e].double()[group]
        return (self.codes[e].double() - zeros) * scales


def _route(tokens, experts, top_k, block, id_dtype=torch.int32):
    scores = torch.rand(tokens, experts)
    topk_ids = scores.topk(top_k, dim=1).indices.to(id_dtype)
    topk_weights = torch.rand(tokens, top_k)
    numel = tokens * top_k
    places = numel + experts * (block - 1)
    sorted_ids = torch.empty(places, dtype=id_dtype)
    expert_ids = torch.empty(places // block, dtype=id_dtype)
    padded = torch.empty(1, dtype=id_dtype)
    infini.ops.moe_align_block_size(
        topk_ids, None, experts, block, sorted_ids, expert_ids, padded
    )
    return topk_ids, topk_weights, sorted_ids, expert_ids, padded, block


def _reference(a, model, topk_ids, topk_weights, top_k, mul_topk, skipped=()):
    """Rows of ``a @ W_e + bias_e`` (times the routing weight) per entry,
    float64; NaN for entries of `skipped` experts."""
    entries = topk_ids.numel()
    size_n = model.codes.shape[2]
    result = torch.full((entries, size_n), float("nan"), dtype=torch.float64)
    flat_ids = topk_ids.reshape(-1).long()
    flat_weights = topk_weights.reshape(-1).double()
    for t in range(entries):
        e = int(flat_ids[t])
        if e in skipped:
            continue
        row = a[t // top_k].double() @ model.dequantised(e)
        if model.bias is not None:
            row = row + model.bias[e].double()
        result[t] = row * flat_weights[t] if mul_topk else row
    return result


def _call(a, model, routing, top_k, mul_topk, out, index, **changes):
    topk_ids, topk_weights, sorted_ids, expert_ids, padded, block = routing
    size_m, size_k = a.shape
    arguments = {
        "a": a,
        "b_q_weight": model.b_q_weight,
        "b_bias_or_none": model.b_bias,
        "b_scales": model.b_scales,
        "a_scales": None,
        "global_scale": None,
        "b_zeros_or_none": model.b_zeros,
        "g_idx_or_none": model.sorted_g_idx,
        "perm_or_none": model.perm,
        "workspace": torch.zeros(64, dtype=torch.int32),
        "sorted_token_ids": sorted_ids,
        "expert_ids": expert_ids,
        "num_tokens_past_padded": padded,
        "topk_weights": topk_weights,
        "moe_block_size": block,
        "top_k": top_k,
        "mul_topk_weights": mul_topk,
        "b_type_id": TYPES[model.type_name][0],
        "size_m": size_m,
        "size_n": model.codes.shape[2],
        "size_k": size_k,
        "is_full_k": True,
        "use_atomic_add": False,
        "use_fp32_reduce": True,
        "is_zp_float": False,
        "thread_k": -1,
        "thread_n": -1,
        "blocks_per_sm": -1,
        "out": out,
    }
    arguments.update(changes)
    infini.ops.moe_wna16_marlin_gemm(**arguments, implementation_index=index)


def _model(type_name, dtype, experts=4, size_k=64, size_n=128, groups=2, **options):
    model = Experts(
        experts,
        size_k,
        size_n,
        type_name,
        groups,
        dtype,
        options.get("bias", False),
        options.get("act_order", False),
    )
    model.type_name = type_name
    return model


def _check(out, expected, dtype):
    tolerance = TOLERANCES[dtype]
    scale = expected.nan_to_num(0.0).abs().max().item() if expected.numel() else 1.0
    torch.testing.assert_close(
        out.double(),
        expected.to(dtype).double(),
        rtol=tolerance,
        atol=tolerance * scale,
        equal_nan=True,
    )


# tokens, top_k, groups, moe_block_size, bias, mul_topk_weights: decode,
# prefill with several blocks per expert, channelwise scales (one group),
# the smallest and largest blocks.
CASES = (
    (1, 2, 2, 16, False, False),
    (21, 2, 4, 16, True, True),
    (9, 3, 1, 8, True, False),
    (17, 1, 2, 64, False, True),
)


@pytest.mark.parametrize("tokens, top_k, groups, block, bias, mul_topk", CASES)
@pytest.mark.parametrize("type_name", sorted(TYPES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_wna16_marlin_gemm(
    tokens, top_k, groups, block, bias, mul_topk, type_name, dtype, device,
    implementation_index,
):  # fmt: skip
    model = _model(type_name, dtype, groups=groups, bias=bias)
    a = torch.randn(tokens, 64).to(dtype)
    routing = _route(tokens, 4, top_k, block)
    out = torch.full((tokens * top_k, 128), float("nan"), dtype=dtype)
    _call(a, model, routing, top_k, mul_topk, out, implementation_index)
    expected = _reference(a, model, routing[0], routing[1], top_k, mul_topk)
    _check(out, expected, dtype)


@pytest.mark.parametrize("type_name", ("uint4b8", "uint8b128"))
@pytest.mark.parametrize("is_full_k", (True, False))
@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_wna16_marlin_gemm_act_order(
    type_name, is_full_k, dtype, device, implementation_index
):
    # GPTQ `desc_act`: rows shuffled over groups, repacked in group order.
    model = _model(type_name, dtype, size_k=128, groups=4, bias=True, act_order=True)
    a = torch.randn(7, 128).to(dtype)
    routing = _route(7, 4, 2, 16)
    out = torch.full((14, 128), float("nan"), dtype=dtype)
    _call(a, model, routing, 2, True, out, implementation_index, is_full_k=is_full_k)
    _check(out, _reference(a, model, routing[0], routing[1], 2, True), dtype)


def test_moe_wna16_marlin_gemm_second_product(device, implementation_index):
    # The down projection: one row per (token, slot), `top_k` 1, weighted.
    tokens, top_k = 6, 2
    model = _model("uint4", torch.bfloat16, size_k=128, size_n=64, groups=1)
    routing = _route(tokens, 4, top_k, 16)
    a = torch.randn(tokens * top_k, 128).to(torch.bfloat16)
    out = torch.full((tokens * top_k, 64), float("nan"), dtype=torch.bfloat16)
    _call(a, model, routing, 1, True, out, implementation_index)
    # Entry `t` multiplies row `t` of `a`: the reference's token is `t / 1`.
    expected = _reference(a, model, routing[0], routing[1], 1, True)
    _check(out, expected, torch.bfloat16)


def test_moe_wna16_marlin_gemm_skips_other_ranks_experts(device, implementation_index):
    # Blocks of expert 2 marked -1 (another rank's) are skipped: their rows
    # keep what `out` held. int64 routing tensors.
    model = _model("uint4b8", torch.float16)
    routing = list(_route(8, 4, 2, 16, id_dtype=torch.int64))
    expert_ids, padded = routing[3], routing[4]
    blocks = int(padded) // 16
    expert_ids[:blocks][expert_ids[:blocks] == 2] = -1
    a = torch.randn(8, 64).to(torch.float16)
    out = torch.full((16, 128), float("nan"), dtype=torch.float16)
    _call(a, model, routing, 2, False, out, implementation_index)
    expected = _reference(a, model, routing[0], routing[1], 2, False, skipped=(2,))
    assert expected.isnan().any() and not expected.isnan().all()
    _check(out, expected, torch.float16)


def test_moe_wna16_marlin_gemm_ignores_gpu_tuning(device, implementation_index):
    model = _model("uint8", torch.float32)
    routing = _route(5, 4, 2, 16)
    a = torch.randn(5, 64)
    first = torch.empty(10, 128)
    second = torch.empty(10, 128)
    _call(a, model, routing, 2, True, first, implementation_index)
    _call(
        a, model, routing, 2, True, second, implementation_index,
        thread_k=64, thread_n=128, blocks_per_sm=2, use_atomic_add=True,
        use_fp32_reduce=False, workspace=torch.zeros(1, dtype=torch.int32),
    )  # fmt: skip
    assert torch.equal(first, second)


def test_weight_type_ids_are_vllms():
    scalar_type = pytest.importorskip("vllm.scalar_type")
    for name, (id, *_) in TYPES.items():
        assert getattr(scalar_type.scalar_types, name).id == id


def _base():
    model = _model("uint4b8", torch.float16, experts=2, size_k=32, size_n=64, groups=2)
    routing = _route(3, 2, 2, 16)
    a = torch.randn(3, 32).to(torch.float16)
    out = torch.zeros(6, 64, dtype=torch.float16)
    return a, model, routing, out


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"b_type_id": 7}, "`b_type_id` 7 is not a supported weight type"),
        ({"size_k": 24}, "`size_k` must be a positive multiple of 16"),
        ({"size_n": 96}, "`size_n` must be a positive multiple of 64"),
        ({"top_k": 0}, "`top_k` must be positive"),
        ({"moe_block_size": 24}, "`moe_block_size` must be one of"),
        ({"a_scales": torch.ones(3)}, "`a_scales` must be None"),
        ({"global_scale": torch.ones(1)}, "`global_scale` must be None"),
        ({"is_zp_float": True}, "`is_zp_float` must be False"),
        ({"thread_k": 0}, "`thread_k` must be -1 or positive"),
        ({"thread_n": 48}, r"`thread_n` \(48\) must divide `size_n` \(64\)"),
        ({"a": torch.zeros(3, 32, dtype=torch.float64)}, "`a` has dtype float64"),
        ({"a": torch.zeros(4, 32).half(), "size_m": 3}, "`a` must have shape"),
        ({"b_q_weight": torch.zeros(2, 2, 64, dtype=torch.int32)}, "`b_q_weight`"),
        ({"b_scales": torch.ones(2, 2, 64)}, "`b_scales` has dtype float32"),
        ({"b_scales": torch.ones(2, 3, 64).half()}, "groups dividing `size_k`"),
        ({"b_zeros_or_none": torch.zeros(2, 2, 8, dtype=torch.int32)}, "must be None"),
        ({"b_type_id": TYPES["uint4"][0]}, "`b_zeros_or_none` is required"),
        ({"b_bias_or_none": torch.zeros(2, 32).half()}, "`b_bias_or_none` must"),
        ({"g_idx_or_none": torch.zeros(2, 32, dtype=torch.int32)}, "both be given"),
        ({"topk_weights": torch.ones(5)}, "`topk_weights` must hold"),
        ({"topk_weights": torch.ones(6).double()}, "`topk_weights` has dtype"),
        ({"expert_ids": torch.zeros(3, dtype=torch.int64)}, "`expert_ids` has dtype"),
        ({"num_tokens_past_padded": torch.zeros(2, dtype=torch.int32)}, "exactly one"),
        ({"out": torch.zeros(3, 64, dtype=torch.float16)}, "`out` must have shape"),
        ({"out": torch.zeros(6, 64)}, "`out` has dtype float32"),
        ({"out": torch.zeros(64, 6, dtype=torch.float16).t()}, "`out` must be packed"),
    ],
)
def test_moe_wna16_marlin_gemm_rejects(changes, message, device, implementation_index):
    a, model, routing, out = _base()
    changes = dict(changes)
    a, top_k = changes.pop("a", a), changes.pop("top_k", 2)
    out = changes.pop("out", out)
    before = out.clone()
    with pytest.raises(ValueError, match=f"`moe_wna16_marlin_gemm`.*{message}"):
        _call(a, model, routing, top_k, True, out, implementation_index, **changes)
    assert torch.equal(out, before)


def test_moe_wna16_marlin_gemm_rejects_act_order_with_one_group(
    device, implementation_index
):
    a, model, routing, out = _base()
    index = torch.zeros(2, 32, dtype=torch.int32)
    with pytest.raises(ValueError, match="needs more than one group"):
        _call(
            a, model, routing, 2, True, out, implementation_index,
            b_scales=model.b_scales[:, :1].contiguous(), g_idx_or_none=index,
            perm_or_none=index,
        )  # fmt: skip


@pytest.mark.parametrize("case", ("padded", "expert", "token", "perm", "group"))
def test_moe_wna16_marlin_gemm_rejects_bad_routing_data(
    case, device, implementation_index
):
    a, model, routing, out = _base()
    topk_ids, topk_weights, sorted_ids, expert_ids, padded, block = routing
    index = torch.arange(32, dtype=torch.int32).repeat(2, 1)
    groups = (torch.arange(32, dtype=torch.int32) // 16).repeat(2, 1)
    changes = {}
    if case == "padded":
        padded[0] = 8
        message = r"`num_tokens_past_padded` is 8"
    elif case == "expert":
        expert_ids[0] = 2
        message = r"`expert_ids\[0\]` is 2, out of the range \[-1, 2\)"
    elif case == "token":
        sorted_ids[1] = -3
        message = r"`sorted_token_ids\[1\]` is -3"
    elif case == "perm":
        index[1, 4] = 32
        changes = {"g_idx_or_none": groups, "perm_or_none": index}
        message = r"`perm_or_none\[1, 4\]` is 32"
    else:
        groups[0, 7] = 2
        changes = {"g_idx_or_none": groups, "perm_or_none": index, "is_full_k": False}
        message = r"`g_idx_or_none\[0, 7\]` is 2, out of the range \[0, 2\)"
    before = out.clone()
    with pytest.raises(ValueError, match=message):
        _call(a, model, routing, 2, True, out, implementation_index, **changes)
    assert torch.equal(out, before)
