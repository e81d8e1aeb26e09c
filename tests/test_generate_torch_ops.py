"""`scripts/generate_torch_ops.py`: the ATen backend's schema selection and
metadata, and how the manifest takes it in (docs/behaviour.md, "ATen backend" and
"Selection rules")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import generate_torch_ops as gen  # noqa: E402
from build_model import TORCH_METADATA_NAME, BuildConfiguration  # noqa: E402
from generate_manifest import build_manifest  # noqa: E402
from selection import aten_names_to_generate  # noqa: E402

pytestmark = pytest.mark.smoke

pytest.importorskip("torchgen")


@pytest.fixture(scope="module")
def functions():
    return gen.load_native_functions()


def overloads(result, name):
    return result.operators[name]["overloads"]


def entry_of(result, name, index=0):
    return result.entries[result.operators[name]["bindings"][index]]


def test_the_list_has_546_aten_names():
    names = gen.load_torch_op_list(SCRIPTS / "torch_ops.yaml")
    assert len(names) == 546
    assert sum(name.endswith("_") for name in names) == 40
    assert sum(name.startswith("_") for name in names) == 37
    assert len({gen.public_op_name(name) for name in names}) == 513


def test_list_format_errors(tmp_path):
    path = tmp_path / "torch_ops.yaml"
    path.write_text("# comment\n- abs  # unary\n- 'exp'\n\n- abs\n")
    assert gen.load_torch_op_list(path) == ["abs", "exp"]
    path.write_text("abs\n")
    with pytest.raises(ValueError, match="torch_ops.yaml:1: expected `- <aten name>`"):
        gen.load_torch_op_list(path)
    path.write_text("- a-b\n")
    with pytest.raises(ValueError, match="'a-b' is not an ATen name"):
        gen.load_torch_op_list(path)


@pytest.mark.parametrize(
    "aten, public, trace",
    [
        ("abs", "abs", "Abs"),
        ("add_", "add", "Add"),
        ("_log_softmax", "internal_log_softmax", "internal::LogSoftmax"),
        ("_fft_c2c", "internal_fft_c2c", "internal::fft::C2c"),
        ("linalg_norm", "linalg_norm", "linalg::Norm"),
        ("special_erfinv", "special_erfinv", "special::Erfinv"),
        ("fft_fft", "fft_fft", "fft::Fft"),
    ],
)
def test_names(aten, public, trace):
    assert gen.public_op_name(aten) == public
    assert gen.trace_name_of(public) == trace
    assert aten in gen.aten_names_of(public)


@pytest.mark.parametrize(
    "aten_type, mapped",
    [
        ("Tensor", "Tensor"),
        ("Tensor?", "Tensor|None"),
        ("Tensor[]", "list[Tensor]"),
        ("Tensor?[]", "list[Tensor|None]"),
        ("Scalar", "float"),
        ("float", "float"),
        ("SymInt", "int"),
        ("int[2]", "list[int]"),
        ("SymInt[]", "list[int]"),
        ("int[1]?", "list[int]|None"),
        ("float[]?", "list[float]|None"),
        ("ScalarType", "dtype"),
        ("ScalarType?", "dtype|None"),
        ("str?", "str|None"),
        ("Generator?", ""),
        ("Layout?", ""),
        ("MemoryFormat?", ""),
        ("Dimname", None),
        ("float[]", None),
        ("Layout", None),
    ],
)
def test_type_mapping(aten_type, mapped):
    assert gen.map_type(aten_type) == mapped


def test_full_list_generates_495_operators_and_the_known_skips(functions):
    names = gen.load_torch_op_list(SCRIPTS / "torch_ops.yaml")
    result = gen.generate(names, functions)
    assert len(result.operators) >= 495
    assert dict(result.skipped) == {
        **{
            name: gen.SKIP_NOT_TESTABLE
            for name in (
                "arange empty eye fft_fftfreq fft_rfftfreq full ones polygamma rand "
                "randint randn randperm range special_polygamma zeros"
            ).split()
        },
        **{
            name: gen.SKIP_TENSOR_LIST_OUTPUT
            for name in ("split_copy", "split_with_sizes_copy", "unbind_copy")
        },
    }
    metadata = result.metadata("x")
    assert set(metadata) >= {"ops", "operators", "skipped"}
    for entry in metadata["ops"]:
        assert set(entry) >= {"name", "aten_name", "overload_name", "params"}
        for param in entry["params"]:
            assert set(param) == {
                "name",
                "type",
                "is_tensor",
                "is_out",
                "schema_index",
            }


def test_unary_out_schema(functions):
    result = gen.generate(["abs"], functions)
    assert overloads(result, "abs") == ["input: Tensor, out: Tensor!"]
    entry = entry_of(result, "abs").metadata()
    assert entry["aten_name"] == "abs" and entry["overload_name"] == "out"
    assert entry["params"] == [
        {
            "name": "input",
            "type": "Tensor",
            "is_tensor": True,
            "is_out": False,
            "schema_index": 0,
        },
        {
            "name": "out",
            "type": "Tensor(a!)",
            "is_tensor": True,
            "is_out": True,
            "schema_index": 1,
        },
    ]
    assert result.operators["abs"]["trace_name"] == "Abs"


def test_outputs_last_in_schema_order_and_tensors_first(functions):
    result = gen.generate(["sort", "gather", "index_fill_"], functions)
    assert (
        "input: Tensor, dim: int, descending: bool, values: Tensor!, indices: Tensor!"
        in overloads(result, "sort")
    )
    # `gather(Tensor self, int dim, Tensor index)`: tensors first.
    assert overloads(result, "gather") == [
        "input: Tensor, index: Tensor, dim: int, sparse_grad: bool, out: Tensor!"
    ]
    # A `Scalar value` where a sibling takes `Tensor value` sorts with tensors.
    assert (
        "input: Tensor, index: Tensor, value: float, dim: int, out: Tensor!"
        in overloads(result, "index_fill")
    )


def test_hidden_generator_and_optional_defaults(functions):
    result = gen.generate(["bernoulli"], functions)
    assert "input: Tensor, p: float, out: Tensor!" in overloads(result, "bernoulli")
    entry = next(e for e in result.entries if e.overload_name == "float_out")
    assert entry.hidden == 1


def test_in_place_forms(functions):
    result = gen.generate(["divide", "divide_", "add_"], functions)
    divide = overloads(result, "divide")
    # `divide.out` exists: `divide_.Tensor` stays implicit (mutates `input`);
    # no `divide.Scalar` out variant: `divide_.Scalar` gets an explicit `out`.
    assert "input: Tensor!, other: Tensor" in divide
    assert "input: Tensor, other: float, out: Tensor!" in divide
    assert "input: Tensor, other: Tensor, out: Tensor!" in divide
    forms = {(e.aten_name, e.overload_name): e.form for e in result.entries}
    assert forms[("divide_", "Tensor")] == "inplace"
    assert forms[("divide_", "Scalar")] == "inplace_out"
    assert overloads(result, "add")[-1] == (
        "input: Tensor, other: Tensor, alpha: float, out: Tensor!"
    )
    explicit = entry_of(result, "add", -1).metadata()
    assert explicit["form"] == "inplace_out"
    assert explicit["params"][-1]["schema_index"] is None


def test_scalar_self_overloads_are_not_testable(functions):
    result = gen.generate(["pow"], functions)
    assert all(not text.startswith("exponent") for text in overloads(result, "pow"))


def test_binding_order_puts_scalar_heavy_overloads_first(functions):
    result = gen.generate(["round"], functions)
    assert overloads(result, "round") == [
        "input: Tensor, decimals: int, out: Tensor!",
        "input: Tensor, out: Tensor!",
    ]


def test_deduplication_prefers_the_unsuffixed_out():
    def schema(overload, hidden=0):
        param = gen.Param("input", "Tensor", "Tensor", True, False, False, 0, False)
        return gen.Schema("x", overload, "out", [param], hidden, 0, "x")

    kept = gen.deduplicate([schema("a_out"), schema("out", 1), schema("b_out")])
    assert [s.overload_name for s in kept] == ["out"]
    kept = gen.deduplicate([schema("a_out", 2), schema("b_out", 1)])
    assert [s.overload_name for s in kept] == ["b_out"]


class FakeBase:
    def __init__(self, overloads, aliases=None):
        self.overloads = tuple(overloads)
        self.trace_name = "Fake"
        self.module = "infini.ops.base.fake"
        self.aten_overload_aliases = aliases or {}


def test_hand_written_base_binds_by_name(functions):
    base = FakeBase(
        [
            "input: Tensor, dim: int, descending: bool, stable: bool, out: Tensor!",
            "input: Tensor, stable: bool, dim: int, descending: bool, out: Tensor!",
        ]
    )
    result = gen.generate(["argsort"], functions, {"argsort": base})
    operator = result.operators["argsort"]
    assert operator["base"] == "infini.ops.base.fake"
    assert operator["overloads"] == list(base.overloads)
    first, second = (result.entries[i] for i in operator["bindings"])
    assert first is second and first.overload_name == "stable_out"


def test_hand_written_base_binds_in_place_as_explicit_out(functions):
    base = FakeBase(
        [
            "input: Tensor, other: Tensor, alpha: float, out: Tensor!",
            "input: Tensor, other: Tensor, out: Tensor!",
        ]
    )
    result = gen.generate(["add_"], functions, {"add": base})
    entries = [result.entries[i] for i in result.operators["add"]["bindings"]]
    assert [(e.aten_name, e.overload_name, e.form) for e in entries] == [
        ("add_", "Tensor", "inplace_out")
    ] * 2


def test_unbound_base_overload_is_reported_and_aliases_bind(functions):
    base = FakeBase(
        [
            "input: Tensor, target: Tensor, reduction: int, out: Tensor!",
            "input: Tensor, target: Tensor, size_average: bool|None, "
            "reduce: bool|None, reduction: str, out: Tensor!",
        ]
    )
    result = gen.generate(["mse_loss"], functions, {"mse_loss": base})
    assert "mse_loss" not in result.operators
    assert ("mse_loss", "a base overload binds no ATen schema") in result.skipped
    assert "no ATen schema binds the base overload" in result.warnings[0]
    base.aten_overload_aliases = {1: 0}
    result = gen.generate(["mse_loss"], functions, {"mse_loss": base})
    bindings = result.operators["mse_loss"]["bindings"]
    assert bindings[0] == bindings[1] is not None


def _tree(tmp_path: Path, names: list[str]) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts/torch_ops.yaml").write_text(
        "".join(f"- {name}\n" for name in names)
    )
    base = root / "src/infini/ops/base"
    base.mkdir(parents=True)
    (base / "relu.py").write_text(
        "class Relu:\n    name = 'relu'\n"
        "    overloads = ('input: Tensor, out: Tensor!',)\n"
    )
    (base / "fancy.py").write_text(
        "class Fancy:\n    name = 'fancy'\n"
        "    overloads = ('input: Tensor, out: Tensor!',)\n"
    )
    torch_ops = root / "src/infini/ops/torch/ops"
    torch_ops.mkdir(parents=True)
    (torch_ops / "fancy.py").write_text(
        "@implementation(operator='fancy', devices=('nvidia',), slot=8)\n"
        "class TorchFancy: ...\n"
    )
    return root


def test_manifest_takes_the_metadata(tmp_path, functions):
    root = _tree(tmp_path, ["abs", "relu", "exp"])
    names, optional = aten_names_to_generate(root, BuildConfiguration(with_torch=True))
    assert (names, optional) == (["abs", "relu", "exp"], [])
    result = gen.generate(names, functions, gen.read_hand_written_bases(root))
    path = tmp_path / TORCH_METADATA_NAME
    gen.write_metadata(path, result.metadata("x"))

    configuration = BuildConfiguration(
        devices=("cpu", "nvidia"), with_torch=True, torch_metadata=path
    )
    manifest = build_manifest(root, configuration, warn=lambda message: None)
    operators = manifest["operators"]
    assert operators["abs"]["base_module"] == "infini.ops.torch.aten"
    assert operators["abs"]["trace_name"] == "Abs"
    assert operators["abs"]["implementations"] == [
        {
            "slot": 8,
            "backend": "torch",
            "module": "infini.ops.torch.aten",
            "class": "AtenAbs",
            "devices": ["cpu", "nvidia"],
        }
    ]
    # A hand-written base binds: its module stays, slot 8 is the ATen one.
    assert operators["relu"]["base_module"] == "infini.ops.base.relu"
    assert [i["class"] for i in operators["relu"]["implementations"]] == ["AtenRelu"]
    # A hand-written torch module at slot 8 is never pruned by the ATen list.
    assert operators["fancy"]["implementations"][0]["devices"] == ["nvidia"]
    assert set(operators) == {"abs", "exp", "relu", "fancy"}


def test_selection_allowlist_config_and_unlisted_names(tmp_path):
    root = _tree(tmp_path, ["abs", "add_", "_log_softmax"])
    allow = BuildConfiguration(with_torch=True, torch_ops=["add_", "_log_softmax"])
    names, _ = aten_names_to_generate(root, allow)
    assert names == ["add_", "_log_softmax"]
    smoke = BuildConfiguration(with_torch=True, smoke=True)
    assert aten_names_to_generate(root, smoke)[0] == ["abs"]
    config = root / "ops.json"
    config.write_text(
        json.dumps(
            {
                "abs": {"implementations": "all"},
                "sinc": {"implementations": [8]},
                "add": {"implementations": [0]},
            }
        )
    )
    selected = BuildConfiguration(with_torch=True, ops_config=config)
    names, optional = aten_names_to_generate(root, selected)
    # "all" keeps listed names only; an explicit 8 selects even unlisted ones.
    assert names == ["abs", "sinc", "sinc_"]
    assert optional == ["sinc", "sinc_"]
    both = BuildConfiguration(with_torch=True, ops_config=config, torch_ops=["sinc"])
    assert aten_names_to_generate(root, both)[0] == ["sinc", "sinc_"]
