"""Users: sign-up, passwords (bcrypt, 8–72 UTF-8 bytes), roles, the personal scope, disabling.

The first account of an installation becomes admin and owns the default scope (so a personal
install that turns multi-user keeps its library with its admin); every later account gets a new
personal scope ``u-<32 hex>`` — a stable id, never the email.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import Literal, cast

import bcrypt
from sqlalchemy import Table, delete, func, select
from sqlalchemy.orm import Session

from mewdex import hooks
from mewdex.config import get_settings
from mewdex.db.models import LoginFailure, PasswordResetLink, ScopeContext, User
from mewdex.db.scopes import default_scope, ensure_scope
from mewdex.dto.users import User as UserDto
from mewdex.platform.errors import PlatformError, clean_text
from mewdex.platform.instance import get_setting
from mewdex.platform.owners import user_for_scope
from mewdex.platform.quotas import rescan_user
from mewdex.platform.setup import any_users as any_users
from mewdex.platform.setup import consume_setup_code

MIN_PASSWORD_BYTES = 8
MAX_PASSWORD_BYTES = 72  # bcrypt reads at most 72 bytes; longer would be silently truncated
MAX_EMAIL_CHARS = 254
MAX_NAME_CHARS = 100
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def password_bytes(password: str) -> bytes:
    """The password as UTF-8, checked: 422 ``password_too_short`` (< 8 bytes), ``password_too_long``
    (> 72 bytes, counted in UTF-8 bytes), ``password_invalid`` (NUL or a lone surrogate)."""
    if "\x00" in password:
        raise PlatformError("password_invalid", "the password holds a NUL character")
    try:
        data = password.encode("utf-8")
    except UnicodeEncodeError:
        raise PlatformError("password_invalid", "the password is not valid Unicode") from None
    if len(data) > MAX_PASSWORD_BYTES:
        raise PlatformError(
            "password_too_long",
            f"the password is over {MAX_PASSWORD_BYTES} bytes (UTF-8)",
            {"max_bytes": MAX_PASSWORD_BYTES, "bytes": len(data)},
        )
    if len(data) < MIN_PASSWORD_BYTES:
        raise PlatformError(
            "password_too_short", f"the password is under {MIN_PASSWORD_BYTES} bytes", {"min_bytes": MIN_PASSWORD_BYTES}
        )
    return data


def hash_password(password: str) -> str:
    return bcrypt.hashpw(password_bytes(password), bcrypt.gensalt(get_settings().bcrypt_rounds)).decode()


def check_password(stored_hash: str | None, candidate: bytes) -> bool:
    """bcrypt comparison; a missing hash still costs one bcrypt round trip (constant time). Only
    :func:`mewdex.platform.sessions.verify_password` calls this: every password check is counted."""
    if not stored_hash:
        bcrypt.checkpw(candidate, _dummy_hash())
        return False
    return bcrypt.checkpw(candidate, stored_hash.encode())


_DUMMY: dict[int, bytes] = {}


def _dummy_hash() -> bytes:
    rounds = get_settings().bcrypt_rounds
    if rounds not in _DUMMY:
        _DUMMY[rounds] = bcrypt.hashpw(b"mewdex-dummy-password", bcrypt.gensalt(rounds))
    return _DUMMY[rounds]


def normalize_email(email: str) -> str:
    """Stripped email; 422 ``email_invalid`` unless it looks like ``local@domain.tld``."""
    email = clean_text(email, "email", max_chars=MAX_EMAIL_CHARS)
    if not EMAIL_RE.match(email):
        raise PlatformError("email_invalid", "the email address is not valid")
    return email


def find_by_email(session: Session, email: str) -> User | None:
    return session.execute(select(User).where(func.lower(User.email) == email.strip().lower())).scalar_one_or_none()


def get_user(session: Session, user_id) -> User | None:
    return session.get(User, user_id)


def signup_enabled(session: Session) -> bool:
    """Whether anyone may sign up (``platform_settings.signup_enabled``; off unless the admin opens it)."""
    return bool(get_setting(session, "signup_enabled", False))


ACCOUNTS_LOCK = 0x6D657764_0001  # serialises account creation and single sign-on links


def create_user(
    session: Session,
    email: str,
    password: str | None,
    *,
    name: str | None = None,
    role: str | None = None,
    check_signup: bool = False,
    setup_code: str | None = None,
) -> User:
    """A new account with its personal scope; ``password`` None: none (the account signs in through
    single sign-on, :mod:`mewdex.platform.oidc`, or gets one by a reset link).

    ``role`` None: admin for the installation's first account, else user. ``check_signup`` (a web
    sign-up): the first account (the admin) needs the one-time setup code ``mewdex serve`` printed
    (``setup_code``; 403 ``admin_required`` without it: whoever reaches the server first must not
    get its library); later accounts need sign-up opened by the admin (403 ``signup_disabled``,
    checked before any password hashing). Errors: 422 (email/password/name), 409 ``signup_failed``
    (the email cannot be used; the answer does not say whether an account has it).
    """
    email = normalize_email(email)
    if check_signup and not get_settings().password_login:
        raise PlatformError("password_login_disabled", "this server signs in through single sign-on only")
    if check_signup and any_users(session) and not signup_enabled(session):
        raise PlatformError("signup_disabled", "sign-up is turned off on this server; ask the admin")
    pw_hash = hash_password(password) if password is not None else None
    name = clean_text(name, "name", max_chars=MAX_NAME_CHARS) or None if name is not None else None
    # Serialise account creation so "first account = admin" and "first owns the default scope" hold.
    session.execute(select(func.pg_advisory_xact_lock(ACCOUNTS_LOCK)))
    if check_signup and not any_users(session):
        if not consume_setup_code(session, setup_code):
            raise PlatformError(
                "admin_required",
                "this server has no admin yet: create it on the server with "
                "`mewdex user create EMAIL --admin`, or sign up with the "
                "setup code `mewdex serve` printed",
            )
    elif check_signup and not signup_enabled(session):
        raise PlatformError("signup_disabled", "sign-up is turned off on this server; ask the admin")
    if find_by_email(session, email) is not None:
        if check_signup:
            raise PlatformError("signup_failed", "this email cannot be used to sign up; sign in instead")
        raise PlatformError("email_taken", "an account with this email exists")
    first = not any_users(session)
    scope = (
        default_scope()
        if first and user_for_scope(session, default_scope().scope_id) is None
        else (ScopeContext(f"u-{uuid.uuid4().hex}"))
    )
    ensure_scope(session, scope)
    user = User(
        email=email,
        password_hash=pw_hash,
        name=name,
        role=role or ("admin" if first else "user"),
        scope_id=scope.scope_id,
    )
    if check_signup and not first:  # a stranger who signed up gets finite limits until the admin says more
        apply_signup_limits(user)
    session.add(user)
    session.flush()

    rescan_user(session, user)  # the default scope may already hold memes
    return user


def apply_signup_limits(user: User) -> None:
    """The limits of an account made by sign-up (``MEWDEX_SIGNUP_QUOTA_*``): web sign-up and single sign-on."""
    settings = get_settings()
    user.quota_storage_bytes = settings.signup_quota_storage_bytes
    user.quota_memes = settings.signup_quota_memes


def set_password(session: Session, user: User, new: str) -> None:
    """The new password; the user's API tokens are revoked, signed links die (the auth epoch moves) and
    unused password reset links stop working."""
    from mewdex.platform.tokens import revoke_all

    user.password_hash = hash_password(new)
    bump_epoch(user)
    revoke_all(session, user)
    _void_reset_links(session, user)
    # A new password starts the account's failure count afresh (sessions.verify_password): after a
    # reset the owner is not slowed down by an earlier spray, from any address.
    if user.email:
        session.execute(delete(LoginFailure).where(LoginFailure.key == account_key(user.email)))


def account_key(email: str) -> str:
    """The ``login_failures`` key that counts an account's failed password checks (its email, stripped
    and lower case, at most 320 characters)."""
    return "account:" + email.strip().lower()[:320]


def _void_reset_links(session: Session, user: User) -> None:
    session.execute(
        delete(PasswordResetLink).where(PasswordResetLink.user_id == user.user_id, PasswordResetLink.used_at.is_(None))
    )


def bump_epoch(user: User) -> None:
    """Invalidate the user's signed media links (they carry the epoch they were made in)."""
    user.auth_epoch = (user.auth_epoch or 0) + 1


