"""Tests of `scripts/generate_manifest.py` over small synthetic source trees."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import generate_manifest  # noqa: E402
from build_model import (  # noqa: E402
    BuildConfiguration,
    ManifestError,
    class_name_of,
    parse_overload,
)
from generate_manifest import build_manifest, write_manifest  # noqa: E402
from ops_config import OpsConfigError  # noqa: E402
from selection import SMOKE_OPS, SMOKE_TORCH_OPS, smoke_ops  # noqa: E402

pytestmark = pytest.mark.smoke

BINARY = "input: Tensor, other: Tensor, out: Tensor!"
BINARY_WITH_ALPHA = "input: Tensor, other: Tensor, alpha: float, out: Tensor!"
UNARY = "input: Tensor, out: Tensor!"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def add_base(root: Path, op: str, *overloads: str, extra: str = "") -> Path:
    path = root / "src/infini/ops/base" / f"{op}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "from infini.ops.core.operator import Operator",
        "",
        "",
        f"class {class_name_of(op)}(Operator):",
        f'    """Semantics of `{op}`."""',
        "",
        f"    name = {op!r}",
        *([f"    {extra}"] if extra else []),
        "    overloads = (",
        *(f"        {overload!r}," for overload in overloads or (UNARY,)),
        "    )",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def add_implementation(
    root: Path,
    relative: str,
    op: str,
    devices: tuple[str, ...] | str = ("cpu",),
    slot: int = 0,
    class_name: str | None = None,
) -> Path:
    path = root / "src/infini/ops" / relative
    class_name = class_name or f"Impl{slot}{class_name_of(op)}"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    text += textwrap.dedent(
        f"""

        @implementation(operator={op!r}, devices={devices!r}, slot={slot})
        class {class_name}:
            pass
        """
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def tree(tmp_path):
    """A tree with add (cpu 0, cuda-like 0, torch 1, aten 8, triton 10), mul
    (cpu 0), relu (cpu 0, aten 8), abs (aten 8 only) and gemm (nvidia 0 only)."""
    root = tmp_path / "repo"
    for op in ("add", "mul"):
        add_base(root, op, BINARY_WITH_ALPHA, BINARY)
    for op in ("relu", "abs", "gemm"):
        add_base(root, op)
    _write(
        root / "src/infini/ops/base/_elementwise.py", "class Helper:\n    name = 1\n"
    )
    cuda_like = ("nvidia", "iluvatar", "metax", "moore", "hygon")
    add_implementation(root, "native/cpu/ops/add.py", "add", class_name="CpuAdd")
    add_implementation(root, "native/cuda/ops/add.py", "add", cuda_like)
    add_implementation(root, "torch/ops/add.py", "add", "all", 1, "TorchAdd")
    add_implementation(root, "triton/ops/add/jit.py", "add", ("nvidia",), 10)
    add_implementation(root, "native/cpu/ops/mul.py", "mul")
    add_implementation(root, "native/cpu/ops/relu.py", "relu")
    add_implementation(root, "native/cuda/ops/gemm.py", "gemm", cuda_like)
    for op in ("add", "relu", "abs"):
        add_implementation(root, "torch/aten.py", op, "all", 8, f"Aten{op.title()}")
    # Not operators: a module without decorators and a `__pycache__` copy.
    _write(root / "src/infini/ops/native/cpu/helpers.py", "def helper(): ...\n")
    _write(
        root / "src/infini/ops/native/cpu/__pycache__/bad.py",
        "@implementation(operator='nope', devices=('cpu',))\nclass X: ...\n",
    )
    return root


def manifest_of(root: Path, warnings: list[str] | None = None, **settings) -> dict:
    configuration = BuildConfiguration(**settings)
    sink = warnings if warnings is not None else []
    return build_manifest(root, configuration, warn=sink.append)


def slots(manifest: dict, device: str = "cpu") -> dict[str, list[int]]:
    """Operator -> active slots on `device`, like `active_implementation_indices`."""
    return {
        op: [i["slot"] for i in info["implementations"] if device in i["devices"]]
        for op, info in manifest["operators"].items()
    }


def test_class_names_are_pascal_case_of_every_part():
    assert class_name_of("add") == "Add"
    assert class_name_of("rms_norm") == "RmsNorm"
    assert class_name_of("top_k_top_p_sampler") == "TopKTopPSampler"
    assert class_name_of("topksoftmax_infinilm") == "TopksoftmaxInfinilm"


def test_parse_overload():
    """The build checks overloads with the runtime's parser."""
    parameters = parse_overload(
        "input: Tensor, weight: Tensor|None, dims: list[int], eps: float = 1e-6, "
        "out: Tensor!"
    )
    assert [(p.name, p.type, p.writes, p.default_text) for p in parameters] == [
        ("input", "Tensor", False, None),
        ("weight", "Tensor|None", False, None),
        ("dims", "list[int]", False, None),
        ("eps", "float", False, "1e-6"),
        ("out", "Tensor", True, None),
    ]
    assert parameters[3].default == 1e-6
    with pytest.raises(ValueError, match="not `name: Type"):
        parse_overload("input Tensor")
    with pytest.raises(ValueError, match="appears twice"):
        parse_overload("x: Tensor, x: Tensor!")
    with pytest.raises(ValueError, match="unknown parameter type"):
        parse_overload("x: Tensr")


