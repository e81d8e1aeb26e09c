"""Triton JIT kernels: `<op>/jit.py` per operator."""
