"""Dispatch: from a public call to a built operator.

One `OperatorEntry` per operator of the build. A free-function call

1. picks the overload (remembered per tuple of argument types when the choice
   depended on types only; otherwise resolved with `signature.resolve`);
2. computes the cache key: the implementation index, the overload and the
   geometry (shape, strides, dtype, device) of every tensor plus the scalar
   values, never data pointers; floats are keyed so that ``-0.0`` and ``0.0``
   (and NaNs of either sign) build different operators;
3. looks the key up in a per-thread map; on a miss it resolves the device and
   the slot, imports the implementation, and builds (validates and plans) the
   operator;
4. launches the operator on the caller's tensors.

Scalars that a base lists in `call_scalars` (seeds, random numbers) are
per-call data: the key holds only their types, and the call hands their
values to the cached operator (`Operator.bind_call`) before it launches, so
sampling with a new seed on every call reuses one operator.

The cached path therefore costs a type-tuple lookup, a key, a dict lookup and
the launch.
"""

from __future__ import annotations

import gc
import importlib
import operator as _operator
import struct
import sys
import threading
from collections.abc import Callable

from . import docs, recording, tracing
from .config import parse_config
from .custom_ops import attach_traceable
from .devices import DeviceMap
from .errors import OperatorError, describe_value
from .geometry import written_geometry_problem
from .operator import Arguments, Operator, check_written_disjoint, written_extents
from .signature import (
    BOOL,
    FLOAT,
    FLOAT_LIST,
    INT,
    INT_LIST,
    INT_LIST_LIST,
    OPTIONAL_TENSOR,
    OPTIONAL_TENSOR_LIST,
    TENSOR,
    TENSOR_LIST,
    Overload,
    convert,
    is_tensor_sequence,
    resolve,
)
from .tensor import read_meta

# Operators one thread keeps per operator before its cache is emptied: far
# more geometries than a model uses, few enough to bound the memory when a
# caller varies shapes or scalars on every call.
CACHE_LIMIT = 4096
# Operators one class object keeps, one per overload and scalar values it
# was called with (its tensors' geometry is fixed).
CONSTRUCTED_LIMIT = 64


def call_keywords(has_triton: bool) -> str:
    """The keyword-only parameters of every public function, as written in
    signatures (docs/behaviour.md, "Public functions")."""
    extra = ", config: dict | None = None" if has_triton else ""
    return f", *, stream: int = 0, implementation_index: int | None = None{extra}"


