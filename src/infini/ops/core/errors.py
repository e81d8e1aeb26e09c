"""Error helpers: every message names the operator and, where there is one,
the parameter, with identifiers in backticks."""

from __future__ import annotations


class OperatorError(ValueError):
    """A `ValueError` raised by an operator; it names the operator."""

    def __init__(self, operator: str, message: str) -> None:
        super().__init__(f"`{operator}`: {message}")
        self.operator = operator


def describe_value(value: object) -> str:
    """A short description of `value` for error messages."""
    if value is None:
        return "None"
    kind = type(value).__name__
    if isinstance(value, (bool, int, float, str)):
        return f"{kind} {value!r}"
    return kind
