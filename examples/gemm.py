"""Multiplies two small matrices with `infini.ops.gemm` and prints the result
next to `torch.mm`'s."""

import torch

import infini.ops


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    y = torch.randn(4, 3)
    z = torch.empty(2, 3)
    infini.ops.gemm(x, y, z)
    print("infini.ops.gemm:")
    print(z)
    print("torch.mm:")
    print(torch.mm(x, y))
    if not torch.allclose(z, torch.mm(x, y), rtol=1e-5, atol=1e-6):
        raise SystemExit("gemm result differs from torch.mm")


if __name__ == "__main__":
    main()
