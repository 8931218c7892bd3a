"""Chat channels (issue 17): the assistant in chat apps, and memes sent there.

Layer: below ``runtime`` (and ``schedules``, which may import this package), above ``assistant``;
never imports FastAPI, except a channel package's ``routes`` module, which only the web layer
imports (see :mod:`mewdex.channels.registry`). All outgoing HTTP goes through :mod:`mewdex.egress`.

Modules
-------
- ``registry``: which channels exist (:func:`registry.packages`: the plugins of the hook
  ``channel_adapters`` in :data:`mewdex.hooks.BUILTIN_PLUGINS`, one line per channel), their
  declarations (:class:`registry.Channel`), the adapters by name (:func:`registry.register_adapter`,
  :func:`registry.adapter`), :func:`registry.load` (a missing built-in channel is an error) and what
  the web layer lends a channel's routes (:class:`registry.WebKit`). **How a channel package plugs in
  is that module's docstring.**
- ``platform``: what every platform call shares (:class:`platform.PlatformError`,
  :func:`platform.call_json`, :func:`platform.failure` → ``DeliveryFailed``, :func:`platform.multipart`,
  :func:`platform.fetch_image`).
- ``base``: the adapter contract (:class:`base.Adapter`, below) and its types (:class:`base.Reply`:
  text, meme, buttons); the group rule :func:`base.addressed`.
- ``media``: :func:`media.meme_file`, a meme's bytes for every path that sends one.
- ``polling``: the one poller (lane, task type and schedule of each adapter with ``polls``).
- ``saving``: saving a meme from a chat (收 / 存 / save), written once for every channel.
- ``bindings``: ``channel_bindings`` (seed 004), bind codes, the standing conversation.
- ``inbound``: :func:`inbound.submit` (queue an :class:`base.Inbound`) and the ``channel_inbound`` task.
- ``delivery``: :func:`delivery.send_meme` / :func:`delivery.send_text` (the public outbound API),
  the ``channel_delivery`` task (lane ``channel``) and the delivery log.
- ``errors``: :class:`errors.ChannelError`; the framework's codes with their HTTP statuses are its
  declaration below (:data:`CAPABILITY`, hook ``capabilities``).
- ``routes`` (imported by the web layer only, which mounts its ``router``): the routes every channel
  shares, ``/api/v1/channels`` (bindings, the channels offered, the delivery log, bind codes,
  revoke), the set-up guides ``/help/channels/<name>`` and the Channels page ``/settings/channels``;
  ``shapes``: their request and response models; ``page.html``, ``card.html`` (the one generic
  card), ``guide.html``, ``guide_missing.html`` (``channels/…`` to the web layer's templates);
  ``static/`` (``channels.js``, ``channel_card.js``: served under ``/static/``); ``locales/{en,zh}.json``:
  the framework's words (the page's, the cards', the guides', its scripts' ``js.channel_*``, what the
  chats are told, its error codes, task types and lane), added to the catalogues when this package
  is imported (so in every process that imports any of its modules).
- one package per channel: ``telegram``, ``webhook``, ``onebot``, ``wecom``, ``clawbot``, ``discord``.

Adapter contract (a new channel is one package and one line in ``hooks.BUILTIN_PLUGINS``)
------------------------------------------------------------------------------------------
A module of the channel's package subclasses :class:`base.Adapter` (every hook has a default there;
the framework calls them directly, never looks them up) and registers one instance at import with
:func:`registry.register_adapter`::

    class WeComAdapter(Adapter):
        name = "wecom"                     # channel_bindings.channel, conversations.channel
        min_send_interval = 0.5            # seconds between two sends to one chat (all processes); default 1
        # secret_fields = ()               config keys sealed at rest (e.g. ("bot_token", "latest_context_token"))
        # command_prefixes = ("/",)        a group message starting with one is for the bot
        # outbound_only = False            True: no inbound, no identity (the webhook channel)
        # binds_by_code = False            a person binds by sending the framework's one-time code to the bot
        # buttons = False                  send() shows a Reply's buttons (Telegram, Discord)
        # polls = False                    True: mewdex.channels.polling runs poll() every poll_seconds()

        def target_of(self, binding: Binding) -> str: ...            # where a proactive send goes
        def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent: ...
        def send_text(self, binding: Binding | None, target: str, text: str) -> Sent: ...
        # def send(self, binding, target, reply: Reply) -> Sent       default: meme + caption, or text; no buttons
        def fetch_image(self, ref: str) -> bytes: ...                 # bytes of an Inbound.images/media entry
        def binding_config(self, inbound: Inbound) -> dict: ...       # config a bind code creates (default {})
        # def bind_help(self, lang) -> str                            default: catalogue bot.bind_help.<name>
        # def configured(self) -> bool                                default True (the admin set it up)
        # def status(self) -> dict                                    more fields of the Channels page's entry
        # def owner_gone(self, session, scope_id) -> None             the owner was disabled or deleted
        # def poll(self, sessions, seconds) -> dict / poll_seconds()  one poll (polls = True)
        # def acknowledge(self, inbound) -> None                      the platform waits for a receipt (a button press)
        # def answer(self, mode: ReplyMode, found) -> Reply           a reply mode's Reply (found None: not in force)

    register_adapter(WeComAdapter())

- ``send_meme`` / ``send_text`` run inside the ``channel_delivery`` task (no transaction held). They
  return :class:`base.Sent` (the platform's message id) or raise :class:`base.DeliveryFailed` with
  our ``code`` (``channel_platform_error``, ``channel_rate_limited``, ``channel_window_closed``, …),
  the platform's ``platform_code`` and ``platform_error`` text, ``retry_after`` seconds when the
  platform asked to wait, and ``retryable``. A platform answer that means "not delivered" (ClawBot
  ``ret`` ≠ 0, WeCom 60020) MUST raise: there are no silent failures. An ``EgressError`` from
  :func:`mewdex.egress.fetch` may pass through (it becomes ``channel_unreachable``, retried).
  ``binding`` is None for a reply to an unbound sender; its ``config`` has secrets opened.
- Inbound: the channel's route (in its package's ``routes`` module, under ``/channels/<name>/…``,
  which the security middleware lets through without a session: the route checks the platform's own
  secret/signature) or poller (a task type in the channel's package) builds an :class:`base.Inbound`
  (``sender`` = the identity bindings are matched on, ``chat`` = where replies go, ``is_group``,
  ``mentioned``, ``text`` without the mention, ``images`` as refs, ``media`` (every file it carries:
  images, stickers, GIFs, clips), ``reply_media`` (the media of the message it replies to),
  ``bind_code``, ``message_id``) and calls :func:`inbound.submit` in its transaction. Binding, the
  unbound reply, the group rule, the standing conversation, the assistant, saving from the chat
  (:mod:`saving`) and the queued reply are the framework's.
- Bindings made another way (a QR login, a code sent to an app) call :func:`bindings.bind`
  (``scope_id``, ``user_id``, ``channel``, ``identity``, ``config``); per-binding state (a cursor,
  a context token) is written with :func:`bindings.update_config`. :func:`bindings.link_code`
  / :func:`bindings.redeem_bind_code` are the one-time codes (made one way).
- A channel that polls sets ``polls = True``: :mod:`polling` declares its lane, task type and
  schedule. Other task types of a channel register with ``queue.registry.task_type`` in lane
  :data:`delivery.LANE` (``channel``), in a module of ``CHANNEL.modules``; ``mewdex.channels.tasks``
  (which the runtime loads in every process) loads them all.
- Reply modes: a request the platform wants answered in place (Discord's interaction, Telegram's
  inline query) is queued by its channel's own inbound task, which calls :func:`inbound.handle` with
  a :class:`base.ReplyMode`; the adapter's ``answer`` makes the :class:`base.Reply` (with ``mode``
  set) and its ``send`` answers in that mode, inside a ``channel_delivery`` like any send
  (:func:`delivery.reply_in_place`).
- A meme's file is :func:`media.meme_file`; the paging of every reply mode ("another") is
  :func:`inbound.search_memes`; the owner check of an answer from the library is
  :func:`bindings.in_force`; the loopback rule of a callback URL is :func:`platform.loopback`.
- The Channels page lists every registered adapter; its name there is ``channels.name.<name>``, a
  key of the channel package's own catalogues (``CHANNEL.locales``).
- Per-bot state: ``channel_bots`` (``update_offset``, ``username``, ``webhook_url``); reusable
  upload ids: ``channel_media_cache`` (per bot, by content SHA-256 and ``media_kind``, optional
  ``expires_at``).
"""

