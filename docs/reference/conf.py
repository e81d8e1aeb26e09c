"""Sphinx configuration of the operator reference (`infiniops_docs` target).

The pages themselves are generated into the build tree by
`scripts/generate_api_docs.py`; `sphinx-build -c docs/reference` reads this file.
"""

project = "InfiniOps"
author = "InfiniOps contributors"
copyright = "InfiniOps contributors"
release = "0.1.0"

extensions: list[str] = []
# The base docstrings write identifiers as `name`; show them as code.
default_role = "literal"
html_theme = "alabaster"
html_title = "InfiniOps operator reference"
