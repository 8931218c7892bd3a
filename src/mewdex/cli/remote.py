"""The command line as a client of a running mewdex server: which server (the ``mewdex serve`` of this
data dir, recorded in its ``serve.json``, or ``--server URL``), which API token (``MEWDEX_TOKEN``, else
the one ``mewdex login`` stored), the calls, and the ``login`` / ``logout`` commands.

Tokens live in ``credentials.json`` in the user's config dir (``platformdirs``: ``~/.config/mewdex`` on
Linux), readable by the user only (0600, its folder 0700): ``{"servers": {key: {"url", "origin",
"email", "token", "token_id"}}}``. The key of this data dir's own server is ``data-dir:<absolute
path>``, of another server its URL.

Where a credential may go (:func:`local_server`, :func:`stored_token`, :func:`token_for`, one rule for
every command):

* ``serve.json`` sits in the data dir, by default ``./.mewdex`` of the folder the command runs in — a
  folder someone else may have written (a cloned repository, an unpacked archive). So a record is used
  only when it proves to be this data dir's own ``mewdex serve`` (:func:`serve_record_problem`): it
  is a small regular file, not a link (to another data dir's record, say); its URL is a loopback
  address, and its pid is a live process of this user, whose command line is ``mewdex serve``, which
  holds this data dir's ``serve.json`` open (``mewdex serve`` keeps it open while it serves) and
  listens on the URL's port. A record that fails any of these is ignored with a
  note: nothing is sent to it.
* A stored token goes only to the origin (``scheme://host:port``) it was issued by: a server that
  moved to another port needs ``mewdex login`` again.
* ``MEWDEX_TOKEN`` goes only to a server named with ``--server``/``MEWDEX_SERVER`` or to a local server
  that passed the proof above.
* ``mewdex login`` names the URL the password goes to, and asks before sending it to a host that is
  not a loopback address (``--yes`` for scripts); plain ``http`` to such a host gets a warning.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import typer

from mewdex.cli.common import SERVER_FILE, ExitCode, console, err, exit_for_status, get_settings, read_server_record

CREDENTIALS_FILE = "credentials.json"
TOKEN_NAME = "mewdex CLI on {host}"


@dataclass(frozen=True)
class Server:
    """A server to call: ``url`` (base URL to connect to and to link to), ``key`` (where its token is
    stored) and whether it is this data dir's own ``mewdex serve`` (``local``). Built only by
    :func:`named_server` (the user named it) and :func:`local_server` (it passed the proof)."""

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


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (lower case, the scheme's default port written out): what a
    credential is bound to. Raises ValueError for a URL that is not http(s) with a host."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    host = parts.hostname.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def loopback_addresses(host: str) -> list[str]:
    """The loopback addresses ``host`` names: itself when it is a loopback IP literal (127.0.0.0/8,
    ``::1``), what ``localhost`` resolves to when all of that is loopback; else ``[]`` (any other name
    counts as remote: its resolution could change between a check and the connection)."""
    host = host.strip("[]").lower()
    try:
        return [host] if ipaddress.ip_address(host).is_loopback else []
    except ValueError:
        pass
    if host != "localhost":
        return []
    try:
        found = [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except OSError:
        return []
    addresses = list(dict.fromkeys(a.split("%")[0] for a in found))
    return addresses if addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses) else []


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is a loopback address (:func:`loopback_addresses`)."""
    return bool(loopback_addresses(urlsplit(url.strip()).hostname or ""))


def _is_mewdex_serve(cmdline: list[str]) -> bool:
    """Whether a command line runs ``mewdex serve`` (``…/bin/mewdex serve …``, ``python …/mewdex serve``,
    ``python -m mewdex serve``): the first word after ``mewdex`` that is not an option is ``serve``."""
    for i, arg in enumerate(cmdline):
        if os.path.basename(arg) == "mewdex":
            rest = [a for a in cmdline[i + 1 :] if not a.startswith("-")]
            return bool(rest) and rest[0] == "serve"
    return False


