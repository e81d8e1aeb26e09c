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


def test_overloads_sharing_an_argument_count_pick_by_argument_types():
    """`fill`'s two overloads both take three arguments: repeated calls
    alternating a float and a tensor `value` each run the matching one."""
    infini.ops.Fill.clear_cache()
    entry = infini.ops._entries["fill"]
    out = torch.empty(3, 4)
    for round in range(3):
        infini.ops.fill(out, 2.5 + round, out)
        assert torch.equal(out, torch.full((3, 4), 2.5 + round))
        infini.ops.fill(out, torch.tensor(-1.0 - round), out)
        assert torch.equal(out, torch.full((3, 4), -1.0 - round))
    # One operator per (overload, value): three floats and one tensor kind.
    assert len(entry._local.cache) == 4
    assert len(entry._memo) == 2


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
        ValueError,
        match="`add`: `input`: Unsupported device type `meta`.*"
        "Supported device names: cpu",
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


def _entry(name):
    return infini.ops._entries[name]


def test_float_scalars_key_the_sign_of_zero_and_of_nan():
    # `-0.0 == 0.0` and `nan != nan`: keyed by value, the first would reuse
    # the operator built for the other sign and the second would never hit.
    infini.ops.Fill.clear_cache()
    out = torch.ones(5)
    infini.ops.fill(out, 0.0, out)
    infini.ops.fill(out, -0.0, out)
    assert bool(out.signbit().all())
    infini.ops.fill(out, 0.0, out)
    assert not bool(out.signbit().any())
    assert len(_entry("fill")._local.cache) == 2
    for _ in range(10):
        infini.ops.fill(out, float("nan"), out)
    assert bool(out.isnan().all()) and not bool(out.signbit().any())
    infini.ops.fill(out, -float("nan"), out)
    assert bool(out.isnan().all()) and bool(out.signbit().all())
    assert len(_entry("fill")._local.cache) == 4


def test_cache_is_bounded(monkeypatch):
    from infini.ops.core import dispatch

    monkeypatch.setattr(dispatch, "CACHE_LIMIT", 4)
    infini.ops.Add.clear_cache()
    for size in range(1, 11):
        x = torch.randn(size)
        out = torch.empty(size)
        infini.ops.add(x, x, out)
        assert torch.equal(out, 2 * x)
        assert len(_entry("add")._local.cache) <= 4


def _seeded_sample(seed, offset=0):
    logits = torch.zeros(64, 16)
    out = torch.empty(64, dtype=torch.int64)
    infini.ops.top_k_top_p_sample_infinilm(logits, None, None, seed, offset, out)
    return out


def test_new_seeds_reuse_one_operator_and_stay_reproducible():
    infini.ops.TopKTopPSampleInfinilm.clear_cache()
    first = _seeded_sample(42).clone()
    for seed in range(1000):
        _seeded_sample(seed, seed)
    assert len(_entry("top_k_top_p_sample_infinilm")._local.cache) == 1
    assert torch.equal(_seeded_sample(42), first)
    assert not torch.equal(_seeded_sample(43), first)
    assert not torch.equal(_seeded_sample(42, 1), first)
    # The cached operator gives what a freshly built one gives.
    for seed in (7, -5, 2**64 - 1, 2**70 + 3):
        cached = _seeded_sample(seed).clone()
        infini.ops.TopKTopPSampleInfinilm.clear_cache()
        assert torch.equal(_seeded_sample(seed), cached)


def test_flashinfer_sampling_seeds_reuse_one_operator_per_seed_kind():
    infini.ops.TopKTopPSamplingFromLogits.clear_cache()
    logits = torch.zeros(64, 16)
    top_k = torch.tensor([0], dtype=torch.int32)
    top_p = torch.tensor([1.0])
    out = torch.empty(64, dtype=torch.int64)

    def sample(seed, offset):
        infini.ops.top_k_top_p_sampling_from_logits(
            logits, top_k, top_p, None, "top_k_first", False, False, seed, offset, out
        )
        return out.clone()

    first = sample(1, 2)
    for seed in range(1000):
        sample(seed, seed + 1)
    assert len(_entry("top_k_top_p_sampling_from_logits")._local.cache) == 1
    assert torch.equal(sample(1, 2), first)
    assert not torch.equal(sample(2, 2), first)
    # Without a seed the operator draws one from torch's generator.
    torch.manual_seed(0)
    unseeded = sample(None, None)
    torch.manual_seed(0)
    assert torch.equal(sample(None, None), unseeded)
    assert len(_entry("top_k_top_p_sampling_from_logits")._local.cache) == 2


