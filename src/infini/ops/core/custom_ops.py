"""Operators as torch custom ops, so that `torch.compile` traces calls.

Dynamo cannot trace an eager call (the dispatch, the Numba kernels), so a
call inside a compiled function must become one node of the graph: a
`torch.library` custom op in the namespace ``infini``, one overload per
operator overload (``torch.ops.infini.rms_norm.overload0``), whose schema
marks the written tensors as mutated (``Tensor(a0!)``) and which returns
nothing. Functionalisation wraps each call in ``auto_functionalized``;
Inductor turns it back into the in-place call on the caller's tensors (no
copies), and at run time the op's kernel is the eager call. The ops have no
autograd formula: they serve inference.

Eager calls pay nothing for this: each public function carries a second,
traceable function in its ``_torchdynamo_inline`` attribute (the attribute
Dynamo follows for the functions `torch.compile` wraps), which Dynamo traces
in its place. The traceable function tells the argument types to `plan`,
which Dynamo calls as a constant function (marked as
`torch._dynamo.assume_constant_result` marks one) rather than tracing it:
`plan` picks the overload as an eager call would, registers the operator's
custom ops on first use and says where each schema argument comes from. The
traceable function then calls the custom op, which Dynamo records.

Nothing here runs before a function is traced or an operator is registered
by hand (`register`), and torch is imported only then.

Schema types: ``Tensor``, ``Tensor?``, ``Tensor[]``, ``Tensor?[]`` (written:
``Tensor(aN!)``, one alias set per written parameter), ``float``,
``SymInt`` (so that sizes stay symbolic under ``dynamic=True``), ``bool``,
``str``, ``ScalarType``, ``SymInt[]``, ``float[]``, ``X?`` for ``X|None``. A
``list[list[int]]`` has no schema type: it travels as two ``int[]``
arguments, ``<name>_flat`` and ``<name>_lengths``. Every schema ends with
``int stream=0, int? implementation_index=None`` and, for operators with a
Triton implementation, ``str? config=None`` (the config as JSON).

Limits under `torch.compile`: tensor-list parameters take lists or tuples
(not a tensor split along its first dimension), and `dtype` parameters take
torch dtypes (not their names).
"""

from __future__ import annotations

import json
import threading

from .errors import OperatorError
from .signature import (
    BOOL,
    DTYPE,
    FLOAT,
    FLOAT_LIST,
    INT,
    INT_LIST,
    INT_LIST_LIST,
    OPTIONAL_TENSOR,
    OPTIONAL_TENSOR_LIST,
    STR,
    TENSOR,
    TENSOR_LIST,
    Overload,
    Parameter,
    resolve,
)

NAMESPACE = "infini"

# Dynamo's names: a function's attribute holding the function to trace in
# its place (as on the functions `torch.compile` returns), and the mark of
# a function it calls at trace time on constant arguments instead of
# tracing it (what `torch._dynamo.assume_constant_result` sets).
TRACE_INSTEAD_ATTRIBUTE = "_torchdynamo_inline"
CONSTANT_RESULT_ATTRIBUTE = "_dynamo_marked_constant"

# Schema types of the scalar kinds, before `?`.
_SCALAR_SCHEMA_TYPES = {
    FLOAT: "float",
    INT: "SymInt",
    BOOL: "bool",
    STR: "str",
    DTYPE: "ScalarType",
    INT_LIST: "SymInt[]",
    FLOAT_LIST: "float[]",
}

# How a schema argument is taken from a call (`plan`'s sources).
POSITIONAL, KEYWORD, CONSTANT = 0, 1, 2
# How a `list[list[int]]` value is encoded (`plan`'s encodings).
AS_IS, FLAT, LENGTHS = 0, 1, 2

_lock = threading.RLock()
# The `torch.library.Library` fragment of the namespace, made on the first
# registration and kept alive (dropping it would unregister every op).
_LIBRARY: list = []


def overload_name(index: int) -> str:
    return f"overload{index}"


def schema_arguments(overload: Overload, has_config: bool = False) -> list[str]:
    """The schema's arguments for one overload, in call order, the
    trailing `stream`, `implementation_index` (and `config`) included."""
    arguments = []
    alias_sets = 0
    for parameter in overload.parameters:
        written = ""
        if parameter.writes:
            written = f"(a{alias_sets}!)"
            alias_sets += 1
        arguments.extend(_parameter_arguments(parameter, written))
    arguments.append("int stream=0")
    arguments.append("int? implementation_index=None")
    if has_config:
        arguments.append("str? config=None")
    return arguments


def _parameter_arguments(parameter: Parameter, written: str) -> list[str]:
    kind, name = parameter.kind, parameter.name
    if kind == TENSOR:
        return [f"Tensor{written} {name}"]
    if kind == OPTIONAL_TENSOR:
        return [f"Tensor{written}? {name}"]
    if kind == TENSOR_LIST:
        return [f"Tensor{written}[] {name}"]
    if kind == OPTIONAL_TENSOR_LIST:
        return [f"Tensor{written}?[] {name}"]
    optional = "?" if parameter.optional else ""
    if kind == INT_LIST_LIST:
        return [f"int[]{optional} {name}_flat", f"int[]{optional} {name}_lengths"]
    return [f"{_SCALAR_SCHEMA_TYPES[kind]}{optional} {name}"]


