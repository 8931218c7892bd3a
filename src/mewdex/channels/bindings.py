"""Bindings (seed 004 ``channel_bindings``), one-time bind codes and the standing conversation.

Every function takes the caller's ``Session`` and never commits. Secret config fields (the
adapter's ``secret_fields``) are sealed with :mod:`mewdex.providers.secrets`, bound to
``channel_bindings:<scope>:<channel>:<field>``; :func:`view` opens them for an adapter.
"""

from __future__ import annotations

import hashlib
import secrets as _random
from datetime import timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mewdex.assistant import service as assistant
from mewdex.channels.base import Binding
from mewdex.channels.errors import ChannelError
from mewdex.channels.registry import adapter
from mewdex.db.models import ChannelBindCode, ChannelBinding, ChannelDelivery, Conversation, ScopeContext, utcnow
from mewdex.providers import sealed_fields, secrets

BIND_CODE_TTL_SECONDS = 15 * 60
PENDING_KEY = "pending_confirmation"
#: The config key naming the outside account a binding holds when the account brings its own (a
#: Discord application id): one active binding per channel holds it (unique index
#: ``uq_channel_bindings_active_account``), as one holds an identity (``uq_channel_bindings_active_identity``).
ACCOUNT_KEY = "account_id"
#: The unique indexes whose violation means "another account holds this outside identity".
_HELD_ELSEWHERE = ("uq_channel_bindings_active_identity", "uq_channel_bindings_active_account")
TITLES = {"telegram": "Telegram", "webhook": "Webhook", "onebot": "QQ", "wecom": "WeCom", "clawbot": "WeChat"}


_aad = sealed_fields.channel_binding_aad


