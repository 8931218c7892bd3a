"""Where the backup key comes from: a key file (``MEWDEX_BACKUP_KEY_FILE``, ``--key-file``), a
passphrase (``MEWDEX_BACKUP_PASSPHRASE``: scrypt, its salt in DEST's header), else the data dir's
``backup.key`` (made, 0600, by the first backup without one). The key never goes into a backup."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path
from typing import Any

from mewdex.backups.archive import _HEX64, HEADER, BackupError, BackupKey
from mewdex.backups.settings import settings as backup_settings
from mewdex.config import get_settings

#: The backup key the first backup makes when none is configured (in the data dir, never backed up).
LOCAL_KEY_FILE = "backup.key"
SCRYPT = {"n": 2**15, "r": 8, "p": 1}


def parse_key(text: str, what: str) -> BackupKey:
    """A key from its text (64 hex characters); ``backup_key_invalid`` naming ``what`` otherwise."""
    value = text.strip().lower()
    if not _HEX64.fullmatch(value):
        raise BackupError("backup_key_invalid", f"{what} does not hold a backup key (64 hex characters)")
    return BackupKey(bytes.fromhex(value))


def key_from_file(path: Path) -> BackupKey:
    try:
        text = Path(path).expanduser().read_text(errors="replace")[:1024]
    except OSError as exc:
        raise BackupError("backup_key_invalid", f"the backup key file {path} cannot be read ({exc.strerror})") from None
    return parse_key(text, f"the backup key file {path}")


def _kdf_params(kdf: Any) -> dict[str, Any]:
    """The header's scrypt parameters, bounded (a header is untrusted: no 1 TiB scrypt)."""
    ok = isinstance(kdf, dict) and kdf.get("name") == "scrypt"
    ok = ok and isinstance(kdf.get("salt"), str) and re.fullmatch(r"[0-9a-f]{32,128}", kdf["salt"]) is not None
    ok = ok and all(type(kdf.get(k)) is int for k in ("n", "r", "p"))
    ok = ok and 2**14 <= kdf["n"] <= 2**20 and kdf["n"] & (kdf["n"] - 1) == 0 and 1 <= kdf["r"] <= 16
    if not (ok and 1 <= kdf["p"] <= 4):
        raise BackupError("backup_dest_invalid", f"the backup header's passphrase parameters are not valid ({HEADER})")
    return {k: kdf[k] for k in ("name", "salt", "n", "r", "p")}


def key_from_passphrase(passphrase: str, kdf: dict[str, Any]) -> BackupKey:
    kdf = _kdf_params(kdf)
    master = hashlib.scrypt(
        passphrase.encode(), salt=bytes.fromhex(kdf["salt"]), n=kdf["n"], r=kdf["r"], p=kdf["p"],
        maxmem=256 * 1024 * 1024, dklen=32,
    )  # fmt: skip
    return BackupKey(master, kdf)


def local_key_path() -> Path:
    return get_settings().data_dir.resolve() / LOCAL_KEY_FILE


def _configured_key(
    header: dict[str, Any] | None, *, key_file: Path | None = None, passphrase: str | None = None, new_dest: bool
) -> BackupKey | None:
    """The key the options or settings name: a key file (``key_file``, ``MEWDEX_BACKUP_KEY_FILE``), a
    passphrase (``passphrase``, ``MEWDEX_BACKUP_PASSPHRASE``; its salt from the header, a new one for
    a new DEST), else ``<data dir>/backup.key``; None when there is none."""
    settings = backup_settings()
    path = key_file or settings.backup_key_file
    if path:
        return key_from_file(Path(path))
    if passphrase is None and settings.backup_passphrase is not None:
        passphrase = settings.backup_passphrase.get_secret_value()
    if passphrase:
        kdf = (header or {}).get("kdf")
        if kdf is None:
            if not new_dest:
                raise BackupError(
                    "backup_key_missing",
                    f"these backups were made with a key file, not a passphrase (no salt in {HEADER}): "
                    "give the key file (--key-file or MEWDEX_BACKUP_KEY_FILE)",
                )
            kdf = {"name": "scrypt", "salt": secrets.token_hex(16), **SCRYPT}
        return key_from_passphrase(passphrase, kdf)
    local = local_key_path()
    if local.is_file():
        return key_from_file(local)
    return None


def _write_local_key(key: BackupKey) -> Path:
    """Keep ``key`` as ``<data dir>/backup.key`` (0600, made once: an existing one is kept)."""
    path = local_key_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.text() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return path