def schema(overload: Overload, has_config: bool = False) -> str:
    """``(arguments) -> ()``, the schema of the overload's custom op."""
    return f"({', '.join(schema_arguments(overload, has_config))}) -> ()"


def register(entry) -> tuple:
    """Registers the custom ops of every overload of `entry` (an
    `OperatorEntry`) once; returns their `OpOverload`s in overload order."""
    with _lock:
        if entry.custom_ops is None:
            # Set once all exist: the traceable function reads it after
            # `plan`, and Dynamo reads an attribute once per trace.
            entry.custom_ops = tuple(
                _define(entry, bound) for bound in entry.bound_overloads
            )
        return entry.custom_ops


def _define(entry, bound):
    """Defines the custom op of one overload: the schema (mutated arguments
    annotated), the eager kernel for every device and a fake kernel. Defined
    with `torch.library.Library` rather than `torch.library.custom_op`, whose
    Python autograd and version-counter wrappers cost tens of microseconds
    per call."""
    import torch

    overload = bound.overload
    name = f"{entry.name}.{overload_name(bound.index)}"
    library = _library()
    library.define(
        name + schema(overload, entry.has_triton),
        tags=(torch.Tag.pt2_compliant_tag,),
    )
    library.impl(name, _implementation(entry, bound), "CompositeExplicitAutograd")
    # Outputs are the mutated arguments: the fake kernel computes nothing.
    torch.library.register_fake(f"{NAMESPACE}::{name}", _no_result, lib=library)
    packet = getattr(getattr(torch.ops, NAMESPACE), entry.name)
    return getattr(packet, overload_name(bound.index))


def _library():
    if not _LIBRARY:
        import torch

        _LIBRARY.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    return _LIBRARY[0]


def _no_result(*args, **kwargs) -> None:
    return None


def _implementation(entry, bound):
    """The custom op's kernel: the eager call of `bound`, skipping overload
    resolution (the schema arguments are the overload's values)."""
    parameters = bound.overload.parameters
    nested = [i for i, p in enumerate(parameters) if p.kind == INT_LIST_LIST]
    count = len(parameters) + len(nested)

    def kernel(*arguments, **keywords):
        # The dispatcher leaves out trailing arguments equal to their
        # defaults: only `stream`, `implementation_index` and `config` have
        # one.
        values = list(arguments[:count])
        tail = arguments[count:]
        stream = tail[0] if len(tail) > 0 else keywords.get("stream", 0)
        implementation_index = (
            tail[1] if len(tail) > 1 else keywords.get("implementation_index")
        )
        config = tail[2] if len(tail) > 2 else keywords.get("config")
        # Each `list[list[int]]` took two arguments: rebuild it.
        for position in nested:
            flat = values[position]
            lengths = values.pop(position + 1)
            values[position] = None if flat is None else _unflatten(flat, lengths)
        entry.call_bound(
            bound,
            tuple(values),
            stream,
            implementation_index,
            None if config is None else json.loads(config),
        )

    kernel.__name__ = entry.name
    return kernel


def _unflatten(flat, lengths) -> list[list[int]]:
    result, start = [], 0
    for length in lengths:
        result.append(list(flat[start : start + length]))
        start += length
    return result


# -- tracing ---------------------------------------------------------------


class _TensorPlaceholder:
    """Stands for a tensor argument while `plan` binds types to an
    overload: every tensor parameter accepts it, tensor lists too (as the
    binder accepts a tensor for its rows, which `_check_traced_argument`
    then rejects by name), scalars do not."""

    __slots__ = ()
    shape = (1,)

    def data_ptr(self) -> int:
        return 0

    def __iter__(self):
        return iter(())


_TENSOR = _TensorPlaceholder()


def _placeholder(tag):
    """A value of the type `tag` (from `_tag`) for the binder."""
    import torch

    if isinstance(tag, tuple):
        return [_placeholder(item) for item in tag]
    if tag is type(None):
        return None
    if issubclass(tag, torch.Tensor):
        return _TENSOR
    if tag is torch.dtype:
        return torch.float32
    if tag is torch.SymInt:
        return 0
    if tag is torch.SymFloat:
        return 0.5
    if tag is torch.SymBool or tag is bool:
        return True
    if tag is float:
        return 0.5
    try:
        # `int`, `str`, NumPy scalar types...: their zero value.
        return tag()
    except Exception:
        return object()


def _is_tensor_tag(tag) -> bool:
    import torch

    return isinstance(tag, type) and issubclass(tag, torch.Tensor)


