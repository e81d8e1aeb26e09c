"""CUDA-like `softmax_infinilm` (slot 0): `softmax`'s row kernel under
InfiniLM's name (a tile of slices along `dim` per program, see
`ops/softmax.py`)."""

from __future__ import annotations

from infini.ops.base.softmax_infinilm import SoftmaxInfinilm
from infini.ops.core.registry import implementation

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import softmax


@implementation(operator="softmax_infinilm", devices="cuda_like", slot=0)
class CudaSoftmaxInfinilm(softmax.CudaSoftmax, SoftmaxInfinilm):
    """`CudaSoftmax` under InfiniLM's name (validation and messages from
    `SoftmaxInfinilm`)."""
