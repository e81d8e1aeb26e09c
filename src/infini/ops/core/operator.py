"""The operator base class.

`base/<op>.py` subclasses `Operator` with the operator's overloads and its
argument validation; an implementation subclasses that base, plans its launch
in `__init__` and runs in `launch`. The dispatcher builds an operator once per
argument geometry (on a cache miss) and then only calls `launch`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import OperatorError
from .geometry import byte_range, written_geometry_problem
from .tensor import TensorMeta


class Arguments:
    """The arguments an operator is built from, by canonical parameter name.

    Tensors appear as `TensorMeta` (lists of them for tensor lists), scalars
    converted to their Python type; parameters that the chosen overload does
    not have hold the base's default (or `None`).
    """

    def __init__(self, values: dict, device, overload_index: int) -> None:
        self.__dict__.update(values)
        self.device = device
        self.overload_index = overload_index

    def __repr__(self) -> str:
        return f"Arguments({self.__dict__})"


class Operator:
    """Base of every operator.

    Subclasses (the bases in `infini.ops.base`) set:

    - `name`: the snake_case operator name;
    - `trace_name`: the name in trace lines (the original's C++ type);
    - `overloads`: the public overloads, in binding order;
    - `defaults`: values for parameters that some overloads lack;
    - `host_tensors`: tensor parameters that stay on the CPU whatever the
      dispatch device (e.g. sampling parameters);
    - `call_scalars`: scalar parameters whose values are per-call data (a
      seed, a random number). The dispatcher keys its cache on their types
      only and calls `bind_call` with their values, in this order, before
      every launch; the base implements `bind_call` (validating the values
      and storing what `launch` reads) and calls it from `__init__`;
    - `shared_outputs`: pairs of written tensor parameters that may share
      memory (none by default: the dispatcher rejects a call whose written
      tensors overlap, see `check_written_disjoint`).
    """

    name: str = ""
    trace_name: str = ""
    overloads: tuple[str, ...] = ()
    defaults: dict = {}
    host_tensors: tuple[str, ...] = ()
    call_scalars: tuple[str, ...] = ()
    shared_outputs: tuple[tuple[str, str], ...] = ()

    implementation_slot: int = -1
    implementation_devices: tuple[str, ...] = ()

    def __init__(self, args: Arguments) -> None:
        self.device = args.device
        self._check_devices(args)

    def bind_call(self, *values) -> None:
        """Takes the call's values of `call_scalars` (converted to their
        parameter types) for the launch that follows; raises like
        construction does for values it rejects."""
        raise NotImplementedError(
            f"`{self.name}` lists `call_scalars` but does not implement `bind_call`"
        )

    # Launching: implementations override this. `tensors` are the canonical
    # tensor parameters in order (lists for tensor lists, `None` for absent
    # optional tensors); `stream` is the caller's raw stream handle.
    def launch(self, stream: int, *tensors) -> None:
        raise NotImplementedError(
            f"`{self.name}` has no launch for this implementation"
        )

    # Binding a launch (optional): implementations whose launch reads
    # nothing but the tensors' addresses may override this to return a
    # callable of no arguments that does what ``launch(stream, *tensors)``
    # does for these very tensors (their addresses captured), or `None`
    # where they cannot (a call needing staging, say). A recorded call
    # (`infini.ops.core.recording`) replays through it, which spares the
    # per-call reading of addresses and checks; the recording's caller
    # guarantees that the tensors keep their memory and geometry.
    def bind_launch(self, stream: int, *tensors):
        del stream, tensors
        return None

    # Helpers for validation messages.
    def error(self, message: str) -> OperatorError:
        return OperatorError(self.name, message)

    def _check_devices(self, args: Arguments) -> None:
        for name, value in args.__dict__.items():
            if name in self.host_tensors:
                continue
            for meta in _metas(value):
                if meta.device != self.device:
                    raise self.error(
                        f"`{name}` is on {meta.device} but the operator runs on "
                        f"{self.device}; all tensors must be on one device."
                    )

    def require_dtype(self, name: str, meta: TensorMeta, dtypes: Sequence[str]) -> None:
        if meta.dtype not in dtypes:
            raise self.error(
                f"`{name}` has dtype {meta.dtype}, which this implementation does not "
                f"support; supported: {', '.join(dtypes)}."
            )

    def require_same_dtype(self, reference: str, metas: dict) -> None:
        expected = metas[reference].dtype
        for name, meta in metas.items():
            if meta is not None and meta.dtype != expected:
                raise self.error(
                    f"`{name}` has dtype {meta.dtype} but `{reference}` has dtype "
                    f"{expected}; they must match."
                )

    def require_shape(
        self, name: str, meta: TensorMeta, shape: tuple, why: str = ""
    ) -> None:
        if tuple(meta.shape) != tuple(shape):
            reason = f" {why}" if why else ""
            raise self.error(
                f"`{name}` must have shape {tuple(shape)}{reason}, "
                f"got {tuple(meta.shape)}."
            )

    def require_ndim(self, name: str, meta: TensorMeta, ndims: Sequence[int]) -> None:
        if meta.ndim not in ndims:
            allowed = " or ".join(str(n) for n in ndims)
            raise self.error(
                f"`{name}` must have {allowed} dimensions, got shape {meta.shape}."
            )

    def require_writable(self, name: str, meta: TensorMeta) -> None:
        """Outputs must not broadcast (stride 0 over a dimension of size > 1)
        nor overlap themselves, or several results would land on one
        element."""
        problem = written_geometry_problem(meta.shape, meta.strides)
        if problem is not None:
            raise self.error(f"`{name}` is written but {problem}.")


def written_extents(pairs, arguments) -> tuple:
    """The geometry part of `check_written_disjoint`, computed once per built
    operator: for each (name, position, name, position) of `pairs` whose
    tensors are both present, the byte offsets each tensor reaches from its
    data pointer and whether both are contiguous."""
    extents = []
    for first, i, second, j in pairs:
        a = getattr(arguments, first, None)
        b = getattr(arguments, second, None)
        if not isinstance(a, TensorMeta) or not isinstance(b, TensorMeta):
            continue
        low_a, high_a = byte_range(0, a.shape, a.strides, a.element_size)
        low_b, high_b = byte_range(0, b.shape, b.strides, b.element_size)
        contiguous = a.is_contiguous() and b.is_contiguous()
        extents.append((first, i, low_a, high_a, second, j, low_b, high_b, contiguous))
    return tuple(extents)


def check_written_disjoint(operator: str, extents, tensors) -> None:
    """Raises a `ValueError` naming both parameters when two written tensors
    share memory (see the comment below for what is detected). `extents`
    comes from `written_extents`; `tensors` are the call's values. Addresses
    are per call, so this runs on every launch of operators with several
    written tensors: two data pointers and a few comparisons per pair."""
    for first, i, low_a, high_a, second, j, low_b, high_b, contiguous in extents:
        address_a = tensors[i].data_ptr()
        address_b = tensors[j].data_ptr()
        # Intersecting ranges are shared elements when the tensors start at
        # one address or both fill their ranges; views that interleave in
        # one buffer (`q` and `k` of a fused `qkv`) are told apart by
        # neither, and are allowed.
        if (
            address_a + low_a < address_b + high_b
            and address_b + low_b < address_a + high_a
            and (address_a == address_b or contiguous)
        ):
            raise OperatorError(
                operator,
                f"`{first}` and `{second}` are both written but share memory; "
                "pass separate tensors.",
            )


def _metas(value):
    if isinstance(value, TensorMeta):
        yield value
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, TensorMeta):
                yield item
