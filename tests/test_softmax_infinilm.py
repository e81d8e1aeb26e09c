"""`softmax_infinilm` is `softmax` under InfiniLM's name: the same checks
(`tests/softmax_checks.py`)."""

from tests.softmax_checks import softmax_tests

globals().update(softmax_tests("softmax_infinilm"))
