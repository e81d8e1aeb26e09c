"""`softmax`: ``out = torch.softmax(input, dim, dtype)``; the cases and
checks are in `tests/softmax_checks.py`, shared with `softmax_infinilm`."""

from tests.softmax_checks import softmax_tests

globals().update(softmax_tests("softmax"))
