"""Every generated ATen operator (slot 8) against its PyTorch reference.

Walks `torch_ops_metadata.json` (docs/behaviour.md, "ATen operator tests"): for the
first overload of each ATen name, builds inputs from the parameter types, runs the torch
reference (`torch`, `torch.special`, `torch.linalg`, `torch.fft`, `torch.nn.functional`,
or the Tensor method for in-place forms), then ours with ``implementation_index=8`` into
outputs shaped like the reference's, and compares. Skips always say why: no reference,
random operator, unsupported dtype, inputs the reference rejects.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import infini.ops
from infini.ops.core.schema import GENERATED_ATEN_SLOT

SLOT = GENERATED_ATEN_SLOT
SHAPES = [(13, 4), (13, 4, 4), (4, 4, 5632)]
DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="float32"),
    pytest.param(torch.float16, 1e-2, 1e-2, id="float16"),
    pytest.param(torch.bfloat16, 1e-2, 1e-2, id="bfloat16"),
]
# `tests/conftest.py` and the smoke build's torch set (docs/behaviour.md, "Smoke
# builds").
SMOKE_OPS = ("abs", "clamp", "exp", "relu")

# Reductions whose fp16/bf16 results depend on the summation order more than
# the tolerance allows.
LOW_PRECISION_REDUCTIONS = {
    "sum",
    "mean",
    "nansum",
    "nanmean",
    "prod",
    "std",
    "var",
    "cumsum",
    "cumprod",
    "logcumsumexp",
    "norm",
    "linalg_vector_norm",
    "linalg_norm",
    "logsumexp",
    "std_mean",
    "var_mean",
    "special_logsumexp",
    "trace",
    "dot",
    "vdot",
    "inner",
}
# Operators that reuse `out` as scratch, so only the first element is defined.
SCRATCH_OUTPUT = set()

# Scalar arguments by parameter name (others by type: see `_scalar`).
SCALAR_VALUES = {
    "UPLO": "L",
    "reduce": "sum",
    "kernel_size": 1,
    "stride": 1,
    "dilation": 1,
    "output_size": 2,
    "upscale_factor": 1,
    "downscale_factor": 1,
    "groups": 1,
    "p": 2.0,
    "ord": 2.0,
    "diagonal": 0,
    "k": 1,
    "repeats": 2,
    "sections": 1,
    "chunks": 1,
    "bins": 4,
    "num_classes": -1,
    "approximate": "none",
    "side": None,
    "padding_mode": "zeros",
    "interpolation_mode": 0,
    "min": -0.5,
    "max": 0.5,
    "lambd": 0.5,
    "margin": 1.0,
    "beta": 1.0,
    "delta": 1.0,
    "eps": 1e-5,
    "momentum": 0.1,
    "reduction": 1,
    "log_target": False,
    "some": True,
    "full_matrices": False,
    "interpolation": "linear",
    "mode": "reduced",
}
# Operators whose random indices collide, and whose parallel kernels then
# pick a different winner from run to run.
COLLIDING_INDICES = {"max_unpool2d", "max_unpool3d"}
# Index-like tensor parameters get int64 values valid for every dimension;
# mask-like ones get bools.
INDEX_PARAMETERS = {"index", "indices", "sorter"}
MASK_PARAMETERS = {"mask", "condition"}
# Dense linear algebra on the (4, 4, 5632) batch solves 5632-wide problems
# (seconds each); the two smaller shapes cover these operators.
LARGE_SHAPE_SKIPS = ("linalg_", "svd", "pinverse", "cholesky", "qr", "lu", "geqrf")

# Matrix operators get shapes that multiply: (m, k) @ (k, n) from the case's
# last two dimensions, vectors from the last one.
MATRIX_SHAPES = {
    "mm": lambda s: [s[-2:], s[-2:][::-1]],
    "bmm": lambda s: [(2, *s[-2:]), (2, *s[-2:][::-1])],
    "matmul": lambda s: [s[-2:], s[-2:][::-1]],
    "dot": lambda s: [s[-1:], s[-1:]],
    "vdot": lambda s: [s[-1:], s[-1:]],
    "mv": lambda s: [s[-2:], s[-1:]],
    "inner": lambda s: [s[-2:], s[-2:]],
    "outer": lambda s: [(13,), (4,)],
    "ger": lambda s: [(13,), (4,)],
    "kron": lambda s: [(2, 3), (3, 2)],
    "addmm": lambda s: [s[-2:][:1] + s[-2:][:1], s[-2:], s[-2:][::-1]],
    "internal_compute_linear_combination": lambda s: [(3, *s[-2:]), (2, 3)],
}


def _metadata_path() -> Path:
    path = Path(infini.ops.__file__).resolve().with_name("torch_ops_metadata.json")
    if path.is_file():
        return path
    from infini.ops.core.manifest import TORCH_METADATA_PATH

    return TORCH_METADATA_PATH


def _testable_ops() -> list[dict]:
    """The first overload of every ATen name."""
    path = _metadata_path()
    if not path.is_file():
        return []
    seen, ops = set(), []
    for entry in json.loads(path.read_text(encoding="utf-8"))["ops"]:
        if entry["aten_name"] not in seen:
            seen.add(entry["aten_name"])
            ops.append(entry)
    return ops


def _cases():
    ops = _testable_ops()
    if not ops:
        yield pytest.param(
            None,
            None,
            marks=pytest.mark.skip(reason="this build has no ATen metadata"),
            id="no-metadata",
        )
        return
    for entry in ops:
        for shape in SHAPES:
            smoke = entry["name"] in SMOKE_OPS and shape == SHAPES[0]
            identifier = f"{entry['aten_name']}.{entry['overload_name']}-{shape}"
            yield pytest.param(
                entry,
                shape,
                id=identifier.replace(" ", ""),
                marks=pytest.mark.smoke if smoke else (),
            )


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _schema(entry):
    packet = getattr(torch.ops.aten, entry["aten_name"])
    return getattr(packet, entry["overload_name"] or "default")._schema


def _is_random(entry) -> bool:
    return any("Generator" in str(a.type) for a in _schema(entry).arguments)


def _scalar(param, shape):
    name, aten_type = param["name"], param["type"]
    optional = aten_type.endswith("?")
    core = aten_type.rstrip("?")
    list_match = re.fullmatch(r"(int|SymInt|float)\[(\d*)\]", core)
    if name in SCALAR_VALUES and not (optional and core in ("str", "ScalarType")):
        value = SCALAR_VALUES[name]
        if list_match:
            count = int(list_match[2] or 1)
            return [value] * count if not isinstance(value, list) else value
        if core in ("int", "SymInt") and isinstance(value, float):
            return int(value)
        return value
    if optional:
        return None
    if list_match:
        return [0] * int(list_match[2] or 1)
    if core in ("int", "SymInt"):
        return 0
    if core == "bool":
        return False
    if core == "str":
        return "none"
    if core == "ScalarType":
        return torch.float32
    return 0.5


def _inputs(entry, shape, dtype, device):
    """Our call's inputs, in our parameter order (outputs excluded)."""
    params = [p for p in entry["params"] if not p["is_out"]]
    shapes = MATRIX_SHAPES.get(entry["name"], lambda s: None)(shape)
    tensor_index = 0
    values = []
    for param in params:
        core = param["type"].split("(")[0].rstrip("?")
        if param["is_tensor"] and core in ("Tensor", "Tensor!"):
            this_shape = shape
            if shapes is not None and tensor_index < len(shapes):
                this_shape = shapes[tensor_index]
            tensor_index += 1
            if param["name"] in INDEX_PARAMETERS:
                high = min(this_shape) if this_shape else 1
                values.append(torch.randint(0, high, this_shape, device=device))
            elif param["name"] in MASK_PARAMETERS:
                values.append(torch.rand(this_shape, device=device) > 0.5)
            else:
                values.append(torch.randn(this_shape, dtype=dtype, device=device))
        elif param["type"].startswith("Tensor?[]"):
            count = min(2, shape[0])
            values.append([torch.arange(count, device=device), None])
        elif param["type"].startswith("Tensor") and "[]" in param["type"]:
            values.append([torch.randn(shape, dtype=dtype, device=device)] * 2)
        else:
            values.append(_scalar(param, shape))
    return params, values


