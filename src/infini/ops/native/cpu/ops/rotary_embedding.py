"""CPU `rotary_embedding` (slot 0): one fused in-place pass per tensor."""

from __future__ import annotations

from functools import partial

from infini.ops.base._indexing import index_error, unravel
from infini.ops.base.rotary_embedding import RotaryEmbedding
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.precompile import PRECOMPILED_DTYPES
from infini.ops.native.cpu.rotary import RotaryLaunch


@implementation(operator="rotary_embedding", devices=("cpu",), slot=0)
class CpuRotaryEmbedding(RotaryEmbedding):
    def __init__(self, args) -> None:
        super().__init__(args)
        positions, cache = args.positions, args.cos_sin_cache
        head_size = args.head_size
        half = self.rot_dim // 2
        row_stride, column_stride = cache.strides
        # The sines start `half` columns into each row of the cache.
        self.sin_offset = half * column_stride * cache.element_size
        self.launches = []
        for meta, heads in (
            (args.query, self.query_heads),
            (args.key, self.key_heads),
        ):
            if meta is None:
                continue
            token_strides = meta.strides[: positions.ndim]
            strides = token_strides + self.head_strides(meta, head_size)
            self.launches.append(
                RotaryLaunch(
                    data_dtype=meta.dtype,
                    table_dtype=cache.dtype,
                    position_dtype=positions.dtype,
                    neox=args.is_neox,
                    tokens_shape=positions.shape,
                    heads=heads,
                    head_size=head_size,
                    src_strides=strides,
                    dst_strides=strides,
                    position_strides=positions.strides,
                    max_position=self.max_position,
                    half=half,
                    rot_offset=args.rope_dim_offset,
                    cos_strides=(row_stride, column_stride),
                    sin_strides=(row_stride, column_stride),
                    inverse=args.inverse,
                )
            )

    def launch(self, stream, positions, query, key, cos_sin_cache) -> None:
        pos_address = positions.data_ptr()
        cos_address = cos_sin_cache.data_ptr()
        sin_address = cos_address + self.sin_offset
        for launch, tensor in zip(self.launches, (query, key)):
            address = tensor.data_ptr()
            bad = launch(address, address, pos_address, cos_address, sin_address)
            if bad >= 0:
                self._bad_position(positions, bad)

    def bind_launch(self, stream, positions, query, key, cos_sin_cache):
        pos_address = positions.data_ptr()
        cos_address = cos_sin_cache.data_ptr()
        sin_address = cos_address + self.sin_offset
        fail = partial(self._bad_position, positions)
        first, *rest = [
            launch.bind(
                tensor.data_ptr(),
                tensor.data_ptr(),
                pos_address,
                cos_address,
                sin_address,
                fail,
            )
            for launch, tensor in zip(self.launches, (query, key))
        ]
        if not rest:
            return first
        (second,) = rest

        def launch_both() -> None:
            first()
            second()

        return launch_both

    def _bad_position(self, positions, bad: int) -> None:
        position = unravel(bad, self.tokens_shape)
        raise index_error(
            self,
            "positions",
            position,
            int(positions[position]),
            0,
            self.max_position,
            "the rows of `cos_sin_cache`",
        )

    @classmethod
    def precompile(cls) -> int:
        """Compiles the common variants (NeoX, contiguous heads): int64
        positions with a cache of the query's dtype, and int32 positions
        with a float32 cache (what `infini.ops.models` passes), for decode
        and prefill sizes."""
        import torch

        import infini.ops

        calls = 0
        for name in PRECOMPILED_DTYPES:
            dtype = getattr(torch, name)
            for position_dtype, cache_dtype in (
                (torch.int64, dtype),
                (torch.int32, torch.float32),
            ):
                cache = torch.zeros(8, 128, dtype=cache_dtype)
                for tokens in (1, 512):
                    positions = torch.zeros(tokens, dtype=position_dtype)
                    query = torch.zeros(tokens, 32 * 128, dtype=dtype)
                    key = torch.zeros(tokens, 8 * 128, dtype=dtype)
                    infini.ops.rotary_embedding(
                        positions, query, key, cache, 128, True, implementation_index=0
                    )
                    calls += 1
        return calls
