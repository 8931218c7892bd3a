"""Signed, expiring media URLs for embedding memes in chats:
``/media/{id}[/thumbnail]?exp=<unix s>&kid=<key id>&u=<user id|local>&sig=<hex>``.

The HMAC-SHA256 covers the key id, the user, the user's auth epoch, the path and the expiry, so a
link works only for that one file (a thumbnail link does not open the original), only until it
expires (at most one day), and dies when the user is disabled or changes the password (both move
the epoch). Keys live in ``<data dir>/keys/media_signing.json`` (mode 0600, directory 0700), never
in the database; :func:`rotate_key` adds a new current key and keeps the previous one so links
already handed out keep working until they expire.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from pathlib import Path
from uuid import UUID

from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import User

MAX_TTL_SECONDS = 86400
LOCAL_USER = "local"  # links made in no-login mode (no account)
_lock = threading.Lock()


def key_file() -> Path:
    return get_settings().data_dir.resolve() / "keys" / "media_signing.json"


def _write_keys(path: Path, keys: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(keys, f)
    os.replace(tmp, path)


def _keys() -> dict:
    """``{"current": kid, "keys": {kid: hex}}``, created on first use."""
    path = key_file()
    with _lock:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            kid = secrets.token_hex(4)
            keys = {"current": kid, "keys": {kid: secrets.token_hex(32)}}
            path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
            try:  # another process may create it at the same moment: first one wins
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return json.loads(path.read_text())
            with os.fdopen(fd, "w") as f:
                json.dump(keys, f)
            return keys


def rotate_key() -> str:
    """A new current key (the previous one still verifies); returns its id."""
    keys = _keys()
    kid = secrets.token_hex(4)
    previous = keys["current"]
    _write_keys(key_file(), {"current": kid, "keys": {previous: keys["keys"][previous], kid: secrets.token_hex(32)}})
    return kid


def _mac(key_hex: str, kid: str, user: str, epoch: int, path: str, exp: int) -> str:
    message = f"{kid}\n{user}\n{epoch}\n{path}\n{exp}".encode()
    return hmac.new(bytes.fromhex(key_hex), message, hashlib.sha256).hexdigest()


def sign(user: User | None, path: str, ttl_seconds: int) -> tuple[str, int]:
    """``(path?exp=…&kid=…&u=…&sig=…, exp)`` for a ``/media/…`` path of ``user`` (None: no-login mode);
    ``ttl_seconds`` is capped at one day."""
    exp = int(time.time()) + min(ttl_seconds, MAX_TTL_SECONDS)
    keys = _keys()
    kid = keys["current"]
    who, epoch = (str(user.user_id), user.auth_epoch or 0) if user is not None else (LOCAL_USER, 0)
    sig = _mac(keys["keys"][kid], kid, who, epoch, path, exp)
    return f"{path}?exp={exp}&kid={kid}&u={who}&sig={sig}", exp


def verify(session: Session, path: str, params) -> tuple[bool, User | None]:
    """``(valid, user)`` for the query ``params`` of a signed ``path``; ``user`` None for a
    no-login-mode link. Malformed values are simply invalid (never an exception)."""
    exp, kid, who, sig = (params.get(k) for k in ("exp", "kid", "u", "sig"))
    if not all(isinstance(v, str) and v for v in (exp, kid, who, sig)):
        return False, None
    if (
        not exp.isascii()
        or not exp.isdigit()
        or len(exp) > 12
        or int(exp) < time.time()
        or int(exp) > time.time() + MAX_TTL_SECONDS + 60
    ):
        return False, None
    key_hex = _keys()["keys"].get(kid)
    if key_hex is None:
        return False, None
    user = None
    if who != LOCAL_USER:
        try:
            user = session.get(User, UUID(who))
        except ValueError:
            return False, None
        if user is None or user.disabled:
            return False, None
    expected = _mac(key_hex, kid, who, user.auth_epoch or 0 if user else 0, path, int(exp))
    return hmac.compare_digest(expected.encode(), sig.encode("utf-8", "replace")), user
