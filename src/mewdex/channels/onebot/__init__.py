"""QQ through OneBot v11 (package; NapCat, LLOneBot, Lagrange).

A binding is one QQ bot: its owner gets a new access token (:func:`setup.create_binding`) to paste
into the implementation, which dials mewdex's reverse WebSocket (``/channels/onebot/ws``) or posts
signed events (``/channels/onebot/events``). The bot's QQ number becomes the binding's identity only
once the bot proves it (:func:`setup.attach`); every event is the authenticated binding's.

Modules: ``protocol`` (the codec: signatures, segments, events, actions), ``transport`` (a socket's
action side, this process's connections, the HTTP API), ``relay`` (LISTEN/NOTIFY between a worker
and the process holding the socket), ``setup`` (binding), ``inbound``, ``adapter``, ``routes``.
"""

from __future__ import annotations

from pathlib import Path

from mewdex.channels.onebot import card
from mewdex.channels.registry import Channel, declare

NAME = "onebot"
CHANNEL = Channel(
    name=NAME,
    modules=("mewdex.channels.onebot.adapter",),
    routes="mewdex.channels.onebot.routes",
    errors={"onebot_not_connected": 503},  # no process holds the QQ bot's reverse WebSocket
    locales=Path(__file__).parent / "locales",  # its words, {en,zh}.json
    card=card.CARD,  # its card on the Channels page (mewdex.channels.card)
)
declare(CHANNEL)  # imports its modules: importing the package provides its adapter
