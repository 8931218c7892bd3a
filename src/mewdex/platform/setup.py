"""The one-time setup code: how the first admin may be created from a browser.

``mewdex serve`` on an installation without any account prints a fresh code to its console
(:func:`issue_setup_code`); a web sign-up that presents it becomes the admin, and the code is gone
(:func:`consume_setup_code`). Only its sha256 is stored (``platform_settings.setup_code_sha256``),
so the code itself exists only on the console of whoever started the server. The other way is the
CLI: ``mewdex user create EMAIL --admin``.
"""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from mewdex.db.models import User
from mewdex.platform.instance import get_setting, set_setting

SETUP_CODE_KEY = "setup_code_sha256"


def _digest(code: str) -> str:
    return hashlib.sha256(code.strip().encode("utf-8", "replace")).hexdigest()


def any_users(session: Session) -> bool:
    """Whether any account exists (none yet: the installation waits for its admin)."""
    return session.execute(select(exists().where(User.user_id.isnot(None)))).scalar_one()


def issue_setup_code(session: Session) -> str | None:
    """A new code (replacing any earlier one) while no account exists; None once one does."""
    if any_users(session):
        return None
    code = secrets.token_urlsafe(12)
    set_setting(session, SETUP_CODE_KEY, _digest(code))
    return code


def consume_setup_code(session: Session, code: str | None) -> bool:
    """True (and the code is used up) when ``code`` is the current setup code."""
    stored = get_setting(session, SETUP_CODE_KEY)
    if not code or not stored or not secrets.compare_digest(stored, _digest(code)):
        return False
    set_setting(session, SETUP_CODE_KEY, None)
    return True
