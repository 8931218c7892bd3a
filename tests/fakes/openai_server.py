"""A fake OpenAI-compatible server for tests: a real HTTP server in the test process, spoken to by
the official ``openai`` SDK (through :mod:`mewdex.egress`; tests allow its ``127.0.0.1:port`` with
``MEWDEX_EGRESS_ALLOW_HOSTS``).

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions`` (text and ``image_url`` parts,
``response_format`` ``json_schema``/``json_object``, ``tools``, ``stream`` with
``stream_options.include_usage``), ``POST /v1/embeddings``. Requests without
``Authorization: Bearer <api_key>`` get 401.

Scripting chat replies — two ways, used in this order:

1. ``fake.script(reply, reply, ...)``: a FIFO queue; each chat request takes the next one.
2. ``fake.handler = fn``: ``fn(request: dict) -> Reply | None`` for chat requests when the queue is
   empty (``request``: the JSON body; ``fake.images(request)`` gives the image bytes it carries).
   ``None`` or no handler: a plain ``Reply.text("ok")``.

Replies (:class:`Reply`): ``Reply.text(content)``, ``Reply.json(obj)`` (content = the JSON),
``Reply.tool_call(name, arguments, call_id=None)`` (several: ``Reply.calls([(name, args), …])``;
``content=`` adds text before the calls, as models do),
``Reply.refusal(text)``, ``Reply.error(status, message, headers={"Retry-After": "0"})`` (e.g. 429 or
500), ``Reply.invalid_json()`` (a 200 whose body is not JSON), ``Reply.delay(seconds, then)``
(answers after ``seconds``: a read timeout when the client's is shorter); ``usage=`` overrides the
token counts (``{"prompt_tokens", "completion_tokens", "cached_tokens"}``). A streamed request
gets the same reply as SSE chunks (the content in pieces, tool-call deltas, then a usage chunk when
``include_usage``); ``chunk_delay=`` seconds between the chunks (a slow model, to stop mid-stream),
``chunk_chars=`` the content's piece size (default 8).

``fake.tool_results(request)`` gives the ``{tool_call_id: content}`` of the ``tool`` messages a
request carries (what the client's tools answered).

Embeddings: ``fake.embedding_dim`` (default 16) deterministic unit vectors from the SHA-256 of each
input, or ``fake.embed = fn(text) -> list[float]``; ``fake.embed_by_model = {model: fn}`` overrides
both for the requests naming that model.

Everything received is in ``fake.requests`` (``{"path", "headers", "body"}``, newest last).
Use as a context manager or call ``close()``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer to a chat completion request (see the module doc)."""

    content: str | None = None
    tool_calls: list[tuple[str, Any, str]] = field(default_factory=list)
    refusal_text: str | None = None
    status: int = 200
    error_message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    delay_seconds: float = 0.0
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    chunk_delay: float = 0.0
    chunk_chars: int = 8

    @classmethod
    def text(cls, content: str, **kw) -> Reply:
        return cls(content=content, **kw)

    @classmethod
    def json(cls, obj: Any, **kw) -> Reply:
        return cls(content=json.dumps(obj, ensure_ascii=False), **kw)

    @classmethod
    def tool_call(cls, name: str, arguments: Any, call_id: str | None = None, **kw) -> Reply:
        return cls.calls([(name, arguments, call_id)], **kw)

    @classmethod
    def calls(cls, calls: list[tuple], **kw) -> Reply:
        normal = [(c[0], c[1], (c[2] if len(c) > 2 and c[2] else f"call_{uuid.uuid4().hex[:12]}")) for c in calls]
        return cls(tool_calls=normal, finish_reason="tool_calls", **kw)

    @classmethod
    def refusal(cls, text: str = "I can't help with that.", **kw) -> Reply:
        return cls(refusal_text=text, **kw)

    @classmethod
    def error(cls, status: int, message: str = "error", headers: dict[str, str] | None = None) -> Reply:
        return cls(status=status, error_message=message, headers=headers or {})

    @classmethod
    def invalid_json(cls) -> Reply:
        return cls(raw_body=b"{this is not json")

    @classmethod
    def delay(cls, seconds: float, then: Reply | None = None) -> Reply:
        reply = then or cls.text("late")
        reply.delay_seconds = seconds
        return reply


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4)) if text else 0


