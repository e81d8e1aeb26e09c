import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests._ggml import (
    FLOAT_DTYPES,
    TYPES,
    blocks,
    check_non_finite_tokens,
    check_product,
    dequantized,
    odd_columns,
    smollm2_blocks,
)


def _run(weight, x, quant_type, row, out, implementation_index):
    infini.ops.ggml_mul_mat_a8(
        weight, x, quant_type, row, out, implementation_index=implementation_index
    )


@pytest.mark.parametrize("quant_type", TYPES)
@pytest.mark.parametrize("tokens", (5, 16, 33))
def test_ggml_mul_mat_a8(quant_type, tokens, device, implementation_index):
    # Prefill: tokens below and from the CPU's switch to the tiled (BLAS)
    # path (`ggml.tiled_min_tokens()`: 16, or 32 with VNNI); rows not a
    # multiple of the integer kernels' row tile.
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
    # partial; strided output rows, `row` below the weight's rows. Under the
    # interpreter (the GPU kernels) a smaller product still spans two token
    # tiles, the last partial.
    rows, cols, tokens = (600, 256, 70) if TRITON_INTERPRETER else (2100, 256, 130)
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


@pytest.mark.parametrize("quant_type", TYPES)
def test_ggml_mul_mat_a8_odd_block_counts(quant_type, device, implementation_index):
    # Three blocks per row: the last step of a row is partial.
    cols = odd_columns(quant_type)
    weight = blocks(quant_type, 7, cols, seed=quant_type + 40)
    x = torch.randn(20, cols)
    out = torch.full((20, 7), float("nan"), device=device)
    _run(weight.to(device), x.to(device), quant_type, 7, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", (3, 12))
def test_ggml_mul_mat_a8_non_finite(quant_type, device, implementation_index):
    # An infinity or a NaN among a token's activations makes that token's
    # results non-finite; the other tokens are unaffected.
    weight = blocks(quant_type, 6, 256, seed=4)
    x = torch.randn(20, 256)
    x[0, 3] = float("inf")
    x[17, 200] = float("nan")
    out = torch.empty(20, 6, device=device)
    _run(weight.to(device), x.to(device), quant_type, 6, out, implementation_index)
    check_non_finite_tokens(out.cpu(), x, dequantized(weight, quant_type), (0, 17))


def test_ggml_mul_mat_a8_out_overlaps_x(device, implementation_index):
    # `out` is the first columns of `x`: the result is as if `x` had been
    # read before anything was written.
    weight = blocks(8, 16, 64, seed=6)
    x = torch.randn(24, 64, device=device)
    before = x.cpu().clone()
    _run(weight.to(device), x, 8, 16, x[:, :16], implementation_index)
    check_product(x[:, :16], before, dequantized(weight, 8))


def test_ggml_mul_mat_a8_empty(device, implementation_index):
    weight = blocks(12, 4, 256)
    out = torch.empty(0, 4, device=device)
    _run(
        weight.to(device),
        torch.empty(0, 256, device=device),
        12,
        4,
        out,
        implementation_index,
    )
    out = torch.empty(20, 0, device=device)
    _run(
        weight.to(device),
        torch.randn(20, 256, device=device),
        12,
        0,
        out,
        implementation_index,
    )


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
