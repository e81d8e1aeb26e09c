"""A Llama forward pass made of `infini.ops` calls.

Every step runs the model once over a flat batch of tokens: first one token
for each sequence that is decoding, then the new tokens of each sequence that
is prefilling (a whole prompt or a chunk of it). All projections, norms,
rotary embeddings, cache writes, attention and the activation are operator
calls on views of buffers allocated once, in `LlamaModel.__init__`; torch
only allocates memory and makes views. The decode rows attend through
`paged_attention_infinilm`, the prefill rows through
`paged_attention_prefill_infinilm`, both over the same paged KV cache.

A checkpoint loaded with ``load_gguf(path, quantised=True)`` keeps its
matrices as the file's GGML blocks (4-bit Q4_1 for SmolLM2): every
projection is then `ggml_mul_mat_vec_a8` (a few rows) or `ggml_mul_mat_a8`
(prefill), which read the packed blocks directly; activations stay float32.
"""

from __future__ import annotations

import numpy as np
import torch

import infini.ops as ops

from .gguf_loader import LlamaCheckpoint, LlamaConfig, QuantisedMatrix
from .kv_cache import PagedKVCache

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# Quantised products of at most this many rows take the matrix-vector
# kernel (each weight block read once per row); more rows take the tiled
# matrix-matrix kernel, which unpacks each block once for several rows.
VECTOR_ROWS = 8


def rotary_cos_sin_cache(config: LlamaConfig, max_position: int) -> torch.Tensor:
    """The ``(max_position, head_dim)`` table `rotary_embedding` reads: per
    position, the cosines then the sines of ``position * inv_freq``.

    Built once at load time (a table of constants, not a step of the forward
    pass), in float32 with the same operations and rounding as transformers'
    Llama rotary embedding, so both models rotate by identical angles.
    """
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    positions = torch.arange(max_position, dtype=torch.int64).to(torch.float32)
    angles = positions[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).contiguous()


