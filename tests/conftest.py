"""The test harness (docs/behaviour.md, "Test harness").

- `--devices`: platform names (nvidia, iluvatar, ..., cambricon, ascend) or
  torch device types; unavailable ones are dropped.
- Tests taking `device` and `implementation_index` are parametrised jointly
  over every (device, active slot) of the operator's class, derived from the
  module name (`test_rms_norm.py` -> `infini.ops.RmsNorm`).
- Tests taking `dtype, rtol, atol` get float32/float16/bfloat16 defaults.
- `auto_act_and_assert` tests return a `Payload`; the harness runs it.
- Seeds derive from the test id; operator caches are cleared between modules.
"""

from __future__ import annotations

import hashlib
import random
import sys

import pytest
import torch

from infini.ops.core.devices import TORCH_DEVICE_TYPE_OF_PLATFORM, TRITON_INTERPRETER
from infini.ops.core.schema import class_name_of
from tests.utils import Payload, assert_close, clone_arguments

DEFAULT_DTYPES = (
    (torch.float32, 1e-7, 1e-7),
    (torch.float16, 1e-3, 1e-3),
    (torch.bfloat16, 1e-3, 1e-3),
)

for _vendor_module in ("torch_mlu", "torch_npu", "torch_musa"):
    try:
        __import__(_vendor_module)
    except ImportError:
        pass


def get_available_devices() -> list[str]:
    devices = ["cpu"]
    for kind in ("cuda", "mlu", "musa", "npu"):
        module = getattr(torch, kind, None)
        try:
            if module is not None and module.is_available():
                devices.append(kind)
        except Exception:
            pass
    return devices


def pytest_addoption(parser):
    parser.addoption(
        "--devices",
        nargs="+",
        default=None,
        help="platform names or torch device types to test (default: all available)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "auto_act_and_assert: the test returns a Payload that the harness runs",
    )
    config.addinivalue_line("markers", "smoke: the fast representative subset")
    if _triton_interpreter():
        # NumPy reports the IEEE special values kernels produce on purpose
        # (`inf - inf` in a masked softmax row, `exp` overflow in SiLU).
        config.addinivalue_line(
            "filterwarnings", "ignore::RuntimeWarning:triton.runtime.interpreter"
        )
    available = get_available_devices()
    requested = config.getoption("--devices") or []
    selectors: dict[str, list[str]] = {}
    for name in requested:
        device = TORCH_DEVICE_TYPE_OF_PLATFORM.get(name, name)
        if device in available:
            selectors.setdefault(device, []).append(name)
    config.infini_devices = list(selectors) or available
    config.infini_selectors = selectors


