"""The Triton JIT `add`."""
