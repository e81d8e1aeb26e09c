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
from infini.ops.core.devices import TRITON_INTERPRETER, Device
from infini.ops.core.operator import Arguments
from infini.ops.core.tensor import TensorMeta

REPO = Path(__file__).resolve().parents[1]
NVIDIA = Device("nvidia", 0)
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
    if strides is None:
        strides, running = [], 1
        for size in reversed(shape):
            strides.insert(0, running)
            running *= size
    return TensorMeta(tuple(shape), tuple(strides), dtype, NVIDIA)


NATIVE_EXAMPLES = {
    "add": lambda: {
        "input": _meta((4, 5), "bfloat16"),
        "other": _meta((5,), "bfloat16"),
        "alpha": 2.0,
        "out": _meta((4, 5), "bfloat16", (1, 4)),
    },
    "mul": lambda: {
        "input": _meta((64,), "int32"),
        "other": _meta((64,), "int32"),
        "out": _meta((64,), "int32"),
    },
    "relu": lambda: {
        "input": _meta((8, 3), "bfloat16"),
        "out": _meta((8, 3), "bfloat16"),
    },
    "cast": lambda: {"input": _meta((8,), "float64"), "out": _meta((8,), "bfloat16")},
    "swiglu": lambda: {
        "input": _meta((4, 64), "float16"),
        "gate": _meta((4, 64), "float16"),
        "out": _meta((4, 64), "float16"),
    },
    "silu_and_mul": lambda: {
        "input": _meta((4, 128), "bfloat16"),
        "out": _meta((4, 64), "bfloat16"),
    },
    "rms_norm": lambda: {
        "input": _meta((2, 3, 9000), "bfloat16", (0, 9000, 1)),
        "weight": _meta((9000,), "float32"),
        "eps": 1e-6,
        "out": _meta((2, 3, 9000), "bfloat16"),
    },
    "causal_softmax": lambda: {
        "input": _meta((2, 4, 64), "float16"),
        "out": _meta((2, 4, 64), "float16"),
    },
    "sigmoid": lambda: {
        "input": _meta((8, 3), "float16"),
        "out": _meta((8, 3), "float16"),
    },
    "silu": lambda: {
        "input": _meta((8, 3), "bfloat16", (1, 8)),
        "out": _meta((8, 3), "bfloat16"),
    },
    "gelu": lambda: {
        "input": _meta((8, 33), "float32"),
        "approximate": "none",
        "out": _meta((8, 33), "float32"),
    },
    "copy": lambda: {
        "src": _meta((16, 8), "float16", (1, 16)),
        "non_blocking": False,
        "out": _meta((16, 8), "float16"),
    },
    "fill": lambda: {
        "input": _meta((5, 7), "bfloat16"),
        "value": 1.5,
        "out": _meta((5, 7), "bfloat16"),
    },
    "topk_softmax": lambda: {
        "gating_output": _meta((6, 64), "bfloat16"),
        "bias": None,
        "is_padding": None,
        "renormalize": True,
        "topk_weights": _meta((6, 8), "float32"),
        "topk_indices": _meta((6, 8), "int32"),
        "token_expert_indices": _meta((6, 8), "int32"),
    },
    "reshape_and_cache_flash": lambda: {
        "key": _meta((5, 2, 64), "float16"),
        "value": _meta((5, 2, 64), "float16"),
        "slot_mapping": _meta((5,), "int64"),
        "k_scale": _meta((1,), "float32"),
        "v_scale": _meta((1,), "float32"),
        "kv_cache_dtype": "auto",
        "key_cache": _meta((3, 16, 2, 64), "float16"),
        "value_cache": _meta((3, 16, 2, 64), "float16"),
    },
    "rotary_embedding": lambda: {
        "positions": _meta((5,), "int64"),
        "query": _meta((5, 4 * 64), "bfloat16"),
        "key": _meta((5, 2 * 64), "bfloat16"),
        "cos_sin_cache": _meta((32, 64), "float32"),
        "head_size": 64,
        "is_neox": True,
        "rope_dim_offset": 0,
        "inverse": False,
    },
    "paged_attention_infinilm": lambda: {
        "q": _meta((2, 4, 64), "float16"),
        "k_cache": _meta((6, 2, 16, 64), "float16"),
        "v_cache": _meta((6, 2, 16, 64), "float16"),
        "block_tables": _meta((2, 3), "int32"),
        "seq_lens": _meta((2,), "int32"),
        "alibi_slopes": None,
        "scale": 0.125,
        "out": _meta((2, 4, 64), "float16"),
    },
    "add_rms_norm": lambda: {
        "input": _meta((3, 96), "bfloat16"),
        "residual": _meta((3, 96), "bfloat16"),
        "weight": _meta((96,), "bfloat16"),
        "eps": 1e-6,
        "out": _meta((3, 96), "bfloat16"),
        "residual_out": _meta((3, 96), "bfloat16"),
    },
    "fused_add_rms_norm": lambda: {
        "input": _meta((3, 96), "float16"),
        "residual": _meta((3, 96), "float16"),
        "weight": _meta((96,), "float16"),
        "epsilon": 1e-6,
    },
    "softmax": lambda: {
        "input": _meta((4, 100), "float16"),
        "dim": -1,
        "dtype": None,
        "out": _meta((4, 100), "float16"),
    },
    "embedding": lambda: {
        "input": _meta((7,), "int64"),
        "weight": _meta((50, 64), "bfloat16"),
        "padding_idx": None,
        "max_norm": None,
        "norm_type": 2.0,
        "scale_grad_by_freq": False,
        "sparse": False,
        "out": _meta((7, 64), "bfloat16"),
    },
}


