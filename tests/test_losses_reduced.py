"""Reduced losses at the ATen slot with a 0-d `out` (docs/behaviour.md, "Loss
reductions"): `mse_loss`, `smooth_l1_loss` and `soft_margin_loss`, each
reduction, both overloads, against `torch.nn.functional`. ATen's `out=`
kernels use `out` as elementwise scratch before they reduce, so the 0-d
`out` is staged: the caller's storage is never resized and no deprecation
warning reaches the caller."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import infini.ops

REDUCTIONS = ("none", "mean", "sum")
LOSSES = ("mse_loss", "smooth_l1_loss", "soft_margin_loss")
SHAPE = (13, 4)
BETA = 0.7


def _skip_if_missing(name):
    cls = getattr(infini.ops, "".join(p.title() for p in name.split("_")))
    if 8 not in cls.active_implementation_indices("cpu"):
        pytest.skip(f"`{name}` has no slot 8 on cpu in this build")


def _inputs(name, dtype):
    generator = torch.Generator().manual_seed(24)
    input = torch.randn(SHAPE, generator=generator, dtype=dtype)
    if name == "soft_margin_loss":
        target = torch.randint(0, 2, SHAPE, generator=generator).to(dtype) * 2 - 1
    else:
        target = torch.randn(SHAPE, generator=generator, dtype=dtype)
    return input, target


def _reference(name, input, target, reduction):
    if name == "smooth_l1_loss":
        return F.smooth_l1_loss(input, target, reduction=reduction, beta=BETA)
    return getattr(F, name)(input, target, reduction=reduction)


def _call(name, overload, input, target, reduction, out):
    if overload == "integer":
        code = REDUCTIONS.index(reduction)
        if name == "smooth_l1_loss":
            infini.ops.smooth_l1_loss(input, target, code, BETA, out)
        else:
            getattr(infini.ops, name)(input, target, code, out)
        return
    arguments = {
        "input": input,
        "target": target,
        "size_average": None,
        "reduce": None,
        "reduction": reduction,
        "out": out,
    }
    if name == "smooth_l1_loss":
        arguments["beta"] = BETA
    if name == "mse_loss":
        arguments["weight"] = None
    getattr(infini.ops, name)(**arguments)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("overload", ["integer", "compatible"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", LOSSES)
def test_reduced_loss_into_a_0d_out(name, reduction, overload, dtype):
    _skip_if_missing(name)
    input, target = _inputs(name, dtype)
    expected = _reference(name, input, target, reduction)
    # `none` needs an elementwise `out`; the reductions get a 0-d one that
    # is a view into a larger buffer, whose other elements must survive.
    buffer = torch.full((8,), 7.0, dtype=dtype)
    out = torch.full(SHAPE, 7.0, dtype=dtype) if reduction == "none" else buffer[3]
    storage_bytes = out.untyped_storage().nbytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _call(name, overload, input, target, reduction, out)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected)
    assert out.untyped_storage().nbytes() == storage_bytes
    if reduction != "none":
        assert out.data_ptr() == buffer.data_ptr() + 3 * buffer.element_size()
        untouched = torch.cat([buffer[:3], buffer[4:]])
        assert torch.equal(untouched, torch.full((7,), 7.0, dtype=dtype))


@pytest.mark.parametrize("overload", ["integer", "compatible"])
@pytest.mark.parametrize("name", LOSSES)
def test_unreduced_loss_rejects_a_0d_out_untouched(name, overload):
    _skip_if_missing(name)
    input, target = _inputs(name, torch.float32)
    out = torch.tensor(7.0)
    with pytest.raises(ValueError, match=rf"`{name}`: `out` must have shape"):
        _call(name, overload, input, target, "none", out)
    assert out.item() == 7.0
