"""The command line as a client of a running mewdex server: which server (the ``mewdex serve`` of this
data dir, recorded in its ``serve.json``, or ``--server URL``), which API token (``MEWDEX_TOKEN``, else
the one ``mewdex login`` stored), the calls, and the ``login`` / ``logout`` commands.

Tokens live in ``credentials.json`` in the user's config dir (``platformdirs``: ``~/.config/mewdex`` on
Linux), readable by the user only (0600, its folder 0700): ``{"servers": {key: {"url", "email",
"token", "token_id"}}}``. The key of this data dir's own server is ``data-dir:<absolute path>`` (its
port may change between runs; the token stays valid), of another server its URL.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import typer

from mewdex.cli.common import SERVER_FILE, console, err, get_settings

CREDENTIALS_FILE = "credentials.json"
TOKEN_NAME = "mewdex CLI on {host}"


@dataclass(frozen=True)
class Server:
    """A server to call: ``url`` (base URL to connect to and to link to), ``key`` (where its token is
    stored) and whether it is this data dir's own ``mewdex serve`` (``local``)."""

    url: str
    key: str
    local: bool


class Unreachable(Exception):
    """Nothing listens at the server's address (connection refused)."""


def connectable(url: str) -> str:
    """``url`` with a wildcard bind address (``0.0.0.0``, ``::``) replaced by the loopback one, without
    a trailing slash: what a client on this machine connects to (and a browser here opens)."""
    parts = urlsplit(url.strip().rstrip("/"))
    host = parts.hostname or ""
    loopback = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host)
    if loopback is None:
        return urlunsplit(parts)
    netloc = loopback + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def local_server() -> Server | None:
    """The ``mewdex serve`` running on this data dir (its ``serve.json``, whose process is alive), or None."""
    data_dir = get_settings().data_dir
    try:
        record = json.loads((data_dir / SERVER_FILE).read_text())
        os.kill(int(record["pid"]), 0)
        url = str(record["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Server(connectable(url), f"data-dir:{data_dir.resolve()}", True)


def named_server(url: str) -> Server:
    """The server at ``url`` (``--server``/``MEWDEX_SERVER``)."""
    url = connectable(url)
    return Server(url, url, False)


def credentials_path() -> Path:
    """``credentials.json`` in the user's config dir (module doc)."""
    from platformdirs import user_config_path

    return user_config_path("mewdex") / CREDENTIALS_FILE


def _load() -> dict[str, Any]:
    try:
        data = json.loads(credentials_path().read_text())
    except (OSError, ValueError):
        return {"servers": {}}
    return data if isinstance(data, dict) and isinstance(data.get("servers"), dict) else {"servers": {}}


def _save(data: dict[str, Any]) -> Path:
    """Write the credentials file readable by the user only (written beside it, then renamed over it)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=2)
    os.chmod(temporary, 0o600)  # an older file of another mode is replaced, not reused
    os.replace(temporary, path)
    return path


def stored(server: Server) -> dict[str, Any] | None:
    """What ``mewdex login`` stored for ``server``: ``{"url", "email", "token", "token_id"}`` or None."""
    entry = _load()["servers"].get(server.key)
    return entry if isinstance(entry, dict) and entry.get("token") else None


def token_for(server: Server) -> str | None:
    """``MEWDEX_TOKEN`` when set, else the token ``mewdex login`` stored for ``server``, else None."""
    entry = stored(server)
    return os.environ.get("MEWDEX_TOKEN") or (entry or {}).get("token")


def login_hint(server: Server) -> str:
    """The command that signs in to ``server``."""
    return "mewdex login" if server.local else f"mewdex login --server {server.url}"


def call(
    server: Server, token: str | None, method: str, path: str, *, timeout: float = 60, quiet: bool = False, **kw: Any
) -> Any:
    """One API call; returns the JSON answer (None when empty). Raises :class:`Unreachable` when the
    connection is refused; any other failure exits 1 with one line (a 401 says how to sign in).
    ``quiet``: a side question — any failure returns None and prints nothing."""
    from mewdex import egress

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if quiet:
        try:
            with egress.operator_client(timeout) as client:
                response = client.request(method, server.url + path, headers=headers, **kw)
            return response.json() if response.status_code < 400 and response.content else None
        except (egress.OperatorError, ValueError):
            return None
    try:
        with egress.operator_client(timeout) as client:
            response = client.request(method, server.url + path, headers=headers, **kw)
    except egress.OperatorConnectError:
        raise Unreachable(server.url) from None
    except egress.OperatorError as exc:
        err.print(f"[red]error:[/red] cannot reach {server.url}: {type(exc).__name__}")
        raise typer.Exit(1) from None
    code, message = _error(response)
    if response.status_code == 401:
        refused = "its API token was refused" if token else "it needs a login"
        err.print(
            f"[red]error:[/red] {server.url} answered 401 {code}: {refused}; sign in with `{login_hint(server)}` "
            "(or set MEWDEX_TOKEN to an API token from the account page)",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    if response.status_code >= 400:
        err.print(f"[red]error:[/red] {code}: {message}", soft_wrap=True)
        raise typer.Exit(1)
    return response.json() if response.content else None


def _error(response: Any) -> tuple[str, str]:
    try:
        error = response.json()["error"]
        return str(error["code"]), str(error["message"])
    except Exception:  # noqa: BLE001 - not a mewdex error body
        return f"HTTP {response.status_code}", response.reason_phrase or ""


def _target(server: str | None) -> Server:
    if server:
        return named_server(server)
    found = local_server()
    if found is None:
        err.print(
            f"[red]error:[/red] no mewdex server runs on this data dir ({get_settings().data_dir}): "
            "start `mewdex serve`, or name one with --server URL",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    return found


def _password() -> str:
    if sys.stdin.isatty():
        return typer.prompt("Password", hide_input=True)
    return sys.stdin.readline().rstrip("\r\n")  # piped: `printf '%s\n' "$PASSWORD" | mewdex login me@example.com`


SERVER_OPTION = typer.Option(
    "--server",
    envvar="MEWDEX_SERVER",
    help="A mewdex server elsewhere (URL). Default: the `mewdex serve` running on this data dir.",
)


def login(
    email: Annotated[str | None, typer.Argument(help="Your account's email (asked when missing).")] = None,
    server: Annotated[str | None, SERVER_OPTION] = None,
) -> None:
    """Sign in to the running server and keep an API token for the commands run here (search, …), in
    your config dir, readable by you only. The password is asked (hidden), or read from standard input
    when that is not a terminal."""
    from mewdex import egress

    target = _target(server)
    with egress.operator_client(60) as client:
        try:
            me = client.get(target.url + "/api/v1/me")
        except egress.OperatorError as exc:
            err.print(f"[red]error:[/red] cannot reach {target.url}: {type(exc).__name__}")
            raise typer.Exit(1) from None
        if me.status_code == 200 and (me.json().get("auth") or {}).get("mode") == "none":
            console.print(f"{target.url} needs no login (single-user mode on this machine)")
            return
        email = (email or typer.prompt("Email")).strip()
        password = _password()
        signed_in = client.post(target.url + "/api/v1/auth/login", json={"email": email, "password": password})
        if signed_in.status_code != 200:
            code, message = _error(signed_in)
            err.print(f"[red]error:[/red] {code}: {message}", soft_wrap=True)
            raise typer.Exit(1)
        csrf = signed_in.json()["csrf_token"]
        # The session cookie is sent by hand: on a loopback address it is Secure (as browsers treat
        # localhost), which a cookie jar keeps to https.
        cookie = "; ".join(f"{c.name}={c.value}" for c in signed_in.cookies.jar)
        headers = {"X-CSRF-Token": csrf, "Cookie": cookie}
        client.cookies.clear()
        try:
            made = client.post(
                target.url + "/api/v1/tokens",
                json={"name": TOKEN_NAME.format(host=socket.gethostname())[:100]},
                headers=headers,
            )
        finally:
            client.post(target.url + "/api/v1/auth/logout", headers=headers)  # the browser-style session ends
    if made.status_code != 201:
        code, message = _error(made)
        err.print(f"[red]error:[/red] {code}: {message}", soft_wrap=True)
        raise typer.Exit(1)
    token = made.json()
    data = _load()
    data["servers"][target.key] = {"url": target.url, "email": email, "token": token["token"], "token_id": token["id"]}
    path = _save(data)
    console.print(f"signed in to {target.url} as {email}; API token stored in {path}", soft_wrap=True)


def logout(server: Annotated[str | None, SERVER_OPTION] = None) -> None:
    """Revoke the API token `mewdex login` stored (when the server answers) and forget it here."""
    if server:
        target = named_server(server)
    else:
        data_dir = get_settings().data_dir
        target = local_server() or Server("", f"data-dir:{data_dir.resolve()}", True)
    entry = stored(target)
    if entry is None:
        console.print("not signed in")
        return
    url = target.url or str(entry.get("url") or "")
    revoked = False
    if url:
        try:
            call(Server(url, target.key, target.local), entry["token"], "DELETE", f"/api/v1/tokens/{entry['token_id']}")
            revoked = True
        except (Unreachable, typer.Exit):
            pass
    data = _load()
    data["servers"].pop(target.key, None)
    _save(data)
    if revoked:
        console.print(f"signed out of {url}: the token is revoked and forgotten")
    else:
        console.print(
            f"signed out here; {url or 'the server'} could not revoke the token now: revoke "
            f"“{TOKEN_NAME.format(host=socket.gethostname())}” on the account page",
            soft_wrap=True,
        )