def _launches(value, depth=0):
    from infini.ops.runtime.triton import Launch

    if isinstance(value, Launch):
        yield value
    elif depth < 2 and hasattr(value, "__dict__"):
        for item in vars(value).values():
            yield from _launches(item, depth + 1)


@pytest.mark.parametrize("op", sorted(NATIVE_EXAMPLES))
def test_native_kernels_compile_for_sm90(op, monkeypatch):
    if TRITON_INTERPRETER:
        pytest.skip(NOT_UNDER_THE_INTERPRETER)
    pytest.importorskip("triton")
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget

    from infini.ops.native.cuda import elementwise
    from infini.ops.runtime import triton as runtime

    try:
        module = importlib.import_module(f"infini.ops.native.cuda.ops.{op}")
    except ImportError as error:
        pytest.skip(f"no CUDA-like {op} kernel module ({error})")
    (cls,) = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and getattr(value, "implementation_slot", None) == 0
        and "nvidia" in getattr(value, "implementation_devices", ())
    ]
    # Plan as on a GPU, without one: no device check, geometry tables on the
    # CPU, and no launch (the kernels are compiled below instead).
    monkeypatch.setattr(runtime, "uses_direct_launch", lambda device: False)
    monkeypatch.setattr(runtime, "torch_device", lambda device: "cpu")
    # The elementwise templates check the device themselves; other kernel
    # modules import `require_device` (and some `torch_device`) by name.
    for planner in (elementwise, module):
        monkeypatch.setattr(
            planner, "torch_device", lambda device: "cpu", raising=False
        )
        monkeypatch.setattr(
            planner, "require_device", lambda *arguments: None, raising=False
        )
    values = NATIVE_EXAMPLES[op]()
    operator = cls(Arguments(values, NVIDIA, 0))
    launches = list(_launches(operator))
    assert launches, f"`{cls.__name__}` holds no `Launch`"
    for launch in launches:
        source = runtime.ast_source(
            launch.kernel.fn, launch.arguments, launch.constexprs, True
        )
        compiled = triton.compile(
            source, target=GPUTarget("cuda", 90, 32), options=launch.options
        )
        assert compiled.asm["cubin"]


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
