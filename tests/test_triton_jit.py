"""The Triton JIT backend (slot 10): the `config=` schema, the on-disk cache
of compiled kernels and auto-tuning results, and the kernels' configs.

Schema and cache-file tests are plain Python and run everywhere. Tests that
launch kernels need the interpreter test mode (`INFINI_OPS_TRITON_INTERPRET=1`
with a manifest that has the Triton JIT implementations); those that compile
set `INFINI_OPS_TRITON_INTERPRET_TARGET` so that the interpreter mode also
compiles for sm_90 and writes the cache, as a GPU run does.
"""

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch

import infini.ops
from infini.ops.core.config import (
    AutoTuningConfig,
    CompileConfig,
    parse_config,
)
from infini.ops.core.devices import TRITON_INTERPRETER
from infini.ops.triton.jit import cache as jit_cache
from infini.ops.triton.jit import compile as jit_compile
from infini.ops.triton.jit import operator as jit_operator
from tests._elf import elf_binary

TRITON_JIT_SLOT = 10


def _needs_interpreter(cls=None):
    if not TRITON_INTERPRETER:
        pytest.skip(
            "launching Triton JIT kernels on CPU needs INFINI_OPS_TRITON_INTERPRET=1"
        )
    cls = cls or infini.ops.Add
    if TRITON_JIT_SLOT not in cls.active_implementation_indices("nvidia"):
        pytest.skip(f"this build has no Triton JIT {cls.__name__}")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "triton-cache"
    monkeypatch.setenv("INFINI_OPS_TRITON_CACHE_DIR", str(directory))
    jit_compile.clear_memory_cache()
    jit_operator._TUNED.clear()
    yield directory
    jit_compile.clear_memory_cache()
    jit_operator._TUNED.clear()


# -- the schema ------------------------------------------------------------------


@pytest.mark.smoke
@pytest.mark.parametrize(
    "config, message",
    [
        ({"unexpected": 1}, "Unknown Triton JIT config field `unexpected`."),
        (
            {"auto_tuning": {"candidates": [{}], "unexpected": 1}},
            "Unknown Triton JIT config field `unexpected`.",
        ),
        (
            {"auto_tuning": {"candidates": [{"unexpected": 1}]}},
            "Unknown Triton JIT config field `unexpected`.",
        ),
        (
            {"auto_tuning": {"candidates": [{}]}, "num_warps": 4},
            "Unknown Triton JIT config field `num_warps`: `auto_tuning` must be "
            "the only top-level field.",
        ),
        (
            {"auto_tuning": {"candidates": []}},
            "At least one auto-tuning candidate is required.",
        ),
        ({"auto_tuning": {}}, "At least one auto-tuning candidate is required."),
        (
            {"auto_tuning": {"candidates": [{}], "warmup_milliseconds": -1}},
            "The auto-tuning warmup duration must not be negative.",
        ),
        (
            {"auto_tuning": {"candidates": [{}], "repetition_milliseconds": 0}},
            "The auto-tuning repetition duration must be positive.",
        ),
        (
            {"num_warps": 3},
            "The Triton JIT config field `num_warps` must be a power of two, got 3.",
        ),
        (
            {"num_stages": 0},
            "The Triton JIT config field `num_stages` must be positive, got 0.",
        ),
        (
            {"num_warps": "4"},
            "The Triton JIT config field `num_warps` must be an integer, got '4'.",
        ),
        (
            {"constexprs": {"BLOCK_SIZE": 1.5}},
            "The Triton JIT config field `constexprs.BLOCK_SIZE` must be an "
            "integer, got 1.5.",
        ),
        (
            {"auto_tuning": {"candidates": [{}], "keys": "num_elements"}},
            "The Triton JIT config field `keys` must be a list of tuning value "
            "names, got 'num_elements'.",
        ),
        ([("num_warps", 4)], "A Triton JIT config must be a dict"),
    ],
)
def test_config_schema_errors(config, message):
    with pytest.raises(ValueError) as error:
        parse_config(config)
    assert str(error.value).startswith(message)


