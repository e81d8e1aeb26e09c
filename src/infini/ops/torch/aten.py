"""Slot 8: PyTorch's ATen kernels, built from `torch_ops_metadata.json`.

`scripts/generate_torch_ops.py` writes the metadata at configure time: for
every public operator its overloads and, per overload, the ATen schema it
calls. Nothing is generated per operator; this module makes the classes on
first use (PEP 562 `__getattr__`):

- `<Class>`: the base of an operator that has no hand-written
  `infini.ops.base` module (its overloads come from the ATen schema);
- `Aten<Class>`: the slot-8 implementation, a subclass of the operator's base
  (hand-written or not), so the base's validation runs first.

A slot-8 operator plans one call when it is built (scalars are part of the
cache key, so they are constants of the plan) and `launch` only forwards the
caller's tensors: the ATen `out` variant with the arguments in schema order,
the in-place method for in-place forms, or for the explicit-out forms of
in-place operators a copy of `input` into `out` followed by the in-place call
on `out`. Nothing is converted. A non-zero `stream` runs the call on that
stream, wrapped as the framework's external stream.
"""

from __future__ import annotations

import importlib
import warnings
from functools import cache

from infini.ops.core.dtypes import UNSIGNED_INTEGER_DTYPES, dtype_name, is_integer
from infini.ops.core.errors import OperatorError
from infini.ops.core.manifest import load_torch_metadata
from infini.ops.core.operator import Operator
from infini.ops.core.schema import (
    GENERATED_ATEN_CLASS_PREFIX,
    GENERATED_ATEN_SLOT,
    aten_base_doc,
)
from infini.ops.core.signature import Overload
from infini.ops.core.streams import stream_context

SLOT = GENERATED_ATEN_SLOT
IMPLEMENTATION_PREFIX = GENERATED_ATEN_CLASS_PREFIX

# Unsigned types that ATen kernels mostly lack (uint8 is fully supported).
_WIDE_UNSIGNED = tuple(d for d in UNSIGNED_INTEGER_DTYPES if d != "uint8")


@cache
def _classes() -> dict[str, str]:
    """Class name -> public operator name."""
    return {
        info["class"]: name for name, info in load_torch_metadata()["operators"].items()
    }


def __getattr__(name: str) -> type:
    prefix = IMPLEMENTATION_PREFIX
    implementation = name.startswith(prefix) and name[len(prefix) :] in _classes()
    public = _classes().get(name[len(prefix) :] if implementation else name)
    if public is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    info = load_torch_metadata()["operators"][public]
    if implementation:
        cls = _make_implementation(public, info)
    elif info.get("base") is None:
        cls = _make_base(public, info)
    else:
        raise AttributeError(
            f"`{public}` has a hand-written base in {info['base']}, not here"
        )
    globals()[name] = cls
    return cls


def __dir__() -> list[str]:
    names = list(globals())
    for class_name, public in _classes().items():
        names.append(IMPLEMENTATION_PREFIX + class_name)
        if load_torch_metadata()["operators"][public].get("base") is None:
            names.append(class_name)
    return sorted(names)


def _make_base(public: str, info: dict) -> type:
    doc = aten_base_doc(public, load_torch_metadata())
    return type(
        info["class"],
        (Operator,),
        {
            "__module__": __name__,
            "__doc__": doc,
            "name": public,
            "trace_name": info["trace_name"],
            "overloads": tuple(info["overloads"]),
            "defaults": {},
        },
    )


def _base_of(public: str, info: dict) -> type:
    if info.get("base") is None:
        return getattr(importlib.import_module(__name__), info["class"])
    return getattr(importlib.import_module(info["base"]), info["class"])


def _canonical_tensors(overload_texts) -> tuple[str, ...]:
    from infini.ops.core.dispatch import _canonical_parameters

    overloads = [Overload(i, text) for i, text in enumerate(overload_texts)]
    canonical = _canonical_parameters(overloads)
    return tuple(
        name
        for name in canonical
        if any(
            o.parameters[o.position[name]].is_tensor
            for o in overloads
            if name in o.position
        )
    )


