"""Helpers of the channel tests: an account with a library of real memes (blobs + keyword index),
and a fake Telegram with mewdex pointed at it."""

from __future__ import annotations

import hashlib
import io
import json
import random
import uuid
from dataclasses import dataclass, field

import pytest
from PIL import Image
from sqlalchemy import text

from conftest import drain_queue, new_scope
from fakes.telegram_server import FakeTelegram


@dataclass
class Account:
    scope: object
    user_id: uuid.UUID
    memes: dict[str, str] = field(default_factory=dict)  # name -> meme id


def image_bytes(kind: str = "png", seed: int | None = None) -> bytes:
    rng = random.Random(seed)
    color = tuple(rng.randrange(256) for _ in range(3))
    out = io.BytesIO()
    if kind == "gif":
        frames = [Image.new("RGB", (24, 24), color), Image.new("RGB", (24, 24), tuple(255 - c for c in color))]
        frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    else:
        Image.new("RGB", (32, 32), color).save(out, kind.upper() if kind != "jpg" else "JPEG")
    return out.getvalue()


def add_meme(sessions, store, scope, name: str, kind: str = "png", data: bytes | None = None) -> str:
    """A real meme: its blob in the store and a keyword-indexed name (found by search); ``data``: its
    file (of extension ``kind``: a clip, a sticker), else a small picture made here."""
    from mewdex.db.models import Meme
    from mewdex.db.scopes import storage_namespace
    from mewdex.search import keyword

    data = data if data is not None else image_bytes(kind, seed=hash((scope.scope_id, name)))
    sha = hashlib.sha256(data).hexdigest()
    ext = f".{kind}"
    with sessions.begin() as session:
        namespace = storage_namespace(session, scope.scope_id)
    store.put(namespace, sha + ext, data)
    with sessions.begin() as session:
        meme = Meme(
            scope_id=scope.scope_id,
            storage_key=sha + ext,
            display_name=name,
            name_source="uploaded",
            extension=ext,
            size_bytes=len(data),
            sha256=sha,
            provenance={},
            extensions={"image": {"animated": kind in ("gif", "mp4", "webm", "tgs")}},
        )
        session.add(meme)
        session.flush()
        keyword.index_document(
            session, scope.scope_id, meme.id, "h", {"name": name, "ocr": "", "labels": "", "phrase": ""}
        )
        return str(meme.id)


def _account(sessions, store):
    from mewdex.db.models import User

    scope = new_scope(sessions, "t-ch")
    with sessions.begin() as session:
        user = User(email=f"{uuid.uuid4().hex[:10]}@example.com", scope_id=scope.scope_id)
        session.add(user)
        session.flush()
        user_id = user.user_id
    acct = Account(scope, user_id)
    for name in ("cat one", "cat two", "cat three"):
        acct.memes[name] = add_meme(sessions, store, scope, name)
    acct.memes["dancing cat"] = add_meme(sessions, store, scope, "dancing cat gif", "gif")
    acct.memes["slacking off"] = add_meme(sessions, store, scope, "slacking off at work")
    yield acct
    with sessions.begin() as session:
        session.execute(text("DELETE FROM users WHERE user_id = :u"), {"u": user_id})
        session.execute(text("DELETE FROM scopes WHERE id = :s"), {"s": scope.scope_id})


@pytest.fixture
def account(sessions, store):
    """A user with a personal scope and memes: three cats (png) and a dancing cat (gif), "slacking off"."""
    yield from _account(sessions, store)


@pytest.fixture
def other_account(sessions, store):
    """A second account like :func:`account` (another tenant)."""
    yield from _account(sessions, store)


#: Seconds between two sends to one chat while a test runs (the adapters' own 0.5–1 s made the channel
#: tests sleep most of their time); the pacing itself is checked at the adapters' real intervals by the
#: tests marked ``real_pacing`` and by
#: ``test_channels_telegram.py::test_sends_to_one_chat_are_paced_by_the_adapters_interval``.
TEST_SEND_INTERVAL = 0.05


@pytest.fixture
def quick_pacing(request, monkeypatch):
    """Every channel adapter paces its sends to one chat :data:`TEST_SEND_INTERVAL` apart (still through
    ``delivery.reserve_slot``) for this test; the module's ``pytestmark`` asks for it. A test marked
    ``real_pacing`` keeps the adapters' own intervals."""
    from mewdex.channels import registry

    if request.node.get_closest_marker("real_pacing") is not None:
        return
    registry.load()
    for adapter in registry.ADAPTERS.values():
        if adapter.min_send_interval > 0:
            monkeypatch.setattr(adapter, "min_send_interval", TEST_SEND_INTERVAL)


@pytest.fixture
def telegram(settings_env):
    """A fake Telegram (a bot of its own: a new token each test) that mewdex talks to."""
    token = f"{random.randrange(10**8, 10**9)}:AAFake{uuid.uuid4().hex}"
    with FakeTelegram(token=token) as fake:
        settings_env(
            MEWDEX_TELEGRAM_BOT_TOKEN=fake.token,
            MEWDEX_TELEGRAM_API_URL=fake.url,
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([f"127.0.0.1:{fake.port}"]),
        )
        yield fake


def bind_telegram(sessions, account, uid: int) -> None:
    """Link Telegram user ``uid``'s private chat to ``account`` (as a confirmed deep link does)."""
    from mewdex.channels import bindings

    with sessions.begin() as session:
        bindings.bind(
            session,
            scope_id=account.scope.scope_id,
            user_id=account.user_id,
            channel="telegram",
            identity=str(uid),
            config={"chat_id": str(uid)},
        )


def new_user_id() -> int:
    return random.randrange(10**9, 10**10)


def drain(sessions) -> int:
    return drain_queue(sessions, timeout=120)


def saved_memes(sessions, account) -> dict[str, str]:
    """``{sha256: display name}`` of the account's memes (what saving from a chat added)."""
    from sqlalchemy import select

    from mewdex.db.models import Meme

    with sessions.begin() as session:
        rows = session.execute(select(Meme.sha256, Meme.display_name).where(Meme.scope_id == account.scope.scope_id))
        return dict(rows.all())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class MediaServer:
    """A local HTTP server of files, as a chat platform's media URLs are (``url(data)`` serves
    ``data`` as ``image/png`` at a path of its own)."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        files = self.files = {}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = files.get(self.path)
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, data: bytes) -> str:
        path = f"/media/{sha256(data)}.png"
        self.files[path] = data
        return f"http://{self.host}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def media_server():
    server = MediaServer()
    yield server
    server.close()


def add_captioned_meme(sessions, store, account, word: str = "HELLO") -> str:
    """A meme with ``word`` drawn in black on white and its OCR line stored (as the context stage
    keeps it), so a re-caption erases and redraws there without running the OCR."""
    from PIL import ImageDraw, ImageFont

    from mewdex.db.models import Meme

    image = Image.new("RGB", (200, 80), (255, 255, 255))
    ImageDraw.Draw(image).text((100, 40), word, font=ImageFont.load_default(size=28), fill=(0, 0, 0), anchor="mm")
    out = io.BytesIO()
    image.save(out, "PNG")
    meme_id = add_meme(sessions, store, account.scope, f"captioned {word.lower()}", "png", out.getvalue())
    box = [[50, 22], [150, 22], [150, 58], [50, 58]]
    with sessions.begin() as session:
        session.get(Meme, uuid.UUID(meme_id)).meme_context = {"ocr_lines": [{"text": word, "box": box}]}
    return meme_id
