import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

F32 = torch.float32
# Over a million elements in the CPU run (rows visited in tiles of tokens;
# the last tile is partial). Triton's interpreter runs the same layouts on
# fewer tokens: its programs are NumPy steps, and the kernel has no tiles
# of tokens to cut.
TOKENS = 19 if TRITON_INTERPRETER else 259
BATCH_TOKENS = 40 if TRITON_INTERPRETER else 520


def _rearrange(input, out, implementation_index):
    result = infini.ops.rearrange_infinilm(
        input, out, implementation_index=implementation_index
    )
    assert result is None
    return out


def _torch_rearrange(input, out, implementation_index):
    return out.copy_(input.expand_as(out))


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize(
    "input_shape, input_strides, out_shape, out_strides, dtype",
    [
        pytest.param(
            (13, 4), None, (13, 4), None, torch.float32, marks=pytest.mark.smoke
        ),
        # Row-major to column-major and back.
        pytest.param(
            (13, 4), None, (13, 4), (1, 13), torch.float32, marks=pytest.mark.smoke
        ),
        ((13, 4), (1, 13), (13, 4), None, torch.float16),
        ((2, 3, 4), (12, 1, 3), (2, 3, 4), (1, 2, 6), torch.bfloat16),
        ((13, 4), (10, 1), (13, 4), (7, 1), torch.int32),
        ((4,), None, (3, 4), (1, 3), torch.int64),
        ((3, 1), None, (3, 5), None, torch.uint8),
        ((13, 4), (0, 1), (13, 4), (1, 13), torch.float64),
        ((512, 1024), None, (512, 1024), (1, 512), torch.float32),
        # Token-major into heads-major, with and without a batch dimension.
        ((TOKENS, 32, 128), None, (TOKENS, 32, 128), (128, TOKENS * 128, 1), F32),
        (
            (2, BATCH_TOKENS, 16, 64),
            None,
            (2, BATCH_TOKENS, 16, 64),
            (BATCH_TOKENS * 1024, 64, BATCH_TOKENS * 64, 1),
            torch.bfloat16,
        ),
        ((0, 4), None, (0, 4), None, torch.float32),
        ((), None, (), None, torch.float32),
    ],
)
def test_rearrange_infinilm(
    input_shape,
    input_strides,
    out_shape,
    out_strides,
    dtype,
    device,
    implementation_index,
):
    if dtype.is_floating_point:
        input = randn_strided(input_shape, input_strides, dtype=dtype, device=device)
    else:
        input = randint_strided(
            0, 100, input_shape, input_strides, dtype=dtype, device=device
        )
    out = empty_strided(out_shape, out_strides, dtype=dtype, device=device)
    return Payload(
        _rearrange, _torch_rearrange, (input, out, implementation_index), rtol=0, atol=0
    )


def test_rearrange_infinilm_bool(device, implementation_index):
    input = torch.rand(6, 7, device=device) > 0.5
    out = torch.empty(7, 6, dtype=torch.bool, device=device).t()
    _rearrange(input, out, implementation_index)
    assert torch.equal(out, input)


def test_rearrange_infinilm_transpose_in_place_reads_input_first(
    device, implementation_index
):
    input = torch.randn(20, 20, device=device)
    expected = input.t().clone()
    _rearrange(input, input.t(), implementation_index)
    # `out` (the transposed view) now holds `input`: the storage holds its
    # transpose.
    assert torch.equal(input, expected)


def test_rearrange_infinilm_rejects_bad_arguments(device):
    input = torch.randn(4, 5, device=device)
    out = torch.full((5, 4), 7.0, device=device)
    with pytest.raises(ValueError, match="`rearrange_infinilm`: `input` of shape"):
        infini.ops.rearrange_infinilm(input, out)
    assert bool((out == 7.0).all())
    with pytest.raises(ValueError, match="`rearrange_infinilm`: `out` has dtype"):
        infini.ops.rearrange_infinilm(input, input.double())
    with pytest.raises(ValueError, match="`rearrange_infinilm`: `out` is written"):
        infini.ops.rearrange_infinilm(
            input, torch.empty(1, 5, device=device).expand(4, 5)
        )
