"""Hand-written PyTorch implementations, one module per operator."""
