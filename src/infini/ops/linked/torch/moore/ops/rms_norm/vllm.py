"""vLLM's `rms_norm` on Moore GPUs (slot 16)."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_device import VllmDeviceRmsNorm


@implementation(operator="rms_norm", devices=("moore",), slot=16)
class MooreVllmRmsNorm(VllmDeviceRmsNorm):
    """`_C::rms_norm` from the Moore build of vLLM."""
