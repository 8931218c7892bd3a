"""Telegram (package; Bot API over plain HTTPS through :mod:`mewdex.egress`; no client library at run time).

Configuration: the installation's bot token — ``MEWDEX_TELEGRAM_BOT_TOKEN`` when set, else the one the
admin saved on the Channels page (:func:`set_stored_token`, sealed in ``platform_settings``; read on
every use, so a new token works without a restart) — ``MEWDEX_TELEGRAM_API_URL``
(default ``https://api.telegram.org``), ``MEWDEX_TELEGRAM_WEBHOOK_SECRET`` (unset: derived from the
token). Calls are ``POST <api>/bot<token>/<method>``; answers ``{"ok": true, "result"}`` or
``{"ok": false, "error_code", "description", "parameters": {"retry_after"}}``.

- **Inbound**: with ``MEWDEX_PUBLIC_URL`` set the ``telegram_polling`` task registers the webhook
  ``<public url>/channels/telegram/webhook`` with the secret (``setWebhook``), and Telegram posts
  updates there with ``X-Telegram-Bot-Api-Secret-Token`` (:func:`accept_webhook`). Without a public
  URL the same periodic task long-polls ``getUpdates`` (offset kept in ``channel_bots``, advanced
  in the transaction that queues the updates; one poller at a time: its lane runs one task).
- **Binding**: ``POST /api/v1/channels/telegram/link`` gives ``https://t.me/<bot>?start=<code>``;
  the update ``/start <code>`` binds the sender (identity: the Telegram user id; replies go to the chat).
- **Groups**: answered only when the bot is @mentioned, replied to, or given a ``/command``.
- **Sending**: ``sendPhoto`` (JPEG/PNG; other stills as PNG), ``sendAnimation`` for GIFs; the
  ``file_id`` Telegram returns is cached per bot and content and reused; 429 ``retry_after`` is
  honoured; 403 (the user blocked the bot) is ``channel_blocked``.
- **Inline mode**: ``@bot 无语`` answers up to 50 memes as cached photos/GIFs (``file_id``s this bot
  already has; others are uploaded once to ``MEWDEX_TELEGRAM_STORAGE_CHAT_ID`` when set).

Modules: ``api`` (the token, :func:`api.call`, :func:`api.send_file`), ``adapter``, ``inbound``
(webhook, polling, inline mode), ``setup`` (the admin's token, a person's link), ``stickers`` (sticker
sets), ``routes``; ``service``, its face (what the command line imports; contract ``channel-faces``).
"""

from __future__ import annotations

from pathlib import Path

from mewdex.channels.registry import Channel, declare
from mewdex.channels.telegram import card, shapes

NAME = "telegram"
CHANNEL = Channel(
    name=NAME,
    modules=("mewdex.channels.telegram.adapter", "mewdex.channels.telegram.inbound"),
    routes="mewdex.channels.telegram.routes",
    errors={"sticker_set_not_found": 404, "telegram_not_linked": 409},  # its sticker sets (stickers.py)
    locales=Path(__file__).parent / "locales",  # its words, {en,zh}.json
    card=card.CARD,  # its card on the Channels page (mewdex.channels.card)
    info=shapes.INFO,  # mode, token_source, token_hint in GET /api/v1/channels
)
declare(CHANNEL)  # imports its modules: importing the package provides its adapter
