"""vLLM's `rms_norm` on Metax GPUs (slot 16)."""

from __future__ import annotations

from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_device import VllmDeviceRmsNorm


@implementation(operator="rms_norm", devices=("metax",), slot=16)
class MetaxVllmRmsNorm(VllmDeviceRmsNorm):
    """`_C::rms_norm` from the Metax build of vLLM."""
