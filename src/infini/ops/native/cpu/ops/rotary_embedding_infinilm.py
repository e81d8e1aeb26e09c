"""CPU `rotary_embedding_infinilm` (slot 0): the shared rotary kernel."""

from __future__ import annotations

from infini.ops.base._indexing import index_error, unravel
from infini.ops.base.rotary_embedding_infinilm import RotaryEmbeddingInfinilm
from infini.ops.core.geometry import AliasGuard
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.layout import staging_like
from infini.ops.native.cpu.precompile import index_dtypes, torch_dtypes
from infini.ops.native.cpu.rotary import RotaryLaunch


@implementation(operator="rotary_embedding_infinilm", devices=("cpu",), slot=0)
class CpuRotaryEmbeddingInfinilm(RotaryEmbeddingInfinilm):
    def __init__(self, args) -> None:
        super().__init__(args)
        input, pos_ids, out = args.input, args.pos_ids, args.out
        tokens_shape = input.shape[:-2]
        position_strides = pos_ids.strides
        if self.shared_positions:
            position_strides = (0,) + position_strides
        self.tokens_shape = tokens_shape
        self.run = RotaryLaunch(
            data_dtype=input.dtype,
            table_dtype=args.sin_table.dtype,
            position_dtype=pos_ids.dtype,
            # The original's `is_neox` names the interleaved pairing.
            neox=not args.is_neox,
            tokens_shape=tokens_shape,
            heads=input.shape[-2],
            head_size=input.shape[-1],
            src_strides=input.strides,
            dst_strides=out.strides,
            position_strides=position_strides,
            max_position=self.max_position,
            half=input.shape[-1] // 2,
            rot_offset=0,
            cos_strides=args.cos_table.strides,
            sin_strides=args.sin_table.strides,
            inverse=False,
        )
        self.alias = AliasGuard(
            out,
            out.strides,
            [
                (input, input.strides),
                (pos_ids, ()),
                (args.sin_table, ()),
                (args.cos_table, ()),
            ],
        )

    def launch(self, stream, input, pos_ids, sin_table, cos_table, out) -> None:
        if self.run.tokens == 0:
            return
        addresses = (
            input.data_ptr(),
            pos_ids.data_ptr(),
            sin_table.data_ptr(),
            cos_table.data_ptr(),
        )
        out_address = out.data_ptr()
        target = out
        if self.alias.needs_staging(out_address, addresses):
            target = staging_like(out)
            out_address = target.data_ptr()
        input_address, pos_address, sin_address, cos_address = addresses
        bad = self.run(
            out_address, input_address, pos_address, cos_address, sin_address
        )
        if bad >= 0:
            position = unravel(bad, self.tokens_shape)
            if self.shared_positions:
                position = position[1:]
            raise index_error(
                self,
                "pos_ids",
                position,
                int(pos_ids[position]),
                0,
                self.max_position,
                "the rows of the tables",
            )
        if target is not out:
            out.copy_(target)

    @classmethod
    def precompile(cls) -> int:
        """Compiles both pairings for each dtype, tables of that dtype or
        float32, and each position dtype, on heads contiguous in their last
        dimension (the kernel is always the parallel compilation)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            input = torch.zeros(4, 8, 128, dtype=dtype)
            out = torch.empty_like(input)
            for table_dtype in dict.fromkeys((dtype, torch.float32)):
                table = torch.zeros(64, 64, dtype=table_dtype)
                for index_dtype in index_dtypes():
                    positions = torch.zeros(4, dtype=index_dtype)
                    for is_neox in (False, True):
                        infini.ops.rotary_embedding_infinilm(
                            input,
                            positions,
                            table,
                            table,
                            is_neox,
                            out,
                            implementation_index=0,
                        )
                        calls += 1
        return calls
