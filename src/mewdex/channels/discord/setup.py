"""Setting Discord up for one account: its own application, its commands, its link code, its channel.

Each account brings its own Discord application (developer portal → New Application → Bot → Reset
Token). :func:`connect` takes the bot token, asks Discord which application it belongs to
(``GET /applications/@me``: ``id`` and ``verify_key``, the interactions' public key — so nothing
typed by hand can name someone else's application) and binds it to the account, pending the
person: the binding's identity is set when someone runs ``/link`` with the account's code (the
framework's ``POST /api/v1/channels/discord/code``) and confirms it with the button the answer
carries. One binding holds an application (:data:`~mewdex.channels.bindings.ACCOUNT_KEY`, a unique
index): of two accounts connecting it at once, the second gets ``channel_identity_taken``.
:func:`register_commands` installs ``/meme``, ``/link`` and the message command "Find a meme for
this"; :func:`set_channel` picks the channel scheduled memes go to.

Errors (``ChannelError``): ``channel_config_invalid`` (422: not a bot token, Discord refused it, not a
channel id), ``channel_identity_taken`` (409: the application is bound to another account),
``channel_not_bound`` (404), ``channel_platform_error`` (502: Discord could not be asked).
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.channels import bindings
from mewdex.channels.discord import api, interactions
from mewdex.channels.errors import ChannelError
from mewdex.channels.platform import PlatformError
from mewdex.db.models import ChannelBinding
from mewdex.dto.i18n import translate

NAME = interactions.NAME
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_.-]{50,120}")
SNOWFLAKE = re.compile(r"[0-9]{15,21}")


def _words(key: str) -> dict[str, Any]:
    """A command text in English and its ``zh-CN`` localization (catalogue ``bot.discord.command.<key>``)."""
    return {"en": translate("en", f"bot.discord.command.{key}"), "zh-CN": translate("zh", f"bot.discord.command.{key}")}


def commands() -> list[dict[str, Any]]:
    """The application commands: ``/meme query``, ``/link code`` and the message commands "Find a
    meme for this" and "Save to mewdex"."""

    def described(key: str, **fields: Any) -> dict[str, Any]:
        words = _words(key)
        return {**fields, "description": words["en"], "description_localizations": {"zh-CN": words["zh-CN"]}}

    context = _words("context")
    return [
        described(
            "meme",
            name=interactions.MEME_COMMAND,
            type=1,
            options=[described("meme.query", type=3, name="query", required=True, max_length=interactions.MAX_QUERY)],
        ),
        described(
            "link",
            name=interactions.LINK_COMMAND,
            type=1,
            options=[described("link.code", type=3, name="code", required=True, max_length=64)],
        ),
        {"name": interactions.CONTEXT_COMMAND, "type": 3, "name_localizations": {"zh-CN": context["zh-CN"]}},
        {"name": interactions.SAVE_COMMAND, "type": 3, "name_localizations": {"zh-CN": _words("save")["zh-CN"]}},
    ]


def _platform(exc: PlatformError) -> ChannelError:
    if exc.code == "discord_unauthorized":
        return ChannelError(
            "channel_config_invalid", "Discord does not accept this bot token (reset it, paste the new one)"
        )
    return ChannelError("channel_platform_error", exc.message)


def endpoint_path(application_id: str) -> str:
    """The path of the application's interactions endpoint."""
    return f"/channels/discord/{application_id}/interactions"


def connect(
    session: Session, *, scope_id: str, user_id: UUID | None, bot_token: str, channel_id: str | None = None
) -> ChannelBinding:
    """Bind the application of ``bot_token`` to the scope (module doc); the same application again
    keeps the linked person, another one starts over. Errors: module doc."""
    bot_token = (bot_token or "").strip()
    if not TOKEN_SHAPE.fullmatch(bot_token):
        raise ChannelError("channel_config_invalid", "that is not a Discord bot token (Bot → Reset Token)")
    if channel_id and not SNOWFLAKE.fullmatch(channel_id):
        raise ChannelError("channel_config_invalid", "a channel id is a number (Copy Channel ID)")
    try:
        app = api.application(bot_token)
    except PlatformError as exc:
        raise _platform(exc) from None
    application_id, public_key = str(app.get("id") or ""), str(app.get("verify_key") or "")
    if not application_id.isdigit() or not re.fullmatch(r"[0-9a-f]{64}", public_key):
        raise ChannelError("channel_platform_error", "Discord's answer names no application")
    holder = interactions.binding_of_application(session, application_id)
    if holder is not None and holder.scope_id != scope_id:
        raise ChannelError("channel_identity_taken", "this Discord application is linked to another mewdex account")
    current = bindings.get(session, scope_id, NAME)
    same = current is not None and current.status == "active" and holder is current
    old = dict(current.config or {}) if same and current is not None else {}
    config = {
        "application_id": application_id,
        bindings.ACCOUNT_KEY: application_id,  # one binding holds an application (unique index)
        "application_name": str(app.get("name") or "")[:100],
        "public_key": public_key,
        "bot_token": bot_token,
        "channel_id": channel_id or old.get("channel_id"),
        "commands_registered": bool(old.get("commands_registered")),
        "owner_id": old.get("owner_id"),
    }
    return bindings.bind(
        session,
        scope_id=scope_id,
        user_id=user_id,
        channel=NAME,
        identity=current.identity if same and current is not None else None,
        config=config,
    )


def register_commands(session: Session, scope_id: str) -> list[str]:
    """Install the commands (module doc) on the scope's application; their names."""
    row = bindings.get(session, scope_id, NAME, lock=True)
    if row is None or row.status != "active":
        raise ChannelError("channel_not_bound", "connect a Discord application first")
    config = bindings.open_config(scope_id, NAME, row.config or {})
    try:
        api.put_commands(config["bot_token"], config["application_id"], commands())
    except PlatformError as exc:
        raise _platform(exc) from None
    bindings.update_config(session, row, {"commands_registered": True})
    return [str(c["name"]) for c in commands()]


def set_channel(session: Session, scope_id: str, channel_id: str | None) -> ChannelBinding:
    """Set (or, with None/empty, clear) the channel scheduled memes go to."""
    channel_id = (channel_id or "").strip() or None
    if channel_id and not SNOWFLAKE.fullmatch(channel_id):
        raise ChannelError("channel_config_invalid", "a channel id is a number (Copy Channel ID)")
    row = bindings.get(session, scope_id, NAME, lock=True)
    if row is None or row.status != "active":
        raise ChannelError("channel_not_bound", "connect a Discord application first")
    bindings.update_config(session, row, {"channel_id": channel_id})
    return row


def status(row: ChannelBinding | None) -> dict[str, Any]:
    """What the card shows of a binding: the application, whether the commands are registered,
    whether someone is linked, the schedules' channel (no secret)."""
    config = (row.config or {}) if row is not None and row.status == "active" else {}
    return {
        "application_id": config.get("application_id"),
        "application_name": config.get("application_name"),
        "commands_registered": bool(config.get("commands_registered")),
        "linked": bool(row is not None and row.identity and not bindings.pending(row)),
        "channel_id": config.get("channel_id"),
    }
