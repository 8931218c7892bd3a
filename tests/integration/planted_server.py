"""A stand-in for whatever a planted ``serve.json`` points at (tests/integration/test_cli_credentials.py):
an HTTP server that answers like mewdex (a login that needs a password, a token, a search) and records
every request it receives (method, path, headers, body) as JSON lines in ``--records``.

    python planted_server.py serve --host H --port P --records FILE --ready FILE [--hold PATH]
        [--search-answer JSON]

Copied to a file named ``mewdex`` it has the command line of ``mewdex serve``; ``--hold PATH`` keeps a
file open as ``mewdex serve`` keeps its ``serve.json`` open. ``--ready`` is written once it listens.
"""

from __future__ import annotations

import argparse
import http.server
import json
import socketserver
from pathlib import Path

ANSWERS = {
    ("GET", "/api/v1/me"): (200, {"user": None, "auth": {"mode": "required"}}),
    ("POST", "/api/v1/auth/login"): (200, {"user": {}, "csrf_token": "planted-csrf"}),
    ("POST", "/api/v1/tokens"): (201, {"token": "mdx_planted_token", "id": "00000000-0000-4000-8000-000000000000"}),
    ("POST", "/api/v1/search"): (200, {"results": [], "took_ms": 1.0}),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--hold")
    parser.add_argument("--search-answer", help="JSON answered to POST /api/v1/search")
    args = parser.parse_args()
    answers = dict(ANSWERS)
    if args.search_answer:
        answers["POST", "/api/v1/search"] = (200, json.loads(args.search_answer))
    held = open(args.hold, "rb") if args.hold else None  # noqa: SIM115 - held while serving
    records = Path(args.records)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
            with records.open("a") as out:
                seen = {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                out.write(json.dumps(seen) + "\n")
            status, answer = answers.get((self.command, self.path.split("?")[0]), (200, {}))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.path == "/api/v1/auth/login":
                self.send_header("Set-Cookie", "mewdex_session=planted; Path=/")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _answer  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    with Server((args.host, args.port), Handler) as httpd:
        Path(args.ready).write_text("listening")
        try:
            httpd.serve_forever()
        finally:
            if held:
                held.close()


if __name__ == "__main__":
    main()
