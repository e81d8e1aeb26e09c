"""vLLM's MoE routing kernels (`_moe_C::topk_softmax`, `_moe_C::topk_sigmoid`)
on NVIDIA GPUs: the platform's bindings subclass these.

vLLM's kernels take packed tensors and no padding mask; anything else is
rejected before a launch. No NVIDIA machine with vLLM was at hand when these
were written: the contracts are checked by the configure step wherever vLLM
is installed, the adapters only by review.
"""

from __future__ import annotations

from infini.ops.base.topk_sigmoid import TopkSigmoid
from infini.ops.base.topk_softmax import TopkSoftmax
from infini.ops.core.streams import stream_context
from infini.ops.linked.torch.staging import packed
from infini.ops.linked.transports import dispatcher_operator, unsupported

GATING_DTYPES = ("float32", "float16", "bfloat16")


def _check(operator, args, ids_name: str) -> None:
    if args.is_padding is not None:
        raise unsupported(operator.name, "vllm", "does not support `is_padding`.")
    if args.gating_output.dtype not in GATING_DTYPES:
        raise unsupported(
            operator.name,
            "vllm",
            f"does not support `gating_output` of dtype "
            f"{args.gating_output.dtype}; supported: {', '.join(GATING_DTYPES)}.",
        )
    for name in ("gating_output", "topk_weights", ids_name, "token_expert_indices"):
        meta = getattr(args, name)
        if not packed(meta):
            raise unsupported(
                operator.name,
                "vllm",
                f"requires a packed (contiguous) `{name}`, "
                f"got strides {meta.strides} for shape {meta.shape}.",
            )


class VllmTopkSoftmax(TopkSoftmax):
    """``_moe_C::topk_softmax(topk_weights, topk_indices,
    token_expert_indices, gating_output, renormalize, bias)``."""

    def __init__(self, args) -> None:
        super().__init__(args)
        _check(self, args, "topk_indices")
        self.kernel = dispatcher_operator(type(self).__module__, self.device.platform)

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
        with stream_context(self.device, stream):
            self.kernel(
                topk_weights,
                topk_indices,
                token_expert_indices,
                gating_output,
                self.renormalize,
                bias,
            )


class VllmTopkSigmoid(TopkSigmoid):
    """``_moe_C::topk_sigmoid(topk_weights, topk_indices,
    token_expert_indices, gating_output, renormalize, bias)``; vLLM has no
    `routed_scaling_factor`, so only 1.0 is accepted."""

    def __init__(self, args) -> None:
        super().__init__(args)
        _check(self, args, "topk_ids")
        if self.routed_scaling_factor != 1.0:
            raise unsupported(
                self.name,
                "vllm",
                "requires `routed_scaling_factor` 1.0, got "
                f"{self.routed_scaling_factor}.",
            )
        self.kernel = dispatcher_operator(type(self).__module__, self.device.platform)

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
        with stream_context(self.device, stream):
            self.kernel(
                topk_weights,
                topk_ids,
                token_expert_indices,
                gating_output,
                self.renormalize,
                e_score_correction_bias,
            )