class BoundOverload:
    """An overload plus the generated functions the hot path uses."""

    def __init__(
        self,
        overload: Overload,
        canonical_tensors: tuple[str, ...],
        cpu_only: bool,
        call_scalars: tuple[str, ...] = (),
        defaults: dict | None = None,
        operator: str = "",
        shared_outputs: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.overload = overload
        self.index = overload.index
        self.key = _compile_key_function(overload, cpu_only, call_scalars)
        self.tensors = _compile_tensor_getter(overload, canonical_tensors)
        # Written tensors that must not share memory; the operator built for
        # a geometry holds their extents (`written_extents`).
        self.written_pairs = _written_pairs(overload, shared_outputs)
        self.run = _compile_runner(
            overload,
            canonical_tensors,
            call_scalars,
            defaults or {},
            operator if self.written_pairs else "",
        )
        self.binds = not call_scalars
        self.operator_name = operator

    def bind(self, operator, stream, values: tuple):
        """The launch of `operator` on `values` bound to their tensors
        (`Operator.bind_launch`): a callable of no arguments, or `None`
        where the operator binds nothing. Operators with `call_scalars`
        take their values per call, so they are not bound."""
        if not self.binds:
            return None
        if self.written_pairs:
            check_written_disjoint(self.operator_name, operator.written_extents, values)
        return operator.bind_launch(stream, *self.tensors(values))


def _written_pairs(overload: Overload, shared_outputs) -> tuple:
    """(name, position, name, position) for every two written tensor
    parameters that the base does not allow to share memory."""
    written = [
        (p.name, i)
        for i, p in enumerate(overload.parameters)
        if p.writes and p.kind in (TENSOR, OPTIONAL_TENSOR)
    ]
    allowed = {frozenset(pair) for pair in shared_outputs}
    return tuple(
        (a, i, b, j)
        for n, (a, i) in enumerate(written)
        for b, j in written[n + 1 :]
        if frozenset((a, b)) not in allowed
    )


def _compile_key_function(
    overload: Overload, cpu_only: bool, call_scalars: tuple[str, ...] = ()
) -> Callable:
    """`key(values, implementation_index)`: a flat tuple identifying the call:
    the slot, the overload, each tensor's geometry and each scalar's type and
    value (the type, because `1` and `1.0` bind differently); only the type
    for `call_scalars`, whose values reach the operator at call time. Raises
    (AttributeError, TypeError, ...) when a value is not what its parameter
    needs, or is a scalar of an unusual type; the caller then takes the slow
    path, which reports problems properly and builds without caching."""
    # In a CPU-only build `is_cpu` tells the device apart (cheaper than
    # `.device`); other tensors miss the cache and are rejected on the slow path.
    device = "is_cpu" if cpu_only else "device"

    def _geometry(name: str) -> str:
        return f"{name}.shape, {name}.stride(), {name}.dtype, {name}.{device}"

    lines = ["def key(a, index):", f"    return (index, {overload.index},"]
    for position, parameter in enumerate(overload.parameters):
        value = f"a[{position}]"
        kind = parameter.kind
        if kind == TENSOR:
            lines.append(f"        {_geometry(value)},")
        elif kind == OPTIONAL_TENSOR:
            lines.append(f"        None if {value} is None else ({_geometry(value)}),")
        elif kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST):
            # Only lists and tuples are keyed (`_LIST_TYPES`): a tensor passed
            # as a list takes the slow path, which turns it into a list.
            lines.append(
                f"        None if {value} is None else _LIST_TYPES[type({value})] and "
                f"tuple(None if t is None else ({_geometry('t')}) for t in {value}),"
            )
        elif kind in (INT_LIST, FLOAT_LIST, INT_LIST_LIST):
            lines.append(f"        _sequence_key({value}),")
        elif parameter.name in call_scalars:
            lines.append(f"        _SCALAR_TYPES[type({value})],")
        elif kind == FLOAT:
            # `-0.0 == 0.0` and `nan != nan`: zeros and NaNs are keyed by
            # their bits (bytes never equal a float), other floats by value.
            # The test costs two comparisons; the common case no call.
            present = f"{value} is None or " if parameter.optional else ""
            lines.append(
                f"        _SCALAR_TYPES[type({value})], {value} if {present}"
                f"({value} == {value} and {value}) else _float_bits({value}),"
            )
        else:
            lines.append(f"        _SCALAR_TYPES[type({value})], {value},")
    lines.append("    )")
    namespace: dict = {
        "_LIST_TYPES": _LIST_TYPES,
        "_SCALAR_TYPES": _SCALAR_TYPES,
        "_sequence_key": _sequence_key,
        "_float_bits": _float_bits,
    }
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from overload specs
    return namespace["key"]


# Scalar types that may appear in cache keys (others raise KeyError, which
# sends the call down the uncached slow path). Mapped to themselves.
_SCALAR_TYPES = {t: t for t in (int, float, bool, str, type(None))}


_float_bits = struct.Struct("<d").pack

# Tensor-list values that may appear in cache keys.
_LIST_TYPES = {list: True, tuple: True}


def _sequence_key(value):
    if value is None:
        return None
    return tuple(
        _sequence_key(item)
        if isinstance(item, (list, tuple))
        else (
            _SCALAR_TYPES[type(item)],
            _float_bits(item) if type(item) is float else item,
        )
        for item in value
    )


def _compile_tensor_getter(overload: Overload, canonical_tensors: tuple[str, ...]):
    """`tensors(values)`: the canonical tensor parameters of a call, in the
    order the implementations' `launch` takes them."""
    items = []
    for name in canonical_tensors:
        position = overload.position.get(name)
        parameter = None if position is None else overload.parameters[position]
        items.append(f"a[{position}]" if parameter and parameter.is_tensor else "None")
    source = f"def tensors(a):\n    return ({', '.join(items)}{',' if items else ''})"
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - generated from overload specs
    return namespace["tensors"]


# What each scalar kind must be, for conversion errors.
_KIND_NAMES = {
    FLOAT: "a float",
    INT: "an int",
    BOOL: "a bool",
    INT_LIST: "a list of ints",
    FLOAT_LIST: "a list of floats",
    INT_LIST_LIST: "a list of lists of ints",
}


