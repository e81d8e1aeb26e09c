"""Names and numbers that the build, the runtime, the docs and the tests share.

The build scripts under `scripts/` import this module from the source tree
(they run in pip's isolated build environment, without torch), so it uses
only the standard library.
"""

from __future__ import annotations

# Implementation slots of an operator on a device are 0..31.
MAX_IMPLEMENTATIONS = 32

# The slot of the ATen implementations generated from the installed torch's
# schema (`scripts/generate_torch_ops.py`, `infini.ops.torch.aten`).
GENERATED_ATEN_SLOT = 8

# The module whose classes the package builds from the ATen metadata, and the
# prefix of their names (`AtenAbs` implements `abs`).
GENERATED_ATEN_MODULE = "infini.ops.torch.aten"
GENERATED_ATEN_CLASS_PREFIX = "Aten"

# The ATen metadata file: beside `infini/ops/__init__.py` when installed,
# beside the manifest a source checkout points `INFINI_OPS_MANIFEST` at.
TORCH_METADATA_NAME = "torch_ops_metadata.json"
TORCH_METADATA_FORMAT_VERSION = 1

# The build manifest, in `infini/ops/_generated/`, and the version of its
# format.
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT_VERSION = 1

# Implementation backends: each is the top directory of its modules under
# `infini/ops/`; "native" holds the hand-written kernels of every device.
BACKENDS = ("native", "torch", "triton", "ninetoothed", "linked")


def class_name_of(operator: str) -> str:
    """The public class of an operator: PascalCase of every `_`-separated part
    (`rms_norm` -> `RmsNorm`, `top_k_top_p_sampler` -> `TopKTopPSampler`)."""
    return "".join(part[:1].upper() + part[1:] for part in operator.split("_"))


def aten_base_doc(operator: str, metadata: dict) -> str:
    """The description of an operator whose base is generated from the ATen
    schema (no `infini.ops.base` module): its docstring at run time
    (`infini.ops.torch.aten`) and in the operator reference
    (`scripts/generate_api_docs.py`). `metadata` is the ATen metadata."""
    info = metadata["operators"][operator]
    entries = metadata["ops"]
    schemas = sorted(
        {
            f"aten::{entries[i]['aten_name']}.{entries[i]['overload_name']}"
            for i in info["bindings"]
            if i is not None
        }
    )
    return (
        f"`{operator}`: PyTorch's `{schemas[0].split('.')[0][6:]}` (ATen "
        f"{', '.join(schemas)}), called with caller-allocated outputs.\n\n"
        "Generated from the installed torch's schema; see torch's documentation "
        "for the semantics."
    )
