"""The runner's first home, kept for the names callers import from it.

`LlamaModel` is `DecoderModel` (`decoder.py`): one forward pass serves every
family of `families.py`, a checkpoint's configuration and weights saying
which steps a family adds, so a Llama needs no class of its own.
"""

from __future__ import annotations

from .decoder import (
    VECTOR_ROWS,
    ConcatenatedProjection,
    DecoderModel,
    DenseProjection,
    Layer,
    QuantisedProjection,
    StepInputs,
    rotary_cos_sin_cache,
)

LlamaModel = DecoderModel

__all__ = [
    "VECTOR_ROWS",
    "ConcatenatedProjection",
    "DecoderModel",
    "DenseProjection",
    "Layer",
    "LlamaModel",
    "QuantisedProjection",
    "StepInputs",
    "rotary_cos_sin_cache",
]
