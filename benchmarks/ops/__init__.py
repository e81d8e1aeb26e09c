"""One module per operator: ``cases(tokens, dtype)`` yields `harness.Case`s."""
