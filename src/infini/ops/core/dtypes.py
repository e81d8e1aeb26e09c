"""Data types: the twelve InfiniOps types plus `bool`, by name."""

from __future__ import annotations

INTEGER_DTYPES = (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# The InfiniRT `DataType` names, in enum order.
DTYPE_NAMES = INTEGER_DTYPES + FLOAT_DTYPES
# `bool` has no InfiniRT type (the original maps it to `uint8`); kernels here
# see it by name so that casts to `bool` give 0/1 as torch does.
SUPPORTED_DTYPES = DTYPE_NAMES + ("bool",)
UNSIGNED_INTEGER_DTYPES = INTEGER_DTYPES[4:]

ELEMENT_SIZE = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "bool": 1,
}

_NAME_CACHE: dict[object, str | None] = {}


def dtype_name(dtype: object) -> str | None:
    """The InfiniOps name of a dtype object (`torch.float16` -> `float16`),
    read from its `str()` cut at the last `.`, or `None` if unsupported."""
    try:
        return _NAME_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    name = str(dtype).rsplit(".", 1)[-1]
    result = name if name in SUPPORTED_DTYPES else None
    try:
        _NAME_CACHE[dtype] = result
    except TypeError:
        pass
    return result


def is_float(name: str) -> bool:
    return name in FLOAT_DTYPES


def is_integer(name: str) -> bool:
    return name in INTEGER_DTYPES or name == "bool"
