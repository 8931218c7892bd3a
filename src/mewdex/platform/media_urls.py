"""Signed, expiring media URLs (``?exp=<unix seconds>&sig=<hex>``) for embedding memes in chats:
HMAC-SHA256 over the path and expiry with the installation's key (``platform_settings``)."""

from __future__ import annotations

import hashlib
import hmac
import time

from sqlalchemy.orm import Session

from mewdex.platform.instance import media_signing_key


def _mac(key: bytes, path: str, exp: int) -> str:
    return hmac.new(key, f"{path}\n{exp}".encode(), hashlib.sha256).hexdigest()


def sign(session: Session, path: str, ttl_seconds: int) -> tuple[str, int]:
    """``(path?exp=…&sig=…, exp)`` for a ``/media/…`` path."""
    exp = int(time.time()) + ttl_seconds
    return f"{path}?exp={exp}&sig={_mac(media_signing_key(session), path, exp)}", exp


def verify(session: Session, path: str, exp: str | None, sig: str | None) -> bool:
    """True for an unexpired, correctly signed ``path``."""
    if not exp or not sig or not exp.isdigit() or len(exp) > 12 or int(exp) < time.time():
        return False
    return hmac.compare_digest(_mac(media_signing_key(session), path, int(exp)), sig)
