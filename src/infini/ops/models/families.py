"""The model families the runner builds, keyed by a GGUF file's
``general.architecture``.

A family says how to read a file's metadata into a `ModelConfig` and what
the architecture implies beyond the metadata: facts that llama.cpp and
transformers know from the architecture's name, not from the file (Gemma-3's
local rotary base and one-in-six global layers, its GELU(tanh) FFN, its
embeddings scaled by the square root of the hidden size). Everything else
differs between families only through the tensors a file holds (a Gemma has
per-head query and key norms and norms after attention and after the FFN),
and one forward pass (`DecoderModel`) serves them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelConfig:
    """The hyper-parameters of a decoder-only model.

    The first fields are those of a Llama. The rest default to a Llama's
    behaviour and describe what other families change:

    - `hidden_activation`: the gated FFN's activation, ``"silu"``
      (`silu_and_mul`) or ``"gelu_tanh"`` (`gelu_tanh_and_mul`).
    - `scale_embeddings`: multiply the embeddings by ``sqrt(hidden_size)``
      (rounded to the compute dtype first, as transformers does).
    - `sliding_window`, `sliding_window_pattern`: with a pattern ``n > 0``
      every ``n``-th layer (index ``n - 1``, ``2n - 1``, ...) is global and
      the others attend to their last `sliding_window` positions only.
    - `rope_local_theta`: the rotary base of those local layers (None: the
      global `rope_theta`).
    - `query_pre_attn_scalar`: attention scores are scaled by its inverse
      square root (None: `head_dim`'s).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position: int
    tie_word_embeddings: bool = True
    eos_token_id: int | None = None
    architecture: str = "llama"
    hidden_activation: str = "silu"
    scale_embeddings: bool = False
    sliding_window: int = 0
    sliding_window_pattern: int = 0
    rope_local_theta: float | None = None
    query_pre_attn_scalar: float | None = None

    def is_local(self, layer: int) -> bool:
        """Whether `layer` attends through the sliding window."""
        pattern = self.sliding_window_pattern
        return self.sliding_window > 0 and pattern > 0 and (layer + 1) % pattern != 0

    def layer_window(self, layer: int) -> int:
        """The `window` argument of `layer`'s attention (0: every position)."""
        return self.sliding_window if self.is_local(layer) else 0

    def layer_rope_theta(self, layer: int) -> float:
        if self.is_local(layer) and self.rope_local_theta is not None:
            return self.rope_local_theta
        return self.rope_theta

    @property
    def query_scale(self) -> float:
        scalar = self.query_pre_attn_scalar or self.head_dim
        return scalar**-0.5


@dataclass(frozen=True)
class ModelFamily:
    """What one ``general.architecture`` means to the runner.

    - `facts`: `ModelConfig` fields the architecture fixes (not stored in
      the file).
    - `head_dim_key`: the metadata key (after the architecture's prefix)
      holding the head size; without it, ``hidden / heads``.
    - `permuted_rotary`: llama.cpp's converter reorders the query and key
      rows of this architecture for its interleaved rotary embedding (it
      does for Llama, not for Gemma), so the loader restores the Hugging
      Face order.
    - `optional_norms`: the per-layer norm tensors this family adds, by
      `LayerWeights` field (GGUF names after ``blk.N.``).
    """

    facts: dict = field(default_factory=dict)
    head_dim_key: str = "rope.dimension_count"
    permuted_rotary: bool = True
    optional_norms: dict = field(default_factory=dict)
    facts_from_metadata: Callable[[Callable], dict] | None = None


def _gemma3_metadata(read: Callable) -> dict:
    # The window is in the file; the query scale of this family is the head
    # size's (as llama.cpp uses for every Gemma-3 but the 27B).
    return {
        "sliding_window": int(read("attention.sliding_window", 0)),
        "query_pre_attn_scalar": float(read("attention.key_length")),
    }


FAMILIES: dict[str, ModelFamily] = {
    "llama": ModelFamily(),
    "gemma3": ModelFamily(
        facts={
            "hidden_activation": "gelu_tanh",
            "scale_embeddings": True,
            "sliding_window_pattern": 6,
            "rope_local_theta": 10000.0,
        },
        head_dim_key="attention.key_length",
        permuted_rotary=False,
        optional_norms={
            "q_norm": "attn_q_norm",
            "k_norm": "attn_k_norm",
            "post_attn_norm": "post_attention_norm",
            "post_ffn_norm": "post_ffw_norm",
        },
        facts_from_metadata=_gemma3_metadata,
    ),
}

SUPPORTED_ARCHITECTURES = tuple(sorted(FAMILIES))


def family(architecture: str | None, path=None) -> ModelFamily:
    """The family of `architecture`, or a `ValueError` naming it and the
    supported ones."""
    if architecture not in FAMILIES:
        where = f" in {path}" if path is not None else ""
        raise ValueError(
            f"unsupported model architecture {architecture!r}{where}: the "
            f"runner builds {', '.join(map(repr, SUPPORTED_ARCHITECTURES))}."
        )
    return FAMILIES[architecture]


def read_config(reader, path=None) -> ModelConfig:
    """The `ModelConfig` of a GGUF file open in `reader` (`gguf.GGUFReader`)."""
    architecture = _field(reader, "general.architecture")
    spec = family(architecture, path)

    def read(key, default=None):
        return _field(reader, f"{architecture}.{key}", default)

    hidden = int(read("embedding_length"))
    heads = int(read("attention.head_count"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = read("vocab_size", len(tokens) if tokens else None)
    names = {tensor.name for tensor in reader.tensors}
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    extra = dict(spec.facts)
    if spec.facts_from_metadata is not None:
        extra.update(spec.facts_from_metadata(read))
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(read("feed_forward_length")),
        num_layers=int(read("block_count")),
        num_heads=heads,
        num_kv_heads=int(read("attention.head_count_kv", heads)),
        head_dim=int(read(spec.head_dim_key, hidden // heads)),
        rms_norm_eps=float(read("attention.layer_norm_rms_epsilon")),
        rope_theta=float(read("rope.freq_base", 10000.0)),
        max_position=int(read("context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        eos_token_id=None if eos is None else int(eos),
        architecture=architecture,
        **extra,
    )


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()
