"""The decoder forward pass of every model family, made of `infini.ops`
calls.

One pass serves Llama and Gemma-3 (`families.py`): what a Gemma adds is
configuration (`ModelConfig`: the FFN's activation, scaled embeddings,
sliding-window layers with their own rotary base, the query scale) and
optional weights (`LayerWeights`: per-head query and key norms, norms after
attention and after the FFN), each a guarded call in `DecoderModel.forward`.

Every step runs the model once over a flat batch of tokens: first one token
for each sequence that is decoding, then the new tokens of each sequence that
is prefilling (a whole prompt or a chunk of it). All projections, norms,
rotary embeddings, cache writes, attention and the activation are operator
calls on views of buffers allocated once, in `DecoderModel.__init__`; torch
only allocates memory and makes views. The decode rows attend through
`paged_attention_infinilm`, the prefill rows through
`paged_attention_prefill_infinilm`, both over the same paged KV cache.

A checkpoint loaded with ``load_gguf(path, quantised=True)`` keeps its
matrices as the file's GGML blocks (4-bit Q4_1 for SmolLM2): every
projection is then `ggml_mul_mat_vec_a8` (a few rows) or `ggml_mul_mat_a8`
(prefill), which read the packed blocks directly; activations stay float32.
On the CPU the blocks of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K are
interleaved once at load time (`ggml_interleave`, eight rows side by
side) and read by `ggml_mul_mat_interleaved_a8` (`InterleavedProjection`).
Gemma-3's Q4_K_M file mixes Q4_K, Q5_0, Q6_K and Q8_0 matrices, even within
one layer's query, key and value: parts of a fused projection with
different types are products of their own (`ConcatenatedProjection`).

`DecoderModel(..., device="cuda")` runs the same calls on a GPU: the weights
(float or GGML blocks), the cache and every buffer are allocated there, so
each call dispatches to the device's kernels. The scheduler writes a step's
inputs into a host buffer (pinned on CUDA) that `forward` copies to its
device twin with one `copy_`; the sampler copies the chosen tokens back with
one more. Under the Triton interpreter (``INFINI_OPS_TRITON_INTERPRET=1``)
CPU tensors stand in for the GPU and the model takes the same device path,
staging included. The CPU path (the default) stages nothing.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

import infini.ops as ops
from infini.ops.core.devices import TRITON_INTERPRETER
from infini.ops.core.recording import record

from .families import ModelConfig
from .gguf_loader import LlamaCheckpoint, QuantisedMatrix, load_gguf
from .huge_pages import move_to_huge_pages
from .kv_cache import PagedKVCache

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# What `ggml_interleave` takes (`docs/behaviour.md`, "Interleaved GGML
# weights"): the GGML codes of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and
# Q6_K, and row counts in tiles of eight.
INTERLEAVED_TYPES = (2, 3, 6, 7, 8, 12, 14)
INTERLEAVED_ROWS = 8

# Step shapes whose recorded calls a model keeps for replay (`forward`).
RECORDED_STEP_SHAPES = 16

# Quantised products of at most this many rows take the matrix-vector
# kernel (each weight block read once per row); more rows take the tiled
# matrix-matrix kernel, which unpacks each block once for several rows.
VECTOR_ROWS = 8


def rotary_cos_sin_cache(
    config: ModelConfig, max_position: int, theta: float | None = None
) -> torch.Tensor:
    """The ``(max_position, head_dim)`` table `rotary_embedding` reads: per
    position, the cosines then the sines of ``position * inv_freq``, for the
    rotary base `theta` (default: the configuration's).

    Built once at load time (a table of constants, not a step of the forward
    pass), in float32 with the same operations and rounding as transformers'
    default rotary embedding, so both models rotate by identical angles.
    """
    dim = config.head_dim
    theta = config.rope_theta if theta is None else theta
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv_freq = 1.0 / (theta**exponents)
    positions = torch.arange(max_position, dtype=torch.int64).to(torch.float32)
    angles = positions[:, None] * inv_freq[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).contiguous()


class DenseProjection:
    """``out = x @ weight.T`` with a float weight (`linear`)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        ops.linear(x, self.weight, None, out)

    def tensors(self) -> list[torch.Tensor]:
        return [self.weight]


class QuantisedProjection:
    """``out = x @ dequantize(blocks).T`` read straight from GGML blocks
    (uint8, kept on `device`)."""

    def __init__(self, matrix: QuantisedMatrix, device: torch.device) -> None:
        blocks = torch.from_numpy(np.ascontiguousarray(matrix.blocks))
        self.blocks = blocks if device.type == "cpu" else blocks.to(device)
        self.quant_type = matrix.quant_type
        self.rows = matrix.rows
        self.cols = matrix.cols

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        if x.shape[0] <= VECTOR_ROWS:
            ops.ggml_mul_mat_vec_a8(self.blocks, x, self.quant_type, self.rows, out)
        else:
            ops.ggml_mul_mat_a8(self.blocks, x, self.quant_type, self.rows, out)

    def prepared(self, on_host: bool):
        """The projection to run: on the CPU path (`on_host`; not under the
        Triton interpreter, where CPU tensors stand for a GPU's), for a type
        and row count `ggml_interleave` takes, a copy of the blocks
        interleaved (`InterleavedProjection`; the checkpoint's arrays are
        left as they are, another model may be built from them); otherwise
        this projection."""
        device = self.blocks.device.type
        if (
            not on_host
            or self.quant_type not in INTERLEAVED_TYPES
            or self.rows % INTERLEAVED_ROWS
            or not ops.GgmlInterleave.active_implementation_indices(device)
            or not ops.GgmlMulMatInterleavedA8.active_implementation_indices(device)
        ):
            return self
        interleaved = torch.empty_like(self.blocks)
        ops.ggml_interleave(self.blocks, self.quant_type, interleaved)
        return InterleavedProjection(interleaved, self.quant_type, self.rows)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The ``(rows, cols)`` float matrix of the blocks (`ggml_dequantize`,
        on the blocks' device)."""
        out = torch.empty(
            (self.rows, self.cols), dtype=dtype, device=self.blocks.device
        )
        ops.ggml_dequantize(self.blocks, self.quant_type, self.rows, self.cols, out)
        return out

    def tensors(self) -> list[torch.Tensor]:
        return [self.blocks]


class InterleavedProjection:
    """A `QuantisedProjection` whose blocks were interleaved
    (`ggml_interleave`): `ggml_mul_mat_interleaved_a8` at every token count
    (eight rows' codes per vector instead of one row's)."""

    def __init__(self, blocks: torch.Tensor, quant_type: int, rows: int) -> None:
        self.blocks = blocks
        self.quant_type = quant_type
        self.rows = rows

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        ops.ggml_mul_mat_interleaved_a8(self.blocks, x, self.quant_type, self.rows, out)

    def tensors(self) -> list[torch.Tensor]:
        return [self.blocks]


class ConcatenatedProjection:
    """Several quantised matrices of different GGML types applied to the
    same input, their outputs side by side (a fused projection whose parts
    cannot share one block matrix): each part writes its columns of `out`
    directly (the products take a row stride), so nothing is copied."""

    def __init__(self, parts: list[QuantisedProjection]) -> None:
        self.parts = parts
        self.columns = []
        start = 0
        for part in parts:
            self.columns.append(slice(start, start + part.rows))
            start += part.rows

    def __call__(self, x: torch.Tensor, out: torch.Tensor) -> None:
        for part, columns in zip(self.parts, self.columns, strict=True):
            part(x, out[:, columns])

    def tensors(self) -> list[torch.Tensor]:
        return [tensor for part in self.parts for tensor in part.tensors()]


def _fused_projection(matrices, dtype, device, on_host):
    """One projection computing the outputs of `matrices` (the same input
    features) side by side."""
    if not isinstance(matrices[0], QuantisedMatrix):
        return DenseProjection(
            _to_device_dtype(np.concatenate(matrices), dtype, device, on_host)
        )
    if len({matrix.quant_type for matrix in matrices}) == 1:
        stacked = np.concatenate([matrix.blocks for matrix in matrices])
        first = matrices[0]
        return QuantisedProjection(
            QuantisedMatrix(stacked, first.quant_type, first.cols), device
        ).prepared(on_host)
    return ConcatenatedProjection(
        [QuantisedProjection(matrix, device).prepared(on_host) for matrix in matrices]
    )


def _projection(matrix, dtype, device, on_host):
    if isinstance(matrix, QuantisedMatrix):
        return QuantisedProjection(matrix, device).prepared(on_host)
    return DenseProjection(_to_device_dtype(matrix, dtype, device, on_host))


class Layer:
    """One decoder layer's weights, fused for fewer calls: ``qkv`` stacks the
    query, key and value projections and ``gate_up`` the gate and up
    projections (the order `silu_and_mul` and `gelu_tanh_and_mul` expect).
    Projections are callables ``(x, out)``: `DenseProjection` or, for a
    quantised checkpoint, `QuantisedProjection` or `ConcatenatedProjection`.
    The optional norms (None: not in this family) are a Gemma's."""

    def __init__(
        self,
        attn_norm,
        qkv,
        o_proj,
        ffn_norm,
        gate_up,
        down_proj,
        q_norm=None,
        k_norm=None,
        post_attn_norm=None,
        post_ffn_norm=None,
    ):
        self.attn_norm = attn_norm
        self.qkv = qkv
        self.o_proj = o_proj
        self.ffn_norm = ffn_norm
        self.gate_up = gate_up
        self.down_proj = down_proj
        self.q_norm = q_norm
        self.k_norm = k_norm
        self.post_attn_norm = post_attn_norm
        self.post_ffn_norm = post_ffn_norm


def _to_device_dtype(
    array: np.ndarray, dtype: torch.dtype, device: torch.device, on_host: bool
) -> torch.Tensor:
    """A contiguous tensor of `dtype` on `device` holding `array` (float32).

    On the CPU path bfloat16 is rounded by the `cast` operator. On the
    device path (`on_host` False) torch converts on the host before the
    single copy to the device: loading is not a step, and a CUDA-like build
    runs no operator on host tensors."""
    source = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    if not on_host:
        return source.to(dtype).to(device)
    if dtype == torch.float32:
        return source
    target = torch.empty(source.shape, dtype=dtype)
    ops.cast(source, target)
    return target


class StepInputs:
    """The int32 inputs of a step, views of one buffer: `token_ids`,
    `positions` and `slot_mapping` per token row, the decode and prefill
    block tables and lengths, `cum_seq_lens_q` and `logit_rows`.

    The scheduler writes them (through NumPy views) on the host; on the
    device path the model copies the whole buffer to its device twin with
    one `copy_`. Each view starts on a 64-byte boundary so the kernels see
    aligned pointers."""

    ALIGN = 16  # int32 elements: 64 bytes

    def __init__(
        self,
        max_tokens: int,
        max_seqs: int,
        max_blocks_per_seq: int,
        device: torch.device,
        pin_memory: bool = False,
    ) -> None:
        shapes = {
            "token_ids": (max_tokens,),
            "positions": (max_tokens,),
            "slot_mapping": (max_tokens,),
            "decode_block_tables": (max_seqs, max_blocks_per_seq),
            "decode_seq_lens": (max_seqs,),
            "prefill_block_tables": (max_seqs, max_blocks_per_seq),
            "prefill_seq_lens": (max_seqs,),
            "cum_seq_lens_q": (max_seqs + 1,),
            "logit_rows": (max_seqs,),
        }
        spans, total = {}, 0
        for name, shape in shapes.items():
            size = int(np.prod(shape))
            spans[name] = (total, size, shape)
            total += -(-size // self.ALIGN) * self.ALIGN
        self.buffer = torch.zeros(
            total, dtype=torch.int32, device=device, pin_memory=pin_memory
        )
        for name, (start, size, shape) in spans.items():
            setattr(self, name, self.buffer[start : start + size].view(shape))


class DecoderModel:
    """A decoder-only model of any family in `families.FAMILIES` (Llama,
    Gemma-3), with its paged KV cache and step buffers.

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
    - `device`: where the weights, cache and buffers live and the operators
      run (``"cpu"``, the default, or a CUDA-like torch device such as
      ``"cuda"``). Off the CPU, `host_inputs` (what the scheduler writes)
      differs from `inputs` (what the step reads): `forward` copies one to
      the other, and `wait_inputs` says when the host side may be rewritten.
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
        device: str | torch.device = "cpu",
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
        self.device = device = torch.device(device)
        # The device path: a CUDA-like device, or CPU tensors standing in for
        # one under the Triton interpreter (which then runs every operator,
        # so the CPU-only load-time conversions are done by torch instead).
        self.staged = device.type != "cpu" or TRITON_INTERPRETER
        on_host = not self.staged
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
        self.scale = config.query_scale

        if checkpoint.quantised and dtype != torch.float32:
            raise ValueError(
                "a quantised checkpoint runs with float32 activations, got "
                f"`dtype` {dtype}."
            )

        def weight(array):
            return _to_device_dtype(array, dtype, device, on_host)

        def optional(array):
            return None if array is None else weight(array)

        embed = checkpoint.embed_tokens
        if isinstance(embed, QuantisedMatrix):
            # Dequantised once here: a step reads one row per token of it;
            # its blocks stay the tied output projection's weight.
            embed_blocks = QuantisedProjection(embed, device)
            self.embed_tokens = embed_blocks.dequantize(dtype)
        else:
            self.embed_tokens = weight(embed)
        self.layers = [
            Layer(
                attn_norm=weight(layer.attn_norm),
                qkv=_fused_projection(
                    [layer.q_proj, layer.k_proj, layer.v_proj], dtype, device, on_host
                ),
                o_proj=_projection(layer.o_proj, dtype, device, on_host),
                ffn_norm=weight(layer.ffn_norm),
                gate_up=_fused_projection(
                    [layer.gate_proj, layer.up_proj], dtype, device, on_host
                ),
                down_proj=_projection(layer.down_proj, dtype, device, on_host),
                q_norm=optional(layer.q_norm),
                k_norm=optional(layer.k_norm),
                post_attn_norm=optional(layer.post_attn_norm),
                post_ffn_norm=optional(layer.post_ffn_norm),
            )
            for layer in checkpoint.layers
        ]
        if config.hidden_activation not in ("silu", "gelu_tanh"):
            raise ValueError(
                "`hidden_activation` must be 'silu' or 'gelu_tanh', got "
                f"{config.hidden_activation!r}."
            )
        self.gelu = config.hidden_activation == "gelu_tanh"
        # transformers multiplies by the square root rounded to the compute
        # dtype (25.25 in bfloat16 for a hidden size of 640).
        self.embed_scale = None
        if config.scale_embeddings:
            scale = torch.tensor([config.hidden_size**0.5], dtype=torch.float32)
            self.embed_scale = scale.to(dtype).to(device)
        self.final_norm = weight(checkpoint.final_norm)
        if not config.tie_word_embeddings:
            self.lm_head = _projection(checkpoint.lm_head, dtype, device, on_host)
        elif isinstance(embed, QuantisedMatrix):
            self.lm_head = embed_blocks.prepared(on_host)
        else:
            self.lm_head = DenseProjection(self.embed_tokens)
        if on_host:
            # The weights a step reads whole, in 2 MiB pages (`huge_pages`).
            move_to_huge_pages(self.streamed_weights())
        # One rotary table per distinct base (a Gemma's local and global
        # layers differ); each layer keeps its table and attention window.
        tables = {}
        for index, layer in enumerate(self.layers):
            theta = config.layer_rope_theta(index)
            if theta not in tables:
                tables[theta] = rotary_cos_sin_cache(
                    config, self.max_seq_len, theta
                ).to(device)
            layer.cos_sin = tables[theta]
            window = config.layer_window(index)
            layer.attention_options = {"window": window} if window else {}

        max_blocks_per_seq = -(-self.max_seq_len // block_size)
        if num_blocks is None:
            num_blocks = max_seqs * max_blocks_per_seq
        self.cache = PagedKVCache(
            config.num_layers,
            num_blocks,
            kv_heads,
            block_size,
            head_dim,
            dtype,
            device,
        )
        self.max_blocks_per_seq = max_blocks_per_seq

        # Step inputs: the scheduler writes `host_inputs` through NumPy
        # views; the step reads `inputs`. On the CPU path they are one object.
        self.inputs = StepInputs(max_tokens, max_seqs, max_blocks_per_seq, device)
        self.host_inputs = self.inputs
        self._inputs_copied = None
        if self.staged:
            pinned = device.type == "cuda"
            self.host_inputs = StepInputs(
                max_tokens, max_seqs, max_blocks_per_seq, torch.device("cpu"), pinned
            )
            # A non-blocking copy from pinned memory reads the host buffer
            # when the stream reaches it: `wait_inputs` waits for this event
            # before the host buffer is rewritten.
            self._non_blocking = pinned
            if pinned:
                self._inputs_copied = torch.cuda.Event()

        # Activations.
        hidden = config.hidden_size

        def empty(*shape):
            return torch.empty(shape, dtype=dtype, device=device)

        self.residual = empty(max_tokens, hidden)
        self.hidden = empty(max_tokens, hidden)
        self.qkv = empty(max_tokens, self.q_size + 2 * self.kv_size)
        self.attention = empty(max_tokens, heads, head_dim)
        self.gate_up = empty(max_tokens, 2 * config.intermediate_size)
        self.activation = empty(max_tokens, config.intermediate_size)
        self.last_hidden = empty(max_seqs, hidden)
        self.logits = empty(max_seqs, config.vocab_size)
        self._all_logits = None
        # Replaying recorded steps (`forward`): not under `torch.compile`,
        # whose graph already holds the calls.
        self.replay = not compile
        self._recordings: dict[tuple, tuple] = {}
        step = self.forward
        if compile:
            # The step counts are symbolic (`dynamic`), so one graph serves
            # every step shape beyond the 0 and 1 Dynamo specialises on.
            step = torch.compile(
                self._run_step,
                backend="inductor" if compile is True else compile,
                fullgraph=True,
                dynamic=True,
            )
        if self.staged:
            # The copy of the inputs runs before the (maybe compiled) step.
            self._step = step
            self.forward = self._staged_forward
        elif compile:
            self.forward = step

    def streamed_weights(self) -> list[torch.Tensor]:
        """The weights a step reads whole: every layer's matrices and
        norms, the final norm and the output head (of the embedding table a
        step reads one row per token, unless it is the head)."""
        weights = []
        for layer in self.layers:
            for name, part in vars(layer).items():
                if name in ("cos_sin", "attention_options") or part is None:
                    continue
                weights += [part] if isinstance(part, torch.Tensor) else part.tensors()
        return [*weights, self.final_norm, *self.lm_head.tensors()]

    def weight_bytes_per_token(self) -> int:
        """Bytes of weights one decode step reads (every matrix and norm
        once, as stored: packed blocks for a quantised checkpoint; of the
        embedding table only one row per token)."""
        return sum(t.numel() * t.element_size() for t in self.streamed_weights())

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
        listed in `logit_rows`, or with `all_logits` those of every row.

        The inputs are the fields of `inputs` (`StepInputs`); on the device
        path the caller writes `host_inputs` and this copies them first.

        The first step of each shape (the four counts and `all_logits`)
        records its operator calls (`infini.ops.core.recording`); later
        steps of that shape replay them, launching each operator on the
        same buffers and views directly, which skips the dispatcher's
        binding and cache lookup and this method's Python (about 3 µs per
        call, a few hundred calls per step). The calls, tensors and scalars
        of a step depend on its shape alone: the step's values travel in
        the buffers. Set `replay` False to run every step afresh."""
        shape = (num_tokens, num_decode, num_prefill, num_logits, all_logits)
        if not self.replay:
            return self._run_step(*shape)
        recorded = self._recordings.get(shape)
        if recorded is not None and recorded[0].thread == threading.get_ident():
            recording, logits = recorded
            recording.replay()
            return logits
        with record() as recording:
            logits = self._run_step(*shape)
        if recording.complete:
            if len(self._recordings) >= RECORDED_STEP_SHAPES:
                # Prefill chunks come in many shapes; decode steps in few.
                self._recordings.clear()
            self._recordings[shape] = (recording, logits)
        return logits

    def _run_step(self, num_tokens, num_decode, num_prefill, num_logits, all_logits):
        """One step's operator calls (`forward`, without replay)."""
        config = self.config
        eps = config.rms_norm_eps
        heads, kv_heads = config.num_heads, config.num_kv_heads
        head_dim = config.head_dim
        tokens = num_tokens
        q_size, kv_size = self.q_size, self.kv_size

        inputs = self.inputs
        token_ids = inputs.token_ids[:tokens]
        positions = inputs.positions[:tokens]
        slot_mapping = inputs.slot_mapping[:tokens]
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
            decode_tables = inputs.decode_block_tables[:decode]
            decode_lens = inputs.decode_seq_lens[:decode]
        if num_prefill:
            prefill_query = query[decode:]
            prefill_out = attention[decode:]
            prefill_tables = inputs.prefill_block_tables[:num_prefill]
            prefill_lens = inputs.prefill_seq_lens[:num_prefill]
            prefill_cum = inputs.cum_seq_lens_q[: num_prefill + 1]

        ops.embedding(token_ids, self.embed_tokens, residual)
        if self.embed_scale is not None:
            ops.mul(residual, self.embed_scale, residual)
        ops.rms_norm(residual, self.layers[0].attn_norm, eps, hidden)
        scale = self.scale
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            k_cache, v_cache = self.cache.layer_caches(index)
            window = layer.attention_options
            layer.qkv(hidden, qkv)
            if layer.q_norm is not None:
                # Per-head norms: the last dimension of the head views.
                ops.rms_norm(query, layer.q_norm, eps, query)
                ops.rms_norm(key, layer.k_norm, eps, key)
            ops.rotary_embedding(positions, query, key, layer.cos_sin, head_dim, True)
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
                    **window,
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
                    **window,
                )
            layer.o_proj(attention_flat, hidden)
            if layer.post_attn_norm is not None:
                ops.rms_norm(hidden, layer.post_attn_norm, eps, hidden)
            ops.fused_add_rms_norm(hidden, residual, layer.ffn_norm, eps)
            layer.gate_up(hidden, gate_up)
            if self.gelu:
                ops.gelu_tanh_and_mul(gate_up, activation)
            else:
                ops.silu_and_mul(gate_up, activation)
            layer.down_proj(activation, hidden)
            if layer.post_ffn_norm is not None:
                ops.rms_norm(hidden, layer.post_ffn_norm, eps, hidden)
            next_norm = (
                self.final_norm if index == last else self.layers[index + 1].attn_norm
            )
            ops.fused_add_rms_norm(hidden, residual, next_norm, eps)

        if all_logits:
            if self._all_logits is None:
                self._all_logits = torch.empty(
                    (self.max_tokens, config.vocab_size),
                    dtype=self.dtype,
                    device=self.device,
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
            ops.embedding(inputs.logit_rows[:num_logits], hidden, last_hidden)
            self.lm_head(last_hidden, logits)
        return logits

    def _staged_forward(
        self,
        num_tokens: int,
        num_decode: int,
        num_prefill: int,
        num_logits: int,
        all_logits: bool = False,
    ) -> torch.Tensor:
        """`forward` on the device path: one copy of the host-written inputs
        to the device (non-blocking from pinned memory), then the step."""
        self.inputs.buffer.copy_(
            self.host_inputs.buffer, non_blocking=self._non_blocking
        )
        if self._inputs_copied is not None:
            self._inputs_copied.record()
        return self._step(num_tokens, num_decode, num_prefill, num_logits, all_logits)

    def wait_inputs(self) -> None:
        """Blocks until the last step's copy of `host_inputs` has run, so the
        host buffer may be rewritten (at once on the CPU path, and when the
        step's results were read back since)."""
        if self._inputs_copied is not None:
            self._inputs_copied.synchronize()


def load_model(
    path,
    weights: str = "float32",
    **options,
) -> DecoderModel:
    """The model in the GGUF file `path`, of whichever family its
    ``general.architecture`` names (`families.SUPPORTED_ARCHITECTURES`;
    another raises an error listing them). `weights`: ``"float32"`` or
    ``"bfloat16"`` (dequantised), or ``"q4"`` (the file's GGML blocks, read
    by the `ggml_*` products; float32 activations). `options` go to
    `DecoderModel` (`max_seqs`, `max_seq_len`, `device`, ...)."""
    if weights not in (*DTYPES, "q4"):
        raise ValueError(
            f"`weights` must be one of {[*DTYPES, 'q4']}, got {weights!r}."
        )
    quantised = weights == "q4"
    checkpoint = load_gguf(path, quantised=quantised)
    return DecoderModel(checkpoint, "float32" if quantised else weights, **options)
