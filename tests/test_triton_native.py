"""The CUDA-like Triton kernels beyond what each operator's own tests cover:
long-row (looped) paths under the interpreter, compiling every kernel for
sm_90 on a machine without a GPU, the error for a missing device, and (on a
GPU) launches on the caller's stream."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import infini.ops
from infini.ops.core.devices import TRITON_INTERPRETER
from tests import sm90

REPO = Path(__file__).resolve().parents[1]
NOT_UNDER_THE_INTERPRETER = (
    "compiles real `triton.jit` kernels: runs without INFINI_OPS_TRITON_INTERPRET"
)


def _native_nvidia(cls):
    if 0 not in cls.active_implementation_indices("nvidia"):
        pytest.skip(f"this build has no CUDA-like {cls.__name__}")


def _interpreter_only(cls):
    if not TRITON_INTERPRETER:
        pytest.skip(
            "runs the kernel on CPU tensors: needs INFINI_OPS_TRITON_INTERPRET=1"
        )
    _native_nvidia(cls)


# -- long rows: the looped variants ---------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_rows_longer_than_one_block(dtype):
    _interpreter_only(infini.ops.RmsNorm)
    input = torch.randn(3, 8200, dtype=dtype)[::2]
    weight = torch.randn(8200, dtype=dtype)
    out = torch.empty(2, 8200, dtype=dtype)
    infini.ops.rms_norm(input, weight, 1e-6, out, implementation_index=0)
    x = input.double()
    expected = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    expected = (expected * weight.double()).to(dtype)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)


def test_causal_softmax_rows_longer_than_one_block():
    _interpreter_only(infini.ops.CausalSoftmax)
    input = torch.randn(2, 3, 8200)
    input[1, 2, 5] = float("nan")
    out = torch.empty_like(input)
    infini.ops.causal_softmax(input, out, implementation_index=0)
    mask = torch.ones(3, 8200, dtype=torch.bool).tril(8200 - 3)
    expected = torch.softmax(input.double().masked_fill(~mask, -float("inf")), -1)
    torch.testing.assert_close(
        out, expected.float(), rtol=1e-5, atol=1e-7, equal_nan=True
    )
    assert out[1, 2].isnan().all()


def test_elementwise_kernels_walk_a_transposed_output():
    _interpreter_only(infini.ops.Mul)
    input = torch.randn(6, 5, 7)
    other = torch.randn(7)
    out = torch.empty(7, 5, 6).permute(2, 1, 0)
    infini.ops.mul(input, other, out)
    assert torch.equal(out, input * other)


# -- every kernel compiles for sm_90 (no GPU needed) ------------------------------


def _meta(shape, dtype="float32", strides=None):
    return sm90.meta(shape, dtype, strides)


def _examples():
    return [
        pytest.param(op, number, id=f"{op}-{example.label or number}")
        for op, examples in sorted(sm90.all_examples().items())
        for number, example in enumerate(examples)
    ]


def _compile(op, number):
    if TRITON_INTERPRETER:
        pytest.skip(NOT_UNDER_THE_INTERPRETER)
    pytest.importorskip("triton")
    import importlib

    try:
        importlib.import_module(f"infini.ops.native.cuda.ops.{op}")
    except ImportError as error:
        pytest.skip(f"no CUDA-like {op} kernel module ({error})")
    example = sm90.all_examples()[op][number]
    return example, sm90.compile_example(op, example)


@pytest.mark.parametrize("op, number", _examples())
def test_native_kernels_compile_for_sm90(op, number):
    """Every example compiles to a cubin; the machine code has no register
    spills, memory-bound kernels load 128 bits at a time from contiguous
    float operands, and products use tensor cores (docs/architecture.md,
    "Static checks of the CUDA-like kernels")."""
    example, kernels = _compile(op, number)
    reports = []
    for compiled in kernels:
        assert compiled.asm["cubin"]
        report = sm90.inspect_compiled(compiled)
        assert report.spill_bytes == 0, (
            f"{report.name} spills {report.spill_bytes} bytes "
            f"({report.registers} registers)"
        )
        reports.append(report)
    # An operator may launch helpers beside its main kernel (zeroing an
    # output, quantising activations): the main one must show the property.
    if example.kind == sm90.PRODUCT:
        assert any(r.tensor_cores for r in reports), f"`{op}` has no mma/wgmma"
    if example.kind == sm90.MEMORY:
        widest = max(r.widest_load for r in reports)
        assert widest >= 128, f"`{op}` loads at most {widest} bits at a time"


def test_every_cuda_like_kernel_has_an_sm90_example():
    """A kernel module without an example would escape the static checks."""
    from infini.ops.native.cuda import ops as package

    modules = {
        path.stem
        for path in Path(package.__file__).parent.glob("*.py")
        if path.stem != "__init__"
    }
    missing = sorted(modules - set(sm90.all_examples()))
    assert not missing, f"no sm_90 example in tests/sm90/ for: {missing}"


def test_elementwise_templates_key_compiled_kernels_on_the_function():
    """One template kernel serves every unary operator; the element function
    must be part of the compile-cache key, or `sigmoid` could run `silu`'s
    machine code."""
    if TRITON_INTERPRETER:
        pytest.skip(NOT_UNDER_THE_INTERPRETER)
    pytest.importorskip("triton")
    import triton.language as tl

    from infini.ops.native.cuda.elementwise import UNARY_KERNEL
    from infini.ops.native.cuda.ops.silu import silu
    from infini.ops.native.cuda.special import sigmoid
    from infini.ops.runtime.triton import Pointer, ast_source

    arguments = (_meta((64,)), _meta((64,)), Pointer("int64"), 64)
    keys = {
        ast_source(
            UNARY_KERNEL.fn,
            arguments,
            {"NDIM": 0, "BLOCK": 64, "FUNCTION": function, "COMPUTE": tl.float32},
            True,
        ).hash()
        for function in (silu, sigmoid)
    }
    assert len(keys) == 2


def test_triton_jit_kernels_compile_and_reload_from_the_disk_cache(
    tmp_path, monkeypatch
):
    if TRITON_INTERPRETER:
        pytest.skip(NOT_UNDER_THE_INTERPRETER)
    pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    from infini.ops.core.config import CompileConfig
    from infini.ops.triton.jit import compile as jit_compile
    from infini.ops.triton.ops.add.jit import kernel

    monkeypatch.setenv("INFINI_OPS_TRITON_CACHE_DIR", str(tmp_path))
    jit_compile.clear_memory_cache()
    target = GPUTarget("cuda", 90, 32)
    arguments = (_meta((1024,)), _meta((1024,)), _meta((1024,)), 1024)
    config = CompileConfig(4, 3, (("BLOCK_SIZE", 256),))
    first = jit_compile.compile_kernel(kernel, arguments, config, "add", target, True)
    (json_path,) = tmp_path.glob("*.json")
    record = json.loads(json_path.read_text())
    assert record["name"] == first.metadata.name
    jit_compile.clear_memory_cache()
    again = jit_compile.compile_kernel(kernel, arguments, config, "add", target, True)
    assert again is not first and again.kernel == first.kernel
    assert again.metadata.num_warps == 4
    jit_compile.clear_memory_cache()


# -- the device must exist ----------------------------------------------------------


def test_a_missing_cuda_device_is_reported_clearly(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    manifest = tmp_path / "manifest.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "generate_manifest.py"),
            "--source-dir",
            str(REPO),
            "--output",
            str(manifest),
            "--devices",
            "cpu,nvidia",
            "--ops",
            "add",
        ],
        check=True,
        capture_output=True,
    )
    program = """
