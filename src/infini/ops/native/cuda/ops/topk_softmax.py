"""CUDA-like `topk_softmax` (slot 0) in Triton: a tile of tokens per program.

Each token's row of expert scores goes through a float32 softmax; the top
`topk` experts are picked one at a time by a maximum over packed int64 order
keys (`native/cuda/routing.py`): one reduction gives the best score and,
among equal scores, the lower expert id (torch's top-k order). Weights, ids
and token indices are written once per row from register tiles.
"""

from __future__ import annotations

from infini.ops.base.topk_softmax import TopkSoftmax
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.routing import TopkGatingLaunch
from infini.ops.runtime.triton import require_device


@implementation(
    operator="topk_softmax",
    devices="cuda_like",
    slot=0,
)
class CudaTopkSoftmax(TopkGatingLaunch, TopkSoftmax):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan(
            True,
            args.gating_output,
            args.bias,
            args.is_padding,
            (args.topk_weights, args.topk_indices, args.token_expert_indices),
            self.renormalize,
            1.0,
        )

    def launch(
        self,
        stream,
        gating_output,
        bias,
        is_padding,
        topk_weights,
        topk_indices,
        token_expert_indices,
    ) -> None:
        self.run(
            stream,
            gating_output,
            bias,
            is_padding,
            topk_weights,
            topk_indices,
            token_expert_indices,
        )
