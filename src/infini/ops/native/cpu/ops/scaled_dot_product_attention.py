"""CPU `scaled_dot_product_attention` (slot 0).

Decoding, short queries and causal prefill run the online-softmax Numba
kernel (one task per GQA group and block of query rows; a causal block stops
at its last visible key tile); long non-causal queries run the two products
as float32 GEMMs in blocks of query rows, with a Numba kernel for the softmax
in between (`native/cpu/attention.py`). Measured on one core (Zen 4): the
online kernel is 1.1-1.5x torch from decode to 512-token causal prefill and
on par at 2048; the GEMM path is 0.8-0.9x below 512 rows and ties with the
online kernel on long non-causal queries. The GEMMs go through torch's BLAS
(MKL) rather than NumPy's OpenBLAS: OpenBLAS's spinning worker threads
collapse when the host is oversubscribed (measured 3-10x slower than MKL
for these shapes on a loaded 2-core host), and torch is a dependency
anyway. Dropout multipliers come from torch's
generator, drawn exactly as torch's math path draws them (see the base).
"""

from __future__ import annotations

import numpy as np

from infini.ops.base.scaled_dot_product_attention import ScaledDotProductAttention
from infini.ops.core.geometry import span
from infini.ops.core.registry import implementation
from infini.ops.native.cpu.attention import (
    NO_ROUNDED,
    NO_SLOPES,
    overlaps,
    probability_kernel,
    sdpa_online_kernel,
    staging_buffer,
)
from infini.ops.native.cpu.precompile import torch_dtypes

# Query rows per task of the online kernel (all heads of a GQA group).
BLOCK_ROWS = 32
# Non-causal queries at least this long, over at least this many keys, take
# the BLAS path (its GEMMs catch up with the online kernel only on long
# queries; causal ones stay online, which skips the hidden key tiles).
BLAS_MIN_ROWS = 512
BLAS_MIN_KEYS = 64
# The most float32 scores one BLAS block holds (16 MiB).
BLAS_BLOCK_SCORES = 1 << 22


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def batch_offsets(batch, shape, strides, head_ratio: int = 1) -> np.ndarray:
    """The element offset of each entry of the (row-major) `batch` in an
    operand whose leading dimensions are `shape` / `strides`, aligned to the
    right of `batch`: size-1 dimensions broadcast, and with `head_ratio` the
    last one (heads) is read at ``index // head_ratio`` (GQA)."""
    offsets = np.zeros(1, dtype=np.int64)
    skip = len(batch) - len(shape)
    for dim, size in enumerate(batch):
        index = np.arange(size, dtype=np.int64)
        own = dim - skip
        if own < 0 or shape[own] == 1:
            step = index * 0
        else:
            if own == len(shape) - 1 and head_ratio > 1:
                index = index // head_ratio
            step = index * strides[own]
        offsets = (offsets[:, None] + step[None, :]).reshape(-1)
    return offsets


