"""vLLM's `awq_marlin_repack` on NVIDIA GPUs (`_C::awq_marlin_repack`) at
slot 16."""

from __future__ import annotations

from infini.ops.base.awq_marlin_repack import AwqMarlinRepack
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.transports import dispatcher_operator


@implementation(operator="awq_marlin_repack", devices=("nvidia",), slot=16)
class NvidiaVllmAwqMarlinRepack(AwqMarlinRepack):
    """vLLM returns a new tensor, copied into `out`."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.sizes = (args.size_k, args.size_n, args.num_bits, args.is_a_8bit)
        self.empty = args.out.numel == 0
        self.kernel = dispatcher_operator(__name__, self.device.platform)

    def launch(self, stream, b_q_weight, out) -> None:
        if self.empty:
            return
        with stream_context(self.device, stream):
            out.copy_(self.kernel(b_q_weight, *self.sizes))
