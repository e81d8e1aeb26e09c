"""Overload signatures and the binder.

Overloads are written as in the catalog, e.g.
``"input: Tensor, other: Tensor, alpha: float, out: Tensor!"``: a `!` after the
type marks a tensor the operator writes, `= value` a default, and every
optional (`X|None`) parameter defaults to `None`.

Binding emulates pybind11: overloads are tried in order, first with the strict
rules, then with the lenient ones (see docs/behaviour.md, "Overload binding").
"""

from __future__ import annotations

import ast
import operator as _operator
import re
from collections.abc import Sequence

from .dtypes import dtype_name

# Parameter kinds.
TENSOR = "Tensor"
OPTIONAL_TENSOR = "Tensor|None"
TENSOR_LIST = "list[Tensor]"
OPTIONAL_TENSOR_LIST = "list[Tensor|None]"
FLOAT = "float"
INT = "int"
BOOL = "bool"
STR = "str"
INT_LIST = "list[int]"
FLOAT_LIST = "list[float]"
INT_LIST_LIST = "list[list[int]]"
DTYPE = "dtype"

_TYPE_ALIASES = {"std::vector<std::vector<int64_t>>": INT_LIST_LIST}
_KINDS = {
    TENSOR,
    OPTIONAL_TENSOR,
    TENSOR_LIST,
    OPTIONAL_TENSOR_LIST,
    FLOAT,
    INT,
    BOOL,
    STR,
    INT_LIST,
    FLOAT_LIST,
    INT_LIST_LIST,
    DTYPE,
}
TENSOR_KINDS = (TENSOR, OPTIONAL_TENSOR, TENSOR_LIST, OPTIONAL_TENSOR_LIST)
_NO_DEFAULT = object()


class Parameter:
    """One parameter of an overload: ``name: Type[!][ = default]``.

    `type` is the type as written, `kind` the type without ``|None``;
    `default` is the evaluated default and `default_text` the text after
    ``=`` (None without one).
    """

    __slots__ = (
        "name",
        "type",
        "kind",
        "optional",
        "writes",
        "default",
        "default_text",
        "has_default",
    )

    def __init__(
        self,
        name: str,
        type_text: str,
        writes: bool,
        default: object,
        default_text: str | None = None,
    ) -> None:
        self.name = name
        self.type = type_text
        self.writes = writes
        self.default_text = default_text
        type_text = _TYPE_ALIASES.get(type_text, type_text)
        if type_text == OPTIONAL_TENSOR or type_text == OPTIONAL_TENSOR_LIST:
            self.kind, self.optional = type_text, type_text == OPTIONAL_TENSOR
        elif type_text.endswith("|None"):
            self.kind, self.optional = type_text[: -len("|None")], True
        else:
            self.kind, self.optional = type_text, False
        if self.kind not in _KINDS:
            raise ValueError(f"unknown parameter type {type_text!r} for {name!r}")
        if default is _NO_DEFAULT and self.optional:
            default = None
        self.has_default = default is not _NO_DEFAULT
        self.default = None if default is _NO_DEFAULT else default

    @property
    def is_tensor(self) -> bool:
        return self.kind in TENSOR_KINDS

    def __repr__(self) -> str:
        text = f"{self.name}: {self.type}{'!' if self.writes else ''}"
        if self.has_default and not self.optional:
            text += f" = {self.default!r}"
        return text


# ``name: Type[!][ = default]``. A type has no spaces except around `|`
# (`int | None`), so a missing comma between two parameters is an error
# rather than a strange type.
_PARAMETER = re.compile(
    r"(?P<name>[A-Za-z_]\w*)\s*:\s*"
    r"(?P<type>[^\s=!]+(?:\s*\|\s*[^\s=!]+)*)\s*(?P<writes>!)?"
    r"\s*(?:=\s*(?P<default>\S.*))?"
)


def parse_overload(text: str) -> tuple[Parameter, ...]:
    """The parameters of an overload string; raises `ValueError` naming the
    parameter when the text is malformed, a name repeats, a type is unknown
    or a default is not a literal."""
    parameters: list[Parameter] = []
    for item in _split_top_level(text):
        match = _PARAMETER.fullmatch(item)
        if match is None:
            raise ValueError(f"parameter {item!r} is not `name: Type[!][ = default]`")
        name = match["name"]
        if any(parameter.name == name for parameter in parameters):
            raise ValueError(f"parameter {name!r} appears twice")
        default_text = match["default"]
        default = _NO_DEFAULT
        if default_text is not None:
            default_text = default_text.strip()
            default = _default_value(name, default_text)
        parameters.append(
            Parameter(
                name,
                re.sub(r"\s*\|\s*", "|", match["type"]),
                match["writes"] is not None,
                default,
                default_text,
            )
        )
    return tuple(parameters)


def _default_value(name: str, text: str) -> object:
    # The catalog writes C++'s `true`/`false`; everything else is a Python
    # literal.
    if text in ("true", "false"):
        return text == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as error:
        raise ValueError(
            f"the default {text!r} of {name!r} is not a literal"
        ) from error


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for position, character in enumerate(text):
        if character in "[<(":
            depth += 1
        elif character in "]>)":
            depth -= 1
        elif character == "," and depth == 0:
            items.append(text[start:position].strip())
            start = position + 1
    if text[start:].strip():
        items.append(text[start:].strip())
    return items


# Matching. Each matcher returns whether `value` is accepted in the given pass.
def _is_int(value: object) -> bool:
    if isinstance(value, int):
        return True
    index = getattr(type(value), "__index__", None)
    if index is None or isinstance(value, float):
        return False
    try:
        _operator.index(value)
    except Exception:
        return False
    return True


def _is_sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(
        value, (str, bytes, bytearray)
    )