def test_config_defaults_and_forms():
    assert parse_config({}) == CompileConfig(4, 3, ())
    compiled = parse_config({"num_warps": 8, "constexprs": {"B": 64, "A": 1}})
    assert compiled == CompileConfig(8, 3, (("A", 1), ("B", 64)))
    assert compiled.with_defaults({"B": 1024, "C": 2}).constexprs == (
        ("A", 1),
        ("B", 64),
        ("C", 2),
    )
    tuning = parse_config({"auto_tuning": {"candidates": [{}, {"num_stages": 2}]}})
    assert tuning == AutoTuningConfig(
        25, 100, (), (CompileConfig(4, 3, ()), CompileConfig(4, 2, ()))
    )


# -- cache files -----------------------------------------------------------------


@pytest.mark.smoke
def test_cache_file_names_are_fnv1a_64_of_the_identity():
    assert jit_cache.fnv1a_64("abc") == "e71fa2190541574b"
    assert jit_cache.identity("kernel-v1", "cuda", 90) == "9:kernel-v1|4:cuda|2:90|"


def test_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("INFINI_OPS_CACHE_DIR", raising=False)
    monkeypatch.setenv("INFINI_OPS_TRITON_CACHE_DIR", str(tmp_path / "explicit"))
    assert jit_cache.cache_directory() == tmp_path / "explicit"
    monkeypatch.delenv("INFINI_OPS_TRITON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit_cache.cache_directory() == tmp_path / "xdg" / "infiniops" / "triton"
    monkeypatch.delenv("XDG_CACHE_HOME")
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".cache" / "infiniops" / "triton"
    assert jit_cache.cache_directory() == expected
    # A home directory that cannot be written: the temporary directory.
    monkeypatch.setenv("HOME", str(tmp_path / "missing"))
    expected = Path(tempfile.gettempdir()) / "infiniops" / "triton"
    assert jit_cache.cache_directory() == expected


# A whole binary holding the kernel `_metadata` names: the cache checks both.
_BINARY = elf_binary("kernel")


def _metadata(**changes):
    metadata = {
        "name": "kernel",
        "num_warps": 4,
        "shared": 0,
        "global_scratch_size": 0,
        "profile_scratch_size": 0,
        "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
    }
    metadata.update(changes)
    return metadata


@pytest.mark.parametrize(
    "change",
    [
        {"num_warps": 0},
        {"shared": 2**31},
        {"global_scratch_size": 16},
        {"profile_scratch_size": 16},
        {"name": ""},
    ],
    ids=str,
)
def test_unusable_kernel_artifacts_are_rejected(cache_dir, change):
    jit_cache.write_kernel_artifact("id", _metadata(), "cubin", _BINARY)
    assert jit_cache.read_kernel_artifact("id")[0]["cache_identity"] == "id"
    jit_cache.write_kernel_artifact("id", _metadata(**change), "cubin", _BINARY)
    assert jit_cache.read_kernel_artifact("id") is None


def test_corrupt_stale_or_partial_kernel_artifacts_are_rejected(cache_dir):
    json_path, binary_path = jit_cache.write_kernel_artifact(
        "id", _metadata(), "cubin", _BINARY
    )
    assert json_path.parent == cache_dir
    assert json_path.name == jit_cache.fnv1a_64("id") + ".json"
    assert binary_path.read_bytes() == _BINARY
    # Another identity (a different Triton version or kernel source).
    assert jit_cache.read_kernel_artifact("other") is None
    record = json.loads(json_path.read_text())
    json_path.write_text(json.dumps(dict(record, cache_identity="stale")))
    assert jit_cache.read_kernel_artifact("id") is None
    json_path.write_text(json.dumps(dict(record, binary_ext="cu/bin")))
    assert jit_cache.read_kernel_artifact("id") is None
    json_path.write_text(json.dumps(record))
    binary_path.write_bytes(b"")
    assert jit_cache.read_kernel_artifact("id") is None
    binary_path.write_bytes(_BINARY)
    json_path.write_text(json.dumps(record)[:-10])
    assert jit_cache.read_kernel_artifact("id") is None
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".tmp")]


def test_auto_tuning_files_round_trip_and_reject_bad_content(cache_dir):
    config = CompileConfig(8, 2, (("BLOCK_SIZE", 256),))
    path = jit_cache.write_auto_tuning_config("tuning", config)
    assert path.suffix == ".autotune"
    assert jit_cache.read_auto_tuning_config("tuning") == config
    assert jit_cache.read_auto_tuning_config("other") is None
    record = json.loads(path.read_text())
    for bad in (
        dict(record, config=dict(record["config"], num_warps=0)),
        dict(record, config=dict(record["config"], num_stages=0)),
        dict(record, config={"num_warps": 4}),
        dict(record, cache_identity="stale"),
    ):
        path.write_text(json.dumps(bad))
        assert jit_cache.read_auto_tuning_config("tuning") is None
    path.write_text("{not json")
    assert jit_cache.read_auto_tuning_config("tuning") is None