from __future__ import annotations

from pathlib import Path

from mewdex import hooks
from mewdex.capability import Capability, NavEntry
from mewdex.dto import i18n

i18n.add_messages(Path(__file__).parent / "locales")

#: The channel framework's declaration (hook ``capabilities``): its error codes → HTTP status (a
#: channel package declares its own in ``CHANNEL.errors``), the Channels page's link in the header,
#: and what the web layer mounts: its routes (:mod:`mewdex.channels.routes`, before every channel's),
#: its templates (``channels/page.html`` …) and its ``static/`` scripts.
CAPABILITY = hooks.provide(
    "capabilities",
    "channels",
    Capability(
        name="channels",
        errors={
            "channel_unknown": 404,
            "channel_not_bound": 404,
            "bind_code_invalid": 404,
            "channel_webhook_secret_invalid": 401,
            "channel_request_expired": 401,
            "channel_request_replayed": 409,
            "channel_owner_disabled": 409,
            "channel_not_configured": 409,
            "channel_identity_taken": 409,
            "channel_window_closed": 409,
            "channel_platform_error": 502,
        },
        nav=(NavEntry(page="channels", path="/settings/channels", label="nav.channels", order=90),),
        routes="mewdex.channels.routes",
        templates=True,
        static=True,
    ),
)
