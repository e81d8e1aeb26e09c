"""Tests of `scripts/ops_config.py`: `ops.json` validation (docs/behaviour.md,
"ops.json")."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from ops_config import (  # noqa: E402
    OpsConfigError,
    implementation_slot,
    infer_backend,
    load_ops_config,
    read_implementations,
    torch_op_names,
)

pytestmark = pytest.mark.smoke


def _write(tmp_path: Path, text: str, name: str = "ops.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(OpsConfigError) as caught:
        load_ops_config(path)
    return str(caught.value)


def test_every_form_normalises(tmp_path):
    path = _write(
        tmp_path,
        json.dumps(
            {
                "add": {"implementations": "all"},
                "gemm": {"implementations": [2, 0]},
                "relu": "src/infini/ops/native/cpu/ops/relu.py",
                "rms_norm": [
                    "src/infini/ops/native/cpu/ops/rms_norm.py",
                    {
                        "path": "src/infini/ops/torch/ops/rms_norm.py",
                        "backend": "torch",
                    },
                ],
            }
        ),
    )
    assert load_ops_config(path) == {
        "add": {"headers": None, "implementations": None},
        "gemm": {"headers": None, "implementations": (2, 0)},
        "relu": {
            "headers": ["src/infini/ops/native/cpu/ops/relu.py"],
            "implementations": None,
        },
        "rms_norm": {
            "headers": [
                "src/infini/ops/native/cpu/ops/rms_norm.py",
                {"path": "src/infini/ops/torch/ops/rms_norm.py", "backend": "torch"},
            ],
            "implementations": None,
        },
    }


def test_config_error_is_a_value_error():
    assert issubclass(OpsConfigError, ValueError)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"add": {"implementations": [0]}, "add": {"implementations": [1]}}', "add"),
        (
            '{"add": {"implementations": [0], "implementations": [1]}}',
            "implementations",
        ),
        (
            '{"mul": ["a.py", {"path": "b.py", "backend": "x", "backend": "y"}]}',
            "backend",
        ),
    ],
    ids=["top-level", "nested", "descriptor"],
)
def test_duplicate_keys_are_rejected_anywhere(tmp_path, text, key):
    path = tmp_path / "ops.json"
    assert _error(tmp_path, text) == f"failed to read {path}: duplicate key {key!r}"


def test_malformed_json_and_missing_file(tmp_path):
    assert _error(tmp_path, "{").startswith(f"failed to read {tmp_path / 'ops.json'}: ")
    missing = tmp_path / "missing.json"
    with pytest.raises(OpsConfigError, match=r"^failed to read .*missing\.json: "):
        load_ops_config(missing)


@pytest.mark.parametrize("text", ["[]", '"add"', "3", "null"])
def test_top_level_must_be_an_object(tmp_path, text):
    assert (
        _error(tmp_path, text) == f"{tmp_path / 'ops.json'} must contain a JSON object"
    )


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ({"": {"implementations": "all"}}, "operator names must be non-empty strings"),
        (
            {"add ": {"implementations": "all"}},
            "operator name 'add ' contains surrounding whitespace",
        ),
        ({"add": ""}, "'add' implementation path must not be empty"),
        ({"add": "   "}, "'add' implementation path must not be empty"),
        ({"add": []}, "'add' implementation paths must be a non-empty array"),
        (
            {"add": ["a.py", 3]},
            "'add' implementation entries must be paths or structured descriptors",
        ),
        ({"add": ["a.py", ""]}, "'add' implementation path must not be empty"),
        (
            {"add": [{"path": "a.py", "backend": "torch", "k2": 1, "k1": 2}]},
            "'add' implementation descriptor contains unknown keys: k1, k2",
        ),
        (
            {"add": [{"backend": "torch"}]},
            "'add' implementation descriptor requires a non-empty string 'path'",
        ),
        (
            {"add": [{"path": " ", "backend": "torch"}]},
            "'add' implementation descriptor requires a non-empty string 'path'",
        ),
        (
            {"add": [{"path": "a.py"}]},
            "'add' implementation descriptor requires a non-empty string 'backend'",
        ),
        (
            {"add": [{"path": "a.py", "backend": 3}]},
            "'add' implementation descriptor requires a non-empty string 'backend'",
        ),
        (
            {"add": ["a.py", "a.py"]},
            "'add' implementation paths contain duplicates",
        ),
        (
            {"add": ["a.py", {"path": "a.py", "backend": "torch"}]},
            "'add' implementation paths contain duplicates",
        ),
        ({"add": 3}, "'add' must map to implementation path(s) or an object"),
        ({"add": None}, "'add' must map to implementation path(s) or an object"),
        ({"add": True}, "'add' must map to implementation path(s) or an object"),
        ({"add": {"slots": [0]}}, "'add' contains unknown keys: slots"),
        (
            {"add": {"implementations": [0], "slots": [0], "extra": 1}},
            "'add' contains unknown keys: extra, slots",
        ),
        ({"add": {}}, "'add' is missing required key 'implementations'"),
        (
            {"add": {"implementations": "ALL"}},
            "'add' implementations must be 'all' or an array",
        ),
        (
            {"add": {"implementations": 0}},
            "'add' implementations must be 'all' or an array",
        ),
        ({"add": {"implementations": []}}, "'add' implementations must not be empty"),
        (
            {"add": {"implementations": [True]}},
            "'add' implementations must contain integers between 0 and 31",
        ),
        (
            {"add": {"implementations": [1.0]}},
            "'add' implementations must contain integers between 0 and 31",
        ),
        (
            {"add": {"implementations": ["0"]}},
            "'add' implementations must contain integers between 0 and 31",
        ),
        (
            {"add": {"implementations": [32]}},
            "'add' implementations must contain integers between 0 and 31",
        ),
        (
            {"add": {"implementations": [-1]}},
            "'add' implementations must contain integers between 0 and 31",
        ),
        (
            {"add": {"implementations": [0, 8, 0]}},
            "'add' implementations contain duplicates",
        ),
    ],
)
def test_validation_messages(tmp_path, value, detail):
    assert _error(tmp_path, json.dumps(value)) == f"{tmp_path / 'ops.json'}: {detail}"


def test_slot_bounds_are_inclusive(tmp_path):
    path = _write(tmp_path, '{"add": {"implementations": [0, 31]}}')
    assert load_ops_config(path)["add"]["implementations"] == (0, 31)


@pytest.mark.parametrize(
    "value",
    [
        {"add": "generated/base/add.py"},
        {"add": "src/infini/ops/_generated/add.py"},
        {"add": ["src/infini/ops/native/cpu/ops/add.py", "build/generated/add.py"]},
        {"add": [{"path": "src/infini/ops/_generated/add.py", "backend": "torch"}]},
    ],
)
def test_generated_paths_are_rejected(tmp_path, value):
    entry = value["add"]
    if isinstance(entry, list):
        entry = entry[-1]
    path = entry if isinstance(entry, str) else entry["path"]
    assert _error(tmp_path, json.dumps(value)) == (
        f"{tmp_path / 'ops.json'}: 'add' implementation path {path!r} is under "
        "generated/: generated files are not supported; select slots instead"
    )


def test_generated_in_a_file_name_is_not_a_directory(tmp_path):
    path = _write(tmp_path, '{"add": "src/infini/ops/torch/ops/generated_add.py"}')
    assert load_ops_config(path)["add"]["headers"] == [
        "src/infini/ops/torch/ops/generated_add.py"
    ]


def _module(tmp_path: Path, body: str, name: str = "impl.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_slot_of_a_module(tmp_path):
    path = _module(
        tmp_path,
        """
        from infini.ops.core.registry import implementation

        @implementation(operator="rms_norm", devices=("nvidia",), slot=16)
        class NvidiaRmsNorm: ...

        @implementation(operator="rms_norm", devices=("metax", "moore"), slot=16)
        class OtherRmsNorm: ...
        """,
    )
    assert implementation_slot(path) == 16


def test_missing_slot_counts_as_zero(tmp_path):
    path = _module(
        tmp_path,
        """
        @implementation(operator="add", devices=("cpu",))
        class CpuAdd: ...
        """,
    )
    assert implementation_slot(path) == 0


def test_module_with_two_slots_is_rejected(tmp_path):
    path = _module(
        tmp_path,
        """
        from infini.ops.core import registry

        @registry.implementation(operator="a", devices=("nvidia",), slot=17)
        class A: ...

        @registry.implementation(operator="a", devices=("nvidia",), slot=16)
        class B: ...
        """,
    )
    with pytest.raises(OpsConfigError) as caught:
        implementation_slot(path)
    assert str(caught.value) == (
        f"{path} must declare exactly one implementation slot; found 16, 17"
    )


def test_module_without_implementations_is_rejected(tmp_path):
    path = _module(tmp_path, "class NotAnImplementation: ...\n")
    with pytest.raises(OpsConfigError) as caught:
        implementation_slot(path)
    assert str(caught.value) == (
        f"{path} must declare exactly one implementation slot; found none"
    )


def test_read_implementations(tmp_path):
    path = _module(
        tmp_path,
        """
        @implementation(operator="add", devices="all", slot=1)
        class TorchAdd: ...

        @other_decorator
        class Helper: ...
        """,
    )
    [declaration] = read_implementations(path)
    assert declaration.class_name == "TorchAdd"
    assert declaration.operator == "add"
    assert declaration.devices == "all"
    assert declaration.slot == 1


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        ('"add", ("cpu",), 0', "keyword arguments only"),
        ('operator=NAME, devices=("cpu",)', "literal non-empty string `operator`"),
        ('operator="add", devices=()', '`devices` must be "all", a platform set'),
        ('operator="add", devices="cpu"', '`devices` must be "all", a platform set'),
        ('operator="add", devices=("cpu",), slot=32', "`slot` must be a literal"),
        ('operator="add", devices=("cpu",), slot=True', "`slot` must be a literal"),
        ('operator="add", devices=("cpu",), slot=SLOT', "`slot` must be a literal"),
        ('operator="add", devices=("cpu",), index=0', "unknown arguments: index"),
    ],
)
def test_decorator_arguments_must_be_literals(tmp_path, arguments, detail):
    path = _module(tmp_path, f"@implementation({arguments})\nclass CpuAdd: ...\n")
    with pytest.raises(OpsConfigError) as caught:
        read_implementations(path)
    assert str(caught.value).startswith(f"{path}: `CpuAdd`: ")
    assert detail in str(caught.value)


@pytest.mark.parametrize(
    ("path", "backend"),
    [
        ("src/infini/ops/native/cpu/ops/add.py", "native"),
        ("src/infini/ops/native/cuda/ops/add.py", "native"),
        ("src/infini/ops/torch/ops/add.py", "torch"),
        ("src/infini/ops/triton/ops/add/jit.py", "triton"),
        ("src/infini/ops/ninetoothed/ops/rms_norm/rms_norm.py", "ninetoothed"),
        ("src/infini/ops/linked/torch/nvidia/x.py", "linked"),
        ("elsewhere/torch/add.py", "torch"),
        ("elsewhere/add.py", "native"),
    ],
)
def test_infer_backend(path, backend):
    assert infer_backend(path) == backend


def test_torch_op_names_rules():
    config = {
        "all_listed": {"headers": None, "implementations": None},
        "all_unlisted": {"headers": None, "implementations": None},
        "with_eight": {"headers": None, "implementations": (0, 8)},
        "without_eight": {"headers": None, "implementations": (0,)},
        "listed_without_eight": {"headers": None, "implementations": (0,)},
        "header_form": {"headers": ["x.py"], "implementations": None},
    }
    defaults = ["all_listed", "listed_without_eight", "header_form", "unselected"]
    assert torch_op_names(config, defaults) == ["all_listed", "with_eight"]
    assert torch_op_names(config, defaults, slot=0) == [
        "all_listed",
        "listed_without_eight",
        "with_eight",
        "without_eight",
    ]


def test_torch_op_names_without_config_are_the_defaults():
    assert torch_op_names(None, ["relu", "abs"]) == ["abs", "relu"]
