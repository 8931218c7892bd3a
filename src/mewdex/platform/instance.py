"""Instance-wide settings in ``platform_settings``: ``signup_enabled`` and the media signing key."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import PlatformSetting, utcnow

MEDIA_SIGNING_KEY = "media_signing_key"


def get_setting(session: Session, key: str, default: Any = None) -> Any:
    value = session.execute(select(PlatformSetting.value).where(PlatformSetting.key == key)).scalar_one_or_none()
    return default if value is None else value


def set_setting(session: Session, key: str, value: Any) -> None:
    stmt = insert(PlatformSetting).values(key=key, value=value, updated_at=utcnow())
    session.execute(
        stmt.on_conflict_do_update(index_elements=["key"], set_={"value": stmt.excluded.value, "updated_at": utcnow()})
    )


def delete_setting(session: Session, key: str) -> None:
    session.execute(delete(PlatformSetting).where(PlatformSetting.key == key))


def media_signing_key(session: Session) -> bytes:
    """The installation's HMAC key for signed media URLs (created once, shared by every process)."""
    session.execute(
        insert(PlatformSetting)
        .values(key=MEDIA_SIGNING_KEY, value=secrets.token_hex(32), updated_at=utcnow())
        .on_conflict_do_nothing()
    )
    return bytes.fromhex(get_setting(session, MEDIA_SIGNING_KEY))
