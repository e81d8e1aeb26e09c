"""The Llama runner on the NVIDIA path (`LlamaModel(device=...)`) against
its CPU path: the same greedy tokens and logits within 1e-4.

A tiny random Llama (float32 weights, and the same weights as GGML blocks:
Q8_0 and Q4_1 mixed inside the fused projections) runs one continuous batch
where a second sequence joins while the first decodes, so steps mix decode
and prefill rows. With an NVIDIA GPU the device path runs here
(``device="cuda"``). Without one, a child process runs it on CPU tensors
through Triton's interpreter (``INFINI_OPS_TRITON_INTERPRET=1`` and a
generated NVIDIA manifest), where every operator call is a CUDA-like Triton
kernel and the model stages its inputs as on a GPU: one process cannot hold
both paths, since the interpreter makes the CPU backend unreachable. The
checkpoints travel to the child as `.npz` files and the results come back
the same way.

    python -m tests.test_model_device FOLDER NAME...   # the child: FOLDER/NAME.npz
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from infini.ops.core.devices import TRITON_INTERPRETER
from infini.ops.models import (
    OPERATORS,
    LayerWeights,
    LlamaCheckpoint,
    LlamaConfig,
    LlamaModel,
    QuantisedMatrix,
    Scheduler,
)
from infini.ops.models.huge_pages import huge_pages_available

REPO = Path(__file__).resolve().parents[1]
# GGML type codes: the fused query/key/value projection mixes two types, so
# it runs as one product per part writing its columns of the output.
Q8_0, Q4_1 = 8, 3
QUANT_TYPES = {
    "q_proj": Q8_0,
    "k_proj": Q8_0,
    "v_proj": Q4_1,
    "o_proj": Q8_0,
    "gate_proj": Q4_1,
    "up_proj": Q4_1,
    "down_proj": Q8_0,
}
LAYER_FIELDS = (
    "attn_norm",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "ffn_norm",
    "gate_proj",
    "up_proj",
    "down_proj",
)
# (prompt, new tokens, the step before which it joins): the second prompt
# joins the first one's decoding with more rows than the quantised products'
# vector kernel takes (`VECTOR_ROWS`), so both GGML products run.
SCHEDULE = (
    ([3, 17, 250, 9, 9, 100, 42], 5, 0),
    ([5, 6, 7, 8, 1, 200, 31, 64, 2], 4, 1),
)
LOGITS_TOLERANCE = 1e-4


# -- the tiny model and its checkpoints --------------------------------------------


def tiny_checkpoint() -> LlamaCheckpoint:
    """A random Llama in float32 (two query heads per kv head, norm weights
    away from 1), built without transformers. Small enough for Triton's
    interpreter, which runs each program of each call as NumPy steps."""
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        head_dim=32,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position=128,
        tie_word_embeddings=False,
    )
    rng = np.random.default_rng(21)

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(size):
        return rng.uniform(0.5, 1.5, size).astype(np.float32)

    hidden, inner = config.hidden_size, config.intermediate_size
    q_size = config.num_heads * config.head_dim
    kv_size = config.num_kv_heads * config.head_dim
    layers = [
        LayerWeights(
            attn_norm=norm(hidden),
            q_proj=matrix(q_size, hidden),
            k_proj=matrix(kv_size, hidden),
            v_proj=matrix(kv_size, hidden),
            o_proj=matrix(hidden, q_size),
            ffn_norm=norm(hidden),
            gate_proj=matrix(inner, hidden),
            up_proj=matrix(inner, hidden),
            down_proj=matrix(hidden, inner),
        )
        for _ in range(config.num_layers)
    ]
    return LlamaCheckpoint(
        config=config,
        embed_tokens=rng.standard_normal((config.vocab_size, hidden)).astype(
            np.float32
        ),
        layers=layers,
        final_norm=norm(hidden),
        lm_head=matrix(config.vocab_size, hidden),
    )


def quantised_checkpoint(checkpoint: LlamaCheckpoint) -> LlamaCheckpoint:
    """The same weights as GGML blocks (`gguf.quants.quantize`): every
    projection of `QUANT_TYPES`, the embedding table and the output
    projection as Q8_0."""
    from gguf import quants

    def blocks(array, quant_type):
        data = quants.quantize(np.ascontiguousarray(array), quant_type)
        return QuantisedMatrix(np.ascontiguousarray(data), quant_type, array.shape[1])

    layers = [
        LayerWeights(
            **{
                name: blocks(value, QUANT_TYPES[name]) if name in QUANT_TYPES else value
                for name, value in vars(layer).items()
            }
        )
        for layer in checkpoint.layers
    ]
    return LlamaCheckpoint(
        config=checkpoint.config,
        embed_tokens=blocks(checkpoint.embed_tokens, Q8_0),
        layers=layers,
        final_norm=checkpoint.final_norm,
        lm_head=blocks(checkpoint.lm_head, Q8_0),
        quantised=True,
    )


def _arrays_of(checkpoint: LlamaCheckpoint) -> dict:
    named = {
        "embed_tokens": checkpoint.embed_tokens,
        "final_norm": checkpoint.final_norm,
        "lm_head": checkpoint.lm_head,
    }
    for index, layer in enumerate(checkpoint.layers):
        for name in LAYER_FIELDS:
            named[f"layer{index}.{name}"] = getattr(layer, name)
    return named


def save_checkpoint(checkpoint: LlamaCheckpoint, path: Path) -> None:
    """`path` (.npz): every array, GGML blocks as uint8 with their type and
    width in the JSON entry ``meta``."""
    arrays, types = {}, {}
    for name, value in _arrays_of(checkpoint).items():
        if isinstance(value, QuantisedMatrix):
            types[name] = (value.quant_type, value.cols)
            value = value.blocks
        arrays[name] = value
    meta = {
        "config": vars(checkpoint.config),
        "types": types,
        "quantised": checkpoint.quantised,
    }
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


def load_checkpoint(path: Path) -> LlamaCheckpoint:
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        arrays = {name: data[name] for name in data.files if name != "meta"}
    for name, (quant_type, cols) in meta["types"].items():
        arrays[name] = QuantisedMatrix(arrays[name], quant_type, cols)
    config = LlamaConfig(**meta["config"])
    layers = [
        LayerWeights(**{name: arrays[f"layer{i}.{name}"] for name in LAYER_FIELDS})
        for i in range(config.num_layers)
    ]
    return LlamaCheckpoint(
        config=config,
        embed_tokens=arrays["embed_tokens"],
        layers=layers,
        final_norm=arrays["final_norm"],
        lm_head=arrays["lm_head"],
        quantised=meta["quantised"],
    )


# -- one run ----------------------------------------------------------------------


def run(checkpoint: LlamaCheckpoint, device: str) -> dict:
    """`SCHEDULE` greedily on `device`: each sequence's tokens and the
    float32 logits rows that produced them (NumPy arrays)."""
    model = LlamaModel(
        checkpoint,
        max_seqs=2,
        max_tokens=16,
        max_seq_len=32,
        block_size=4,
        device=device,
    )
    scheduler = Scheduler(model)
    sequences, rows = [], {}
    step = 0
    while len(sequences) < len(SCHEDULE) or not scheduler.idle:
        for prompt, new_tokens, joins in SCHEDULE:
            if joins == step:
                sequences.append(scheduler.add(prompt, new_tokens, ()))
        for row, (sequence, _) in enumerate(scheduler.step()):
            # A copy: `last_logits` is a view of a buffer the next step reuses.
            logits = scheduler.last_logits[row].to("cpu", torch.float32, copy=True)
            logits = logits.numpy()
            rows.setdefault(sequence.seq_id, []).append(logits)
        step += 1
    result = {}
    for sequence in sequences:
        result[f"tokens{sequence.seq_id}"] = np.array(sequence.output, np.int64)
        result[f"logits{sequence.seq_id}"] = np.stack(rows[sequence.seq_id])
    return result


def assert_same_run(ours: dict, reference: dict) -> None:
    assert sorted(ours) == sorted(reference)
    for name in sorted(reference):
        if name.startswith("tokens"):
            assert ours[name].tolist() == reference[name].tolist(), name
        else:
            error = float(np.abs(ours[name] - reference[name]).max())
            assert error <= LOGITS_TOLERANCE, f"{name}: max logits error {error}"


# -- the tests ------------------------------------------------------------------


def _gpu_build() -> bool:
    import infini.ops

    return torch.cuda.is_available() and bool(
        infini.ops.Linear.active_implementation_indices("nvidia")
    )


def _manifest_without(manifest: Path) -> list[str]:
    """The runner's operators that `manifest` gives no CUDA-like kernel."""
    operators = json.loads(manifest.read_text())["operators"]
    missing = []
    for name in OPERATORS:
        implementations = operators.get(name, {}).get("implementations", [])
        if not any("nvidia" in entry["devices"] for entry in implementations):
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def checkpoints() -> dict:
    if TRITON_INTERPRETER:
        pytest.skip(
            "compares against the CPU path, which the interpreter hides: the "
            "normal run covers this through a child process"
        )
    dense = tiny_checkpoint()
    checkpoints = {"float32": dense}
    # Without `gguf` (it quantises the blocks) only the float32 model runs.
    if importlib.util.find_spec("gguf") is not None:
        checkpoints["ggml"] = quantised_checkpoint(dense)
    return checkpoints


