import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOLERANCES = {
    # Sums of a few hundred float32 products of magnitude ~1 to 10.
    torch.float32: dict(rtol=1e-5, atol=1e-3),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}

# (tokens, k, n, experts, top_k, group, block_size_m, block_size_k):
# decode-sized and prefill-sized batches, one group per block of k and
# several, experts left without tokens, one expert, top-1 routing.
CASES = (
    (1, 64, 24, 4, 2, 32, 16, 64),
    (5, 128, 40, 8, 2, 32, 4, 128),
    (33, 256, 16, 6, 3, 64, 16, 128),
    (3, 64, 10, 1, 1, 64, 8, 64),
    (20, 128, 33, 16, 4, 16, 8, 64),
)


def _quantised(experts, n, k, group, bit, with_zeros, dtype):
    codes = torch.randint(0, 2**bit, (experts, n, k), dtype=torch.int32)
    scales = (torch.rand(experts, n, k // group) / 16 + 1 / 64).to(dtype)
    zeros = torch.randint(0, 2**bit, (experts, n, k // group), dtype=torch.int32)
    if bit == 4:
        # Feature 2p in the low four bits of byte p, 2p + 1 in the high ones;
        # zero points paired the same way along n.
        packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
        packed_zeros = None
        if with_zeros:
            packed_zeros = (zeros[:, 0::2] | (zeros[:, 1::2] << 4)).to(torch.uint8)
    else:
        packed = codes.to(torch.uint8)
        packed_zeros = zeros.to(torch.uint8)
    if not with_zeros:
        zeros = torch.full_like(zeros, 8 if bit == 4 else 128)
        packed_zeros = None
    weights = (codes - zeros.repeat_interleave(group, 2)).double()
    weights = weights * scales.double().repeat_interleave(group, 2)
    return packed, scales, packed_zeros, weights


def _align(topk_ids, experts, block_size):
    numel = topk_ids.numel()
    places = numel + experts * (block_size - 1)
    sorted_ids = torch.empty(places, dtype=torch.int32)
    expert_ids = torch.empty(places // block_size, dtype=torch.int32)
    post_pad = torch.empty(1, dtype=torch.int32)
    infini.ops.moe_align_block_size(
        topk_ids, None, experts, block_size, sorted_ids, expert_ids, post_pad
    )
    return sorted_ids, expert_ids, post_pad


def _reference(input, weights, topk_ids, topk_weights, skipped=()):
    """Per entry: the dequantised expert matrix times the token's row, in
    float64, times the entry's top-k weight; skipped entries are 0."""
    tokens, top_k = topk_ids.shape
    out = torch.zeros(tokens, top_k, weights.shape[1], dtype=torch.float64)
    for token in range(tokens):
        for slot in range(top_k):
            if token * top_k + slot in skipped:
                continue
            expert = int(topk_ids[token, slot])
            value = weights[expert] @ input[token].double()
            if topk_weights is not None:
                value = value * float(topk_weights[token, slot])
            out[token, slot] = value
    return out


# (case, bit, zero points and top-k weights, dtype). Zero points and top-k
# weights: neither, both, and one without the other.
MODES = ((False, False), (True, True), (True, False))
COMBINATIONS = [
    (case, bit, mode, dtype)
    for case_index, case in enumerate(CASES)
    for bit in (4, 8)
    for mode_index, mode in enumerate(MODES)
    for dtype_index, dtype in enumerate(DTYPES)
    # Triton's interpreter spends milliseconds on each step of a kernel: it
    # runs a Latin square of the full product (every pair of case, mode and
    # dtype once, for both bit widths).
    if not TRITON_INTERPRETER or (case_index + mode_index + dtype_index) % 3 == 0
]


@pytest.mark.parametrize(
    "tokens, k, n, experts, top_k, group, block_m, block_k, bit, with_zeros, "
    "with_weights, dtype",
    [(*case, bit, *mode, dtype) for case, bit, mode, dtype in COMBINATIONS],
    ids=lambda value: str(value).removeprefix("torch."),
)
def test_moe_wna16_gemm(
    tokens, k, n, experts, top_k, group, block_m, block_k, bit, with_zeros,
    with_weights, dtype, device, implementation_index,
):  # fmt: skip
    if bit == 4 and with_zeros and n % 2:
        n += 1  # packed 4-bit zero points pair the columns
    input = torch.randn(tokens, k).to(dtype)
    packed, scales, zeros, weights = _quantised(
        experts, n, k, group, bit, with_zeros, dtype
    )
    topk_ids = torch.stack(
        [torch.randperm(experts)[:top_k] for _ in range(tokens)]
    ).int()
    topk_weights = torch.rand(tokens, top_k) if with_weights else None
    sorted_ids, expert_ids, post_pad = _align(topk_ids, experts, block_m)
    output = torch.full((tokens, top_k, n), float("nan"), dtype=dtype, device=device)
    infini.ops.moe_wna16_gemm(
        input.to(device), packed.to(device), scales.to(device),
        None if zeros is None else zeros.to(device),
        None if topk_weights is None else topk_weights.to(device),
        sorted_ids.to(device), expert_ids.to(device), post_pad.to(device),
        top_k, block_m, 16, block_k, bit, output,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected = _reference(input, weights, topk_ids, topk_weights)
    torch.testing.assert_close(
        output.cpu().double(), expected.to(dtype).double(), **TOLERANCES[dtype]
    )


# (tokens, k, n, experts, top_k, group, block_size_m, bit, dtype): group
# sizes that are not a multiple of 16 (per-feature scales in the CUDA-like
# kernel), a block size that is not a power of two, more columns than one
# tile of the CUDA-like kernel covers (64 on GPUs, 256 in the interpreter),
# and no tokens at all.
LAYOUT_CASES = (
    (7, 48, 20, 3, 2, 6, 12, 4, torch.float16),
    (4, 96, 18, 2, 2, 24, 5, 8, torch.bfloat16),
    (3, 64, 300, 2, 1, 64, 4, 4, torch.float32),
    (0, 64, 16, 2, 2, 32, 4, 8, torch.float16),
)


@pytest.mark.parametrize(
    "tokens, k, n, experts, top_k, group, block_m, bit, dtype", LAYOUT_CASES
)
def test_moe_wna16_gemm_groups_tiles_and_strides(
    tokens, k, n, experts, top_k, group, block_m, bit, dtype, device,
    implementation_index,
):  # fmt: skip
    # Codes, scales and zero points are strided views (every other byte or
    # element of a larger buffer); the output is 2-D.
    input = torch.randn(tokens, k).to(dtype)
    packed, scales, zeros, weights = _quantised(experts, n, k, group, bit, True, dtype)
    packed = torch.stack((packed, packed), 3).flatten(2)[..., ::2]
    zeros = torch.stack((zeros, zeros), 2).flatten(1, 2)[:, ::2]
    scales = scales.transpose(1, 2).contiguous().transpose(1, 2)
    topk_ids = torch.zeros(tokens, top_k, dtype=torch.int32)
    for token in range(tokens):
        topk_ids[token] = torch.randperm(experts)[:top_k]
    topk_weights = torch.rand(tokens, top_k)
    sorted_ids, expert_ids, post_pad = _align(topk_ids, experts, block_m)
    output = torch.full((tokens * top_k, n), float("nan"), dtype=dtype, device=device)
    infini.ops.moe_wna16_gemm(
        input.to(device), packed.to(device), scales.to(device), zeros.to(device),
        topk_weights.to(device), sorted_ids.to(device), expert_ids.to(device),
        post_pad.to(device), top_k, block_m, 16, k, bit, output,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected = _reference(input, weights, topk_ids, topk_weights)
    torch.testing.assert_close(
        output.cpu().double(),
        expected.reshape(tokens * top_k, n).to(dtype).double(),
        **TOLERANCES[dtype],
    )


def test_moe_wna16_gemm_skipped_blocks_and_layouts(device, implementation_index):
    # A block of another rank's expert (-1) and one past `num_tokens_post_pad`
    # leave their entries 0; int64 routing ids, a strided input, strided
    # scales and top-k weights, and a 2-D transposed output.
    tokens, k, n, experts, top_k, group, block_m = 6, 64, 12, 4, 2, 32, 4
    dtype = torch.bfloat16
    input = torch.randn(k, tokens).to(dtype).t()
    packed, scales, zeros, weights = _quantised(experts, n, k, group, 4, True, dtype)
    scales = torch.stack((scales, torch.zeros_like(scales)), 3).flatten(2)[..., ::2]
    topk_ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    topk_weights = torch.rand(top_k, tokens).t()
    sorted_ids, expert_ids, post_pad = _align(topk_ids.int(), experts, block_m)
    expert_ids[0] = -1
    skipped = set(sorted_ids[:block_m].tolist())
    last = (int(post_pad) - 1) // block_m
    skipped |= set(sorted_ids[last * block_m : (last + 1) * block_m].tolist())
    post_pad = torch.tensor([last * block_m], dtype=torch.int64)
    output = torch.full((n, tokens * top_k), float("nan"), dtype=dtype).t()
    infini.ops.moe_wna16_gemm(
        input, packed, scales, zeros, topk_weights, sorted_ids.long(),
        expert_ids.long(), post_pad, top_k, block_m, 16, 64, 4, output,
        implementation_index=implementation_index,
    )  # fmt: skip
    expected = _reference(input, weights, topk_ids, topk_weights, skipped)
    torch.testing.assert_close(
        output.double(),
        expected.reshape(tokens * top_k, n).to(dtype).double(),
        **TOLERANCES[dtype],
    )


def test_moe_wna16_gemm_output_overlapping_input(device, implementation_index):
    # The output is written over the input's memory: the input is read first.
    tokens, k, n, experts, top_k = 2, 32, 16, 2, 1
    memory = torch.randn(tokens * k)
    input = memory.view(tokens, k)
    packed, scales, _, weights = _quantised(experts, n, k, 32, 8, False, torch.float32)
    topk_ids = torch.tensor([[0], [1]], dtype=torch.int32)
    sorted_ids, expert_ids, post_pad = _align(topk_ids, experts, 4)
    expected = _reference(input.clone(), weights, topk_ids, None)
    output = memory[: tokens * n].view(tokens, top_k, n)
    infini.ops.moe_wna16_gemm(
        input, packed, scales, None, None, sorted_ids, expert_ids, post_pad,
        top_k, 4, 16, 32, 8, output, implementation_index=implementation_index,
    )  # fmt: skip
    torch.testing.assert_close(output.double(), expected, **TOLERANCES[torch.float32])


def _arguments(**changes):
    values = {
        "input": torch.zeros(2, 64, dtype=torch.float16),
        "b_qweight": torch.zeros(3, 8, 32, dtype=torch.uint8),
        "b_scales": torch.ones(3, 8, 2, dtype=torch.float16),
        "b_qzeros": None,
        "topk_weights": None,
        "sorted_token_ids": torch.zeros(16, dtype=torch.int32),
        "expert_ids": torch.zeros(4, dtype=torch.int32),
        "num_tokens_post_pad": torch.zeros(1, dtype=torch.int32),
        "top_k": 2,
        "block_size_m": 4,
        "block_size_n": 16,
        "block_size_k": 64,
        "bit": 4,
        "output": torch.empty(2, 2, 8, dtype=torch.float16),
    }
    values.update(changes)
    return list(values.values())


@pytest.mark.parametrize(
    "arguments, message",
    [
        (_arguments(input=torch.zeros(2, 64)), "`b_scales` has dtype float16"),
        (
            _arguments(input=torch.zeros(2, 64, dtype=torch.int32)),
            "`input` has dtype int32",
        ),
        (_arguments(bit=2), "`bit` must be 4 or 8"),
        (_arguments(top_k=0), "`top_k` must be at least 1"),
        (
            _arguments(b_qweight=torch.zeros(3, 8, 64, dtype=torch.uint8)),
            "`b_qweight` must have shape",
        ),
        (
            _arguments(b_scales=torch.ones(3, 8, 3, dtype=torch.float16)),
            "`b_scales` must have shape",
        ),
        (
            _arguments(b_qzeros=torch.zeros(3, 8, 2, dtype=torch.uint8)),
            "`b_qzeros` must have shape",
        ),
        (
            _arguments(topk_weights=torch.ones(2, 3)),
            r"`topk_weights` must have shape \(2, 2\)",
        ),
        (
            _arguments(sorted_token_ids=torch.zeros(16)),
            "`sorted_token_ids` has dtype float32",
        ),
        (
            _arguments(num_tokens_post_pad=torch.zeros(2, dtype=torch.int32)),
            "`num_tokens_post_pad` must hold one element",
        ),
        (_arguments(block_size_m=65), "`block_size_m` must be in"),
        (_arguments(block_size_k=48), "`block_size_k` must divide"),
        (_arguments(block_size_k=16), "`block_size_k` must divide"),
        (
            _arguments(output=torch.empty(2, 8, dtype=torch.float16)),
            "`output` must have shape",
        ),
    ],
)
def test_moe_wna16_gemm_rejects(arguments, message, device, implementation_index):
    with pytest.raises(ValueError, match=message) as error:
        infini.ops.moe_wna16_gemm(*arguments, implementation_index=implementation_index)
    assert "moe_wna16_gemm" in str(error.value)