def _make_implementation(public: str, info: dict) -> type:
    base = _base_of(public, info)
    canonical_tensors = _canonical_tensors(base.overloads)
    bindings = info["bindings"]

    def __init__(self, args) -> None:
        base.__init__(self, args)
        entry = load_torch_metadata()["ops"][bindings[args.overload_index]]
        # A hand-written base may map an overload onto another's parameters
        # (e.g. a legacy `reduction` string onto ATen's integer).
        values = dict(args.__dict__)
        tensor_sources = {name: name for name in canonical_tensors}
        if getattr(self, "weighted", False):
            # A per-element loss weight has no ATen schema argument.
            self.launch = _weighted_loss(public, self.reduction, args)
            return
        adapt = getattr(self, "aten_arguments", None)
        if adapt is not None:
            scalars, tensors = adapt(args)
            values.update(scalars)
            tensor_sources.update(tensors)
        self.launch = _plan(
            public,
            entry,
            values,
            tensor_sources,
            canonical_tensors,
            getattr(self, "reduced_result_in_first_element", False),
        )

    doc = (
        f"`{public}` through PyTorch's ATen kernels (slot {SLOT}), on every "
        "enabled device."
    )
    return type(
        IMPLEMENTATION_PREFIX + info["class"],
        (base,),
        {
            "__module__": __name__,
            "__doc__": doc,
            "__init__": __init__,
            "implementation_slot": SLOT,
            "implementation_devices": ("all",),
        },
    )


# -- planning one call -------------------------------------------------------


def _weighted_loss(public: str, reduction: int, args):
    """The launch of a loss with a per-element `weight`, which ATen's schema
    lacks: `torch.nn.functional`'s weighted loss (`reduction` 0 none, 1
    mean, 2 sum), written to `out`, or to its first element for a reduced
    result."""
    import torch

    loss = getattr(torch.nn.functional, public)
    extra = {"delta": args.delta} if hasattr(args, "delta") else {}
    mode = ("none", "mean", "sum")[reduction]

    def launch(stream, input, target, weight, out) -> None:
        result = loss(input, target, reduction=mode, weight=weight, **extra)
        (out if reduction == 0 else _first_element(out)).copy_(result)

    return launch


def _torch_dtype(value):
    import torch

    if value is None or isinstance(value, torch.dtype):
        return value
    return getattr(torch, dtype_name(value))