def seal_config(scope_id: str, channel: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the channel's secret fields sealed (already sealed values are kept)."""
    fields = adapter(channel).secret_fields
    return {
        k: (
            secrets.seal(str(v), _aad(scope_id, channel, k))
            if k in fields and v is not None and not secrets.is_sealed(v)
            else v
        )
        for k, v in config.items()
    }


def open_config(scope_id: str, channel: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its sealed fields opened. Raises ``SecretError`` when one cannot be."""
    return {
        k: secrets.open_sealed(v, _aad(scope_id, channel, k)) if secrets.is_sealed(v) else v for k, v in config.items()
    }


def view(row: ChannelBinding) -> Binding:
    """What an adapter sees of ``row`` (secrets opened)."""
    return Binding(
        scope_id=row.scope_id,
        channel=row.channel,
        user_id=str(row.user_id) if row.user_id else None,
        identity=row.identity,
        config=open_config(row.scope_id, row.channel, row.config or {}),
    )


def api_view(row: ChannelBinding) -> dict[str, Any]:
    """``row`` as the API shows it (``channels.shapes.ChannelBinding``): its config without the
    adapter's secret fields and without nested objects."""
    from mewdex.channels.registry import ADAPTERS

    secret = set(ADAPTERS[row.channel].secret_fields) if row.channel in ADAPTERS else set()
    config = {k: v for k, v in (row.config or {}).items() if k not in secret and not isinstance(v, dict)}
    return {
        "channel": row.channel,
        "status": row.status,
        "identity": row.identity,
        "config": config,
        "conversation_id": config.get("chat_task_id"),
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        "revoked_at": row.revoked_at.isoformat() if row.revoked_at is not None else None,
    }


def owner_user_id(session: Session, scope_id: str) -> UUID | None:
    """The id of the account whose personal scope is ``scope_id`` (None for single-user mode's local
    scope): the ``user_id`` a binding made by a signed-in caller records."""
    from mewdex.platform import owners

    owner = owners.user_for_scope(session, scope_id)
    return owner.user_id if owner is not None else None


def get(session: Session, scope_id: str, channel: str, *, lock: bool = False) -> ChannelBinding | None:
    """The scope's binding to ``channel`` (any status), or None."""
    stmt = select(ChannelBinding).where(ChannelBinding.scope_id == scope_id, ChannelBinding.channel == channel)
    if lock:
        stmt = stmt.with_for_update()
    return session.execute(stmt).scalar_one_or_none()


def active(session: Session, scope_id: str, channel: str, *, lock: bool = False) -> ChannelBinding:
    """The scope's active, confirmed binding to ``channel``; ``channel_not_bound`` otherwise (also
    while the chat has not confirmed it: :func:`pending`)."""
    row = get(session, scope_id, channel, lock=lock)
    if row is None or row.status != "active":
        raise ChannelError("channel_not_bound", f"no active {channel} binding")
    if pending(row):
        raise ChannelError("channel_not_bound", f"the {channel} chat has not confirmed the link yet")
    return row


def pending(row: ChannelBinding) -> bool:
    """Whether the chat has yet to confirm this binding (a bind code was used; the chat was asked
    "Link this chat to mewdex account …? Reply YES"). A pending binding answers nothing but that
    question, and another account's code may replace it."""
    return bool((row.config or {}).get(PENDING_KEY))


def confirm(session: Session, row: ChannelBinding) -> None:
    """The chat said YES: the binding is in force."""
    update_config(session, row, {PENDING_KEY: False})


def in_force(session: Session, row: ChannelBinding | None) -> bool:
    """The one owner check of an answer from the library: the binding is active, its chat has
    confirmed it (not :func:`pending`), and its owner's account is enabled."""
    from mewdex.platform import owners

    return bool(
        row is not None and row.status == "active" and not pending(row) and owners.owner_active(session, row.scope_id)
    )


def owner_of(row: ChannelBinding) -> str | None:
    """The platform account of the binding's owner, recorded at binding time (``owner_id``; a
    OneBot binding's ``owner_qq``; else the bound identity): the only person whose messages may
    use the assistant's write tools."""
    config = row.config or {}
    return config.get("owner_id") or config.get("owner_qq") or row.identity


def scope_of_user(session: Session, user_id: UUID | str | None) -> str:
    """The scope a user's bindings live in: the account's personal scope, or (None: single-user mode)
    the local scope. ``not_found`` for an unknown account."""
    from mewdex.db.models import User
    from mewdex.library.scopes import default_scope

    if user_id is None:
        return default_scope().scope_id
    user = session.get(User, UUID(str(user_id)))
    if user is None:
        raise ChannelError("not_found", "no such user")
    return user.scope_id


def list_bindings(session: Session, scope_id: str) -> list[ChannelBinding]:
    """The scope's bindings (active and revoked), newest first."""
    return list(
        session.execute(
            select(ChannelBinding)
            .where(ChannelBinding.scope_id == scope_id)
            .order_by(ChannelBinding.updated_at.desc(), ChannelBinding.channel)
        ).scalars()
    )


def find_by_identity(session: Session, channel: str, identity: str) -> ChannelBinding | None:
    """The active binding of ``channel`` whose identity is ``identity`` (inbound routing)."""
    return session.execute(
        select(ChannelBinding).where(
            ChannelBinding.channel == channel, ChannelBinding.identity == identity, ChannelBinding.status == "active"
        )
    ).scalar_one_or_none()


def bind(
    session: Session,
    *,
    scope_id: str,
    user_id: UUID | None,
    channel: str,
    identity: str | None,
    config: dict[str, Any],
) -> ChannelBinding:
    """Create or re-activate the scope's binding to ``channel`` with ``identity`` and ``config``
    (secret fields sealed here; the standing conversation id of an earlier binding is kept).
    ``channel_identity_taken`` (409) when that identity, or the outside account ``config`` names
    (:data:`ACCOUNT_KEY`), is actively bound to another scope — also for the loser of two accounts
    binding it at once: the unique indexes decide, under a savepoint, so the loser gets this error and
    its transaction stays usable (nothing of the attempt is kept)."""
    if identity is not None:
        other = find_by_identity(session, channel, identity)
        if other is not None and other.scope_id != scope_id:
            if not pending(other):
                raise ChannelError("channel_identity_taken", f"this {channel} chat is bound to another account")
            other.status, other.revoked_at = "revoked", utcnow()  # never confirmed: it holds nothing
            session.flush()
    try:
        with session.begin_nested():
            row = get(session, scope_id, channel, lock=True)
            if row is None:
                row = ChannelBinding(scope_id=scope_id, channel=channel, user_id=user_id, config={})
                session.add(row)
            kept = {k: v for k, v in (row.config or {}).items() if k == "chat_task_id"}
            row.config = seal_config(scope_id, channel, {**kept, **config})
            row.identity = identity
            row.user_id = user_id
            row.status = "active"
            row.revoked_at = None
            row.updated_at = utcnow()
            session.flush()
    except IntegrityError as exc:
        if getattr(getattr(exc.orig, "diag", None), "constraint_name", None) not in _HELD_ELSEWHERE:
            raise
        raise ChannelError("channel_identity_taken", f"this {channel} account is bound to another account") from None
    return row


def update_config(session: Session, row: ChannelBinding, changes: dict[str, Any]) -> None:
    """Merge ``changes`` into ``row.config`` (secret fields sealed); the caller holds the row."""
    row.config = {**(row.config or {}), **seal_config(row.scope_id, row.channel, changes)}
    row.updated_at = utcnow()


def revoke(session: Session, scope_id: str, channel: str) -> ChannelBinding:
    """Revoke at once: inbound from its identity is treated as unbound, and its queued deliveries are
    cancelled (their tasks find the delivery cancelled and send nothing). A link still waiting for
    the chat's YES (:func:`pending`) is revoked the same way. ``channel_not_bound``."""
    row = get(session, scope_id, channel, lock=True)
    if row is None or row.status != "active":
        raise ChannelError("channel_not_bound", f"no active {channel} binding")
    row.status = "revoked"
    row.revoked_at = row.updated_at = utcnow()
    session.execute(
        update(ChannelDelivery)
        .where(
            ChannelDelivery.scope_id == scope_id,
            ChannelDelivery.channel == channel,
            ChannelDelivery.bound.is_(True),
            ChannelDelivery.status.in_(("queued", "retrying")),
        )
        .values(status="cancelled", error_code="channel_binding_revoked", updated_at=utcnow())
    )
    return row


# ------------------------------------------------------------------ bind codes


def _code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def new_bind_code(session: Session, *, scope_id: str, user_id: UUID | None, channel: str) -> str:
    """A one-time code (32 characters of ``[A-Za-z0-9_-]``, valid :data:`BIND_CODE_TTL_SECONDS`)
    that binds the chat it is sent from to ``scope_id``; only its hash is stored."""
    adapter(channel)  # channel_unknown
    code = _random.token_urlsafe(24)
    session.add(
        ChannelBindCode(
            code_sha256=_code_hash(code),
            channel=channel,
            scope_id=scope_id,
            user_id=user_id,
            expires_at=utcnow() + timedelta(seconds=BIND_CODE_TTL_SECONDS),
        )
    )
    return code


def issue_bind_code(session: Session, *, scope_id: str, user_id: UUID | None, channel: str) -> dict[str, Any]:
    """A one-time code for a channel that binds by a code sent from the chat app (its adapter's
    ``binds_by_code``; the Channels page's generic card): ``{"code", "expires_in"}`` (seconds).
    ``channel_unknown`` (404), ``channel_not_configured`` (409: the admin has not set it up),
    ``channel_config_invalid`` (422: the channel binds another way)."""
    if not adapter(channel).binds_by_code:
        raise ChannelError("channel_config_invalid", f"{channel} does not bind by a code; see its guide")
    return link_code(session, scope_id=scope_id, user_id=user_id, channel=channel)


def link_code(session: Session, *, scope_id: str, user_id: UUID | None, channel: str) -> dict[str, Any]:
    """The one way a one-time link code is made (the generic card, Telegram's deep link, WeCom's
    code): ``{"code", "expires_in"}`` (seconds). ``channel_unknown`` (404), ``channel_not_configured``
    (409: the admin has not set the channel up)."""
    if not adapter(channel).configured():
        raise ChannelError("channel_not_configured", f"the admin has not set up {channel} yet")
    code = new_bind_code(session, scope_id=scope_id, user_id=user_id, channel=channel)
    return {"code": code, "expires_in": BIND_CODE_TTL_SECONDS}


def _use(session: Session, code_hash: str, channel: str, scope_id: str | None) -> ChannelBindCode | None:
    """The one checked consume of a one-time code: the row is locked, then every check is made —
    ``channel``, unused, unexpired, the account it must belong to (``scope_id``, when the caller
    already knows which account may use it), that account's owner enabled — and only then is it
    marked used. A code that fails a check is left as it was (None): a request that may not use a
    code never uses it up."""
    from mewdex.platform import owners

    row = session.execute(
        select(ChannelBindCode).where(ChannelBindCode.code_sha256 == code_hash).with_for_update()
    ).scalar_one_or_none()
    if (
        row is None
        or row.channel != channel
        or row.used_at is not None
        or row.expires_at <= utcnow()
        or (scope_id is not None and row.scope_id != scope_id)
        or not owners.owner_active(session, row.scope_id)
    ):
        return None
    row.used_at = utcnow()
    return row


def redeem_bind_code(session: Session, channel: str, code: str, *, scope_id: str | None = None) -> ChannelBindCode:
    """Use up ``code`` (:func:`_use`: checked first, then used, under its row lock; once only).
    ``scope_id``: the account the code must belong to (a Discord application's: a code of another
    account is refused and stays usable). ``bind_code_invalid`` (404) for an unknown, used, expired,
    other-channel or other-account code, or one whose account is disabled."""
    row = _use(session, _code_hash(code), channel, scope_id)
    if row is None:
        raise ChannelError("bind_code_invalid", "the bind code is unknown, used or expired")
    return row


def issue_login(session: Session, *, scope_id: str, user_id: UUID | None, channel: str, login_id: str) -> None:
    """Record that the platform login ``login_id`` (e.g. a ClawBot QR code id) was started by
    ``scope_id``, so that only its starter may poll or complete it (valid :data:`BIND_CODE_TTL_SECONDS`)."""
    session.add(
        ChannelBindCode(
            code_sha256=_code_hash("login:" + login_id),
            channel=channel,
            scope_id=scope_id,
            user_id=user_id,
            expires_at=utcnow() + timedelta(seconds=BIND_CODE_TTL_SECONDS),
        )
    )


def login_started_by(session: Session, *, scope_id: str, channel: str, login_id: str) -> bool:
    """Whether ``scope_id`` started the platform login ``login_id`` (:func:`issue_login`), unexpired
    and not yet completed (a read; completing it is :func:`finish_login`)."""
    row = session.get(ChannelBindCode, _code_hash("login:" + login_id))
    return (
        row is not None
        and row.channel == channel
        and row.scope_id == scope_id
        and row.used_at is None
        and row.expires_at > utcnow()
    )


def finish_login(session: Session, *, scope_id: str, channel: str, login_id: str) -> None:
    """Complete the platform login ``login_id`` for ``scope_id`` through the same checked consume
    as a bind code (:func:`_use`): only its starter, once, unexpired. ``not_found`` (404) otherwise
    (another account's, finished, or expired login: nothing is bound)."""
    if _use(session, _code_hash("login:" + login_id), channel, scope_id) is None:
        raise ChannelError("not_found", "no such login")


# ------------------------------------------------------------------ the standing conversation


def standing_conversation(session: Session, row: ChannelBinding) -> Conversation:
    """The conversation inbound messages of this binding go to (``config.chat_task_id``), locked;
    made (``channel`` set, a fixed title) when there is none or it was deleted."""
    scope = ScopeContext(row.scope_id)
    cid = (row.config or {}).get("chat_task_id")
    if cid:
        found = session.execute(
            select(Conversation)
            .where(
                Conversation.conversation_id == UUID(str(cid)),
                Conversation.scope_id == row.scope_id,
                Conversation.deleted_at.is_(None),
            )
            .with_for_update()
        ).scalar_one_or_none()
        if found is not None:
            return found
    conversation = assistant.create_conversation(
        session, scope, user_id=row.user_id, name=TITLES.get(row.channel, row.channel), channel=row.channel
    )
    conversation.title_source = "fixed"
    update_config(session, row, {"chat_task_id": str(conversation.conversation_id)})
    session.flush()
    return conversation
