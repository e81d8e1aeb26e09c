"""GPTQ -> Marlin repack of one 4-bit ``(HIDDEN, HIDDEN)`` weight, with
act-order, against the same permutation in torch ops: unpack the codes,
gather them into Marlin order with a precomputed index, pack them again.
The repack takes no activations, so only the first token count and float32
produce a point."""

import torch

import infini.ops
from benchmarks.harness import HIDDEN, TOKENS, Case, nbytes
from infini.ops.base._marlin import block_shape, chunk_source

BITS = 4


def _marlin_gather_index(size_k, size_n, num_bits):
    """For each code of the Marlin layout, its flat ``k * size_n + n``."""
    rows_per_block, columns_per_block = block_shape(False)
    sources = torch.tensor(chunk_source(num_bits, False))
    position = torch.arange(size_k * size_n)
    row_block = position // (rows_per_block * size_n)
    chunk = (position % (rows_per_block * size_n)) // 1024
    row = row_block * rows_per_block + sources[position % 1024, 0]
    column = chunk * columns_per_block + sources[position % 1024, 1]
    return row * size_n + column


def cases(tokens, dtype):
    if tokens != TOKENS[0] or dtype != torch.float32:
        return
    size_k = size_n = HIDDEN
    pack = 32 // BITS
    weight = torch.randint(-(2**31), 2**31, (size_k // pack, size_n), dtype=torch.int32)
    perm = torch.randperm(size_k).int()
    out = torch.empty(size_k // 16, size_n * 16 // pack, dtype=torch.int32)
    gather = _marlin_gather_index(size_k, size_n, BITS)
    shifts = torch.arange(pack) * BITS
    rows = perm.long()

    def reference():
        wide = weight.long() & 0xFFFFFFFF
        codes = ((wide.unsqueeze(1) >> shifts.view(1, pack, 1)) & 15).reshape(
            size_k, size_n
        )
        ordered = codes[rows].reshape(-1)[gather].view(-1, pack)
        return (ordered << shifts).sum(-1).to(torch.int32)

    yield Case(
        f"({size_k}, {size_n}) 4-bit, act-order",
        lambda: infini.ops.gptq_marlin_repack(
            weight, perm, size_k, size_n, BITS, False, out
        ),
        reference,
        nbytes(weight, perm, out),
        out.numel(),
    )