class FakeOpenAI:
    """The server (module doc). ``base_url`` ends in ``/v1``; ``host_port`` is for the egress
    allow-list; ``api_key`` is what it accepts."""

    def __init__(
        self,
        api_key: str = "sk-fake-test-key-0001",
        models: tuple[str, ...] = ("fake-chat", "fake-vision", "fake-embed"),
    ):
        self.api_key = api_key
        self.models = models
        self.requests: list[dict[str, Any]] = []
        self._queue: deque[Reply] = deque()
        self.handler: Callable[[dict], Reply | None] | None = None
        self.embedding_dim = 16
        self.embed: Callable[[str], list[float]] | None = None
        self.embed_by_model: dict[str, Callable[[str], list[float]]] = {}
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that gave up (timeouts) is normal
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # -- public API
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def chat_requests(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    @staticmethod
    def images(request: dict) -> list[bytes]:
        """The decoded bytes of every ``data:`` image URL in a chat request's messages."""
        found = []
        for message in request.get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                for part in content:
                    if part.get("type") == "image_url":
                        url = part["image_url"]["url"]
                        if url.startswith("data:"):
                            found.append(base64.b64decode(url.split(",", 1)[1]))
        return found

    @staticmethod
    def tool_results(request: dict) -> dict[str, str]:
        """``{tool_call_id: content}`` of the request's ``tool`` messages."""
        return {
            m.get("tool_call_id", ""): m.get("content") or ""
            for m in request.get("messages", [])
            if m.get("role") == "tool"
        }

    @staticmethod
    def prompt_text(request: dict) -> str:
        """All text of a chat request's messages, joined by newlines."""
        texts = []
        for message in request.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(p.get("text", "") for p in content if p.get("type") == "text")
        return "\n".join(texts)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the server side
    def _send(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def _error(self, h, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        kind = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status, "server_error")
        self._send(h, status, json.dumps({"error": {"message": message, "type": kind, "code": kind}}).encode(), headers)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        path = h.path.split("?", 1)[0]
        self.requests.append({"path": path, "headers": {k.lower(): v for k, v in h.headers.items()}, "body": body})
        if h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, "Incorrect API key provided")
        if method == "GET" and path.endswith("/models"):
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
            return self._send(h, 200, json.dumps({"object": "list", "data": data}).encode())
        if method == "POST" and path.endswith("/embeddings"):
            return self._embeddings(h, body)
        if method == "POST" and path.endswith("/chat/completions"):
            return self._chat(h, body)
        return self._error(h, 404, f"no route {path}")

    def _vector(self, text: str) -> list[float]:
        if self.embed is not None:
            return list(self.embed(text))
        digest = hashlib.sha256(text.encode()).digest()
        while len(digest) < self.embedding_dim:
            digest += hashlib.sha256(digest).digest()
        values = [b - 127.5 for b in digest[: self.embedding_dim]]
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        return [v / norm for v in values]

    def _embeddings(self, h, body: dict) -> None:
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        by_model = self.embed_by_model.get(str(body.get("model")))
        data = [
            {"object": "embedding", "index": i, "embedding": list(by_model(t)) if by_model else self._vector(t)}
            for i, t in enumerate(inputs)
        ]
        tokens = sum(_tokens(t) for t in inputs)
        self._send(
            h,
            200,
            json.dumps(
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                }
            ).encode(),
        )

    def _next_reply(self, body: dict) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.handler is not None:
            reply = self.handler(body)
            if reply is not None:
                return reply
        return Reply.text("ok")

    def _usage(self, body: dict, reply: Reply, content: str) -> dict:
        prompt = _tokens(self.prompt_text(body)) + 85 * len(self.images(body))
        completion = _tokens(content) + sum(_tokens(json.dumps(c[1])) for c in reply.tool_calls)
        cached = 0
        if reply.usage:
            prompt = reply.usage.get("prompt_tokens", prompt)
            completion = reply.usage.get("completion_tokens", completion)
            cached = reply.usage.get("cached_tokens", 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }

    def _chat(self, h, body: dict) -> None:
        reply = self._next_reply(body)
        if reply.delay_seconds:
            time.sleep(reply.delay_seconds)
        if reply.status != 200:
            return self._error(h, reply.status, reply.error_message or "error", reply.headers)
        if reply.raw_body is not None:
            return self._send(h, 200, reply.raw_body, reply.headers)
        model = body.get("model", "fake-chat")
        content = reply.content or ""
        usage = self._usage(body, reply, content)
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        tool_calls = [
            {
                "id": cid,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                },
            }
            for name, args, cid in reply.tool_calls
        ]
        finish = reply.finish_reason or "stop"
        if body.get("stream"):
            return self._stream(h, body, reply, completion_id, model, content, tool_calls, finish, usage)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if reply.refusal_text or (tool_calls and not content) else content,
            "refusal": reply.refusal_text,
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        answer = {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        }
        self._send(h, 200, json.dumps(answer, ensure_ascii=False).encode(), reply.headers)

    def _stream(self, h, body, reply, completion_id, model, content, tool_calls, finish, usage) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict, finish_reason=None, with_usage=None, choices=True) -> None:
            if reply.chunk_delay and choices:
                time.sleep(reply.chunk_delay)
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}] if choices else [],
                "usage": with_usage,
            }
            h.wfile.write(b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n")
            h.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        if reply.refusal_text:
            chunk({"refusal": reply.refusal_text})
        step = max(1, reply.chunk_chars)
        for i in range(0, len(content), step):
            chunk({"content": content[i : i + step]})
        for index, call in enumerate(tool_calls):
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            arguments = call["function"]["arguments"]
            for i in range(0, len(arguments), 16):
                chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + 16]}}]})
        chunk({}, finish_reason=finish)
        if include_usage:
            chunk({}, with_usage=usage, choices=False)
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()
        h.close_connection = True
