"""Shared shapes: the pydantic models of every request and response of the JSON API (also used by
the pages, ``--json`` CLI output and search), the cursor codec and the domain error base class.

A low layer: imports only pydantic, :mod:`mewdex.config` and the standard library, so services,
the CLI and the web layer can all use it.
"""
