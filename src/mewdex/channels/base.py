"""The adapter contract of a channel (see the package docstring) and the types it speaks:
:class:`MemeFile`, :class:`Binding`, :class:`Inbound`, :class:`Sent`, :class:`DeliveryFailed`.

Adapters are registered and found by name in :mod:`mewdex.channels.registry`
(``register_adapter``, ``adapter``), which also declares which channels exist.
"""

from __future__ import annotations

import io
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar

#: The scope of what belongs to no account: replies to unbound senders, the pollers' tasks.
UNBOUND_SCOPE = "__system__"


@dataclass(frozen=True)
class MemeFile:
    """A meme to send: its bytes, lower-case ``extension`` (``.gif``), ``sha256``, ``display_name``,
    ``meme_id`` (str; a re-captioned image's original, or empty); ``remake``: the recipe of an
    unsaved re-captioned image (:func:`mewdex.channels.media.remade`), None for a library meme."""

    meme_id: str
    data: bytes
    extension: str
    sha256: str
    display_name: str
    remake: dict[str, Any] | None = None

    @property
    def animated(self) -> bool:
        """A GIF, a clip (MP4, WebM) or an animated sticker (TGS): sent as an animation where the
        platform has one."""
        return self.extension in ANIMATED_EXTENSIONS

    @property
    def clip(self) -> bool:
        """A clip or animated sticker (MP4, WebM, TGS): platforms that show only pictures get it
        as a GIF (:meth:`as_gif`)."""
        return self.extension in CLIP_EXTENSIONS

    def as_png(self) -> bytes:
        """The first frame as PNG, its transparency kept (for platforms that cannot show this
        format: AVIF, HEIC, a clip's poster). Raises :class:`mewdex.library.images.ImageError`."""
        from mewdex.library.thumbnails import iter_rgba_frames

        frame, _duration = next(iter_rgba_frames(self.data, max_frames=1))
        out = io.BytesIO()
        frame.save(out, "PNG")
        return out.getvalue()

    def as_gif(self) -> bytes:
        """A clip or sticker as an animated GIF, within the GIF limits (at most
        :data:`GIF_MAX_SIDE` pixels a side, :data:`GIF_MAX_BYTES` bytes; the decoder's frame, pixel
        and time limits): every frame, its timing and looping forever; scaled down until it fits,
        else its first frame as PNG. A GIF is returned as it is. Raises
        :class:`mewdex.library.images.ImageError` for bytes that are no image."""
        if self.extension == ".gif":
            return self.data
        from PIL import Image

        from mewdex.library.images import load_all_frames
        from mewdex.library.recaption import encode_gif

        animation = load_all_frames(self.data)
        frames, durations = animation.frames, animation.durations
        side = max(frames[0].size)
        scale = min(1.0, GIF_MAX_SIDE / side)
        for _ in range(4):
            size = (max(1, round(frames[0].width * scale)), max(1, round(frames[0].height * scale)))
            shrunk = frames if scale == 1.0 else [f.resize(size, Image.Resampling.LANCZOS) for f in frames]
            data = encode_gif(shrunk, durations, 0)
            if len(data) <= GIF_MAX_BYTES:
                return data
            scale *= 0.7
        return self.as_png()

    def as_picture(self) -> bytes:
        """The bytes for a platform that shows only pictures (QQ, WeChat): a clip or sticker as a GIF
        (:meth:`as_gif`), AVIF and HEIC as PNG, every other format as it is."""
        if self.clip:
            return self.as_gif()
        if self.extension in (".avif", ".heic"):
            return self.as_png()
        return self.data


