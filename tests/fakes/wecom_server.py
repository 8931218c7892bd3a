"""A fake WeCom (企业微信) server for tests, plus a sender of signed, encrypted callbacks.

:class:`FakeWeCom` is a real HTTP server (``fake.url`` stands in for ``https://qyapi.weixin.qq.com``;
tests allow its ``127.0.0.1:port`` with ``MEWDEX_EGRESS_ALLOW_HOSTS``) with:

* ``GET /cgi-bin/gettoken?corpid=&corpsecret=`` → ``{errcode:0, access_token, expires_in:7200}``;
  a wrong corp id or secret → 40001 ``invalid credential``;
* ``POST /cgi-bin/media/upload?access_token=&type=image|file`` (multipart ``media``) → ``media_id``;
  an image that is not JPG/PNG or is over 2 MB → 40005 / 40009 (as WeCom);
* ``POST /cgi-bin/message/send?access_token=`` → ``{errcode:0, msgid}``; an unknown ``media_id`` →
  40007, a ``touser`` not in ``fake.members`` → 81013.

* ``GET /cgi-bin/media/get?access_token=&media_id=`` → the bytes of a file a member sent
  (``fake.member_file(data)`` keeps one and returns its ``media_id``, what a callback's ``MediaId``
  names) or of an upload, with its image content type; an unknown ``media_id`` → 40007 (JSON).

A missing or unknown token → 40014; a token made stale with ``fake.expire_tokens()`` → 42001.
``fake.inject(errcode, errmsg, path="/cgi-bin/message/send", times=1)`` makes the next calls to
``path`` answer that error (e.g. 60020 "not allow to access from your ip"). Everything received is in
``fake.requests`` (``{"method", "path", "query", "body"}``); sends in ``fake.sent`` (the JSON bodies);
uploads in ``fake.uploads[media_id]`` (``{"type", "filename", "content_type", "data"}``).

:func:`verification_query` and :func:`message_callback` build what WeCom sends to the callback URL:
the signed ``GET ?msg_signature&timestamp&nonce&echostr`` and the encrypted, signed ``POST``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mewdex.channels.wecom.crypto import WXBizMsgCrypt, signature


class FakeWeCom:
    def __init__(self, corp_id: str = "wwfakecorp", secret: str = "fake-app-secret", members=("zhangsan",)):
        self.corp_id, self.secret = corp_id, secret
        self.members = set(members)
        self.requests: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.uploads: dict[str, dict[str, Any]] = {}
        self.member_files: dict[str, bytes] = {}
        self.tokens: dict[str, bool] = {}  # token -> still fresh
        self._injected: list[tuple[str, int, str]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, payload: dict[str, Any] | bytes, status: int = 200) -> None:
                raw = isinstance(payload, bytes)  # a file of media/get
                body = payload if raw else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", _image_type(body) if raw else "application/json; charset=UTF-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with fake._lock:
                    fake.requests.append({"method": method, "path": parts.path, "query": query, "body": body})
                self._answer(fake._route(method, parts.path, query, body, self.headers.get("content-type", "")))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def inject(self, errcode: int, errmsg: str, path: str = "/cgi-bin/message/send", times: int = 1) -> None:
        with self._lock:
            self._injected.extend([(path, errcode, errmsg)] * times)

    def expire_tokens(self) -> None:
        with self._lock:
            self.tokens = {t: False for t in self.tokens}

    def member_file(self, data: bytes) -> str:
        """Keep a file a member sent (as WeCom does, 3 days); returns its ``media_id``."""
        media_id = "2" + secrets.token_hex(20)
        with self._lock:
            self.member_files[media_id] = data
        return media_id

    def calls(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes, ctype: str) -> dict[str, Any] | bytes:
        with self._lock:
            for i, (ipath, errcode, errmsg) in enumerate(self._injected):
                if ipath == path:
                    del self._injected[i]
                    return {"errcode": errcode, "errmsg": errmsg}
        if path == "/cgi-bin/gettoken":
            if query.get("corpid") != self.corp_id or query.get("corpsecret") != self.secret:
                return {"errcode": 40001, "errmsg": "invalid credential"}
            token = secrets.token_hex(16)
            with self._lock:
                self.tokens[token] = True
            return {"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200}
        state = self.tokens.get(query.get("access_token", ""))
        if state is None:
            return {"errcode": 40014, "errmsg": "invalid access_token"}
        if state is False:
            return {"errcode": 42001, "errmsg": "access_token expired"}
        if path == "/cgi-bin/media/upload" and method == "POST":
            return self._upload(query.get("type", ""), body, ctype)
        if path == "/cgi-bin/message/send" and method == "POST":
            return self._send(json.loads(body or b"{}"))
        if path == "/cgi-bin/media/get" and method == "GET":
            media_id = query.get("media_id", "")
            with self._lock:
                data = self.member_files.get(media_id) or (self.uploads.get(media_id) or {}).get("data")
            return data if data is not None else {"errcode": 40007, "errmsg": "invalid media_id"}
        return {"errcode": 404, "errmsg": "unknown api"}

    def _upload(self, media_type: str, body: bytes, ctype: str) -> dict[str, Any]:
        boundary = ctype.split("boundary=", 1)[-1].encode()
        part = body.split(b"--" + boundary)[1]
        head, _, data = part.partition(b"\r\n\r\n")
        data = data[: -len(b"\r\n")] if data.endswith(b"\r\n") else data
        headers = head.decode(errors="replace")
        if 'name="media"' not in headers:
            return {"errcode": 41005, "errmsg": "media data missing"}
        filename = headers.split('filename="', 1)[-1].split('"', 1)[0]
        content_type = headers.split("Content-Type:", 1)[-1].strip().splitlines()[0].strip()
        if media_type == "image":
            if not (data.startswith(b"\x89PNG") or data.startswith(b"\xff\xd8\xff")):
                return {"errcode": 40005, "errmsg": "invalid file type"}
            if len(data) > 2 * 1024 * 1024:
                return {"errcode": 40009, "errmsg": "invalid image size"}
        media_id = "3" + secrets.token_hex(20)
        with self._lock:
            self.uploads[media_id] = {
                "type": media_type,
                "filename": filename,
                "content_type": content_type,
                "data": data,
            }
        return {
            "errcode": 0,
            "errmsg": "ok",
            "type": media_type,
            "media_id": media_id,
            "created_at": str(int(time.time())),
        }

    def _send(self, message: dict[str, Any]) -> dict[str, Any]:
        msgtype = message.get("msgtype")
        if msgtype in ("image", "file") and message.get(msgtype, {}).get("media_id") not in self.uploads:
            return {"errcode": 40007, "errmsg": "invalid media_id"}
        if message.get("touser") not in self.members:
            return {"errcode": 81013, "errmsg": "user & party & tag all invalid"}
        with self._lock:
            self.sent.append(message)
        return {"errcode": 0, "errmsg": "ok", "msgid": secrets.token_hex(8)}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeWeCom:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _image_type(data: bytes) -> str:
    for magic, media_type in ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif")):
        if data.startswith(magic):
            return media_type
    return "application/octet-stream"


def verification_query(crypt: WXBizMsgCrypt, echo: str | None = None) -> tuple[dict[str, str], str]:
    """The query of WeCom's callback URL check and the plaintext the server must answer."""
    echo = echo or str(secrets.randbelow(10**18))
    echostr = crypt.encrypt(echo)
    ts, nonce = str(int(time.time())), str(secrets.randbelow(10**9))
    return {"msg_signature": signature(crypt.token, ts, nonce, echostr), "timestamp": ts, "nonce": nonce,
            "echostr": echostr}, echo  # fmt: skip


