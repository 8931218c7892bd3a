"""Issue 40, finding 4: a credential goes only where it was issued. The data dir defaults to ``./.mewdex``
of the folder a command runs in, which someone else may have written: a planted ``.mewdex/serve.json``
must receive no password (``mewdex login``), no stored token and no ``MEWDEX_TOKEN`` (``mewdex search``)
unless it is provably this data dir's own ``mewdex serve``. A stored token never goes to another origin
than the one that issued it; ``login`` asks before sending a password to another machine.

Real processes throughout: the ``mewdex`` CLI as a subprocess run in a temporary folder, and
tests/integration/planted_server.py — an HTTP server that records what it receives — as what the planted
record points at (copied to a file named ``mewdex``, its command line is ``mewdex serve``)."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import MEWDEX_BIN, wait_until

PASSWORD = "planted-password-must-not-leave"
ENV_TOKEN = "mdx_env_token_must_not_leave"
STORED_TOKEN = "mdx_stored_token_must_not_leave"
SCRIPT = Path(__file__).with_name("planted_server.py")
SECRETS = (PASSWORD, ENV_TOKEN, STORED_TOKEN)
OTHER_USERS_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lan_address() -> str | None:
    """An address of this machine that is not a loopback one (None when it has none)."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    return None


@dataclass
class Recorder:
    """A running planted_server.py: its URL (as the test names it), its pid and what it received."""

    url: str
    process: subprocess.Popen
    records: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def received(self) -> list[dict]:
        if not self.records.exists():
            return []
        return [json.loads(line) for line in self.records.read_text().splitlines() if line.strip()]


