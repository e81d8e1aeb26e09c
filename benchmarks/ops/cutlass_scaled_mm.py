import torch

import infini.ops
from benchmarks.harness import HIDDEN, INTERMEDIATE, Case

# An int8 product is compute-bound: no 2048-token point on a small CPU.
MAX_TOKENS = 512


def _int_mm_works() -> bool:
    """Whether torch has an int8 product on the CPU (`torch._int_mm`)."""
    try:
        a = torch.ones(1, 8, dtype=torch.int8)
        torch._int_mm(a, torch.ones(8, 8, dtype=torch.int8))
    except (AttributeError, RuntimeError):
        return False
    return True


def cases(tokens, dtype):
    if tokens > MAX_TOKENS:
        return
    int_mm = _int_mm_works()
    # The up (n = 11008) and the square (n = 4096) projections of a 7B model,
    # per-token and per-channel scales, vLLM's column-major weight.
    for n in (HIDDEN, INTERMEDIATE):
        a = torch.randint(-128, 128, (tokens, HIDDEN), dtype=torch.int8)
        b = torch.randint(-128, 128, (n, HIDDEN), dtype=torch.int8).t()
        scale_a = torch.rand(tokens, 1) / 128
        scale_b = torch.rand(1, n) / 128
        bias = torch.randn(n).to(dtype)
        out = torch.empty(tokens, n, dtype=dtype)

        def reference(a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias):
            if int_mm:
                product = torch._int_mm(a, b).float()
            else:
                product = a.float() @ b.float()
            return torch.addcmul(bias.float(), scale_a, product * scale_b).to(dtype)

        yield Case(
            f"({tokens}, {HIDDEN}) x ({HIDDEN}, {n}) int8",
            lambda a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias, out=out: (
                infini.ops.cutlass_scaled_mm(a, b, scale_a, scale_b, bias, dtype, out)
            ),
            reference,
            None,
            b.numel(),
        )
