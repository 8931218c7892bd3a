"""Chat channels (issue 17): the assistant in chat apps, and memes sent there.

Layer: below ``runtime`` (and ``schedules``, which may import this package), above ``assistant``;
never imports FastAPI, except a channel package's ``routes`` module, which only the web layer
imports (see :mod:`mewdex.channels.registry`). All outgoing HTTP goes through :mod:`mewdex.egress`.

Modules
-------
- ``registry``: which channels exist (:data:`registry.BUILTIN`, one line per channel), their
  declarations (:class:`registry.Channel`), the adapters by name (:func:`registry.register_adapter`,
  :func:`registry.adapter`), :func:`registry.load` (a missing built-in channel is an error) and what
  the web layer lends a channel's routes (:class:`registry.WebKit`). **How a channel package plugs in
  is that module's docstring.**
- ``platform``: what every platform call shares (:class:`platform.PlatformError`,
  :func:`platform.call_json`, :func:`platform.failure` → ``DeliveryFailed``, :func:`platform.multipart`,
  :func:`platform.fetch_image`).
- ``base``: the adapter contract (below) and its types; the group rule :func:`base.addressed`.
- ``bindings``: ``channel_bindings`` (seed 004), bind codes, the standing conversation.
- ``inbound``: :func:`inbound.submit` (queue an :class:`base.Inbound`) and the ``channel_inbound`` task.
- ``delivery``: :func:`delivery.send_meme` / :func:`delivery.send_text` (the public outbound API),
  the ``channel_delivery`` task (lane ``channel``) and the delivery log.
- ``errors``: :class:`errors.ChannelError` and the framework's codes with their HTTP statuses.
- one package per channel: ``telegram``, ``webhook``, ``onebot``, ``wecom``, ``clawbot``.

Adapter contract (a new channel is one package and one line in ``registry.BUILTIN``)
-------------------------------------------------------------------------------------
A module of the channel's package defines a class with these class attributes and methods and
registers one instance at import with :func:`registry.register_adapter`::

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

        # optional: binds_by_code = True                (a person binds by sending a one-time code to the bot:
        #           the Channels page's generic card and POST /api/v1/channels/<name>/code give one)
        # optional: def configured(self) -> bool: ...  (the admin set the channel up; the Channels page shows it)
        # optional: def status(self) -> dict: ...      (more fields of the Channels page's entry, e.g. a token hint)
        # optional: def owner_gone(self, session, scope_id) -> None: ...  (the owner was disabled or deleted:
        #           close what the channel holds open for that scope, in the caller's transaction)

    register_adapter(WeComAdapter())

    def schedules() -> list[Schedule]: ...   # optional, module level in a CHANNEL.modules entry: periodic work
                                             # (a poller), collected by mewdex.channels.tasks.schedules()

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
  ``mentioned``, ``text`` without the mention, ``images`` as refs, ``bind_code``, ``message_id``)
  and calls :func:`inbound.submit` in its transaction. Binding, the unbound reply, the group rule,
  the standing conversation, the assistant and the queued reply are the framework's.
- Bindings made another way (a QR login, a code sent to an app) call :func:`bindings.bind`
  (``scope_id``, ``user_id``, ``channel``, ``identity``, ``config``); per-binding state (a cursor,
  a context token) is written with :func:`bindings.update_config`. :func:`bindings.new_bind_code`
  / :func:`bindings.redeem_bind_code` are the one-time codes.
- Task types of a channel (a poller, an upload) register with ``queue.registry.task_type`` in lane
  :data:`delivery.LANE` (``channel``) or a lane of their own, in a module of ``CHANNEL.modules``;
  ``mewdex.channels.tasks`` (which the runtime loads in every process) loads them all.
- The Channels page lists every registered adapter; its texts are ``channels.name.<name>`` (en/zh
  catalogues already hold telegram, webhook, onebot, wecom, clawbot).
- Per-bot state: ``channel_bots`` (``update_offset``, ``username``, ``webhook_url``); reusable
  upload ids: ``channel_media_cache`` (per bot, by content SHA-256 and ``media_kind``, optional
  ``expires_at``).
"""