class Folder:
    """A folder with a planted ``.mewdex/serve.json``, the CLI run there (its default data dir), and
    the user's config dir with a token ``mewdex login`` stored for that data dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / ".mewdex"
        self.data_dir.mkdir()
        self.record = self.data_dir / "serve.json"
        self.config = root / "config"
        self.recorders: list[Recorder] = []
        self.scratch = Path(tempfile.mkdtemp(prefix="mewdex-planted-"))
        self.scratch.chmod(0o777)  # a recorder run as another user writes its records here
        self.impostor = self.scratch / "mewdex"
        shutil.copyfile(SCRIPT, self.impostor)
        self.impostor.chmod(0o755)

    def start(
        self,
        *,
        impostor: bool,
        host: str = "127.0.0.1",
        url_host: str | None = None,
        hold: bool | Path = False,
        user: int | None = None,
        search_answer: dict | None = None,
    ) -> Recorder:
        """Start a recorder on ``host`` (a free port); ``impostor``: its command line is ``mewdex serve``;
        ``hold``: it keeps the planted record open, as ``mewdex serve`` does (a path: that file instead);
        ``user``: run as that uid."""
        port = _free_port()
        name = f"r{len(self.recorders)}"
        records, ready = self.scratch / f"{name}.jsonl", self.scratch / f"{name}.ready"
        records.touch(mode=0o666)
        records.chmod(0o666)
        program = self.impostor if impostor else SCRIPT
        python = sys.executable if user is None else OTHER_USERS_PYTHON  # the venv may be closed to others
        command = [python, str(program), "serve", "--host", host, "--port", str(port)]
        command += ["--records", str(records), "--ready", str(ready)]
        if hold:
            held = self.record if hold is True else hold
            held.touch()  # filled in place by plant()
            command += ["--hold", str(held)]
        if search_answer is not None:
            command += ["--search-answer", json.dumps(search_answer)]
        extra = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
        process = subprocess.Popen(command, cwd=self.scratch, **extra)  # noqa: S603
        recorder = Recorder(f"http://{url_host or host}:{port}", process, records)
        self.recorders.append(recorder)
        wait_until(lambda: ready.exists() or process.poll() is not None, 20, 0.05, "the recorder to listen")
        assert process.poll() is None, "the recorder exited"
        return recorder

    def plant(self, url: str, pid: int) -> None:
        """Write the record in place (a recorder that holds it keeps holding the same file)."""
        with self.record.open("w") as out:
            json.dump({"url": url, "pid": pid}, out)

    def store_token(self, url: str) -> Path:
        """A token ``mewdex login`` stored for this folder's data dir, issued by ``url`` (``http://host:port``:
        its own origin)."""
        path = self.config / "mewdex" / "credentials.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {
            "url": url,
            "origin": url,
            "email": "me@example.com",
            "token": STORED_TOKEN,
            "token_id": "00000000-0000-4000-8000-000000000001",
        }
        path.write_text(json.dumps({"servers": {f"data-dir:{self.data_dir.resolve()}": entry}}))
        path.chmod(0o600)
        return path

    def cli(
        self, *args: str, stdin: str | None = None, timeout: float = 120, **extra: str
    ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEWDEX_")}
        env.update(
            XDG_CONFIG_HOME=str(self.config),
            # When no server is trusted, search opens the database itself: none answers here, so it
            # stops at once (what matters is what reached the recorders before that).
            MEWDEX_DATABASE_URL="postgresql+psycopg://nobody:nothing@127.0.0.1:9/none?connect_timeout=2",
            NO_COLOR="1",
            COLUMNS="250",
        )
        env.update(extra)
        return subprocess.run(  # noqa: S603
            [str(MEWDEX_BIN), *args],
            cwd=self.root,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def close(self) -> None:
        for recorder in self.recorders:
            recorder.process.terminate()
            recorder.process.wait(10)
        shutil.rmtree(self.scratch, ignore_errors=True)


@pytest.fixture
def folder(tmp_path):
    made = Folder(tmp_path)
    try:
        yield made
    finally:
        made.close()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])  # noqa: S603
    process.wait()
    return process.pid


def _attempt_everything(folder: Folder, why: str) -> None:
    """``mewdex login`` (password on stdin) and ``mewdex search`` (a stored token and MEWDEX_TOKEN) run
    in the folder: each says it ignores the record and why; no recorder receives anything."""
    login = folder.cli("login", "me@example.com", stdin=PASSWORD + "\n")
    assert login.returncode == 5, login.stdout + login.stderr  # unavailable: no server to sign in to
    flat = " ".join(login.stderr.split())
    assert f"ignoring {folder.record}" in flat and why in flat and "nothing is sent" in flat, login.stderr
    assert "no mewdex server runs on this data dir" in flat
    search = folder.cli("search", "anything", MEWDEX_TOKEN=ENV_TOKEN)
    assert why in " ".join(search.stderr.split()), search.stderr
    assert "Traceback" not in login.stderr
    for recorder in folder.recorders:
        received = recorder.received()
        assert not any(secret in json.dumps(r) for r in received for secret in SECRETS), received
        assert received == [], received


def test_a_record_with_pid_0_receives_nothing(folder):
    recorder = folder.start(impostor=True, hold=True)
    folder.plant(recorder.url, 0)
    folder.store_token(recorder.url)
    _attempt_everything(folder, "pid 0 is no process")


def test_a_record_with_a_dead_pid_receives_nothing(folder):
    recorder = folder.start(impostor=True, hold=True)
    pid = _dead_pid()
    folder.plant(recorder.url, pid)
    folder.store_token(recorder.url)
    _attempt_everything(folder, f"process {pid} is not running")


def test_a_record_with_a_live_pid_that_is_not_mewdex_serve_receives_nothing(folder):
    """The pid is this test's own: alive, this user's, but neither `mewdex serve` nor listening there."""
    recorder = folder.start(impostor=False)
    folder.plant(recorder.url, os.getpid())
    folder.store_token(recorder.url)
    _attempt_everything(folder, f"process {os.getpid()} is not `mewdex serve`")


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user needs root")
@pytest.mark.skipif(not os.access(OTHER_USERS_PYTHON, os.X_OK), reason="no system python3 for another user")
def test_a_record_of_another_users_process_receives_nothing(folder):
    recorder = folder.start(impostor=True, user=65534)  # nobody: `mewdex serve` listening on the URL
    folder.plant(recorder.url, recorder.pid)
    folder.store_token(recorder.url)
    _attempt_everything(folder, f"process {recorder.pid} belongs to another user")


def test_a_record_whose_process_does_not_listen_on_its_url_receives_nothing(folder):
    """A real-looking `mewdex serve` of this user holding the record, but the URL is another listener's."""
    impostor = folder.start(impostor=True, hold=True)
    elsewhere = folder.start(impostor=False)
    folder.plant(elsewhere.url, impostor.pid)
    folder.store_token(elsewhere.url)
    _attempt_everything(folder, f"process {impostor.pid} does not listen on {elsewhere.url}")


def test_a_record_of_a_mewdex_serve_of_another_data_dir_receives_nothing(folder):
    """`mewdex serve` of this user, listening on the URL, but not holding this data dir's record."""
    impostor = folder.start(impostor=True, hold=False)
    folder.plant(impostor.url, impostor.pid)
    folder.store_token(impostor.url)
    _attempt_everything(folder, f"process {impostor.pid} does not serve this data dir")


