"""CUDA-like `relu_infinilm` (slot 0): `relu`'s kernel under InfiniLM's name
(the unary elementwise template with `relu` on the elements as stored)."""

from __future__ import annotations

from infini.ops.base.relu_infinilm import ReluInfinilm
from infini.ops.core.registry import implementation

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import relu


@implementation(operator="relu_infinilm", devices="cuda_like", slot=0)
class CudaReluInfinilm(relu.CudaRelu, ReluInfinilm):
    """`CudaRelu` under InfiniLM's name (validation and messages from
    `ReluInfinilm`)."""