def _reference_function(entry):
    name = entry["aten_name"]
    if entry.get("form") in ("inplace", "inplace_out"):
        return None  # a Tensor method, bound per call
    stem = entry["name"]
    for prefix, module in (
        ("special_", torch.special),
        ("linalg_", torch.linalg),
        ("fft_", torch.fft),
    ):
        if stem.startswith(prefix) and hasattr(module, stem[len(prefix) :]):
            return getattr(module, stem[len(prefix) :])
    for module in (torch, torch._C._nn, F, torch._C._special, torch._C._linalg):
        function = getattr(module, name, None)
        if callable(function):
            return function
    # Internal and backward operators have no Python API: the functional ATen
    # overload (the packet picks it from the arguments) is the reference.
    return getattr(torch.ops.aten, name, None)


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [_clone(item) for item in value]
    return value


def _reference(entry, params, values):
    """(reference outputs as a tuple, which input holds the in-place result)."""
    schema = _schema(entry)
    by_index = {p["schema_index"]: v for p, v in zip(params, _clone(values))}
    positional, keywords = [], {}
    for index, argument in enumerate(schema.arguments):
        if argument.is_out:
            continue
        if index not in by_index:
            if argument.kwarg_only:
                continue
            value = argument.default_value if argument.has_default_value() else None
        else:
            value = by_index[index]
        if argument.kwarg_only:
            keywords[argument.name] = value
        else:
            positional.append(value)
    if entry.get("form") in ("inplace", "inplace_out"):
        method = getattr(positional[0], entry["aten_name"])
        result = method(*positional[1:], **keywords)
        return (result,)
    function = _reference_function(entry)
    if function is None:
        pytest.skip(f"no torch reference for `{entry['aten_name']}`")
    result = function(*positional, **keywords)
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and all(
        isinstance(r, torch.Tensor) for r in result
    ):
        return tuple(result)
    pytest.skip(f"the reference returns {type(result).__name__}, not tensors")


