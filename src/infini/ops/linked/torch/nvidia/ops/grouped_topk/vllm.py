"""vLLM's `grouped_topk` on NVIDIA GPUs (`_moe_C::grouped_topk`) at slot 16."""

from __future__ import annotations

from infini.ops.base.grouped_topk import GroupedTopk
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.transports import dispatcher_operator


@implementation(operator="grouped_topk", devices=("nvidia",), slot=16)
class NvidiaVllmGroupedTopk(GroupedTopk):
    """The contract's vLLM takes the scores already activated and the
    selection scores ``scores + bias`` as two tensors: both are computed
    here in float32 (``sigmoid`` for `scoring_func` 1), then vLLM groups,
    selects, renormalises and scales, and its results (float32 values,
    int32 ids) are copied into the outputs."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.kernel = dispatcher_operator(__name__, self.device.platform)

    def launch(self, stream, scores, bias, topk_values, topk_indices) -> None:
        if self.tokens == 0:
            return
        with stream_context(self.device, stream):
            activated = scores.float()
            if self.sigmoid:
                activated = activated.sigmoid()
            values, ids = self.kernel(
                activated.contiguous(),
                (activated + bias.float()).contiguous(),
                self.groups,
                self.topk_group,
                self.topk,
                self.renormalize,
                self.routed_scaling_factor,
            )
            topk_values.copy_(values)
            topk_indices.copy_(ids)