# -- through the operators (interpreter test mode) -------------------------------


def _add_with(config, size=1000, dtype=torch.float32):
    input = torch.randn(size, dtype=dtype)
    other = torch.randn(size, dtype=dtype)
    out = torch.empty_like(input)
    infini.ops.add(
        input, other, out, implementation_index=TRITON_JIT_SLOT, config=config
    )
    assert torch.equal(out, input + other)


def _files(directory, suffix):
    return sorted(p for p in directory.glob(f"*{suffix}")) if directory.is_dir() else []


def test_compiled_kernels_are_cached_on_disk_and_reused(cache_dir, monkeypatch):
    _needs_interpreter()
    monkeypatch.setenv("INFINI_OPS_TRITON_INTERPRET_TARGET", "cuda:90:32")
    config = {"num_warps": 2, "constexprs": {"BLOCK_SIZE": 256}}
    _add_with(config)
    (json_path,) = _files(cache_dir, ".json")
    (binary_path,) = _files(cache_dir, ".cubin")
    record = json.loads(json_path.read_text())
    assert record["num_warps"] == 2 and "kernel-v1" in record["cache_identity"]
    assert binary_path.stat().st_size > 0
    written = json_path.stat().st_mtime_ns

    # A new process (no kernels in memory) reuses the files.
    jit_compile.clear_memory_cache()
    _add_with(config)
    assert json_path.stat().st_mtime_ns == written

    # A corrupt or stale entry is rejected and written again.
    for damage in ("{broken", json.dumps(dict(record, cache_identity="stale"))):
        json_path.write_text(damage)
        jit_compile.clear_memory_cache()
        _add_with(config)
        assert json.loads(json_path.read_text()) == record

    # Another config is another kernel.
    _add_with({"num_warps": 4, "constexprs": {"BLOCK_SIZE": 256}})
    assert len(_files(cache_dir, ".json")) == 2


def test_auto_tuning_results_are_cached_on_disk_and_reused(cache_dir, monkeypatch):
    _needs_interpreter()
    monkeypatch.delenv("INFINI_OPS_TRITON_INTERPRET_TARGET", raising=False)
    config = {
        "auto_tuning": {
            "warmup_milliseconds": 0,
            "repetition_milliseconds": 1,
            "keys": ["num_elements"],
            "candidates": [
                {"constexprs": {"BLOCK_SIZE": 64}},
                {"num_warps": 2, "constexprs": {"BLOCK_SIZE": 256}},
            ],
        }
    }
    tuned = []
    original = jit_operator.auto_tune

    def counting(*args):
        tuned.append(args)
        return original(*args)

    monkeypatch.setattr(jit_operator, "auto_tune", counting)
    _add_with(config)
    (path,) = _files(cache_dir, ".autotune")
    winner = json.loads(path.read_text())["config"]
    assert winner in (
        {"num_warps": 4, "num_stages": 3, "constexprs": {"BLOCK_SIZE": 64}},
        {"num_warps": 2, "num_stages": 3, "constexprs": {"BLOCK_SIZE": 256}},
    )
    assert len(tuned) == 1

    # Memory first, then the file: no second benchmark.
    _add_with(config)
    jit_operator._TUNED.clear()
    _add_with(config)
    assert len(tuned) == 1

    # Another tuning value is another result; a corrupt file is tuned again.
    _add_with(config, size=999)
    assert len(tuned) == 2 and len(_files(cache_dir, ".autotune")) == 2
    path.write_text("{broken")
    jit_operator._TUNED.clear()
    _add_with(config)
    assert len(tuned) == 3
    assert json.loads(path.read_text())["cache_identity"]


