"""The public surface, the operator cache, tracing and errors, on `add`."""

import os
import subprocess
import sys
import threading

import pytest
import torch

import infini.ops

pytestmark = pytest.mark.smoke


def test_functions_return_none_and_classes_have_the_four_members():
    x = torch.randn(13, 4)
    out = torch.empty(13, 4)
    assert infini.ops.add(x, x, out) is None
    assert infini.ops.add(input=x, other=x, out=out) is None
    members = {name for name in vars(infini.ops.Add) if not name.startswith("__")}
    assert {"active_implementation_indices", "clear_cache"} <= members
    assert callable(infini.ops.Add.active_implementation_indices)


def test_active_implementation_indices_accepts_torch_and_platform_names():
    assert infini.ops.Add.active_implementation_indices("cpu")[0] == 0
    indices = infini.ops.Add.active_implementation_indices("cpu")
    assert indices == sorted(indices)
    for name in ("nvidia", "iluvatar", "cambricon", "ascend", "no-such-device", ""):
        if name not in _built_platforms():
            assert infini.ops.Add.active_implementation_indices(name) == []
    assert infini.ops.Add.active_implementation_indices(3) == []


def _built_platforms():
    from infini.ops.core.manifest import load_manifest

    return load_manifest()["devices"]


def test_default_call_uses_the_lowest_active_slot(capfd):
    code = (
        "import torch, infini.ops\n"
        "x = torch.randn(13, 4); out = torch.empty(13, 4)\n"
        "infini.ops.add(x, x, out)\n"
        "infini.ops.add(x, x, 2.0, out, implementation_index=0)\n"
        "infini.ops.Add(x, x, out)(x, x, out)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "INFINI_OPS_TRACE_CALLS": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [
        line for line in result.stderr.splitlines() if "INFINI_OPS_TRACE_CALLS" in line
    ]
    lowest = infini.ops.Add.active_implementation_indices("cpu")[0]
    # Class calls do not trace; each free-function call writes one line.
    assert lines == [
        '[INFINI_OPS_TRACE_CALLS] {"operator_name": "Add", "device_type": "cpu", '
        f'"implementation": {lowest}}}',
        '[INFINI_OPS_TRACE_CALLS] {"operator_name": "Add", "device_type": "cpu", '
        '"implementation": 0}',
    ]


@pytest.mark.parametrize("value", ["0", ""])
def test_tracing_is_off_for_empty_or_zero(value):
    code = "import torch, infini.ops\nx = torch.randn(3); infini.ops.add(x, x, x)\n"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "INFINI_OPS_TRACE_CALLS": value},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "INFINI_OPS_TRACE_CALLS" not in result.stderr


def test_cache_is_keyed_on_geometry_not_data():
    infini.ops.Add.clear_cache()
    entry = infini.ops._entries["add"]
    a, b = torch.randn(5, 6), torch.randn(5, 6)
    out = torch.empty(5, 6)
    infini.ops.add(a, b, out)
    infini.ops.add(torch.randn(5, 6), torch.randn(5, 6), torch.empty(5, 6))
    assert len(entry._local.cache) == 1
    c, d = torch.randn(5, 6), torch.randn(5, 6)
    infini.ops.add(c, d, out)
    assert torch.allclose(out, c + d)  # new data, same cached operator
    infini.ops.add(torch.randn(6, 5), torch.randn(6, 5), torch.empty(6, 5))
    infini.ops.add(a.t(), b.t(), torch.empty(6, 5))
    infini.ops.add(a.double(), b.double(), torch.empty(5, 6, dtype=torch.float64))
    assert len(entry._local.cache) == 4
    infini.ops.Add.clear_cache()
    infini.ops.add(a, b, out)
    assert len(entry._local.cache) == 1


def test_cache_is_per_thread():
    infini.ops.Add.clear_cache()
    entry = infini.ops._entries["add"]
    x = torch.randn(7)
    infini.ops.add(x, x, torch.empty(7))
    sizes = []

    def worker():
        y = torch.randn(7)
        out = torch.empty(7)
        infini.ops.add(y, y, out)
        sizes.append(len(entry._local.cache))
        assert torch.allclose(out, 2 * y)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert sizes == [1]
    assert len(entry._local.cache) == 1


def test_class_objects_run_their_operator_and_check_geometry():
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    out = torch.empty(4, 3)
    add = infini.ops.Add(x, y, out)
    assert add(x, y, out) is None
    assert torch.allclose(out, x + y)
    x2, y2 = torch.randn(4, 3), torch.randn(4, 3)
    add(x2, y2, out)
    assert torch.allclose(out, x2 + y2)
    with pytest.raises(ValueError, match="`add`.*differ in shape"):
        add(torch.randn(3, 4), torch.randn(3, 4), torch.empty(3, 4))


def test_no_matching_overload_is_a_type_error_listing_the_overloads():
    x = torch.randn(3)
    with pytest.raises(
        TypeError, match="(?s)`add`: incompatible function arguments.*alpha"
    ):
        infini.ops.add(x, x)
    with pytest.raises(TypeError):
        infini.ops.add(x, x, "two", x)
    with pytest.raises(TypeError):
        infini.ops.add(x, x, x, nonsense=1)


def test_non_tensor_arguments_are_value_errors_naming_the_parameter():
    out = torch.empty(3)
    with pytest.raises(ValueError, match="`add`: `other` must be a tensor, got list"):
        infini.ops.add(torch.randn(3), [1.0, 2.0, 3.0], out)
    with pytest.raises(ValueError, match="`add`: `input` must be a tensor, got int"):
        infini.ops.add(3, torch.randn(3), out)


def test_unsupported_device_names_the_supported_ones():
    x = torch.empty(3, device="meta")
    with pytest.raises(
        ValueError, match="Unsupported device type `meta`.*Supported device names: cpu"
    ):
        infini.ops.add(x, x, x)


def test_tensors_on_different_devices_are_rejected():
    x = torch.randn(3)
    with pytest.raises(ValueError):
        infini.ops.add(x, torch.empty(3, device="meta"), torch.empty(3))


def test_unsupported_dtype_is_a_value_error():
    x = torch.randn(3, dtype=torch.complex64)
    with pytest.raises(
        ValueError, match="`add`: `input` has unsupported dtype torch.complex64"
    ):
        infini.ops.add(x, x, x)


def test_stream_and_implementation_index_are_keyword_only():
    x = torch.randn(3)
    out = torch.empty(3)
    infini.ops.add(x, x, out, stream=0, implementation_index=0)
    with pytest.raises(TypeError):
        infini.ops.add(x, x, out, 0, 0)


def test_profiling_helpers_say_profiling_is_not_compiled():
    assert infini.ops._host_range_profile_compiled() is False
    for call in (
        infini.ops._host_range_profile_start,
        infini.ops._host_range_profile_stop,
        lambda: infini.ops._host_range_profile_calibrate(3),
    ):
        with pytest.raises(RuntimeError, match="host range profiling is not compiled"):
            call()