def _seed_for(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 2**32


def _set_random_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _op_class_from_module(module) -> str | None:
    name = module.__name__.rsplit(".", 1)[-1]
    if not name.startswith("test_"):
        return None
    return class_name_of(name[len("test_") :])


def _operator_class(module):
    import infini.ops

    name = _op_class_from_module(module)
    return getattr(infini.ops, name, None) if name else None


def pytest_generate_tests(metafunc):
    fixtures = metafunc.fixturenames
    parametrized = {
        name
        for marker in metafunc.definition.iter_markers("parametrize")
        for name in (
            marker.args[0].split(",")
            if isinstance(marker.args[0], str)
            else marker.args[0]
        )
    }
    parametrized = {name.strip() for name in parametrized}
    if "dtype" in fixtures and "dtype" not in parametrized:
        names = [n for n in ("dtype", "rtol", "atol") if n in fixtures]
        values = [
            tuple(v for n, v in zip(("dtype", "rtol", "atol"), case) if n in names)
            for case in DEFAULT_DTYPES
        ]
        ids = [str(case[0]).rsplit(".", 1)[-1] for case in DEFAULT_DTYPES]
        metafunc.parametrize(
            ",".join(names),
            values if len(names) > 1 else [v[0] for v in values],
            ids=ids,
        )
    if "device" in fixtures and "device" not in parametrized:
        devices = metafunc.config.infini_devices
        cls = _operator_class(metafunc.module)
        wants_index = (
            "implementation_index" in fixtures
            and "implementation_index" not in parametrized
        )
        if wants_index and cls is not None:
            pairs = [
                pytest.param(device, index, id=f"{device}-{index}")
                for device in devices
                for index in _active_indices(cls, metafunc.config, device)
            ]
            if not pairs:
                pairs = [
                    pytest.param(
                        devices[0],
                        0,
                        id="skip",
                        marks=pytest.mark.skip(
                            reason=f"{cls.__name__} has no active implementation "
                            "on any available device"
                        ),
                    )
                ]
            metafunc.parametrize("device,implementation_index", pairs)
        else:
            metafunc.parametrize("device", devices)


def _active_indices(cls, config, device) -> list[int]:
    selectors = config.infini_selectors.get(device) or [device]
    indices: set[int] = set()
    for selector in selectors:
        indices.update(cls.active_implementation_indices(selector))
    return sorted(indices)


@pytest.fixture(autouse=True)
def skip_op_without_platform_impl(request):
    if (
        "device" not in request.fixturenames
        or "implementation_index" in request.fixturenames
    ):
        return
    if "op_meta" in request.fixturenames:
        return
    cls_name = _op_class_from_module(request.module)
    if cls_name is None:
        return
    import infini.ops

    cls = getattr(infini.ops, cls_name, None)
    if cls is None:
        pytest.skip("operator wrapper is not available in this build")
    device = request.getfixturevalue("device")
    if not _active_indices(cls, request.config, device):
        pytest.skip(f"{cls_name} has no active implementation on {device}")


@pytest.fixture(autouse=True)
def skip_unsupported_dtypes(request):
    if "device" not in request.fixturenames or "dtype" not in request.fixturenames:
        return
    device = request.getfixturevalue("device")
    dtype = request.getfixturevalue("dtype")
    unsupported = (torch.float64, torch.uint16, torch.uint32, torch.uint64)
    if device == "npu" and dtype in unsupported:
        pytest.skip(f"{dtype} is not supported on npu")


@pytest.fixture(autouse=True)
def _seed_each_test(request):
    _set_random_seed(_seed_for(f"tests/{request.node.path.name}::{request.node.name}"))


@pytest.fixture(autouse=True, scope="module")
def _clear_operator_caches(request):
    _set_random_seed(_seed_for(f"tests/{request.node.path.name}"))
    yield
    # Only a surface that was built has caches; build-script tests run
    # without a manifest, so the surface is never built for them.
    package = sys.modules.get("infini.ops")
    for value in list(vars(package).values()) if package else ():
        clear = getattr(value, "clear_cache", None) if isinstance(value, type) else None
        if callable(clear):
            clear()


def _triton_interpreter() -> bool:
    return TRITON_INTERPRETER


def pytest_collection_modifyitems(config, items):
    """Under `INFINI_OPS_TRITON_INTERPRET=1` CPU tensors stand in for the
    CUDA-like device (README, "Testing GPU kernels on a CPU"): keep the
    operator tests whose class has CUDA-like implementations, and the Triton
    and NineToothed tests; deselect the rest, which the normal run covers."""
    if not _triton_interpreter():
        return
    kept, deselected = [], []
    for item in items:
        module = item.module
        if module.__name__.rsplit(".", 1)[-1].startswith(
            ("test_triton_", "test_ninetoothed")
        ):
            kept.append(item)
            continue
        cls = _operator_class(module)
        if cls is not None and cls.active_implementation_indices("cpu"):
            kept.append(item)
        else:
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_collect_file(parent, file_path):
    # Seed module collection (parameter generation may draw random values).
    if file_path.name.startswith("test_") and file_path.suffix == ".py":
        _set_random_seed(_seed_for(file_path.name))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("auto_act_and_assert") is None:
        return None
    testfunction = pyfuncitem.obj
    names = pyfuncitem._fixtureinfo.argnames
    payload = testfunction(**{name: pyfuncitem.funcargs[name] for name in names})
    assert isinstance(payload, Payload), (
        "an auto_act_and_assert test must return a Payload"
    )
    ref_args = clone_arguments(payload.args)
    ref_kwargs = clone_arguments(payload.kwargs)
    output = payload.func(*payload.args, **payload.kwargs)
    expected = payload.ref(*ref_args, **ref_kwargs)
    assert_close(output, expected, payload.rtol, payload.atol)
    return True