@pytest.fixture(scope="module")
def device_run(checkpoints, tmp_path_factory):
    """A function giving a checkpoint's run on the NVIDIA path: on the GPU
    here, or through the interpreter in a child process; each checkpoint is
    run once per process, and only when a test asks (so parallel workers
    share the work rather than repeat it)."""
    runs = {}
    if _gpu_build():

        def compute(name):
            return run(checkpoints[name], "cuda")

    else:
        folder = tmp_path_factory.mktemp("model_device")
        manifest = folder / "manifest.json"
        subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "generate_manifest.py"),
                "--source-dir",
                str(REPO),
                "--output",
                str(manifest),
                "--devices",
                "cpu;nvidia",
                "--with-triton",
            ],
            check=True,
            capture_output=True,
        )
        missing = _manifest_without(manifest)
        if missing:
            pytest.skip(f"no CUDA-like kernel yet for: {', '.join(missing)}")
        environment = dict(
            os.environ,
            INFINI_OPS_TRITON_INTERPRET="1",
            INFINI_OPS_MANIFEST=str(manifest),
        )

        def compute(name):
            save_checkpoint(checkpoints[name], folder / f"{name}.npz")
            child = subprocess.run(
                [sys.executable, "-m", "tests.test_model_device", str(folder), name],
                cwd=REPO,
                env=environment,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert child.returncode == 0, f"the interpreter run failed:\n{child.stderr}"
            with np.load(folder / f"{name}.result.npz") as data:
                return {key: data[key] for key in data.files}

    def get(name: str) -> dict:
        if name not in runs:
            runs[name] = compute(name)
        return runs[name]

    return get


@pytest.mark.parametrize("weights", ["float32", "ggml"])
def test_device_path_matches_cpu_path(weights, checkpoints, device_run):
    if weights not in checkpoints:
        pytest.skip("GGML blocks are quantised by `gguf`, which is not installed")
    reference = run(checkpoints[weights], "cpu")
    for index, (_, new_tokens, _) in enumerate(SCHEDULE):
        assert len(reference[f"tokens{index}"]) == new_tokens
    assert_same_run(device_run(weights), reference)


def test_cpu_path_stages_nothing(checkpoints):
    """The default CPU path reads the buffers the scheduler writes (no copy
    per step) and keeps its weights where the checkpoint put them, or, where
    transparent huge pages are available, in the one mapping of 2 MiB pages
    they are copied into at load time (`models/huge_pages.py`)."""
    model = LlamaModel(checkpoints["float32"], max_seqs=1, max_seq_len=16)
    assert model.device == torch.device("cpu") and not model.staged
    assert model.host_inputs is model.inputs
    norm = checkpoints["float32"].layers[0].attn_norm
    weight = model.layers[0].attn_norm
    assert np.array_equal(weight.numpy(), norm)
    if huge_pages_available():
        storages = {w.untyped_storage().data_ptr() for w in model.streamed_weights()}
        assert storages == {weight.untyped_storage().data_ptr()}
    else:
        assert weight.data_ptr() == norm.ctypes.data


def _child(folder: Path, names: list[str]) -> None:
    """Runs the named checkpoints of `folder` on the emulated device."""
    assert TRITON_INTERPRETER, "the child runs under INFINI_OPS_TRITON_INTERPRET=1"
    for name in names:
        result = run(load_checkpoint(folder / f"{name}.npz"), "cpu")
        np.savez(folder / f"{name}.result.npz", **result)


if __name__ == "__main__":
    _child(Path(sys.argv[1]), sys.argv[2:])
