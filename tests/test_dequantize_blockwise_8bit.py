import pytest
import torch

import infini.ops

DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# shape, blocksize: whole blocks, a partial last block, odd shapes, one
# element, a Llama-sized matrix and an empty tensor.
CASES = (
    ((4, 256), 64),
    ((5, 97), 64),
    ((3, 7, 5), 4),
    ((1,), 1),
    ((3, 1000), 100),
    ((256, 4096), 4096),
    ((0, 64), 64),
)


def _code():
    # A signed, non-uniform code book like bitsandbytes' dynamic map.
    levels = torch.linspace(-1, 1, 256)
    return levels.sign() * levels.abs().pow(2)


@pytest.mark.parametrize("shape, blocksize", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_blockwise_8bit(
    shape, blocksize, dtype, device, implementation_index
):
    count = torch.Size(shape).numel()
    input = torch.randint(0, 256, shape, dtype=torch.uint8)
    absmax = torch.rand(-(-count // blocksize)) + 0.25
    code = _code()
    out = torch.full(shape, float("nan"), dtype=dtype, device=device)
    infini.ops.dequantize_blockwise_8bit(
        input.to(device),
        absmax.to(device),
        code.to(device),
        blocksize,
        out,
        implementation_index=implementation_index,
    )
    scales = absmax.repeat_interleave(blocksize)[:count]
    expected = (code[input.long().reshape(-1)] * scales).reshape(shape).to(dtype)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (torch.zeros(8, dtype=torch.int8), torch.ones(1), _code(), 8),
            "`input` has dtype int8",
        ),
        (
            lambda: (torch.zeros(8, dtype=torch.uint8), torch.ones(1), _code()[:16], 8),
            r"`code` must have shape \(256,\)",
        ),
        (
            lambda: (torch.zeros(8, dtype=torch.uint8), torch.ones(1), _code(), 0),
            "`blocksize` must be positive, got 0",
        ),
        (
            lambda: (torch.zeros(8, dtype=torch.uint8), torch.ones(3), _code(), 4),
            "`absmax` must hold one scale per block of 4 elements of `input`: 2",
        ),
        (
            lambda: (
                torch.zeros(2, 8, dtype=torch.uint8)[:, :4],
                torch.ones(1),
                _code(),
                8,
            ),
            "`input` must be packed",
        ),
    ],
)
def test_dequantize_blockwise_8bit_rejects(
    arguments, message, device, implementation_index
):
    input, absmax, code, blocksize = arguments()
    out = torch.zeros(input.shape)
    with pytest.raises(ValueError, match=message):
        infini.ops.dequantize_blockwise_8bit(
            input,
            absmax,
            code,
            blocksize,
            out,
            implementation_index=implementation_index,
        )
    assert not out.any()


@pytest.mark.parametrize("shape", [(3, 0), (0, 5), (2, 0, 4)])
def test_dequantize_blockwise_8bit_zero_size_2d(shape, device, implementation_index):
    # torch gives a zero-size tensor strides such as (1, 1) for (3, 0): it is
    # packed (no elements), not a layout to refuse (found by the fuzz).
    input = torch.empty(shape, dtype=torch.uint8, device=device)
    out = torch.empty(shape, device=device)
    infini.ops.dequantize_blockwise_8bit(
        input, torch.ones(0, device=device), _code().to(device), 64, out,
        implementation_index=implementation_index,
    )  # fmt: skip
    assert out.shape == shape