def test_cpu_manifest(tree):
    manifest = manifest_of(tree, options={"WITH_CPU": True})
    assert list(manifest) == [
        "format_version",
        "package_version",
        "options",
        "devices",
        "backends",
        "python_bindings",
        "operators",
        "instantiations",
    ]
    assert manifest["format_version"] == 1
    assert manifest["package_version"] == "0.1.0"
    assert manifest["options"] == {"WITH_CPU": True}
    assert manifest["devices"] == ["cpu"]
    assert manifest["backends"] == {
        "native": True,
        "torch": False,
        "triton": False,
        "ninetoothed": False,
        "linked": False,
    }
    # gemm has no CPU implementation and abs only the ATen one: both are
    # bound, with no active slot (every base is in the default selection).
    assert slots(manifest) == {
        "abs": [],
        "add": [0],
        "gemm": [],
        "mul": [0],
        "relu": [0],
    }
    add = manifest["operators"]["add"]
    assert add == {
        "class": "Add",
        "base_module": "infini.ops.base.add",
        "trace_name": "Add",
        "overloads": [
            "input: Tensor, other: Tensor, alpha: float, out: Tensor!",
            "input: Tensor, other: Tensor, out: Tensor!",
        ],
        "implementations": [
            {
                "slot": 0,
                "backend": "native",
                "module": "infini.ops.native.cpu.ops.add",
                "class": "CpuAdd",
                "devices": ["cpu"],
            }
        ],
    }
    assert manifest["instantiations"] == [
        {
            "operator": "add",
            "device": "cpu",
            "slot": 0,
            "module": "infini.ops.native.cpu.ops.add",
        },
        {
            "operator": "mul",
            "device": "cpu",
            "slot": 0,
            "module": "infini.ops.native.cpu.ops.mul",
        },
        {
            "operator": "relu",
            "device": "cpu",
            "slot": 0,
            "module": "infini.ops.native.cpu.ops.relu",
        },
    ]


def test_trace_name_defaults_to_the_class(tree):
    add_base(tree, "rms_norm", extra='trace_name = "RmsNormKernel"')
    add_implementation(tree, "native/cpu/ops/rms_norm.py", "rms_norm")
    operators = manifest_of(tree)["operators"]
    assert operators["rms_norm"]["trace_name"] == "RmsNormKernel"
    assert operators["mul"]["trace_name"] == "Mul"


def test_instantiations_off_and_python_bindings_off(tree):
    manifest = manifest_of(tree, instantiations=False, python_bindings=False)
    assert manifest["instantiations"] == []
    assert manifest["python_bindings"] is False
    assert set(manifest["operators"]) == {"abs", "add", "gemm", "mul", "relu"}


def test_nvidia_torch_triton_build(tree):
    (tree / "scripts").mkdir()
    (tree / "scripts/torch_ops.txt").write_text("# ATen list\nrelu\nabs  # unary\n")
    manifest = manifest_of(
        tree, devices=("nvidia", "cpu"), with_torch=True, with_triton=True
    )
    assert manifest["devices"] == ["cpu", "nvidia"]
    assert slots(manifest, "cpu") == {
        "abs": [8],
        "add": [0, 1],
        "gemm": [],
        "mul": [0],
        "relu": [0, 8],
    }
    assert slots(manifest, "nvidia") == {
        "abs": [8],
        "add": [0, 1, 10],
        "gemm": [0],
        "mul": [],
        "relu": [8],
    }
    add = manifest["operators"]["add"]["implementations"]
    # "all" is expanded to the enabled devices; explicit lists are narrowed.
    assert [i["devices"] for i in add] == [
        ["cpu"],
        ["nvidia"],
        ["cpu", "nvidia"],
        ["nvidia"],
    ]
    assert [i["backend"] for i in add] == ["native", "native", "torch", "triton"]


