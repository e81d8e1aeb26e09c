"""`scaled_softmax`: ``out = softmax(input.float() * scale, -1)``; the cases
and checks are in `tests/softmax_checks.py`, shared with `softmax`."""

from tests.softmax_checks import softmax_tests

globals().update(softmax_tests("scaled_softmax"))