def plan(entry, tags: tuple, keyword_tags: tuple, config) -> tuple:
    """For a traced call with positional argument types `tags` and keyword
    arguments `keyword_tags` (``(name, type)`` pairs): registers the
    operator's custom ops and returns ``(index, sources, config)``: the
    overload's index in `entry.custom_ops`; for each schema argument before
    `stream`, where its value comes from: ``(POSITIONAL, index, encoding)``,
    ``(KEYWORD, name, encoding)`` or ``(CONSTANT, value, encoding)``; and
    `config` as JSON text (or None).

    Dynamo calls it with constant arguments instead of tracing it (see the
    module's docstring); it raises as the eager call would when no overload
    accepts the types."""
    args = tuple(_placeholder(tag) for tag in tags)
    kwargs = {name: _placeholder(tag) for name, tag in keyword_tags}
    result = resolve([b.overload for b in entry.bound_overloads], args, kwargs)
    if result is None or (config is not None and not entry.has_triton):
        given = [_describe_tag(tag) for tag in tags] + [
            f"{name}={_describe_tag(tag)}" for name, tag in keyword_tags
        ]
        if config is not None:
            given.append("config=dict")
        supported = "\n".join(
            f"    {entry.name}({b.overload.text})" for b in entry.bound_overloads
        )
        raise TypeError(
            f"`{entry.name}`: incompatible function arguments under torch.compile. "
            f"The following argument types are supported:\n{supported}\n\n"
            f"Invoked with: {', '.join(given)}"
        )
    overload = result[0]
    given = dict(keyword_tags)
    sources = []
    for position, parameter in enumerate(overload.parameters):
        if position < len(tags):
            source, tag = (POSITIONAL, position), tags[position]
        elif parameter.name in given:
            source, tag = (KEYWORD, parameter.name), given[parameter.name]
        else:
            source, tag = (CONSTANT, parameter.default), None
        _check_traced_argument(entry, parameter, tag)
        if parameter.kind == INT_LIST_LIST:
            sources.append((*source, FLAT))
            sources.append((*source, LENGTHS))
        else:
            sources.append((*source, AS_IS))
    if config is not None:
        from .config import parse_config

        parse_config(config)
        config = json.dumps(config)
    register(entry)
    return overload.index, tuple(sources), config


setattr(plan, CONSTANT_RESULT_ATTRIBUTE, True)


def _describe_tag(tag) -> str:
    if isinstance(tag, tuple):
        return f"[{', '.join(_describe_tag(item) for item in tag)}]"
    return "None" if tag is type(None) else tag.__name__


def _check_traced_argument(entry, parameter: Parameter, tag) -> None:
    """What the binder lets through but a schema argument cannot take."""
    if tag is None or tag is type(None):
        return
    kind = parameter.kind
    if kind in (TENSOR, OPTIONAL_TENSOR):
        good = _is_tensor_tag(tag)
    elif kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST):
        good = isinstance(tag, tuple) and all(
            _is_tensor_tag(item)
            or (item is type(None) and kind == OPTIONAL_TENSOR_LIST)
            for item in tag
        )
    elif kind == DTYPE:
        import torch

        good = tag is torch.dtype
    else:
        return
    if not good:
        raise OperatorError(
            entry.name,
            f"under torch.compile, `{parameter.name}` must be "
            + (
                "a torch dtype."
                if kind == DTYPE
                else "a list of tensors."
                if kind in (TENSOR_LIST, OPTIONAL_TENSOR_LIST)
                else "a tensor."
            ),
        )


def _tag(value):
    """The type of a traced argument, or a tuple of its items' types."""
    if isinstance(value, (list, tuple)):
        return tuple(_tag(item) for item in value)
    return type(value)


def _source_value(source, args, kwargs):
    where, what, encoding = source
    if where == POSITIONAL:
        value = args[what]
    elif where == KEYWORD:
        value = kwargs[what]
    else:
        value = what
    if encoding == AS_IS or value is None:
        return value
    if encoding == FLAT:
        return [item for inner in value for item in inner]
    return [len(inner) for inner in value]


def attach_traceable(function, entry) -> None:
    """Makes Dynamo trace a custom op call in place of `function`, the
    public function of `entry`; eager calls never read the attribute."""
    setattr(function, TRACE_INSTEAD_ATTRIBUTE, make_traceable(entry))


def make_traceable(entry):
    """The function Dynamo traces in place of `entry`'s public function."""

    def traceable(*args, stream=0, implementation_index=None, config=None, **kwargs):
        tags = tuple(_tag(value) for value in args)
        keyword_tags = tuple((name, _tag(value)) for name, value in kwargs.items())
        index, sources, config_text = plan(entry, tags, keyword_tags, config)
        values = [_source_value(source, args, kwargs) for source in sources]
        operator = entry.custom_ops[index]
        if config_text is None:
            operator(*values, stream, implementation_index)
        else:
            operator(*values, stream, implementation_index, config_text)

    traceable.__name__ = traceable.__qualname__ = entry.name
    return traceable
