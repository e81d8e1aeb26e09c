"""vLLM's `get_cutlass_moe_mm_data` on NVIDIA GPUs
(`_C::get_cutlass_moe_mm_data`) at slot 16."""

from __future__ import annotations

from infini.ops.base.get_cutlass_moe_mm_data import GetCutlassMoeMmData
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.torch.staging import packed
from infini.ops.linked.transports import dispatcher_operator, unsupported

OUTPUTS = (
    "expert_offsets",
    "problem_sizes1",
    "problem_sizes2",
    "input_permutation",
    "output_permutation",
    "blockscale_offsets",
)


@implementation(operator="get_cutlass_moe_mm_data", devices=("nvidia",), slot=16)
class NvidiaVllmGetCutlassMoeMmData(GetCutlassMoeMmData):
    """The contract's vLLM computes the gated layout only (``N1 = 2 * n``):
    `is_gated` False is rejected. vLLM's kernel keeps its own behaviours
    where the base leaves room (the order of an expert's places in
    `input_permutation` comes from atomic counters; invalid ids other than
    -1 leave `output_permutation` unwritten). It reads and writes packed
    int32 tensors: `topk_ids` of another dtype is converted, outputs must be
    int32 and packed."""

    def __init__(self, args) -> None:
        super().__init__(args)
        if not args.is_gated:
            raise unsupported(
                self.name, "vllm", "computes the gated layout only (`is_gated` True)."
            )
        for name in OUTPUTS:
            meta = getattr(args, name)
            if meta is None:
                continue
            if meta.dtype != "int32" or not packed(meta):
                raise unsupported(
                    self.name,
                    "vllm",
                    f"requires a packed int32 `{name}`, got {meta.dtype} with "
                    f"strides {meta.strides} for shape {meta.shape}.",
                )
        self.sizes = (args.num_experts, args.n, args.k)
        self.kernel = dispatcher_operator(__name__, self.device.platform)

    def launch(
        self, stream, topk_ids, expert_offsets, problem_sizes1, problem_sizes2,
        input_permutation, output_permutation, blockscale_offsets,
    ) -> None:  # fmt: skip
        import torch

        with stream_context(self.device, stream):
            self.kernel(
                topk_ids.to(torch.int32).contiguous(),
                expert_offsets,
                problem_sizes1,
                problem_sizes2,
                input_permutation,
                output_permutation,
                *self.sizes,
                blockscale_offsets,
            )