def set_role(session: Session, user: User, role: str) -> None:
    """422 ``role_invalid``; 409 ``last_admin`` when this would leave no enabled admin."""
    if role not in ("user", "admin"):
        raise PlatformError("role_invalid", "role must be user or admin")
    if user.role == "admin" and role != "admin":
        _keep_an_admin(session, user)
    user.role = role


#: ``hook(session, user, event)`` run in the transaction of an account's ``disabled`` / ``enabled`` /
#: ``deleted`` change: the ``account_hooks`` hook of :mod:`mewdex.hooks`. The layers above the platform
#: provide theirs (the channels close the account's sockets and cancel its queued sends; the schedules
#: pause and restore its jobs); the plugins that declare one are imported at the first change, so every
#: entry point that changes an account (admin API, CLI) does all of it.
AccountHook = Callable[[Session, User, str], None]


def on_account_change(name: str, hook: AccountHook) -> None:
    """Provide ``hook`` under ``name`` (idempotent: a re-import replaces it)."""
    hooks.provide("account_hooks", name, hook, stacklevel=2)


def _account_changed(session: Session, user: User, event: str) -> None:
    for hook in hooks.implementations("account_hooks").values():
        hook(session, user, event)


def set_disabled(session: Session, user: User, disabled: bool) -> None:
    """Disabling ends the user's sessions at once (tokens stop working too: they check the user),
    voids unused password reset links (enabling the account again does not bring them back), and
    the account hooks stop the rest: its chat sockets close, its queued sends are cancelled, its
    schedules pause. Enabling restores the schedules (chats resume by themselves: every path asks
    :func:`mewdex.platform.owners.owner_active`)."""
    from mewdex.db.models import UserSession

    if disabled and user.role == "admin":
        _keep_an_admin(session, user)
    changed = bool(user.disabled) != disabled
    user.disabled = disabled
    if disabled:
        bump_epoch(user)
        session.execute(cast(Table, UserSession.__table__).delete().where(UserSession.user_id == user.user_id))
        _void_reset_links(session, user)
    if changed:
        session.flush()
        _account_changed(session, user, "disabled" if disabled else "enabled")


