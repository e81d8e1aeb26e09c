"""CUDA-like `gelu_infinilm` (slot 0): `gelu`'s kernels under InfiniLM's name
(the unary elementwise template with `gelu`'s element functions)."""

from __future__ import annotations

from infini.ops.base.gelu_infinilm import GeluInfinilm
from infini.ops.core.registry import implementation

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import gelu


@implementation(operator="gelu_infinilm", devices="cuda_like", slot=0)
class CudaGeluInfinilm(gelu.CudaGelu, GeluInfinilm):
    """`CudaGelu` under InfiniLM's name (validation and messages from
    `GeluInfinilm`)."""
