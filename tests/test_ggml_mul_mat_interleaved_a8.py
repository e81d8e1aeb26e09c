import pytest
import torch

import infini.ops
from tests._ggml import FLOAT_DTYPES, blocks, check_product, dequantized

TYPES = (2, 3, 6, 7, 8, 12, 14)


def _interleaved(weight, quant_type):
    out = torch.empty_like(weight)
    infini.ops.ggml_interleave(weight, quant_type, out)
    return out


def _run(weight, x, quant_type, row, out, implementation_index):
    infini.ops.ggml_mul_mat_interleaved_a8(
        weight, x, quant_type, row, out, implementation_index=implementation_index
    )


@pytest.fixture
def tiled_path(monkeypatch):
    """The CPU's tiled BLAS path from 16 tokens, whatever the CPU (with byte
    dot products the tile kernel is the product at any number of tokens,
    without them from `INTERLEAVED_TILED_MIN_TOKENS`)."""
    from infini.ops.native.cpu import ggml_interleaved

    monkeypatch.setattr(ggml_interleaved, "tiled_from", lambda tokens: tokens >= 16)
    infini.ops.GgmlMulMatInterleavedA8.clear_cache()
    yield
    infini.ops.GgmlMulMatInterleavedA8.clear_cache()


def _check_forty_rows(quant_type, tokens, implementation_index):
    """A product of 40 rows against the dequantised reference."""
    cols = 512 if quant_type in (12, 14) else 320
    weight = blocks(quant_type, 40, cols, seed=quant_type + tokens)
    x = torch.randn(tokens, cols)
    out = torch.full((tokens, 40), float("nan"))
    _run(_interleaved(weight, quant_type), x, quant_type, 40, out, implementation_index)
    check_product(out, x, dequantized(weight, quant_type))


@pytest.mark.parametrize("quant_type", TYPES)
# One token (registers), a decode batch, past the serial quantisation, a
# prefill (the tile kernel, or the tiled BLAS path on a CPU without VNNI).
@pytest.mark.parametrize("tokens", (1, 3, 8, 12, 16, 21, 130))
def test_ggml_mul_mat_interleaved_a8(quant_type, tokens, device, implementation_index):
    _check_forty_rows(quant_type, tokens, implementation_index)


@pytest.mark.parametrize("quant_type", TYPES)
@pytest.mark.parametrize("tokens", (16, 21))
def test_ggml_mul_mat_interleaved_a8_tiled_path(
    quant_type, tokens, device, implementation_index, tiled_path
):
    # The panels are put back into the file's layout, dequantised and
    # multiplied by BLAS: the same product.
    _check_forty_rows(quant_type, tokens, implementation_index)


@pytest.mark.parametrize("quant_type", (3, 6, 8, 12, 14))
@pytest.mark.parametrize("tokens", (2, 17))
def test_ggml_mul_mat_interleaved_a8_partial_tile_and_strided_out(
    quant_type, tokens, device, implementation_index
):
    # `row` ends inside a tile; `out` is a column slice of a wider buffer;
    # a large weight takes the parallel kernel.
    rows, cols = 2048, 512
    weight = blocks(quant_type, rows, cols, seed=5)
    x = torch.randn(tokens, cols)
    wide = torch.full((tokens, rows + 9), float("nan"))
    row = rows - 5
    _run(
        _interleaved(weight, quant_type),
        x,
        quant_type,
        row,
        wide[:, 3 : 3 + row],
        implementation_index,
    )
    check_product(wide[:, 3 : 3 + row], x, dequantized(weight[:row], quant_type))
    assert torch.isnan(wide[:, :3]).all() and torch.isnan(wide[:, 3 + row :]).all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES[1:])
@pytest.mark.parametrize("tokens", (1, 16))
def test_ggml_mul_mat_interleaved_a8_16_bit(
    dtype, tokens, device, implementation_index
):
    weight = blocks(6, 16, 256, seed=3)
    x = torch.randn(tokens, 256).to(dtype)
    out = torch.full((tokens, 16), float("nan"), dtype=dtype)
    _run(_interleaved(weight, 6), x, 6, 16, out, implementation_index)
    check_product(out, x, dequantized(weight, 6))


@pytest.mark.parametrize("quant_type", (3, 12, 14))
def test_ggml_mul_mat_interleaved_a8_16_bit_tiled_partial_panel(
    quant_type, device, implementation_index, tiled_path
):
    # The tiled path with 16-bit results and a `row` that is no whole number
    # of tiles: the panels (whole tiles) are rounded into `out` row by row.
    cols = 256
    weight = blocks(quant_type, 16, cols, seed=12)
    x = torch.randn(17, cols).to(torch.bfloat16)
    out = torch.full((17, 13), float("nan"), dtype=torch.bfloat16)
    _run(_interleaved(weight, quant_type), x, quant_type, 13, out, implementation_index)
    check_product(out, x, dequantized(weight[:13], quant_type))


