"""CUDA-like `topk_sigmoid` (slot 0) in Triton: a tile of tokens per program.

The gating kernel of `topk_softmax` (`native/cuda/routing.py`) with a
float32 sigmoid per score instead of the softmax: `topk` picks by a maximum
over packed int64 order keys of ``sigmoid(x) + e_score_correction_bias``,
the weights are the unbiased sigmoids, renormalised and multiplied by
`routed_scaling_factor`, written once per row from register tiles.
"""

from __future__ import annotations

from infini.ops.base.topk_sigmoid import TopkSigmoid
from infini.ops.core.registry import implementation
from infini.ops.native.cuda.routing import TopkGatingLaunch
from infini.ops.runtime.triton import require_device


@implementation(
    operator="topk_sigmoid",
    devices=("nvidia",),
    slot=0,
)
class CudaTopkSigmoid(TopkGatingLaunch, TopkSigmoid):
    def __init__(self, args) -> None:
        super().__init__(args)
        require_device(self.name, self.device)
        self.plan(
            False,
            args.gating_output,
            args.e_score_correction_bias,
            args.is_padding,
            (args.topk_weights, args.topk_ids, args.token_expert_indices),
            self.renormalize,
            self.routed_scaling_factor,
        )

    def launch(
        self,
        stream,
        gating_output,
        e_score_correction_bias,
        is_padding,
        topk_weights,
        topk_ids,
        token_expert_indices,
    ) -> None:
        self.run(
            stream,
            gating_output,
            e_score_correction_bias,
            is_padding,
            topk_weights,
            topk_ids,
            token_expert_indices,
        )
