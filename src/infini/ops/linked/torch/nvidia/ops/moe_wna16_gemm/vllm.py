"""vLLM's `moe_wna16_gemm` on NVIDIA GPUs (`_moe_C::moe_wna16_gemm`) at
slot 16."""

from __future__ import annotations

from infini.ops.base.moe_wna16_gemm import MoeWna16Gemm
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.torch.staging import packed
from infini.ops.linked.transports import dispatcher_operator, unsupported


@implementation(operator="moe_wna16_gemm", devices=("nvidia",), slot=16)
class NvidiaVllmMoeWna16Gemm(MoeWna16Gemm):
    """``output`` is zeroed, then vLLM accumulates the processed entries
    into it. vLLM reads packed tensors and int32 routing indices: int64
    indices are converted, other tensors must be packed."""

    def __init__(self, args) -> None:
        super().__init__(args)
        for name in ("input", "b_qweight", "b_scales", "b_qzeros", "output"):
            meta = getattr(args, name)
            if meta is not None and not packed(meta):
                raise unsupported(
                    self.name,
                    "vllm",
                    f"requires a packed (contiguous) `{name}`, got strides "
                    f"{meta.strides} for shape {meta.shape}.",
                )
        self.scalars = (
            args.top_k,
            args.block_size_m,
            args.block_size_n,
            args.block_size_k,
            args.bit,
        )
        self.kernel = dispatcher_operator(__name__, self.device.platform)

    def launch(
        self, stream, input, b_qweight, b_scales, b_qzeros, topk_weights,
        sorted_token_ids, expert_ids, num_tokens_post_pad, output,
    ) -> None:  # fmt: skip
        import torch

        with stream_context(self.device, stream):
            output.zero_()
            self.kernel(
                input,
                output,
                b_qweight,
                b_scales,
                b_qzeros,
                topk_weights,
                sorted_token_ids.to(torch.int32),
                expert_ids.to(torch.int32),
                num_tokens_post_pad.to(torch.int32),
                *self.scalars,
            )
