import pytest
import torch

import infini.ops
from tests._ggml import (
    FLOAT_DTYPES,
    TYPES,
    blocks,
    check_non_finite_tokens,
    check_product,
    dequantized,
    odd_columns,
    product_bounds,
    smollm2_blocks,
)

OPERATOR = "ggml_mul_mat_vec_a8"
# Decode shapes: one token, a few, the vec path's usual limit of 8.
TOKENS = (1, 3, 8)


def _run(weight, x, quant_type, row, out, implementation_index):
    getattr(infini.ops, OPERATOR)(
        weight, x, quant_type, row, out, implementation_index=implementation_index
    )


@pytest.mark.parametrize("quant_type", TYPES)
@pytest.mark.parametrize("tokens", TOKENS)
def test_ggml_mul_mat_vec_a8(quant_type, tokens, device, implementation_index):
    cols = 512
    weight = blocks(quant_type, 24, cols, seed=quant_type)
    x = torch.randn(tokens, cols)
    out = torch.full((tokens, 24), float("nan"), device=device)
    _run(weight.to(device), x.to(device), quant_type, 24, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", (3, 8, 12, 14))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES[1:])
def test_ggml_mul_mat_vec_a8_16_bit(quant_type, dtype, device, implementation_index):
    cols = 256
    weight = blocks(quant_type, 10, cols, seed=7)
    x = torch.randn(2, cols).to(dtype)
    out = torch.full((2, 10), float("nan"), dtype=dtype, device=device)
    _run(weight.to(device), x.to(device), quant_type, 10, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", (3, 8))
def test_ggml_mul_mat_vec_a8_strided_rows_and_leading_rows(
    quant_type, device, implementation_index
):
    # `row` below the weight's rows; strided weight, x and out rows; a
    # zero activation block (scale 0); a large weight (parallel kernel).
    rows, cols = 2100, 1024
    weight = blocks(quant_type, rows, cols, seed=3)
    wide = torch.zeros(rows, weight.shape[1] + 5, dtype=torch.uint8)
    wide[:, : weight.shape[1]] = weight
    x = torch.randn(2, cols + 3)
    x[1, 64:96] = 0
    out = torch.full((2, rows + 1), float("nan"), device=device)
    row = rows - 3
    _run(
        wide[:, : weight.shape[1]].to(device),
        x[:, :cols].to(device),
        quant_type,
        row,
        out[:, :row],
        implementation_index,
    )
    check_product(out[:, :row], x[:, :cols], dequantized(weight[:row], quant_type))
    assert torch.isnan(out[:, row:]).all()


@pytest.mark.parametrize("quant_type", TYPES)
def test_ggml_mul_mat_vec_a8_odd_block_counts(quant_type, device, implementation_index):
    # Three blocks per row: the last step of a row is partial.
    cols = odd_columns(quant_type)
    weight = blocks(quant_type, 5, cols, seed=quant_type + 30)
    x = torch.randn(2, cols)
    out = torch.full((2, 5), float("nan"), device=device)
    _run(weight.to(device), x.to(device), quant_type, 5, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


def test_ggml_mul_mat_vec_a8_q8_0_extreme_codes(device, implementation_index):
    # Q8_0 codes of -128 (the format allows them; quantisers avoid them) and
    # +-127, against activations whose codes are +-127 as well: the largest
    # pairs of byte products the kernel sums in 16 bits, and a code whose
    # magnitude does not fit a signed byte.
    generator = torch.Generator().manual_seed(11)
    rows, cols = 24, 256
    weight = blocks(8, rows, cols, seed=8).view(rows, cols // 32, 34).clone()
    extremes = torch.tensor([-128, -127, 127], dtype=torch.int8)
    choice = torch.randint(0, 3, (rows, cols // 32, 32), generator=generator)
    weight[..., 2:] = extremes[choice].view(torch.uint8)
    weight = weight.reshape(rows, -1)
    signs = torch.randint(0, 2, (3, cols), generator=generator) * 2 - 1
    x = signs.float() * (1 + torch.rand(3, cols, generator=generator) * 1e-3)
    out = torch.full((3, rows), float("nan"), device=device)
    _run(weight.to(device), x.to(device), 8, rows, out, implementation_index)
    check_product(out, x, dequantized(weight, 8))


@pytest.mark.parametrize("quant_type", (3, 14))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_ggml_mul_mat_vec_a8_more_tokens(
    quant_type, dtype, device, implementation_index
):
    # More tokens than a decode step: the same product (the GPU kernels
    # switch to the tiled one above 8 tokens).
    weight = blocks(quant_type, 20, 256, seed=9)
    x = torch.randn(12, 256).to(dtype)
    out = torch.full((12, 20), float("nan"), dtype=dtype, device=device)
    _run(weight.to(device), x.to(device), quant_type, 20, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", (3, 12))
@pytest.mark.parametrize("tokens", (3, 12))
def test_ggml_mul_mat_vec_a8_non_finite(
    quant_type, tokens, device, implementation_index
):
    # An infinity or a NaN among a token's activations makes that token's
    # results non-finite; the other tokens are unaffected.
    weight = blocks(quant_type, 6, 256, seed=4)
    x = torch.randn(tokens, 256)
    x[0, 3] = float("inf")
    x[2, 200] = float("nan")
    out = torch.empty(tokens, 6, device=device)
    _run(weight.to(device), x.to(device), quant_type, 6, out, implementation_index)
    check_non_finite_tokens(out.cpu(), x, dequantized(weight, quant_type), (0, 2))


@pytest.mark.parametrize("tokens", (2, 10))
def test_ggml_mul_mat_vec_a8_out_overlaps_x(tokens, device, implementation_index):
    # `out` is the first columns of `x`: the result is as if `x` had been
    # read before anything was written.
    weight = blocks(8, 16, 64, seed=6)
    x = torch.randn(tokens, 64, device=device)
    before = x.cpu().clone()
    _run(weight.to(device), x, 8, 16, x[:, :16], implementation_index)
    check_product(x[:, :16], before, dequantized(weight, 8))


@pytest.mark.parametrize(
    "name, rows",
    [
        ("blk.0.ffn_down.weight", slice(0, 16)),
        ("blk.3.attn_q.weight", slice(100, 116)),
        ("token_embd.weight", slice(1000, 1016)),
    ],
)
def test_ggml_mul_mat_vec_a8_smollm2(name, rows, device, implementation_index):
    weight, quant_type = smollm2_blocks(name, rows)
    values = dequantized(weight, quant_type)
    x = torch.randn(1, values.shape[1])
    out = torch.empty(1, weight.shape[0], device=device)
    _run(
        weight.to(device),
        x.to(device),
        quant_type,
        weight.shape[0],
        out,
        implementation_index,
    )
    check_product(out, x, values)


def test_ggml_mul_mat_vec_a8_tolerance_detects_errors(device, implementation_index):
    # The float32 bound is tighter than the activation quantisation's effect
    # and far tighter than the change a wrong code order makes: the checks
    # above can fail.
    weight = blocks(3, 16, 256, seed=5)
    values = dequantized(weight, 3)
    x = torch.randn(1, 256)
    reference, tolerance, _ = product_bounds(x, values, torch.float32)
    exact = x.double() @ values.double().T
    # A kernel skipping the activation quantisation fails the check.
    assert ((exact - reference).abs() > 4 * tolerance).any()
    swapped = values.reshape(16, -1, 2, 16).flip(2).reshape(16, 256)
    wrong = product_bounds(x, swapped, torch.float32)[0]
    assert ((wrong - reference).abs() > 10 * tolerance).all()
    out = torch.empty(1, 16, device=device)
    _run(weight.to(device), x.to(device), 3, 16, out, implementation_index)
    assert ((out.double().cpu() - reference).abs() <= tolerance).all()


def test_ggml_mul_mat_vec_a8_empty(device, implementation_index):
    weight = blocks(3, 4, 64)
    out = torch.empty(0, 4, device=device)
    _run(
        weight.to(device),
        torch.empty(0, 64, device=device),
        3,
        4,
        out,
        implementation_index,
    )
    out = torch.empty(2, 0, device=device)
    _run(
        weight.to(device),
        torch.randn(2, 64, device=device),
        3,
        0,
        out,
        implementation_index,
    )


def _weight(quant_type=3, rows=2, cols=64):
    return blocks(quant_type, rows, cols)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (_weight(), torch.randn(1, 64), 16, 2, torch.empty(1, 2)),
            r"quant_type 16 \(IQ2_XXS\) is not supported",
        ),
        (
            lambda: (_weight(), torch.randn(1, 64), 0, 2, torch.empty(1, 2)),
            r"quant_type 0 \(unknown\) is not supported",
        ),
        (
            lambda: (
                _weight().view(torch.int8),
                torch.randn(1, 64),
                3,
                2,
                torch.empty(1, 2),
            ),
            "`weight` has dtype int8",
        ),
        (
            lambda: (_weight(), torch.randn(1, 96), 3, 2, torch.empty(1, 2)),
            "`weight` must hold 60 bytes per row",
        ),
        (
            lambda: (_weight(), torch.randn(1, 48), 3, 2, torch.empty(1, 2)),
            "The columns of `x` must be a positive multiple of the Q4_1 block",
        ),
        (
            lambda: (_weight(12, 2, 256), torch.randn(1, 64), 12, 2, torch.empty(1, 2)),
            "The columns of `x` must be a positive multiple of the Q4_K block of 256",
        ),
        (
            lambda: (_weight(), torch.randn(1, 64), 3, 3, torch.empty(1, 3)),
            "`row` must be between 0 and the 2 rows of `weight`, got 3",
        ),
        (
            lambda: (_weight(), torch.randn(1, 64).double(), 3, 2, torch.empty(1, 2)),
            "`x` has dtype float64",
        ),
        (
            lambda: (_weight(), torch.randn(1, 64), 3, 2, torch.empty(1, 2).half()),
            "`out` has dtype float16 but `x` has dtype float32",
        ),
        (
            lambda: (_weight(), torch.randn(1, 64), 3, 2, torch.empty(2, 2)),
            r"`out` must have shape \(1, 2\)",
        ),
        (
            lambda: (_weight(), torch.randn(64, 2).t(), 3, 2, torch.empty(2, 2)),
            "`x` must have adjacent elements within each row",
        ),
        (
            lambda: (_weight(), torch.randn(3, 64), 3, 2, torch.empty(2, 3).t()),
            "`out` must have adjacent elements within each row",
        ),
        (
            lambda: (_weight(), torch.randn(64), 3, 2, torch.empty(1, 2)),
            "`x` must have 2 dimensions",
        ),
    ],
)
def test_ggml_mul_mat_vec_a8_rejects(arguments, message, device, implementation_index):
    weight, x, quant_type, row, out = arguments()
    before = out.clone()
    with pytest.raises(ValueError, match=f"{OPERATOR}.*{message}"):
        _run(weight, x, quant_type, row, out, implementation_index)
    assert torch.equal(
        out.contiguous().view(torch.uint8), before.contiguous().view(torch.uint8)
    )
