"""Continuous batching: sequences join and leave the running batch at any
step, and each step mixes decode tokens with (chunked) prefill tokens."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .decoder import DecoderModel
from .sampling import Sampler


@dataclass
class Sequence:
    """One request: its prompt, the tokens generated so far and its cache
    blocks. `computed` counts the tokens whose keys and values are cached."""

    seq_id: int
    prompt: list[int]
    max_new_tokens: int
    stop_token_ids: tuple[int, ...] = ()
    output: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    computed: int = 0
    finished: bool = False
    first_token_time: float | None = None
    # When its second token came: a decode rate measured from here leaves
    # out the first decode step, which compiles under `compile=True`.
    second_token_time: float | None = None

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)


class Scheduler:
    """Runs a `DecoderModel` over many sequences.

    Each `step` takes every running sequence that has its prompt cached (one
    decode token each), then fills the rest of the step's token budget with
    prompt tokens of sequences still prefilling, oldest first (a prompt
    longer than the budget is prefilled over several steps). A sequence
    leaves the batch when it produces a stop token or reaches its
    `max_new_tokens`, and its cache blocks go back to the pool.
    """

    def __init__(self, model: DecoderModel, sampler: Sampler | None = None) -> None:
        self.model = model
        self.sampler = sampler or Sampler(model.max_seqs, device=model.device)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self._next_id = 0
        eos = model.config.eos_token_id
        self.stop_token_ids = () if eos is None else (eos,)
        self.last_logits = None
        # NumPy views of the model's step inputs (host memory on every
        # path; the model copies them to its device).
        inputs = model.host_inputs
        self._token_ids = inputs.token_ids.numpy()
        self._positions = inputs.positions.numpy()
        self._slots = inputs.slot_mapping.numpy()
        self._decode_tables = inputs.decode_block_tables.numpy()
        self._decode_lens = inputs.decode_seq_lens.numpy()
        self._prefill_tables = inputs.prefill_block_tables.numpy()
        self._prefill_lens = inputs.prefill_seq_lens.numpy()
        self._cum = inputs.cum_seq_lens_q.numpy()
        self._logit_rows = inputs.logit_rows.numpy()
        self._staged = model.staged

    def add(
        self,
        prompt: list[int],
        max_new_tokens: int,
        stop_token_ids: tuple[int, ...] | None = None,
    ) -> Sequence:
        """Queues a prompt (token ids). Generation stops after
        `max_new_tokens` tokens or a stop token: by default the model's
        end-of-sequence token."""
        if not prompt:
            raise ValueError("a prompt must hold at least one token.")
        if len(prompt) + max_new_tokens > self.model.max_seq_len:
            raise ValueError(
                f"a prompt of {len(prompt)} tokens plus {max_new_tokens} new tokens "
                f"exceeds the model's `max_seq_len` of {self.model.max_seq_len}."
            )
        sequence = Sequence(
            self._next_id,
            list(prompt),
            max_new_tokens,
            self.stop_token_ids if stop_token_ids is None else tuple(stop_token_ids),
        )
        self._next_id += 1
        self.waiting.append(sequence)
        return sequence

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _write_table(self, tables: np.ndarray, row: int, blocks: list[int]) -> None:
        tables[row, : len(blocks)] = blocks

    def step(self, all_logits: bool = False) -> list[tuple[Sequence, int]]:
        """Runs the model once; returns the (sequence, token) pairs it
        produced. With `all_logits`, `last_logits` holds every row's logits
        (for tests), else those of the rows that produced a token."""
        model, cache = self.model, self.model.cache
        budget, seq_budget = model.max_tokens, model.max_seqs
        if self._staged:
            # The previous step's input copy may still be queued.
            model.wait_inputs()

        decoding = [s for s in self.running if not s.prefilling]
        decoding = decoding[:seq_budget]
        for sequence in decoding:
            if not cache.allocate(sequence.blocks, sequence.length):
                raise RuntimeError("the KV cache is full; lower the batch size.")
        # Admit waiting sequences while there is room.
        while (
            self.waiting
            and len(self.running) < seq_budget
            and cache.free_blocks >= cache.blocks_for(len(self.waiting[0].prompt))
        ):
            self.running.append(self.waiting.pop(0))
        prefilling = [s for s in self.running if s.prefilling]

        rows = 0
        token_ids, positions, slots = self._token_ids, self._positions, self._slots
        for index, sequence in enumerate(decoding):
            position = sequence.length - 1
            token_ids[rows] = sequence.output[-1]
            positions[rows] = position
            slots[rows] = cache.slot(sequence.blocks, position)
            self._write_table(self._decode_tables, index, sequence.blocks)
            self._decode_lens[index] = position + 1
            rows += 1
        num_decode = rows
        budget -= num_decode
        producing = list(decoding)
        chunks = []
        for sequence in prefilling:
            if budget <= 0 or len(producing) >= seq_budget + len(decoding):
                break
            start = sequence.computed
            count = min(len(sequence.prompt) - start, budget)
            end = start + count
            if not cache.allocate(sequence.blocks, end):
                break
            index = len(chunks)
            self._cum[index] = rows - num_decode
            token_ids[rows : rows + count] = sequence.prompt[start:end]
            positions[rows : rows + count] = np.arange(start, end)
            block_size = cache.block_size
            blocks = np.asarray(sequence.blocks, dtype=np.int64)
            span = np.arange(start, end)
            slots[rows : rows + count] = (
                blocks[span // block_size] * block_size + span % block_size
            )
            self._write_table(self._prefill_tables, index, sequence.blocks)
            self._prefill_lens[index] = end
            rows += count
            budget -= count
            chunks.append((sequence, end))
            if end == len(sequence.prompt):
                producing.append(sequence)
        num_prefill = len(chunks)
        if num_prefill:
            self._cum[num_prefill] = rows - num_decode
        if rows == 0:
            return []

        # Logit rows: each decode row, and the last row of each prefill chunk
        # that completes its prompt.
        self._logit_rows[:num_decode] = np.arange(num_decode)
        logit_count = row = num_decode
        for sequence, end in chunks:
            row += end - sequence.computed
            if end == len(sequence.prompt):
                self._logit_rows[logit_count] = row - 1
                logit_count += 1

        logits = model.forward(
            rows, num_decode, num_prefill, logit_count, all_logits=all_logits
        )
        self.last_logits = logits
        for sequence, end in chunks:
            sequence.computed = end
        for sequence in decoding:
            sequence.computed = sequence.length
        if all_logits:
            logits = logits[model.inputs.logit_rows[:logit_count].long()]
        tokens = self.sampler(logits) if logit_count else []

        produced = []
        now = time.perf_counter()
        for sequence, token in zip(producing, tokens, strict=True):
            token = int(token)
            sequence.output.append(token)
            if sequence.first_token_time is None:
                sequence.first_token_time = now
            elif sequence.second_token_time is None:
                sequence.second_token_time = now
            produced.append((sequence, token))
            if (
                token in sequence.stop_token_ids
                or len(sequence.output) >= sequence.max_new_tokens
            ):
                sequence.finished = True
                cache.free(sequence.blocks)
        self.running = [s for s in self.running if not s.finished]
        return produced

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[Sequence]:
        """Queues every prompt and steps until all are finished; each
        sequence's `output` holds its tokens and `first_token_time` the
        `time.perf_counter()` at which its first token came."""
        sequences = [self.add(prompt, max_new_tokens) for prompt in prompts]
        while not self.idle:
            self.step()
        return sequences
