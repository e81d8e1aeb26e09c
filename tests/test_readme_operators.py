"""README.md's operator table is what the sources give
(`scripts/generate_operator_table.py`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

pytest.importorskip("torchgen")

import torch  # noqa: E402
from generate_operator_table import (  # noqa: E402
    operator_table,
    readme_table,
    torch_minor_version,
)


def test_readme_operator_table_matches_the_sources():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = readme_table(readme)
    written = readme[start:end]
    # The slot-8 entries come from the installed torch's schema: another
    # torch release may bind other operators, so only the one the table was
    # written with can check it.
    recorded = re.search(r"With torch (\d+\.\d+) ", written)
    assert recorded, "the table does not say which torch it was generated with"
    if recorded[1] != torch_minor_version(torch.__version__):
        pytest.skip(f"the table was generated with torch {recorded[1]}")
    assert written == operator_table(REPO), (
        "README.md's operator table is stale: run "
        "`python scripts/generate_operator_table.py --write`"
    )
