import pytest
import torch

import infini.ops
from tests._marlin import awq_pack, gptq_pack, marlin_unpack, vllm_layout

# size_k, size_n: one tile, several tiles both ways, a 32-row multiple for
# the 8-bit-activation layout, and an empty matrix.
SHAPES = ((16, 64), (64, 128), (96, 192), (32, 64), (0, 64))
BITS = (4, 8)


def _repack(packed, size_k, size_n, num_bits, is_a_8bit, index):
    pack = 32 // num_bits
    out = torch.full(
        (size_k // 16, size_n * 16 // pack), -7, dtype=torch.int32, device=packed.device
    )
    infini.ops.awq_marlin_repack(
        packed, size_k, size_n, num_bits, is_a_8bit, out, implementation_index=index
    )
    return out.cpu()


@pytest.mark.parametrize("size_k, size_n", SHAPES)
@pytest.mark.parametrize("num_bits", BITS)
@pytest.mark.parametrize("is_a_8bit", (False, True))
def test_awq_marlin_repack(
    size_k, size_n, num_bits, is_a_8bit, device, implementation_index
):
    if is_a_8bit and size_k % 32:
        pytest.skip("the 8-bit-activation layout needs 32-row blocks")
    weight = torch.randint(0, 1 << num_bits, (size_k, size_n))
    out = _repack(
        awq_pack(weight, num_bits).to(device),
        size_k,
        size_n,
        num_bits,
        is_a_8bit,
        implementation_index,
    )
    assert torch.equal(marlin_unpack(out, size_k, size_n, num_bits, is_a_8bit), weight)


@pytest.mark.parametrize("num_bits", BITS)
@pytest.mark.parametrize("is_a_8bit", (False, True))
def test_awq_and_gptq_repacks_agree(num_bits, is_a_8bit, device, implementation_index):
    # One matrix in both source formats gives one Marlin tensor.
    size_k, size_n = 64, 128
    weight = torch.randint(0, 1 << num_bits, (size_k, size_n))
    awq = _repack(
        awq_pack(weight, num_bits).to(device),
        size_k,
        size_n,
        num_bits,
        is_a_8bit,
        implementation_index,
    )
    gptq = torch.empty_like(awq, device=device)
    infini.ops.gptq_marlin_repack(
        gptq_pack(weight, num_bits).to(device),
        torch.empty(0, dtype=torch.int32, device=device),
        size_k,
        size_n,
        num_bits,
        is_a_8bit,
        gptq,
    )
    assert torch.equal(awq, gptq.cpu())


@pytest.mark.parametrize("num_bits", BITS)
@pytest.mark.parametrize("is_a_8bit", (False, True))
def test_awq_marlin_repack_matches_vllm(
    num_bits, is_a_8bit, device, implementation_index
):
    vllm, reason = vllm_layout()
    if vllm is None:
        pytest.skip(reason)
    size_k, size_n = 64, 128
    weight = torch.randint(0, 1 << num_bits, (size_k, size_n))
    # vLLM's own AWQ packing, so that its order is checked too.
    packed = vllm["awq_pack"](weight.int(), num_bits, size_k, size_n)
    try:
        expected = vllm["marlin_weights"](
            weight,
            size_k,
            size_n,
            num_bits,
            vllm["get_weight_perm"](num_bits, is_a_8bit),
            is_a_8bit=is_a_8bit,
        )
    except TypeError:
        pytest.skip("this vLLM's layout helpers predate `is_a_8bit`")
    out = _repack(
        packed.to(device), size_k, size_n, num_bits, is_a_8bit, implementation_index
    )
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_bits": 2}, "`num_bits` must be 4 or 8, got 2"),
        ({"size_k": 8}, "`size_k` must be a non-negative multiple of 16"),
        ({"size_n": -64}, "`size_n` must be a non-negative multiple of 64"),
        ({"size_k": 16, "is_a_8bit": True}, "`size_k` must be .* multiple of 32"),
        (
            {"b_q_weight": torch.zeros(64, 8, dtype=torch.uint8)},
            "`b_q_weight` has dtype uint8",
        ),
        (
            {"b_q_weight": torch.zeros(8, 64, dtype=torch.int32)},
            r"`b_q_weight` must have shape \(64, 8\)",
        ),
        (
            {"b_q_weight": torch.zeros(8, 64, dtype=torch.int32).t()},
            "`b_q_weight` must be packed",
        ),
        (
            {"out": torch.zeros(4, 129, dtype=torch.int32)},
            r"`out` must have shape \(4, 128\)",
        ),
        ({"out": torch.zeros(4, 128, dtype=torch.int64)}, "`out` has dtype int64"),
    ],
)
def test_awq_marlin_repack_rejects(changes, message, device, implementation_index):
    arguments = {
        "b_q_weight": torch.zeros(64, 8, dtype=torch.int32),
        "size_k": 64,
        "size_n": 64,
        "num_bits": 4,
        "is_a_8bit": False,
        "out": torch.zeros(4, 128, dtype=torch.int32),
    }
    arguments.update(changes)
    before = arguments["out"].clone()
    with pytest.raises(ValueError, match=f"`awq_marlin_repack`.*{message}"):
        infini.ops.awq_marlin_repack(
            **arguments, implementation_index=implementation_index
        )
    assert torch.equal(arguments["out"], before)