# Conversions of call-scalar values to the types the operator was built with
# (as `signature.convert` does on the slow path; the key has checked the
# value's type already).
_CALL_SCALAR_CONVERSIONS = {FLOAT: "float", INT: "_index", BOOL: "bool"}


def _compile_runner(
    overload: Overload,
    canonical_tensors: tuple[str, ...],
    call_scalars: tuple[str, ...],
    defaults: dict,
    checked_operator: str = "",
) -> Callable:
    """`run(operator, stream, values)`: hands the operator the values of its
    `call_scalars` (if any) and launches it on the call's canonical tensors.
    One generated call instead of building a tuple and unpacking it keeps the
    cached path as cheap as a plain `launch`. With several written tensors
    (`checked_operator` names the operator) it first checks that they do not
    share memory: addresses change per call, so only their extents
    (`operator.written_extents`) are part of the cached plan."""
    items = []
    for name in canonical_tensors:
        position = overload.position.get(name)
        parameter = None if position is None else overload.parameters[position]
        items.append(f"a[{position}]" if parameter and parameter.is_tensor else "None")
    lines = ["def run(operator, stream, a):"]
    namespace: dict = {"_index": _operator.index}
    if checked_operator:
        namespace["_check_written"] = check_written_disjoint
        lines.append(
            f"    _check_written({checked_operator!r}, operator.written_extents, a)"
        )
    if call_scalars:
        values = []
        for number, name in enumerate(call_scalars):
            position = overload.position.get(name)
            if position is None:
                # The overload lacks the parameter: the base's default, as
                # the operator was built with.
                namespace[f"_default{number}"] = defaults.get(name)
                values.append(f"_default{number}")
                continue
            parameter = overload.parameters[position]
            conversion = _CALL_SCALAR_CONVERSIONS.get(parameter.kind)
            value = f"a[{position}]"
            if conversion is not None:
                converted = f"{conversion}({value})"
                if parameter.optional:
                    converted = f"(None if {value} is None else {converted})"
                value = converted
            values.append(value)
        lines.append(f"    operator.bind_call({', '.join(values)})")
    # A `try` costs nothing until something raises (Python 3.11's exception
    # tables), so the cached path stays as cheap as a bare launch.
    lines.append("    try:")
    lines.append(f"        operator.launch(stream{''.join(', ' + i for i in items)})")
    lines.append("    except (AttributeError, TypeError, ValueError) as error:")
    lines.append(
        "        _reject_tensor_likes("
        "operator.name, type(operator), _overload, a, error)"
    )
    lines.append("        raise")
    namespace["_reject_tensor_likes"] = reject_tensor_likes
    namespace["_overload"] = overload
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from overload specs
    return namespace["run"]


# Implementations that read a tensor-like's memory themselves (the native
# CPU kernels); every other one needs `torch.Tensor` arguments.
TENSOR_LIKE_MODULES = ("infini.ops.native.cpu.",)


def reject_tensor_likes(
    name: str, implementation, overload: Overload, values, error=None
) -> None:
    """Called when a launch raised (`AttributeError`, `TypeError`, or the
    ATen slot's `ValueError` naming ATen's argument): if a tensor
    argument is a tensor-like object rather than a `torch.Tensor`, raises an
    error naming the operator and that parameter (the implementation reads
    torch tensors only; docs/behaviour.md, "Tensor arguments"). Otherwise
    returns, and the caller re-raises the original error, as it does for
    an error the library raised itself (a missing device, for one), which
    already names the operator and says what is wrong."""
    if isinstance(error, OperatorError):
        return
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", ())
    for position, parameter in enumerate(overload.parameters):
        if not parameter.is_tensor or position >= len(values):
            continue
        value = values[position]
        items = (
            [(parameter.name, value)]
            if parameter.kind in (TENSOR, OPTIONAL_TENSOR)
            else [(f"{parameter.name}[{i}]", v) for i, v in enumerate(value or ())]
        )
        for label, item in items:
            if item is not None and not isinstance(item, tensor_type):
                cause = "" if error is None else f" ({type(error).__name__}: {error})"
                raise OperatorError(
                    name,
                    f"`{label}` is a tensor-like `{type(item).__name__}`, not a "
                    f"`torch.Tensor`, and implementation slot "
                    f"{implementation.implementation_slot} "
                    f"(`{implementation.__name__}`) reads torch tensors only; "
                    f"pass a `torch.Tensor`{cause}.",
                ) from error


