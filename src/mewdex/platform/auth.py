"""Who is calling: the authentication mode and the principal a request acts as.

``MEWDEX_AUTH``: ``none`` (single-user: every request acts as the local admin in the default
scope), ``required`` (a session cookie, an API token or a signed media URL is needed), ``auto``
(the default: ``none`` while serving on a loopback address with no user yet, else ``required``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import ScopeContext, User
from mewdex.platform import users


@dataclass(frozen=True)
class Principal:
    """The caller: its scope, its user (None for the local admin of single-user mode and for a
    signed media URL) and how it authenticated (``none``/``session``/``token``/``signed_url``)."""

    scope: ScopeContext
    user: User | None
    via: str
    session_value: str | None = None
    token_scopes: frozenset[str] | None = None  # an API token's scopes; None: not a token (no limit)
    token_expires_at: datetime | None = None  # an API token's expiry (None: never, or not a token)

    def may(self, token_scope: str) -> bool:
        """Whether a token principal holds ``token_scope`` (``read``/``write``/``admin``); others may."""
        return self.token_scopes is None or token_scope in self.token_scopes

    @property
    def is_admin(self) -> bool:
        return self.via == "none" or (self.user is not None and self.user.role == "admin" and self.may("admin"))


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: Databases (their URL, password hidden) this process has seen an account in. Once an account
#: exists, ``auto`` means ``required`` for the process's life: remembering it spares every request of
#: a loopback server a round trip, and it can only err towards asking for a sign-in (an install whose
#: last account was removed opens again at its next start).
_ACCOUNTS_SEEN: set[str] = set()


def auth_mode(session: Session, bind_host: str) -> str:
    """``none`` or ``required`` for a server bound to ``bind_host`` (see the module doc)."""
    configured = get_settings().auth
    if configured != "auto":
        return configured
    if not is_loopback(bind_host):
        return "required"
    database = str(session.get_bind().engine.url)
    if database in _ACCOUNTS_SEEN:
        return "required"
    if users.any_users(session):
        _ACCOUNTS_SEEN.add(database)
        return "required"
    return "none"


def startup_problem(bind_host: str) -> str | None:
    """Why ``mewdex serve`` must not start on ``bind_host``, or None."""
    if get_settings().auth == "none" and not is_loopback(bind_host):
        return (
            f"MEWDEX_AUTH=none would open the library to anyone who can reach {bind_host}. "
            "Create the admin account first:\n  mewdex user create you@example.com --admin\n"
            "then serve with MEWDEX_AUTH=required (or unset), or bind to 127.0.0.1."
        )
    return None
