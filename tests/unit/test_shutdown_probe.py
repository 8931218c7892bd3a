"""``/readyz`` turns 503 from the first SIGTERM on: the handler ``web.metrics.watch_shutdown`` chains
in front of the server's own marks the app, then hands the signal on."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

from conftest import wait_until
from mewdex.web import metrics


def test_sigterm_marks_the_app_and_reaches_the_servers_handler():
    received: list[int] = []
    saved = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    saved_int = signal.getsignal(signal.SIGINT)
    app = SimpleNamespace(state=SimpleNamespace(shutting_down=False))
    try:
        metrics.watch_shutdown(app)
        os.kill(os.getpid(), signal.SIGTERM)
        wait_until(lambda: received, 5, 0.01, "the SIGTERM handler")
        assert received == [signal.SIGTERM]  # the server's handler still ran
        assert app.state.shutting_down is True
        assert metrics.readiness(app) == [{"code": "shutting_down", "message": "the server is shutting down"}]
    finally:
        signal.signal(signal.SIGTERM, saved)
        signal.signal(signal.SIGINT, saved_int)