class OperatorEntry:
    """Everything the surface needs for one operator of the build."""

    def __init__(self, name: str, info: dict, device_map: DeviceMap) -> None:
        self.name = name
        self.class_name = info["class"]
        self.trace_name = info.get("trace_name") or self.class_name
        self.base_module = info["base_module"]
        self.overload_texts = tuple(info["overloads"])
        self.device_map = device_map
        # platform -> sorted slots; (platform, slot) -> (module, class name)
        self.slots: dict[str, list[int]] = {}
        self.modules: dict[tuple[str, int], tuple[str, str]] = {}
        for implementation in info["implementations"]:
            for platform in implementation["devices"]:
                self.slots.setdefault(platform, []).append(implementation["slot"])
                self.modules[(platform, implementation["slot"])] = (
                    implementation["module"],
                    implementation["class"],
                )
        for slots in self.slots.values():
            slots.sort()
        self.has_triton = any(i["backend"] == "triton" for i in info["implementations"])
        self._local = threading.local()
        self._memo: dict[tuple, tuple[BoundOverload, tuple]] = {}
        self._bound: tuple[BoundOverload, ...] | None = None
        # Filled with the overloads (`bound_overloads`) on the first call.
        self._by_arity: dict[int, tuple[BoundOverload, tuple]] = {}
        self._base: type[Operator] | None = None
        # The `torch.library` custom ops of the overloads, once registered
        # (`custom_ops.register`).
        self.custom_ops: tuple | None = None

    # -- lazily prepared state -------------------------------------------------

    @property
    def bound_overloads(self) -> tuple[BoundOverload, ...]:
        if self._bound is None:
            overloads = [
                Overload(i, text) for i, text in enumerate(self.overload_texts)
            ]
            self.canonical = _canonical_parameters(overloads)
            self.canonical_tensors = tuple(
                name
                for name in self.canonical
                if any(
                    o.parameters[o.position[name]].is_tensor
                    for o in overloads
                    if name in o.position
                )
            )
            cpu_only = self.device_map.platforms == ("cpu",)
            base = self.base
            call_scalars = getattr(base, "call_scalars", ())
            defaults = getattr(base, "defaults", {})
            shared_outputs = getattr(base, "shared_outputs", ())
            self._bound = tuple(
                BoundOverload(
                    o,
                    self.canonical_tensors,
                    cpu_only,
                    call_scalars,
                    defaults,
                    self.name,
                    shared_outputs,
                )
                for o in overloads
            )
            self._by_arity = _unique_arities(self._bound)
        return self._bound

    @property
    def base(self) -> type[Operator]:
        if self._base is None:
            module = importlib.import_module(self.base_module)
            self._base = getattr(module, self.class_name)
        return self._base

    # -- the public statics ----------------------------------------------------

    def active_implementation_indices(self, device: object) -> list[int]:
        if not isinstance(device, str):
            return []
        platform = self.device_map.platform_of(device)
        return list(self.slots.get(platform, ())) if platform else []

    def clear_cache(self) -> None:
        # A fresh thread-local drops every thread's map; each thread sees the
        # new, empty one on its next call.
        self._local = threading.local()

    # -- calls -----------------------------------------------------------------

    def call(self, args: tuple, kwargs: dict, stream, implementation_index):
        """The free function's body after its fast path (`make_function`)
        missed: keyword arguments, a `config`, a new geometry or overload."""
        if kwargs and self.has_triton and "config" in kwargs:
            # `kwargs` is the call's own dict: taking `config` out of it
            # leaves the operator's keyword arguments.
            config = kwargs.pop("config")
            if config is not None:
                # A config call builds its own operator and never uses the
                # cache (docs/behaviour.md, "Triton JIT config").
                return self._call_with_config(
                    args, kwargs, stream, implementation_index, config
                )
        bound, values = self._resolve(args, kwargs)
        return self.call_bound(bound, values, stream, implementation_index)

    def call_bound(
        self,
        bound: BoundOverload,
        values: tuple,
        stream,
        implementation_index,
        config: dict | None = None,
    ) -> None:
        """A call of the overload `bound` with `values` in its parameter
        order, missing none (the custom ops' kernel, `custom_ops`)."""
        if implementation_index is not None and type(implementation_index) is not int:
            # Before the cache: its keys compare the index by value, and
            # `False` or `0.0` equal 0.
            raise self._bad_index(implementation_index)
        if config is not None:
            config = parse_config(config)
            operator = self._build(bound, values, implementation_index, config)
            recording.mark_incomplete()
            bound.run(operator, stream, values)
            return None
        try:
            cache = self._local.cache
        except AttributeError:
            cache = self._local.cache = {}
        try:
            key = bound.key(values, implementation_index)
            operator = cache.get(key)
        except Exception:
            key = operator = None
        if operator is None:
            operator = self._build(bound, values, implementation_index)
            if key is not None:
                if len(cache) >= CACHE_LIMIT:
                    # A bound on memory whatever callers vary (an LRU would
                    # cost on every hit; emptying costs only rebuilds).
                    cache.clear()
                cache[key] = operator
        if tracing.TRACE_CALLS:
            self._trace(operator)
        if recording.ACTIVE is not None:
            recording.ACTIVE.add(bound, operator, stream, values)
        bound.run(operator, stream, values)
        return None

    def construct(self, instance, args: tuple, kwargs: dict) -> None:
        """A class instance's `__init__`: builds its operator for the default
        slot and keeps it under the call's key (see `call_constructed`)."""
        self._reject_call_keywords(kwargs)
        bound, values = self._resolve(args, kwargs, keywords=False)
        operator = self._build(bound, values, None)
        instance._operator = operator
        instance._geometry = self._tensor_geometry(bound, values)
        try:
            key = bound.key(values, None)
        except Exception:
            key = None
        instance._operators = {} if key is None else {key: operator}

    def call_constructed(self, instance, args: tuple, kwargs: dict) -> None:
        """A class instance's `__call__` after its fast path missed: another
        overload, other scalar values, keywords, or other tensors.

        Tensors must keep the construction's geometry. Scalars and the
        overload may change: the call computes with them, on an operator
        built for them at the default slot and kept by the object under the
        call's key (docs/behaviour.md, "Operator classes")."""
        self._reject_call_keywords(kwargs)
        bound, values = self._resolve(args, kwargs, keywords=False)
        if self._tensor_geometry(bound, values) != instance._geometry:
            raise OperatorError(
                self.name,
                f"the tensors passed to this `{self.class_name}` object differ in "
                "shape, strides, dtype or device from those it was built with; "
                f"build a new `{self.class_name}` for them.",
            )
        operators = instance._operators
        try:
            key = bound.key(values, None)
            operator = operators.get(key)
        except Exception:
            key = operator = None
        if operator is None:
            operator = self._build(bound, values, None)
            if key is not None:
                if len(operators) >= CONSTRUCTED_LIMIT:
                    operators.clear()
                operators[key] = operator
        if recording.ACTIVE is not None:
            recording.ACTIVE.add(bound, operator, 0, values)
        bound.run(operator, 0, values)

    def _reject_call_keywords(self, kwargs: dict) -> None:
        for name in ("stream", "implementation_index", "config"):
            if name in kwargs:
                raise TypeError(
                    f"`{self.name}`: `{self.class_name}` objects take no `{name}`: "
                    "they run the default implementation slot on stream 0 "
                    f'(docs/behaviour.md, "Operator classes"); call '
                    f"`infini.ops.{self.name}(..., {name}=...)` instead."
                )

    # -- the slow path ---------------------------------------------------------

    def _resolve(
        self, args: tuple, kwargs: dict, keywords: bool = True
    ) -> tuple[BoundOverload, tuple]:
        """The overload the arguments bind to and their values in its
        parameter order; a `TypeError` listing the overloads (with the
        functions' keyword-only parameters when `keywords`) if none does."""
        overloads = self.bound_overloads
        result = resolve([b.overload for b in overloads], args, kwargs)
        if result is None:
            raise self._no_matching_overload(args, kwargs, keywords)
        overload, values, remember = result
        bound = overloads[overload.index]
        if any(
            p.kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST) and is_tensor_sequence(v)
            for p, v in zip(overload.parameters, values)
        ):
            # A tensor given for a tensor list: its slices along dimension 0.
            values = tuple(
                list(v)
                if p.kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST)
                and is_tensor_sequence(v)
                else v
                for p, v in zip(overload.parameters, values)
            )
            remember = False
        if remember:
            self._memo[tuple(map(type, args))] = (bound, values[len(args) :])
        return bound, values

    def _no_matching_overload(
        self, args: tuple, kwargs: dict, keywords: bool = True
    ) -> TypeError:
        name = self.name if keywords else self.class_name
        tail = call_keywords(self.has_triton) if keywords else ""
        supported = "\n".join(
            f"    {i + 1}. {name}({b.overload.text}{tail})"
            for i, b in enumerate(self.bound_overloads)
        )
        given = ", ".join(
            [describe_value(a) for a in args]
            + [f"{k}={describe_value(v)}" for k, v in kwargs.items()]
        )
        # Name the parameters that refused a value, in each overload the
        # call's count and keywords fit.
        refused = []
        for number, b in enumerate(self.bound_overloads, 1):
            wrong = b.overload.mismatches(args, kwargs)
            if wrong:
                refused.append(
                    f"    {number}. "
                    + "; ".join(
                        f"`{p.name}` ({p.type}) refuses {describe_value(v)}"
                        for p, v in wrong
                    )
                )
        why = "\n\nRefused:\n" + "\n".join(refused) if refused else ""
        return TypeError(
            f"`{self.name}`: incompatible function arguments. The following argument "
            f"types are supported:\n{supported}\n\nInvoked with: {given}{why}"
        )

    def _tensor_geometry(self, bound: BoundOverload, values: tuple) -> tuple:
        def geometry(t):
            if t is None:
                return None
            if isinstance(t, (list, tuple)):
                return tuple(geometry(item) for item in t)
            return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device)

        return tuple(geometry(t) for t in bound.tensors(values))

    def _build(
        self, bound: BoundOverload, values: tuple, implementation_index, config=None
    ):
        overload = bound.overload
        device = self._dispatch_device(overload, values)
        slot = self._resolve_slot(device.platform, implementation_index)
        arguments = self._arguments(overload, values, device)
        self._check_written_geometry(overload, arguments)
        if config is not None:
            arguments.config = config
        module_name, class_name = self.modules[(device.platform, slot)]
        implementation = getattr(importlib.import_module(module_name), class_name)
        reads_tensor_likes = module_name.startswith(TENSOR_LIKE_MODULES)
        try:
            # The constructor checks what the library itself refuses (a
            # device this process lacks, for one): its message comes first.
            operator = implementation(arguments)
        except (AttributeError, TypeError, ValueError) as error:
            if not reads_tensor_likes:
                reject_tensor_likes(self.name, implementation, overload, values, error)
            raise
        if not reads_tensor_likes:
            # Before anything runs (docs/behaviour.md, "Tensor arguments").
            reject_tensor_likes(self.name, implementation, overload, values)
        if bound.written_pairs:
            operator.written_extents = written_extents(bound.written_pairs, arguments)
        return operator

    def _check_written_geometry(self, overload: Overload, arguments) -> None:
        """Every written tensor must hold each of its elements once: no
        stride-0 dimension, no rows that overlap. Geometry only, so once per
        built operator, for every implementation."""
        for parameter in overload.parameters:
            if not (parameter.writes and parameter.is_tensor):
                continue
            value = getattr(arguments, parameter.name, None)
            metas = value if isinstance(value, list) else [value]
            for number, meta in enumerate(metas):
                if meta is None:
                    continue
                problem = written_geometry_problem(meta.shape, meta.strides)
                if problem is not None:
                    name = parameter.name
                    if isinstance(value, list):
                        name = f"{name}[{number}]"
                    raise OperatorError(
                        self.name, f"`{name}` is written but {problem}."
                    )

    def _dispatch_device(self, overload: Overload, values: tuple):
        position = overload.device_position
        if position is None:
            raise OperatorError(self.name, "the call has no tensor to dispatch on.")
        parameter = overload.parameters[position]
        value = values[position]
        if parameter.kind == TENSOR_LIST:
            if len(value) == 0:
                raise OperatorError(
                    self.name, f"`{parameter.name}` must hold at least one tensor."
                )
            value = value[0]
        device = getattr(value, "device", None)
        if device is None or not hasattr(device, "type"):
            raise OperatorError(
                self.name,
                f"`{parameter.name}` must be a tensor, got {describe_value(value)}.",
            )
        try:
            return self.device_map.device_of(device)
        except ValueError as error:
            raise OperatorError(self.name, f"`{parameter.name}`: {error}") from None

    def _bad_index(self, implementation_index) -> OperatorError:
        return OperatorError(
            self.name,
            "`implementation_index` must be None or a non-negative int, got "
            f"{describe_value(implementation_index)}.",
        )

    def _resolve_slot(self, platform: str, implementation_index) -> int:
        active = self.slots.get(platform, [])
        if implementation_index is None:
            if not active:
                raise ValueError(
                    f"No active implementation for {self.class_name} "
                    f"on device {platform}"
                )
            return active[0]
        if type(implementation_index) is not int or implementation_index < 0:
            raise self._bad_index(implementation_index)
        if implementation_index not in active:
            raise OperatorError(
                self.name,
                f"`implementation_index` {implementation_index} is not active on "
                f"{platform}; active implementation indices: {active}.",
            )
        return implementation_index

    def _arguments(self, overload: Overload, values: tuple, device) -> Arguments:
        base = self.base
        named = {}
        for parameter, value in zip(overload.parameters, values):
            if parameter.is_tensor:
                named[parameter.name] = self._read_tensors(parameter, value)
            else:
                named[parameter.name] = self._convert(parameter, value)
        for name in self.canonical:
            if name not in named:
                named[name] = base.defaults.get(name)
        return Arguments(named, device, overload.index)

    def _convert(self, parameter, value):
        """`signature.convert`, with its failures reported as ours: a value
        the binder accepted whose conversion raises (a multi-element tensor
        where a `float` goes, a `__float__` that raises) names the operator
        and the parameter (docs/behaviour.md, "Errors")."""
        try:
            return convert(parameter, value)
        except Exception as error:  # noqa: BLE001 - reported with the parameter
            kind = _KIND_NAMES.get(parameter.kind, parameter.kind)
            message = (
                f"`{parameter.name}` must be {kind}"
                f", got {describe_value(value)} that does not convert "
                f"({type(error).__name__}: {error})."
            )
            if isinstance(error, TypeError):
                raise TypeError(f"`{self.name}`: {message}") from error
            raise OperatorError(self.name, message) from error

    def _read_tensors(self, parameter, value):
        if value is None:
            if (
                parameter.kind == OPTIONAL_TENSOR
                or parameter.kind == OPTIONAL_TENSOR_LIST
            ):
                return None
            raise OperatorError(
                self.name, f"`{parameter.name}` must be a tensor, got None."
            )
        if parameter.kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST):
            return [
                None
                if item is None and parameter.kind == OPTIONAL_TENSOR_LIST
                else read_meta(
                    item, self.device_map, self.name, f"{parameter.name}[{i}]"
                )
                for i, item in enumerate(value)
            ]
        return read_meta(value, self.device_map, self.name, parameter.name)

    def _call_with_config(self, args, kwargs, stream, implementation_index, config):
        if not isinstance(config, dict):
            raise OperatorError(
                self.name, f"`config` must be a dict, got {describe_value(config)}."
            )
        # The schema is checked whatever the slot (docs/behaviour.md, "Triton JIT
        # config"), before anything is built.
        config = parse_config(config)
        bound, values = self._resolve(args, kwargs)
        operator = self._build(bound, values, implementation_index, config)
        recording.mark_incomplete()
        bound.run(operator, stream, values)

    def _trace(self, operator: Operator) -> None:
        tracing.trace_call(
            self.trace_name, operator.device.platform, operator.implementation_slot
        )


