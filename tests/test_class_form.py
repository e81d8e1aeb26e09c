"""The class form computes with what each call gives it (issue 25, item 1).

`Op(*args)` builds the operator for one call; `op_object(*new_args)` with
other scalars, or in another overload, must give what the function form
gives for `new_args` (docs/behaviour.md, "Operator classes"). For every
operator of the build with a valid call (the hostile matrix's table
`tests/_valid_calls.py` for the native operators, the inputs
`tests/test_torch_ops.py` makes from the ATen schema for the others), each
scalar of the call is changed in turn to a value the function form accepts
(preferably one that changes the result), and the object built for the old
value is called with the new one. The function form itself is checked
against torch by the operators' own tests; the explicit cases below also
check against a torch reference.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import infini.ops
from infini.ops.core.manifest import load_manifest
from infini.ops.core.schema import class_name_of
from infini.ops.core.signature import (
    BOOL,
    FLOAT,
    INT,
    STR,
    resolve,
)
from tests._valid_calls import VALID_CALLS

# Other values of string parameters, by name (the first one that differs
# from the call's and that the function form accepts is used).
STRING_VALUES = {
    "filter_apply_order": ("joint", "top_k_first"),
    "approximate": ("tanh", "none"),
    "reduce": ("mean", "sum", "amax"),
    "UPLO": ("U", "L"),
    "interpolation": ("nearest", "linear", "lower"),
    "mode": ("complete", "reduced"),
    "padding_mode": ("border", "zeros"),
    "reduction": ("sum", "mean", "none"),
    "rounding_mode": ("floor", "trunc"),
}


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [_clone(item) for item in value]
    return value


def _tensors(args):
    found = []
    for value in args:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _aten_call(operator):
    """A valid call of an ATen operator, from `tests/test_torch_ops.py`'s
    input maker and the reference's output shapes; `None` when there is
    none."""
    from tests import test_torch_ops

    entry = next(
        (e for e in test_torch_ops._testable_ops() if e["name"] == operator), None
    )
    if entry is None or test_torch_ops._is_random(entry):
        return None
    params, values = test_torch_ops._inputs(entry, (13, 4), torch.float32, "cpu")
    try:
        expected = test_torch_ops._reference(entry, params, values)
    except pytest.skip.Exception:
        return None
    except Exception:  # noqa: BLE001 - the reference rejects the inputs
        return None
    if entry.get("form") == "inplace":
        return values
    outputs = [p for p in entry["params"] if p["is_out"]]
    if len(outputs) != len(expected) or any(
        t.is_complex() or t.numel() == 0 for t in expected
    ):
        return None
    return values + [torch.empty_like(t) for t in expected]


def _valid_call(operator):
    if operator in VALID_CALLS:
        return list(VALID_CALLS[operator](3).args)
    return _aten_call(operator)


def _run_function(operator, args):
    """The tensors of `args` after the function form ran on a copy, or the
    exception it raised."""
    args = _clone(args)
    torch.manual_seed(0)
    try:
        getattr(infini.ops, operator)(*args)
    except Exception as error:  # noqa: BLE001 - the caller compares
        return error
    return _tensors(args)


def _candidates(parameter, value):
    kind = parameter.kind
    if value is None:
        return []
    if kind == FLOAT:
        return [value / 2 + 0.125, value + 1.0, -value]
    if kind == BOOL:
        return [not value]
    if kind == INT:
        return [c for c in (value + 1, value - 1, 2, 1, 0) if c != value]
    if kind == STR:
        return [c for c in STRING_VALUES.get(parameter.name, ()) if c != value]
    return []


def _same(first, second):
    return len(first) == len(second) and all(
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(
            torch.nan_to_num(a, nan=1234.5), torch.nan_to_num(b, nan=1234.5)
        )
        and bool((a.isnan() == b.isnan()).all() if a.is_floating_point() else True)
        for a, b in zip(first, second, strict=True)
    )


def _changed_calls(operator, args):
    """(parameter name, new arguments, the function form's tensors after
    them, whether they differ from the old call's) for each scalar the
    function form accepts another value of."""
    entry = infini.ops._entries[operator]
    overloads = [b.overload for b in entry.bound_overloads]
    bound = resolve(overloads, tuple(args), {})
    assert bound is not None, f"the valid call of `{operator}` binds to no overload"
    old = _run_function(operator, args)
    assert not isinstance(old, Exception), (
        f"the valid call of `{operator}` fails: {old}"
    )
    changes = []
    for position, parameter in enumerate(bound[0].parameters[: len(args)]):
        if parameter.is_tensor:
            continue
        chosen = None
        for candidate in _candidates(parameter, args[position]):
            changed = list(args)
            changed[position] = candidate
            result = _run_function(operator, changed)
            if isinstance(result, Exception):
                continue
            visible = not _same(result, old)
            if chosen is None or (visible and not chosen[3]):
                chosen = (parameter.name, changed, result, visible)
            if visible:
                break
        if chosen is not None:
            changes.append(chosen)
    return old, changes


OPERATORS = (
    sorted(load_manifest()["operators"])
    if load_manifest().get("python_bindings", True)
    else []
)


@pytest.mark.parametrize("operator", OPERATORS)
def test_class_computes_with_a_changed_scalar(operator):
    args = _valid_call(operator)
    if args is None:
        pytest.skip(
            f"no valid call of `{operator}` to change (no table entry or ATen input)"
        )
    old, changes = _changed_calls(operator, args)
    if not changes:
        pytest.skip(
            f"the valid call of `{operator}` has no scalar that the function "
            "form accepts another value of"
        )
    cls = getattr(infini.ops, class_name_of(operator))
    for name, changed, expected, _ in changes:
        built = _clone(args)
        op = cls(*built)
        called = _clone(changed)
        torch.manual_seed(0)
        op(*called)
        assert _same(_tensors(called), expected), (
            f"`{class_name_of(operator)}` built with the old `{name}` and called "
            f"with a new one differs from `{operator}` with the new value"
        )
        # And back: the object's first operator serves the old value.
        again = _clone(args)
        torch.manual_seed(0)
        op(*again)
        assert _same(_tensors(again), old), (
            f"`{class_name_of(operator)}` called again with the old `{name}` "
            "differs from the function form"
        )


# -- explicit cases against torch -------------------------------------------------


def _rms_norm(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_rms_norm_object_uses_the_call_eps_and_the_other_overload():
    x, w = torch.randn(4, 64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    out = torch.empty_like(x)
    op = infini.ops.RmsNorm(x, w, 1e-6, out)
    op(x, w, 0.5, out)
    torch.testing.assert_close(out, _rms_norm(x, w, 0.5))
    assert not torch.allclose(out, _rms_norm(x, w, 1e-6))
    # The other overload: `eps` is its default, 1e-6.
    op = infini.ops.RmsNorm(x, w, 0.5, out)
    op(x, w, out)
    torch.testing.assert_close(out, _rms_norm(x, w, 1e-6))
    op(x, w, 0.5, out)
    torch.testing.assert_close(out, _rms_norm(x, w, 0.5))
    # Built without `eps`, called with one.
    op = infini.ops.RmsNorm(x, w, out)
    op(x, w, 0.25, out)
    torch.testing.assert_close(out, _rms_norm(x, w, 0.25))


def test_add_object_uses_the_call_alpha():
    a, b, c = torch.randn(3), torch.randn(3), torch.empty(3)
    op = infini.ops.Add(a, b, 1.0, c)
    op(a, b, 5.0, c)
    torch.testing.assert_close(c, a + 5.0 * b)
    op(a, b, c)
    torch.testing.assert_close(c, a + b)
    op(a, b, alpha=2.0, out=c)
    torch.testing.assert_close(c, a + 2.0 * b)


def test_an_object_keeps_one_operator_per_scalar_value():
    a, b, c = torch.randn(3), torch.randn(3), torch.empty(3)
    op = infini.ops.Add(a, b, 1.0, c)
    for _ in range(3):
        op(a, b, 1.0, c)
    assert len(op._operators) == 1
    op(a, b, 5.0, c)
    op(a, b, 1.0, c)
    op(a, b, 5.0, c)
    assert len(op._operators) == 2
    torch.testing.assert_close(c, a + 5.0 * b)


def test_sampling_object_uses_the_call_filter_apply_order():
    args = list(VALID_CALLS["top_k_top_p_sampling_from_logits"](6).args)
    position = args.index("top_k_first")
    op = infini.ops.TopKTopPSamplingFromLogits(*args)
    joint = list(args)
    joint[position] = "joint"
    for seed in range(4):
        joint[-1] = torch.zeros_like(args[-1])
        joint[-3] = seed
        op(*joint)
        expected = _clone(joint)
        infini.ops.top_k_top_p_sampling_from_logits(*expected)
        assert torch.equal(joint[-1], expected[-1])
    # The object built an operator for "joint" beside the constructor's.
    assert sorted(o.joint for o in op._operators.values()) == [False, True]


def test_class_rejects_the_function_keywords_naming_them():
    x, w = torch.randn(4, 64), torch.randn(64)
    out = torch.empty_like(x)
    for keyword, value in (("implementation_index", 0), ("stream", 0)):
        with pytest.raises(
            TypeError, match=f"`rms_norm`: `RmsNorm` objects take no `{keyword}`"
        ):
            infini.ops.RmsNorm(x, w, 1e-6, out, **{keyword: value})
        op = infini.ops.RmsNorm(x, w, 1e-6, out)
        with pytest.raises(TypeError, match=f"`{keyword}`"):
            op(x, w, 1e-6, out, **{keyword: value})
    with pytest.raises(TypeError) as error:
        infini.ops.RmsNorm(x, w, "eps", out)
    assert "RmsNorm(input: Tensor" in str(error.value)
    assert "implementation_index" not in str(error.value)
    assert "stream" not in str(error.value)


def test_class_signature_and_doc_show_what_the_class_takes():
    signature = inspect.signature(infini.ops.RmsNorm)
    assert list(signature.parameters) == ["input", "weight", "eps", "out"]
    doc = infini.ops.RmsNorm.__doc__
    assert "RmsNorm(input: Tensor, weight: Tensor, eps: float, out: Tensor!)" in doc
    assert "RmsNorm(input: Tensor, weight: Tensor, out: Tensor!)" in doc
    assert "stream: int" not in doc and "implementation_index: int" not in doc
    assert "mean(input^2, dim=-1)" in doc


def test_function_signature_and_doc():
    signature = inspect.signature(infini.ops.rms_norm)
    assert list(signature.parameters) == [
        "input", "weight", "eps", "out", "stream", "implementation_index"
    ]  # fmt: skip
    kinds = [p.kind for p in signature.parameters.values()]
    assert kinds[-2:] == [inspect.Parameter.KEYWORD_ONLY] * 2
    assert signature.parameters["eps"].annotation is float
    assert signature.parameters["implementation_index"].default is None
    doc = infini.ops.rms_norm.__doc__
    assert doc.count("rms_norm(input: Tensor, weight: Tensor") == 2
    assert "mean(input^2, dim=-1)" in doc
    assert "See `infini.ops.base" not in doc


def test_every_public_name_has_its_signature_and_every_overload_in_its_doc():
    problems = []
    for name, entry in infini.ops._entries.items():
        function = getattr(infini.ops, name)
        cls = getattr(infini.ops, entry.class_name)
        first = [p.split(":")[0].strip() for p in _split(entry.overload_texts[0])]
        keywords = ["stream", "implementation_index"] + (
            ["config"] if entry.has_triton else []
        )
        if list(inspect.signature(function).parameters) != first + keywords:
            problems.append(f"{name}: {inspect.signature(function)}")
        if list(inspect.signature(cls).parameters) != first:
            problems.append(f"{entry.class_name}: {inspect.signature(cls)}")
        semantics = inspect.cleandoc(entry.base.__doc__ or "").strip()
        for text in entry.overload_texts:
            if f"{name}({text}, *, stream" not in function.__doc__:
                problems.append(f"{name}: the doc lacks ({text})")
            if f"{entry.class_name}({text})" not in cls.__doc__:
                problems.append(f"{entry.class_name}: the doc lacks ({text})")
        if (
            not semantics
            or semantics not in function.__doc__
            or semantics not in cls.__doc__
        ):
            problems.append(f"{name}: the doc lacks the base's description")
    assert not problems, problems[:10]


def _split(text):
    from infini.ops.core.signature import _split_top_level

    return _split_top_level(text)


def test_public_names_are_made_on_first_lookup(tmp_path):
    # Importing and building the surface imports no operator base; looking
    # one name up imports that operator's base only.
    import subprocess
    import sys

    code = (
        "import sys, infini.ops\n"
        "dir(infini.ops)\n"
        "assert 'infini.ops.base.rms_norm' not in sys.modules\n"
        "assert 'rms_norm' not in vars(infini.ops)\n"
        "infini.ops.rms_norm\n"
        "assert 'infini.ops.base.rms_norm' in sys.modules\n"
        "assert 'infini.ops.base.add_rms_norm' not in sys.modules\n"
        "assert 'RmsNorm' in dir(infini.ops) and 'RmsNorm' in infini.ops.__all__\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"