def test_random_values_reuse_one_operator_and_are_checked_on_every_call():
    infini.ops.RandomSampleInfinilm.clear_cache()
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(1000, generator=generator)
    out = torch.empty((), dtype=torch.int64)
    results = {}
    for step in range(1000):
        random_val = step / 1024
        infini.ops.random_sample_infinilm(logits, random_val, 0.9, 50, 0.8, out)
        results[random_val] = int(out)
    assert len(_entry("random_sample_infinilm")._local.cache) == 1
    assert len(set(results.values())) > 5
    for random_val in (0.0, 0.25, 0.5, 999 / 1024):
        infini.ops.RandomSampleInfinilm.clear_cache()
        infini.ops.random_sample_infinilm(logits, random_val, 0.9, 50, 0.8, out)
        assert int(out) == results[random_val]
    # `topp`, `topk` and `temperature` also change without a rebuild.
    infini.ops.random_sample_infinilm(logits, 0.5, 0.9, 1, 0.8, out)
    assert int(out) == int(logits.argmax())
    assert len(_entry("random_sample_infinilm")._local.cache) == 1
    out.fill_(-1)
    with pytest.raises(ValueError, match="`random_val` must be in \\[0, 1\\]"):
        infini.ops.random_sample_infinilm(logits, 1.5, 0.9, 50, 0.8, out)
    with pytest.raises(ValueError, match="`temperature` must be a finite"):
        infini.ops.random_sample_infinilm(logits, 0.5, 0.9, 50, -1.0, out)
    assert int(out) == -1


def test_class_objects_take_call_scalars_from_each_call():
    logits = torch.zeros(64, 16)
    out = torch.empty(64, dtype=torch.int64)
    sampler = infini.ops.TopKTopPSampleInfinilm(logits, None, None, 1, 0, out)
    sampler(logits, None, None, 5, 0, out)
    assert torch.equal(out, _seeded_sample(5))


def test_the_surface_is_built_once_and_kept_in_the_module():
    from infini.ops.core.manifest import load_manifest

    manifest = load_manifest()
    names = dir(infini.ops)
    assert "add" in names and "Add" in names and "core" in names
    assert infini.ops.__version__ == manifest.get("package_version", "0")
    # Built functions and classes live in the module's namespace, so
    # `infini.ops.add` is a plain attribute lookup from then on.
    assert vars(infini.ops)["add"] is infini.ops.add
    assert vars(infini.ops)["Add"] is infini.ops.Add
    assert set(infini.ops.__all__) >= {"add", "Add"}
    assert set(infini.ops.__all__) <= set(names)
    # An operator outside the build has neither a function nor a class.
    assert not hasattr(infini.ops, "no_such_operator")
    with pytest.raises(AttributeError, match="NoSuchOperator"):
        infini.ops.NoSuchOperator  # noqa: B018
    from infini.ops import core

    assert core is infini.ops.core


def test_importing_the_specification_layer_reads_no_manifest():
    """`infini.ops.core` and `infini.ops.base` import without a manifest and
    without torch, NumPy, Numba or Triton; the surface is built only when
    an operator is asked for."""
    code = (
        "import pkgutil, sys, importlib\n"
        "import infini.ops.core, infini.ops.base\n"
        "from infini.ops import core\n"
        "for package in (infini.ops.core, infini.ops.base):\n"
        "    for module in pkgutil.iter_modules(package.__path__):\n"
        "        importlib.import_module(f'{package.__name__}.{module.name}')\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'numpy', 'numba', 'triton'})\n"
        "assert not heavy, heavy\n"
        "import infini.ops\n"
        "assert 'add' not in vars(infini.ops)\n"
        "try:\n"
        "    infini.ops.add\n"
        "except ImportError as error:\n"
        "    assert 'no build manifest' in str(error)\n"
        "else:\n"
        "    raise AssertionError('the surface was built without a manifest')\n"
    )
    environment = {**os.environ, "INFINI_OPS_MANIFEST": os.devnull + ".missing"}
    environment.pop("INFINI_OPS_TRITON_INTERPRET", None)
    subprocess.run([sys.executable, "-c", code], env=environment, check=True)
