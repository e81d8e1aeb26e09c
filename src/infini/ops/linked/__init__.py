"""Linked providers: operators served by kernel libraries that other projects
ship in their Python distributions (slots 16 and up, `WITH_LINKED`).

`<transport>/<device>/<library>.yaml` names a library,
`<transport>/<device>/ops/<op>/<impl>.yaml` binds an operator to it, and
`<impl>.py` beside the binding is the adapter class. The configure step
resolves the contracts against the installed libraries
(`scripts/resolve_linked.py`) and records the result in the manifest;
`transports` loads and calls the libraries at run time.
"""
