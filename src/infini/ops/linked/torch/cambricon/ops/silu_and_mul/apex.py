"""apex's fused SwiGLU on Cambricon MLUs (`glu_activation`,
`bias_swiglu_fwd`) at slot 16."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context
from infini.ops.linked.transports import extension_function, unsupported

DTYPES = ("float32", "float16", "bfloat16")


@implementation(operator="silu_and_mul", devices=("cambricon",), slot=16)
class CambriconApexSiluAndMul(SiluAndMul):
    """``bias_swiglu_fwd(input, bias)`` computes ``silu(x1) * x2`` of the two
    halves of ``input + bias`` (the first half gated, as ours): the adapter
    passes a zero bias and copies the result into `out`.

    The contract is the original's symbol; the adapter assumes the
    extension module exposes it to Python under the same name. Neither the
    module nor an MLU was at hand: the contract is checked by the configure
    step wherever apex is installed, the adapter only by review and by tests
    with a stand-in module.
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        if args.input.dtype not in DTYPES:
            raise unsupported(
                self.name,
                "apex",
                f"does not support dtype {args.input.dtype}; supported: "
                f"{', '.join(DTYPES)}.",
            )
        self.empty = args.out.numel == 0
        self.function = extension_function(
            __name__, self.device.platform, "bias_swiglu_fwd"
        )

    def launch(self, stream, input, out) -> None:
        import torch

        if self.empty:
            return
        with stream_context(self.device, stream):
            bias = torch.zeros(input.shape[-1], dtype=input.dtype, device=input.device)
            out.copy_(self.function(input.contiguous(), bias))