def is_tensor_sequence(value: object) -> bool:
    """A tensor with at least one dimension, which a `list[Tensor]`
    parameter accepts as the sequence of its slices along dimension 0 (as
    pybind11's list conversion iterates it)."""
    shape = getattr(value, "shape", None)
    return (
        shape is not None
        and hasattr(value, "data_ptr")
        and hasattr(value, "__iter__")
        and len(shape) >= 1
    )


def _match_scalar(kind: str, value: object, lenient: bool) -> bool:
    if kind == FLOAT:
        if isinstance(value, float):
            return True
        if not lenient:
            return False
        return hasattr(type(value), "__float__") or _is_int(value)
    if kind == INT:
        return _is_int(value)
    if kind == BOOL:
        if value is True or value is False:
            return True
        if not lenient:
            return type(value).__name__ == "bool_"  # numpy booleans, as pybind11
        return value is None or hasattr(type(value), "__bool__")
    if kind == STR:
        return isinstance(value, str)
    if kind == INT_LIST:
        return _is_sequence(value) and all(_is_int(item) for item in value)
    if kind == FLOAT_LIST:
        return _is_sequence(value) and all(
            _match_scalar(FLOAT, item, lenient) for item in value
        )
    if kind == INT_LIST_LIST:
        return _is_sequence(value) and all(
            _match_scalar(INT_LIST, item, lenient) for item in value
        )
    if kind == DTYPE:
        return dtype_name(value) is not None
    raise AssertionError(kind)


def matches(parameter: Parameter, value: object, lenient: bool) -> bool:
    kind = parameter.kind
    if kind == TENSOR or kind == OPTIONAL_TENSOR:
        return True  # checked when the tensor is read, as pybind11 does
    if kind == TENSOR_LIST:
        return _is_sequence(value) or is_tensor_sequence(value)
    if kind == OPTIONAL_TENSOR_LIST:
        return value is None or _is_sequence(value) or is_tensor_sequence(value)
    if value is None and parameter.optional:
        return True
    return _match_scalar(kind, value, lenient)


def convert(parameter: Parameter, value: object) -> object:
    """Converts an accepted value to the parameter's Python type."""
    if value is None:
        return None
    kind = parameter.kind
    if kind == FLOAT:
        return float(value)
    if kind == INT:
        return _operator.index(value)
    if kind == BOOL:
        return bool(value)
    if kind == INT_LIST:
        return tuple(_operator.index(item) for item in value)
    if kind == FLOAT_LIST:
        return tuple(float(item) for item in value)
    if kind == INT_LIST_LIST:
        return tuple(tuple(_operator.index(i) for i in item) for item in value)
    if kind == TENSOR_LIST or kind == OPTIONAL_TENSOR_LIST:
        return list(value)
    return value


def _value_dependent(parameter: Parameter, value: object) -> bool:
    """Whether another value of the same type could be matched differently."""
    kind = parameter.kind
    if parameter.is_tensor or value is None:
        return False
    if kind == INT:
        return type(value) not in (int, bool, float, str)
    if kind in (INT_LIST, FLOAT_LIST, INT_LIST_LIST):
        return _is_sequence(value)
    return kind == DTYPE


class Overload:
    """One overload: its parameters and the precomputed access paths."""

    def __init__(self, index: int, text: str) -> None:
        self.index = index
        self.text = text
        self.parameters = parse_overload(text)
        self.names = tuple(p.name for p in self.parameters)
        self.position = {p.name: i for i, p in enumerate(self.parameters)}
        # The dispatch device comes from the first non-optional tensor parameter.
        self.device_position = next(
            (
                i
                for i, p in enumerate(self.parameters)
                if p.kind in (TENSOR, TENSOR_LIST)
            ),
            None,
        )

    def _fill(self, args: tuple, kwargs: dict) -> list | None:
        """The values in parameter order (defaults filled in), or `None` when
        the count or the keywords do not fit this overload."""
        parameters = self.parameters
        if len(args) > len(parameters):
            return None
        for name in kwargs:
            position = self.position.get(name)
            if position is None or position < len(args):
                return None
        values = list(args)
        for parameter in parameters[len(args) :]:
            if parameter.name in kwargs:
                values.append(kwargs[parameter.name])
            elif parameter.has_default:
                values.append(parameter.default)
            else:
                return None
        return values

    def bind(self, args: tuple, kwargs: dict, lenient: bool) -> tuple | None:
        """The argument tuple in parameter order, or `None` if not accepted."""
        values = self._fill(args, kwargs)
        if values is None:
            return None
        for parameter, value in zip(self.parameters, values):
            if not matches(parameter, value, lenient):
                return None
        return tuple(values)

    def mismatches(self, args: tuple, kwargs: dict) -> list | None:
        """(parameter, value) for every value the lenient pass rejects, or
        `None` when the count or the keywords do not fit (for the message
        of a call no overload accepts)."""
        values = self._fill(args, kwargs)
        if values is None:
            return None
        return [
            (parameter, value)
            for parameter, value in zip(self.parameters, values)
            if not matches(parameter, value, True)
        ]


def resolve(overloads: Sequence[Overload], args: tuple, kwargs: dict):
    """Picks the first overload accepting the arguments, strict pass first.

    Returns `(overload, values, remember)`, where `remember` says whether the
    choice depended only on the types of the positional arguments (so it can
    be remembered per type tuple), or `None` if no overload matches.
    """
    for lenient in (False, True):
        for overload in overloads:
            values = overload.bind(args, kwargs, lenient)
            if values is not None:
                remember = not kwargs and not any(
                    _value_dependent(parameter, value)
                    for candidate in overloads
                    for parameter, value in zip(candidate.parameters, args)
                )
                return overload, values, remember
    return None