@implementation(operator="scaled_dot_product_attention", devices=("cpu",), slot=0)
class CpuScaledDotProductAttention(ScaledDotProductAttention):
    def __init__(self, args) -> None:
        super().__init__(args)
        q, k, v, out, mask = args.query, args.key, args.value, args.out, args.attn_mask
        batch = self.batch_shape
        attn_batch = self.attn_shape[:-2]
        self.numel = out.numel
        self.dtype = q.dtype
        # The mask reaches the kernels as float32 (`-inf` hides): bool and
        # 16-bit masks are converted at launch into a contiguous tensor.
        self.masked = mask is not None
        self.mask_conversion = self.masked and mask.dtype != "float32"
        if self.masked:
            mask_strides = (
                _contiguous_strides(mask.shape)
                if self.mask_conversion
                else mask.strides
            )
            mask_shape = tuple(mask.shape)
            # Row and column steps (0 where the mask broadcasts).
            self.mask_steps = tuple(
                0 if mask_shape[dim] == 1 else mask_strides[dim] for dim in (-2, -1)
            )
            mask_lead, mask_lead_strides = mask_shape[:-2], mask_strides[:-2]
            self.mask_span = span(mask_shape, mask_strides)
        else:
            self.mask_steps = (0, 0)
            mask_lead, mask_lead_strides = (), ()
            self.mask_span = 0
        # The dropout noise is a contiguous float32 tensor of `attn_shape`.
        self.dropout = self.dropout_p > 0.0
        noise_strides = _contiguous_strides(self.attn_shape)
        self.noise_span = span(self.attn_shape, noise_strides) if self.dropout else 0
        self.spans = np.array(
            [
                span(out.shape, out.strides),
                span(q.shape, q.strides),
                span(k.shape, k.strides),
                span(v.shape, v.strides),
                self.mask_span,
                self.noise_span,
            ],
            dtype=np.int64,
        )
        self.sizes = np.array([self.L, self.S, self.E, self.Ev], dtype=np.int64)
        self.strides = np.array(
            [
                q.strides[-2],
                q.strides[-1],
                k.strides[-2],
                k.strides[-1],
                v.strides[-2],
                v.strides[-1],
                out.strides[-2],
                out.strides[-1],
                *self.mask_steps,
            ],
            dtype=np.int64,
        )
        if self.numel == 0:
            # Zero-size work plans nothing: per-batch offsets would be as
            # large as the (empty) batch, e.g. 2**40 entries.
            self.blas = False
            return
        self.blas = (
            not self.is_causal
            and self.L >= BLAS_MIN_ROWS
            and self.S >= BLAS_MIN_KEYS
            and self.key_ratio == self.value_ratio
            and self.E > 0
            and self.Ev > 0
        )
        if self.blas:
            # Mask and noise offsets per entry of the attention batch.
            self.attn_offsets = np.stack(
                [
                    batch_offsets(attn_batch, mask_lead, mask_lead_strides),
                    batch_offsets(attn_batch, attn_batch, noise_strides[:-2]),
                ]
            )
            attn_rows = int(np.prod(attn_batch, dtype=np.int64))
            per_row = max(attn_rows * self.S, 1)
            self.block = max(16, min(self.L, BLAS_BLOCK_SCORES // per_row))
            if self.is_causal:
                self.block = min(self.block, 128)
            self.probabilities = probability_kernel()
        else:
            self.offsets = np.stack(
                [
                    batch_offsets(batch, out.shape[:-2], out.strides[:-2]),
                    batch_offsets(batch, q.shape[:-2], q.strides[:-2]),
                    batch_offsets(batch, k.shape[:-2], k.strides[:-2], self.key_ratio),
                    batch_offsets(
                        batch, v.shape[:-2], v.strides[:-2], self.value_ratio
                    ),
                    batch_offsets(batch, mask_lead, mask_lead_strides),
                    batch_offsets(batch, attn_batch, noise_strides[:-2]),
                ]
            )
            # Under GQA the query heads of one kv head are consecutive batch
            # entries with the same key and value: one task takes them all.
            self.group = self.key_ratio if self.key_ratio == self.value_ratio else 1
            self.block_rows = max(1, BLOCK_ROWS // self.group)
            self.tasks = (int(np.prod(batch, dtype=np.int64)) // self.group) * (
                -(-self.L // self.block_rows)
            )
            self.kernel = sdpa_online_kernel(q.dtype)

    def launch(self, stream, query, key, value, attn_mask, out) -> None:
        noise = None
        if self.dropout:
            import torch

            # Exactly the draws of torch's math path (`at::dropout`):
            # `p == 1` draws nothing and zeroes the weights.
            p = self.dropout_p
            if p == 1.0:
                noise = torch.zeros(self.attn_shape, dtype=torch.float32)
            else:
                noise = torch.empty(self.attn_shape, dtype=torch.float32)
                noise.bernoulli_(1 - p)
                noise.div_(1 - p)
        if self.numel == 0:
            return
        mask = attn_mask
        if self.mask_conversion:
            import torch

            if mask.dtype == torch.bool:
                mask = torch.where(mask, 0.0, float("-inf"))
            else:
                mask = mask.float()
            mask = mask.contiguous()
        if self.blas:
            self._run_blas(query, key, value, mask, noise, out)
        else:
            self._run_online(query, key, value, mask, noise, out)

    def _run_online(self, query, key, value, mask, noise, out) -> None:
        spans = self.spans
        target = out
        if overlaps(
            out,
            int(spans[0]),
            zip((query, key, value, mask), (int(x) for x in spans[1:5])),
        ):
            target = staging_buffer(out)
        self.kernel(
            target.data_ptr(),
            query.data_ptr(),
            key.data_ptr(),
            value.data_ptr(),
            mask.data_ptr() if mask is not None else 0,
            noise.data_ptr() if noise is not None else 0,
            spans,
            self.offsets,
            self.sizes,
            self.strides,
            self.scale,
            self.is_causal,
            self.masked,
            self.dropout,
            self.block_rows,
            self.group,
            self.tasks,
        )
        if target is not out:
            out.copy_(target)

    def _run_blas(self, query, key, value, mask, noise, out) -> None:
        import torch

        q = (query.to(torch.float32) * self.scale).contiguous()
        k = key.to(torch.float32)
        v = value.to(torch.float32)
        ratio = self.key_ratio
        if ratio > 1:
            # GQA: the query heads of one kv head become rows of one matrix,
            # (kv heads, ratio * rows), so each product is a plain batched
            # GEMM and the scores keep the (heads, rows) order of the
            # attention batch.
            heads = q.shape[-3]
            q = q.view(q.shape[:-3] + (heads // ratio, ratio) + q.shape[-2:])
        keys_t = k.transpose(-1, -2)
        split = (1,) if ratio > 1 else ()
        lead = torch.broadcast_shapes(
            q.shape[:-2], k.shape[:-2] + split, v.shape[:-2] + split
        )
        result = torch.empty(lead + (self.L, self.Ev), dtype=torch.float32)
        mask_address = mask.data_ptr() if mask is not None else 0
        noise_address = noise.data_ptr() if noise is not None else 0
        m_row, m_col = self.mask_steps
        for first in range(0, self.L, self.block):
            last = min(self.L, first + self.block)
            rows = last - first
            end = min(self.S, last) if self.is_causal else self.S
            block = q[..., first:last, :]
            if ratio > 1:
                block = block.reshape(q.shape[:-3] + (ratio * rows, self.E))
            scores = torch.matmul(block, keys_t[..., :end])
            self.probabilities(
                scores.numpy().reshape(-1, rows, end),
                mask_address,
                noise_address,
                self.mask_span,
                self.noise_span,
                NO_SLOPES,
                self.attn_offsets,
                first,
                0,
                m_row,
                m_col,
                self.S,
                self.is_causal,
                self.masked,
                self.dropout,
                False,
                NO_ROUNDED,
                False,
            )
            values = torch.matmul(scores, v[..., :end, :])
            if ratio > 1:
                values = values.view(values.shape[:-2] + (ratio, rows, self.Ev))
            result[..., first:last, :] = values
        out.copy_(result.view(out.shape))

    @classmethod
    def precompile(cls) -> int:
        """Compiles the online kernel of each dtype (decode, causal prefill)
        and the softmax kernel of long non-causal queries (GEMMs)."""
        import torch

        import infini.ops

        calls = 0
        for dtype in torch_dtypes():
            for tokens, keys, causal in (
                (1, 32, False),
                (16, 16, True),
                (BLAS_MIN_ROWS, BLAS_MIN_KEYS, False),
            ):
                query = torch.zeros(1, 4, tokens, 16, dtype=dtype)
                key = torch.zeros(1, 2, keys, 16, dtype=dtype)
                out = torch.empty_like(query)
                infini.ops.scaled_dot_product_attention(
                    query,
                    key,
                    key,
                    None,
                    0.0,
                    causal,
                    None,
                    True,
                    out,
                    implementation_index=0,
                )
                calls += 1
        return calls
