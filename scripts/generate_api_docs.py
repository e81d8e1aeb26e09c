"""Write the reST sources of the operator reference, one page per operator.

The `infiniops_docs` target runs this on the build manifest, then Sphinx with
`docs/reference/conf.py`. A page shows the operator's free-function overloads
(from the overload strings of its base), its class, its semantics (the base
class docstring, read with `ast`) and the implementations this build has.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from build_model import ManifestError, parse_overload, write_text_if_changed
from source_scan import read_base

from infini.ops.core.schema import (
    GENERATED_ATEN_MODULE,
    TORCH_METADATA_NAME,
    aten_base_doc,
)

# Keyword-only parameters every free function has (docs/behaviour.md, "Public
# functions").
_CALL_KEYWORDS = "stream: int = 0, implementation_index: int | None = None"


def _signature(overload: str) -> str:
    parameters = []
    for parameter in parse_overload(overload):
        text = f"{parameter.name}: {parameter.type}"
        if parameter.default_text is not None:
            text += f" = {parameter.default_text}"
        parameters.append(text)
    return ", ".join(parameters)


def _written(overload: str) -> list[str]:
    return [p.name for p in parse_overload(overload) if p.writes]


def operator_page(op: str, info: Mapping[str, Any], docstring: str) -> str:
    """The reST page of one operator."""
    lines = [op, "=" * len(op), ""]
    # One directive with a signature per line documents every overload under
    # one index entry.
    directive = ".. py:function:: "
    for index, overload in enumerate(info["overloads"]):
        prefix = directive if index == 0 else " " * len(directive)
        lines.append(
            f"{prefix}infini.ops.{op}({_signature(overload)}, *, {_CALL_KEYWORDS})"
        )
    written = []
    for overload in info["overloads"]:
        written += [name for name in _written(overload) if name not in written]
    if written:
        lines += ["", f"   Writes {', '.join(f'``{name}``' for name in written)}."]
    lines.append("")
    if docstring:
        lines += [docstring, ""]
    # The class takes the same overloads without the keyword-only
    # parameters (docs/behaviour.md, "Operator classes").
    directive = ".. py:class:: "
    for index, overload in enumerate(info["overloads"]):
        prefix = directive if index == 0 else " " * len(directive)
        lines.append(f"{prefix}infini.ops.{info['class']}({_signature(overload)})")
    lines += [
        "",
        "   Built once for the tensors' shape, strides, dtype and device, at the",
        "   default implementation slot of their device, then called with any of",
        "   these overloads on tensors of that geometry, on stream 0; each call",
        "   computes with its own scalars and overload. Neither the constructor",
        "   nor the call takes ``stream``, ``implementation_index`` or ``config``.",
        "   ``active_implementation_indices(device)`` and ``clear_cache()`` are",
        "   its static methods.",
        "",
        "Implementations in this build",
        "-----------------------------",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - Slot",
        "     - Backend",
        "     - Devices",
        "     - Class",
    ]
    for implementation in info["implementations"]:
        lines += [
            f"   * - {implementation['slot']}",
            f"     - {implementation['backend']}",
            f"     - {', '.join(implementation['devices'])}",
            f"     - ``{implementation['module']}.{implementation['class']}``",
        ]
    return "\n".join(lines) + "\n"


def index_page(manifest: Mapping[str, Any]) -> str:
    """The reST index: what the build contains and a table of contents."""
    title = f"InfiniOps {manifest['package_version']} operator reference"
    enabled = [name for name, on in manifest["backends"].items() if on]
    lines = [
        title,
        "=" * len(title),
        "",
        f"Devices: {', '.join(manifest['devices'])}. Backends: {', '.join(enabled)}.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
    ]
    lines += [f"   {op}" for op in manifest["operators"]]
    return "\n".join(lines) + "\n"


def _torch_metadata(manifest_path: Path | None) -> dict:
    path = (
        None if manifest_path is None else manifest_path.with_name(TORCH_METADATA_NAME)
    )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (AttributeError, OSError, ValueError) as error:
        raise ManifestError(
            str(path), f"the ATen operators' metadata cannot be read: {error}"
        ) from None


def write_docs(
    manifest: Mapping[str, Any],
    source_dir: Path,
    output_dir: Path,
    manifest_path: Path | None = None,
) -> None:
    """Write `index.rst` and one `<op>.rst` per operator into `output_dir`;
    ATen operators read their metadata beside `manifest_path`."""
    output_dir.mkdir(parents=True, exist_ok=True)
    pages = {"index.rst": index_page(manifest)}
    metadata = None
    for op, info in manifest["operators"].items():
        if info["base_module"] == GENERATED_ATEN_MODULE:
            # No base module: the description the runtime gives the base it
            # generates from the ATen metadata, which lies beside the manifest.
            if metadata is None:
                metadata = _torch_metadata(manifest_path)
            docstring = aten_base_doc(op, metadata)
        else:
            base_path = source_dir.joinpath(
                "src", *info["base_module"].split(".")
            ).with_suffix(".py")
            docstring = read_base(source_dir, base_path).docstring
        pages[f"{op}.rst"] = operator_page(op, info, docstring)
    for stale in output_dir.glob("*.rst"):
        if stale.name not in pages:
            stale.unlink()
    for name, text in pages.items():
        write_text_if_changed(output_dir / name, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--source-dir", type=Path, required=True)
    parser.add_argument("--output-dir", type=Path, required=True)
    arguments = parser.parse_args(argv)
    try:
        manifest = json.loads(arguments.manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"{arguments.manifest}: cannot be read: {error}", file=sys.stderr)
        return 1
    try:
        write_docs(
            manifest, arguments.source_dir, arguments.output_dir, arguments.manifest
        )
    except ManifestError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
