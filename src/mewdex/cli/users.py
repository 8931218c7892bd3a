"""Account commands: ``user create|promote|disable|delete|reset-password|list``."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from mewdex.cli.common import ExitCode, _prepare, console, err, exit_for


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return typer.prompt("password", hide_input=True, confirmation_prompt=True)


def _user_or_exit(session, email: str):
    from mewdex.platform.users import find_by_email

    user = find_by_email(session, email)
    if user is None:
        err.print(f"[red]error:[/red] no account {email}")
        raise typer.Exit(ExitCode.NOT_FOUND)
    return user


def _platform_call(fn) -> None:
    """Run ``fn(session)`` in one transaction; a PlatformError exits 1 with its code."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.platform.errors import PlatformError

    _prepare()
    try:
        with get_sessionmaker().begin() as session:
            fn(session)
    except PlatformError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code)) from None


def user_create(
    email: str,
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make the account an admin.")] = False,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Create an account (the first one is an admin anyway)."""
    from mewdex.platform.users import create_user

    password = _read_password(password_stdin)

    def run(session):
        user = create_user(session, email, password, name=name, role="admin" if admin else None)
        console.print(f"created {user.email} ({user.role}, scope {user.scope_id})")

    _platform_call(run)


def user_promote(
    email: str,
    role: Annotated[str, typer.Option(help="admin or user.")] = "admin",
) -> None:
    """Give an account the admin role (or, with --role user, take it away)."""
    from mewdex.platform.users import set_role

    def run(session):
        user = _user_or_exit(session, email)
        set_role(session, user, role)
        console.print(f"{user.email} is now {role}")

    _platform_call(run)


def user_disable(
    email: str,
    enable: Annotated[bool, typer.Option("--enable", help="Enable the account again.")] = False,
) -> None:
    """Disable an account: its sessions end and its tokens stop working at once."""
    from mewdex.platform.users import set_disabled

    def run(session):
        user = _user_or_exit(session, email)
        set_disabled(session, user, not enable)
        console.print(f"{user.email} is {'enabled' if enable else 'disabled'}")

    _platform_call(run)


def user_delete(
    email: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete an account and its whole library (memes, collections, conversations, schedules,
    channel links, and its files). Asks first unless --yes; cannot be undone."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library import accounts
    from mewdex.platform.errors import PlatformError

    _prepare()
    with get_sessionmaker().begin() as session:
        user = _user_or_exit(session, email)
        user_id, memes = user.user_id, accounts.library_size(session, user)
    if not yes and not typer.confirm(
        f"Delete {email} and its library ({memes} meme(s) and their files)? This cannot be undone"
    ):
        err.print("nothing deleted")
        raise typer.Exit(ExitCode.FAILED)
    try:
        deleted = accounts.delete_account_now(get_sessionmaker(), user_id)
    except PlatformError as exc:
        err.print(f"[red]error:[/red] {exc.code}: {exc.message}")
        raise typer.Exit(exit_for(exc.code)) from None
    console.print(f"deleted {deleted.email}: {deleted.memes} meme(s), {deleted.blobs} file(s)")


def user_reset_password(
    email: str,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
) -> None:
    """Set a new password for an account and sign it out everywhere."""
    from mewdex.platform.sessions import end_all_sessions
    from mewdex.platform.users import set_password

    password = _read_password(password_stdin)

    def run(session):
        user = _user_or_exit(session, email)
        set_password(session, user, password)
        end_all_sessions(session, user)
        console.print(f"password of {user.email} reset")

    _platform_call(run)


def user_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Every account with its role and state."""
    from mewdex.platform.users import list_users, user_dict

    def run(session):
        rows = [user_dict(u) for u in list_users(session)]
        if as_json:
            print(json.dumps(rows))
            return
        table = Table(title=f"{len(rows)} accounts")
        for column in ("email", "role", "disabled", "scope", "created"):
            table.add_column(column)
        for r in rows:
            table.add_row(r["email"], r["role"], "yes" if r["disabled"] else "", r["scope_id"], r["created_at"])
        console.print(table)

    _platform_call(run)
