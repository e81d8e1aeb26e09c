"""The Triton JIT `rms_norm`."""
