"""WeChat ClawBot (package): Tencent's iLink bot API, one bot per person, bound by scanning a QR code.

:func:`setup.start_login` / :func:`setup.login_status` / :func:`setup.complete_login` bind the person
who scanned (``bot_token`` and ``latest_context_token`` sealed); the ``clawbot_polling`` task (lane
``clawbot_poll``, scheduled every ``MEWDEX_CLAWBOT_POLL_SECONDS``) long-polls every active binding,
queues the messages and reopens the window (``context_token_at``, ``sends_since_ctx``) with the cursor
in one transaction; the adapter reserves window places before it sends and refuses with
``channel_window_closed`` past the window.

Modules: ``api`` (the iLink client: login, updates, sends, the CDN, the window rule), ``setup`` (the QR
login), ``inbound`` (polling), ``adapter``, ``routes``.
"""

from __future__ import annotations

from pathlib import Path

from mewdex.channels.clawbot import card
from mewdex.channels.registry import Channel, declare

NAME = "clawbot"
CHANNEL = Channel(
    name=NAME,
    modules=("mewdex.channels.clawbot.adapter", "mewdex.channels.clawbot.inbound"),
    routes="mewdex.channels.clawbot.routes",
    errors={"clawbot_session_expired": 502},  # iLink ret -14: the WeChat login must be scanned again
    locales=Path(__file__).parent / "locales",  # its words, {en,zh}.json
    card=card.CARD,  # its card on the Channels page (mewdex.channels.card)
)
declare(CHANNEL)  # imports its modules: importing the package provides its adapter
