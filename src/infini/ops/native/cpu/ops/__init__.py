"""One module per operator: the slot-0 CPU implementation."""
