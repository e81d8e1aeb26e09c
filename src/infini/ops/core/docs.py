"""Signatures and docstrings of the public functions and classes.

`inspect.signature(infini.ops.rms_norm)` shows the parameters of the
operator's first overload, with `stream`, `implementation_index` (and
`config` where the build has a Triton JIT implementation) keyword-only; a
class shows the same parameters without them. The docstrings list every
overload in binding order, then the operator's own description: the
docstring of its base (`infini.ops.base.<op>`, or the ATen base generated
from torch's schema). They are made when a name is first looked up on
`infini.ops` (see `infini/ops/__init__.py`), not when the package is
imported. See docs/behaviour.md, "Public functions" and "Operator classes".
"""

from __future__ import annotations

import inspect
import keyword

from .signature import (
    BOOL,
    FLOAT,
    FLOAT_LIST,
    INT,
    INT_LIST,
    INT_LIST_LIST,
    STR,
    Overload,
    Parameter,
)

# Annotations of the scalar kinds; tensors, tensor lists and dtypes keep the
# overload's text ("Tensor", "list[Tensor]", "dtype").
_ANNOTATIONS = {
    FLOAT: float,
    INT: int,
    BOOL: bool,
    STR: str,
    INT_LIST: list[int],
    FLOAT_LIST: list[float],
    INT_LIST_LIST: list[list[int]],
}


def _annotation(parameter: Parameter):
    annotation = _ANNOTATIONS.get(parameter.kind)
    if annotation is None:
        return parameter.type.replace("|", " | ")
    return annotation | None if parameter.optional else annotation


def _parameter(name: str, kind, **options) -> inspect.Parameter:
    """An `inspect.Parameter`; ATen names that are Python keywords (`from`
    of `can_cast`) are kept, as callers pass them with `**{"from": ...}`,
    although `inspect` would refuse them."""
    if not keyword.iskeyword(name):
        return inspect.Parameter(name, kind, **options)
    parameter = inspect.Parameter(f"{name}_", kind, **options)
    parameter._name = name  # the name the binder takes
    return parameter


def signature(entry, keywords: bool) -> inspect.Signature:
    """The signature of the first overload; with `keywords`, the functions'
    keyword-only parameters follow."""
    overload = Overload(0, entry.overload_texts[0])
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [
        _parameter(
            p.name,
            kind,
            default=p.default if p.has_default else inspect.Parameter.empty,
            annotation=_annotation(p),
        )
        for p in overload.parameters
    ]
    if keywords:
        only = inspect.Parameter.KEYWORD_ONLY
        parameters.append(inspect.Parameter("stream", only, default=0, annotation=int))
        parameters.append(
            inspect.Parameter(
                "implementation_index", only, default=None, annotation=int | None
            )
        )
        if entry.has_triton:
            parameters.append(
                inspect.Parameter("config", only, default=None, annotation=dict | None)
            )
    # A parameter with a default may precede required ones (`indices:
    # Tensor|None` before `filter_apply_order: str`): every parameter can be
    # passed by keyword, so the defaulted one can still be left out. Python's
    # own functions cannot say that; the signature states it as it is.
    return inspect.Signature(
        parameters, return_annotation=None, __validate_parameters__=False
    )


def _overload_lines(name: str, texts, tail: str) -> list[str]:
    return [f"{name}({text}{tail}) -> None" for text in texts]


def _written(texts) -> list[str]:
    written: list[str] = []
    for text in texts:
        for parameter in Overload(0, text).parameters:
            if parameter.writes and parameter.name not in written:
                written.append(parameter.name)
    return written


def _semantics(entry) -> str:
    """The base's own description of the operator."""
    return inspect.cleandoc(entry.base.__doc__ or "").strip()


def function_doc(entry) -> str:
    from .dispatch import call_keywords

    lines = _overload_lines(
        entry.name, entry.overload_texts, call_keywords(entry.has_triton)
    )
    lines.append("")
    written = _written(entry.overload_texts)
    if written:
        names = ", ".join(f"`{name}`" for name in written)
        lines.append(f"Writes {names} and returns None. The first overload that")
    else:
        lines.append("Returns None. The first overload that")
    lines.append(
        'accepts the arguments is used (docs/behaviour.md, "Overload binding").'
    )
    semantics = _semantics(entry)
    if semantics:
        lines += ["", semantics]
    return "\n".join(lines)


def class_doc(entry) -> str:
    lines = _overload_lines(entry.class_name, entry.overload_texts, "")
    lines += [
        "",
        f"Builds `{entry.name}` for the tensors' shape, strides, dtype and device,",
        "at the default implementation slot of their device. The object is then",
        "called with any of these overloads, on tensors of that geometry, on",
        "stream 0; it computes with the scalars and overload of each call.",
        "Neither the constructor nor the call takes `stream`,",
        "`implementation_index` or `config` (the function does).",
        "Static methods: `active_implementation_indices(device)`, `clear_cache()`.",
    ]
    semantics = _semantics(entry)
    if semantics:
        lines += ["", semantics]
    return "\n".join(lines)