def message_callback(
    crypt: WXBizMsgCrypt,
    from_user: str,
    content: str,
    *,
    msg_id: str | None = None,
    agent_id: int | str = 1000002,
    msg_type: str = "text",
    timestamp: int | None = None,
    pic_url: str | None = None,
    media_id: str | None = None,
) -> tuple[dict[str, str], bytes]:
    """The query and XML body of one encrypted, signed message callback (``msg_type`` ``text``, or
    ``image`` with ``pic_url`` and/or ``media_id`` (:meth:`FakeWeCom.member_file`); ``timestamp``:
    Unix seconds, by default now)."""
    ts, nonce = str(int(time.time()) if timestamp is None else timestamp), str(secrets.randbelow(10**9))
    msg_id = msg_id or str(secrets.randbelow(10**18))
    inner = (
        f"<xml><ToUserName><![CDATA[{crypt.receive_id}]]></ToUserName>"
        f"<FromUserName><![CDATA[{from_user}]]></FromUserName><CreateTime>{ts}</CreateTime>"
        f"<MsgType><![CDATA[{msg_type}]]></MsgType><Content><![CDATA[{content}]]></Content>"
        + (f"<PicUrl><![CDATA[{pic_url}]]></PicUrl>" if pic_url else "")
        + (f"<MediaId><![CDATA[{media_id}]]></MediaId>" if media_id else "")
        + f"<MsgId>{msg_id}</MsgId><AgentID>{agent_id}</AgentID></xml>"
    )
    encrypt = crypt.encrypt(inner)
    body = (
        f"<xml><ToUserName><![CDATA[{crypt.receive_id}]]></ToUserName><Encrypt><![CDATA[{encrypt}]]></Encrypt>"
        f"<AgentID><![CDATA[{agent_id}]]></AgentID></xml>"
    ).encode()
    return {"msg_signature": signature(crypt.token, ts, nonce, encrypt), "timestamp": ts, "nonce": nonce}, body
