"""CUDA-like `causal_softmax_infinilm` (slot 0): `causal_softmax`'s row kernel
under InfiniLM's name (a tile of rows of the flattened ``(..., q, k)`` input
per program, see `ops/causal_softmax.py`)."""

from __future__ import annotations

from infini.ops.base.causal_softmax_infinilm import CausalSoftmaxInfinilm
from infini.ops.core.registry import implementation

# The module, not only the class: planning finds its helpers there (the
# sm_90 checks patch `require_device` on it).
from infini.ops.native.cuda.ops import causal_softmax


@implementation(operator="causal_softmax_infinilm", devices="cuda_like", slot=0)
class CudaCausalSoftmaxInfinilm(
    causal_softmax.CudaCausalSoftmax, CausalSoftmaxInfinilm
):
    """`CudaCausalSoftmax` under InfiniLM's name (validation and messages from
    `CausalSoftmaxInfinilm`)."""
