import pytest
import torch

import infini.ops
from tests._marlin import gptq_pack, marlin_unpack, vllm_layout

# size_k, size_n: one tile, several tiles both ways, a 32-row multiple for
# the 8-bit-activation layout, and an empty matrix.
SHAPES = ((16, 64), (64, 128), (96, 192), (32, 64), (0, 64))
BITS = (4, 8)


def _case(size_k, size_n, num_bits):
    weight = torch.randint(0, 1 << num_bits, (size_k, size_n))
    return weight, gptq_pack(weight, num_bits)


def _repack(packed, perm, size_k, size_n, num_bits, is_a_8bit, index):
    pack = 32 // num_bits
    out = torch.full((size_k // 16, size_n * 16 // pack), -7, dtype=torch.int32)
    infini.ops.gptq_marlin_repack(
        packed,
        perm,
        size_k,
        size_n,
        num_bits,
        is_a_8bit,
        out,
        implementation_index=index,
    )
    return out


@pytest.mark.parametrize("size_k, size_n", SHAPES)
@pytest.mark.parametrize("num_bits", BITS)
@pytest.mark.parametrize("is_a_8bit", (False, True))
@pytest.mark.parametrize("act_order", (False, True))
def test_gptq_marlin_repack(
    size_k, size_n, num_bits, is_a_8bit, act_order, device, implementation_index
):
    if is_a_8bit and size_k % 32:
        pytest.skip("the 8-bit-activation layout needs 32-row blocks")
    weight, packed = _case(size_k, size_n, num_bits)
    perm = torch.randperm(size_k).int() if act_order else torch.empty(0).int()
    out = _repack(
        packed.to(device),
        perm.to(device),
        size_k,
        size_n,
        num_bits,
        is_a_8bit,
        implementation_index,
    )
    expected = weight[perm.long()] if act_order else weight
    unpacked = marlin_unpack(out.cpu(), size_k, size_n, num_bits, is_a_8bit)
    assert torch.equal(unpacked, expected)


@pytest.mark.parametrize("num_bits", BITS)
@pytest.mark.parametrize("is_a_8bit", (False, True))
def test_gptq_marlin_repack_matches_vllm(
    num_bits, is_a_8bit, device, implementation_index
):
    vllm, reason = vllm_layout()
    if vllm is None:
        pytest.skip(reason)
    size_k, size_n = 64, 128
    weight, packed = _case(size_k, size_n, num_bits)
    perm = torch.randperm(size_k).int()
    try:
        weight_perm = vllm["get_weight_perm"](num_bits, is_a_8bit)
        expected = vllm["marlin_weights"](
            weight[perm.long()],
            size_k,
            size_n,
            num_bits,
            weight_perm,
            is_a_8bit=is_a_8bit,
        )
    except TypeError:
        pytest.skip("this vLLM's layout helpers predate `is_a_8bit`")
    out = _repack(
        packed.to(device),
        perm.to(device),
        size_k,
        size_n,
        num_bits,
        is_a_8bit,
        implementation_index,
    )
    assert torch.equal(out.cpu(), expected)


# Hand-derived from the layout: lane `t` of the 16 x 16 fragment holds rows
# 2 (t % 4) + {0, 1, 8, 9} (8-bit activations: 4 (t % 4) + {0..3, 16..19})
# of columns t / 4 and t / 4 + 8; at 4 bits int32 `4 t + tile` holds lane
# t's eight codes of 16-column tile `tile`, interleaved. Places inside the
# first block: (num_bits, is_a_8bit, {(row, column): (int32, code)}).
KNOWN = (
    (4, False, {(0, 0): (0, 0), (8, 0): (0, 1), (0, 8): (0, 2), (8, 8): (0, 3),
                (1, 0): (0, 4), (9, 0): (0, 5), (1, 8): (0, 6), (9, 8): (0, 7),
                (0, 16): (1, 0), (2, 0): (4, 0), (0, 1): (16, 0)}),
    (8, False, {(0, 0): (0, 0), (8, 0): (0, 1), (1, 0): (0, 2), (9, 0): (0, 3),
                (0, 8): (1, 0), (9, 8): (1, 3), (0, 16): (2, 0)}),
    (4, True, {(0, 0): (0, 0), (16, 0): (0, 1), (1, 0): (0, 2), (17, 0): (0, 3),
               (2, 0): (0, 4), (18, 0): (0, 5), (3, 0): (0, 6), (19, 0): (0, 7),
               (0, 8): (1, 0), (0, 16): (2, 0), (4, 0): (4, 0)}),
    (8, True, {(0, 0): (0, 0), (1, 0): (0, 1), (2, 0): (0, 2), (3, 0): (0, 3),
               (16, 0): (1, 0), (0, 8): (2, 0)}),
)  # fmt: skip


@pytest.mark.parametrize("num_bits, is_a_8bit, places", KNOWN)
def test_gptq_marlin_repack_known_places(
    num_bits, is_a_8bit, places, device, implementation_index
):
    size_k, size_n = 64, 128
    pack = 32 // num_bits
    block_rows, block_columns = (32, 32) if is_a_8bit else (16, 64)
    for (row, column), (word, position) in places.items():
        # The same place in the next block along n, and in the next row
        # block: blocks are 1024 codes, row blocks `block_rows * size_n`.
        for row_shift, column_shift, word_shift in (
            (0, 0, 0),
            (0, block_columns, 1024 // pack),
            (block_rows, 0, block_rows * size_n // pack),
        ):
            weight = torch.zeros(size_k, size_n, dtype=torch.int64)
            weight[row + row_shift, column + column_shift] = 5
            out = (
                _repack(
                    gptq_pack(weight, num_bits).to(device),
                    torch.empty(0).int().to(device),
                    size_k,
                    size_n,
                    num_bits,
                    is_a_8bit,
                    implementation_index,
                )
                .cpu()
                .reshape(-1)
            )
            expected = torch.zeros_like(out)
            expected[word + word_shift] = 5 << (num_bits * position)
            assert torch.equal(out, expected), (row, column, row_shift, column_shift)


def _arguments(**changes):
    arguments = {
        "b_q_weight": torch.zeros(8, 64, dtype=torch.int32),
        "perm": torch.empty(0, dtype=torch.int32),
        "size_k": 64,
        "size_n": 64,
        "num_bits": 4,
        "is_a_8bit": False,
        "out": torch.zeros(4, 128, dtype=torch.int32),
    }
    arguments.update(changes)
    return arguments


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_bits": 3}, "`num_bits` must be 4 or 8, got 3"),
        ({"size_k": 40}, "`size_k` must be a non-negative multiple of 16"),
        ({"size_n": 96}, "`size_n` must be a non-negative multiple of 64"),
        ({"size_k": 48, "is_a_8bit": True}, "`size_k` must be .* multiple of 32"),
        (
            {"b_q_weight": torch.zeros(8, 64, dtype=torch.int64)},
            "`b_q_weight` has dtype int64",
        ),
        (
            {"b_q_weight": torch.zeros(16, 64, dtype=torch.int32)},
            r"`b_q_weight` must have shape \(8, 64\)",
        ),
        (
            {"out": torch.zeros(4, 64, dtype=torch.int32)},
            r"`out` must have shape \(4, 128\)",
        ),
        ({"out": torch.zeros(4, 128, dtype=torch.float32)}, "`out` has dtype float32"),
        ({"out": torch.zeros(128, 4, dtype=torch.int32).t()}, "`out` must be packed"),
        (
            {"perm": torch.arange(32).int()},
            "`perm` must be empty or hold `size_k` \\(64\\)",
        ),
        ({"perm": torch.arange(64).float()}, "`perm` has dtype float32"),
        (
            {"perm": torch.arange(64).int().reshape(8, 8)},
            "`perm` must have 1 dimensions",
        ),
    ],
)
def test_gptq_marlin_repack_rejects(changes, message, device, implementation_index):
    arguments = _arguments(**changes)
    out = arguments["out"]
    before = out.clone()
    with pytest.raises(ValueError, match=f"`gptq_marlin_repack`.*{message}"):
        infini.ops.gptq_marlin_repack(
            **arguments, implementation_index=implementation_index
        )
    assert torch.equal(out, before)


@pytest.mark.parametrize("value", (-1, 64))
def test_gptq_marlin_repack_rejects_a_bad_perm_index(
    value, device, implementation_index
):
    perm = torch.arange(64).int()
    perm[5] = value
    arguments = _arguments(perm=perm, b_q_weight=torch.ones(8, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match=rf"`perm\[5\]` is {value}, out of the range"):
        infini.ops.gptq_marlin_repack(
            **arguments, implementation_index=implementation_index
        )
    assert not arguments["out"].any()
