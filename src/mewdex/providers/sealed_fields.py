"""Every sealed field in the database, in one registry, and the key rotation that walks it.

A sealed field is a value of a JSON object column sealed with :mod:`mewdex.providers.secrets`
(``{"v": 1, "kid", "nonce", "ct"}``), bound (AAD) to where it is stored. :data:`SEALED_COLUMNS`
lists each such column with its AAD; the modules that seal call the AAD functions here, so the
format lives in one place:

* ``external_system_definitions.credentials`` — a platform connector's API key / secret;
* ``external_systems.credentials`` — a user's own connection credentials;
* ``channel_bindings.config`` — a binding's secret fields (webhook ``secret``, OneBot
  ``access_token``, ClawBot ``bot_token`` and ``latest_context_token``);
* ``platform_settings.value`` — instance settings with sealed members (:data:`SEALED_SETTINGS`, the
  hook ``sealed_settings``: the WeCom app's ``secret``, ``token``, ``encoding_aes_key``; the Telegram
  bot ``token`` saved on the Channels page, each declared by its channel package);
* ``tasks.payload`` of the tasks still waiting (queued or running) whose type seals members
  (:data:`SEALED_TASK_PAYLOADS`: a deferred Discord interaction's ``token``, valid 15 minutes).

:func:`rotate` (``mewdex secrets rotate``) makes a new active key, re-seals every value of every
registered column whose key is not the active one — in batches of :data:`BATCH_ROWS` rows, each
batch its own transaction with the rows locked, so an interrupted rotation resumes where it stopped
(``mewdex secrets rotate --resume``: values already re-sealed are skipped) — and then drops only the
ring keys that no stored value references any more. :func:`usage` counts the values each key seals
(``mewdex secrets status``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from mewdex import hooks
from mewdex.db.models import ChannelBinding, ExternalSystem, ExternalSystemDefinition, PlatformSetting, Task
from mewdex.providers import secrets

BATCH_ROWS = 200


def definition_aad(definition_id: Any) -> str:
    """AAD of a platform connector definition's credentials."""
    return f"external_system_definitions:{definition_id}"


def system_aad(external_system_id: Any) -> str:
    """AAD of a user connection's credentials."""
    return f"external_systems:{external_system_id}"


def channel_binding_aad(scope_id: str, channel: str, field: str) -> str:
    """AAD of one secret field of a channel binding's config."""
    return f"channel_bindings:{scope_id}:{channel}:{field}"


def platform_setting_aad(key: str, field: str) -> str:
    """AAD of one sealed member of an instance setting (e.g. ``wecom_app``'s ``secret``)."""
    return f"platform_settings:{key}:{field}"


# The sealed members of instance settings and task payloads are the hooks ``sealed_settings`` and
# ``sealed_task_payloads`` of :mod:`mewdex.hooks`, provided by the modules that own them (the channel
# packages: WeCom's app, the Telegram bot token, a Discord interaction's token).
SEALED_SETTINGS: dict[str, tuple[str, ...]] = hooks.provided("sealed_settings")
"""The instance settings (``platform_settings.key``) with sealed members, and those members, as loaded
so far (:func:`mewdex.hooks.implementations` for all): every sealed member of a ``platform_settings``
row is rotated; this names the ones that are expected."""


SEALED_TASK_PAYLOADS: dict[str, tuple[str, ...]] = hooks.provided("sealed_task_payloads")
"""The task types whose payload has sealed members, and those members (sealed with
:func:`task_payload_aad`); rotation walks the waiting tasks of these types (:func:`sealed_task_types`:
the plugins' too)."""


def sealed_task_types() -> tuple[str, ...]:
    """Every task type whose payload has sealed members (every plugin that declares one imported)."""
    return tuple(hooks.implementations("sealed_task_payloads"))


def task_payload_aad(task_type: str, member: str) -> str:
    """AAD of one sealed member of a task's payload (a Discord interaction token keeps the AAD it has
    always had, so a token queued before an upgrade still opens)."""
    if (task_type, member) == ("discord_interaction", "token"):
        return "discord:interaction-token"
    return f"tasks:{task_type}:{member}"


@dataclass(frozen=True)
class SealedColumn:
    """A JSON object column whose members may be sealed: ``model.column``, rows walked in ``key``
    order, ``aad(row, member)`` the AAD each member was sealed with; ``where()``: the rows that
    may hold sealed members (None: all)."""

    name: str
    model: type
    column: str
    key: tuple[str, ...]
    aad: Callable[[Any, str], str]
    where: Callable[[], Any] | None = None


SEALED_COLUMNS: tuple[SealedColumn, ...] = (
    SealedColumn(
        "external_system_definitions.credentials",
        ExternalSystemDefinition,
        "credentials",
        ("definition_id",),
        lambda row, _member: definition_aad(row.definition_id),
    ),
    SealedColumn(
        "external_systems.credentials",
        ExternalSystem,
        "credentials",
        ("external_system_id",),
        lambda row, _member: system_aad(row.external_system_id),
    ),
    SealedColumn(
        "channel_bindings.config",
        ChannelBinding,
        "config",
        ("scope_id", "channel"),
        lambda row, member: channel_binding_aad(row.scope_id, row.channel, member),
    ),
    SealedColumn(
        "platform_settings.value",
        PlatformSetting,
        "value",
        ("key",),
        lambda row, member: platform_setting_aad(row.key, member),
    ),
    SealedColumn(
        "tasks.payload",
        Task,
        "payload",
        ("id",),
        lambda row, member: task_payload_aad(row.task_type, member),
        lambda: Task.task_type.in_(sealed_task_types()) & Task.status.in_(("queued", "running")),
    ),
)


