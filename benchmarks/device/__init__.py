"""The device check: one prepared script for a bare GPU machine (`run.py`)."""
