"""Secrets at rest: AES-256-GCM (``cryptography``) with a key id stored next to each ciphertext.

Keys: ``MEWDEX_SECRET_KEY`` (32 bytes, base64 or 64 hex digits) is the active key when set;
otherwise the key ring ``<data dir>/secret.keys`` (JSON ``{"active": kid, "keys": {kid: b64}}``,
mode 0600, created on first use) holds the active key and older ones still needed to decrypt. Every
change of the ring (its first creation too) happens under an exclusive ``flock`` of
``secret.keys.lock`` and is written to a unique temporary file, then renamed: processes starting at
once agree on one key (the first to take the lock makes it, the others read it).
A key id (``kid``) is the first 12 hex digits of the key's SHA-256, so it says which key sealed a
value without revealing it.

A sealed value is a JSON object ``{"v": 1, "kid": str, "nonce": b64, "ct": b64}`` (12-byte random
nonce; the GCM tag is part of ``ct``); the optional ``aad`` binds it to where it is stored.
:func:`rotate_key` makes a new active key (:func:`mewdex.providers.sealed_fields.rotate`
re-encrypts every sealed field of the database and drops the keys nothing references).
:func:`hint` gives the only form of a secret shown to anyone
(``sk-…a1b2``). Errors: :class:`SecretError` (``secret_key_missing``, ``secret_undecryptable``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import json
import os
import secrets as _random
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mewdex.config import get_settings

KEYRING_NAME = "secret.keys"
_lock = threading.Lock()


class SecretError(Exception):
    """A secret could not be sealed or opened (``code``); the message never holds the secret."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def key_id(key: bytes) -> str:
    """The id stored with each ciphertext: 12 hex digits of SHA-256(key)."""
    return hashlib.sha256(key).hexdigest()[:12]


def _decode_key(raw: str) -> bytes:
    raw = raw.strip()
    try:
        key = bytes.fromhex(raw) if len(raw) == 64 else base64.b64decode(raw, validate=True)
    except (ValueError, binascii.Error):
        key = b""
    if len(key) != 32:
        raise SecretError("secret_key_invalid", "MEWDEX_SECRET_KEY must be 32 bytes (base64 or 64 hex digits)")
    return key


def keyring_path() -> Path:
    return get_settings().data_dir.resolve() / KEYRING_NAME


def _read_ring() -> dict[str, Any]:
    path = keyring_path()
    if not path.exists():
        return {"active": None, "keys": {}}
    return json.loads(path.read_text())


def _write_ring(ring: dict[str, Any]) -> None:
    """Replace the ring file atomically (a unique 0600 temporary file, fsynced, then renamed); the
    caller holds :func:`_ring_lock`."""
    path = keyring_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".secret.keys.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(ring, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _ring_lock() -> Iterator[None]:
    """The thread lock and an exclusive ``flock`` of ``secret.keys.lock`` (every process): held while
    the ring is read, changed and written."""
    path = keyring_path().with_name(KEYRING_NAME + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock


def _keys() -> tuple[str, dict[str, bytes]]:
    """(active kid, every known key by kid); creates the key ring on first use (under the lock,
    read again there: of several processes starting at once, one makes the key)."""
    ring = _read_ring()
    env = get_settings().secret_key
    if not env and not ring.get("active"):
        with _ring_lock():
            ring = _read_ring()
            if not ring.get("active"):
                key = AESGCM.generate_key(bit_length=256)
                ring = {
                    "active": key_id(key),
                    "keys": {**ring.get("keys", {}), key_id(key): base64.b64encode(key).decode()},
                }
                _write_ring(ring)
    keys = {kid: base64.b64decode(value) for kid, value in ring.get("keys", {}).items()}
    if env:
        key = _decode_key(env)
        keys[key_id(key)] = key
        return key_id(key), keys
    return ring["active"], keys


def ring_key_ids() -> list[str]:
    """The kids of the key ring (not the environment key), in the ring's order."""
    return list(_read_ring().get("keys", {}))


def active_key_id() -> str:
    return _keys()[0]


def seal(plaintext: str, aad: str = "") -> dict[str, Any]:
    """Encrypt ``plaintext`` with the active key; ``aad``: context it is bound to (e.g. a row id)."""
    kid, keys = _keys()
    nonce = _random.token_bytes(12)
    ct = AESGCM(keys[kid]).encrypt(nonce, plaintext.encode(), aad.encode() or None)
    return {"v": 1, "kid": kid, "nonce": base64.b64encode(nonce).decode(), "ct": base64.b64encode(ct).decode()}


def open_sealed(sealed: dict[str, Any], aad: str = "") -> str:
    """The plaintext of a :func:`seal` result. Raises :class:`SecretError` ``secret_undecryptable``
    when its key is gone or the value (or ``aad``) was changed."""
    _, keys = _keys()
    key = keys.get(str(sealed.get("kid")))
    if key is None:
        raise SecretError(
            "secret_undecryptable", f"the key {sealed.get('kid')} that sealed this secret is not available"
        )
    try:
        return (
            AESGCM(key)
            .decrypt(base64.b64decode(sealed["nonce"]), base64.b64decode(sealed["ct"]), aad.encode() or None)
            .decode()
        )
    except (InvalidTag, KeyError, ValueError, binascii.Error):
        raise SecretError("secret_undecryptable", "a stored secret cannot be decrypted") from None


def is_sealed(value: Any) -> bool:
    return isinstance(value, dict) and value.get("v") == 1 and "kid" in value and "ct" in value


def rotate_key() -> str:
    """Make a new active key in the key ring (older keys stay until :func:`drop_unused_keys`).
    With ``MEWDEX_SECRET_KEY`` set the environment key stays active (rotation then only
    re-encrypts values sealed with older keys). Returns the active kid."""
    if get_settings().secret_key:
        return active_key_id()
    with _ring_lock():
        ring = _read_ring()
        key = AESGCM.generate_key(bit_length=256)
        kid = key_id(key)
        ring = {"active": kid, "keys": {**ring.get("keys", {}), kid: base64.b64encode(key).decode()}}
        _write_ring(ring)
    return kid


def drop_unused_keys(used: set[str]) -> list[str]:
    """Remove key-ring keys that seal nothing any more (``used``: kids still in use); the active
    key always stays. Returns the removed kids."""
    with _ring_lock():
        ring = _read_ring()
        keep = used | {ring.get("active")}
        removed = [kid for kid in ring.get("keys", {}) if kid not in keep]
        if removed:
            ring["keys"] = {kid: value for kid, value in ring["keys"].items() if kid in keep}
            _write_ring(ring)
    return removed


def hint(secret: str | None) -> str:
    """What may be shown of a secret: its prefix up to the first dash and its last 4 characters
    (``sk-…a1b2``); short secrets show only ``…`` and their length is not revealed."""
    if not secret:
        return ""
    tail = secret[-4:] if len(secret) >= 12 else ""
    head = secret.split("-", 1)[0] + "-" if "-" in secret[:8] else ""
    return f"{head}…{tail}"
