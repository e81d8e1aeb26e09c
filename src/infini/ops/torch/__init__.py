"""Hand-written PyTorch implementations (`ops/`) and the generated ATen backend
(`aten.py`, slot 8)."""
