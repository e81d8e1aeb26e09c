import pytest
import torch

import infini.ops
from tests.utils import Payload, empty_strided, randint_strided, randn_strided

SHAPES_AND_STRIDES = [
    pytest.param((13, 4), None, None, None, marks=pytest.mark.smoke),
    pytest.param((13, 4), (10, 1), (10, 1), (10, 1), marks=pytest.mark.smoke),
    pytest.param((13, 4), (0, 1), None, None, marks=pytest.mark.smoke),
    ((13, 4, 4), None, None, None),
    ((16, 5632), None, None, None),
    ((4097,), None, None, None),
    ((13, 4), (1, 13), (1, 13), None),
    ((4, 4, 5632), (45056, 5632, 1), (45056, 5632, 1), (45056, 5632, 1)),
    ((33, 7), (7, 1), (0, 1), (1, 33)),
    ((0, 5), None, None, None),
]


# The Triton JIT implementation needs one shape, contiguous tensors and
# `alpha` 1 (docs/behaviour.md, "Triton JIT backend"); it rejects anything else.
TRITON_JIT_SLOT = 10


def _skip_unsupported_by_triton_jit(implementation_index, *, reason):
    if implementation_index == TRITON_JIT_SLOT:
        pytest.skip(f"the Triton JIT add (slot 10) does not support {reason}")


def _add(input, other, out, alpha, implementation_index):
    if alpha is None:
        infini.ops.add(input, other, out, implementation_index=implementation_index)
    else:
        infini.ops.add(
            input, other, alpha, out, implementation_index=implementation_index
        )
    return out


def _torch_add(input, other, out, alpha, implementation_index):
    result = torch.add(
        input.double(), other.double(), alpha=1 if alpha is None else alpha
    )
    return result.to(out.dtype)


@pytest.mark.auto_act_and_assert
@pytest.mark.parametrize("alpha", [None, 2.5])
@pytest.mark.parametrize(
    "shape, input_strides, other_strides, out_strides", SHAPES_AND_STRIDES
)
def test_add(
    shape,
    input_strides,
    other_strides,
    out_strides,
    alpha,
    dtype,
    device,
    implementation_index,
    rtol,
    atol,
):
    if alpha is not None:
        _skip_unsupported_by_triton_jit(implementation_index, reason="alpha != 1")
    if any(strides is not None for strides in (input_strides, other_strides)) or (
        out_strides is not None and out_strides != (45056, 5632, 1)
    ):
        _skip_unsupported_by_triton_jit(implementation_index, reason="strides")
    input = randn_strided(shape, input_strides, dtype=dtype, device=device)
    other = randn_strided(shape, other_strides, dtype=dtype, device=device)
    out = empty_strided(shape, out_strides, dtype=dtype, device=device)
    if alpha is not None and implementation_index == 8 and dtype == torch.bfloat16:
        # Slot 8 is ATen's own `add_`, which rounds `alpha * other` to bfloat16
        # before the sum: one bfloat16 ulp (2^-8 relative) off the float64 sum.
        rtol, atol = 1e-2, 1e-2
    if alpha is not None and dtype == torch.float32:
        # `alpha * other` rounds before the sum (as in torch's float32 kernel),
        # which costs up to one ulp of `alpha * other` against the float64
        # reference: an absolute error when the sum cancels.
        rtol, atol = 3e-7, 1e-6
    return Payload(
        _add,
        _torch_add,
        (input, other, out, alpha, implementation_index),
        rtol=rtol,
        atol=atol,
    )


INTEGER_DTYPES = [
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES + [torch.float64])
def test_add_other_dtypes_wrap_like_torch(dtype, device, implementation_index):
    _skip_unsupported_by_triton_jit(implementation_index, reason="alpha != 1")
    low, high = (0, 200) if not dtype.is_signed else (-100, 100)
    if dtype.is_floating_point:
        input = torch.randn(7, 9, dtype=dtype, device=device)
        other = torch.randn(7, 9, dtype=dtype, device=device)
    else:
        input = randint_strided(low, high, (7, 9), dtype=dtype, device=device)
        other = randint_strided(low, high, (7, 9), dtype=dtype, device=device)
    out = torch.empty_like(input)
    if implementation_index == 8 and dtype in (
        torch.uint16,
        torch.uint32,
        torch.uint64,
    ):
        # Slot 8 calls ATen as is, which has no `add` for these; it says so.
        with pytest.raises(ValueError, match=r"`add`: the ATen implementation.*uint"):
            infini.ops.add(input, other, 3, out, implementation_index=8)
        return
    infini.ops.add(input, other, 3, out, implementation_index=implementation_index)
    if dtype in (torch.uint16, torch.uint32, torch.uint64):
        # torch has no CPU add for these; wrap-around arithmetic in int64 is the same.
        expected = input.to(torch.int64) + 3 * other.to(torch.int64)
        if dtype != torch.uint64:
            expected %= 1 << torch.iinfo(dtype).bits
        assert torch.equal(out.to(torch.int64), expected)
    elif dtype.is_floating_point:
        # torch may fuse the multiply-add; allow the last bit.
        assert torch.allclose(
            out, torch.add(input, other, alpha=3), rtol=1e-15, atol=1e-15
        )
    else:
        assert torch.equal(out, torch.add(input, other, alpha=3))


