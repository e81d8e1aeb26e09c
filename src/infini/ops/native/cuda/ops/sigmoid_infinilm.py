"""CUDA-like `sigmoid_infinilm` (slot 0): `sigmoid`'s kernel under InfiniLM's
name (the unary elementwise template with `special.sigmoid`)."""

from __future__ import annotations

from infini.ops.base.sigmoid_infinilm import SigmoidInfinilm
from infini.ops.core.registry import implementation

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import sigmoid


@implementation(operator="sigmoid_infinilm", devices="cuda_like", slot=0)
class CudaSigmoidInfinilm(sigmoid.CudaSigmoid, SigmoidInfinilm):
    """`CudaSigmoid` under InfiniLM's name (validation and messages from
    `SigmoidInfinilm`)."""
