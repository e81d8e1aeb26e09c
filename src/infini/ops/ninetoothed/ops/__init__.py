"""NineToothed kernels, one module per operator."""