#: Extensions sent as animations; the clips among them (:attr:`MemeFile.clip`).
ANIMATED_EXTENSIONS = frozenset({".gif", ".mp4", ".webm", ".tgs"})
CLIP_EXTENSIONS = frozenset({".mp4", ".webm", ".tgs"})
#: A clip turned into a GIF (:meth:`MemeFile.as_gif`) is at most this wide/high and this large.
GIF_MAX_SIDE = 512
GIF_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Binding:
    """What an adapter sees of a binding: ``scope_id``, ``user_id`` (str or None), ``identity``,
    ``config`` with its secret fields opened (never log it)."""

    scope_id: str
    channel: str
    user_id: str | None
    identity: str | None
    config: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Inbound:
    """One message from a chat app, JSON-able (it travels as a task payload: :meth:`as_payload`).

    - ``sender``: the platform identity of the person (matched against ``channel_bindings.identity``);
    - ``chat``: where a reply goes (the person's private chat, or the group);
    - ``is_group`` / ``mentioned``: a group message is answered only when the bot is mentioned or the
      text is a command (:func:`addressed`);
    - ``text``: the message text with the bot's mention removed;
    - ``images``: platform references of attached images, fetched by :meth:`Adapter.fetch_image`
      (an image alone finds similar memes);
    - ``media``: references of every file the message carries (images, stickers, GIFs, animations,
      clips), what 收 / save keeps; ``reply_media``: those of the message it replies to (Telegram's
      ``reply_to_message``, Discord's "Save to mewdex" target); ``reply_to``: the ``message_id`` of
      the message it replies to, where the reply does not carry its files (QQ's reply segment);
    - ``bind_code``: a one-time code the message carries (Telegram ``/start <code>``), or None;
    - ``message_id``: the platform's id (dedupe), ``extra``: adapter-specific JSON (e.g. a context token);
    - ``scope_id``: the binding the transport authenticated (a OneBot socket's or HTTP signature's
      token, a ClawBot poller's bot token), or None where the platform itself vouches for
      ``sender`` (Telegram's secret header, WeCom's signature: the binding is the sender's). When
      set, the message belongs to that binding only, and only while its identity is ``sender``;
      never to a binding a field of the payload names;
    - ``author``: who wrote it, when that is not ``sender`` (a QQ user writing to the bound bot);
      compared with the owner recorded at binding time (write tools answer only the owner).
    """

    channel: str
    sender: str
    chat: str
    text: str = ""
    images: tuple[str, ...] = ()
    media: tuple[str, ...] = ()
    reply_media: tuple[str, ...] = ()
    reply_to: str | None = None
    is_group: bool = False
    mentioned: bool = False
    bind_code: str | None = None
    message_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    scope_id: str | None = None
    author: str | None = None

    @property
    def person(self) -> str:
        """The platform id of whoever wrote the message (``author``, else ``sender``)."""
        return self.author or self.sender

    def as_payload(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "sender": self.sender,
            "chat": self.chat,
            "text": self.text,
            "images": list(self.images),
            "media": list(self.media),
            "reply_media": list(self.reply_media),
            "reply_to": self.reply_to,
            "is_group": self.is_group,
            "mentioned": self.mentioned,
            "bind_code": self.bind_code,
            "message_id": self.message_id,
            "extra": self.extra,
            "scope_id": self.scope_id,
            "author": self.author,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Inbound:
        tuples = {k: tuple(payload.get(k) or ()) for k in ("images", "media", "reply_media")}
        return cls(**{**payload, **tuples})

    @property
    def files(self) -> tuple[str, ...]:
        """What the message itself carries: ``media``, else ``images``."""
        return self.media or self.images


@dataclass(frozen=True)
class Sent:
    """A platform's acceptance of one message: its message id (if it gives one)."""

    platform_message_id: str | None = None


class DeliveryFailed(Exception):
    """The platform did not deliver. ``code``: ours (``channel_platform_error``, ``channel_rate_limited``,
    ``channel_unreachable``, ``channel_window_closed``, ``channel_blocked``, …); ``platform_code`` /
    ``platform_error``: the platform's own (shown in the delivery log); ``retry_after``: seconds the
    platform asked to wait (honoured before the next attempt); ``retryable``: try again later."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        platform_code: str | int | None = None,
        platform_error: str | None = None,
        retry_after: float | None = None,
        retryable: bool = False,
    ):
        super().__init__(message)
        self.code, self.message = code, message
        self.platform_code = None if platform_code is None else str(platform_code)
        self.platform_error = platform_error
        self.retry_after = retry_after
        self.retryable = retryable or retry_after is not None


@dataclass(frozen=True)
class Button:
    """A button under a reply (platforms with buttons: Telegram's inline keyboard, Discord's
    components): its ``label`` and the ``action`` it sends back (``save:<ref>``, ``another:<n>``; at
    most 64 bytes, Telegram's ``callback_data`` limit)."""

    label: str
    action: str


@dataclass(frozen=True)
class ReplyMode:
    """How a reply is given when it answers a platform's request in place rather than as a message in
    a chat (a *reply mode* of the inbound path, :func:`mewdex.channels.inbound.handle`):

    - ``kind``: ``interaction`` (Discord: the deferred response of an interaction is edited, or an
      ephemeral follow-up sent, with its token) or ``inline`` (Telegram: ``answerInlineQuery``);
    - ``handle``: the platform's key of the answer (the interaction token, the ``inline_query_id``);
      sealed in the delivery's task payload, never logged;
    - ``query``: what was asked (at most 500 characters); ``page``: the first result shown (0; "Another"
      is the next); ``count``: results in one answer (an inline query's list: up to 50);
    - ``lang``: ``en``/``zh``; ``app``: the platform application answering (Discord's application id);
    - ``follow_up``: a message beside the answer instead of the answer itself (Discord's ephemeral
      follow-up: "no more memes");
    - ``deadline``: epoch seconds after which the platform takes no answer (an interaction token's 15
      minutes, an inline query's life): a delivery not sent by then fails ``channel_reply_expired``.
    """

    kind: str
    handle: str = field(repr=False)
    query: str = ""
    page: int = 0
    count: int = 1
    lang: str = "en"
    app: str = ""
    follow_up: bool = False
    deadline: float | None = None

    def as_payload(self) -> dict[str, Any]:
        """Everything but ``handle`` (which travels sealed beside it)."""
        return {
            "kind": self.kind,
            "query": self.query,
            "page": self.page,
            "count": self.count,
            "lang": self.lang,
            "app": self.app,
            "follow_up": self.follow_up,
            "deadline": self.deadline,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any], handle: str) -> ReplyMode:
        return cls(handle=handle, **payload)


@dataclass(frozen=True)
class Reply:
    """What the bot says in one message: ``text`` (a meme's caption when ``meme`` is set), ``meme``,
    ``buttons`` (shown where the platform has them; ignored elsewhere); ``choices``: memes to choose
    from (an inline query's results, without their bytes); ``mode``: the reply mode it answers in
    (None: a message in the chat ``target``)."""

    text: str | None = None
    meme: MemeFile | None = None
    buttons: tuple[Button, ...] = ()
    choices: tuple[MemeFile, ...] = ()
    mode: ReplyMode | None = None


class Adapter:
    """The base of every channel's adapter: the contract (package docstring) with its defaults, so
    that the framework calls every hook directly (a channel overrides what it has).

    Class attributes: ``name`` (``channel_bindings.channel``), ``secret_fields`` (config keys sealed
    at rest), ``min_send_interval`` (seconds between two sends to one chat), ``command_prefixes``
    (a group message starting with one is addressed to the bot), ``outbound_only`` (no inbound, no
    identity: the webhook channel), ``binds_by_code`` (a person binds by sending the framework's
    one-time code to the bot), ``buttons`` (:meth:`send` shows a :class:`Reply`'s buttons),
    ``polls`` (the channel's messages are fetched by :mod:`mewdex.channels.polling`, which calls
    :meth:`poll`)."""

    name: ClassVar[str] = ""
    secret_fields: ClassVar[tuple[str, ...]] = ()
    min_send_interval: ClassVar[float] = 1.0
    command_prefixes: ClassVar[tuple[str, ...]] = ("/",)
    outbound_only: ClassVar[bool] = False
    binds_by_code: ClassVar[bool] = False
    buttons: ClassVar[bool] = False
    polls: ClassVar[bool] = False

    # ---------------------------------------------------------------- set-up and state

    def configured(self) -> bool:
        """The admin has set the channel up (the Channels page offers binding only then)."""
        return True

    def status(self) -> dict[str, Any]:
        """More fields of the Channels page's entry (e.g. a token hint; never a secret)."""
        return {}

    def owner_gone(self, session: Any, scope_id: str) -> None:
        """The owner of ``scope_id`` was disabled or deleted: close what the channel holds open for
        it, in the caller's transaction (OneBot's sockets)."""
        return None

    # ---------------------------------------------------------------- outbound

    def target_of(self, binding: Binding) -> str:
        """Where a proactive send to this binding goes (a chat id, a user id, a URL)."""
        raise NotImplementedError

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        """Send one meme in the channel's native form; raise :class:`DeliveryFailed` when not delivered.
        ``binding`` is None for a reply to an unbound sender."""
        raise NotImplementedError

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        """Send a text message; raise :class:`DeliveryFailed` when not delivered."""
        raise NotImplementedError

    def send(self, binding: Binding | None, target: str, reply: Reply) -> Sent:
        """Send one :class:`Reply` (what the delivery task calls). The default sends the meme with the
        text as its caption, or the text, and leaves out buttons; a channel with ``buttons`` or a
        reply mode (``reply.mode``) overrides it."""
        if reply.meme is not None:
            return self.send_meme(binding, target, reply.meme, reply.text)
        return self.send_text(binding, target, reply.text or "")

    def answer(self, mode: ReplyMode, found: list[MemeFile] | None) -> Reply:
        """The :class:`Reply` of a reply mode (:class:`ReplyMode`), made by the inbound path once it has
        searched: ``found`` is the page of results (``mode.page`` on, at most ``mode.count``, without
        their bytes), or None when the person's binding is not in force (unbound, unconfirmed, its
        owner disabled: nothing from the library). The default: the first meme named, else the
        how-to-bind reply or "nothing found"; a channel with reply modes overrides it."""
        from mewdex.dto.i18n import translate

        if found is None:
            return Reply(self.bind_help(mode.lang), mode=mode)
        if not found:
            return Reply(translate(mode.lang, "bot.no_answer"), mode=mode)
        return Reply(found[0].display_name, found[0], mode=mode)

    # ---------------------------------------------------------------- inbound

    def acknowledge(self, inbound: Inbound) -> None:
        """Tell the platform a message was taken in, where it waits for that (a pressed button:
        Telegram's ``answerCallbackQuery``); called by the inbound task before it answers. Errors
        are the caller's to log, never the message's end."""
        return None

    def fetch_image(self, ref: str) -> bytes:
        """The bytes of an inbound media reference (``Inbound.images``, ``Inbound.reply_media``),
        fetched through the platform's API under the egress rules."""
        raise DeliveryFailed("channel_platform_error", f"{self.name or 'this channel'} takes no inbound media")

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        """The binding ``config`` a bind code sent in ``inbound`` creates (e.g. ``{"chat_id": …}``)."""
        return {}

    def bind_help(self, lang: str) -> str:
        """The short how-to-bind reply an unbound sender gets (``lang``: ``en`` or ``zh``): the
        catalogue's ``bot.bind_help.<name>``."""
        from mewdex.dto.i18n import translate

        return translate(lang, f"bot.bind_help.{self.name}")

    # ---------------------------------------------------------------- polling (mewdex.channels.polling)

    def poll_seconds(self) -> float:
        """How long one poll runs and how often one is queued (read at each schedule tick; only
        for an adapter with ``polls``)."""
        return 30.0

    def poll(self, sessions: Any, seconds: float) -> dict[str, Any]:
        """One poll of about ``seconds`` (the ``<name>_polling`` task): fetch what came, submit it,
        keep the cursor. Returns what the task records."""
        return {}


#: The adapter contract's type (every adapter is an :class:`Adapter`).
ChannelAdapter = Adapter


#: The id of the delivery being sent, while an adapter's ``send_*`` runs (None otherwise): a stable
#: idempotency key for platforms that take one (the same on every retry of that delivery).
current_delivery: ContextVar[str | None] = ContextVar("current_delivery", default=None)


def addressed(inbound: Inbound, prefixes: tuple[str, ...] = ("/",)) -> bool:
    """The group rule, for every channel: a private message is always for the bot; a group message
    only when it mentions the bot or starts with a command prefix."""
    if not inbound.is_group:
        return True
    return inbound.mentioned or inbound.text.lstrip().startswith(prefixes)
