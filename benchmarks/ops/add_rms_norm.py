import torch
import torch.nn.functional as F

import infini.ops
from benchmarks.harness import HIDDEN, Case, nbytes


def cases(tokens, dtype):
    x = torch.randn(tokens, HIDDEN, dtype=dtype)
    residual = torch.randn(tokens, HIDDEN, dtype=dtype)
    weight = torch.randn(HIDDEN, dtype=dtype)
    out = torch.empty_like(x)
    residual_out = torch.empty_like(x)

    def reference():
        torch.add(x, residual, out=residual_out)
        return F.rms_norm(residual_out, (HIDDEN,), weight, 1e-6)

    yield Case(
        f"({tokens}, {HIDDEN})",
        lambda: infini.ops.add_rms_norm(x, residual, weight, 1e-6, out, residual_out),
        reference,
        nbytes(x, residual, weight, out, residual_out),
        x.numel(),
        fused=True,
    )
