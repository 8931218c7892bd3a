"""Connectors (seed 004): definitions admins create, grants to users, users' connections with
sealed credentials, verification against a definition's revision, and one audit row per outside
call. Every outside call of a provider goes through :mod:`mewdex.egress`.

* A **definition** (``external_system_definitions``) names a provider (:data:`PROVIDERS`) and its
  config; changing the config bumps ``revision``. ``owner_type`` ``platform`` (an admin's; it may
  hold the platform's own sealed credentials, usable by everyone it is visible to) or ``user``.
  ``visibility`` ``all`` or ``selected`` (only users with a grant).
* A **connection** (``external_systems``) is one user's credentials for a definition they may see;
  it is usable only while ``verified_revision`` equals the definition's revision.
* :func:`resolve` picks what a call uses: the user's own verified connection of the wanted
  provider, else a platform definition with credentials visible to them.
* :func:`audit` writes ``external_system_audits`` (never credentials or bodies).

Secrets are sealed with :mod:`mewdex.providers.secrets` (bound to the row's id); answers carry only
``credential_hint``.

The connectors are a capability package (docs/architecture.md "A capability is a package"): this
module is the service (what the other providers, the channels, the schedules, the assistant, the
command line and the runtime import), and beside it

- ``settings``: ``MEWDEX_RETENTION_AUDIT_DAYS`` (:class:`~.settings.ConnectorSettings`, hook ``settings``);
- ``routes`` (the JSON API) and ``pages`` (the user's page, the audit viewers, the admin page),
  imported by the web layer only, which mounts ``routes.router``; ``views`` (a row as the API shows
  it), ``shapes`` (the API's request and response models);
- ``page.html``, ``admin.html``, ``audits.html`` (``connectors/…`` to the web layer's templates),
  ``static/`` (``connectors.js``, ``connectors.css``: served under ``/static/``),
  ``locales/{en,zh}.json`` (its words: the pages', the providers' names, its error codes; added to
  the catalogues when the package is imported).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.capability import Capability, NavEntry
from mewdex.db.models import (
    ExternalSystem,
    ExternalSystemAudit,
    ExternalSystemDefinition,
    ExternalSystemGrant,
    ScopeContext,
    User,
    utcnow,
)
from mewdex.dto import i18n
from mewdex.providers import sealed_fields, secrets
from mewdex.providers.connectors.settings import ConnectorSettings  # noqa: F401 - the package's settings
from mewdex.providers.connectors.settings import settings as connector_settings  # noqa: F401 - re-exported
from mewdex.providers.errors import ProviderError

i18n.add_messages(Path(__file__).parent / "locales")

#: Its declaration (hook ``capabilities``): its error codes → HTTP status, its page's link in the header,
#: what the web layer mounts (its routes, its templates, its static/ folder).
CAPABILITY = hooks.provide(
    "capabilities",
    "connectors",
    Capability(
        name="connectors",
        errors={"connector_name_taken": 409, "connector_unverified": 409, "connector_unavailable": 409},
        nav=(NavEntry(page="connectors", path="/connectors", label="nav.connectors", order=100),),
        routes="mewdex.providers.connectors.routes",  # the API, then pages.py's pages
        templates=True,  # "connectors/page.html" …
        static=True,  # connectors.js, connectors.css
    ),
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderSpec:
    """What mewdex knows of one provider: ``validate_config(config) -> config`` (raises
    ``connector_config_invalid``), the credential fields it needs, ``verify(connection)`` (one cheap
    outside call; returns ``(status_code, response_bytes)``, raises :class:`ProviderError`)."""

    name: str
    validate_config: Callable[[dict[str, Any]], dict[str, Any]]
    credential_fields: tuple[str, ...]
    verify: Callable[[Connection], tuple[int | None, int | None]] | None = None


#: The providers loaded so far (the ``providers`` hook's live mapping, :mod:`mewdex.hooks`; the
#: built-in ones are declared there and imported on first lookup).
PROVIDERS: dict[str, ProviderSpec] = hooks.provided("providers")


def register_provider(spec: ProviderSpec) -> ProviderSpec:
    """Provide ``spec`` (the ``providers`` hook)."""
    return hooks.provide("providers", spec.name, spec, stacklevel=2)


def provider_spec(name: str) -> ProviderSpec:
    spec: ProviderSpec | None = hooks.get("providers", name)
    if spec is None:
        raise ProviderError("provider_unknown", f"unknown provider {name!r}", {"known": sorted(provider_specs())})
    return spec


def provider_specs() -> dict[str, ProviderSpec]:
    """Every known provider by name (every plugin that declares one imported)."""
    return dict(sorted(hooks.implementations("providers").items()))


@dataclass
class Connection:
    """What one call uses: the definition, its revision and config, the connection (None when the
    platform's credentials are used) and the decrypted credentials (never log this object)."""

    definition_id: uuid.UUID
    provider: str
    name: str
    revision: int
    config: dict[str, Any]
    external_system_id: uuid.UUID | None
    credentials: dict[str, str] = field(repr=False)
    scope_id: str = ""
    user_id: uuid.UUID | None = None


# ------------------------------------------------------------------ sealing


def _seal_all(credentials: dict[str, str], aad: str) -> tuple[dict[str, Any], str]:
    sealed = {k: secrets.seal(v, aad) for k, v in credentials.items() if v}
    primary = next((v for v in credentials.values() if v), "")
    return sealed, secrets.hint(primary) or "***"


def _open_all(sealed: dict[str, Any], aad: str) -> dict[str, str]:
    try:
        return {k: secrets.open_sealed(v, aad) for k, v in (sealed or {}).items() if secrets.is_sealed(v)}
    except secrets.SecretError as exc:
        raise ProviderError("secret_undecryptable", exc.message) from None


_definition_aad = sealed_fields.definition_aad
_system_aad = sealed_fields.system_aad


# ------------------------------------------------------------------ definitions


def create_definition(
    session: Session,
    *,
    provider: str,
    name: str,
    config: dict[str, Any],
    owner_type: str = "platform",
    owner_user_id=None,
    visibility: str = "selected",
    trust_level: str = "managed",
    review_status: str = "active",
    enabled: bool = True,
    credentials: dict[str, str] | None = None,
    created_by=None,
) -> ExternalSystemDefinition:
    """A new definition at revision 1 (config validated by the provider). ``credentials``: the
    platform's own (sealed). Raises ``provider_unknown``, ``connector_config_invalid``,
    ``connector_name_taken``."""
    spec = provider_spec(provider)
    config = spec.validate_config(dict(config or {}))
    _check_choice("owner_type", owner_type, ("platform", "user"))
    _check_choice("visibility", visibility, ("all", "selected"))
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise ProviderError("connector_config_invalid", "a definition needs a name of 1–200 characters")
    owner_filter = (
        (ExternalSystemDefinition.owner_type == "platform")
        if owner_type == "platform"
        else (ExternalSystemDefinition.owner_user_id == owner_user_id)
    )
    if session.execute(
        select(ExternalSystemDefinition.definition_id).where(
            ExternalSystemDefinition.provider == provider, ExternalSystemDefinition.name == name, owner_filter
        )
    ).first():
        raise ProviderError("connector_name_taken", f"a {provider} definition named {name!r} exists")
    definition_id = uuid.uuid4()
    sealed, hint = _seal_all(credentials or {}, _definition_aad(definition_id))
    row = ExternalSystemDefinition(
        definition_id=definition_id,
        provider=provider,
        name=name,
        config=config,
        revision=1,
        owner_type=owner_type,
        owner_user_id=owner_user_id,
        visibility=visibility,
        trust_level=trust_level,
        review_status=review_status,
        enabled=enabled,
        credentials=sealed,
        credential_hint=hint if sealed else None,
        created_by=created_by,
    )
    session.add(row)
    session.flush()
    return row


def update_definition(
    session: Session,
    definition_id,
    *,
    config: dict[str, Any] | None = None,
    credentials: dict[str, str] | None = None,
    **changes: Any,
) -> ExternalSystemDefinition:
    """Change a definition. A different ``config`` (after validation) or new platform
    ``credentials`` bump ``revision``: connections verified against the older one must verify
    again. ``changes``: ``name``, ``visibility``, ``trust_level``, ``review_status``, ``enabled``."""
    row = get_definition(session, definition_id, for_update=True)
    bump = False
    if config is not None:
        config = provider_spec(row.provider).validate_config(dict(config))
        if config != row.config:
            row.config, bump = config, True
    if credentials is not None:
        sealed, hint = _seal_all(credentials, _definition_aad(row.definition_id))
        if _open_all(row.credentials, _definition_aad(row.definition_id)) != {
            k: v for k, v in credentials.items() if v
        }:
            row.credentials, row.credential_hint, bump = sealed, (hint if sealed else None), True
    for key, value in changes.items():
        if key not in ("name", "visibility", "trust_level", "review_status", "enabled"):
            raise ProviderError("connector_config_invalid", f"{key} cannot be changed")
        if key == "visibility":
            _check_choice("visibility", value, ("all", "selected"))
        setattr(row, key, value)
    if bump:
        row.revision += 1
    row.updated_at = utcnow()
    session.flush()
    return row


def get_definition(session: Session, definition_id, *, for_update: bool = False) -> ExternalSystemDefinition:
    query = select(ExternalSystemDefinition).where(ExternalSystemDefinition.definition_id == _uuid(definition_id))
    row = session.execute(query.with_for_update() if for_update else query).scalar_one_or_none()
    if row is None:
        raise ProviderError("not_found", "no such connector definition")
    return row


def list_definitions(session: Session) -> list[ExternalSystemDefinition]:
    """Every definition (admin)."""
    return list(
        session.execute(
            select(ExternalSystemDefinition).order_by(ExternalSystemDefinition.provider, ExternalSystemDefinition.name)
        ).scalars()
    )


def grant(session: Session, definition_id, user_id, granted_by=None) -> None:
    """Let ``user_id`` see and connect a ``selected`` definition (idempotent)."""
    get_definition(session, definition_id)
    if session.get(ExternalSystemGrant, (_uuid(definition_id), _uuid(user_id))) is None:
        session.add(
            ExternalSystemGrant(definition_id=_uuid(definition_id), user_id=_uuid(user_id), granted_by=granted_by)
        )
        session.flush()


def revoke(session: Session, definition_id, user_id) -> None:
    """Take a grant back; the user's connection to it stops being usable (status ``revoked``)."""
    row = session.get(ExternalSystemGrant, (_uuid(definition_id), _uuid(user_id)))
    if row is not None:
        session.delete(row)
    for system in session.execute(
        select(ExternalSystem).where(
            ExternalSystem.definition_id == _uuid(definition_id), ExternalSystem.user_id == _uuid(user_id)
        )
    ).scalars():
        system.status = "revoked"
    session.flush()


def _visible_query(user: User | None):
    query = select(ExternalSystemDefinition).where(
        ExternalSystemDefinition.enabled.is_(True), ExternalSystemDefinition.review_status == "active"
    )
    if user is None:  # single-user mode: the local admin sees the platform's definitions
        return query.where(ExternalSystemDefinition.owner_type == "platform")
    granted = select(ExternalSystemGrant.definition_id).where(ExternalSystemGrant.user_id == user.user_id)
    return query.where(
        or_(
            (ExternalSystemDefinition.owner_type == "platform")
            & ((ExternalSystemDefinition.visibility == "all") | ExternalSystemDefinition.definition_id.in_(granted)),
            (ExternalSystemDefinition.owner_type == "user") & (ExternalSystemDefinition.owner_user_id == user.user_id),
        )
    )


def visible_definitions(session: Session, user: User | None) -> list[ExternalSystemDefinition]:
    """The enabled, active definitions ``user`` may use: platform ones with visibility ``all`` or a
    grant, and their own."""
    return list(session.execute(_visible_query(user).order_by(ExternalSystemDefinition.name)).scalars())


def visible_definition(session: Session, user: User | None, definition_id) -> ExternalSystemDefinition:
    row = session.execute(
        _visible_query(user).where(ExternalSystemDefinition.definition_id == _uuid(definition_id))
    ).scalar_one_or_none()
    if row is None:  # not granted looks like missing: no probing of other definitions
        raise ProviderError("not_found", "no such connector definition")
    return row


# ------------------------------------------------------------------ connections


def user_connections(session: Session, user: User) -> list[ExternalSystem]:
    return list(
        session.execute(
            select(ExternalSystem).where(ExternalSystem.user_id == user.user_id).order_by(ExternalSystem.created_at)
        ).scalars()
    )


def get_connection(session: Session, user: User, external_system_id, *, for_update: bool = False) -> ExternalSystem:
    query = select(ExternalSystem).where(
        ExternalSystem.external_system_id == _uuid(external_system_id), ExternalSystem.user_id == user.user_id
    )
    row = session.execute(query.with_for_update() if for_update else query).scalar_one_or_none()
    if row is None:
        raise ProviderError("not_found", "no such connection")
    return row


def save_connection(
    session: Session, user: User, definition_id, credentials: dict[str, str], name: str | None = None
) -> ExternalSystem:
    """Create or replace ``user``'s connection to a definition they may see, with sealed
    credentials; it is unverified (``verified_revision`` 0) until :func:`verify_connection`."""
    definition = visible_definition(session, user, definition_id)
    spec = provider_spec(definition.provider)
    missing = [f for f in spec.credential_fields if not (credentials or {}).get(f)]
    if missing:
        raise ProviderError("connector_config_invalid", f"missing credentials: {', '.join(missing)}")
    row = session.execute(
        select(ExternalSystem)
        .where(ExternalSystem.user_id == user.user_id, ExternalSystem.definition_id == definition.definition_id)
        .with_for_update()
    ).scalar_one_or_none()
    if row is None:
        row = ExternalSystem(
            external_system_id=uuid.uuid4(),
            user_id=user.user_id,
            definition_id=definition.definition_id,
            name=name or definition.name,
        )
        session.add(row)
    sealed, hint = _seal_all({k: credentials[k] for k in spec.credential_fields}, _system_aad(row.external_system_id))
    row.credentials, row.credential_hint = sealed, hint
    row.status, row.verified_revision, row.last_error = "active", 0, None
    if name:
        row.name = name
    session.flush()
    return row


def delete_connection(session: Session, user: User, external_system_id) -> None:
    row = get_connection(session, user, external_system_id, for_update=True)
    session.delete(row)
    session.flush()


def connection_state(system: ExternalSystem, definition: ExternalSystemDefinition) -> str:
    """``verified`` | ``needs_verification`` (never verified, or against an older revision) |
    ``failed`` | ``revoked`` | ``disabled``."""
    if system.status == "revoked":
        return "revoked"
    if not definition.enabled or definition.review_status != "active":
        return "disabled"
    if system.verified_revision == definition.revision:
        return "verified"
    return "failed" if system.last_error else "needs_verification"


def _connection_from_system(system: ExternalSystem, definition: ExternalSystemDefinition, scope_id: str) -> Connection:
    return Connection(
        definition.definition_id,
        definition.provider,
        definition.name,
        definition.revision,
        dict(definition.config),
        system.external_system_id,
        _open_all(system.credentials, _system_aad(system.external_system_id)),
        scope_id,
        system.user_id,
    )


def _connection_from_definition(definition: ExternalSystemDefinition, scope_id: str, user_id) -> Connection:
    return Connection(
        definition.definition_id,
        definition.provider,
        definition.name,
        definition.revision,
        dict(definition.config),
        None,
        _open_all(definition.credentials, _definition_aad(definition.definition_id)),
        scope_id,
        user_id,
    )


def verify_connection(sessions: sessionmaker, scope: ScopeContext, external_system_id) -> ExternalSystem:
    """Run the provider's verification call for one of the scope owner's connections (no
    transaction held during the call); on success ``verified_revision`` = the definition's
    revision, else ``last_error`` = a safe message. Audited as ``verify``."""
    from mewdex.platform.owners import user_for_scope

    with sessions.begin() as session:
        user = user_for_scope(session, scope.scope_id)
        if user is None:
            raise ProviderError("not_found", "no such connection")
        system = get_connection(session, user, external_system_id)
        definition = visible_definition(session, user, system.definition_id)
        connection = _connection_from_system(system, definition, scope.scope_id)
    error, status_code, response_bytes, started = None, None, None, time.monotonic()
    try:
        spec = provider_spec(connection.provider)
        if spec.verify is not None:
            status_code, response_bytes = spec.verify(connection)
    except ProviderError as exc:
        error, status_code = exc, exc.status_code
    duration = int((time.monotonic() - started) * 1000)
    with sessions.begin() as session:
        system = session.get(ExternalSystem, connection.external_system_id, with_for_update=True)
        if system is None:
            raise ProviderError("not_found", "no such connection")
        if error is None:
            system.verified_revision, system.last_error, system.last_verified_at = connection.revision, None, utcnow()
        else:
            system.last_error = f"{error.code}: {error.message}"[:500]
        audit(
            session,
            connection,
            event="verify",
            outcome="ok" if error is None else "failed",
            status_code=status_code,
            duration_ms=duration,
            response_bytes=response_bytes,
            detail={} if error is None else {"code": error.code},
        )
        session.flush()
        session.expunge(system)
    if error is not None:
        raise error
    return system


def verify_definition(sessions: sessionmaker, definition_id, scope: ScopeContext) -> None:
    """Verify a definition's own (platform) credentials; audited. Raises :class:`ProviderError`."""
    with sessions.begin() as session:
        definition = get_definition(session, definition_id)
        connection = _connection_from_definition(definition, scope.scope_id, None)
    started = time.monotonic()
    spec = provider_spec(connection.provider)
    try:
        status_code, response_bytes = spec.verify(connection) if spec.verify else (None, None)
        outcome, detail, error = "ok", {}, None
    except ProviderError as exc:
        status_code, response_bytes, outcome, detail, error = exc.status_code, None, "failed", {"code": exc.code}, exc
    with sessions.begin() as session:
        audit(
            session,
            connection,
            event="verify",
            outcome=outcome,
            status_code=status_code,
            duration_ms=int((time.monotonic() - started) * 1000),
            response_bytes=response_bytes,
            detail=detail,
        )
    if error is not None:
        raise error


def resolve(session: Session, scope: ScopeContext, provider: str, *, needs: str | None = None) -> Connection:
    """The connection a call in ``scope`` uses for ``provider``: the scope owner's own verified
    connection first, else a visible platform definition holding credentials (``needs``: a config
    key that must be set, e.g. ``vision_model``). Raises ``connector_unverified`` when the user's
    connection must verify again, ``connector_unavailable`` when nothing fits."""
    from mewdex.platform.owners import user_for_scope

    user = user_for_scope(session, scope.scope_id)
    definitions = [
        d
        for d in session.execute(
            _visible_query(user)
            .where(ExternalSystemDefinition.provider == provider)
            .order_by(ExternalSystemDefinition.created_at)
        ).scalars()
        if needs is None or d.config.get(needs)
    ]
    unverified = False
    if user is not None and definitions:
        systems = (
            session.execute(
                select(ExternalSystem).where(
                    ExternalSystem.user_id == user.user_id,
                    ExternalSystem.definition_id.in_([d.definition_id for d in definitions]),
                )
            )
            .scalars()
            .all()
        )
        by_definition = {d.definition_id: d for d in definitions}
        for system in systems:
            definition = by_definition[system.definition_id]
            state = connection_state(system, definition)
            if state == "verified":
                return _connection_from_system(system, definition, scope.scope_id)
            unverified = unverified or state in ("needs_verification", "failed")
    for definition in definitions:
        if definition.credentials:
            return _connection_from_definition(definition, scope.scope_id, user.user_id if user else None)
    if unverified:
        raise ProviderError("connector_unverified", f"the {provider} connection must be verified again")
    raise ProviderError(
        "connector_unavailable", f"no usable {provider} connector" + (f" with {needs}" if needs else "")
    )


# ------------------------------------------------------------------ audits


def audit(
    session: Session,
    connection: Connection,
    *,
    event: str,
    outcome: str,
    status_code: int | None = None,
    duration_ms: int = 0,
    response_bytes: int | None = None,
    operation_id: str | None = None,
    task_id: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Write one ``external_system_audits`` row. ``detail`` must be safe (codes, counts, model
    names): callers never put credentials, URLs with keys or bodies in it."""
    session.add(
        ExternalSystemAudit(
            scope_id=connection.scope_id,
            user_id=connection.user_id,
            task_id=task_id,
            external_system_id=connection.external_system_id,
            definition_id=connection.definition_id,
            definition_revision=connection.revision,
            event=event,
            operation_id=operation_id,
            outcome=outcome,
            status_code=status_code,
            duration_ms=max(0, int(duration_ms)),
            response_bytes=response_bytes,
            detail=detail or {},
        )
    )


AUDIT_OUTCOMES = ("ok", "failed", "refused")


def list_audits(
    session: Session,
    *,
    scope_id: str | None,
    limit: int = 100,
    event: str | None = None,
    outcome: str | None = None,
    definition_id=None,
    user_id=None,
    cursor: str | None = None,
) -> tuple[list[ExternalSystemAudit], str | None]:
    """Newest audits first of one scope, or (``scope_id`` None, admin) all, narrowed by ``event``,
    ``outcome``, ``definition_id`` and ``user_id``; ``limit`` ≤ 500 per page. Returns ``(rows,
    next_cursor)`` (``next_cursor`` None on the last page; pass it back as ``cursor`` for the next
    one). Raises ``CursorInvalid`` (422 ``invalid_cursor``) for a cursor it did not write."""
    from mewdex.dto.cursor import decode_cursor, encode_cursor

    limit = max(1, min(int(limit), 500))
    query = select(ExternalSystemAudit).order_by(
        ExternalSystemAudit.created_at.desc(), ExternalSystemAudit.audit_id.desc()
    )
    if scope_id is not None:
        query = query.where(ExternalSystemAudit.scope_id == scope_id)
    if event:
        query = query.where(ExternalSystemAudit.event == event)
    if outcome:
        query = query.where(ExternalSystemAudit.outcome == outcome)
    if definition_id is not None:
        query = query.where(ExternalSystemAudit.definition_id == _uuid(definition_id))
    if user_id is not None:
        query = query.where(ExternalSystemAudit.user_id == _uuid(user_id))
    if cursor:
        created, audit_id = decode_cursor(cursor, (datetime, uuid.UUID))
        query = query.where(
            (ExternalSystemAudit.created_at < created)
            | ((ExternalSystemAudit.created_at == created) & (ExternalSystemAudit.audit_id < audit_id))
        )
    rows = list(session.execute(query.limit(limit + 1)).scalars())
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor([rows[-1].created_at, rows[-1].audit_id])


def audit_events(session: Session, scope_id: str | None) -> list[str]:
    """The distinct audit events of a scope (or all): the choices of the audit viewer's filter."""
    query = select(ExternalSystemAudit.event).distinct().order_by(ExternalSystemAudit.event)
    if scope_id is not None:
        query = query.where(ExternalSystemAudit.scope_id == scope_id)
    return list(session.execute(query).scalars())


def grants_of(session: Session, definition_id) -> list[User]:
    """The users holding a grant to a definition (by email)."""
    return list(
        session.execute(
            select(User)
            .join(ExternalSystemGrant, ExternalSystemGrant.user_id == User.user_id)
            .where(ExternalSystemGrant.definition_id == _uuid(definition_id))
            .order_by(User.email)
        ).scalars()
    )


def _check_choice(field_name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ProviderError("connector_config_invalid", f"{field_name} must be one of {', '.join(allowed)}")


def _uuid(value) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ProviderError("not_found", "no such connector") from None


def connection_for(session: Session, scope: ScopeContext, definition_id, provider: str) -> Connection:
    """The connection a call in ``scope`` uses for one definition the scope's owner may see (the
    owner's own verified connection first, else the definition's credentials), for a caller that
    named the definition (a schedule's webhook target). Raises ``not_found`` (unknown, invisible or
    another provider's), ``connector_unverified``, ``connector_unavailable``."""
    from mewdex.platform.owners import user_for_scope

    user = user_for_scope(session, scope.scope_id)
    definition = visible_definition(session, user, definition_id)
    if definition.provider != provider:
        raise ProviderError("not_found", f"no such {provider} connector")
    if user is not None:
        system = session.execute(
            select(ExternalSystem).where(
                ExternalSystem.user_id == user.user_id, ExternalSystem.definition_id == definition.definition_id
            )
        ).scalar_one_or_none()
        if system is not None and connection_state(system, definition) == "verified":
            return _connection_from_system(system, definition, scope.scope_id)
        if system is not None and not definition.credentials:
            raise ProviderError("connector_unverified", f"the {provider} connection must be verified again")
    if definition.credentials:
        return _connection_from_definition(definition, scope.scope_id, user.user_id if user else None)
    raise ProviderError("connector_unavailable", f"the {provider} connector has no credentials")
