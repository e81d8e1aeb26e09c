"""Triton kernels of the CUDA-like platforms, one module per operator."""
