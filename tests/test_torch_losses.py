"""The loss operators (docs/behaviour.md, "Loss reductions"): PyTorch's overload with
`reduction` as a string and the legacy `size_average`/`reduce` flags, and the original's
deprecated overload with ATen's integer `reduction` (0 none, 1 mean, 2 sum)."""

import pytest
import torch
import torch.nn.functional as F

import infini.ops

REDUCTIONS = ("none", "mean", "sum")
N, C = 6, 5


def _inputs(name):
    x = torch.randn(N, C)
    if name == "binary_cross_entropy":
        return torch.sigmoid(x), torch.rand(N, C), torch.rand(N, C)
    if name == "nll_loss":
        return torch.log_softmax(x, dim=1), torch.randint(0, C, (N,)), torch.rand(C)
    if name == "multi_margin_loss":
        return x, torch.randint(0, C, (N,)), torch.rand(C)
    if name == "multilabel_margin_loss":
        target = torch.randint(0, C, (N, C))
        target[:, 2] = -1
        return x, target, None
    if name == "soft_margin_loss":
        return x, torch.randint(0, 2, (N, C)).float() * 2 - 1, None
    return x, torch.randn(N, C), None


def _reference(name, input, target, weight, reduction):
    function = getattr(F, name)
    if name in ("binary_cross_entropy", "nll_loss"):
        return function(input, target, weight, reduction=reduction)
    if name == "multi_margin_loss":
        return function(input, target, 2, 0.5, weight, reduction=reduction)
    if name == "huber_loss":
        return function(input, target, reduction=reduction, delta=0.7)
    if name == "smooth_l1_loss":
        return function(input, target, reduction=reduction, beta=0.7)
    return function(input, target, reduction=reduction)


def _call_legacy(name, input, target, weight, reduction, out):
    """The deprecated overload: `reduction` is ATen's integer."""
    code = REDUCTIONS.index(reduction)
    ops = infini.ops
    if name == "binary_cross_entropy":
        ops.binary_cross_entropy(input, target, weight, code, out)
    elif name == "nll_loss":
        ops.nll_loss(input, target, weight, code, -100, out)
    elif name == "multi_margin_loss":
        ops.multi_margin_loss(input, target, 2.0, 0.5, weight, code, out)
    elif name == "huber_loss":
        ops.huber_loss(input, target, code, 0.7, out)
    elif name == "smooth_l1_loss":
        ops.smooth_l1_loss(input, target, code, 0.7, out)
    else:
        getattr(ops, name)(input, target, code, out)


def _call_compatible(name, input, target, weight, out, size_average, reduce, text):
    """PyTorch's overload, by keyword as the original's tests call it."""
    kwargs = {"input": input, "target": target, "reduction": text, "out": out}
    if name != "huber_loss":
        kwargs.update(size_average=size_average, reduce=reduce)
    if name in ("binary_cross_entropy", "nll_loss", "multi_margin_loss"):
        kwargs["weight"] = weight
    if name == "nll_loss":
        kwargs["ignore_index"] = -100
    if name == "multi_margin_loss":
        kwargs.update(p=2, margin=0.5)
    if name == "huber_loss":
        kwargs.update(weight=None, delta=0.7)
    if name == "smooth_l1_loss":
        kwargs["beta"] = 0.7
    if name == "mse_loss":
        kwargs["weight"] = None
    getattr(infini.ops, name)(**kwargs)


LOSSES = [
    "binary_cross_entropy",
    "huber_loss",
    "mse_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "nll_loss",
    "smooth_l1_loss",
    "soft_margin_loss",
]


def _skip_if_missing(name):
    cls = getattr(infini.ops, "".join(p.title() for p in name.split("_")), None)
    if cls is None or 8 not in cls.active_implementation_indices("cpu"):
        pytest.skip(f"`{name}` has no slot 8 on cpu in this build")


def _out_and_check(name, input, target, weight, reduction):
    """`out` and a check of it: ATen uses `out` as elementwise scratch for
    the reduced forms, so those read ``out.flatten()[0]`` (docs/behaviour.md, "Loss
    reductions")."""
    expected = _reference(name, input, target, weight, reduction)
    out = torch.empty_like(_reference(name, input, target, weight, "none"))

    def check():
        result = out if reduction == "none" else out.flatten()[0]
        assert torch.allclose(result, expected, rtol=1e-5, atol=1e-6)

    return out, check


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", LOSSES)
def test_loss_both_overloads(name, reduction):
    _skip_if_missing(name)
    input, target, weight = _inputs(name)
    out, check = _out_and_check(name, input, target, weight, reduction)
    _call_legacy(name, input, target, weight, reduction, out)
    check()
    out, check = _out_and_check(name, input, target, weight, reduction)
    _call_compatible(name, input, target, weight, out, None, None, reduction)
    check()


# (size_average, reduce) -> the reduction the legacy rule picks, whatever
# the `reduction` string says.
LEGACY = [
    ((None, None), "sum"),
    ((False, None), "sum"),
    ((None, False), "none"),
    ((True, False), "none"),
    ((True, True), "mean"),
    ((True, None), "mean"),
]


@pytest.mark.parametrize("flags, expected_reduction", LEGACY)
@pytest.mark.parametrize("name", ["mse_loss", "nll_loss", "soft_margin_loss"])
def test_legacy_size_average_and_reduce(name, flags, expected_reduction):
    _skip_if_missing(name)
    input, target, weight = _inputs(name)
    out, check = _out_and_check(name, input, target, weight, expected_reduction)
    _call_compatible(name, input, target, weight, out, *flags, "sum")
    check()


def test_loss_argument_errors():
    _skip_if_missing("mse_loss")
    input, target = torch.randn(N, C), torch.randn(N, C)
    out = torch.empty(())
    with pytest.raises(ValueError, match="`mse_loss`: `weight` must have shape"):
        infini.ops.mse_loss(input, target, torch.ones(C), None, None, "mean", out)
    with pytest.raises(ValueError, match="`mse_loss`: `reduction` must be 'none'"):
        infini.ops.mse_loss(input, target, None, None, None, "average", out)
    with pytest.raises(ValueError, match=r"`mse_loss`: `reduction` must be 0 \(none\)"):
        infini.ops.mse_loss(input, target, 3, out)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["huber_loss", "mse_loss"])
def test_per_element_weight_gives_torch_results(name, reduction):
    _skip_if_missing(name)
    input, target, weight = torch.randn(N, C), torch.randn(N, C), torch.rand(N, C)
    extra = {"delta": 0.7} if name == "huber_loss" else {}
    expected = getattr(F, name)(
        input, target, reduction=reduction, weight=weight, **extra
    )
    out = torch.full((N, C), 7.0)
    if name == "huber_loss":
        infini.ops.huber_loss(input, target, weight, reduction, 0.7, out)
    else:
        infini.ops.mse_loss(input, target, weight, None, None, reduction, out)
    result = out if reduction == "none" else out.flatten()[0]
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("name", ["mse_loss", "smooth_l1_loss", "soft_margin_loss"])
def test_reduced_result_with_a_0d_or_full_out_and_the_shape_kept(name):
    _skip_if_missing(name)
    input, target, weight = _inputs(name)
    for reduction in REDUCTIONS[1:]:
        expected = _reference(name, input, target, weight, reduction)
        for shape in ((), (N, C)):
            out = torch.full(shape, 7.0)
            _call_legacy(name, input, target, weight, reduction, out)
            assert out.shape == shape
            torch.testing.assert_close(out.flatten()[0], expected)