import torch, infini.ops

class CudaLooking:
    # What a CUDA tensor shows the binder (duck typing; docs/behaviour.md, "Tensor
    # arguments").
    shape = (4,)
    dtype = torch.float32
    device = torch.device("cuda", 0)
    def stride(self):
        return (1,)
    def data_ptr(self):
        return 0

print(infini.ops.Add.active_implementation_indices("nvidia"))
try:
    infini.ops.add(CudaLooking(), CudaLooking(), CudaLooking())
except ValueError as error:
    print(error)
"""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("INFINI_OPS_TRITON_INTERPRET", "TRITON_INTERPRET")
    }
    environment["INFINI_OPS_MANIFEST"] = str(manifest)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src")] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0] == "[0]"
    assert lines[1].startswith(
        "`add`: the tensors are on nvidia (torch device `cuda`), but no nvidia "
        "device is available to this process"
    )


# -- streams (GPU only) -------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_native_kernels_run_on_the_callers_stream():
    _native_nvidia(infini.ops.Add)
    input = torch.randn(1 << 20, device="cuda")
    out = torch.full_like(input, float("nan"))
    side = torch.cuda.Stream()
    infini.ops.add(input, input, out)  # compile and bind outside the timing
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
    infini.ops.add(input, input, out, stream=side.cuda_stream)
    # Queued behind the sleep on `side`, not run on the default stream.
    snapshot = out.clone()
    torch.cuda.synchronize()
    assert snapshot.isnan().all()
    assert torch.equal(out, input + input)
