"""The hostile-input matrix over every operator with a native CPU
implementation (issue 12, item 6).

Each operator's small valid call comes from `tests/_valid_calls.py`; every
mutation changes one argument of it:

- `dtype`, `rank`, `shape`, `device`, `non_tensor`: each tensor (and the
  first of each tensor list) gets a dtype its role excludes, an extra
  dimension, one more row, the meta device, or becomes a string;
- `non_scalar`: each scalar becomes an object of no parameter type;
- `tensor_scalar`, `list_scalar`: each scalar becomes a multi-element
  tensor (which has `__float__`, `__index__` and `__bool__` that raise) or
  a list, at every slot active on the CPU (issue 25: the conversion's own
  error named neither the operator nor the parameter);
- `expanded`, `overlapping`: each written tensor becomes a stride-0 view, or
  a view whose rows share elements;
- `aliased`: each pair of written tensors shares memory (from one address,
  and one starting inside the other);
- `index`: each checked index input holds an out-of-range value;
- `slot`: `implementation_index` is negative, not active, or not an int.

Each must raise a `ValueError` (or `TypeError`) whose message names the
operator (and the parameter, where the check is about one parameter:
dtype, device, non-tensor, written geometry, aliasing, index values), and
leave the bytes of every tensor argument as they were. A mutation the
operator documents as valid (`Call.accepts`) is not generated. Zero-size and
NaN/Inf inputs give a result (finite where the inputs are, NaN somewhere
when a NaN is read) or such an error.

Tensor-likes (docs/behaviour.md, "Tensor arguments") in place of each
tensor, at every slot active on the CPU, either give the torch tensors'
result or raise such an error naming the parameter (`test_tensor_likes`).

Everything runs in this process on tiny shapes with the dtypes of the valid
call, so that the kernels compiled for the operators' own tests serve here
too. The risky cases (index values at the ends of their dtype's range,
which read far outside a buffer if a check is missing) run together in one
child process.

Under `INFINI_OPS_TRITON_INTERPRET=1` the harness deselects this module (it
names no operator): the matrix is about the native CPU slots.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest
import torch

import infini.ops
from infini.ops.core.manifest import load_manifest
from infini.ops.core.schema import class_name_of
from infini.ops.core.signature import Overload, resolve
from tests._valid_calls import VALID_CALLS


def _native_cpu_implementations() -> dict[str, dict]:
    """Operator -> the manifest entry of its lowest native CPU slot, for
    every operator of the build with a native CPU implementation."""
    found: dict[str, dict] = {}
    for name, info in load_manifest()["operators"].items():
        for entry in info["implementations"]:
            if "cpu" in entry["devices"] and entry["backend"] == "native":
                if name not in found or entry["slot"] < found[name]["slot"]:
                    found[name] = entry
    return dict(sorted(found.items()))


IMPLEMENTATIONS = _native_cpu_implementations()
SLOTS = {name: entry["slot"] for name, entry in IMPLEMENTATIONS.items()}
OPERATORS = [name for name in SLOTS if name in VALID_CALLS]
ROWS = 3


def test_every_native_cpu_operator_has_a_valid_call():
    # A new operator needs an entry in `tests/_valid_calls.py`.
    if not SLOTS:
        pytest.skip("the build has no native CPU implementation")
    missing = sorted(set(SLOTS) - set(VALID_CALLS))
    assert not missing, f"no valid call in tests/_valid_calls.py for {missing}"


# -- helpers ------------------------------------------------------------------


def _parameters(operator, args):
    """The parameters (`core.signature.Parameter`) the arguments bind to."""
    entry = IMPLEMENTATIONS[operator]
    cls = getattr(importlib.import_module(entry["module"]), entry["class"])
    overloads = [Overload(i, text) for i, text in enumerate(cls.overloads)]
    bound = resolve(overloads, tuple(args), {})
    assert bound is not None, f"the valid call of `{operator}` binds to no overload"
    return bound[0].parameters


def _tensors(args):
    """Every tensor among the arguments, tensor lists included."""
    found = []
    for value in args:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _snapshot(args):
    # Every byte of each tensor's storage (meta tensors have none).
    return [
        bytes(t.untyped_storage()) if t.device.type != "meta" else b""
        for t in _tensors(args)
    ]


def _run(operator, args):
    getattr(infini.ops, operator)(*args, implementation_index=SLOTS[operator])


def _problem(operator, args, parameter=None, implementation_index=None):
    """Why the call is not a clean rejection, or `None` when it is: it must
    raise a `ValueError` or `TypeError` naming `operator` (and `parameter`
    when given) and leave every tensor argument's bytes as they were."""
    before = _snapshot(args)
    index = SLOTS[operator] if implementation_index is None else implementation_index
    try:
        getattr(infini.ops, operator)(*args, implementation_index=index)
    except (ValueError, TypeError) as error:
        message = str(error)
    else:
        return "accepted"
    if f"`{operator}`" not in message:
        return f"the error does not name the operator: {message}"
    if parameter is not None and f"`{parameter}" not in message:
        return f"the error does not name `{parameter}`: {message}"
    if _snapshot(args) != before:
        return f"written before raising: {message}"
    return None


