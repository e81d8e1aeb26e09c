"""The CPU kernel disk cache: where it lives, that it survives a new process,
and that another package version does not load its kernels."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

# Runs `add` once and prints the number of Numba compilations and the
# directory the kernels are cached in.
_FIRST_CALL = """
import json, os, pathlib, torch, infini.ops
from numba.core import event
from infini.ops.native.cpu import jit
from infini.ops.native.cpu.jit import kernel_cache_dir
if os.environ.get("TEST_SHIPPED_KERNELS"):
    jit._SHIPPED_KERNELS = pathlib.Path(os.environ["TEST_SHIPPED_KERNELS"])
x = torch.randn(5, 3)
out = torch.empty(5, 3)
with event.install_recorder("numba:compile") as recorder:
    infini.ops.add(x, x, out, implementation_index=0)
assert torch.equal(out, 2 * x)
compiles = sum(1 for _, item in recorder.buffer if item.is_start)
print(json.dumps({"compiles": compiles, "directory": str(kernel_cache_dir())}))
"""


def _first_call(
    cache: Path, manifest: str | None = None, shipped: Path | None = None
) -> dict:
    environment = {**os.environ, "INFINI_OPS_CACHE_DIR": str(cache)}
    if shipped is not None:
        # Stands in for `infini/ops/_kernels` of a build that precompiled.
        environment["TEST_SHIPPED_KERNELS"] = str(shipped)
    if manifest is not None:
        environment["INFINI_OPS_MANIFEST"] = manifest
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def _manifest_with_version(tmp_path: Path, version: str) -> str:
    """This build's manifest with another package version (an upgrade), with
    the ATen metadata that must lie beside it."""
    from infini.ops.core.manifest import (
        MANIFEST_PATH,
        TORCH_METADATA_NAME,
        TORCH_METADATA_PATH,
        load_manifest,
    )

    manifest = dict(load_manifest())
    assert manifest.get("package_version") != version, MANIFEST_PATH
    manifest["package_version"] = version
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    if TORCH_METADATA_PATH.is_file():
        (tmp_path / TORCH_METADATA_NAME).write_bytes(TORCH_METADATA_PATH.read_bytes())
    return str(path)


def test_kernels_are_cached_under_the_override_and_survive_a_new_process(tmp_path):
    cache = tmp_path / "cache"
    first = _first_call(cache)
    directory = Path(first["directory"])
    assert first["compiles"] > 0
    assert directory.parent == cache / "numba"
    assert any(directory.rglob("*.nbi")), "no kernel index written"
    again = _first_call(cache)
    assert again == {"compiles": 0, "directory": first["directory"]}


def test_kernels_compiled_at_build_time_are_copied_into_an_empty_cache(tmp_path):
    build = _first_call(tmp_path / "build-cache")
    assert build["compiles"] > 0
    shipped = tmp_path / "shipped"
    built = Path(build["directory"])
    shutil.copytree(built, shipped / built.name)
    user = tmp_path / "user-cache"
    fresh = _first_call(user, shipped=shipped)
    assert fresh["compiles"] == 0
    assert Path(fresh["directory"]) == user / "numba" / built.name
    assert not list((user / "numba").glob("*.tmp")), "a partial copy was left"
    # A cache directory that already holds some kernels (a run before the
    # install shipped any) gets the missing ones.
    partly = tmp_path / "partly-cache"
    _first_call(partly)
    marker = partly / "numba" / built.name / ".seeded"
    marker.unlink(missing_ok=True)
    for index in (partly / "numba" / built.name).rglob("*.nb*"):
        index.unlink()
    assert _first_call(partly, shipped=shipped)["compiles"] == 0
    assert marker.is_file()
    # Kernels of other sources (another version) are not copied in.
    other = _first_call(
        tmp_path / "other-cache",
        _manifest_with_version(tmp_path, "999.0.0"),
        shipped=shipped,
    )
    assert other["compiles"] > 0


def test_another_package_version_does_not_load_the_cached_kernels(tmp_path):
    cache = tmp_path / "cache"
    first = _first_call(cache)
    upgraded = _first_call(cache, _manifest_with_version(tmp_path, "999.0.0"))
    assert upgraded["directory"] != first["directory"]
    assert Path(upgraded["directory"]).name.startswith("999.0.0-")
    assert upgraded["compiles"] > 0


def test_an_uncachable_kernel_warns_instead_of_failing():
    """Numba declines to cache a compiled kernel that holds process-specific
    addresses ("dynamic globals") and warns naming the kernel's file: the
    package's cache locator must provide that file."""
    import warnings
    from types import SimpleNamespace

    from numba.core.errors import NumbaWarning

    from infini.ops.native.cpu.fill import fill_kernels

    dispatcher = fill_kernels("uint32")[0]
    compiled = SimpleNamespace(
        lifted=(),
        library=SimpleNamespace(has_dynamic_globals=True),
        fndesc=SimpleNamespace(qualname="fill_kernels.<locals>.run"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not dispatcher._cache._impl.check_cachable(compiled)
    assert any(issubclass(w.category, NumbaWarning) for w in caught)


def test_helpers_of_one_factory_have_distinct_cache_identities():
    """Kernels key their on-disk cache on what they capture; two helpers a
    factory made with different constants share a qualified name, and must
    still be told apart (else one kernel would load the other's code)."""
    from infini.ops.native.cpu.jit import _stable_identity, helper

    def make(offset):
        @helper
        def shifted(x):
            return x + offset

        return shifted

    assert _stable_identity(make(1)) != _stable_identity(make(2))
    assert _stable_identity(make(1)) == _stable_identity(make(1))
