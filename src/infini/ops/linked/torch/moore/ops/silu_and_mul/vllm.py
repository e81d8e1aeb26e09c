"""vLLM's `silu_and_mul` on Moore GPUs (slot 16)."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_device import VllmDeviceSiluAndMul


@implementation(operator="silu_and_mul", devices=("moore",), slot=16)
class MooreVllmSiluAndMul(VllmDeviceSiluAndMul):
    """`_C::silu_and_mul` from the Moore build of vLLM."""
