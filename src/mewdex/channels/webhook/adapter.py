"""The webhook channel's adapter: a meme or a text as a signed Standard Webhooks POST (see the
package doc)."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import UUID

from mewdex.channels.base import Adapter, Binding, DeliveryFailed, Inbound, MemeFile, Sent, current_delivery
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import register_adapter
from mewdex.channels.webhook import NAME
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import ChannelDelivery, User
from mewdex.platform import media_urls
from mewdex.providers import webhook as signed
from mewdex.providers.connectors import Connection
from mewdex.providers.errors import ProviderError

#: the largest image sent inline (base64) when there is no public URL to link to
INLINE_IMAGE_BYTES = 256 * 1024


class WebhookAdapter(Adapter):
    name: ClassVar[str] = NAME
    secret_fields: ClassVar[tuple[str, ...]] = ("secret",)
    min_send_interval: ClassVar[float] = 0.0
    command_prefixes: ClassVar[tuple[str, ...]] = ()
    outbound_only: ClassVar[bool] = True

    def target_of(self, binding: Binding) -> str:
        return str(binding.config["url"])

    def binding_config(self, message: Inbound) -> dict[str, Any]:
        raise ChannelError("invalid_request", "the webhook channel has no inbound messages")

    def bind_help(self, lang: str) -> str:
        return ""

    def fetch_image(self, ref: str) -> bytes:
        raise ChannelError("invalid_request", "the webhook channel has no inbound messages")

    def _post(self, binding: Binding | None, event: str, data: dict[str, Any]) -> Sent:
        if binding is None:
            raise DeliveryFailed("channel_not_bound", "a webhook delivery needs its binding")
        connection = Connection(
            definition_id=None,  # type: ignore[arg-type]  # a channel binding, not a connector definition
            provider=signed.PROVIDER,
            name=f"channel:{NAME}",
            revision=0,
            config={"url": binding.config["url"]},
            external_system_id=None,
            credentials={"secret": binding.config["secret"]},
            scope_id=binding.scope_id,
            user_id=UUID(binding.user_id) if binding.user_id else None,
        )
        # The same id and event time on every retry of one delivery: a receiver drops a repeat.
        delivery_id = current_delivery.get()
        message_id = f"msg_{(delivery_id or uuid.uuid4().hex).replace('-', '')}"
        occurred_at = None
        if delivery_id is not None:
            with get_sessionmaker().begin() as session:
                row = session.get(ChannelDelivery, UUID(delivery_id))
                occurred_at = row.created_at if row is not None else None
        try:
            signed.send(get_sessionmaker(), connection, event, data, message_id=message_id, occurred_at=occurred_at)
        except ProviderError as exc:
            raise DeliveryFailed(
                "channel_platform_error" if exc.code == "provider_failed" else "channel_unreachable",
                exc.message,
                platform_code=exc.status_code or exc.code,
                platform_error=exc.message,
                retry_after=(exc.details or {}).get("retry_after"),
                retryable=exc.retryable,
            ) from None
        return Sent(message_id)

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        data: dict[str, Any] = {
            "meme_id": meme.meme_id,
            "display_name": meme.display_name,
            "sha256": meme.sha256,
            "extension": meme.extension,
            "caption": caption,
        }
        data.update(_image_fields(binding, meme))
        return self._post(binding, "channel.meme", data)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        return self._post(binding, "channel.text", {"text": text})


def _image_fields(binding: Binding | None, meme: MemeFile) -> dict[str, Any]:
    """``image_url`` + ``image_expires_at`` (a signed link under ``MEWDEX_PUBLIC_URL``), else
    ``image_base64`` (small images) or ``image_omitted`` (module doc)."""
    settings = get_settings()
    public = settings.public_base() or ""
    if not public:
        if len(meme.data) <= INLINE_IMAGE_BYTES:
            return {"image_base64": base64.b64encode(meme.data).decode()}
        return {"image_omitted": "public_url_missing"}
    with get_sessionmaker().begin() as session:
        # signed for the binding's owner (their scope and auth epoch); no-login mode: no account
        user = session.get(User, UUID(binding.user_id)) if binding is not None and binding.user_id else None
        path, exp = media_urls.sign(user, f"/media/{meme.meme_id}", settings.media_url_ttl_seconds)
    return {"image_url": f"{public}{path}", "image_expires_at": signed.iso_time(datetime.fromtimestamp(exp, UTC))}


ADAPTER = register_adapter(WebhookAdapter())