def serve_record_problem(record_path: Path) -> tuple[str | None, str | None]:
    """Check the ``serve.json`` at ``record_path``: ``(url, None)`` when it is this data dir's own
    ``mewdex serve`` (module doc: a regular file, no link; loopback URL; live pid of this user; command
    line ``mewdex serve``; holds ``record_path`` open; listens on the URL's port), with ``url`` naming
    the address it listens on; ``(None, None)`` when there is no record; ``(None, why)`` when the
    record is not to be trusted."""
    import psutil

    try:
        record = read_server_record(record_path)
        url = connectable(str(record["url"]))
        pid = int(record["pid"])
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError):
        return None, "it is not a record `mewdex serve` wrote"
    parts = urlsplit(url)
    try:
        origin(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, f"{url} is not an http(s) URL"
    addresses = loopback_addresses(parts.hostname or "")
    if not addresses:
        return None, f"{url} is not a loopback address (name a server elsewhere with --server URL)"
    if pid <= 0:
        return None, f"pid {pid} is no process"
    try:
        process = psutil.Process(pid)
        if process.uids().real != os.getuid():
            return None, f"process {pid} belongs to another user"
        if not _is_mewdex_serve(process.cmdline()):
            return None, f"process {pid} is not `mewdex serve`"
        held = {os.path.realpath(f.path) for f in process.open_files()}
        # the record itself: read_server_record followed no link, so only its folder is resolved here
        if os.path.join(os.path.realpath(record_path.parent), record_path.name) not in held:
            return None, f"process {pid} does not serve this data dir"
        connections = getattr(process, "net_connections", None) or process.connections
        listening = {
            (c.laddr.ip.split("%")[0], c.laddr.port)
            for c in connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr
        }
    except psutil.NoSuchProcess:
        return None, f"process {pid} is not running"
    except psutil.Error as exc:
        return None, f"process {pid} cannot be checked ({type(exc).__name__})"
    for address in addresses:
        wildcard = "::" if ":" in address else "0.0.0.0"
        if {(address, port), (wildcard, port), ("::", port)} & listening:
            host = f"[{address}]" if ":" in address else address
            return urlunsplit((parts.scheme, f"{host}:{port}", parts.path, "", "")), None
    return None, f"process {pid} does not listen on {url}"


def local_server(*, explain: bool = True) -> Server | None:
    """The ``mewdex serve`` running on this data dir, proven by :func:`serve_record_problem`, or None.
    A record that fails the proof is ignored, with a note on stderr (``explain``) saying why."""
    data_dir = get_settings().data_dir.resolve()
    record = data_dir / SERVER_FILE
    url, problem = serve_record_problem(record)
    if url is None:
        if problem and explain:
            err.print(
                f"note: ignoring {record}: {problem}; it is not this data dir's `mewdex serve`, nothing is sent to it",
                soft_wrap=True,
            )
        return None
    return Server(url, f"data-dir:{data_dir}", True)


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
    """What ``mewdex login`` stored for ``server``: ``{"url", "origin", "email", "token", "token_id"}`` or None."""
    entry = _load()["servers"].get(server.key)
    return entry if isinstance(entry, dict) and entry.get("token") else None


def issued_by(entry: dict[str, Any]) -> str | None:
    """The origin a stored token was issued by (its ``origin``; entries of older versions: their
    ``url``'s), or None when neither is a URL."""
    try:
        return origin(str(entry.get("origin") or entry.get("url") or ""))
    except ValueError:
        return None


def stored_token(server: Server) -> str | None:
    """The token ``mewdex login`` stored for ``server``, only when ``server`` is at the origin that issued
    it (module doc); else None."""
    entry = stored(server)
    if entry is None or not server.url:
        return None
    try:
        here = origin(server.url)
    except ValueError:
        return None
    return str(entry["token"]) if issued_by(entry) == here else None


def token_for(server: Server) -> str | None:
    """``MEWDEX_TOKEN`` when set, else :func:`stored_token`, else None. ``server`` is one the user named or
    a proven local server (the only kinds of :class:`Server`), so ``MEWDEX_TOKEN`` may go to it."""
    return os.environ.get("MEWDEX_TOKEN") or stored_token(server)


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
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    return answer(server, token, response)


def answer(server: Server, token: str | None, response: Any) -> Any:
    """The JSON of a successful answer (None when empty); a failure exits as :func:`call` says."""
    code, message = _error(response)
    if response.status_code == 401:
        refused = "its API token was refused" if token else "it needs a login"
        err.print(
            f"[red]error:[/red] {server.url} answered 401 {code}: {refused}; sign in with `{login_hint(server)}` "
            "(or set MEWDEX_TOKEN to an API token from the account page)",
            soft_wrap=True,
        )
        raise typer.Exit(ExitCode.FAILED)
    if response.status_code >= 400:
        err.print(f"[red]error:[/red] {code}: {message}", soft_wrap=True)
        raise typer.Exit(exit_for_status(response.status_code))
    return response.json() if response.content else None


#: The longest a busy server's ``Retry-After`` is waited for at once (seconds).
MAX_RETRY_AFTER = 30.0


class Api:
    """Many calls to one server over one connection pool: ``with Api(server, token) as api: api.call(...)``.
    :meth:`call` answers as :func:`call` does; :meth:`request` returns the raw response after waiting out
    a busy server (429 ``queue_full`` / ``too_many_uploads``: its ``Retry-After``, at most
    :data:`MAX_RETRY_AFTER` s each time, as often as it says so; ``on_wait(seconds, code)`` is told)."""

    def __init__(self, server: Server, token: str | None, timeout: float = 120) -> None:
        self.server, self.token, self.timeout = server, token, timeout
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def __enter__(self) -> Api:
        from mewdex import egress

        self.client = egress.operator_client(self.timeout)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def request(self, method: str, path: str, *, on_wait: Any = None, **kw: Any) -> Any:
        import time

        from mewdex import egress

        while True:
            try:
                response = self.client.request(method, self.server.url + path, headers=self.headers, **kw)
            except egress.OperatorConnectError:
                raise Unreachable(self.server.url) from None
            except egress.OperatorError as exc:
                err.print(f"[red]error:[/red] cannot reach {self.server.url}: {type(exc).__name__}")
                raise typer.Exit(ExitCode.UNAVAILABLE) from None
            if response.status_code != 429:
                return response
            try:
                delay = min(MAX_RETRY_AFTER, max(0.2, float(response.headers.get("retry-after", "1"))))
            except ValueError:
                delay = 1.0
            if on_wait is not None:
                on_wait(delay, _error(response)[0])
            time.sleep(delay)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        return answer(self.server, self.token, self.request(method, path, **kw))


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
            f"[red]error:[/red] no mewdex server runs on this data dir ({get_settings().data_dir.resolve()}): "
            "start `mewdex serve`, or name one with --server URL",
            soft_wrap=True,
        )
        raise typer.Exit(ExitCode.UNAVAILABLE)
    return found


