"""The Triton JIT `silu_and_mul`."""