def test_aten_slot_needs_the_aten_list(tree):
    # Without scripts/torch_ops.txt the ATen list is empty: slot 8 is pruned,
    # the hand-written torch slot is not.
    manifest = manifest_of(tree, with_torch=True)
    assert slots(manifest) == {
        "abs": [],
        "add": [0, 1],
        "gemm": [],
        "mul": [0],
        "relu": [0],
    }


def test_torch_ops_allowlist_intersects_the_aten_list(tree):
    (tree / "scripts").mkdir()
    (tree / "scripts/torch_ops.txt").write_text("relu\nabs\nadd\n")
    manifest = manifest_of(tree, with_torch=True, torch_ops=["abs", "mul"])
    assert slots(manifest) == {
        "abs": [8],
        "add": [0, 1],
        "gemm": [],
        "mul": [0],
        "relu": [0],
    }


def test_smoke_lists():
    assert smoke_ops(("cpu",), True) == list(SMOKE_OPS)
    assert len(SMOKE_OPS) == 16
    assert smoke_ops(("cpu", "nvidia"), False) == [
        *SMOKE_OPS,
        "cutlass_scaled_mm",
        "moe_sum",
    ]
    assert smoke_ops(("cpu", "nvidia"), True)[-3:] == [
        "cutlass_scaled_mm",
        "moe_sum",
        "flash_attn_varlen_func",
    ]
    assert SMOKE_TORCH_OPS == ("abs", "clamp", "exp", "relu")


def test_smoke_build(tree):
    (tree / "scripts").mkdir()
    (tree / "scripts/torch_ops.txt").write_text("relu\nabs\nadd\n")
    add_base(tree, "softmax")
    add_implementation(tree, "native/cpu/ops/softmax.py", "softmax")
    warnings: list[str] = []
    manifest = manifest_of(
        tree, warnings, with_torch=True, smoke=True, options={"INFINI_OPS_OPS": ""}
    )
    # softmax is not a smoke operator; add's ATen slot is not a smoke torch op.
    assert slots(manifest) == {"abs": [8], "add": [0, 1], "mul": [0], "relu": [0, 8]}
    assert manifest["options"]["INFINI_OPS_OPS"] == ";".join(SMOKE_OPS)
    assert manifest["options"]["INFINI_OPS_TORCH_OPS"] == "abs;clamp;exp;relu"
    missing = [op for op in SMOKE_OPS if op not in ("add", "mul", "relu", "abs")]
    assert warnings == [
        f"warning: operator(s) not available for active devices: {', '.join(missing)}"
    ]


def test_explicit_allowlist_beats_smoke(tree):
    manifest = manifest_of(tree, smoke=True, ops=["mul"])
    assert set(manifest["operators"]) == {"mul"}


def _config(root: Path, value: object) -> Path:
    path = root / "ops.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def test_config_selects_operators_and_slots(tree):
    config = _config(
        tree,
        {"add": {"implementations": [1]}, "relu": {"implementations": "all"}},
    )
    manifest = manifest_of(tree, with_torch=True, ops_config=config)
    assert slots(manifest) == {"add": [1], "relu": [0]}


def test_config_explicit_aten_slot_needs_no_aten_list(tree):
    config = _config(
        tree,
        {"abs": {"implementations": [8]}, "relu": {"implementations": "all"}},
    )
    manifest = manifest_of(tree, with_torch=True, ops_config=config)
    # relu is "all" but not in the (empty) ATen list, so it keeps only slot 0.
    assert slots(manifest) == {"abs": [8], "relu": [0]}


def test_config_then_inline_allowlist(tree):
    config = _config(
        tree, {"add": {"implementations": "all"}, "mul": {"implementations": [0]}}
    )
    warnings: list[str] = []
    manifest = manifest_of(tree, warnings, ops_config=config, ops=["mul", "relu"])
    # relu exists, but the config dropped it before the allowlist applied.
    assert slots(manifest) == {"mul": [0]}
    assert warnings == ["warning: operator(s) not available for active devices: relu"]


