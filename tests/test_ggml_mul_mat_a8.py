import pytest
import torch

import infini.ops
from tests._ggml import FLOAT_DTYPES, blocks, check_product, dequantized, smollm2_blocks

TYPES = (2, 3, 6, 7, 8, 10, 11, 12, 13, 14)


def _run(weight, x, quant_type, row, out, implementation_index):
    infini.ops.ggml_mul_mat_a8(
        weight, x, quant_type, row, out, implementation_index=implementation_index
    )


@pytest.mark.parametrize("quant_type", TYPES)
@pytest.mark.parametrize("tokens", (5, 16, 33))
def test_ggml_mul_mat_a8(quant_type, tokens, device, implementation_index):
    # Prefill: tokens below and from the CPU's switch to the tiled (BLAS)
    # path (`TILED_MIN_TOKENS`, 16); rows not a multiple of the integer
    # kernels' row tile.
    cols = 256
    weight = blocks(quant_type, 21, cols, seed=quant_type)
    x = torch.randn(tokens, cols)
    out = torch.full((tokens, 21), float("nan"), device=device)
    _run(weight.to(device), x.to(device), quant_type, 21, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", (2, 8, 12))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_ggml_mul_mat_a8_many_tokens(quant_type, dtype, device, implementation_index):
    # Many tokens and more weight rows than one panel of the CPU's tiled
    # path (2 MiB of float32 rows: 2048 at 256 columns), the last panel
    # partial; strided output rows, `row` below the weight's rows.
    rows, cols, tokens = 2100, 256, 130
    weight = blocks(quant_type, rows, cols, seed=5)
    x = torch.randn(tokens, cols).to(dtype)
    x[7, 32:64] = 0
    out = torch.full((tokens, rows + 3), float("nan"), dtype=dtype, device=device)
    _run(
        weight.to(device),
        x.to(device),
        quant_type,
        rows - 1,
        out[:, : rows - 1],
        implementation_index,
    )
    check_product(out[:, : rows - 1], x, dequantized(weight[:-1], quant_type))
    assert torch.isnan(out[:, rows - 1 :]).all()


@pytest.mark.parametrize("quant_type", (3, 8, 12, 14))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES[1:])
def test_ggml_mul_mat_a8_16_bit(quant_type, dtype, device, implementation_index):
    weight = blocks(quant_type, 9, 256, seed=11)
    x = torch.randn(17, 256).to(dtype)
    out = torch.full((17, 9), float("nan"), dtype=dtype, device=device)
    _run(weight.to(device), x.to(device), quant_type, 9, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", (3, 14))
def test_ggml_mul_mat_a8_parallel_strided(quant_type, device, implementation_index):
    # Large enough for the parallel kernel; strided x and out rows, `row`
    # below the weight's rows, zero activation blocks.
    rows, cols = 300, 512
    weight = blocks(quant_type, rows, cols, seed=2)
    x = torch.randn(64, cols + 32)
    x[5, :] = 0
    out = torch.full((64, rows + 2), float("nan"), device=device)
    _run(
        weight.to(device),
        x[:, :cols].to(device),
        quant_type,
        rows - 1,
        out[:, : rows - 1],
        implementation_index,
    )
    check_product(out[:, : rows - 1], x[:, :cols], dequantized(weight[:-1], quant_type))
    assert torch.isnan(out[:, rows - 1 :]).all()


def test_ggml_mul_mat_a8_smollm2(device, implementation_index):
    weight, quant_type = smollm2_blocks("blk.1.ffn_gate.weight", slice(0, 40))
    values = dequantized(weight, quant_type)
    x = torch.randn(12, values.shape[1])
    out = torch.empty(12, 40, device=device)
    _run(weight.to(device), x.to(device), quant_type, 40, out, implementation_index)
    check_product(out, x, values)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (blocks(3, 2, 64), torch.randn(4, 64), 11, 2, torch.empty(4, 2)),
            "The columns of `x` must be a positive multiple of the Q3_K block",
        ),
        (
            lambda: (blocks(3, 2, 64), torch.randn(4, 64), 9, 2, torch.empty(4, 2)),
            r"quant_type 9 \(Q8_1\) is not supported",
        ),
        (
            lambda: (blocks(3, 2, 64), torch.randn(4, 64), 3, 2, torch.empty(4, 3)),
            r"`out` must have shape \(4, 2\)",
        ),
        (
            lambda: (
                blocks(3, 2, 64),
                torch.randn(4, 64).half(),
                3,
                2,
                torch.empty(4, 2),
            ),
            "`out` has dtype float32 but `x` has dtype float16",
        ),
        (
            lambda: (blocks(3, 2, 64), torch.randn(4, 64), 3, -1, torch.empty(4, 0)),
            "`row` must be between 0 and the 2 rows of `weight`, got -1",
        ),
    ],
)
def test_ggml_mul_mat_a8_rejects(arguments, message, device, implementation_index):
    weight, x, quant_type, row, out = arguments()
    before = out.clone()
    with pytest.raises(ValueError, match=f"ggml_mul_mat_a8.*{message}"):
        _run(weight, x, quant_type, row, out, implementation_index)
    assert torch.equal(
        out.contiguous().view(torch.uint8), before.contiguous().view(torch.uint8)
    )
