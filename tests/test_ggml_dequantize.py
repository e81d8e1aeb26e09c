import pytest
import torch

import infini.ops
from tests._ggml import (
    FLOAT_DTYPES,
    TYPES,
    blocks,
    dequantized,
    odd_columns,
    smollm2_blocks,
)


@pytest.mark.parametrize("quant_type", TYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_ggml_dequantize(quant_type, dtype, device, implementation_index):
    cols = 512
    weight = blocks(quant_type, 5, cols, seed=quant_type)
    out = torch.full((5, cols), float("nan"), dtype=dtype, device=device)
    infini.ops.ggml_dequantize(
        weight.to(device),
        quant_type,
        5,
        cols,
        out,
        implementation_index=implementation_index,
    )
    expected = dequantized(weight, quant_type).to(dtype)
    # Computed in float32 as gguf does and rounded once: bit for bit.
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("quant_type", (3, 12, 14))
def test_ggml_dequantize_strided_and_leading_rows(
    quant_type, device, implementation_index
):
    # The first `m` of more rows, rows strided in both tensors, and enough
    # values for the parallel kernel.
    weight = blocks(quant_type, 300, 512, seed=1)
    wide = torch.zeros(300, weight.shape[1] + 7, dtype=torch.uint8)
    wide[:, : weight.shape[1]] = weight
    out = torch.full((257, 520), float("nan"), device=device)
    infini.ops.ggml_dequantize(
        wide[:, : weight.shape[1]].to(device),
        quant_type,
        257,
        512,
        out[:, :512],
        implementation_index=implementation_index,
    )
    expected = dequantized(weight[:257], quant_type)
    torch.testing.assert_close(out[:, :512].cpu(), expected, rtol=0, atol=0)
    assert torch.isnan(out[:, 512:]).all()


@pytest.mark.parametrize("quant_type", TYPES)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_ggml_dequantize_odd_block_counts(
    quant_type, dtype, device, implementation_index
):
    # Three blocks per row: the last tile of a row is partial.
    cols = odd_columns(quant_type)
    weight = blocks(quant_type, 3, cols, seed=quant_type + 20)
    out = torch.full((3, cols), float("nan"), dtype=dtype, device=device)
    infini.ops.ggml_dequantize(
        weight.to(device),
        quant_type,
        3,
        cols,
        out,
        implementation_index=implementation_index,
    )
    expected = dequantized(weight, quant_type).to(dtype)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


def test_ggml_dequantize_out_overlaps_weight(device, implementation_index):
    # The packed bytes live in the first rows of `out`'s memory: the result
    # is as if the weight had been read before anything was written.
    weight = blocks(8, 4, 64, seed=1)
    storage = torch.zeros(4 * 64 * 4, dtype=torch.uint8, device=device)
    storage[: weight.numel()] = weight.reshape(-1).to(device)
    packed = storage[: weight.numel()].view(4, 68)
    out = storage.view(torch.float32).view(4, 64)
    infini.ops.ggml_dequantize(
        packed, 8, 4, 64, out, implementation_index=implementation_index
    )
    torch.testing.assert_close(out.cpu(), dequantized(weight, 8), rtol=0, atol=0)


def test_ggml_dequantize_no_rows(device, implementation_index):
    weight = blocks(12, 2, 256)
    out = torch.empty(0, 256, device=device)
    infini.ops.ggml_dequantize(
        weight.to(device), 12, 0, 256, out, implementation_index=implementation_index
    )


@pytest.mark.parametrize(
    "name, rows",
    [("blk.0.ffn_down.weight", slice(0, 6)), ("token_embd.weight", slice(100, 104))],
)
def test_ggml_dequantize_smollm2(name, rows, device, implementation_index):
    weight, quant_type = smollm2_blocks(name, rows)
    count = weight.shape[0]
    cols = dequantized(weight, quant_type).shape[1]
    out = torch.empty(count, cols, device=device)
    infini.ops.ggml_dequantize(
        weight.to(device),
        quant_type,
        count,
        cols,
        out,
        implementation_index=implementation_index,
    )
    torch.testing.assert_close(
        out.cpu(), dequantized(weight, quant_type), rtol=0, atol=0
    )


def _weight(quant_type=3, rows=2, cols=64):
    return blocks(quant_type, rows, cols)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (_weight(), 15, 2, 64, torch.empty(2, 64)),
            r"quant_type 15 \(Q8_K\) is not supported",
        ),
        (
            lambda: (_weight(), 99, 2, 64, torch.empty(2, 64)),
            r"quant_type 99 \(unknown\) is not supported",
        ),
        (
            lambda: (_weight().view(torch.int8), 3, 2, 64, torch.empty(2, 64)),
            "`weight` has dtype int8",
        ),
        (
            lambda: (_weight(), 3, 2, 48, torch.empty(2, 48)),
            "`n` must be a positive multiple of the Q4_1 block of 32 values, got 48",
        ),
        (
            lambda: (_weight(), 3, 2, 96, torch.empty(2, 96)),
            "`weight` must hold 60 bytes per row",
        ),
        (
            lambda: (_weight(), 3, 3, 64, torch.empty(3, 64)),
            "`m` must be between 0 and the 2 rows of `weight`, got 3",
        ),
        (
            lambda: (_weight(), 3, 2, 64, torch.empty(2, 32)),
            r"`out` must have shape \(2, 64\)",
        ),
        (
            lambda: (_weight(), 3, 2, 64, torch.empty(2, 64).double()),
            "`out` has dtype float64",
        ),
        (
            lambda: (_weight(), 3, 2, 64, torch.empty(64, 2).t()),
            "`out` must have adjacent elements within each row",
        ),
        (
            lambda: (
                torch.zeros(40, 2, dtype=torch.uint8).t(),
                3,
                2,
                64,
                torch.empty(2, 64),
            ),
            "`weight` must have adjacent bytes within each row",
        ),
    ],
)
def test_ggml_dequantize_rejects(arguments, message, device, implementation_index):
    weight, quant_type, m, n, out = arguments()
    before = out.clone()
    with pytest.raises(ValueError, match=f"ggml_dequantize.*{message}"):
        infini.ops.ggml_dequantize(
            weight, quant_type, m, n, out, implementation_index=implementation_index
        )
    assert torch.equal(
        out.contiguous().view(torch.uint8), before.contiguous().view(torch.uint8)
    )
