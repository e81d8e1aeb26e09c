"""PyTorch `reshape_and_cache` (slot 1, every device)."""

from __future__ import annotations

from infini.ops.base.reshape_and_cache import ReshapeAndCache
from infini.ops.core.registry import implementation
from infini.ops.core.streams import stream_context

# The largest finite value of each fp8 format, where vLLM saturates.
_FP8 = {
    "fp8": ("float8_e4m3fn", 448.0),
    "fp8_e4m3": ("float8_e4m3fn", 448.0),
    "fp8_e5m2": ("float8_e5m2", 57344.0),
}


@implementation(operator="reshape_and_cache", devices="all", slot=1)
class TorchReshapeAndCache(ReshapeAndCache):
    """The cache write with torch indexing: the valid tokens' keys (split
    into ``head_size / x`` chunks of `x`) and values are scattered to
    ``(slot // block_size, slot % block_size)``. fp8 modes divide by the
    scale in float32, saturate and round to nearest even through torch's
    float8 types. Slots are checked before anything is written."""

    def __init__(self, args) -> None:
        super().__init__(args)
        self.mode = args.kv_cache_dtype
        self.x = args.key_cache.shape[4]

    def _encode(self, tensor, scale):
        import torch

        name, limit = _FP8[self.mode]
        scaled = tensor.float() / scale.float().reshape(())
        return scaled.clamp(-limit, limit).to(getattr(torch, name)).view(torch.uint8)

    def launch(
        self, stream, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale
    ) -> None:
        import torch

        self.check_slots(slot_mapping)
        with stream_context(self.device, stream):
            slots = slot_mapping.to(torch.int64)
            tokens = (slots >= 0).nonzero().squeeze(1)
            slots = slots[tokens]
            blocks = torch.div(slots, self.block_size, rounding_mode="floor")
            offsets = slots - blocks * self.block_size
            keys, values = key[tokens], value[tokens]
            if self.fp8:
                keys = self._encode(keys, k_scale)
                values = self._encode(values, v_scale)
            keys = keys.unflatten(-1, (keys.shape[-1] // self.x, self.x))
            key_cache[blocks, :, :, offsets, :] = keys
            value_cache[blocks, :, :, offsets] = values
