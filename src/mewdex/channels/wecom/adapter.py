"""The ``wecom`` adapter (the framework's contract, :mod:`mewdex.channels.base`)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, ClassVar

from mewdex.channels import state
from mewdex.channels.base import Adapter, Binding, DeliveryFailed, Inbound, MemeFile, Sent
from mewdex.channels.platform import PlatformError, failure, fetch_image, picture_bytes
from mewdex.channels.registry import register_adapter
from mewdex.channels.wecom import NAME
from mewdex.channels.wecom.api import (
    MEDIA_REF,
    WeComApp,
    download_media,
    prepare_image,
    send_message,
    send_text,
    upload_media,
)
from mewdex.channels.wecom.setup import APP_SETTING, load_app
from mewdex.config import get_settings
from mewdex.db.engine import get_sessionmaker
from mewdex.db.models import utcnow
from mewdex.platform import instance

log = logging.getLogger(__name__)
MEDIA_TTL = timedelta(days=3) - timedelta(hours=1)  # a temporary media_id lasts 3 days
#: WeCom's codes as a delivery's
CODES = {
    "wecom_ip_not_trusted": "wecom_ip_not_trusted",
    "wecom_user_invalid": "channel_blocked",
    "wecom_rate_limited": "channel_rate_limited",
}


class WeComAdapter(Adapter):
    """The ``wecom`` channel: a self-built app pushes to a member (``wecom_userid``) at any time;
    inbound messages arrive on the callback URL (see :func:`accept_callback`)."""

    name: ClassVar[str] = NAME
    min_send_interval: ClassVar[float] = 0.5

    def _app(self) -> WeComApp:
        with get_sessionmaker().begin() as session:
            app = load_app(session)
        if app is None:
            raise DeliveryFailed("channel_not_configured", "the admin has not set up the WeCom app")
        return app

    def configured(self) -> bool:
        """Whether the admin has set up the app (the Channels page offers binding only then)."""
        with get_sessionmaker().begin() as session:
            return bool(instance.get_setting(session, APP_SETTING, None))

    def target_of(self, binding: Binding) -> str:
        return str(binding.config.get("wecom_userid") or binding.identity or "")

    def binding_config(self, inbound: Inbound) -> dict[str, Any]:
        return {"wecom_userid": inbound.sender}

    def fetch_image(self, ref: str) -> bytes:
        """An inbound image: through ``media/get`` by its ``MediaId`` (:data:`MEDIA_REF`), else its
        ``PicUrl``; under the egress rules, at most the upload limit."""
        limit = get_settings().max_upload_bytes
        if ref.startswith(MEDIA_REF):
            return download_media(self._app(), ref[len(MEDIA_REF) :], limit)
        return fetch_image(ref, max_bytes=limit)

    def send_text(self, binding: Binding | None, target: str, text: str) -> Sent:
        try:
            result = send_text(self._app(), target, text)
        except PlatformError as exc:
            raise failure(exc, CODES) from None
        return Sent(str(result.get("msgid") or "") or None)

    def send_meme(self, binding: Binding | None, target: str, meme: MemeFile, caption: str | None) -> Sent:
        app = self._app()
        sessions = get_sessionmaker()
        bot_id = f"{app.corp_id}:{app.agent_id}"
        try:
            prepared = prepare_image(picture_bytes(meme), stem=meme.meme_id[:8])  # a clip as a GIF (a file)
            media_id = state.cached_file_id(sessions, NAME, bot_id, meme.sha256, prepared.media_type)
            if media_id is None:
                media_id = upload_media(
                    app, prepared.data, prepared.filename, prepared.content_type, prepared.media_type
                )
                state.remember_file_id(sessions, NAME, bot_id, meme.sha256, prepared.media_type, media_id,
                                       expires_at=utcnow() + MEDIA_TTL)  # fmt: skip
            result = send_message(app, target, prepared.media_type, {"media_id": media_id})
        except PlatformError as exc:
            raise failure(exc, CODES) from None
        if caption:
            try:
                send_text(app, target, caption)
            except PlatformError as exc:  # the meme arrived; its caption did not
                log.warning("wecom: the caption after a meme was not delivered (%s)", exc.code)
        return Sent(str(result.get("msgid") or "") or None)


register_adapter(WeComAdapter())
