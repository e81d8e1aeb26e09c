"""Token selection through the sampling operators."""

from __future__ import annotations

import torch

import infini.ops as ops
from infini.ops.core.devices import TRITON_INTERPRETER


class Sampler:
    """Picks one token per logits row with `top_k_top_p_sampling_from_logits`.

    `top_k=1` (the default) is greedy decoding: the operator keeps only the
    largest logit of each row. Larger `top_k` or `top_p < 1` sample from the
    filtered softmax with a counter-based generator seeded by `seed` and
    advanced by one offset per step, so a run is reproducible.

    `device` is the logits' device. The chosen tokens are written there and,
    off the CPU (or under the Triton interpreter, whose CPU tensors stand in
    for a GPU), copied back to a host buffer once per call. The `top_k` and
    `top_p` tensors stay on the host, where the operator reads them.
    """

    def __init__(
        self,
        max_rows: int,
        top_k: int = 1,
        top_p: float = 1.0,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        device = torch.device(device)
        self.top_k = torch.tensor([top_k], dtype=torch.int32)
        self.top_p = torch.tensor([top_p], dtype=torch.float32)
        self.tokens = torch.zeros(max_rows, dtype=torch.int32, device=device)
        self.staged = device.type != "cpu" or TRITON_INTERPRETER
        if self.staged:
            self._host = torch.zeros(
                max_rows, dtype=torch.int32, pin_memory=device.type == "cuda"
            )
        else:
            self._host = self.tokens
        self.tokens_host = self._host.numpy()
        self.seed = seed
        self.offset = 0

    def __call__(self, logits: torch.Tensor):
        """The chosen token of each row of `logits`, as a NumPy int32 array
        view (valid until the next call)."""
        rows = logits.shape[0]
        ops.top_k_top_p_sampling_from_logits(
            logits,
            self.top_k,
            self.top_p,
            None,
            "top_k_first",
            True,
            False,
            self.seed,
            self.offset,
            self.tokens[:rows],
        )
        self.offset += 1
        if self.staged:
            # A blocking copy: the host reads the tokens right after.
            self._host[:rows].copy_(self.tokens[:rows])
        return self.tokens_host[:rows]
