"""The channel layer's shared parts: the registry (a missing built-in channel is an error, never
skipped; error codes declared by the packages reach the web layer) and the platform module (the
failure mapping, the one multipart encoder)."""

from __future__ import annotations

import email.parser
import email.policy
import types

import pytest

from mewdex import hooks
from mewdex.channels import platform, registry
from mewdex.channels.registry import Channel, ChannelMissing
from mewdex.egress import EgressError


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as if nothing were loaded yet (restored afterwards)."""
    monkeypatch.setattr(registry, "_loaded", {})
    return registry


def test_every_built_in_channel_loads_with_its_adapter_and_error_codes():
    loaded = registry.load()
    assert list(loaded) == [p.rsplit(".", 1)[-1] for p in registry.packages()]
    assert list(loaded) == list(hooks.declared("channel_adapters"))  # one plugin line per channel
    assert all(name in registry.ADAPTERS for name in loaded)
    from mewdex.web.errors import http_status

    assert http_status("wecom_ip_not_trusted") == 502 and http_status("onebot_not_connected") == 503
    assert http_status("channel_not_bound") == 404 and http_status("no_such_code") == 422


def test_a_missing_built_in_channel_stops_the_start_up(fresh_registry, monkeypatch):
    built_in = registry.packages()
    monkeypatch.setattr(registry, "packages", lambda: (*built_in, "mewdex.channels.nosuch"))
    with pytest.raises(ChannelMissing, match="mewdex.channels.nosuch is missing"):
        registry.load()


def test_a_package_without_its_declaration_or_adapter_is_refused(fresh_registry, monkeypatch):
    bare = types.ModuleType("mewdex.channels.bare")
    monkeypatch.setitem(__import__("sys").modules, "mewdex.channels.bare", bare)
    monkeypatch.setattr(registry, "packages", lambda: ("mewdex.channels.bare",))
    with pytest.raises(ChannelMissing, match="does not declare CHANNEL"):
        registry.load()
    bare.CHANNEL = Channel(name="bare", modules=())  # declared, but nothing registers its adapter
    with pytest.raises(ChannelMissing, match="registers the 'bare' adapter"):
        registry.load()


def test_failures_map_to_the_delivery_codes():
    unreachable = platform.failure(EgressError("egress_timeout", "no answer from api.example"))
    assert (unreachable.code, unreachable.platform_code, unreachable.retryable) == (
        "channel_unreachable",
        "egress_timeout",
        True,
    )
    refused = platform.failure(EgressError("egress_address_refused", "a private address"))
    assert refused.code == "channel_unreachable" and not refused.retryable
    own = platform.PlatformError("wecom_user_invalid", "not visible", 81013, "invalid user")
    blocked = platform.failure(own, {"wecom_user_invalid": "channel_blocked"})
    assert (blocked.code, blocked.platform_code, blocked.platform_error) == ("channel_blocked", "81013", "invalid user")
    window = platform.failure(platform.PlatformError("channel_window_closed", "write first", -2))
    assert window.code == "channel_window_closed" and window.platform_code == "-2"
    busy = platform.failure(platform.PlatformError("x_api_error", "slow down", 45009, retry_after=60))
    assert (busy.code, busy.retry_after, busy.retryable) == ("channel_platform_error", 60, True)


def test_one_multipart_encoder_for_fields_and_files():
    body, content_type = platform.multipart(
        {"chat_id": "42", "reply_markup": {"a": 1}},
        {"photo": ('me"me\r\n.png', b"\x89PNG\r\n\x00data", "image/png")},
        file_length=True,
    )
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
    assert parts["chat_id"].get_content() == "42" and parts["reply_markup"].get_content() == '{"a": 1}'
    photo = parts["photo"]
    assert photo.get_filename() == "meme.png" and photo.get_content_type() == "image/png"
    assert photo.get_payload(decode=True) == b"\x89PNG\r\n\x00data"
    assert photo.get_param("filelength", header="content-disposition") == str(len(b"\x89PNG\r\n\x00data"))


@pytest.fixture
def platform_server(monkeypatch):
    """A local platform answering ``(status, body, headers)`` by the request's last path segment,
    allow-listed for egress."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mewdex.config import get_settings

    answers = {
        "bad-gateway": (502, b"<html>502 Bad Gateway</html>", {"content-type": "text/html"}),
        "text": (200, b"hello", {"content-type": "text/plain"}),
        "deep": (200, b"[" * 100_000, {"content-type": "application/json"}),
        "slow-down": (429, b"too many", {"retry-after": "120"}),
        "slow-down-json": (429, b"<html>429</html>", {"retry-after": "90", "content-type": "text/html"}),
        "ok": (200, b'{"ok": true}', {"content-type": "application/json"}),
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body, headers = answers[self.path.rsplit("/", 1)[-1]]
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("MEWDEX_EGRESS_ALLOW_HOSTS", json.dumps([f"127.0.0.1:{httpd.server_address[1]}"]))
    get_settings.cache_clear()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    get_settings.cache_clear()


def _call(url: str, *, errors_in_body: bool = False) -> platform.PlatformError:
    with pytest.raises(platform.PlatformError) as err:
        platform.call_json("POST", url, platform="P", what="send", error_code="p_api_error", json={},
                           errors_in_body=errors_in_body)  # fmt: skip
    return err.value


def test_call_json_on_answers_that_are_not_what_was_asked(platform_server):
    assert platform.call_json("POST", platform_server + "/ok", platform="P", what="send", error_code="x").data == {
        "ok": True
    }
    gateway = _call(platform_server + "/bad-gateway")
    assert (gateway.code, gateway.platform_code, gateway.retryable) == ("p_api_error", 502, True)
    assert platform.failure(gateway).retryable
    text = _call(platform_server + "/text")
    assert (text.code, text.retryable) == (platform.NOT_JSON, False)
    # JSON nested deeper than the parser goes is an answer that is not JSON, not a crash
    assert _call(platform_server + "/deep").code == platform.NOT_JSON
    # a 429 egress did not wait out (its Retry-After is too long) is tried again after it, as a rate limit
    limited = platform.failure(_call(platform_server + "/slow-down"))
    assert (limited.code, limited.retryable, limited.retry_after) == ("channel_rate_limited", True, 120)
    odd = _call(platform_server + "/slow-down-json", errors_in_body=True)  # the body was to explain it
    assert (odd.code, odd.retryable, odd.retry_after) == (platform.NOT_JSON, True, 90)


def test_a_channel_declares_its_own_settings_validated_as_the_core_ones(monkeypatch):
    """``MEWDEX_TELEGRAM_*`` is declared in the Telegram package (not ``config.Settings``), read from the
    same environment and refused with the same message, at first use and when a server starts."""
    from mewdex.channels.telegram.settings import TelegramSettings, settings
    from mewdex.config import ConfigError, Settings, get_settings
    from mewdex.runtime import load_plugins

    assert "telegram_api_url" not in Settings.model_fields and "telegram_api_url" in TelegramSettings.model_fields
    try:
        monkeypatch.setenv("MEWDEX_TELEGRAM_API_URL", "http://127.0.0.1:9/bot-api")
        get_settings.cache_clear()
        assert settings().telegram_api_url == "http://127.0.0.1:9/bot-api"
        monkeypatch.setenv("MEWDEX_TELEGRAM_POLL_SECONDS", "1")
        get_settings.cache_clear()
        with pytest.raises(
            ConfigError, match=r"MEWDEX_TELEGRAM_POLL_SECONDS='1' is not valid .*MEWDEX_TELEGRAM_POLL_SECONDS=25"
        ):
            settings()
        with pytest.raises(ConfigError, match="MEWDEX_TELEGRAM_POLL_SECONDS"):
            load_plugins()
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