def test_add_token_major_inputs_into_heads_major_output(device, implementation_index):
    """Rows of large outputs are visited in tiles of tokens when the inputs
    hold tokens outermost; every element must still be written once."""
    _skip_unsupported_by_triton_jit(implementation_index, reason="strides")
    # Over a million elements: tiled (a partial last tile of 3 tokens).
    tokens, heads, head = 259, 32, 128
    input = torch.randn(tokens, heads, head, device=device)
    other = torch.randn(tokens, heads, head, device=device)
    out = torch.empty(heads, tokens, head, device=device).transpose(0, 1)
    infini.ops.add(input, other, out, implementation_index=implementation_index)
    torch.testing.assert_close(out, input + other, rtol=1e-6, atol=0)


def test_add_broadcasts_inputs_of_lower_rank(device, implementation_index):
    _skip_unsupported_by_triton_jit(implementation_index, reason="broadcasting")
    input = torch.randn(5, 1, 3, device=device)
    other = torch.randn(4, 1, device=device)
    out = torch.empty(5, 4, 3, device=device)
    infini.ops.add(input, other, out, implementation_index=implementation_index)
    assert torch.allclose(out, input + other)


@pytest.mark.parametrize("target", ["input", "other"])
def test_add_in_place(target, device, implementation_index):
    input = torch.randn(33, 17, device=device)
    other = torch.randn(33, 17, device=device)
    expected = input + other
    out = input if target == "input" else other
    infini.ops.add(input, other, out, implementation_index=implementation_index)
    assert torch.allclose(out, expected)


def test_add_partially_overlapping_output_reads_inputs_first(
    device, implementation_index
):
    _skip_unsupported_by_triton_jit(implementation_index, reason="strides")
    storage = torch.randn(64 * 64, device=device)
    input = storage.view(64, 64)
    other = torch.randn(64, 64, device=device)
    expected = (input + other).clone()
    out = storage.view(64, 64).t()  # the same memory, transposed
    infini.ops.add(input, other, out, implementation_index=implementation_index)
    assert torch.allclose(out, expected)


def test_add_rejects_mismatched_shapes(device):
    input = torch.randn(4, 5, device=device)
    other = torch.randn(4, 6, device=device)
    out = torch.empty(4, 5, device=device)
    with pytest.raises(ValueError, match="`add`.*broadcast"):
        infini.ops.add(input, other, out)


def test_add_rejects_wrong_output_shape_without_writing(device):
    input = torch.randn(4, 5, device=device)
    out = torch.full((4, 4), 7.0, device=device)
    with pytest.raises(ValueError, match="`add`: `out` must have the broadcast shape"):
        infini.ops.add(input, input, out)
    assert bool((out == 7.0).all())


def test_add_rejects_mismatched_dtypes(device):
    input = torch.randn(4, 5, device=device)
    other = torch.randn(4, 5, device=device, dtype=torch.float64)
    with pytest.raises(ValueError, match="`add`: `other` has dtype float64"):
        infini.ops.add(input, other, torch.empty_like(input))


def test_add_rejects_broadcast_output(device):
    input = torch.randn(4, 5, device=device)
    out = torch.empty(1, 5, device=device).expand(4, 5)
    with pytest.raises(ValueError, match="`add`: `out` is written but has a stride-0"):
        infini.ops.add(input, input, out)


def test_add_rejects_fractional_alpha_for_integers(device):
    input = torch.ones(3, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="`add`: `alpha` must be integral"):
        infini.ops.add(input, input, 0.5, torch.empty_like(input))


@pytest.mark.smoke
def test_add_inactive_implementation_index_names_operator_and_slot():
    x = torch.randn(13, 4)
    out = torch.empty(13, 4)
    with pytest.raises(ValueError, match=r"`add`.*`implementation_index` 7"):
        infini.ops.add(x, x, out, implementation_index=7)
    with pytest.raises(ValueError, match=r"`add`.*`implementation_index`"):
        infini.ops.add(x, x, out, implementation_index=-1)


def _triton_jit_active(device):
    if TRITON_JIT_SLOT not in infini.ops.Add.active_implementation_indices(device):
        pytest.skip("this build has no Triton JIT add for this device")


@pytest.mark.smoke
def test_add_triton_config_rejects_unknown_fields(device):
    _triton_jit_active(device)
    x = torch.randn(13, 4, device=device)
    out = torch.empty_like(x)
    for config in (
        {"unexpected": 1},
        {"auto_tuning": {"candidates": [{}], "unexpected": 1}},
        {"auto_tuning": {"candidates": [{"unexpected": 1}]}},
    ):
        with pytest.raises(
            ValueError, match="Unknown Triton JIT config field `unexpected`"
        ):
            infini.ops.add(
                x, x, out, implementation_index=TRITON_JIT_SLOT, config=config
            )


@pytest.mark.smoke
@pytest.mark.parametrize(
    "config",
    [
        {},
        {"num_warps": 2, "num_stages": 2, "constexprs": {"BLOCK_SIZE": 64}},
        {
            "auto_tuning": {
                "warmup_milliseconds": 0,
                "repetition_milliseconds": 1,
                "candidates": [{"constexprs": {"BLOCK_SIZE": 32}}, {"num_warps": 8}],
            }
        },
    ],
    ids=["defaults", "compile", "auto-tuning"],
)
def test_add_triton_config(config, device):
    _triton_jit_active(device)
    input = torch.randn(13, 4, device=device)
    other = torch.randn(13, 4, device=device)
    out = torch.empty_like(input)
    infini.ops.add(
        input, other, out, implementation_index=TRITON_JIT_SLOT, config=config
    )
    assert torch.equal(out, input + other)