def _scalar(aten_type: str, value, integral: bool):
    """An argument for an ATen scalar parameter."""
    if value is None:
        return None
    core = aten_type.rstrip("?")
    if core == "Scalar":
        # Integral tensors reject a floating `Scalar` (e.g. `alpha`); an
        # integral value means the same number.
        if integral and isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if core == "ScalarType":
        return _torch_dtype(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _metas(value):
    if isinstance(value, list):
        return [v for v in value if v is not None]
    return [] if value is None else [value]


def _span(meta) -> tuple[int, int]:
    """(lowest, highest + 1) byte offsets a tensor touches from its data
    pointer; (0, 0) when it has no elements."""
    if meta.numel == 0:
        return 0, 0
    low = sum((n - 1) * s for n, s in zip(meta.shape, meta.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(meta.shape, meta.strides) if s > 0)
    size = meta.element_size
    return low * size, (high + 1) * size


class _Plan:
    """Source lines and constants of one generated `launch`."""

    def __init__(self) -> None:
        self.constants: dict[str, object] = {}

    def constant(self, value) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name


def _plan(
    public,
    entry,
    values,
    tensor_sources,
    canonical_tensors,
    reduced_in_first_element=False,
):
    """The `launch(stream, *canonical_tensors)` of one built operator."""
    import torch

    packet = getattr(torch.ops.aten, entry["aten_name"])
    op = getattr(packet, entry["overload_name"] or "default")
    schema = op._schema.arguments
    params = entry["params"]
    by_index = {p["schema_index"]: p for p in params if p["schema_index"] is not None}
    explicit_out = entry.get("form") == "inplace_out"
    position = {name: i for i, name in enumerate(canonical_tensors)}
    plan = _Plan()

    def slot_of(name: str) -> int:
        return position[tensor_sources.get(name, name)]

    def meta_of(name: str):
        return values.get(tensor_sources.get(name, name))

    tensor_params = [p for p in params if p["is_tensor"]]
    metas = [m for p in tensor_params for m in _metas(meta_of(p["name"]))]
    first = next(iter(metas), None)
    integral = first is not None and is_integer(first.dtype)
    unsigned = sorted({m.dtype for m in metas if m.dtype in _WIDE_UNSIGNED})

    # The call's argument expressions, in schema order, and the same
    # arguments for the meta-device dry run (`_dry_run`): tensors as
    # ("tensor", name, is_out) markers, everything else as the value itself.
    positional: list[str] = []
    keywords: list[str] = []
    dry_positional: list = []
    dry_keywords: dict = {}
    for index, argument in enumerate(schema):
        param = by_index.get(index)
        if param is None or (not param["is_tensor"] and param["name"] not in values):
            if argument.kwarg_only:
                continue  # hidden or defaulted: ATen's default applies
            default = argument.default_value if argument.has_default_value() else None
            expression = plan.constant(default)
            dry = default
        elif param["is_tensor"]:
            name = "out" if explicit_out and index == 0 else param["name"]
            expression = f"t[{slot_of(name)}]"
            dry = _TensorArgument(name, bool(param["is_out"]))
        else:
            value = _scalar(param["type"], values[param["name"]], integral)
            expression = plan.constant(value)
            dry = value
        if argument.kwarg_only:
            keywords.append(f"{argument.name}={expression}")
            dry_keywords[argument.name] = dry
        else:
            positional.append(expression)
            dry_positional.append(dry)
    arguments = ", ".join(positional + keywords)

    written = [
        p
        for p in tensor_params
        if p["is_out"] or ("!" in p["type"] and not explicit_out)
    ]
    read = [p for p in tensor_params if p not in written]
    # `set_` makes `out` a view of another storage: it writes no elements, so
    # neither the dry run nor a staging buffer means anything for it.
    rebinds = entry["aten_name"] == "set_"

    # Validation before anything is written (docs/behaviour.md, "ATen backend"):
    # ATen would resize a wrong-shaped `out` and may raise half-way through
    # writing it. A dry run of the same call on meta tensors (no data, exact
    # shape and dtype rules, once per built operator) gives the shape of
    # every output. When it agrees with the caller's outputs the call runs
    # as planned. When it cannot run (no meta kernel, a data-dependent
    # shape) or disagrees (a wrong `out`, or a meta kernel that differs from
    # the real one), the real call runs into copies of the outputs, which
    # are checked before they are copied out: a wrong `out` is then a
    # `ValueError` and a valid one a correct result, whatever the meta
    # kernel says.
    expected = None
    if not rebinds:
        source = next((p["name"] for p in params if p["schema_index"] == 0), None)
        expected = _dry_run(
            op, dry_positional, dry_keywords, meta_of, explicit_out and source
        )
    # Outputs that receive a reduced (0-d) result in their first element
    # (the losses' documented `out.flatten()[0]`).
    first_element_slots = set()
    # 0-d outputs of a reduced loss: the dry run agrees, but the real `out=`
    # kernel first resizes `out` to the elementwise shape as scratch (which
    # would reallocate the caller's storage), then back to 0-d. They run
    # into a new empty tensor, which ATen resizes without a warning
    # (docs/behaviour.md, "Loss reductions").
    reduced_scalar_outputs = set()
    verified = expected is not None
    for name, shape in (expected or {}).items():
        actual = meta_of(name)
        if actual is None:
            continue
        if isinstance(actual, list):
            verified = verified and [m.shape for m in actual] == shape
        elif actual.shape != shape:
            if reduced_in_first_element and shape == () and actual.numel > 0:
                first_element_slots.add(slot_of(name))
            else:
                verified = False
        elif reduced_in_first_element and shape == ():
            reduced_scalar_outputs.add(name)

    # Written tensors computed in a contiguous copy and copied out
    # afterwards: (1) ATen kernels that write wrong results through some
    # strided outputs (`gelu.out` into rows with gaps); (2) calls that can
    # fail on the data after writing part of an output (an index out of
    # range: any integral input); (3) outputs the dry run did not verify.
    # The caller's tensor is written only after the call succeeded. A copy
    # rather than an empty buffer, because a few ATen `out` variants read
    # `out` (`_compute_linear_combination`).
    index_inputs = any(
        is_integer(m.dtype) and m.dtype != "bool"
        for p in read
        for m in _metas(meta_of(p["name"]))
    )
    staged = []  # (slot, name)
    if not rebinds:
        for output in written:
            out_name = "out" if output["schema_index"] is None else output["name"]
            if explicit_out and out_name != "out":
                continue
            out_meta = meta_of(out_name)
            if out_meta is None or isinstance(out_meta, list) or out_meta.numel == 0:
                continue
            if (
                index_inputs
                or not verified
                or not out_meta.is_contiguous()
                or out_name in reduced_scalar_outputs
            ):
                staged.append((slot_of(out_name), out_name))

    body: list[str] = []
    staged_slots = {slot for slot, _ in staged}
    if staged:
        plan.constants["_copy"] = _contiguous_copy
        body.append("_caller = t")
        for slot, name in staged:
            if name in reduced_scalar_outputs:
                plan.constants["_empty"] = _empty_buffer
                body.append(f"t = _replace(t, {slot}, _empty(t[{slot}]))")
            else:
                body.append(f"t = _replace(t, {slot}, _copy(t[{slot}]))")
        plan.constants["_replace"] = _replace
    if first_element_slots:
        # ATen gets a new tensor object on the same memory: it may use all
        # of it as scratch and resize the alias to 0-d (its first element),
        # while the caller's tensor keeps its shape.
        plan.constants["_alias"] = _alias
        plan.constants["_first"] = _first_element
        for slot in sorted(first_element_slots):
            body.append(f"t = _replace(t, {slot}, _alias(t[{slot}]))")
        plan.constants["_replace"] = _replace

    # Aliasing (contract departure 6): an input that overlaps a written tensor
    # is read from a copy, so results are as if every input were read first.
    # Geometry is fixed per built operator, so only data pointers are compared.
    # A staged output is a fresh buffer that no input can overlap.
    checks = []
    for output in written:
        out_name = "out" if output["schema_index"] is None else output["name"]
        out_meta = meta_of(out_name)
        if out_meta is None or isinstance(out_meta, list):
            continue
        out_slot = slot_of(out_name)
        if out_slot in staged_slots:
            continue
        out_low, out_high = _span(out_meta)
        if out_high == out_low:
            continue
        for item in read:
            meta = meta_of(item["name"])
            if meta is None:
                continue
            slot = slot_of(item["name"])
            if isinstance(meta, list):
                checks.append(
                    f"t = _stage_list(t, {slot}, t[{out_slot}], {out_low}, {out_high})"
                )
                plan.constants["_stage_list"] = _stage_list
                continue
            low, high = _span(meta)
            if high == low:
                continue
            # Inlined (a call costs more than the comparison).
            checks.append(f"if t[{slot}] is not None:")
            checks.append(f"    _p = t[{slot}].data_ptr()")
            checks.append(f"    _q = t[{out_slot}].data_ptr()")
            checks.append(
                f"    if _p + {low} < _q + {out_high} and _q + {out_low} < _p + {high}:"
            )
            checks.append(f"        t = _replace(t, {slot}, t[{slot}].clone())")
            plan.constants["_replace"] = _replace
    body += checks
    if explicit_out:
        source = next(p for p in params if p["schema_index"] == 0)
        body.append(f"t[{slot_of('out')}].copy_(t[{slot_of(source['name'])}])")

    call = getattr(op, "_op", op)
    outputs = [a.name for a in schema if a.is_out]
    binding = _python_binding(entry["aten_name"])
    if entry.get("form", "out") == "out" and outputs == ["out"] and binding:
        # The Python binding (`torch.abs(x, out=y)`) costs less per call than
        # the boxed `torch.ops` path; where it rejects the arguments (a
        # binding without this overload) the first call switches for good.
        key = (entry["aten_name"], entry["overload_name"])
        plan.constants["_cell"] = _CALLS.setdefault(key, [binding])
        plan.constants["_boxed"] = call
        call_lines = [
            "try:",
            f"    _cell[0]({arguments})",
            "except TypeError:",
            "    if _cell[0] is _boxed:",
            "        raise",
            "    _cell[0] = _boxed",
            f"    _boxed({arguments})",
        ]
    else:
        plan.constants["_boxed"] = call
        call_lines = [f"_boxed({arguments})"]
    # Staged outputs whose final shape is checked after the call.
    checked = [
        (slot, name)
        for slot, name in staged
        if not verified or name in reduced_scalar_outputs
    ]
    if (not verified and staged) or first_element_slots:
        # ATen resizes (with a deprecation warning) a copy that has the
        # wrong shape; the check below reports it instead.
        plan.constants["_quiet"] = _quiet
        call_lines = ["with _quiet():"] + [f"    {line}" for line in call_lines]
    body += call_lines
    if staged:
        plan.constants["_shape_mismatch"] = _shape_mismatch
        plan.constants["_public"] = public
        for slot, name in checked:
            body.append(f"if t[{slot}].shape != _caller[{slot}].shape:")
            body.append(
                f"    raise _shape_mismatch(_public, {name!r}, "
                f"t[{slot}].shape, _caller[{slot}].shape)"
            )
        for slot, _ in staged:
            if slot in first_element_slots:
                body.append(f"_first(_caller[{slot}]).copy_(_first(t[{slot}]))")
            else:
                body.append(f"_caller[{slot}].copy_(t[{slot}])")

    device = first.device if first is not None else None
    lines = ["def launch(stream, *t):"]
    # ATen's checks run before it writes, so a rejected call leaves the
    # outputs untouched; the error becomes a `ValueError` naming the operator.
    plan.constants["_rejected"] = _rejected(public, entry, unsigned, device)
    lines.append("    try:")
    indent = "        "
    if device is not None and device.platform != "cpu":
        plan.constants["_on_stream"] = stream_context
        plan.constants["_device"] = device
        lines.append(f"{indent}if stream:")
        lines.append(f"{indent}    with _on_stream(_device, stream):")
        lines += [f"{indent}        {line}" for line in body]
        lines.append(f"{indent}    return")
    lines += [f"{indent}{line}" for line in body]
    lines.append("    except (RuntimeError, IndexError, NotImplementedError) as error:")
    lines.append("        raise _rejected(error) from error")
    namespace = dict(plan.constants)
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the schema
    launch = namespace["launch"]
    launch.__qualname__ = f"{public}.launch"
    return launch


class _TensorArgument:
    """A tensor parameter in the dry run's argument list."""

    def __init__(self, name: str, is_out: bool) -> None:
        self.name = name
        self.is_out = is_out


def _dry_run(op, positional, keywords, meta_of, explicit_source):
    """Runs `op` on meta tensors of the call's geometry; outputs start empty
    so that ATen sizes them. Returns {output name: expected shape} (a list
    of shapes for a tensor list), or `None` when the dry run says nothing:
    no meta kernel, a data-dependent shape, or arguments it rejects (the
    real call then runs into fresh outputs and reports ATen's own error,
    so a meta kernel stricter than the real one never rejects a valid
    call)."""
    import torch

    outputs: dict = {}
    sized = [False]

    def meta_tensor(meta, is_out: bool):
        if is_out and not sized[0]:
            return torch.empty(0, dtype=meta.torch_dtype, device="meta")
        return torch.empty_strided(
            meta.shape, meta.strides, dtype=meta.torch_dtype, device="meta"
        )

    def materialise(value):
        if not isinstance(value, _TensorArgument):
            return value
        meta = meta_of(value.name)
        if meta is None:
            return None
        if isinstance(meta, list):
            tensors = [
                None if m is None else meta_tensor(m, value.is_out) for m in meta
            ]
        else:
            tensors = meta_tensor(meta, value.is_out)
        if value.is_out:
            outputs[value.name] = tensors
        return tensors

    def attempt() -> bool:
        outputs.clear()
        try:
            arguments = [materialise(v) for v in positional]
            keyword_arguments = {k: materialise(v) for k, v in keywords.items()}
            if explicit_source:
                source = materialise(_TensorArgument(explicit_source, False))
                arguments[0].copy_(source)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                op(*arguments, **keyword_arguments)
        except Exception:
            return False
        return True

    # Empty outputs first (ATen sizes them); then outputs of the caller's
    # geometry, for the few variants that read `out`'s shape.
    if not attempt():
        sized[0] = True
        if not attempt():
            return None
    return {
        name: (
            [tuple(t.shape) for t in value]
            if isinstance(value, list)
            else tuple(value.shape)
        )
        for name, value in outputs.items()
    }


def _shape_text(shape) -> str:
    if isinstance(shape, list):
        return "[" + ", ".join(_shape_text(s) for s in shape) + "]"
    return str(tuple(shape))


def _contiguous_copy(tensor):
    """The staging buffer of a written tensor: a contiguous copy."""
    import torch

    return tensor.clone(memory_format=torch.contiguous_format)


def _empty_buffer(tensor):
    """A staging buffer with no elements, which ATen sizes silently."""
    return tensor.new_empty(0)


def _alias(tensor):
    """A new tensor object with the geometry and memory of `tensor`."""
    return tensor.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def _first_element(tensor):
    """A 0-d view of the first element of a tensor (at its data pointer)."""
    return tensor.as_strided((), (), tensor.storage_offset())


class _Quiet(warnings.catch_warnings):
    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore")


def _quiet():
    return _Quiet()


def _shape_mismatch(public: str, name: str, expected, actual) -> ValueError:
    return OperatorError(
        public,
        f"`{name}` must have shape {tuple(expected)} for these arguments, "
        f"got {tuple(actual)}.",
    )


# (ATen name, overload) -> [the callable used]: the Python binding until it
# turns out not to accept the overload's arguments, then the boxed operator.
_CALLS: dict[tuple[str, str], list] = {}


def _python_binding(aten_name: str):
    """`torch._C`'s Python binding of an ATen name, or None."""
    import torch

    namespaces = (
        ("special_", "_special"),
        ("linalg_", "_linalg"),
        ("fft_", "_fft"),
    )
    for prefix, module in namespaces:
        if aten_name.startswith(prefix):
            return getattr(getattr(torch._C, module, None), aten_name, None)
    return getattr(torch._C._VariableFunctions, aten_name, None) or getattr(
        torch._C._nn, aten_name, None
    )


def _overlap(pointer, low, high, out_pointer, out_low, out_high) -> bool:
    return pointer + low < out_pointer + out_high and out_pointer + out_low < (
        pointer + high
    )


def _replace(tensors: tuple, index: int, value) -> tuple:
    return tensors[:index] + (value,) + tensors[index + 1 :]


def _stage_list(tensors: tuple, index: int, out, out_low: int, out_high: int):
    """Copies the members of a tensor list that overlap `out`."""
    members = tensors[index]
    if members is None:
        return tensors
    pointer = out.data_ptr()
    staged = []
    changed = False
    for member in members:
        if member is not None and member.numel():
            size = member.element_size()
            span = [(n - 1) * s for n, s in zip(member.shape, member.stride())]
            low = sum(x for x in span if x < 0) * size
            high = (sum(x for x in span if x > 0) + 1) * size
            if _overlap(member.data_ptr(), low, high, pointer, out_low, out_high):
                member = member.clone()
                changed = True
        staged.append(member)
    return _replace(tensors, index, staged) if changed else tensors


def _rejected(public, entry, unsigned, device):
    """Turns an ATen error into a `ValueError` naming the operator."""
    schema = f"aten::{entry['aten_name']}.{entry['overload_name'] or 'default'}"

    def make(error: BaseException) -> ValueError:
        text = str(error).strip()
        detail = text.splitlines()[0] if text else type(error).__name__
        if unsigned:
            return ValueError(
                f"`{public}`: the ATen implementation (slot {SLOT}, {schema}) does "
                f"not support dtype {', '.join(unsigned)} on {device}: {detail}"
            )
        return ValueError(
            f"`{public}`: the ATen implementation (slot {SLOT}, {schema}) rejected "
            f"the arguments: {detail}"
        )

    return make
