"""vLLM's `gptq_marlin_repack` on NVIDIA GPUs (`_C::gptq_marlin_repack`) at
slot 16."""

from __future__ import annotations

from infini.ops.base.gptq_marlin_repack import GptqMarlinRepack
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.transports import dispatcher_operator


@implementation(operator="gptq_marlin_repack", devices=("nvidia",), slot=16)
class NvidiaVllmGptqMarlinRepack(GptqMarlinRepack):
    """vLLM returns a new tensor, copied into `out`; an int64 `perm` goes to
    vLLM as int32 (its kernel reads 32-bit rows). `perm` values are checked
    here, before the launch: vLLM's kernel does not check them."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.sizes = (args.size_k, args.size_n, args.num_bits, args.is_a_8bit)
        self.empty = args.out.numel == 0
        self.kernel = dispatcher_operator(__name__, self.device.platform)

    def launch(self, stream, b_q_weight, perm, out) -> None:
        import torch

        if self.empty:
            return
        size_k = self.sizes[0]
        with stream_context(self.device, stream):
            if self.has_perm:
                bad = ((perm < 0) | (perm >= size_k)).nonzero()
                if len(bad):
                    position = int(bad[0, 0])
                    raise self.error(
                        f"`perm[{position}]` is {int(perm[position])}, out of the "
                        f"range [0, {size_k}) of rows; nothing was written."
                    )
                perm = perm.to(torch.int32)
            out.copy_(self.kernel(b_q_weight, perm, *self.sizes))
