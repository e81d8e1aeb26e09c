import pytest
import torch

import infini.ops
from infini.ops.base.dequantize_nf4 import NF4_LEVELS

DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# out shape, blocksize: one block per row, blocks spanning rows, odd row
# widths, a large Llama-sized matrix and an empty one.
CASES = (
    ((4, 256), 64),
    ((5, 96), 64),
    ((3, 7, 6), 4),
    ((1, 2), 2),
    ((7, 130), 32),
    ((256, 4096), 64),
    ((0, 64), 64),
)


def _quantised(shape, blocksize):
    count = torch.Size(shape).numel()
    input = torch.randint(0, 256, (count // 2,), dtype=torch.uint8)
    absmax = torch.rand(-(-count // blocksize)) + 0.25
    return input, absmax


def _reference(input, absmax, blocksize, shape):
    codes = torch.stack((input >> 4, input & 15), -1).reshape(-1).long()
    scales = absmax.double().repeat_interleave(blocksize)[: codes.numel()]
    return (torch.tensor(NF4_LEVELS, dtype=torch.float64)[codes] * scales).reshape(
        shape
    )


@pytest.mark.parametrize("shape, blocksize", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantize_nf4(shape, blocksize, dtype, device, implementation_index):
    input, absmax = _quantised(shape, blocksize)
    out = torch.full(shape, float("nan"), dtype=dtype, device=device)
    infini.ops.dequantize_nf4(
        input.to(device),
        absmax.to(device),
        blocksize,
        out,
        implementation_index=implementation_index,
    )
    expected = _reference(input, absmax, blocksize, shape).float().to(dtype)
    # Products are rounded once from float32, like the reference.
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            lambda: (
                torch.zeros(4, dtype=torch.int8),
                torch.ones(1),
                8,
                torch.empty(8),
            ),
            "`input` has dtype int8",
        ),
        (
            lambda: (
                torch.zeros(4, dtype=torch.uint8),
                torch.ones(1).double(),
                8,
                torch.empty(8),
            ),
            "`absmax` has dtype float64",
        ),
        (
            lambda: (
                torch.zeros(4, dtype=torch.uint8),
                torch.ones(2),
                3,
                torch.empty(8),
            ),
            "`blocksize` must be positive and even, got 3",
        ),
        (
            lambda: (
                torch.zeros(3, dtype=torch.uint8),
                torch.ones(1),
                8,
                torch.empty(8),
            ),
            "`input` must hold half as many elements as `out`",
        ),
        (
            lambda: (
                torch.zeros(4, dtype=torch.uint8),
                torch.ones(2),
                8,
                torch.empty(8),
            ),
            "`absmax` must hold one scale per block of 8 elements of `out`: 1",
        ),
        (
            lambda: (
                torch.zeros(4, dtype=torch.uint8),
                torch.ones(1),
                8,
                torch.empty(2, 8)[:, :4],
            ),
            "`out` must be packed",
        ),
        (
            lambda: (
                torch.zeros(4, dtype=torch.uint8),
                torch.ones(1),
                8,
                torch.empty(8).int(),
            ),
            "`out` has dtype int32",
        ),
    ],
)
def test_dequantize_nf4_rejects(arguments, message, device, implementation_index):
    input, absmax, blocksize, out = arguments()
    before = out.clone()
    with pytest.raises(ValueError, match=message):
        infini.ops.dequantize_nf4(
            input, absmax, blocksize, out, implementation_index=implementation_index
        )
    # Compared as bytes: the untouched output may hold NaNs.
    assert torch.equal(
        out.contiguous().view(torch.uint8), before.contiguous().view(torch.uint8)
    )
