"""``python -m mewdex``: the CLI (how ``mewdex serve`` starts its worker processes)."""

from mewdex.cli import app

app()
