"""Discord's REST API (v10), through :mod:`mewdex.channels.platform`: the calls this channel makes.

Calls: ``GET /applications/@me`` (the application a bot token belongs to: ``id``, ``name``,
``verify_key`` = the interactions' Ed25519 public key), ``PUT /applications/{id}/commands`` (the
global commands, bulk-overwritten), ``POST /channels/{id}/messages`` (a scheduled meme, bot token),
``PATCH /webhooks/{application_id}/{interaction_token}/messages/@original`` and ``POST
/webhooks/{application_id}/{interaction_token}`` (an interaction's answer and its follow-ups: the
token is the credential, no bot token). A file goes as ``multipart/form-data``: the JSON body in
``payload_json``, the file in ``files[0]`` (``attachments: [{"id": 0, "filename"}]``).

Refusals are ``{"code", "message"}`` (``50001`` missing access, ``50013`` missing permissions,
``10003`` unknown channel, ``10015`` unknown webhook: an expired interaction token; ``0`` with 401:
a bad bot token) and, for 429, ``{"retry_after": seconds, "global"}``. :func:`call` raises
:class:`~mewdex.channels.platform.PlatformError`: ``channel_rate_limited`` (``retry_after``),
``channel_blocked`` (403: the bot may not post there), ``discord_unauthorized`` (401: the bot token
was reset), ``discord_refused`` (any other refusal; 5xx retryable), the ``egress_*`` code when
Discord did not answer. :func:`failure` makes it a ``DeliveryFailed``. No message names a token.
"""

from __future__ import annotations

import json
from typing import Any

from mewdex.channels import platform
from mewdex.channels.base import DeliveryFailed, MemeFile
from mewdex.channels.discord.settings import settings
from mewdex.channels.platform import PlatformError

USER_AGENT = "DiscordBot (https://github.com/mewdex/mewdex, 1.0)"
MAX_CONTENT = 2000
MAX_BYTES = 1024 * 1024
_TYPES = {
    ".gif": "image/gif",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
    ".avif": "image/avif",
    ".heic": "image/heic",
}


def api_url() -> str:
    """The API base URL without a trailing slash (``MEWDEX_DISCORD_API_URL``)."""
    return settings().discord_api_url.rstrip("/")


def failure(exc: PlatformError) -> DeliveryFailed:
    """``exc`` as a failed delivery (``discord_unauthorized`` / ``discord_refused`` →
    ``channel_platform_error``; the ``channel_*`` codes stay)."""
    return platform.failure(exc)


def call(
    method: str,
    path: str,
    *,
    what: str,
    bot_token: str | None = None,
    payload: Any = None,
    meme: MemeFile | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """One API call (``path`` after the base URL); its JSON object (``{}`` for an answer that is
    not one, e.g. a list). ``bot_token``: ``Authorization: Bot …``; ``meme``: attached to the
    message ``payload``. ``what`` names the call in errors (never the path: it may hold a token).
    Raises :class:`PlatformError` (module doc)."""
    headers = {"user-agent": USER_AGENT}
    if bot_token:
        headers["authorization"] = f"Bot {bot_token}"
    body = None
    if meme is not None:
        filename = f"meme{meme.extension or '.png'}"
        fields = {"payload_json": {**(payload or {}), "attachments": [{"id": 0, "filename": filename}]}}
        files = {"files[0]": (filename, meme.data, _TYPES.get(meme.extension, "application/octet-stream"))}
        body, headers["content-type"] = platform.multipart(fields, files)
    elif payload is not None:
        body, headers["content-type"] = json.dumps(payload, ensure_ascii=False).encode(), "application/json"
    try:
        answer = platform.call_json(
            method,
            api_url() + path,
            platform="Discord",
            what=what,
            error_code="discord_refused",
            headers=headers,
            content=body,
            timeout=timeout,
            max_bytes=MAX_BYTES,
            errors_in_body=True,
        )
    except PlatformError as exc:
        if exc.code == platform.NOT_JSON and isinstance(exc.platform_code, int) and 200 <= exc.platform_code < 300:
            return {}  # a list (the registered commands) or an empty 204: done
        raise
    if answer.status < 300:
        return answer.data
    code, text = answer.data.get("code"), str(answer.data.get("message") or f"HTTP {answer.status}")[:300]
    if answer.status == 429:
        wait = float(answer.data.get("retry_after") or 1)
        raise PlatformError(
            "channel_rate_limited", f"Discord asked to wait {wait} s ({what})", 429, text, retry_after=wait
        )
    kind = {401: "discord_unauthorized", 403: "channel_blocked"}.get(answer.status, "discord_refused")
    raise PlatformError(
        kind, f"Discord refused {what}: {text}", code or answer.status, text, retryable=answer.status >= 500
    )


def application(bot_token: str) -> dict[str, Any]:
    """The bot token's application: ``{"id", "name", "verify_key", …}`` (``GET /applications/@me``)."""
    return call("GET", "/applications/@me", bot_token=bot_token, what="reading the application")


def put_commands(bot_token: str, application_id: str, commands: list[dict[str, Any]]) -> None:
    """Overwrite the application's global commands with ``commands``."""
    call(
        "PUT",
        f"/applications/{application_id}/commands",
        bot_token=bot_token,
        payload=commands,
        what="registering the commands",
    )


def post_message(bot_token: str, channel_id: str, payload: dict[str, Any], meme: MemeFile | None = None) -> str:
    """Post a message (with ``meme`` attached) to ``channel_id``; the message id."""
    sent = call(
        "POST", f"/channels/{channel_id}/messages", bot_token=bot_token, payload=payload, meme=meme, what="sending"
    )
    return str(sent.get("id") or "")


def edit_original(
    application_id: str, interaction_token: str, payload: dict[str, Any], meme: MemeFile | None = None
) -> dict[str, Any]:
    """Edit an interaction's original answer (the deferred "thinking" message, or the message whose
    button was pressed)."""
    return call(
        "PATCH",
        f"/webhooks/{application_id}/{interaction_token}/messages/@original",
        payload=payload,
        meme=meme,
        what="answering the interaction",
    )


def follow_up(application_id: str, interaction_token: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A follow-up message of an interaction (``flags: 64``: visible to its user only)."""
    return call(
        "POST", f"/webhooks/{application_id}/{interaction_token}", payload=payload, what="following the interaction up"
    )