def _replaced(args, position, value):
    changed = list(args)
    changed[position] = value
    return changed


def _floats_finite(tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


def _written(operator, args):
    parameters = _parameters(operator, args)
    return [
        (i, p.name)
        for i, p in enumerate(parameters)
        if p.writes and i < len(args) and isinstance(args[i], torch.Tensor)
    ]


def _tensor_positions(operator, args):
    parameters = _parameters(operator, args)
    return [
        (i, parameters[i].name)
        for i, value in enumerate(args)
        if isinstance(value, torch.Tensor)
    ]


def _list_positions(operator, args):
    """(position, name) of every non-empty tensor list argument."""
    parameters = _parameters(operator, args)
    return [
        (i, parameters[i].name)
        for i, value in enumerate(args)
        if isinstance(value, list) and value and isinstance(value[0], torch.Tensor)
    ]


def _scalar_positions(operator, args):
    """(position, name) of every scalar argument (int, float, bool, str,
    dtype, list of ints)."""
    parameters = _parameters(operator, args)
    return [
        (i, parameters[i].name)
        for i, value in enumerate(args)
        if value is not None and not parameters[i].is_tensor
    ]


def _binds_like(operator, args, changed) -> bool:
    """Whether `changed` binds to the overload `args` binds to, or to none
    (a `TypeError` naming the refused parameter)."""
    entry = IMPLEMENTATIONS[operator]
    cls = getattr(importlib.import_module(entry["module"]), entry["class"])
    overloads = [Overload(i, text) for i, text in enumerate(cls.overloads)]
    bound = resolve(overloads, tuple(changed), {})
    return (
        bound is None or bound[0].index == resolve(overloads, tuple(args), {})[0].index
    )


def _cpu_slots(operator):
    return getattr(infini.ops, class_name_of(operator)).active_implementation_indices(
        "cpu"
    )


def _accepted(call, mutation, name) -> bool:
    return name in call.accepts.get(mutation, {})


# -- mutations ------------------------------------------------------------------


def _wrong_dtype(tensor):
    # A dtype of the library that the parameter's role excludes.
    if tensor.is_floating_point():
        return tensor.to(torch.int32)
    return tensor.to(torch.float32)


def _extra_dimension(tensor):
    return tensor.unsqueeze(-1).expand(*tensor.shape, 2).contiguous()


def _longer(tensor):
    # One more row (of zeros) along the first dimension.
    return torch.cat([tensor, torch.zeros_like(tensor[:1])])


def _expanded(tensor):
    # Stride 0 along the first dimension of size > 1.
    dim = next(d for d, size in enumerate(tensor.shape) if size > 1)
    shape = list(tensor.shape)
    shape[dim] = 1
    return torch.full(shape, 7, dtype=tensor.dtype).expand(tensor.shape)


def _self_overlapping(tensor):
    # Contiguous strides, except that the outermost dimension of size > 1
    # steps one element: its rows share all but one element.
    dims = [d for d, size in enumerate(tensor.shape) if size > 1]
    strides = list(torch.empty(tensor.shape).stride())
    strides[dims[0]] = 1
    span = 1 + sum((s - 1) * st for s, st in zip(tensor.shape, strides, strict=True))
    return torch.full((span,), 7, dtype=tensor.dtype).as_strided(tensor.shape, strides)


def _sharing(first, second, offset=0):
    """`first` and `second` re-made as contiguous views of one buffer,
    `second` starting `offset` bytes after `first`."""
    size_first = first.numel() * first.element_size()
    size_second = second.numel() * second.element_size()
    buffer = torch.full((max(size_first, offset + size_second),), 7, dtype=torch.uint8)

    def view(like, start):
        size = like.numel() * like.element_size()
        return buffer[start : start + size].view(like.dtype).view(like.shape)

    return view(first, 0), view(second, offset)


# Not active, negative, past the slot limit, or not an int.
BAD_SLOTS = (-1, 31, 10**6, 0.0, 1.5, "0", True, False)

MUTATIONS = (
    "dtype",
    "rank",
    "shape",
    "device",
    "non_tensor",
    "non_scalar",
    "tensor_scalar",
    "list_scalar",
    "expanded",
    "overlapping",
    "aliased",
    "index",
    "slot",
)


def _cases(operator, mutation, call):
    """The mutated calls of one kind: (what, arguments, the parameter the
    error must name or None, implementation_index or None)."""
    args = call.args
    cases = []
    if mutation in ("dtype", "rank", "shape", "device", "non_tensor"):
        change, names_parameter = {
            "dtype": (_wrong_dtype, True),
            "rank": (_extra_dimension, False),
            "shape": (_longer, False),
            "device": (lambda t: torch.empty_like(t, device="meta"), True),
            "non_tensor": (lambda t: "not a tensor", True),
        }[mutation]
        for position, name in _tensor_positions(operator, args):
            if _accepted(call, mutation, name):
                continue
            if mutation == "shape" and args[position].ndim == 0:
                continue
            changed = _replaced(args, position, change(args[position]))
            cases.append((name, changed, name if names_parameter else None, None))
        # The first tensor of each tensor list.
        for position, name in _list_positions(operator, args):
            if _accepted(call, mutation, name):
                continue
            items = list(args[position])
            items[0] = change(items[0])
            changed = _replaced(args, position, items)
            cases.append(
                (f"{name}[0]", changed, name if names_parameter else None, None)
            )
    elif mutation == "non_scalar":
        for position, name in _scalar_positions(operator, args):
            cases.append((name, _replaced(args, position, object()), None, None))
    elif mutation in ("tensor_scalar", "list_scalar"):
        value = torch.ones(3) if mutation == "tensor_scalar" else [1.0, 2.0]
        for position, name in _scalar_positions(operator, args):
            if isinstance(args[position], (list, tuple)):
                continue  # a list parameter: `non_scalar` covers it
            changed = _replaced(args, position, value)
            if not _binds_like(operator, args, changed):
                continue  # another overload takes it: its own checks apply
            for index in _cpu_slots(operator):
                cases.append((f"{name} at slot {index}", changed, name, index))
    elif mutation in ("expanded", "overlapping"):
        make = _expanded if mutation == "expanded" else _self_overlapping
        least = 1 if mutation == "expanded" else 2
        for position, name in _written(operator, args):
            if sum(s > 1 for s in args[position].shape) >= least:
                changed = _replaced(args, position, make(args[position]))
                cases.append((name, changed, name, None))
    elif mutation == "aliased":
        written = _written(operator, args)
        for n, (i, first) in enumerate(written):
            for j, second in written[n + 1 :]:
                # From one address, and `second` from the middle of `first`
                # (8 bytes in: aligned for every dtype).
                offsets = [0]
                if args[i].numel() * args[i].element_size() > 8:
                    offsets.append(8)
                for offset in offsets:
                    changed = list(args)
                    changed[i], changed[j] = _sharing(args[i], args[j], offset)
                    what = f"{first}, {second} at {offset} bytes"
                    # The message names both.
                    cases.append((what, changed, first, None))
                    cases.append((what, changed, second, None))
    elif mutation == "index":
        positions = {name: p for p, name in _tensor_positions(operator, args)}
        for name, values in call.indices.items():
            for value in values:
                index = args[positions[name]].clone()
                index.view(-1)[-1] = value
                changed = _replaced(args, positions[name], index)
                cases.append((f"{name} = {value}", changed, name, None))
    elif mutation == "slot":
        for index in BAD_SLOTS:
            cases.append((repr(index), args, "implementation_index", index))
    return cases


@pytest.mark.parametrize(
    "operator, mutation",
    [
        pytest.param(operator, mutation, id=f"{operator}-{mutation}")
        for operator in OPERATORS
        for mutation in MUTATIONS
        if _cases(operator, mutation, VALID_CALLS[operator](ROWS))
    ],
)
def test_rejected(operator, mutation):
    cases = _cases(operator, mutation, VALID_CALLS[operator](ROWS))
    if mutation == "slot":
        # The uncached path (see `test_cached_calls_reject_bad_slots`).
        getattr(infini.ops, class_name_of(operator)).clear_cache()
    assert cases, f"no `{mutation}` case for `{operator}`"
    problems = [
        f"{what}: {problem}"
        for what, changed, parameter, index in cases
        if (problem := _problem(operator, changed, parameter, index)) is not None
    ]
    assert not problems, f"`{operator}`, {mutation}: " + "; ".join(problems)


def test_cached_calls_reject_bad_slots():
    problems = []
    for operator in OPERATORS:
        args = VALID_CALLS[operator](ROWS).args
        _run(operator, args)  # cached from here on
        for index in BAD_SLOTS:
            problem = _problem(operator, args, "implementation_index", index)
            if problem is not None:
                problems.append(f"`{operator}` at {index!r}: {problem}")
    assert not problems, "; ".join(problems[:10])


# -- tensor-likes ------------------------------------------------------------------


class _TensorLike:
    """A tensor by duck typing (docs/behaviour.md, "Tensor arguments"): it
    has what the library reads and nothing else of `torch.Tensor`."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.device = tensor.device

    def data_ptr(self):
        return self._tensor.data_ptr()

    def stride(self, *dim):
        return self._tensor.stride(*dim)


@pytest.mark.parametrize("operator", OPERATORS)
def test_tensor_likes(operator):
    """Each tensor argument as a tensor-like, at every slot active on the
    CPU, after a cached call with torch tensors: the same result as the
    torch tensors give, or a `ValueError`/`TypeError` naming the operator
    and the parameter, with nothing written."""
    problems = []
    for index in _cpu_slots(operator):
        call = VALID_CALLS[operator](ROWS)
        reference = [_clone(value) for value in call.args]
        getattr(infini.ops, operator)(*reference, implementation_index=index)
        for position, name in _tensor_positions(operator, call.args):
            args = [_clone(value) for value in call.args]
            expected = [_clone(value) for value in call.args]
            torch.manual_seed(0)  # the sampling operators draw from torch
            getattr(infini.ops, operator)(*expected, implementation_index=index)
            changed = _replaced(args, position, _TensorLike(args[position]))
            before = _snapshot(args)
            torch.manual_seed(0)
            try:
                getattr(infini.ops, operator)(*changed, implementation_index=index)
            except (ValueError, TypeError) as error:
                message = str(error)
                if f"`{operator}`" not in message or f"`{name}" not in message:
                    problems.append(f"slot {index}, `{name}`: {message}")
                elif _snapshot(args) != before:
                    problems.append(f"slot {index}, `{name}`: written before raising")
            except Exception as error:  # noqa: BLE001 - reported below
                problems.append(
                    f"slot {index}, `{name}`: {type(error).__name__}: {error}"
                )
            else:
                same = all(
                    torch.equal(a.nan_to_num(1234.5), b.nan_to_num(1234.5))
                    for a, b in zip(_tensors(args), _tensors(expected), strict=True)
                )
                if not same:
                    problems.append(f"slot {index}, `{name}`: another result")
    assert not problems, f"`{operator}`: " + "; ".join(problems)


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [_clone(item) for item in value]
    return value


def test_issue_25_conversions_name_the_operator_and_the_parameter():
    x, w = torch.randn(4, 64), torch.randn(64)
    out = torch.empty_like(x)
    with pytest.raises(
        ValueError, match="`rms_norm`: `eps` must be a float, got Tensor"
    ):
        infini.ops.rms_norm(x, w, out, 1e-6)
    with pytest.raises(ValueError, match="`add`: `alpha` must be a float, got Tensor"):
        infini.ops.add(x, x, out, 0)
    with pytest.raises(ValueError, match="`add`: `alpha` must be a float, got Tensor"):
        infini.ops.Add(x, x, out, 0)


# -- calls that must succeed (or fail cleanly) -------------------------------


def _outputs(operator, args):
    return [args[i] for i, _ in _written(operator, args)]


@pytest.mark.parametrize("operator", OPERATORS)
def test_valid_call(operator):
    args = VALID_CALLS[operator](ROWS).args
    outputs = _outputs(operator, args)
    before = [output.clone() for output in outputs]
    _run(operator, args)
    assert _floats_finite(outputs)
    # The table's call does some work: it writes somewhere.
    assert any(
        not torch.equal(output, old)
        for output, old in zip(outputs, before, strict=True)
    ), f"the valid call of `{operator}` wrote nothing"


@pytest.mark.parametrize("operator", OPERATORS)
def test_zero_size(operator):
    args = VALID_CALLS[operator](0).args
    before = _snapshot(args)
    try:
        _run(operator, args)
    except ValueError as error:
        assert f"`{operator}`" in str(error), error
        assert _snapshot(args) == before, f"`{operator}` wrote before raising"
        return
    assert _floats_finite(_outputs(operator, args))


def _nan_target(operator, call):
    """(position, index in a tensor list or None, name) of the input that
    gets the non-finite values: `call.poison`, else the first floating-point
    tensor that is not written."""
    parameters = _parameters(operator, call.args)
    for position, value in enumerate(call.args):
        parameter = parameters[position]
        name = parameter.name
        if call.poison is not None:
            if name == call.poison:
                return position, None, name
            continue
        if parameter.writes or _accepted(call, "nan", name):
            continue
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return position, None, name
        if isinstance(value, list) and value and value[0].is_floating_point():
            return position, 0, name
    return None, None, None


# Known failures, each a bug reported to the operator's owner.
KNOWN_NON_FINITE: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(
    "operator, value",
    [
        pytest.param(
            operator,
            value,
            id=f"{operator}-{value}",
            marks=[pytest.mark.xfail(strict=True, reason=reason)]
            if (reason := KNOWN_NON_FINITE.get((operator, value)))
            else [],
        )
        for operator in OPERATORS
        for value in ("nan", "inf")
        # Not generated for operators that read no floating-point values
        # (integer, packed or metadata-only inputs).
        if _nan_target(operator, VALID_CALLS[operator](ROWS))[0] is not None
    ],
)
# NumPy's matmul (gemm, linear, matmul) warns on `inf - inf`; reported.
@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul")
def test_non_finite_inputs(operator, value):
    call = VALID_CALLS[operator](ROWS)
    position, item, name = _nan_target(operator, call)
    args = list(call.args)
    if item is None:
        changed = args[position] = args[position].clone()
    else:
        args[position] = list(args[position])
        changed = args[position][item] = args[position][item].clone()
    if value == "nan":
        changed.view(-1)[0] = float("nan")
    else:
        changed.view(-1)[0] = float("inf")
        changed.view(-1)[-1] = -float("inf")
    before = _snapshot(args)
    try:
        _run(operator, args)
    except ValueError as error:
        assert f"`{operator}`" in str(error), error
        assert _snapshot(args) == before, f"`{operator}` wrote before raising"
        return
    floats = [t for t in _outputs(operator, args) if t.is_floating_point()]
    if value == "nan" and floats:
        assert not _floats_finite(floats), (
            f"a NaN in `{name}` of `{operator}` left every output finite"
        )


# -- the risky cases, together in a child process ------------------------------

_EXTREME_INDICES = """
import torch, infini.ops
from tests._valid_calls import VALID_CALLS
from tests.test_hostile_matrix import OPERATORS, SLOTS, _tensor_positions, _snapshot

failures = []
for operator in OPERATORS:
    call = VALID_CALLS[operator](3)
    positions = {name: p for p, name in _tensor_positions(operator, call.args)}
    for name, values in call.indices.items():
        index = call.args[positions[name]]
        info = torch.iinfo(index.dtype)
        extremes = [info.max] if max(values) >= 0 else []
        extremes += [info.min] if min(values) < 0 else []
        for value in extremes:
            args = list(call.args)
            args[positions[name]] = index.clone()
            args[positions[name]].view(-1)[-1] = value
            before = _snapshot(args)
            try:
                getattr(infini.ops, operator)(
                    *args, implementation_index=SLOTS[operator]
                )
            except ValueError as error:
                if f"`{operator}`" not in str(error) or _snapshot(args) != before:
                    failures.append((operator, name, value, str(error)))
            else:
                failures.append((operator, name, value, "accepted"))
assert not failures, failures
print("ok")
"""


def test_extreme_index_values_in_a_child_process():
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXTREME_INDICES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert result.stdout.strip().endswith("ok")