def test_a_record_with_a_url_that_is_not_loopback_receives_nothing(folder):
    lan = _lan_address()
    if lan is None:
        pytest.skip("this machine has no address but loopback")
    impostor = folder.start(impostor=True, host="0.0.0.0", url_host=lan, hold=True)  # noqa: S104
    folder.plant(impostor.url, impostor.pid)
    folder.store_token(impostor.url)
    _attempt_everything(folder, f"{impostor.url} is not a loopback address")


def test_a_stored_token_goes_only_to_the_origin_that_issued_it(folder):
    """The proven local server (everything the proof asks for) gets MEWDEX_TOKEN and the token stored for
    its own origin; a token stored for origin A is not sent to it at origin B."""
    server = folder.start(impostor=True, hold=True)
    folder.plant(server.url, server.pid)
    issued_elsewhere = f"http://127.0.0.1:{_free_port()}"
    folder.store_token(issued_elsewhere)

    def authorizations() -> list[str | None]:
        return [r["headers"].get("Authorization") for r in server.received() if r["path"] == "/api/v1/search"]

    plain = folder.cli("search", "anything")
    assert plain.returncode == 0, plain.stderr
    assert authorizations() == [None]
    assert STORED_TOKEN not in json.dumps(server.received())

    with_env = folder.cli("search", "anything", MEWDEX_TOKEN=ENV_TOKEN)
    assert with_env.returncode == 0, with_env.stderr
    assert authorizations() == [None, f"Bearer {ENV_TOKEN}"]

    folder.store_token(server.url)
    same_origin = folder.cli("search", "anything")
    assert same_origin.returncode == 0, same_origin.stderr
    assert authorizations() == [None, f"Bearer {ENV_TOKEN}", f"Bearer {STORED_TOKEN}"]


def test_login_names_the_url_and_asks_before_sending_a_password_to_another_machine(folder):
    lan = _lan_address()
    if lan is None:
        pytest.skip("this machine has no address but loopback")
    remote = folder.start(impostor=False, host="0.0.0.0", url_host=lan)  # noqa: S104
    refused = folder.cli("login", "me@example.com", "--server", remote.url, stdin=PASSWORD + "\n")
    assert refused.returncode == 2  # usage: --yes is needed for another machine
    flat = " ".join(refused.stderr.split())
    assert f"signing in to {remote.url}" in flat and "plain http" in flat and "pass --yes" in flat, refused.stderr
    assert PASSWORD not in json.dumps(remote.received())
    assert [r["path"] for r in remote.received()] == ["/api/v1/me"]  # asks whether it needs a login: no secret

    agreed = folder.cli("login", "me@example.com", "--server", remote.url, "--yes", stdin=PASSWORD + "\n")
    assert agreed.returncode == 0, agreed.stderr
    assert any(PASSWORD in r["body"] for r in remote.received())
    stored = json.loads((folder.config / "mewdex" / "credentials.json").read_text())["servers"][remote.url]
    assert stored["origin"] == remote.url and stored["token"] == "mdx_planted_token"


def test_a_symlinked_record_of_another_data_dirs_mewdex_serve_receives_nothing(folder):
    """A `mewdex serve` of this user that holds ANOTHER data dir's record, which this data dir's
    ``serve.json`` links to: the link resolves to a held record, but it is not this data dir's."""
    other = folder.scratch / "other-data-dir"
    other.mkdir()
    impostor = folder.start(impostor=True, hold=other / "serve.json")
    with (other / "serve.json").open("w") as out:
        json.dump({"url": impostor.url, "pid": impostor.pid}, out)
    folder.record.symlink_to(other / "serve.json")
    folder.store_token(impostor.url)
    _attempt_everything(folder, "it is not a record `mewdex serve` wrote")


def test_a_record_that_is_a_fifo_does_not_hang_the_cli(folder):
    """A ``serve.json`` that is a named pipe (an unpacked archive can hold one) is no record: the CLI
    does not wait for a writer that never comes."""
    os.mkfifo(folder.record)
    login = folder.cli("login", "me@example.com", stdin=PASSWORD + "\n", timeout=30)
    assert login.returncode == 5, login.stdout + login.stderr
    flat = " ".join(login.stderr.split())
    assert "it is not a record `mewdex serve` wrote" in flat and "no mewdex server runs" in flat, login.stderr
