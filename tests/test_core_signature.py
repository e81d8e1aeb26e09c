"""The binder: overload parsing and pybind11-style strict/lenient matching."""

import pytest

from infini.ops.core.signature import Overload, parse_overload, resolve

pytestmark = pytest.mark.smoke

ARGSORT = [
    Overload(
        0, "input: Tensor, dim: int, descending: bool, stable: bool, out: Tensor!"
    ),
    Overload(
        1, "input: Tensor, stable: bool, dim: int, descending: bool, out: Tensor!"
    ),
]


def test_parse_types_defaults_and_written_tensors():
    parameters = parse_overload(
        "positions: Tensor, query: Tensor!, key: Tensor|None!, head_size: int, "
        "rope_dim_offset: int = 0, inverse: bool = false, dims: list[int]|None"
    )
    names = [p.name for p in parameters]
    assert names == [
        "positions",
        "query",
        "key",
        "head_size",
        "rope_dim_offset",
        "inverse",
        "dims",
    ]
    assert parameters[1].writes and parameters[2].writes and parameters[2].optional
    assert parameters[4].has_default and parameters[4].default == 0
    assert parameters[5].default is False
    assert parameters[6].has_default and parameters[6].default is None
    assert not parameters[3].has_default


def test_strict_pass_routes_bools_to_the_deprecated_argsort_overload():
    overload, values, _ = resolve(ARGSORT, ("x", True, 0, True, "out"), {})
    assert overload.index == 1
    overload, values, _ = resolve(ARGSORT, ("x", 0, True, False, "out"), {})
    assert overload.index == 0


def test_lenient_pass_accepts_int_for_bool_and_float():
    overload, values, _ = resolve(ARGSORT, ("x", 1, 0, 1, "out"), {})
    assert overload.index == 0  # descending=0 is only accepted leniently
    add = [
        Overload(0, "input: Tensor, other: Tensor, alpha: float, out: Tensor!"),
        Overload(1, "input: Tensor, other: Tensor, out: Tensor!"),
    ]
    overload, values, _ = resolve(add, ("x", "y", 2, "out"), {})
    assert overload.index == 0 and values[2] == 2


def test_float_never_binds_to_int():
    cat = [Overload(0, "tensors: list[Tensor], dim: int, out: Tensor!")]
    assert resolve(cat, (["a"], 1.0, "out"), {}) is None
    assert resolve(cat, (["a"], True, "out"), {}) is not None


def test_keywords_defaults_and_required_parameters_after_defaults():
    gemm = [
        Overload(0, "a: Tensor, b: Tensor, y: Tensor!"),
        Overload(
            1,
            "a: Tensor, b: Tensor, c: Tensor|None, alpha: float|None, "
            "beta: float|None, trans_a: int|None, trans_b: int|None, y: Tensor!",
        ),
    ]
    overload, values, _ = resolve(gemm, ("a", "b"), {"alpha": 2.0, "y": "y"})
    assert overload.index == 1
    assert values == ("a", "b", None, 2.0, None, None, None, "y")
    assert resolve(gemm, ("a",), {"b": "b", "y": "y"})[0].index == 0
    assert resolve(gemm, ("a", "b"), {"unknown": 1, "y": "y"}) is None
    assert resolve(gemm, ("a", "b", "y"), {"a": "again"}) is None


def test_strings_lists_and_optional_scalars():
    gelu = [Overload(0, "input: Tensor, approximate: str, out: Tensor!")]
    assert resolve(gelu, ("x", "tanh", "o"), {}) is not None
    assert resolve(gelu, ("x", 1, "o"), {}) is None
    conv = [Overload(0, "input: Tensor, stride: list[int], padding: str, out: Tensor!")]
    assert resolve(conv, ("x", [1, 2], "same", "o"), {}) is not None
    assert resolve(conv, ("x", [1.5], "same", "o"), {}) is None
    clamp = [
        Overload(0, "input: Tensor, min: float|None, max: float|None, out: Tensor!")
    ]
    assert resolve(clamp, ("x", None, 1.0, "o"), {}) is not None


def test_type_determined_choices_are_remembered_value_dependent_are_not():
    _, _, remember = resolve(ARGSORT, ("x", True, 0, True, "out"), {})
    assert remember
    conv = [Overload(0, "input: Tensor, stride: list[int], out: Tensor!")]
    _, _, remember = resolve(conv, ("x", [1], "o"), {})
    assert not remember


def test_malformed_overloads_are_rejected_with_the_parameter_named():
    with pytest.raises(ValueError, match="'input Tensor' is not `name: Type"):
        parse_overload("input Tensor")
    with pytest.raises(ValueError, match="'x' appears twice"):
        parse_overload("x: Tensor, x: Tensor!")
    with pytest.raises(ValueError, match="unknown parameter type 'Tensr'"):
        parse_overload("x: Tensr")
    with pytest.raises(ValueError, match="default 'eps' of 'alpha' is not a literal"):
        parse_overload("alpha: float = eps")
    (parameter,) = parse_overload("eps: float = 1e-6")
    assert parameter.default == 1e-6 and parameter.default_text == "1e-6"
