"""Password checks (sign-in and every re-authentication, one function: :func:`verify_password`):
generic constant-time failures, slow-down per account and limits per address (counted in
PostgreSQL); browser sessions.

A session is a random cookie value; only its sha256 is stored (``user_sessions``), with the CSRF
token the browser must echo in ``X-CSRF-Token`` on state-changing requests.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import secrets
from datetime import timedelta

from sqlalchemy import case, delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import LoginFailure, User, UserSession, utcnow
from mewdex.platform import users
from mewdex.platform.errors import PlatformError

log = logging.getLogger(__name__)
COOKIE_NAME = "mewdex_session"
CSRF_COOKIE_NAME = "mewdex_csrf"
CSRF_HEADER = "X-CSRF-Token"
HOST_PREFIX = "__Host-"
SECURE_PREFIX = "__Secure-"


def cookie_prefix(secure: bool) -> str:
    """The name prefix of mewdex's Secure cookies: ``__Host-`` (the browser keeps them only when Secure,
    host-only and ``Path=/``, so no sibling domain or plain-http page can set or shadow them);
    ``__Secure-`` under a sub-path (``MEWDEX_BASE_PATH``: their ``Path`` is it, which ``__Host-``
    forbids); none when not Secure."""
    if not secure:
        return ""
    return SECURE_PREFIX if get_settings().base_path else HOST_PREFIX


def cookie_names(secure: bool) -> tuple[str, str]:
    """``(session, csrf)`` cookie names. Secure cookies carry :func:`cookie_prefix`. A plain-http install on
    a non-loopback address cannot keep Secure cookies (browsers drop them), so there the names stay
    unprefixed (``mewdex_session``, ``mewdex_csrf``)."""
    prefix = cookie_prefix(secure)
    return prefix + COOKIE_NAME, prefix + CSRF_COOKIE_NAME


def count_attempt(key: str, limit: int, window: int) -> float:
    """Count one attempt of ``key`` (``signup:<ip bucket>``, ``share:<ip bucket>``) against ``limit``
    attempts per ``window`` seconds; returns 0.0 when it is within the limit, else the seconds until
    the window ends (at least 1). The count is a row of ``login_failures`` (one upsert, in a
    transaction of its own that commits whatever the request does next, without waiting for the WAL
    flush), so every API process of every machine counts in the same window. The window is fixed: it
    starts at the key's first attempt after the previous one ended, as the sign-in counters' does, and
    the count starts afresh when it ends (not a sliding window); attempts past the limit are counted
    too, and change nothing but the number."""
    from mewdex.db.engine import get_sessionmaker

    table = LoginFailure.__table__
    stale = table.c.window_started_at <= func.now() - timedelta(seconds=window)
    statement = (
        insert(LoginFailure)
        .values(key=key, failures=1)
        .on_conflict_do_update(
            index_elements=["key"],
            set_={
                "failures": case((stale, 1), else_=table.c.failures + 1),
                "window_started_at": case((stale, func.now()), else_=table.c.window_started_at),
                "last_failure_at": func.now(),
            },
        )
        .returning(
            LoginFailure.failures,
            func.extract("epoch", LoginFailure.window_started_at + timedelta(seconds=window) - func.now()),
        )
    )
    with get_sessionmaker().begin() as session:
        # Every request to a public link counts: its commit does not wait for the WAL flush (a count
        # lost in a crash lets an address a few attempts more, nothing else).
        session.execute(text("SET LOCAL synchronous_commit = off"))
        attempts, remaining = session.execute(statement).one()
    return 0.0 if attempts <= limit else max(float(remaining), 1.0)


SIGNUP_WINDOW_SECONDS = 3600


def check_signup_rate(client_ip: str) -> None:
    """Count one sign-up attempt from ``client_ip``; 429 ``rate_limited`` past
    ``MEWDEX_SIGNUP_MAX_PER_IP`` attempts an hour, counted per :func:`ip_bucket` (an IPv6 host has a
    whole /64 to pick addresses from)."""
    wait = count_attempt(f"signup:{ip_bucket(client_ip)}", get_settings().signup_max_per_ip, SIGNUP_WINDOW_SECONDS)
    if wait:
        raise PlatformError(
            "rate_limited",
            "too many sign-ups from this address; try again later",
            {"retry_after_seconds": int(wait)},
            headers={"Retry-After": str(int(wait))},
        )


INVALID = PlatformError("invalid_credentials", "the email or password is wrong")
WRONG_CURRENT = PlatformError("invalid_credentials", "the current password is wrong")


def ip_bucket(client_ip: str) -> str:
    """The unit an address is counted in: the address for IPv4, its /64 for IPv6 (one host's share)."""
    try:
        ip = ipaddress.ip_address(client_ip)
    except ValueError:
        return client_ip[:64]
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _claim(ip_key: str, account_key: str, known: bool, window: int) -> int:
    """Check the limits of one password attempt and count it as a failure, in one step: both counters'
    rows locked, in a transaction of its own committed before the password work (attempts sent at
    once each see the ones before them; reading the counts first and writing them after the bcrypt
    work let every attempt of a burst through). Returns the account's failures before this one;
    raises 429 ``rate_limited`` (nothing counted) past a limit (:func:`verify_password`). A right
    password takes its count back (:func:`_unclaim`)."""
    from mewdex.db.engine import get_sessionmaker

    settings = get_settings()
    with get_sessionmaker().begin() as session:
        session.execute(
            insert(LoginFailure)
            .values([{"key": ip_key, "failures": 0}, {"key": account_key, "failures": 0}])
            .on_conflict_do_nothing(index_elements=["key"])
        )
        rows = session.execute(
            select(LoginFailure)
            .where(LoginFailure.key.in_([ip_key, account_key]))
            .order_by(LoginFailure.key)
            .with_for_update()
        ).scalars()
        by_key = {row.key: row for row in rows}
        now = utcnow()
        ip, account = by_key[ip_key], by_key[account_key]
        stale = {key: row.window_started_at <= now - timedelta(seconds=window) for key, row in by_key.items()}
        ip_failures = 0 if stale[ip_key] else ip.failures
        account_failures = 0 if stale[account_key] else account.failures
        if ip_failures >= settings.login_max_failures_per_ip:
            raise _rate_limited(window / 4, "too many failed password attempts from this address; try again later")
        backoff = _backoff_seconds(account_failures, settings.login_max_failures_per_account)
        since_last = (now - account.last_failure_at).total_seconds()
        if backoff and not known and since_last < backoff:
            raise _rate_limited(
                backoff - since_last, "too many failed password attempts for this account; try again soon"
            )
        for row, failures in ((ip, ip_failures), (account, account_failures)):
            if stale[row.key]:
                row.window_started_at = now
            row.failures, row.last_failure_at = failures + 1, now
    return account_failures


def _unclaim(session: Session, ip_key: str, account_key: str) -> None:
    """A right password: the attempt :func:`_claim` counted is not a failure (the address's count
    goes back by one) and the account's count starts afresh."""
    session.execute(delete(LoginFailure).where(LoginFailure.key == account_key))
    session.execute(
        update(LoginFailure)
        .where(LoginFailure.key == ip_key, LoginFailure.failures > 0)
        .values(failures=LoginFailure.failures - 1)
    )


def _backoff_seconds(failures: int, limit: int) -> float:
    """How long an account over its limit makes unknown addresses wait between attempts: doubling
    from 1 s with each failure past the limit, at most 15 minutes."""
    return 0.0 if failures < limit else float(min(2 ** (failures - limit), 900))


def _rate_limited(wait: float, message: str) -> PlatformError:
    wait = max(int(wait + 0.999), 1)
    return PlatformError("rate_limited", message, {"retry_after_seconds": wait}, headers={"Retry-After": str(wait)})


def authenticate(session: Session, email: str, password: str, client_ip: str) -> User:
    """Sign-in: the user for ``email``/``password`` from ``client_ip``; :func:`verify_password`'s
    errors (401 ``invalid_credentials``, 429 ``rate_limited``); 403 ``password_login_disabled`` with
    ``MEWDEX_PASSWORD_LOGIN=false`` (single sign-on only)."""
    if not get_settings().password_login:
        raise PlatformError("password_login_disabled", "this server signs in through single sign-on only")
    return verify_password(session, email, password, client_ip)


def confirm_password(session: Session, user: User, password: str, client_ip: str) -> None:
    """A signed-in ``user`` proves they know their password (the current password of a password
    change): :func:`verify_password` for that account, counted like a sign-in. 401
    ``invalid_credentials`` ("the current password is wrong"), 429 ``rate_limited``."""
    verify_password(session, user.email or f"#{user.user_id}", password, client_ip, user=user)


def verify_password(session: Session, email: str, password: str, client_ip: str, *, user: User | None = None) -> User:
    """THE password check: every route that takes a password calls this (through :func:`authenticate`
    or :func:`confirm_password`); nothing else calls :func:`mewdex.platform.users.check_password`.

    ``email``: the account (normalised: stripped, lower case); ``user``: the account when the caller
    already knows it (re-authentication), else it is looked up by ``email``. ``client_ip``: the
    client address (``web.security.client_address``).

    Raises 401 ``invalid_credentials`` for every kind of failure (unknown email, wrong password,
    disabled account, malformed input) after the same bcrypt work, and 429 ``rate_limited`` (with
    ``Retry-After``) before any password work:

    * per address (IPv4 address or IPv6 /64): past ``MEWDEX_LOGIN_MAX_FAILURES_PER_IP`` failures
      in the window, everything from it waits until the window ends;
    * per account, whatever the address: past ``MEWDEX_LOGIN_MAX_FAILURES_PER_ACCOUNT`` failures the
      account is *slowed*, not locked: addresses it never signed in from wait a doubling delay (1 s,
      2 s, … at most 15 minutes) after the account's last failure, while an address it signed in
      from before goes straight to the password check — a password spray from elsewhere cannot lock
      the owner out, and the count starts again with the next window
      (``MEWDEX_LOGIN_FAILURE_WINDOW_SECONDS`` after its first failure) or a password reset.

    Each attempt is checked and counted in one locked step before the password work (:func:`_claim`:
    a burst sent at once is held to the limits as one sent in turn); a right password takes its count
    back. The counters live in ``login_failures`` (shared by every API process); failures are logged with
    a hash of the account, never the email or the password.
    """
    settings = get_settings()
    reauth = user is not None
    window = settings.login_failure_window_seconds
    account = email.strip().lower()[:320]
    bucket = ip_bucket(client_ip)
    account_key, ip_key, known_key = users.account_key(account), f"ip:{bucket}", f"known:{account}:{bucket}"
    known = session.get(LoginFailure, known_key) is not None
    account_failures = _claim(ip_key, account_key, known, window)
    try:
        candidate = users.password_bytes(password)
    except PlatformError:
        candidate = password.encode("utf-8", "replace")[:72] or b"-"
        candidate = candidate.replace(b"\x00", b"-")
        user = None
    else:
        if user is None:
            user = users.find_by_email(session, email) if "\x00" not in email else None
    ok = users.check_password(user.password_hash if user else None, candidate)
    if not ok or user is None or user.disabled:  # counted already (_claim)
        log.warning(
            "failed password check for account %s… from %s (%d failures on the account)",
            hashlib.sha256(account.encode()).hexdigest()[:12],
            bucket,
            account_failures + 1,
        )
        raise WRONG_CURRENT if reauth else INVALID
    _unclaim(session, ip_key, account_key)
    session.execute(
        insert(LoginFailure)
        .values(key=known_key, failures=0)
        .on_conflict_do_update(index_elements=["key"], set_={"last_failure_at": func.now()})
    )
    return user


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def start_session(session: Session, user: User) -> tuple[str, str]:
    """A new session for ``user``: ``(cookie value, csrf token)``; expired sessions are purged."""
    value, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    now = utcnow()
    session.execute(delete(UserSession).where(UserSession.user_id == user.user_id, UserSession.expires_at < now))
    session.add(
        UserSession(
            session_hash=_digest(value),
            user_id=user.user_id,
            csrf_token=csrf,
            expires_at=now + timedelta(days=get_settings().session_days),
        )
    )
    return value, csrf


def resolve_session(session: Session, value: str) -> tuple[UserSession, User] | None:
    """The live session and its enabled user for a cookie value, else None (expired, or idle for
    longer than ``MEWDEX_SESSION_IDLE_MINUTES``)."""
    if not value or len(value) > 256:
        return None
    now = utcnow()
    idle = timedelta(minutes=get_settings().session_idle_minutes)
    row = session.execute(
        select(UserSession, User)
        .join(User, User.user_id == UserSession.user_id)
        .where(
            UserSession.session_hash == _digest(value),
            UserSession.expires_at > now,
            UserSession.last_seen_at > now - idle,
            User.disabled.is_(False),
        )
    ).first()
    if row is None:
        return None
    if row[0].last_seen_at < now - timedelta(minutes=1):  # one write a minute at most
        row[0].last_seen_at = now
    return row[0], row[1]


def end_session(session: Session, value: str) -> None:
    if value:
        session.execute(delete(UserSession).where(UserSession.session_hash == _digest(value)))


def end_all_sessions(session: Session, user: User, *, keep: str | None = None) -> None:
    """Sign the user out everywhere (but the session ``keep``), e.g. after a password change."""
    stmt = delete(UserSession).where(UserSession.user_id == user.user_id)
    if keep:
        stmt = stmt.where(UserSession.session_hash != _digest(keep))
    session.execute(stmt)


def csrf_ok(stored: str, presented: str | None) -> bool:
    if not presented:
        return False
    return secrets.compare_digest(stored.encode(), presented.encode("utf-8", "replace"))
