"""Tensor metadata read from caller tensors by duck typing.

An operator is built from `TensorMeta` objects (shape, strides, dtype, device);
it never keeps the caller's tensors, so a cached operator runs on new data.
"""

from __future__ import annotations

from .devices import Device
from .dtypes import ELEMENT_SIZE, dtype_name


class TensorMeta:
    """Shape, strides (in elements), dtype name and device of one tensor."""

    __slots__ = ("shape", "strides", "dtype", "torch_dtype", "device", "numel")

    def __init__(
        self,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        dtype: str,
        device: Device,
        torch_dtype: object = None,
    ) -> None:
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.torch_dtype = torch_dtype
        self.device = device
        numel = 1
        for size in shape:
            numel *= size
        self.numel = numel

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def element_size(self) -> int:
        return ELEMENT_SIZE[self.dtype]

    def size(self, dim: int) -> int:
        return self.shape[dim]

    def stride(self, dim: int) -> int:
        return self.strides[dim]

    def is_contiguous(self) -> bool:
        """Row-major with no gaps (dimensions of size 1 may have any stride).
        A zero-size tensor has no elements, so no gaps: it is contiguous
        whatever its strides, as in torch (``torch.empty(3, 0)`` has strides
        ``(1, 1)``)."""
        if 0 in self.shape:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def __repr__(self) -> str:
        return (
            f"TensorMeta(shape={self.shape}, strides={self.strides}, "
            f"dtype={self.dtype}, device={self.device})"
        )


def is_tensor_like(value: object) -> bool:
    return all(
        hasattr(value, attribute)
        for attribute in ("data_ptr", "shape", "stride", "dtype", "device")
    )


def read_meta(value: object, device_map, operator: str, parameter: str) -> TensorMeta:
    """Reads the metadata of a tensor argument, or raises a `ValueError` that
    names the operator and the parameter."""
    from .errors import OperatorError, describe_value

    if not is_tensor_like(value):
        raise OperatorError(
            operator, f"`{parameter}` must be a tensor, got {describe_value(value)}."
        )
    name = dtype_name(value.dtype)
    if name is None:
        raise OperatorError(
            operator,
            f"`{parameter}` has unsupported dtype {value.dtype}; InfiniOps supports "
            "int8-int64, uint8-uint64, float16, bfloat16, float32, float64 and bool.",
        )
    try:
        device = device_map.device_of(value.device)
    except ValueError as error:
        raise OperatorError(operator, f"`{parameter}`: {error}") from None
    try:
        shape = tuple(int(size) for size in value.shape)
        strides = tuple(int(stride) for stride in value.stride())
    except Exception as error:  # noqa: BLE001 - reported with the parameter
        raise OperatorError(
            operator,
            f"`{parameter}`: the shape and strides of {describe_value(value)} do "
            f"not read as integers ({type(error).__name__}: {error}).",
        ) from error
    return TensorMeta(shape, strides, name, device, value.dtype)
