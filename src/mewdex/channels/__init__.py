"""Chat channels (issue 17): the assistant in chat apps, and memes sent there.

Layer: below ``runtime`` (and ``schedules``, which may import this package), above ``assistant``;
never imports FastAPI (web routes live in ``mewdex.web.routers.channels``). All outgoing HTTP goes
through :mod:`mewdex.egress`.

Modules
-------
- ``base``: the adapter contract (below), the adapter registry, the group rule :func:`base.addressed`.
- ``bindings``: ``channel_bindings`` (seed 004), bind codes, the standing conversation.
- ``inbound``: :func:`inbound.submit` (queue an :class:`base.Inbound`) and the ``channel_inbound`` task.
- ``delivery``: :func:`delivery.send_meme` / :func:`delivery.send_text` (the public outbound API),
  the ``channel_delivery`` task (lane ``channel``) and the delivery log.
- ``telegram``, ``webhook``: the channels of this package; ``onebot``, ``wecom``, ``clawbot`` are
  added as modules of their own (listed in :data:`base.ADAPTER_MODULES`).

Adapter contract (a new channel is one module; nothing else in this package changes)
-------------------------------------------------------------------------------------
A module defines a class with these class attributes and methods and registers one instance at
import with :func:`base.register_adapter` (add the module to :data:`base.ADAPTER_MODULES`)::

    class WeComAdapter:
        name = "wecom"                     # channel_bindings.channel, conversations.channel
        secret_fields = ()                 # config keys sealed at rest (e.g. ("bot_token", "latest_context_token"))
        min_send_interval = 1.0            # seconds between two sends to one chat (all processes)
        command_prefixes = ("/",)          # a group message starting with one is for the bot
        outbound_only = False              # True: no inbound, no identity (the webhook channel)

        def target_of(self, binding: Binding) -> str: ...            # where a proactive send goes
        def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent: ...
        def send_text(self, binding: Binding | None, target: str, text: str) -> Sent: ...
        def fetch_image(self, ref: str) -> bytes: ...                 # bytes of an Inbound.images entry
        def binding_config(self, inbound: Inbound) -> dict: ...       # config a bind code creates
        def bind_help(self, lang: str) -> str: ...                    # reply to an unbound sender ("en"/"zh")

        # optional: def configured(self) -> bool: ...  (the admin set the channel up; the Channels page shows it)

    register_adapter(WeComAdapter())

    def schedules() -> list[Schedule]: ...   # optional, module level: periodic work (a poller), collected
                                             # by mewdex.channels.tasks.schedules() into the runtime's schedules

- ``send_meme`` / ``send_text`` run inside the ``channel_delivery`` task (no transaction held). They
  return :class:`base.Sent` (the platform's message id) or raise :class:`base.DeliveryFailed` with
  our ``code`` (``channel_platform_error``, ``channel_rate_limited``, ``channel_window_closed``, …),
  the platform's ``platform_code`` and ``platform_error`` text, ``retry_after`` seconds when the
  platform asked to wait, and ``retryable``. A platform answer that means "not delivered" (ClawBot
  ``ret`` ≠ 0, WeCom 60020) MUST raise: there are no silent failures. An ``EgressError`` from
  :func:`mewdex.egress.fetch` may pass through (it becomes ``channel_unreachable``, retried).
  ``binding`` is None for a reply to an unbound sender; its ``config`` has secrets opened.
- Inbound: the channel's route (in ``web/routers/``, under ``/channels/<name>/…``, which the
  security middleware lets through without a session: the route checks the platform's own
  secret/signature) or poller (a task type in the channel's module) builds an :class:`base.Inbound`
  (``sender`` = the identity bindings are matched on, ``chat`` = where replies go, ``is_group``,
  ``mentioned``, ``text`` without the mention, ``images`` as refs, ``bind_code``, ``message_id``)
  and calls :func:`inbound.submit` in its transaction. Binding, the unbound reply, the group rule,
  the standing conversation, the assistant and the queued reply are the framework's.
- Bindings made another way (a QR login, a code sent to an app) call :func:`bindings.bind`
  (``scope_id``, ``user_id``, ``channel``, ``identity``, ``config``); per-binding state (a cursor,
  a context token) is written with :func:`bindings.update_config`. :func:`bindings.new_bind_code`
  / :func:`bindings.redeem_bind_code` are the one-time codes.
- Task types of a channel module (a poller, an upload) register with ``queue.registry.task_type`` in
  lane :data:`delivery.LANE` (``channel``) or a lane of their own; :data:`base.ADAPTER_MODULES` is
  imported by ``mewdex.channels.tasks``, which the runtime loads in every process.
- The Channels page lists every registered adapter; its texts are ``channels.name.<name>`` (en/zh
  catalogues already hold telegram, webhook, onebot, wecom, clawbot).
- Per-bot state: ``channel_bots`` (``update_offset``, ``username``, ``webhook_url``); reusable
  upload ids: ``channel_media_cache`` (per bot, by content SHA-256 and ``media_kind``, optional
  ``expires_at``).
"""
