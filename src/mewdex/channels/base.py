"""The adapter contract of a channel (see the package docstring) and the types it speaks:
:class:`MemeFile`, :class:`Binding`, :class:`Inbound`, :class:`Sent`, :class:`DeliveryFailed`.

Adapters are registered and found by name in :mod:`mewdex.channels.registry`
(``register_adapter``, ``adapter``), which also declares which channels exist.
"""

from __future__ import annotations

import io
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True)
class MemeFile:
    """A meme to send: its bytes, lower-case ``extension`` (``.gif``), ``sha256``, ``display_name``,
    ``meme_id`` (str)."""

    meme_id: str
    data: bytes
    extension: str
    sha256: str
    display_name: str

    @property
    def animated(self) -> bool:
        return self.extension == ".gif"

    def as_png(self) -> bytes:
        """The first frame as PNG (for platforms that cannot show this format)."""
        from PIL import Image

        with Image.open(io.BytesIO(self.data)) as image:
            image.seek(0)
            out = io.BytesIO()
            image.convert("RGBA").save(out, "PNG")
            return out.getvalue()


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
    - ``images``: platform references of attached images, fetched by :meth:`ChannelAdapter.fetch_image`;
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
        return cls(**{**payload, "images": tuple(payload.get("images") or ())})


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


class ChannelAdapter(Protocol):
    """One channel (see the package docstring for the whole contract).

    Class attributes: ``name`` (``channel_bindings.channel``), ``secret_fields`` (config keys sealed
    at rest), ``min_send_interval`` (seconds between two sends to one chat), ``command_prefixes``
    (a group message starting with one is addressed to the bot), ``outbound_only`` (no inbound, no
    identity: the webhook channel)."""

    name: ClassVar[str]
    secret_fields: ClassVar[tuple[str, ...]]
    min_send_interval: ClassVar[float]
    command_prefixes: ClassVar[tuple[str, ...]]
    outbound_only: ClassVar[bool]

    def target_of(self, binding: Binding) -> str:
        """Where a proactive send to this binding goes (a chat id, a user id, a URL)."""
        ...

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        """Send one meme in the channel's native form; raise :class:`DeliveryFailed` when not delivered.
        ``binding`` is None for a reply to an unbound sender."""
        ...

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        """Send a text message; raise :class:`DeliveryFailed` when not delivered."""
        ...

    def fetch_image(self, ref: str) -> bytes:
        """The bytes of an inbound image reference (``Inbound.images``)."""
        ...

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        """The binding ``config`` a bind code sent in ``inbound`` creates (e.g. ``{"chat_id": …}``)."""
        ...

    def bind_help(self, lang: str) -> str:
        """The short how-to-bind reply an unbound sender gets (``lang``: ``en`` or ``zh``)."""
        ...


#: The id of the delivery being sent, while an adapter's ``send_*`` runs (None otherwise): a stable
#: idempotency key for platforms that take one (the same on every retry of that delivery).
current_delivery: ContextVar[str | None] = ContextVar("current_delivery", default=None)


def addressed(inbound: Inbound, prefixes: tuple[str, ...] = ("/",)) -> bool:
    """The group rule, for every channel: a private message is always for the bot; a group message
    only when it mentions the bot or starts with a command prefix."""
    if not inbound.is_group:
        return True
    return inbound.mentioned or inbound.text.lstrip().startswith(prefixes)
