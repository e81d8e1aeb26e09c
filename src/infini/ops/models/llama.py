"""A Llama forward pass made of `infini.ops` calls.

Every step runs the model once over a flat batch of tokens: first one token
for each sequence that is decoding, then the new tokens of each sequence that
is prefilling (a whole prompt or a chunk of it). All projections, norms,
rotary embeddings, cache writes, attention and the activation are operator
calls on views of buffers allocated once, in `LlamaModel.__init__`; torch
only allocates memory and makes views. The decode rows attend through
`paged_attention_infinilm`, the prefill rows through
`paged_attention_prefill_infinilm`, both over the same paged KV cache.
"""

from __future__ import annotations

import numpy as np
import torch

import infini.ops as ops

from .gguf_loader import LlamaCheckpoint, LlamaConfig
from .kv_cache import PagedKVCache

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


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


class Layer:
    """One decoder layer's weights, fused for fewer calls: ``qkv`` stacks the
    query, key and value projections and ``gate_up`` the gate and up
    projections (the order `silu_and_mul` expects)."""

    def __init__(self, attn_norm, qkv, o_proj, ffn_norm, gate_up, down_proj):
        self.attn_norm = attn_norm
        self.qkv = qkv
        self.o_proj = o_proj
        self.ffn_norm = ffn_norm
        self.gate_up = gate_up
        self.down_proj = down_proj


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

        def weight(array):
            return _to_device_dtype(array, dtype)

        self.embed_tokens = weight(checkpoint.embed_tokens)
        self.layers = [
            Layer(
                attn_norm=weight(layer.attn_norm),
                qkv=weight(np.concatenate((layer.q_proj, layer.k_proj, layer.v_proj))),
                o_proj=weight(layer.o_proj),
                ffn_norm=weight(layer.ffn_norm),
                gate_up=weight(np.concatenate((layer.gate_proj, layer.up_proj))),
                down_proj=weight(layer.down_proj),
            )
            for layer in checkpoint.layers
        ]
        self.final_norm = weight(checkpoint.final_norm)
        self.lm_head = (
            self.embed_tokens
            if config.tie_word_embeddings
            else weight(checkpoint.lm_head)
        )
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

    def weight_bytes_per_token(self) -> int:
        """Bytes of weights one decode step reads (every matrix and norm
        once; of the embedding table only one row per token)."""
        total = 0
        for layer in self.layers:
            for tensor in vars(layer).values():
                total += tensor.numel() * tensor.element_size()
        total += self.final_norm.numel() * self.final_norm.element_size()
        total += self.lm_head.numel() * self.lm_head.element_size()
        return total

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
            ops.linear(hidden, layer.qkv, None, qkv)
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
            ops.linear(attention_flat, layer.o_proj, None, hidden)
            ops.fused_add_rms_norm(hidden, residual, layer.ffn_norm, eps)
            ops.linear(hidden, layer.gate_up, None, gate_up)
            ops.silu_and_mul(gate_up, activation)
            ops.linear(activation, layer.down_proj, None, hidden)
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
            ops.linear(hidden, self.lm_head, None, logits)
            return logits
        last_hidden = self.last_hidden[:num_logits]
        logits = self.logits[:num_logits]
        if num_logits == tokens:
            ops.linear(hidden, self.lm_head, None, logits)
        else:
            # `embedding` gathers rows: the last token of each sequence.
            ops.embedding(self.logit_rows[:num_logits], hidden, last_hidden)
            ops.linear(last_hidden, self.lm_head, None, logits)
        return logits