def test_strict_ops_turns_the_warning_into_an_error(tree):
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree, ops=["add", "nope", "gemm"], strict_ops=True)
    assert str(caught.value) == (
        "--ops: operator(s) not available for active devices: nope, gemm"
    )


def test_config_operator_not_available(tree):
    config = _config(tree, {"gemm": {"implementations": "all"}})
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree, ops_config=config)
    assert str(caught.value) == (
        f"{config}: operator 'gemm' is not available for the active devices"
    )


def test_config_slot_not_active(tree):
    config = _config(tree, {"add": {"implementations": [0, 16, 10]}})
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree, ops_config=config)
    assert str(caught.value) == (
        f"{config}: operator 'add' has no active implementation at slot(s) 10, 16"
    )


def test_config_errors_propagate(tree):
    config = _config(tree, {"add": {"implementations": [40]}})
    with pytest.raises(OpsConfigError, match="'add' implementations must contain"):
        manifest_of(tree, ops_config=config)


def test_config_header_form(tree):
    config = _config(
        tree,
        {
            "add": [
                "src/infini/ops/native/cpu/ops/add.py",
                {"path": "src/infini/ops/torch/ops/add.py", "backend": "torch"},
            ],
            "mul": "src/infini/ops/native/cpu/ops/mul.py",
        },
    )
    manifest = manifest_of(tree, with_torch=True, ops_config=config)
    assert slots(manifest) == {"add": [0, 1], "mul": [0]}


def test_config_header_with_two_slots_is_rejected(tree):
    add_implementation(tree, "native/cpu/ops/mul.py", "mul", ("cpu",), 3, "Mul3")
    config = _config(tree, {"mul": "src/infini/ops/native/cpu/ops/mul.py"})
    module = (tree / "src/infini/ops/native/cpu/ops/mul.py").resolve()
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree, ops_config=config)
    assert str(caught.value) == (
        f"{config}: {module} must declare exactly one implementation slot; found 0, 3"
    )


@pytest.mark.parametrize(
    ("entry", "detail"),
    [
        (
            "src/infini/ops/native/cpu/ops/nope.py",
            "'mul' implementation path 'src/infini/ops/native/cpu/ops/nope.py' "
            "does not exist",
        ),
        (
            "src/infini/ops/native/cpu/ops/add.py",
            "'mul' implementation path 'src/infini/ops/native/cpu/ops/add.py' "
            "declares no implementation of 'mul'",
        ),
    ],
)
def test_config_header_errors(tree, entry, detail):
    config = _config(tree, {"mul": entry})
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree, ops_config=config)
    assert str(caught.value) == f"{config}: {detail}"


def test_config_generated_header_is_rejected(tree):
    config = _config(tree, {"add": "src/infini/ops/_generated/add.py"})
    with pytest.raises(OpsConfigError, match="is under generated/"):
        manifest_of(tree, ops_config=config)


def test_base_errors(tree):
    add_base(tree, "silu")
    path = tree / "src/infini/ops/base/silu.py"
    path.write_text(path.read_text().replace("name = 'silu'", "name = 'swish'"))
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree)
    assert str(caught.value).startswith("src/infini/ops/base/silu.py: `Silu.name`")

    path.write_text(
        path.read_text()
        .replace("name = 'swish'", "name = 'silu'")
        .replace("class Silu", "class SiluOp")
    )
    with pytest.raises(ManifestError, match="must be named `Silu`"):
        manifest_of(tree)

    add_base(tree, "silu", "input: Tensor out: Tensor!")
    with pytest.raises(ManifestError, match=r"`Silu.overloads\[0\]`"):
        manifest_of(tree)


def test_implementation_of_unknown_operator(tree):
    add_implementation(tree, "native/cpu/ops/nope.py", "nope", class_name="CpuNope")
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree)
    assert str(caught.value) == (
        "src/infini/ops/native/cpu/ops/nope.py: `CpuNope` implements unknown "
        "operator 'nope': there is no src/infini/ops/base/nope.py"
    )


def test_unknown_device_is_rejected(tree):
    add_implementation(tree, "native/cpu/ops/mul.py", "mul", ("cpu", "gpu"), 1, "M")
    with pytest.raises(ManifestError, match="`M` names unknown device"):
        manifest_of(tree)