def _assert_close(output, expected, rtol, atol, name):
    assert output.shape == expected.shape, f"{name}: {output.shape} != {expected.shape}"
    if expected.is_floating_point() or expected.is_complex():
        assert torch.allclose(output, expected, rtol=rtol, atol=atol, equal_nan=True), (
            f"{name}: max abs diff "
            f"{(output.double() - expected.double()).abs().nan_to_num(0).max():.3g}"
        )
    else:
        assert torch.equal(output, expected), f"{name}: values differ"


@pytest.mark.parametrize("dtype, rtol, atol", DTYPES)
@pytest.mark.parametrize("op_meta, shape", _cases())
def test_torch_op(op_meta, shape, dtype, rtol, atol, device):
    entry = op_meta
    name = entry["name"]
    cls = getattr(infini.ops, _pascal(name), None)
    if cls is None or SLOT not in cls.active_implementation_indices(device):
        pytest.skip(f"`{name}` has no slot {SLOT} on {device} in this build")
    if name in LOW_PRECISION_REDUCTIONS and dtype != torch.float32:
        pytest.skip("low-precision reduction: order-dependent beyond the tolerance")
    if _is_random(entry):
        pytest.skip("random operator: no deterministic reference")
    if name in COLLIDING_INDICES:
        pytest.skip("random indices collide: the result depends on thread order")
    if shape == SHAPES[2] and name.startswith(LARGE_SHAPE_SKIPS):
        pytest.skip("dense linear algebra: covered at the smaller shapes")

    params, values = _inputs(entry, shape, dtype, device)
    try:
        expected = _reference(entry, params, values)
    except (
        RuntimeError,
        TypeError,
        ValueError,
        IndexError,
        NotImplementedError,
        AttributeError,
    ) as e:
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else repr(e)
        pytest.skip(f"the reference rejects these inputs: {reason}")

    outputs = [p for p in entry["params"] if p["is_out"]]
    in_place = entry.get("form") == "inplace"
    if not in_place and len(outputs) != len(expected):
        pytest.skip(f"{len(outputs)} outputs but the reference returns {len(expected)}")
    if any(t.is_complex() or t.dtype not in _SUPPORTED for t in expected):
        pytest.skip("an output dtype InfiniOps does not support (complex, ...)")
    if any(t.numel() == 0 for t in expected):
        pytest.skip("an output has no elements")

    if in_place:
        outs = []
    elif entry["aten_name"] == "_compute_linear_combination":
        outs = [torch.zeros_like(t) for t in expected]
    else:
        outs = [torch.empty_like(t) for t in expected]
    function = getattr(infini.ops, name)
    try:
        result = function(*values, *outs, implementation_index=SLOT)
    except ValueError as error:
        if re.search(r"not implemented|not support", str(error), re.I):
            pytest.skip(f"ATen: {str(error).splitlines()[0][:120]}")
        raise
    assert result is None
    produced = [values[0]] if in_place else outs
    for index, (output, reference) in enumerate(zip(produced, expected)):
        if name in SCRATCH_OUTPUT:
            output, reference = output.flatten()[:1], reference.flatten()[:1]
        _assert_close(output, reference, rtol, atol, f"{name} output {index}")


_SUPPORTED = {
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
}