def _walk(sessions: sessionmaker[Session], column: SealedColumn, work: Callable[[Any], int], *, lock: bool):
    """Run ``work(row)`` on every row of ``column``'s table in key order, :data:`BATCH_ROWS` rows per
    transaction (rows locked with ``lock``); yields the sum of ``work`` per batch once the batch's
    transaction has committed."""
    keys = [getattr(column.model, k) for k in column.key]
    last: tuple[Any, ...] | None = None
    while True:
        with sessions.begin() as session:
            query: Any = select(column.model).order_by(*keys).limit(BATCH_ROWS)
            if column.where is not None:
                query = query.where(column.where())
            if last is not None:
                query = query.where(tuple_(*keys) > tuple_(*last))
            if lock:
                query = query.with_for_update()
            rows = list(session.execute(query).scalars())
            done = sum(work(row) for row in rows)
            if rows:
                last = tuple(getattr(rows[-1], k) for k in column.key)
        if not rows:
            return
        yield done
        if len(rows) < BATCH_ROWS:
            return


def _sealed_members(value: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(value, dict):
        return []
    return [(member, v) for member, v in value.items() if secrets.is_sealed(v)]


def usage(sessions: sessionmaker[Session]) -> dict[str, dict[str, int]]:
    """``{kid: {column name: values it seals}}`` over every registered column (read only)."""
    found: dict[str, Counter[str]] = {}
    for column in SEALED_COLUMNS:

        def count(row: Any, column: SealedColumn = column) -> int:
            for _member, sealed in _sealed_members(getattr(row, column.column)):
                found.setdefault(str(sealed["kid"]), Counter())[column.name] += 1
            return 0

        for _ in _walk(sessions, column, count, lock=False):
            pass
    return {kid: dict(counts) for kid, counts in found.items()}


def status(sessions: sessionmaker[Session]) -> dict[str, Any]:
    """What ``mewdex secrets status`` shows: ``{"active": kid, "keys": [{"kid", "active", "source"
    ("ring" | "environment" | "missing"), "secrets": n, "by_column": {column: n}}], "total": n}``.
    A ``missing`` key is referenced by stored values but known to no key ring: those values cannot
    be read. Never shows a key."""
    active = secrets.active_key_id()
    counts = usage(sessions)
    ring = secrets.ring_key_ids()
    kids = list(dict.fromkeys([active, *ring, *counts]))
    keys = []
    for kid in kids:
        source = "ring" if kid in ring else "missing"
        if kid == active and kid not in ring:
            source = "environment"
        by_column = counts.get(kid, {})
        keys.append(
            {
                "kid": kid,
                "active": kid == active,
                "source": source,
                "secrets": sum(by_column.values()),
                "by_column": by_column,
            }
        )
    return {"active": active, "keys": keys, "total": sum(k["secrets"] for k in keys)}


def rotate(
    sessions: sessionmaker[Session],
    *,
    new_key: bool = True,
    progress: Callable[[str, int], None] | None = None,
) -> dict[str, Any]:
    """Re-seal every registered value with the active key (module doc); ``new_key`` False resumes
    an interrupted rotation without making another key. ``progress(column name, re-sealed so far)``
    after each batch. Returns ``{"active", "reencrypted", "unreadable", "dropped_keys"}``;
    ``unreadable``: values whose key is gone (left as they are; their kid keeps no key alive since
    none exists). Raises :class:`~mewdex.providers.secrets.SecretError` for an invalid environment key."""
    kid = secrets.rotate_key() if new_key else secrets.active_key_id()
    reencrypted = unreadable = 0
    for column in SEALED_COLUMNS:

        def reseal(row: Any, column: SealedColumn = column) -> int:
            nonlocal unreadable
            value = getattr(row, column.column)
            members = [(m, v) for m, v in _sealed_members(value) if v["kid"] != kid]
            if not members:  # nothing to re-seal (also any value that is not a JSON object)
                return 0
            changed, done = dict(value), 0
            for member, sealed in members:
                aad = column.aad(row, member)
                try:
                    changed[member] = secrets.seal(secrets.open_sealed(sealed, aad), aad)
                except secrets.SecretError:
                    unreadable += 1
                    continue
                done += 1
            if done:
                setattr(row, column.column, changed)
            return done

        for done in _walk(sessions, column, reseal, lock=True):
            reencrypted += done
            if progress is not None:
                progress(column.name, reencrypted)
    referenced = set(usage(sessions))
    dropped = secrets.drop_unused_keys(referenced | {kid})
    return {"active": kid, "reencrypted": reencrypted, "unreadable": unreadable, "dropped_keys": len(dropped)}