def _unique_arities(bound: tuple[BoundOverload, ...]) -> dict:
    """Positional-argument counts that exactly one overload accepts, with
    that overload and the defaults that complete the call."""
    accepting: dict[int, list] = {}
    for b in bound:
        parameters = b.overload.parameters
        for count in range(len(parameters), -1, -1):
            accepting.setdefault(count, []).append(b)
            if count and not parameters[count - 1].has_default:
                break
    result = {}
    for count, candidates in accepting.items():
        if len(candidates) == 1:
            b = candidates[0]
            tail = tuple(p.default for p in b.overload.parameters[count:])
            result[count] = (b, tail)
    return result


def _canonical_parameters(overloads: list[Overload]) -> tuple[str, ...]:
    """Every parameter name of the operator: the longest overload's order
    first (the first longest in binding order), then names only others have."""
    longest = max(overloads, key=lambda o: (len(o.parameters), -o.index))
    names = list(longest.names)
    for overload in overloads:
        for name in overload.names:
            if name not in names:
                names.append(name)
    return tuple(names)


def make_function(entry: OperatorEntry) -> Callable:
    call = entry.call

    def function(*args, stream=0, implementation_index=None, **kwargs):
        # The repeated call (positional arguments only, operator cached) is
        # written out here rather than in a method: every call layer costs a
        # measurable share of the host overhead. Everything else, `config=`
        # included, goes to `OperatorEntry.call`.
        # Only `None` or a plain int index may take the cached path: the
        # cache key compares the index by value, and `False`/`0.0` equal 0.
        if not kwargs and (
            implementation_index is None or type(implementation_index) is int
        ):
            # One overload accepts this many positional arguments: the key
            # (which holds every scalar's type) decides alone. Otherwise the
            # choice is remembered per tuple of argument types
            # (`fill(out, 0.0, out)`).
            remembered = entry._by_arity.get(len(args))
            if remembered is None:
                remembered = entry._memo.get(tuple(map(type, args)))
            if remembered is not None:
                bound, tail = remembered
                # `tail`: the defaults of the parameters the call left out.
                values = args + tail if tail else args
                try:
                    operator = entry._local.cache[
                        bound.key(values, implementation_index)
                    ]
                except Exception:
                    pass
                else:
                    if tracing.TRACE_CALLS:
                        entry._trace(operator)
                    if recording.ACTIVE is not None:
                        recording.ACTIVE.add(bound, operator, stream, values)
                    bound.run(operator, stream, values)
                    return None
        return call(args, kwargs, stream, implementation_index)

    function.__name__ = function.__qualname__ = entry.name
    function.__module__ = "infini.ops"
    # `torch.compile` traces a custom op call instead (`custom_ops`).
    attach_traceable(function, entry)
    function.__doc__ = docs.function_doc(entry)
    function.__signature__ = docs.signature(entry, keywords=True)
    return function