def test_two_classes_on_one_slot_are_rejected(tree):
    add_implementation(tree, "native/cpu/ops/mul2.py", "mul", ("cpu",), 0, "Mul2")
    with pytest.raises(ManifestError) as caught:
        manifest_of(tree)
    assert str(caught.value) == (
        "src/infini/ops/native/cpu/ops/mul2.py: `Mul2` declares slot 0 of 'mul' on "
        "cpu, which `Impl0Mul` in src/infini/ops/native/cpu/ops/mul.py already "
        "declares"
    )


def test_write_manifest_is_atomic_and_keeps_unchanged_files(tmp_path):
    path = tmp_path / "out" / "manifest.json"
    write_manifest(path, {"b": 1, "a": 2})
    assert path.read_text() == '{\n  "b": 1,\n  "a": 2\n}\n'
    before = path.stat().st_mtime_ns
    write_manifest(path, {"b": 1, "a": 2})
    assert path.stat().st_mtime_ns == before
    write_manifest(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]


def test_main_writes_the_manifest(tree, tmp_path, capsys):
    output = tmp_path / "build/manifest.json"
    status = generate_manifest.main(
        [
            "--source-dir",
            str(tree),
            "--output",
            str(output),
            "--devices",
            "cpu;nvidia",
            "--ops",
            "add,gemm;relu",
            "--instantiations",
            "OFF",
            "--python-bindings",
            "ON",
            "--options-json",
            '{"WITH_CPU": true, "INFINI_OPS_OPS": "add;gemm;relu"}',
        ]
    )
    assert status == 0
    manifest = json.loads(output.read_text())
    assert manifest["devices"] == ["cpu", "nvidia"]
    assert set(manifest["operators"]) == {"add", "gemm", "relu"}
    assert manifest["instantiations"] == []
    assert manifest["options"]["INFINI_OPS_OPS"] == "add;gemm;relu"
    captured = capsys.readouterr()
    assert "operators: 3" in captured.out
    assert captured.err == ""


def test_main_reports_errors_as_path_and_message(tree, tmp_path, capsys):
    config = _config(tree, {"gemm": {"implementations": "all"}})
    status = generate_manifest.main(
        [
            "--source-dir",
            str(tree),
            "--output",
            str(tmp_path / "manifest.json"),
            "--ops-config",
            str(config),
        ]
    )
    assert status == 1
    assert capsys.readouterr().err == (
        f"{config}: operator 'gemm' is not available for the active devices\n"
    )
    assert not (tmp_path / "manifest.json").exists()


def test_main_prints_warnings_on_stderr(tree, tmp_path, capsys):
    status = generate_manifest.main(
        [
            "--source-dir",
            str(tree),
            "--output",
            str(tmp_path / "manifest.json"),
            "--smoke",
        ]
    )
    assert status == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(
        "warning: operator(s) not available for active devices: cast, cat, gemm, "
    )
    assert "smoke operator allowlist: add, mul, relu" in captured.out


def test_unknown_device_argument(tree, tmp_path, capsys):
    status = generate_manifest.main(
        [
            "--source-dir",
            str(tree),
            "--output",
            str(tmp_path / "manifest.json"),
            "--devices",
            "cpu,tpu",
        ]
    )
    assert status == 1
    assert capsys.readouterr().err.startswith("--devices: unknown device(s) tpu")


def test_scripts_import_each_other_in_one_direction_and_reuse_core():
    """The generators form no import cycle and define none of the schema
    that `infini.ops.core` holds (parser, platforms, naming, constants)."""
    import ast

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    modules = {path.stem: path for path in scripts.glob("*.py")}
    imports: dict[str, set[str]] = {}
    core_names = {
        "parse_overload",
        "class_name_of",
        "pascal",
        "PLATFORMS",
        "PLATFORM_SETS",
        "CUDA_LIKE_PLATFORMS",
        "MAX_IMPLEMENTATIONS",
        "ATEN_SLOT",
        "METADATA_NAME",
        "TORCH_METADATA_NAME",
    }
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                imports[name].add(node.module)
            elif isinstance(node, ast.Import):
                imports[name] |= {a.name for a in node.names if a.name in modules}
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        } | {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        assert not defined & core_names, (name, defined & core_names)

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        for imported in imports[name]:
            visit(imported, (*path, name))

    for name in modules:
        visit(name, ())
