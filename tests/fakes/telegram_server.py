"""A fake Telegram Bot API server for tests: a real HTTP server in the test process that speaks the
Bot API's wire protocol (python-telegram-bot drives it in a test to prove that).

Bot side (what mewdex calls): ``POST|GET /bot<token>/<method>`` with a JSON, form-urlencoded or
multipart body; answers ``{"ok": true, "result"}`` or ``{"ok": false, "error_code", "description",
"parameters": {"retry_after"}}``. A wrong token gets 401. Methods: ``getMe``, ``getUpdates``
(``offset`` confirms earlier updates, ``timeout`` long-polls; 409 while a webhook is set),
``setWebhook`` / ``deleteWebhook`` / ``getWebhookInfo``, ``sendMessage``, ``sendPhoto``,
``sendAnimation``, ``sendSticker`` (no caption; an upload gets a new deterministic ``file_id``; a
known ``file_id`` is reused, an unknown one is 400), ``getFile`` + ``GET /file/bot<token>/<path>``,
``answerInlineQuery`` (≤ 50 results, cached results must name known file ids), ``deleteMessage``;
sticker sets: ``getStickerSet`` (400 ``STICKERSET_INVALID`` for an unknown name), ``uploadStickerFile``
(checks the format: a static sticker is PNG/WebP with a 512-px side and none longer, a video one
WebM, an animated one TGS), ``createNewStickerSet`` / ``addStickerToSet`` (the name ends with
``_by_<bot username>``, is free, 1–50 stickers of uploaded files in their format; the sets are in
``fake.sticker_sets``).

User side (what a test does): :meth:`FakeTelegram.user_message` / :meth:`inline_query` make an
update; it is pushed to the webhook (with ``X-Telegram-Bot-Api-Secret-Token``) when one is set,
else kept for ``getUpdates``. :meth:`fail_next` scripts an error for the next call of a method
(e.g. 429 with ``retry_after``); ``blocked`` chats answer 403. :meth:`FakeTelegram.add_sticker_set`
publishes a set (as another bot made it) for ``getStickerSet``.

Everything the bot sent is in ``fake.sent`` (``{"method", "chat_id", "text"|"caption", "file_id",
"uploaded", "filename" (an upload's), "at"}``), inline answers in ``fake.inline_answers``, every call in ``fake.calls``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import threading
import time
import urllib.request
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

TOKEN = "123456789:AAFakeTokenForMewdexTests_abcdefghijk"
BOT_USERNAME = "mewdex_test_bot"


class FakeTelegram:
    def __init__(self, token: str = TOKEN, username: str = BOT_USERNAME):
        self.token, self.username = token, username
        self.bot_id = int(token.split(":")[0])
        self.lock = threading.Condition()
        self.updates: list[dict[str, Any]] = []
        self.next_update_id = 1000
        self.next_message_id = 1
        self.files: dict[str, bytes] = {}
        self.answered_callbacks: list[str] = []
        self.sent: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.inline_answers: list[dict[str, Any]] = []
        self.failures: dict[str, list[dict[str, Any]]] = {}
        self.blocked: set[str] = set()
        self.webhook: dict[str, Any] | None = None
        self.pushes: list[int] = []
        self.sticker_sets: dict[str, dict[str, Any]] = {}
        self.sticker_uploads: dict[str, str] = {}  # file_id → sticker_format
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._handle(b"")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                self._handle(self.rfile.read(length) if length else b"")

            def _handle(self, body: bytes):
                status, payload, content_type = fake.route(self.command, self.path, dict(self.headers), body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        with self.lock:
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeTelegram:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- the user's side

    def fail_next(self, method: str, error_code: int = 429, description: str | None = None, **parameters) -> None:
        """The next call of ``method`` answers this error (``retry_after=`` for a 429)."""
        description = description or {429: f"Too Many Requests: retry after {parameters.get('retry_after')}"}.get(
            error_code, "Bad Request"
        )
        self.failures.setdefault(method, []).append(
            {"error_code": error_code, "description": description, "parameters": parameters or None}
        )

    def _add_update(self, update: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            update["update_id"] = self.next_update_id
            self.next_update_id += 1
            webhook = self.webhook
            if webhook is None:
                self.updates.append(update)
                self.lock.notify_all()
        if webhook is not None:
            self._push(webhook, update)
        return update

    def _push(self, webhook: dict[str, Any], update: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json"}
        if webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = webhook["secret_token"]
        request = urllib.request.Request(
            webhook["url"], data=json.dumps(update).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                self.pushes.append(response.status)
        except urllib.error.HTTPError as exc:
            self.pushes.append(exc.code)

    def user_message(
        self,
        user_id: int,
        text: str | None = None,
        *,
        chat_id: int | None = None,
        chat_type: str = "private",
        photo: bytes | None = None,
        reply_to_bot: bool = False,
        reply_to: dict[str, Any] | None = None,
        sticker: bytes | None = None,
        first_name: str = "Tester",
    ) -> dict[str, Any]:
        """A message from ``user_id`` (in its private chat, or in group ``chat_id``); ``reply_to``: the
        ``Message`` it replies to (``reply_to_message``); ``sticker``: a static sticker's WebP bytes."""
        message: dict[str, Any] = {
            "message_id": self._message_id(),
            "date": int(time.time()),
            "from": {"id": user_id, "is_bot": False, "first_name": first_name},
            "chat": {"id": chat_id if chat_id is not None else user_id, "type": chat_type},
        }
        if chat_type == "private":
            message["chat"]["first_name"] = first_name
        else:
            message["chat"]["title"] = "A group"
        if text is not None:
            message["caption" if photo is not None or sticker is not None else "text"] = text
            if text.startswith("/"):
                command = text.split(" ", 1)[0]
                message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        if photo is not None:
            file_id = self._store(photo, "photo")
            message["photo"] = [{"file_id": file_id, "file_unique_id": file_id[-12:], "width": 64, "height": 64}]
        if sticker is not None:
            file_id = self._store(sticker, "sticker")
            message["sticker"] = {"file_id": file_id, "file_unique_id": file_id[-12:], "width": 64, "height": 64,
                                  "is_animated": False, "is_video": False, "type": "regular"}  # fmt: skip
        if reply_to is not None:
            message["reply_to_message"] = reply_to
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1,
                "date": int(time.time()),
                "from": {"id": self.bot_id, "is_bot": True, "first_name": "mewdex", "username": self.username},
                "chat": message["chat"],
            }
        return self._add_update({"message": message})

    def press(self, user_id: int, sent: dict[str, Any], data: str) -> dict[str, Any]:
        """``user_id`` presses the inline-keyboard button with ``callback_data`` ``data`` under the bot's
        message ``sent`` (an entry of :attr:`sent`)."""
        chat_id = int(sent["chat_id"])
        message = {"message_id": sent.get("message_id", 0), "date": int(time.time()),
                   "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"}}  # fmt: skip
        query = {"id": f"cq{self.next_update_id}", "from": {"id": user_id, "is_bot": False, "first_name": "Tester"},
                 "chat_instance": "1", "message": message, "data": data}  # fmt: skip
        return self._add_update({"callback_query": query})

    def inline_query(self, user_id: int, query: str, offset: str = "", language_code: str = "en") -> dict[str, Any]:
        return self._add_update(
            {
                "inline_query": {
                    "id": f"iq{self.next_update_id}",
                    "from": {"id": user_id, "is_bot": False, "first_name": "Tester", "language_code": language_code},
                    "query": query,
                    "offset": offset,
                }
            }
        )

    def add_sticker_set(self, name: str, title: str, stickers: list[tuple[bytes, str]]) -> dict[str, Any]:
        """Publish the set ``name`` of ``(file bytes, format)`` stickers (format ``static``, ``video``
        or ``animated``); its ``StickerSet``."""
        items = [self._sticker(self._store(data, "sticker"), fmt, name) for data, fmt in stickers]
        self.sticker_sets[name] = {"name": name, "title": title, "sticker_type": "regular", "stickers": items}
        return self.sticker_sets[name]

    def _sticker(self, file_id: str, fmt: str, set_name: str, emoji: str = "🙂") -> dict[str, Any]:
        return {"file_id": file_id, "file_unique_id": file_id[-12:], "type": "regular", "width": 512,
                "height": 512, "is_animated": fmt == "animated", "is_video": fmt == "video", "emoji": emoji,
                "set_name": set_name, "file_size": len(self.files[file_id])}  # fmt: skip

    def sent_to(self, chat_id: int | str) -> list[dict[str, Any]]:
        return [m for m in self.sent if str(m["chat_id"]) == str(chat_id)]

    # ---------------------------------------------------------------- the bot's side

    def _message_id(self) -> int:
        with self.lock:
            self.next_message_id += 1
            return self.next_message_id

    def _store(self, data: bytes, kind: str) -> str:
        file_id = f"{'CgAC' if kind == 'animation' else 'AgAC'}{hashlib.sha256(data).hexdigest()[:40]}_{kind}"
        self.files[file_id] = data
        return file_id

    @staticmethod
    def _parse(headers: dict[str, str], body: bytes, query: str) -> tuple[dict[str, Any], dict[str, bytes]]:
        params: dict[str, Any] = dict(parse_qsl(query))
        files: dict[str, bytes] = {}
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if content_type.startswith("application/json") and body:
            params.update(json.loads(body))
        elif content_type.startswith("application/x-www-form-urlencoded"):
            params.update(dict(parse_qsl(body.decode())))
        elif content_type.startswith("multipart/form-data"):
            message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition")
                data = part.get_payload(decode=True) or b""
                if part.get_filename() is not None:
                    files[name] = data
                    params.setdefault("_filenames", {})[name] = part.get_filename()
                else:
                    params[name] = data.decode()
        for key, value in list(params.items()):  # form values of complex types are JSON
            if isinstance(value, str) and value[:1] in "[{":
                try:
                    params[key] = json.loads(value)
                except ValueError:
                    pass
        return params, files

    @staticmethod
    def _json(status: int, obj: Any) -> tuple[int, bytes, str]:
        return status, json.dumps(obj).encode(), "application/json"

    def _error(self, code: int, description: str, parameters: dict | None = None) -> tuple[int, bytes, str]:
        body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
        if parameters:
            body["parameters"] = parameters
        return self._json(code, body)

    def route(self, method_name: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        parts = urlsplit(path)
        if parts.path.startswith("/file/bot"):
            token, _, file_path = parts.path[len("/file/bot") :].partition("/")
            if token != self.token or file_path not in self.files:
                return 404, b"Not Found", "text/plain"
            return 200, self.files[file_path], "application/octet-stream"
        if not parts.path.startswith("/bot"):
            return 404, b"Not Found", "text/plain"
        token, _, method = parts.path[4:].partition("/")
        if token != self.token:
            return self._error(401, "Unauthorized")
        params, files = self._parse(headers, body, parts.query)
        self.calls.append({"method": method, "params": params, "files": sorted(files), "at": time.monotonic()})
        scripted = self.failures.get(method)
        if scripted:
            failure = scripted.pop(0)
            return self._error(failure["error_code"], failure["description"], failure["parameters"])
        handler = getattr(self, f"m_{method}", None)
        if handler is None:
            return self._error(404, "Not Found: method not found")
        try:
            return self._json(200, {"ok": True, "result": handler(params, files)})
        except ApiError as exc:
            return self._error(exc.code, exc.description)

    # ---------------------------------------------------------------- methods

    def m_getMe(self, params, files):
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "mewdex",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": True,
        }

    def m_getUpdates(self, params, files):
        if self.webhook is not None:
            raise ApiError(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook")
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self.lock:
            if offset:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates and time.monotonic() < deadline:
                self.lock.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            return list(self.updates[:100])

    def m_setWebhook(self, params, files):
        self.webhook = {"url": params["url"], "secret_token": params.get("secret_token")}
        return True

    def m_deleteWebhook(self, params, files):
        self.webhook = None
        return True

    def m_getWebhookInfo(self, params, files):
        return {"url": (self.webhook or {}).get("url", ""), "has_custom_certificate": False, "pending_update_count": 0}

    def _check_chat(self, params) -> str:
        chat_id = str(params.get("chat_id"))
        if chat_id in self.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        return chat_id

    def _message(self, chat_id: str, **fields) -> dict[str, Any]:
        chat = {"id": int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id, "type": "private"}
        return {
            "message_id": self._message_id(),
            "date": int(time.time()),
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "mewdex", "username": self.username},
            "chat": chat,
            **fields,
        }

    @staticmethod
    def _markup(params) -> dict[str, Any] | None:
        """A send's ``reply_markup`` (JSON in a form, an object in a JSON body), or None."""
        markup = params.get("reply_markup")
        return json.loads(markup) if isinstance(markup, str) else markup

    def m_sendMessage(self, params, files):
        chat_id = self._check_chat(params)
        if not str(params.get("text") or "").strip():
            raise ApiError(400, "Bad Request: message text is empty")
        self.sent.append({"method": "sendMessage", "chat_id": chat_id, "text": params["text"], "at": time.monotonic(),
                          "reply_markup": self._markup(params)})  # fmt: skip
        return self._message(chat_id, text=params["text"])

    def _media(self, kind: str, params, files) -> tuple[str, bool]:
        if kind in files:
            return self._store(files[kind], kind), True
        ref = params.get(kind)
        if not isinstance(ref, str) or ref not in self.files:
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        return ref, False

    def _send_media(self, kind: str, params, files):
        chat_id = self._check_chat(params)
        file_id, uploaded = self._media(kind, params, files)
        entry = {
            "method": {"photo": "sendPhoto", "sticker": "sendSticker"}.get(kind, "sendAnimation"),
            "chat_id": chat_id,
            "caption": params.get("caption"),
            "file_id": file_id,
            "uploaded": uploaded,
            "filename": (params.get("_filenames") or {}).get(kind),
            "at": time.monotonic(),
            "reply_markup": self._markup(params),
        }
        self.sent.append(entry)
        message = self._media_message(kind, chat_id, file_id, params)
        entry["message_id"], entry["message"] = message["message_id"], message
        return message

    def _media_message(self, kind: str, chat_id: str, file_id: str, params) -> dict[str, Any]:
        extra: dict[str, Any] = {"caption": params["caption"]} if params.get("caption") else {}
        if kind == "photo":
            sizes = [
                {"file_id": f"{file_id}", "file_unique_id": file_id[-12:], "width": 320, "height": 320},
            ]
            return self._message(chat_id, photo=sizes, **extra)
        if kind == "sticker":  # a sticker message has no caption
            sticker = {"file_id": file_id, "file_unique_id": file_id[-12:], "width": 512, "height": 512,
                       "is_animated": False, "is_video": True, "type": "regular"}  # fmt: skip
            return self._message(chat_id, sticker=sticker)
        animation = {
            "file_id": file_id,
            "file_unique_id": file_id[-12:],
            "width": 64,
            "height": 64,
            "duration": 1,
            "mime_type": "image/gif",
        }
        return self._message(chat_id, animation=animation, document=animation, **extra)

    def m_sendPhoto(self, params, files):
        return self._send_media("photo", params, files)

    def m_sendAnimation(self, params, files):
        return self._send_media("animation", params, files)

    def m_sendSticker(self, params, files):
        if params.get("caption"):
            raise ApiError(400, "Bad Request: stickers take no caption")
        return self._send_media("sticker", params, files)

    def m_getFile(self, params, files):
        file_id = params.get("file_id")
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": file_id[-12:],
            "file_size": len(self.files[file_id]),
            "file_path": file_id,
        }

    def m_answerInlineQuery(self, params, files):
        results = params.get("results") or []
        if len(results) > 50:
            raise ApiError(400, "Bad Request: RESULTS_TOO_MUCH")
        ids = [r.get("id") for r in results]
        if len(set(ids)) != len(ids) or any(not i or len(str(i)) > 64 for i in ids):
            raise ApiError(400, "Bad Request: RESULT_ID_INVALID")
        for r in results:
            ref = r.get("photo_file_id") or r.get("gif_file_id")
            if ref is not None and ref not in self.files:
                raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        self.inline_answers.append(params)
        return True

    def m_answerCallbackQuery(self, params, files):
        if not str(params.get("callback_query_id") or ""):
            raise ApiError(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        self.answered_callbacks.append(str(params["callback_query_id"]))
        return True

    def m_deleteMessage(self, params, files):
        return True

    # ---------------------------------------------------------------- sticker sets

    def m_getStickerSet(self, params, files):
        found = self.sticker_sets.get(str(params.get("name") or ""))
        if found is None:
            raise ApiError(400, "Bad Request: STICKERSET_INVALID")
        return found

    @staticmethod
    def _check_sticker_file(data: bytes, fmt: str) -> None:
        from PIL import Image

        if fmt == "animated":
            try:
                json.loads(gzip.decompress(data))
            except (OSError, ValueError):
                raise ApiError(400, "Bad Request: STICKER_TGS_NOTGS") from None
        elif fmt == "video":
            if not data.startswith(b"\x1a\x45\xdf\xa3"):
                raise ApiError(400, "Bad Request: STICKER_VIDEO_NOWEBM")
        elif fmt == "static":
            try:
                image = Image.open(io.BytesIO(data))
                image.load()
            except OSError:
                raise ApiError(400, "Bad Request: STICKER_PNG_NOPNG") from None
            if image.format not in ("PNG", "WEBP"):
                raise ApiError(400, "Bad Request: STICKER_PNG_NOPNG")
            if max(image.size) != 512 or len(data) > 512 * 1024:
                raise ApiError(400, "Bad Request: STICKER_PNG_DIMENSIONS")
        else:
            raise ApiError(400, "Bad Request: wrong sticker_format specified")

    def m_uploadStickerFile(self, params, files):
        if not str(params.get("user_id") or "").isdigit():
            raise ApiError(400, "Bad Request: USER_ID_INVALID")
        if "sticker" not in files:
            raise ApiError(400, "Bad Request: there is no sticker file in the request")
        fmt = str(params.get("sticker_format") or "")
        self._check_sticker_file(files["sticker"], fmt)
        file_id = self._store(files["sticker"], "sticker")
        self.sticker_uploads[file_id] = fmt
        return {"file_id": file_id, "file_unique_id": file_id[-12:], "file_size": len(files["sticker"])}

    def _input_sticker(self, sticker: Any, set_name: str) -> dict[str, Any]:
        if not isinstance(sticker, dict) or not sticker.get("emoji_list"):
            raise ApiError(400, "Bad Request: STICKER_EMOJI_INVALID")
        file_id, fmt = sticker.get("sticker"), sticker.get("format")
        if file_id not in self.sticker_uploads:
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        if fmt != self.sticker_uploads[file_id]:
            raise ApiError(400, "Bad Request: STICKER_FILE_INVALID")
        return self._sticker(file_id, fmt, set_name, sticker["emoji_list"][0])

    def m_createNewStickerSet(self, params, files):
        name, title = str(params.get("name") or ""), str(params.get("title") or "")
        suffix = f"_by_{self.username}"
        if (not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name) or "__" in name
                or not name.lower().endswith(suffix.lower()) or len(name) == len(suffix)):  # fmt: skip
            raise ApiError(400, "Bad Request: invalid sticker set name is specified")
        if not 1 <= len(title) <= 64:
            raise ApiError(400, "Bad Request: invalid sticker set title is specified")
        if not str(params.get("user_id") or "").isdigit():
            raise ApiError(400, "Bad Request: USER_ID_INVALID")
        if name in self.sticker_sets:
            raise ApiError(400, "Bad Request: sticker set name is already occupied")
        stickers = params.get("stickers")
        if not isinstance(stickers, list) or not 1 <= len(stickers) <= 50:
            raise ApiError(400, "Bad Request: STICKERS_INVALID")
        items = [self._input_sticker(s, name) for s in stickers]
        self.sticker_sets[name] = {"name": name, "title": title, "sticker_type": "regular", "stickers": items,
                                   "owner": int(params["user_id"])}  # fmt: skip
        return True

    def m_addStickerToSet(self, params, files):
        found = self.sticker_sets.get(str(params.get("name") or ""))
        if found is None or found.get("owner") != int(str(params.get("user_id") or "0")):
            raise ApiError(400, "Bad Request: STICKERSET_INVALID")
        if len(found["stickers"]) >= 120:
            raise ApiError(400, "Bad Request: STICKERS_TOO_MUCH")
        found["stickers"].append(self._input_sticker(params.get("sticker"), found["name"]))
        return True


class ApiError(Exception):
    def __init__(self, code: int, description: str):
        super().__init__(description)
        self.code, self.description = code, description