def _password() -> str:
    if sys.stdin.isatty():
        return typer.prompt("Password", hide_input=True)
    return sys.stdin.readline().rstrip("\r\n")  # piped: `printf '%s\n' "$PASSWORD" | mewdex login me@example.com`


def _may_send_password(target: Server, yes: bool) -> None:
    """Name the URL the password goes to; for a host that is not a loopback address warn about plain
    http and ask first (``--yes`` answers for scripts; without a terminal to ask, exit 1)."""
    err.print(f"signing in to {target.url}", soft_wrap=True)
    if is_loopback(target.url):
        return
    if urlsplit(target.url).scheme != "https":
        err.print(
            f"[yellow]warning:[/yellow] {target.url} is plain http to another machine: the password and the "
            "token cross the network unencrypted (use https)",
            soft_wrap=True,
        )
    if yes:
        return
    if not sys.stdin.isatty():
        err.print(
            f"[red]error:[/red] {target.url} is not this machine: pass --yes to send your password there",
            soft_wrap=True,
        )
        raise typer.Exit(ExitCode.USAGE)
    if not typer.confirm(f"Send your password to {target.url}?", default=False):
        raise typer.Exit(ExitCode.FAILED)


SERVER_OPTION = typer.Option(
    "--server",
    envvar="MEWDEX_SERVER",
    help="A mewdex server elsewhere (URL). Default: the `mewdex serve` running on this data dir.",
)


def login(
    email: Annotated[str | None, typer.Argument(help="Your account's email (asked when missing).")] = None,
    server: Annotated[str | None, SERVER_OPTION] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Send the password to a server elsewhere without asking.")
    ] = False,
) -> None:
    """Sign in to the running server and keep an API token for the commands run here (search, …), in
    your config dir, readable by you only. The password is asked (hidden), or read from standard input
    when that is not a terminal. It goes only to the server named with --server or to this data dir's
    proven `mewdex serve`; a server that is not on this machine is confirmed first (--yes)."""
    from mewdex import egress

    target = _target(server)
    with egress.operator_client(60) as client:
        try:
            me = client.get(target.url + "/api/v1/me")
        except egress.OperatorError as exc:
            err.print(f"[red]error:[/red] cannot reach {target.url}: {type(exc).__name__}")
            raise typer.Exit(ExitCode.UNAVAILABLE) from None
        if me.status_code == 200 and (me.json().get("auth") or {}).get("mode") == "none":
            console.print(f"{target.url} needs no login (single-user mode on this machine)")
            return
        email = (email or typer.prompt("Email")).strip()
        _may_send_password(target, yes)
        password = _password()
        signed_in = client.post(target.url + "/api/v1/auth/login", json={"email": email, "password": password})
        if signed_in.status_code != 200:
            code, message = _error(signed_in)
            err.print(f"[red]error:[/red] {code}: {message}", soft_wrap=True)
            raise typer.Exit(exit_for_status(signed_in.status_code))
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
        raise typer.Exit(exit_for_status(made.status_code))
    token = made.json()
    data = _load()
    data["servers"][target.key] = {
        "url": target.url,
        "origin": origin(target.url),
        "email": email,
        "token": token["token"],
        "token_id": token["id"],
    }
    path = _save(data)
    console.print(f"signed in to {target.url} as {email}; API token stored in {path}", soft_wrap=True)


def logout(server: Annotated[str | None, SERVER_OPTION] = None) -> None:
    """Revoke the API token `mewdex login` stored (when the server that issued it answers) and forget it
    here."""
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
    token = stored_token(target)  # only to the origin that issued it, and for this data dir only when proven
    if token:
        try:
            call(target, token, "DELETE", f"/api/v1/tokens/{entry['token_id']}")
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
