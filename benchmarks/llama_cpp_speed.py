"""llama.cpp's decode and prefill speed on a GGUF file, for comparison.

Run with a Python that has `llama-cpp-python` (it builds llama.cpp from
source, about half an hour on two cores, so it lives in its own virtual
environment); this file imports nothing from `infini.ops`:

    /path/to/llama-env/bin/python benchmarks/llama_cpp_speed.py MODEL.gguf \\
        --threads 2 --prompts 16,512 --steps 16

Prints one JSON object: for each prompt length, the best over `--repeats`
of prefill seconds and decode tokens/s at batch 1 (greedy, one token per
`eval`, as `benchmarks/model.py` times our runner).
"""

from __future__ import annotations

import argparse
import json
import time


def greedy(model) -> int:
    """The argmax of the last evaluated token's logits (llama.cpp keeps only
    those without `logits_all`)."""
    import numpy as np

    logits = np.ctypeslib.as_array(model._ctx.get_logits(), shape=(model.n_vocab(),))
    return int(np.argmax(logits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", default="16,512")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()

    import llama_cpp
    import numpy as np

    prompts = [int(p) for p in arguments.prompts.split(",")]
    model = llama_cpp.Llama(
        arguments.model,
        n_threads=arguments.threads,
        n_threads_batch=arguments.threads,
        n_ctx=max(prompts) + arguments.steps + 8,
        n_batch=512,
        logits_all=False,
        verbose=False,
    )
    rng = np.random.default_rng(0)
    results = {"llama_cpp": llama_cpp.__version__, "threads": arguments.threads}
    for prompt_len in prompts:
        best_prefill, best_decode = float("inf"), 0.0
        for _ in range(arguments.repeats):
            tokens = rng.integers(3, model.n_vocab(), prompt_len).tolist()
            model.reset()
            begin = time.perf_counter()
            model.eval(tokens)
            prefill = time.perf_counter() - begin
            token = greedy(model)
            model.eval([token])  # The first decode step, not timed.
            begin = time.perf_counter()
            for _ in range(arguments.steps):
                token = greedy(model)
                model.eval([token])
            decode = arguments.steps / (time.perf_counter() - begin)
            # Every requested token must have been evaluated, or the time
            # measures fewer tokens than the rate claims.
            expected = prompt_len + 1 + arguments.steps
            if model.n_tokens != expected:
                raise SystemExit(
                    f"llama.cpp (prompt {prompt_len} x batch 1) stopped at "
                    f"{model.n_tokens - prompt_len} of {1 + arguments.steps} new "
                    "tokens; no rate is published for it."
                )
            best_prefill = min(best_prefill, prefill)
            best_decode = max(best_decode, decode)
        results[str(prompt_len)] = {
            "prefill_s": best_prefill,
            "decode_tokens_per_s": best_decode,
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
