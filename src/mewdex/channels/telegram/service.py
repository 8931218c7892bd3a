"""The face of the Telegram package that others call (contract ``channel-faces``: outside
:mod:`mewdex.channels.telegram` only this module, the package and its routes, which the web layer
mounts, are imported): the command line's ``mewdex stickers import``."""

from __future__ import annotations

from mewdex.channels.telegram.stickers import import_set

__all__ = ["import_set"]