class DenseProjection:
    """``out = x @ weight.T`` with a float weight (`linear`)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        ops.linear(x, self.weight, None, out)

    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()


class QuantisedProjection:
    """``out = x @ dequantize(blocks).T`` read straight from GGML blocks."""

    def __init__(self, matrix: QuantisedMatrix) -> None:
        self.blocks = torch.from_numpy(np.ascontiguousarray(matrix.blocks))
        self.quant_type = matrix.quant_type
        self.rows = matrix.rows
        self.cols = matrix.cols

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        if x.shape[0] <= VECTOR_ROWS:
            ops.ggml_mul_mat_vec_a8(self.blocks, x, self.quant_type, self.rows, out)
        else:
            ops.ggml_mul_mat_a8(self.blocks, x, self.quant_type, self.rows, out)

    def nbytes(self) -> int:
        return self.blocks.numel()


class ConcatenatedProjection:
    """Several quantised matrices of different GGML types applied to the
    same input, their outputs side by side (a fused projection whose parts
    cannot share one block matrix)."""

    def __init__(self, parts: list[QuantisedProjection], max_tokens: int, dtype):
        self.parts = parts
        self.outputs = [
            torch.empty((max_tokens, part.rows), dtype=dtype) for part in parts
        ]

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        tokens = x.shape[0]
        outputs = [output[:tokens] for output in self.outputs]
        for part, output in zip(self.parts, outputs, strict=True):
            part(x, output)
        ops.cat(outputs, 1, out)

    def nbytes(self) -> int:
        return sum(part.nbytes() for part in self.parts)


def _fused_projection(matrices, dtype, max_tokens):
    """One projection computing the outputs of `matrices` (the same input
    features) side by side."""
    if not isinstance(matrices[0], QuantisedMatrix):
        return DenseProjection(_to_device_dtype(np.concatenate(matrices), dtype))
    if len({matrix.quant_type for matrix in matrices}) == 1:
        stacked = np.concatenate([matrix.blocks for matrix in matrices])
        first = matrices[0]
        return QuantisedProjection(
            QuantisedMatrix(stacked, first.quant_type, first.cols)
        )
    parts = [QuantisedProjection(matrix) for matrix in matrices]
    return ConcatenatedProjection(parts, max_tokens, dtype)


def _projection(matrix, dtype):
    if isinstance(matrix, QuantisedMatrix):
        return QuantisedProjection(matrix)
    return DenseProjection(_to_device_dtype(matrix, dtype))


class Layer:
    """One decoder layer's weights, fused for fewer calls: ``qkv`` stacks the
    query, key and value projections and ``gate_up`` the gate and up
    projections (the order `silu_and_mul` expects). Projections are
    callables ``(x, out)``: `DenseProjection` or, for a quantised checkpoint,
    `QuantisedProjection`."""

    def __init__(self, attn_norm, qkv, o_proj, ffn_norm, gate_up, down_proj):
        self.attn_norm = attn_norm
        self.qkv = qkv
        self.o_proj = o_proj
        self.ffn_norm = ffn_norm
        self.gate_up = gate_up
        self.down_proj = down_proj


def _embedding_table(table, dtype: torch.dtype) -> torch.Tensor:
    """The float table `embedding` gathers rows from. A quantised table is
    dequantised once here by `ggml_dequantize` (a step reads one row per
    token of it; its blocks stay the tied output projection's weight)."""
    if not isinstance(table, QuantisedMatrix):
        return _to_device_dtype(table, dtype)
    blocks = torch.from_numpy(np.ascontiguousarray(table.blocks))
    out = torch.empty((table.rows, table.cols), dtype=dtype)
    ops.ggml_dequantize(blocks, table.quant_type, table.rows, table.cols, out)
    return out


def _to_device_dtype(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous tensor of `dtype` holding `array` (float32); bfloat16
    is rounded by the `cast` operator."""
    source = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    if dtype == torch.float32:
        return source
    target = torch.empty(source.shape, dtype=dtype)
    ops.cast(source, target)
    return target


class LlamaModel:
    """A Llama with its paged KV cache and step buffers.

    - `max_tokens`: tokens per step (decode rows plus prefill rows); longer
      prompts are prefilled in chunks.
    - `max_seqs`: sequences per step.
    - `max_seq_len`: the longest sequence (prompt plus output) a sequence may
      reach; `num_blocks` defaults to enough blocks for `max_seqs` such
      sequences.
    - `compile`: run `forward` under ``torch.compile(fullgraph=True,
      dynamic=True)``; True uses the default backend (Inductor), a string
      names another (``"aot_eager"``). Every operator call is then a node of
      the graph (a `torch.ops.infini` custom op); the tokens are the same.
    """

    def __init__(
        self,
        checkpoint: LlamaCheckpoint,
        dtype: str | torch.dtype = "float32",
        *,
        max_tokens: int = 512,
        max_seqs: int = 8,
        max_seq_len: int = 2048,
        block_size: int = 16,
        num_blocks: int | None = None,
        compile: bool | str = False,
    ) -> None:
        if isinstance(dtype, str):
            if dtype not in DTYPES:
                raise ValueError(
                    f"`dtype` must be one of {sorted(DTYPES)}, got {dtype!r}."
                )
            dtype = DTYPES[dtype]
        config = checkpoint.config
        self.config = config
        self.dtype = dtype
        self.max_tokens = max_tokens
        self.max_seqs = max_seqs
        self.max_seq_len = min(max_seq_len, config.max_position)
        heads, kv_heads, head_dim = (
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
        )
        self.q_size = heads * head_dim
        self.kv_size = kv_heads * head_dim
        self.scale = head_dim**-0.5

        if checkpoint.quantised and dtype != torch.float32:
            raise ValueError(
                "a quantised checkpoint runs with float32 activations, got "
                f"`dtype` {dtype}."
            )

        def weight(array):
            return _to_device_dtype(array, dtype)

        self.embed_tokens = _embedding_table(checkpoint.embed_tokens, dtype)
        self.layers = [
            Layer(
                attn_norm=weight(layer.attn_norm),
                qkv=_fused_projection(
                    [layer.q_proj, layer.k_proj, layer.v_proj], dtype, max_tokens
                ),
                o_proj=_projection(layer.o_proj, dtype),
                ffn_norm=weight(layer.ffn_norm),
                gate_up=_fused_projection(
                    [layer.gate_proj, layer.up_proj], dtype, max_tokens
                ),
                down_proj=_projection(layer.down_proj, dtype),
            )
            for layer in checkpoint.layers
        ]
        self.final_norm = weight(checkpoint.final_norm)
        if not config.tie_word_embeddings:
            self.lm_head = _projection(checkpoint.lm_head, dtype)
        elif isinstance(checkpoint.embed_tokens, QuantisedMatrix):
            self.lm_head = QuantisedProjection(checkpoint.embed_tokens)
        else:
            self.lm_head = DenseProjection(self.embed_tokens)
        self.cos_sin_cache = rotary_cos_sin_cache(config, self.max_seq_len)

        max_blocks_per_seq = -(-self.max_seq_len // block_size)
        if num_blocks is None:
            num_blocks = max_seqs * max_blocks_per_seq
        self.cache = PagedKVCache(
            config.num_layers, num_blocks, kv_heads, block_size, head_dim, dtype
        )
        self.max_blocks_per_seq = max_blocks_per_seq

        # Step inputs, written by the scheduler through their NumPy views.
        index = torch.int32
        self.token_ids = torch.zeros(max_tokens, dtype=index)
        self.positions = torch.zeros(max_tokens, dtype=index)
        self.slot_mapping = torch.zeros(max_tokens, dtype=index)
        self.decode_block_tables = torch.zeros(
            (max_seqs, max_blocks_per_seq), dtype=index
        )
        self.decode_seq_lens = torch.zeros(max_seqs, dtype=index)
        self.prefill_block_tables = torch.zeros(
            (max_seqs, max_blocks_per_seq), dtype=index
        )
        self.prefill_seq_lens = torch.zeros(max_seqs, dtype=index)
        self.cum_seq_lens_q = torch.zeros(max_seqs + 1, dtype=index)
        self.logit_rows = torch.zeros(max_seqs, dtype=index)

        # Activations.
        hidden = config.hidden_size
        self.residual = torch.empty((max_tokens, hidden), dtype=dtype)
        self.hidden = torch.empty((max_tokens, hidden), dtype=dtype)
        self.qkv = torch.empty(
            (max_tokens, self.q_size + 2 * self.kv_size), dtype=dtype
        )
        self.attention = torch.empty((max_tokens, heads, head_dim), dtype=dtype)
        self.gate_up = torch.empty(
            (max_tokens, 2 * config.intermediate_size), dtype=dtype
        )
        self.activation = torch.empty(
            (max_tokens, config.intermediate_size), dtype=dtype
        )
        self.last_hidden = torch.empty((max_seqs, hidden), dtype=dtype)
        self.logits = torch.empty((max_seqs, config.vocab_size), dtype=dtype)
        self._all_logits = None
        if compile:
            # The step counts are symbolic (`dynamic`), so one graph serves
            # every step shape beyond the 0 and 1 Dynamo specialises on.
            self.forward = torch.compile(
                self.forward,
                backend="inductor" if compile is True else compile,
                fullgraph=True,
                dynamic=True,
            )

    def weight_bytes_per_token(self) -> int:
        """Bytes of weights one decode step reads (every matrix and norm
        once, as stored: packed blocks for a quantised checkpoint; of the
        embedding table only one row per token)."""
        total = 0
        for layer in self.layers:
            for part in vars(layer).values():
                if isinstance(part, torch.Tensor):
                    total += part.numel() * part.element_size()
                else:
                    total += part.nbytes()
        total += self.final_norm.numel() * self.final_norm.element_size()
        return total + self.lm_head.nbytes()

    def forward(
        self,
        num_tokens: int,
        num_decode: int,
        num_prefill: int,
        num_logits: int,
        all_logits: bool = False,
    ) -> torch.Tensor:
        """Runs one step over the inputs the caller wrote: `num_tokens` rows
        of `token_ids`, `positions` and `slot_mapping`, the first
        `num_decode` being one decode token per sequence (described by the
        first `num_decode` rows of `decode_block_tables` / `decode_seq_lens`),
        the rest the new tokens of `num_prefill` prefilling sequences (the
        `prefill_*` tables and `cum_seq_lens_q`, counted from the first
        prefill row). Returns the ``(num_logits, vocab)`` logits of the rows
        listed in `logit_rows`, or with `all_logits` those of every row."""
        config = self.config
        eps = config.rms_norm_eps
        heads, kv_heads = config.num_heads, config.num_kv_heads
        head_dim = config.head_dim
        tokens = num_tokens
        q_size, kv_size = self.q_size, self.kv_size

        token_ids = self.token_ids[:tokens]
        positions = self.positions[:tokens]
        slot_mapping = self.slot_mapping[:tokens]
        residual = self.residual[:tokens]
        hidden = self.hidden[:tokens]
        qkv = self.qkv[:tokens]
        query = qkv[:, :q_size].view(tokens, heads, head_dim)
        key = qkv[:, q_size : q_size + kv_size].view(tokens, kv_heads, head_dim)
        value = qkv[:, q_size + kv_size :].view(tokens, kv_heads, head_dim)
        attention = self.attention[:tokens]
        attention_flat = attention.view(tokens, heads * head_dim)
        gate_up = self.gate_up[:tokens]
        activation = self.activation[:tokens]

        decode = num_decode
        if decode:
            decode_query = query[:decode]
            decode_out = attention[:decode]
            decode_tables = self.decode_block_tables[:decode]
            decode_lens = self.decode_seq_lens[:decode]
        if num_prefill:
            prefill_query = query[decode:]
            prefill_out = attention[decode:]
            prefill_tables = self.prefill_block_tables[:num_prefill]
            prefill_lens = self.prefill_seq_lens[:num_prefill]
            prefill_cum = self.cum_seq_lens_q[: num_prefill + 1]

        ops.embedding(token_ids, self.embed_tokens, residual)
        ops.rms_norm(residual, self.layers[0].attn_norm, eps, hidden)
        cos_sin, scale = self.cos_sin_cache, self.scale
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            k_cache, v_cache = self.cache.layer_caches(index)
            layer.qkv(hidden, qkv)
            ops.rotary_embedding(positions, query, key, cos_sin, head_dim, True)
            ops.paged_caching_infinilm(key, value, slot_mapping, k_cache, v_cache)
            if decode:
                ops.paged_attention_infinilm(
                    decode_query,
                    k_cache,
                    v_cache,
                    decode_tables,
                    decode_lens,
                    None,
                    scale,
                    decode_out,
                )
            if num_prefill:
                ops.paged_attention_prefill_infinilm(
                    prefill_query,
                    k_cache,
                    v_cache,
                    prefill_tables,
                    prefill_lens,
                    prefill_cum,
                    None,
                    scale,
                    prefill_out,
                )
            layer.o_proj(attention_flat, hidden)
            ops.fused_add_rms_norm(hidden, residual, layer.ffn_norm, eps)
            layer.gate_up(hidden, gate_up)
            ops.silu_and_mul(gate_up, activation)
            layer.down_proj(activation, hidden)
            next_norm = (
                self.final_norm if index == last else self.layers[index + 1].attn_norm
            )
            ops.fused_add_rms_norm(hidden, residual, next_norm, eps)

        if all_logits:
            if self._all_logits is None:
                self._all_logits = torch.empty(
                    (self.max_tokens, config.vocab_size), dtype=self.dtype
                )
            logits = self._all_logits[:tokens]
            self.lm_head(hidden, logits)
            return logits
        last_hidden = self.last_hidden[:num_logits]
        logits = self.logits[:num_logits]
        if num_logits == tokens:
            self.lm_head(hidden, logits)
        else:
            # `embedding` gathers rows: the last token of each sequence.
            ops.embedding(self.logit_rows[:num_logits], hidden, last_hidden)
            self.lm_head(last_hidden, logits)
        return logits
