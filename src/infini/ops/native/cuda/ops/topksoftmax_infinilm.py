"""CUDA-like `topksoftmax_infinilm` (slot 0) in Triton: a tile of tokens per
program.

The gating kernel of `topk_softmax` (`native/cuda/routing.py`): a float32
softmax over each token's row, the `topk` best probabilities picked by a
maximum over packed int64 order keys (torch.topk's order), divided by their
sum when `norm`; no bias, padding or token indices.
"""

from __future__ import annotations

from infini.ops.base.topksoftmax_infinilm import TopksoftmaxInfinilm
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.routing import TopkGatingLaunch
from infini.ops.runtime.triton import require_device


@implementation(
    operator="topksoftmax_infinilm",
    devices="cuda_like",
    slot=0,
)
class CudaTopksoftmaxInfinilm(TopkGatingLaunch, TopksoftmaxInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan(
            True,
            args.input,
            None,
            None,
            (args.values, args.indices, None),
            self.norm,
            1.0,
        )

    def launch(self, stream, input, values, indices) -> None:
        self.run(stream, input, None, None, values, indices, None)