def make_class(entry: OperatorEntry) -> type:
    construct = entry.construct
    call_constructed = entry.call_constructed

    def __init__(self, *args, **kwargs):
        construct(self, args, kwargs)

    def __call__(self, *args, **kwargs):
        # As the function's fast path: the overload from the argument count
        # or types, then the call's key (tensor geometry, overload, scalar
        # values) finds the operator this object built for it. A miss (other
        # scalars or overload, keywords, other tensors) builds or rejects in
        # `OperatorEntry.call_constructed`.
        if not kwargs:
            remembered = entry._by_arity.get(len(args))
            if remembered is None:
                remembered = entry._memo.get(tuple(map(type, args)))
            if remembered is not None:
                bound, tail = remembered
                values = args + tail if tail else args
                try:
                    operator = self._operators[bound.key(values, None)]
                except Exception:
                    pass
                else:
                    if recording.ACTIVE is not None:
                        recording.ACTIVE.add(bound, operator, 0, values)
                    bound.run(operator, 0, values)
                    return None
        call_constructed(self, args, kwargs)

    namespace = {
        "__slots__": ("_operator", "_operators", "_geometry"),
        "__module__": "infini.ops",
        "__doc__": docs.class_doc(entry),
        "__signature__": docs.signature(entry, keywords=False),
        "__init__": __init__,
        "__call__": __call__,
        "active_implementation_indices": staticmethod(
            entry.active_implementation_indices
        ),
        "clear_cache": staticmethod(entry.clear_cache),
    }
    return type(entry.class_name, (), namespace)


def build_surface() -> tuple[str, dict[str, OperatorEntry], dict[str, tuple]]:
    """The package version, an entry per operator of the build, and the
    public names: function and class name -> (maker, entry). The function or
    class itself is made when its name is first looked up (`make_public`),
    so that building the surface stays cheap although docstrings and
    signatures import the operator's base."""
    from .manifest import load_manifest

    manifest = load_manifest()
    device_map = DeviceMap(manifest["devices"])
    entries: dict[str, OperatorEntry] = {}
    public: dict[str, tuple] = {}
    # Building ~500 operators allocates enough to trigger a full garbage
    # collection, which after `import torch` walks millions of objects
    # (~0.3 s); nothing built here is garbage, so collect later instead.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if manifest.get("python_bindings", True):
            for name, info in manifest["operators"].items():
                entry = OperatorEntry(name, info, device_map)
                entries[name] = entry
                public[name] = (make_function, entry)
                public[entry.class_name] = (make_class, entry)
    finally:
        if collecting:
            gc.enable()
    return manifest.get("package_version", "0"), entries, public


def make_public(public: dict, name: str):
    """The function or class `name` of the surface (see `build_surface`)."""
    maker, entry = public[name]
    return maker(entry)
