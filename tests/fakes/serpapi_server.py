"""A fake SerpApi (Google Lens engine) for tests: a real HTTP server in the test process that speaks
SerpApi's response shapes (serpapi.com/google-lens-api):

* ``GET /search.json?engine=google_lens&url=<image URL>&api_key=<key>`` → 200 with
  ``search_metadata`` (``status: "Success"``), ``search_parameters`` (never the key),
  ``visual_matches[]`` (``position``, ``title``, ``link``, ``source``, ``thumbnail``, ``image``…)
  and ``related_content``;
* no ``api_key`` or a wrong one → 401 ``{"error": "Invalid API key. …"}``;
* another engine or no ``url`` → 400 ``{"error": "…"}``.

Script the next answers with ``fake.script(answer, …)`` (FIFO); answers: :meth:`FakeSerpApi.matches`
(the default, from ``fake.titles``), :meth:`FakeSerpApi.no_results` (200 with ``error`` "Google Lens
hasn't returned any results for this query." — SerpApi's empty answer), :meth:`FakeSerpApi.out_of_searches`
(429), :meth:`FakeSerpApi.server_error` (500), :meth:`FakeSerpApi.slow` (answers after a delay).
Requests are in ``fake.requests`` (``{"path", "params"}``, newest last).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Answer:
    status: int = 200
    body: dict[str, Any] | None = None  # None: the default visual matches
    delay_seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class FakeSerpApi:
    """The server (module doc); ``base_url`` is what a ``serpapi_google_lens`` definition's config takes."""

    def __init__(self, api_key: str = "serpapi-test-key-5566"):
        self.api_key = api_key
        self.titles = [
            ("Admiral Ackbar It's a trap meme", "https://knowyourmeme.example/memes/its-a-trap"),
            ("It's a Trap! | Know Your Meme", "https://knowyourmeme.example/its-a-trap"),
            ("Star Wars Return of the Jedi Ackbar", "https://starwars.example/ackbar"),
        ]
        self.requests: list[dict[str, Any]] = []
        self._queue: deque[Answer] = deque()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host_port}"

    def script(self, *answers: Answer) -> None:
        self._queue.extend(answers)

    # -------------------------------------------------------------- answers

    @staticmethod
    def matches() -> Answer:
        return Answer()

    @staticmethod
    def no_results() -> Answer:
        return Answer(200, {"error": "Google Lens hasn't returned any results for this query."})

    @staticmethod
    def out_of_searches() -> Answer:
        return Answer(429, {"error": "Your account has run out of searches."})

    @staticmethod
    def server_error() -> Answer:
        return Answer(500, {"error": "Internal server error."})

    @staticmethod
    def slow(seconds: float) -> Answer:
        return Answer(delay_seconds=seconds)

    # -------------------------------------------------------------- server

    def _metadata(self, params: dict[str, str]) -> dict[str, Any]:
        search_id = uuid.uuid4().hex[:24]
        now = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        return {
            "search_metadata": {
                "id": search_id,
                "status": "Success",
                "json_endpoint": f"https://serpapi.com/searches/{search_id}.json",
                "created_at": now,
                "processed_at": now,
                "google_lens_url": "https://lens.google.com/uploadbyurl?url=…",
                "raw_html_file": f"https://serpapi.com/searches/{search_id}.html",
                "total_time_taken": 1.83,
            },
            "search_parameters": {k: v for k, v in params.items() if k != "api_key"},
        }

    def _visual_matches(self) -> list[dict[str, Any]]:
        return [
            {
                "position": n,
                "title": title,
                "link": link,
                "source": urlsplit(link).hostname,
                "source_icon": "https://encrypted-tbn0.gstatic.example/favicon.png",
                "thumbnail": f"https://encrypted-tbn1.gstatic.example/images?q=tbn:{n}",
                "thumbnail_width": 225,
                "thumbnail_height": 225,
                "image": f"https://images.example/{n}.jpg",
                "image_width": 640,
                "image_height": 480,
            }
            for n, (title, link) in enumerate(self.titles, 1)
        ]

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json; charset=utf-8")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            pass

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.requests.append({"path": parts.path, "params": params})
        if parts.path != "/search.json":
            return self._send(h, 404, {"error": "Not found."})
        if params.get("api_key") != self.api_key:
            return self._send(
                h, 401, {"error": "Invalid API key. Your API key should be here: https://serpapi.com/manage-api-key"}
            )
        if params.get("engine") != "google_lens":
            return self._send(h, 400, {"error": "Unsupported `engine` parameter."})
        if not params.get("url"):
            return self._send(h, 400, {"error": "Missing query `url` parameter."})
        answer = self._queue.popleft() if self._queue else Answer()
        if answer.delay_seconds:
            time.sleep(answer.delay_seconds)
        if answer.status != 200:
            return self._send(h, answer.status, answer.body or {"error": "error"})
        body = self._metadata(params)
        if answer.body is None:
            body["visual_matches"] = self._visual_matches()
            body["related_content"] = [{"query": "it's a trap", "link": "https://www.google.example/search?q=trap"}]
        else:
            body.update(answer.body)
        return self._send(h, 200, body)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeSerpApi:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