def delete_user(session: Session, user: User) -> None:
    """Delete the user row: the hooks remove its channel bindings and its scheduled jobs, then the
    row goes (its sessions, tokens and grants with it). Its scope's library is
    :func:`mewdex.library.accounts.delete_account`'s to delete (the one caller: never leave a
    library owned by no one). 409 ``last_admin`` for the last enabled admin."""
    if user.role == "admin" and not user.disabled:
        _keep_an_admin(session, user)
    bump_epoch(user)
    session.flush()
    _account_changed(session, user, "deleted")
    session.delete(user)
    session.flush()


ADMINS_LOCK = 0x6D657764_0002  # serialises changes that could leave no enabled admin


def _keep_an_admin(session: Session, user: User) -> None:
    """409 ``last_admin`` unless another enabled admin remains. Two admins demoting or disabling each
    other at once must not both pass: the check holds a transaction lock until the change commits."""
    session.execute(select(func.pg_advisory_xact_lock(ADMINS_LOCK)))
    others = session.execute(
        select(func.count())
        .select_from(User)
        .where(User.role == "admin", User.disabled.is_(False), User.user_id != user.user_id)
    ).scalar_one()
    if others == 0:
        raise PlatformError("last_admin", "this is the last enabled admin")


def user_dict(user: User) -> dict:
    """``{"id", "email", "name", "role", "disabled", "scope_id", "created_at", "time_zone", "language"}``
    (:class:`mewdex.dto.users.User`)."""
    return UserDto(
        id=str(user.user_id),
        email=user.email,
        name=user.name,
        role=user.role,
        disabled=user.disabled,
        scope_id=user.scope_id,
        created_at=user.created_at.isoformat() if user.created_at else None,
        time_zone=user.time_zone,
        language=cast(Literal["en", "zh"] | None, user.language),
    ).model_dump()


def list_users(session: Session) -> list[User]:
    return list(session.execute(select(User).order_by(User.created_at, User.user_id)).scalars())


MAX_TIME_ZONE_CHARS = 64
LANGUAGES = ("en", "zh")


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    """The IANA zone names of the installed tz database, less ``localtime`` (the server's own zone,
    not a name a browser knows); ``posix/…``, ``right/…`` and ``posixrules`` are not in it either."""
    from zoneinfo import available_timezones

    return frozenset(available_timezones()) - {"localtime"}


def check_time_zone(name: str) -> str:
    """The IANA zone name, stripped (``Asia/Shanghai``, ``UTC``); 422 ``timezone_invalid`` for an
    unknown, empty, over-64-character or path-like name, and for the tz database's files that are not
    zone names a browser knows (``localtime``, ``posixrules``, ``posix/…``, ``right/…``)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    value = name.strip() if isinstance(name, str) else ""
    if (
        not value
        or len(value) > MAX_TIME_ZONE_CHARS
        or value.startswith("/")
        or ".." in value
        or "\x00" in value
        or value not in _zone_names()
    ):
        raise PlatformError("timezone_invalid", "unknown time zone (use an IANA name, e.g. Asia/Shanghai)")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise PlatformError("timezone_invalid", "unknown time zone (use an IANA name, e.g. Asia/Shanghai)") from None
    return value


def set_preferences(
    user: User, *, time_zone: str | None = None, language: str | None = None, fields: set[str] | None = None
) -> None:
    """Set the account's time zone (IANA name; 422 ``timezone_invalid``) and page language (``en`` or
    ``zh``; 422 ``language_invalid``). Only the names in ``fields`` change (all given ones when None);
    a field in ``fields`` set to None goes back to the browser's choice."""
    fields = fields if fields is not None else {k for k, v in (("time_zone", time_zone), ("language", language)) if v}
    if "time_zone" in fields:
        user.time_zone = None if time_zone is None else check_time_zone(time_zone)
    if "language" in fields:
        if language is not None and language not in LANGUAGES:
            raise PlatformError("language_invalid", "language is en or zh", {"allowed": list(LANGUAGES)})
        user.language = language


def default_time_zone(user: User, browser_zone: str | None) -> None:
    """At sign-in: an account without a time zone takes the browser's (ignored when not a known zone)."""
    if user.time_zone is None and browser_zone:
        try:
            user.time_zone = check_time_zone(browser_zone)
        except PlatformError:
            pass