@pytest.mark.parametrize("quant_type", (3, 8, 12, 14))
def test_ggml_mul_mat_interleaved_a8_matches_the_file_layout(
    quant_type, device, implementation_index
):
    # The same activation quantisation and the same integer sums as
    # `ggml_mul_mat_vec_a8` on the weight before interleaving: the results
    # differ only by float32 rounding.
    weight = blocks(quant_type, 64, 512, seed=8)
    x = torch.randn(4, 512)
    ours = torch.empty(4, 64)
    plain = torch.empty(4, 64)
    _run(
        _interleaved(weight, quant_type), x, quant_type, 64, ours, implementation_index
    )
    infini.ops.ggml_mul_mat_vec_a8(weight, x, quant_type, 64, plain)
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-4)


def test_ggml_mul_mat_interleaved_a8_extreme_q8_0_codes(device, implementation_index):
    # Codes of -128 and +-127 against activation codes of +-127 (the
    # largest 16-bit pair sums) stay exact.
    generator = torch.Generator().manual_seed(4)
    rows, cols = 16, 256
    weight = blocks(8, rows, cols, seed=8).view(rows, cols // 32, 34).clone()
    extremes = torch.tensor([-128, -127, 127], dtype=torch.int8)
    choice = torch.randint(0, 3, (rows, cols // 32, 32), generator=generator)
    weight[..., 2:] = extremes[choice].view(torch.uint8)
    weight = weight.reshape(rows, -1)
    signs = torch.randint(0, 2, (2, cols), generator=generator) * 2 - 1
    x = signs.float() * (1 + torch.rand(2, cols, generator=generator) * 1e-3)
    out = torch.empty(2, rows)
    _run(_interleaved(weight, 8), x, 8, rows, out, implementation_index)
    check_product(out, x, dequantized(weight, 8))


def test_ggml_mul_mat_interleaved_a8_empty(device, implementation_index):
    weight = _interleaved(blocks(3, 8, 64), 3)
    _run(weight, torch.empty(0, 64), 3, 8, torch.empty(0, 8), implementation_index)
    _run(weight, torch.randn(2, 64), 3, 0, torch.empty(2, 0), implementation_index)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (blocks(13, 8, 256), torch.randn(1, 256), 13, 8, torch.empty(1, 8)),
            r"Q5_K \(13\) has no interleaved layout",
        ),
        (
            lambda: (blocks(3, 12, 64), torch.randn(1, 64), 3, 12, torch.empty(1, 12)),
            "`weight` must have a multiple of 8 rows",
        ),
        (
            lambda: (blocks(3, 8, 64), torch.randn(1, 96), 3, 8, torch.empty(1, 8)),
            "`weight` must hold 60 bytes per row",
        ),
        (
            lambda: (blocks(3, 8, 64), torch.randn(1, 64), 3, 9, torch.empty(1, 9)),
            "`row` must be between 0 and the 8 rows of `weight`",
        ),
        (
            lambda: (
                blocks(3, 8, 64),
                torch.randn(1, 64).double(),
                3,
                8,
                torch.empty(1, 8),
            ),
            "`x` has dtype float64",
        ),
    ],
)
def test_ggml_mul_mat_interleaved_a8_errors(arguments, message):
    with pytest.raises(ValueError, match=message):
        infini.ops.ggml_mul_mat_interleaved_a8(*arguments())


def _amx_available() -> bool:
    from infini.ops.native.cpu.ggml_amx import amx_instructions

    return amx_instructions()


@pytest.mark.skipif(
    not _amx_available(), reason="the CPU (or the kernel) offers no AMX-INT8 tiles"
)
@pytest.mark.parametrize("quant_type", (2, 3, 6, 7, 8))
@pytest.mark.parametrize("tokens", (7, 8, 15))
@pytest.mark.parametrize(
    "rows, row, cols, dtype",
    [
        # 17 tiles: eight pairs on AMX, the last on the vector kernel.
        (136, 136, 96, torch.float32),
        # The parallel kernel, `row` inside the last pair.
        (1024, 1019, 320, torch.float32),
        (144, 144, 64, torch.bfloat16),
    ],
)
def test_ggml_mul_mat_interleaved_a8_amx_matches_the_vector_kernel(
    quant_type, tokens, rows, row, cols, dtype, monkeypatch
):
    # The AMX path (`infini.ops.native.cpu.ggml_amx`) forms the same integer
    # sums and applies the scales in the same order as the vector kernel:
    # the results are bit-identical, and right against the reference.
    from infini.ops.native.cpu.ggml_amx import amx_applies

    monkeypatch.setenv("INFINI_OPS_CPU_AMX", "1")
    assert amx_applies(quant_type, tokens, row)
    weight = blocks(quant_type, rows, cols, seed=tokens + quant_type)
    interleaved = _interleaved(weight, quant_type)
    x = torch.randn(tokens, cols).to(dtype)
    results = []
    for enabled in ("0", "1"):
        monkeypatch.setenv("INFINI_OPS_CPU_AMX", enabled)
        infini.ops.GgmlMulMatInterleavedA8.clear_cache()
        out = torch.full((tokens, row), float("nan"), dtype=dtype)
        infini.ops.ggml_mul_mat_interleaved_a8(interleaved, x, quant_type, row, out)
        results.append(out)
    infini.ops.GgmlMulMatInterleavedA8.clear_cache()
    assert torch.equal(results[0], results[1])
    check_product(results[1], x, dequantized(weight[:row], quant_type))
