"""One module per operator: its overloads, argument validation and semantics."""