def test_auto_tuning_rejects_unknown_or_repeated_keys(cache_dir):
    _needs_interpreter()
    for keys, message in (
        (["rows"], "Unknown auto-tuning key `rows`; the tuning values of `add` are"),
        (
            ["num_elements", "num_elements"],
            "The auto-tuning key `num_elements` appears more than once.",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            _add_with({"auto_tuning": {"keys": keys, "candidates": [{}]}})


def test_config_constexprs_must_match_the_kernel(cache_dir):
    _needs_interpreter()
    with pytest.raises(
        ValueError, match="The config defines unknown constexprs: BLOCK, WIDTH."
    ):
        _add_with({"constexprs": {"BLOCK": 64, "WIDTH": 2}})


def test_explicit_config_builds_its_own_operator(cache_dir):
    _needs_interpreter()
    entry = infini.ops._entries["add"]
    infini.ops.Add.clear_cache()
    _add_with({"constexprs": {"BLOCK_SIZE": 128}})
    assert not getattr(entry._local, "cache", {})
    input = torch.randn(1000)
    out = torch.empty_like(input)
    infini.ops.add(input, input, out, implementation_index=TRITON_JIT_SLOT)
    assert len(entry._local.cache) == 1


def test_config_is_checked_whatever_the_slot():
    if "config" not in (infini.ops.add.__doc__ or ""):
        pytest.skip("this build has no Triton JIT add, so `add` takes no config")
    x = torch.randn(4)
    with pytest.raises(ValueError, match="Unknown Triton JIT config field `bad`"):
        infini.ops.add(x, x, torch.empty_like(x), config={"bad": 1})


@pytest.mark.parametrize(
    "why, call",
    [
        (
            "one shape",
            lambda: infini.ops.add(
                torch.randn(4, 1), torch.randn(4, 3), torch.empty(4, 3), **SLOT
            ),
        ),
        (
            "contiguous",
            lambda: infini.ops.add(
                torch.randn(3, 4).t(), torch.randn(4, 3), torch.empty(4, 3), **SLOT
            ),
        ),
        (
            "only `alpha` 1",
            lambda: infini.ops.add(
                torch.randn(4), torch.randn(4), 2.0, torch.empty(4), **SLOT
            ),
        ),
    ],
)
def test_triton_jit_add_rejects_what_its_kernel_cannot_do(why, call):
    _needs_interpreter()
    with pytest.raises(ValueError, match=f"`add`: the Triton JIT .*{why}"):
        call()


SLOT = {"implementation_index": TRITON_JIT_SLOT}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_triton_jit_rms_norm_configs(dtype, cache_dir):
    _needs_interpreter(infini.ops.RmsNorm)
    input = torch.randn(3, 100, dtype=dtype)
    weight = torch.randn(100, dtype=dtype)
    x = input.double()
    expected = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    expected = (expected * weight.double()).to(dtype)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    # Blocks of 32 walk each row in four steps.
    for config in ({}, {"num_warps": 1, "constexprs": {"BLOCK_SIZE": 32}}):
        out = torch.empty_like(input)
        infini.ops.rms_norm(input, weight, 1e-6, out, config=config, **SLOT)
        torch.testing.assert_close(out, expected, rtol=tolerance, atol=tolerance)


def test_triton_jit_silu_and_mul_configs(cache_dir):
    _needs_interpreter(infini.ops.SiluAndMul)
    input = torch.randn(5, 2 * 40)
    expected = torch.nn.functional.silu(input[:, :40]) * input[:, 40:]
    for config in (
        {"constexprs": {"BLOCK_SIZE": 16}},
        {
            "auto_tuning": {
                "warmup_milliseconds": 0,
                "repetition_milliseconds": 1,
                "keys": ["hidden_size"],
                "candidates": [{"constexprs": {"BLOCK_SIZE": 16}}, {}],
            }
        },
    ):
        out = torch.empty(5, 40)
        infini.ops.silu_and_mul(input, out, config=config, **SLOT)
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_interpreter_target_setting(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.delenv("INFINI_OPS_TRITON_INTERPRET_TARGET", raising=False)
    assert jit_compile.interpreter_target() is None
    monkeypatch.setenv("INFINI_OPS_TRITON_INTERPRET_TARGET", "cuda:90:32")
    target = jit_compile.interpreter_target()
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32)
    monkeypatch.setenv("INFINI_OPS_TRITON_INTERPRET_TARGET", "sm90")
    with pytest.raises(ValueError, match="backend:arch:warp_size"):
        jit_compile.interpreter_target()


def test_cache_directory_is_not_the_package():
    directory = jit_cache.cache_directory()
    package = os.path.dirname(infini.ops.__file__)
    assert not str(directory).startswith(package)
